"""Hooks built by name from a registry the program fills with a decorator (an mmengine-style runner, a trial):
``self.hooks = [HOOKS[n]() for n in names]`` and ``for h in self.hooks: h.after_epoch(self)``. The migration did
not see which hooks run, so the checkpoint hook's ``runner.model.state_dict()`` kept the DDP wrapper's ``module.``
keys with nothing in the report; the original program could not resume from them."""

from __future__ import annotations

from pathlib import Path

import pytest

from launch import run_torchrun
from migrated import migrate_script

PROGRAM = """
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

HOOKS = {}


def register(cls):
    HOOKS[cls.__name__] = cls
    return cls


@register
class LoggerHook:
    def after_epoch(self, runner):
        print("epoch", runner.epoch)


@register
class CheckpointHook:
    def after_epoch(self, runner):
        torch.save(runner.model.state_dict(), f"ckpt_{runner.epoch}.pt")


class Runner:
    def __init__(self, hook_names):
        self.model = nn.Linear(4, 2)
        self.opt = torch.optim.SGD(self.model.parameters(), lr=0.1)
        ds = TensorDataset(torch.randn(64, 4), torch.randint(0, 2, (64,)))
        self.loader = DataLoader(ds, batch_size=16, shuffle=True)
        self.hooks = [HOOKS[n]() for n in hook_names]

    def train(self, epochs):
        for self.epoch in range(epochs):
            for x, y in self.loader:
                loss = nn.functional.cross_entropy(self.model(x), y)
                self.opt.zero_grad()
                loss.backward()
                self.opt.step()
            for h in self.hooks:
                h.after_epoch(self)


if __name__ == "__main__":
    Runner(["LoggerHook", "CheckpointHook"]).train(2)
    print("keys", sorted(torch.load("ckpt_1.pt")))
"""


def test_a_hook_built_from_a_registry_saves_the_models_own_keys(tmp_path: Path) -> None:
    text, report, code = migrate_script(tmp_path, PROGRAM)
    assert "runtime.unwrap(runner.model).state_dict()" in text, report + text


@pytest.mark.distributed
def test_the_migrated_runner_saves_keys_the_original_loads(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    migrate_script(tmp_path, PROGRAM)
    launch = run_torchrun(tmp_path / "train.py", nproc_per_node=2, cwd=tmp_path, timeout=120)
    assert launch.returncode == 0 and "keys ['bias', 'weight']" in launch.stdout, launch.stdout + launch.stderr
