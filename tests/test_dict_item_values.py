"""Values read out of a dict by a key known in advance are per-rank by that key's value, not by the whole dict.

A Keras-like trainer hands ``logs = {"loss": train_loss, "val_acc": val_acc}`` to its callbacks: the training
loss is this rank's shard's, the validation accuracy (an unsharded evaluation loader) the whole set's. Every
value read out of ``logs`` counted as per-rank, so a ``ModelCheckpoint(monitor="val_acc")`` drew a DDP041
review that was false, beside the true one of an ``EarlyStopping(monitor="loss")``.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from ddp_migrate.cli import cli

PROGRAM = """import math

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


class EarlyStopping:
    def __init__(self, monitor="val_loss", patience=2):
        self.monitor = monitor
        self.patience = patience
        self.best = math.inf
        self.wait = 0

    def on_epoch_end(self, trainer, logs):
        current = logs[self.monitor]
        if current < self.best:
            self.best = current
            self.wait = 0
        else:
            self.wait += 1
            if self.wait >= self.patience:
                trainer.stop_training = True


class Checkpoint:
    def __init__(self, path, monitor="val_acc"):
        self.path = path
        self.monitor = monitor
        self.best = -math.inf

    def on_epoch_end(self, trainer, logs):
        if logs[self.monitor] > self.best:
            self.best = logs[self.monitor]
            if dist.get_rank() == 0:
                torch.save(trainer.model.module.state_dict(), self.path)


class Trainer:
    def __init__(self, model, optimizer, callbacks):
        self.model = model
        self.optimizer = optimizer
        self.callbacks = callbacks
        self.stop_training = False

    def fit(self, train_loader, val_loader, epochs):
        for epoch in range(epochs):
            train_loader.sampler.set_epoch(epoch)
            train_loss = 0.0
            for x, y in train_loader:
                loss = nn.functional.cross_entropy(self.model(x), y)
                self.optimizer.zero_grad()
                loss.backward()
                self.optimizer.step()
                train_loss += loss.item()
            correct = 0
            with torch.no_grad():
                for x, y in val_loader:
                    correct += (self.model(x).argmax(1) == y).sum().item()
            val_acc = correct / len(val_loader.dataset)
            logs = {"loss": train_loss, "val_acc": val_acc}
            EXTRA
            for callback in self.callbacks:
                callback.on_epoch_end(self, logs)
            if self.stop_training:
                break


dist.init_process_group("gloo")
data = TensorDataset(torch.randn(64, 4), torch.randint(0, 2, (64,)))
train_loader = DataLoader(data, batch_size=8, sampler=DistributedSampler(data))
val_loader = DataLoader(data, batch_size=8)
model = DDP(nn.Linear(4, 2))
trainer = Trainer(model, torch.optim.SGD(model.parameters(), lr=0.1), [CALLBACKS])
trainer.fit(train_loader, val_loader, 10)
dist.destroy_process_group()
"""


def _decisions(tmp_path: Path, callbacks: str, extra: str = "pass") -> list[str]:
    script = tmp_path / "fit.py"
    script.write_text(PROGRAM.replace("CALLBACKS", callbacks).replace("EXTRA", extra))
    result = CliRunner().invoke(cli, ["lint", "-q", "--select", "DDP041", str(script)])
    assert result.exit_code in (0, 1), result.output
    return [line.split(" DDP041 ", 1)[1].split(" decides ")[0] for line in result.output.splitlines() if " DDP041 " in line]


def test_a_checkpoint_on_the_whole_sets_accuracy_is_no_decision_on_a_shard(tmp_path: Path) -> None:
    assert _decisions(tmp_path, 'Checkpoint("best.pt", monitor="val_acc")') == []


def test_the_default_key_of_a_callback_is_read_where_no_construction_passes_one(tmp_path: Path) -> None:
    assert _decisions(tmp_path, 'Checkpoint("best.pt")') == []


def test_an_early_stop_on_the_shards_loss_is_still_reported_beside_it(tmp_path: Path) -> None:
    found = _decisions(tmp_path, 'EarlyStopping(monitor="loss"), Checkpoint("best.pt", monitor="val_acc")')
    assert found == ["`self.stop_training`"]


def test_an_early_stop_on_the_whole_sets_accuracy_is_no_decision_on_a_shard(tmp_path: Path) -> None:
    assert _decisions(tmp_path, 'EarlyStopping(monitor="val_acc"), Checkpoint("best.pt")') == []


@pytest.mark.parametrize(
    "callbacks",
    [
        'Checkpoint("best.pt", monitor="loss")',
        'Checkpoint("best.pt", monitor="val_acc"), Checkpoint("last.pt", monitor="loss")',
        'Checkpoint("best.pt", monitor=MONITOR)',
    ],
    ids=["the-shards-loss", "one-of-the-objects-reads-the-loss", "a-key-not-known-in-advance"],
)
def test_a_checkpoint_that_may_read_the_shards_loss_is_reported(tmp_path: Path, callbacks: str) -> None:
    assert _decisions(tmp_path, callbacks) == ["`logs[self.monitor] > self.best`"]


def test_an_item_written_later_from_the_shard_makes_the_key_per_rank(tmp_path: Path) -> None:
    found = _decisions(tmp_path, 'Checkpoint("best.pt", monitor="val_acc")', 'logs["val_acc"] = train_loss')
    assert found == ["`logs[self.monitor] > self.best`"]


COUNTED = """import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

dist.init_process_group("gloo")
data = TensorDataset(torch.randn(64, 4), torch.randint(0, 2, (64,)))
loader = DataLoader(data, batch_size=8, sampler=DistributedSampler(data))
model = DDP(nn.Linear(4, 2))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
state = {"global_step": 0}
for epoch in range(3):
    loader.sampler.set_epoch(epoch)
    for x, y in loader:
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        state["global_step"] += 1
        state["last_loss"] = loss.item()
        if TEST:
            break
dist.destroy_process_group()
"""


@pytest.mark.parametrize(
    ("test", "reported"),
    [('state["global_step"] >= 12', False), ('state["last_loss"] < 0.1', True)],
    ids=["a-step-counter-beside-a-loss", "the-loss-itself"],
)
def test_an_item_written_from_the_shard_taints_its_own_key_only(tmp_path: Path, test: str, reported: bool) -> None:
    # A trial's Trainer kept its step counter in the dict that also held the last loss: three false DDP041 reviews.
    script = tmp_path / "fit.py"
    script.write_text(COUNTED.replace("TEST", test))
    result = CliRunner().invoke(cli, ["lint", "-q", "--select", "DDP041", str(script)])
    assert (" DDP041 " in result.output) is reported, result.output
