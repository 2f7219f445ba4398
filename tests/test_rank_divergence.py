"""Decisions the ranks may take apart after the migration, left to a human at the decision (DDP041): an
early-stopping object called with this rank's loss (``stopper(loss)``, its ``__call__``), a hand-written
learning-rate rule fed the shard's loss (``adjust_lr(loss)`` setting ``group["lr"]``), and a stop decided
on rank 0 alone (``if is_main: ... stop = bad >= patience``, then ``if stop: break`` on every rank). Each
crashed, hung or let the replicas drift apart in a trial, with nothing in the report.
"""

from __future__ import annotations

from pathlib import Path

from migrated import migrate_script

HEAD = '''
import os

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

'''

LOOP = '''
def main():
    loader = DataLoader(TensorDataset(torch.randn(64, 4), torch.randn(64, 1)), batch_size=16, shuffle=True)
    model = nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    {setup}
    for epoch in range(20):
        total = 0.0
        for x, y in loader:
            optimizer.zero_grad()
            loss = nn.functional.mse_loss(model(x), y)
            loss.backward()
            optimizer.step()
            total += loss.item()
        {decide}
    torch.save(model.state_dict(), "final.pt")


if __name__ == "__main__":
    main()
'''

STOPPER = '''
class EarlyStopping:
    def __init__(self, patience):
        self.patience, self.best, self.bad, self.early_stop = patience, None, 0, False

    def __call__(self, loss):
        if self.best is None or loss < self.best:
            self.best, self.bad = loss, 0
        else:
            self.bad += 1
            if self.bad >= self.patience:
                self.early_stop = True
'''

HALVER = '''
class HalveOnPlateau:
    def __init__(self, optimizer):
        self.optimizer, self.best = optimizer, None

    def __call__(self, loss):
        if self.best is None or loss < self.best:
            self.best = loss
            return
        for group in self.optimizer.param_groups:
            group["lr"] *= 0.5
'''


def _reviews(tmp_path: Path, source: str) -> list[str]:
    _, report, code = migrate_script(tmp_path, source)
    reviews = [line for line in report.splitlines() if line.lstrip().startswith("review")]
    assert code == (1 if reviews else 0), report
    return reviews


def test_an_early_stopping_object_called_with_the_shard_loss(tmp_path: Path) -> None:
    source = HEAD + STOPPER + LOOP.format(
        setup="stopper = EarlyStopping(3)", decide="stopper(total / len(loader))\n        if stopper.early_stop:\n            break"
    )
    reviews = _reviews(tmp_path, source)
    assert len(reviews) == 1 and "DDP041" in reviews[0] and "stopper.early_stop" in reviews[0], reviews


def test_a_learning_rate_rule_fed_the_shard_loss(tmp_path: Path) -> None:
    source = HEAD + HALVER + LOOP.format(setup="adjust_lr = HalveOnPlateau(optimizer)", decide="adjust_lr(total / len(loader))")
    reviews = _reviews(tmp_path, source)
    assert len(reviews) == 1 and "DDP041 adjust_lr() steps on total" in reviews[0], reviews


def test_a_stop_decided_on_rank_0_alone(tmp_path: Path) -> None:
    source = HEAD + LOOP.format(
        setup='is_main = int(os.environ.get("RANK", "0")) == 0\n    stop = False',
        decide="if is_main:\n            stop = total < 0.01\n        if stop:\n            break",
    )
    reviews = _reviews(tmp_path, source)
    assert len(reviews) == 1 and "DDP041 `stop`" in reviews[0], reviews


def test_the_same_decisions_on_a_value_alike_on_every_rank_are_left_alone(tmp_path: Path) -> None:
    source = HEAD + STOPPER + LOOP.format(
        setup="stopper = EarlyStopping(3)", decide="stopper(epoch)\n        if stopper.early_stop:\n            break"
    )
    assert _reviews(tmp_path, source) == []


def test_a_decision_rank_0_broadcasts_is_common(tmp_path: Path) -> None:
    """``if is_main: stop[0] = ...`` then ``dist.broadcast(stop, 0)``: every rank holds rank 0's value."""
    source = HEAD.replace("import torch\n", "import torch\nimport torch.distributed as dist\n") + LOOP.format(
        setup='is_main = int(os.environ.get("RANK", "0")) == 0\n    stop = torch.zeros(1)',
        decide="if is_main:\n            stop[0] = float(total < 0.01)\n        if dist.is_initialized():\n"
        "            dist.broadcast(stop, 0)\n        if stop.item():\n            break",
    )
    assert not [line for line in _reviews(tmp_path, source) if "DDP041" in line]
