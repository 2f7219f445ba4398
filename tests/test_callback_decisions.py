"""An early stop decided in a callback on a metric of this rank's shard (a trial of multi-file repositories).

``EarlyStopping.__call__(self, trainer)`` reads ``trainer.metrics[self.key]`` and sets ``trainer.stop_training``;
the base Trainer's ``fit`` leaves its epoch loop on ``if self.stop_training: break``. The metric was keyed by
the subclass the callback's ``trainer`` holds, while ``fit`` stored it under the base class that defines it:
the flag was not seen to be per-rank, DDP041 said nothing, and under torchrun one rank stopped while the other
went on into the next all-reduce (gloo: "Connection closed by peer").
"""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from ddp_migrate.cli import cli
from migrated import lint_findings

BASE = '''class BaseTrainer:
    def __init__(self, model, optimizer, loader, callbacks=()):
        self.model = model
        self.optimizer = optimizer
        self.loader = loader
        self.callbacks = list(callbacks)
        self.metrics = {}
        self.stop_training = False

    def train_step(self, batch):
        raise NotImplementedError

    def fit(self, epochs):
        for epoch in range(epochs):
            losses = []
            for batch in self.loader:
                losses.append(self.train_step(batch))
            self.metrics["train_loss"] = sum(losses) / len(losses)
            for callback in self.callbacks:
                callback(self)
            if self.stop_training:
                break
'''

TRAINER = '''import torch.nn.functional as F

from base import BaseTrainer


class Trainer(BaseTrainer):
    def train_step(self, batch):
        x, y = batch
        loss = F.mse_loss(self.model(x), y)
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        return loss.item()
'''

CALLBACKS = '''class EarlyStopping:
    def __init__(self, key, patience=1):
        self.key = key
        self.patience = patience
        self.best = float("inf")
        self.bad = 0

    def __call__(self, trainer):
        current = trainer.metrics[self.key]
        if current < self.best:
            self.best, self.bad = current, 0
        else:
            self.bad += 1
            if self.bad >= self.patience:
                trainer.stop_training = True
'''

RUN = '''import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

from callbacks import EarlyStopping
from trainer import Trainer


def main():
    model = nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(TensorDataset(torch.randn(64, 4), torch.randn(64, 1)), batch_size=8, shuffle=True)
    Trainer(model, optimizer, loader, callbacks=[EarlyStopping("train_loss")]).fit(5)


if __name__ == "__main__":
    main()
'''


def test_an_early_stop_a_callback_decides_on_this_ranks_metric_is_reviewed(tmp_path: Path) -> None:
    for name, text in (("base.py", BASE), ("trainer.py", TRAINER), ("callbacks.py", CALLBACKS), ("run.py", RUN)):
        (tmp_path / name).write_text(text)
    result = CliRunner().invoke(cli, ["--diff", str(tmp_path / "run.py")])
    reviews = [line for line in result.output.splitlines() if line.strip().startswith("review") and "DDP041" in line]
    assert any("base.py" in line and "`self.stop_training` decides on self.stop_training" in line for line in reviews), result.output


def test_an_early_stop_on_losses_a_base_class_collects_in_a_comprehension_is_reviewed(tmp_path: Path) -> None:
    """``losses = [self.train_step(batch) for batch in self.loader]`` in the base class: the call runs the subclass's
    override, whose returned loss is this rank's; the mean of the list was not seen to be per-rank."""
    base = BASE.replace(
        "            losses = []\n            for batch in self.loader:\n                losses.append(self.train_step(batch))\n",
        "            losses = [self.train_step(batch) for batch in self.loader]\n",
    )
    assert base != BASE
    for name, text in (("base.py", base), ("trainer.py", TRAINER), ("callbacks.py", CALLBACKS), ("run.py", RUN)):
        (tmp_path / name).write_text(text)
    result = CliRunner().invoke(cli, ["--diff", str(tmp_path / "run.py")])
    reviews = [line for line in result.output.splitlines() if line.strip().startswith("review") and "DDP041" in line]
    assert any("`self.stop_training` decides on self.stop_training" in line for line in reviews), result.output


