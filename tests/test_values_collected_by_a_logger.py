"""A metric collected by a logger object and read back from the dict it hands out (DDP041).

A trial's Lightning-like loop logged ``logger.log("train_loss", loss)`` (``self.logged.setdefault(name,
[]).append(value.item())``), read ``metrics = logger.pop()`` (a dict of means) and kept the best checkpoint on
``metrics["train_loss"] < best``. The list filled inside the dict was not followed: no review, and the save's
barrier sat in a branch each rank decided on its own shard's loss, which hung after epoch 2.
"""

from __future__ import annotations

from pathlib import Path

from migrated import migrate_script

PROGRAM = """import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


class Logger:
    def __init__(self):
        self.logged = {}

    def log(self, name, value):
        self.logged.setdefault(name, []).append(value.item())

    def pop(self):
        out = {k: sum(v) / len(v) for k, v in self.logged.items()}
        self.logged = {}
        return out


def main():
    loader = DataLoader(TensorDataset(torch.randn(64, 4), torch.randn(64, 1)), batch_size=8, shuffle=True)
    model = nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    logger = Logger()
    best = float("inf")
    for epoch in range(3):
        for xb, yb in loader:
            loss = ((model(xb) - yb) ** 2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            logger.log("train_loss", loss)
        metrics = logger.pop()
        if metrics["train_loss"] < best:
            best = metrics["train_loss"]
            torch.save(model.state_dict(), "best.pt")


if __name__ == "__main__":
    main()
"""


def test_a_decision_on_a_logged_metric_is_reviewed(tmp_path: Path) -> None:
    _, report, code = migrate_script(tmp_path, PROGRAM)
    assert code == 1, report
    assert 'DDP041 `metrics["train_loss"] < best` decides on metrics' in report, report
