"""Trainers that call their callbacks from a list (``for cb in self.callbacks: cb.on_epoch_end(self)``): the
analysis follows the list's elements to each callback's method and the trainer handed to it, so a callback
that saves ``trainer.model.state_dict()`` saves the model's own keys, and one that stops training on
``trainer.train_loss`` (this rank's shard only, after the migration) is a review item at the decision.
Both went wrong silently in a trial of the tool: keys with ``module.``, and ranks leaving the epoch loop
apart (a crash under gloo, a hang under NCCL).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from ddp_migrate.cli import cli
from launch import run_torchrun

CALLBACKS = '''
import os

import torch


class Callback:
    def on_epoch_end(self, trainer):
        pass


class SaveLast(Callback):
    def __init__(self, folder):
        self.folder = folder

    def on_epoch_end(self, trainer):
        os.makedirs(self.folder, exist_ok=True)
        torch.save(trainer.model.state_dict(), os.path.join(self.folder, "last.pt"))


class StopAtLoss(Callback):
    def __init__(self, target):
        self.target = target

    def on_epoch_end(self, trainer):
        if trainer.train_loss < self.target:
            trainer.should_stop = True
'''

ENGINE = '''
import torch.nn.functional as F


class Trainer:
    def __init__(self, model, optimizer, loader, callbacks=()):
        self.model, self.optimizer, self.loader = model, optimizer, loader
        self.callbacks = list(callbacks)
        self.should_stop = False

    def fit(self, epochs):
        for epoch in range(epochs):
            total = 0.0
            for x, y in self.loader:
                loss = F.cross_entropy(self.model(x), y)
                self.optimizer.zero_grad()
                loss.backward()
                self.optimizer.step()
                total += loss.item()
            self.train_loss = total / len(self.loader)
            for callback in self.callbacks:
                callback.on_epoch_end(self)
            if self.should_stop:
                break
'''

ENTRY = '''
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from callbacks import SaveLast, StopAtLoss
from engine import Trainer


def main():
    torch.manual_seed(0)
    x = torch.randn(64, 4)
    loader = DataLoader(TensorDataset(x, (x[:, 0] > 0).long()), batch_size=16)
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    Trainer(model, optimizer, loader, callbacks=[SaveLast("out"), StopAtLoss(0.0)]).fit(2)


if __name__ == "__main__":
    main()
'''


def _program(folder: Path) -> None:
    for name, text in (("callbacks.py", CALLBACKS), ("engine.py", ENGINE), ("train.py", ENTRY)):
        (folder / name).write_text(text)


def test_callbacks_called_from_a_list_see_the_trainer_and_its_model(tmp_path: Path) -> None:
    _program(tmp_path)
    result = CliRunner().invoke(cli, [str(tmp_path / "train.py")], catch_exceptions=False)
    assert result.exit_code == 1, result.output
    callbacks = (tmp_path / "callbacks.py").read_text()
    assert "runtime.unwrap(trainer.model).state_dict()" in callbacks or "trainer.model.module.state_dict()" in callbacks, callbacks
    reviews = [line for line in result.output.splitlines() if line.lstrip().startswith("review")]
    assert len(reviews) == 1 and "engine.py" in reviews[0] and "DDP041" in reviews[0], result.output
    assert "self.should_stop" in reviews[0]


@pytest.mark.distributed
def test_the_callback_checkpoint_loads_into_the_plain_model(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    _program(tmp_path)
    CliRunner().invoke(cli, [str(tmp_path / "train.py")], catch_exceptions=False)
    run_torchrun(tmp_path / "train.py", nproc_per_node=2, cwd=tmp_path, timeout=120)
    saved = torch.load(tmp_path / "out" / "last.pt", weights_only=True)
    plain = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
    plain.load_state_dict(saved, strict=True)


SAVE_BEST = '''
import torch


class SaveBest:
    def __init__(self):
        self.best = float("inf")

    def on_epoch_end(self, trainer):
        if trainer.score < self.best:
            self.best = trainer.score
            torch.save(trainer.model.state_dict(), "best.pt")
'''

SAVE_BEST_ENTRY = '''
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from callbacks import SaveBest


class Trainer:
    def __init__(self, model, loader, callbacks):
        self.model, self.loader, self.callbacks = model, loader, callbacks
        self.optimizer = torch.optim.SGD(model.parameters(), lr=0.1)

    def fit(self, epochs):
        for epoch in range(epochs):
            for x, y in self.loader:
                loss = nn.functional.mse_loss(self.model(x), y)
                self.optimizer.zero_grad()
                loss.backward()
                self.optimizer.step()
            self.score = 1.0 / (epoch + 1)
            for callback in self.callbacks:
                callback.on_epoch_end(self)


if __name__ == "__main__":
    model = nn.Linear(4, 1)
    loader = DataLoader(TensorDataset(torch.randn(32, 4), torch.randn(32, 1)), batch_size=8)
    Trainer(model, loader, [SaveBest()]).fit(2)
    model.load_state_dict(torch.load("best.pt"))
'''


def test_a_conditional_save_in_a_callback_waits_for_rank_0_before_another_module_loads(tmp_path: Path) -> None:
    """Rank 0 saves ``best.pt`` in the callback; every rank loads it in the entry after training: without a
    barrier after the condition, rank 1 read a stale or half-written file (a trial saw both)."""
    (tmp_path / "callbacks.py").write_text(SAVE_BEST)
    (tmp_path / "train.py").write_text(SAVE_BEST_ENTRY)
    result = CliRunner().invoke(cli, [str(tmp_path / "train.py")], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    callbacks = (tmp_path / "callbacks.py").read_text()
    guard = callbacks.index("if runtime.is_main_process():")
    assert callbacks.index("runtime.barrier()") > guard, callbacks
    assert "every rank waits after the condition" in result.output


HOOKED_RUNNER = '''
import torch
import torch.nn.functional as F


class CheckpointHook:
    def before_run(self, runner):
        runner.started = True

    def after_epoch(self, runner):
        torch.save(runner.model.state_dict(), f"epoch_{runner.epoch}.pth")


class Runner:
    def __init__(self, model, optimizer, hooks):
        self.model, self.optimizer, self.hooks, self.epoch = model, optimizer, hooks, 0

    def call_hook(self, name):
        CALL

    def run(self, loader, epochs):
        for epoch in range(epochs):
            self.epoch = epoch
            for x, y in loader:
                loss = F.mse_loss(self.model(x), y)
                self.optimizer.zero_grad()
                loss.backward()
                self.optimizer.step()
            self.call_hook("after_epoch")
'''

HOOKED_TRAIN = '''
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

from runner import CheckpointHook, Runner


def main():
    torch.manual_seed(0)
    x = torch.randn(32, 4)
    loader = DataLoader(TensorDataset(x, x.sum(1, keepdim=True)), batch_size=4)
    model = nn.Linear(4, 1)
    runner = Runner(model, torch.optim.SGD(model.parameters(), lr=0.1), [CheckpointHook()])
    runner.run(loader, 2)
    print("keys", sorted(torch.load("epoch_1.pth")), flush=True)


if __name__ == "__main__":
    main()
'''


@pytest.mark.parametrize(
    "call",
    ["for h in self.hooks:\n            getattr(h, name)(self)", "[getattr(h, name)(self) for h in self.hooks]", '[h.after_epoch(self) for h in self.hooks]'],
    ids=["getattr", "getattr-comprehension", "comprehension"],
)
def test_hooks_called_by_name_save_the_model_s_own_keys(tmp_path: Path, call: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """An mmcv-style runner calls its hooks by name (``getattr(h, name)(self)``) or in a comprehension: a
    trial's checkpoint hook then saved the wrapper's ``module.`` keys (a resume of an original checkpoint
    failed with missing keys, in plain python too), report silent."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "runner.py").write_text(HOOKED_RUNNER.replace("CALL", call))
    (tmp_path / "train.py").write_text(HOOKED_TRAIN)
    result = CliRunner().invoke(cli, ["train.py"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    saved = (tmp_path / "runner.py").read_text()
    assert "runtime.unwrap(runner.model).state_dict()" in saved or "runner.model.module.state_dict()" in saved, result.output


@pytest.mark.distributed
def test_a_hook_called_by_name_writes_plain_keys_under_torchrun(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("torch")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "runner.py").write_text(HOOKED_RUNNER.replace("CALL", "for h in self.hooks:\n            getattr(h, name)(self)"))
    (tmp_path / "train.py").write_text(HOOKED_TRAIN)
    assert CliRunner().invoke(cli, ["train.py"], catch_exceptions=False).exit_code == 0
    launch = run_torchrun(tmp_path / "train.py", nproc_per_node=2, cwd=tmp_path, timeout=120)
    assert "keys ['bias', 'weight']" in launch.output, launch.output