DISPATCHED = '''import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


class Callback:
    def on_epoch_end(self, trainer, epoch, logs):
        pass


class Printer(Callback):
    def on_epoch_end(self, trainer, epoch, logs):
        print(epoch)


class EarlyStopping(Callback):
    def __init__(self, patience=2):
        self.best, self.wait, self.patience = float("inf"), 0, patience

    def on_epoch_end(self, trainer, epoch, logs):
        current = logs["loss"]
        if current < self.best:
            self.best, self.wait = current, 0
        else:
            self.wait += 1
            if self.wait >= self.patience:
                trainer.stop_training = True


class Plateau(Callback):
    def __init__(self, scheduler):
        self.scheduler = scheduler

    def on_epoch_end(self, trainer, epoch, logs):
        self.scheduler.step(logs["loss"])


class Trainer:
    def __init__(self, model, optimizer, callbacks):
        self.model, self.optimizer, self.callbacks = model, optimizer, callbacks
        self.stop_training = False

    def fit(self, loader, epochs):
        for epoch in range(epochs):
            loader.sampler.set_epoch(epoch)
            total = 0.0
            for x, y in loader:
                loss = F.mse_loss(self.model(x), y)
                self.optimizer.zero_grad()
                loss.backward()
                self.optimizer.step()
                total += loss.item()
            logs = {"loss": total / len(loader)}
            for cb in self.callbacks:
                cb.on_epoch_end(self, epoch, logs)
            if self.stop_training:
                break


def main():
    dist.init_process_group("gloo")
    data = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
    loader = DataLoader(data, batch_size=8, sampler=DistributedSampler(data))
    model = DistributedDataParallel(torch.nn.Linear(4, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer)
    Trainer(model, optimizer, [Printer(), EarlyStopping(), Plateau(scheduler)]).fit(loader, 10)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
'''


def test_decisions_of_callbacks_called_on_a_list_of_several_classes_are_reviewed(tmp_path: Path) -> None:
    # A trial: ``for cb in self.callbacks: cb.on_epoch_end(self, epoch, logs)`` handed the shard's loss to the first
    # class's method only; the early stop (a hang) and the plateau scheduler (learning rates apart) said nothing.
    findings = lint_findings(tmp_path, DISPATCHED, "DDP041")
    assert any("`self.stop_training` decides on self.stop_training" in line for line in findings), findings
    assert any("self.scheduler.step() steps on logs" in line for line in findings), findings


GETATTR_DISPATCH = '''import argparse

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


class Runner:
    def __init__(self, model, optimizer):
        self.model = model
        self.optimizer = optimizer

    def fit_batch(self, batch):
        x, y = batch
        loss = F.mse_loss(self.model(x), y)
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        return loss.item()

    def show(self, value):
        if dist.get_rank() == 0:
            print(f"mean loss over all ranks: {value:.4f}")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--action", default="fit_batch")
    args = parser.parse_args()
    dist.init_process_group("gloo")
    model = DDP(nn.Linear(4, 1))
    runner = Runner(model, torch.optim.SGD(model.parameters(), lr=0.1))
    dataset = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
    loader = DataLoader(dataset, batch_size=8, sampler=DistributedSampler(dataset))
    for epoch in range(2):
        total = torch.zeros(())
        for batch in loader:
            total += getattr(runner, args.action)(batch)
        dist.all_reduce(total)
        runner.show(total.item() / len(loader) / dist.get_world_size())
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
'''


def test_a_method_chosen_by_name_at_run_time_hands_the_batch_to_no_other_method(tmp_path: Path) -> None:
    # A review: ``getattr(runner, args.action)(batch)`` may run any method of the class; handing the batch to every
    # one of them made ``show(value)`` print a shard's value, though it is given the all-reduced mean.
    assert lint_findings(tmp_path, GETATTR_DISPATCH, "DDP038") == []
