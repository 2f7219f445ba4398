"""An early stop decided in one of several callback classes (DDP041 over a list of mixed callbacks).

A trial's Trainer ran ``for cb in self.callbacks: cb.on_epoch_end(epoch, logs)`` over ``[EarlyStopping(),
LossLogger()]`` and left the epoch loop on ``any(cb.stop_training for cb in self.callbacks)``; EarlyStopping watched
the training loss, this rank's shard's. With one callback class the decision was reviewed; with two, ``cb`` held
objects of two classes and the attribute was read as no per-rank value: rank 1 stopped at epoch 1, rank 0 went
on, and the job died ("Connection closed by peer"), 0 items for a human.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from migrated import migrate_script

PROGRAM = """import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset


class Callback:
    stop_training = False

    def on_epoch_end(self, epoch, logs):
        pass


class EarlyStopping(Callback):
    def __init__(self, patience=1):
        self.patience, self.best, self.wait, self.stop_training = patience, float("inf"), 0, False

    def on_epoch_end(self, epoch, logs):
        if logs["MONITOR"] < self.best:
            self.best, self.wait = logs["MONITOR"], 0
        else:
            self.wait += 1
            self.stop_training = self.wait >= self.patience


class LossLogger(Callback):
    def on_epoch_end(self, epoch, logs):
        print(epoch, logs["train_loss"])


class Trainer:
    def __init__(self, model, opt, loader, callbacks):
        self.model, self.opt, self.loader, self.callbacks = model, opt, loader, callbacks

    def fit(self, epochs):
        for epoch in range(epochs):
            total = 0.0
            for x, y in self.loader:
                self.opt.zero_grad()
                loss = F.cross_entropy(self.model(x), y)
                loss.backward()
                self.opt.step()
                total += loss.item()
            logs = {"train_loss": total / len(self.loader), "epochs": epoch + 1}
            for cb in self.callbacks:
                cb.on_epoch_end(epoch, logs)
            if any(cb.stop_training for cb in self.callbacks):
                break


def main():
    data = TensorDataset(torch.randn(64, 4), torch.randint(0, 2, (64,)))
    model = nn.Linear(4, 2)
    trainer = Trainer(model, torch.optim.SGD(model.parameters(), lr=0.1), DataLoader(data, batch_size=8, shuffle=True), CALLBACKS)
    trainer.fit(5)


if __name__ == "__main__":
    main()
"""


@pytest.mark.parametrize("callbacks", ["[EarlyStopping(), LossLogger()]", "[LossLogger(), EarlyStopping()]", "[EarlyStopping()]"])
def test_an_early_stop_on_the_shards_loss_is_reviewed_whatever_else_the_list_holds(tmp_path: Path, callbacks: str) -> None:
    _, report, code = migrate_script(tmp_path, PROGRAM.replace("CALLBACKS", callbacks).replace("MONITOR", "train_loss"))
    assert code == 1, report
    assert "DDP041 `any(cb.stop_training for cb in self.callbacks)` decides on cb.stop_training" in report, report


def test_an_early_stop_on_a_value_every_rank_counts_alike_is_no_decision_on_the_shard(tmp_path: Path) -> None:
    _, report, _ = migrate_script(tmp_path, PROGRAM.replace("CALLBACKS", "[EarlyStopping(), LossLogger()]").replace("MONITOR", "epochs"))
    assert "DDP041" not in report, report
