"""A loss that reads the wrapped model's parameters outside its forward, beside DDP's search for unused ones.

A trial's continual-learning program picked one head per task (``self.heads[str(task)]``: the migration wrapped with
``find_unused_parameters=True``, rightly) and added an EWC penalty over ``model.named_parameters()`` to the loss of
later tasks. Every run, even one process, failed at the first such backward ("marked as ready twice"): DDP had
marked the skipped head ready, and the penalty's gradient marked it again. The report said nothing needed a human.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from migrated import migrate_script

PROGRAM = """import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.trunk = nn.Linear(4, 8)
        self.heads = nn.ModuleDict({"0": nn.Linear(8, 2), "1": nn.Linear(8, 2)})

    def forward(self, x, task):
        return self.heads[str(task)](torch.relu(self.trunk(x)))


def main():
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    anchor = None
    for task in range(2):
        data = TensorDataset(torch.randn(32, 4), torch.randint(0, 2, (32,)))
        loader = DataLoader(data, batch_size=8, shuffle=True)
        for x, y in loader:
            loss = F.cross_entropy(model(x, task), y)
            if anchor is not None:
                loss = loss + PENALTY
            opt.zero_grad()
            loss.backward()
            opt.step()
        anchor = {n: p.detach().clone() for n, p in model.named_parameters()}


if __name__ == "__main__":
    main()
"""

REVIEW = "the loss reads model's parameters outside its forward"


@pytest.mark.parametrize(
    "penalty",
    ["sum(((p - anchor[n]) ** 2).sum() for n, p in model.named_parameters())", "sum((p ** 2).sum() for p in model.parameters())"],
    ids=["anchored", "weight-decay"],
)
def test_a_penalty_over_the_parameters_beside_the_unused_search_is_left_to_a_human(tmp_path: Path, penalty: str) -> None:
    migrated, report, code = migrate_script(tmp_path, PROGRAM.replace("PENALTY", penalty))
    assert "find_unused_parameters=True" in migrated
    assert code == 1 and REVIEW in report, report


def test_a_penalty_where_every_parameter_is_used_needs_no_review(tmp_path: Path) -> None:
    every = PROGRAM.replace('return self.heads[str(task)](torch.relu(self.trunk(x)))', 'h = torch.relu(self.trunk(x))\n        return self.heads["0"](h) + self.heads["1"](h)')
    migrated, report, _ = migrate_script(tmp_path, every.replace("PENALTY", "sum((p ** 2).sum() for p in model.parameters())"))
    assert "find_unused_parameters" not in migrated
    assert REVIEW not in report, report
