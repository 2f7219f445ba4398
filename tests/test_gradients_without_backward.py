"""Gradients of a DDP model's parameters computed with ``torch.autograd.grad`` (DDP008).

A trial's functional SAM took its ascent step from ``torch.autograd.grad(loss, params)`` over ``model.parameters()``:
DDP's hooks average what ``backward()`` accumulates only, so each rank perturbed its weights by its own shard's
gradient (2 processes 79.133 where the original and one process gave 79.209), with nothing for a human. Gradients
with respect to the inputs (a PGD attack, a gradient penalty on samples) are each sample's own and stay unremarked.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from migrated import migrate_script

PROGRAM = """import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset


def main():
    data = TensorDataset(torch.randn(64, 4), torch.randint(0, 2, (64,)))
    loader = DataLoader(data, batch_size=8, shuffle=True)
    model = nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        for x, y in loader:
            GRADIENT
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()


if __name__ == "__main__":
    main()
"""

REVIEW = "torch.autograd.grad over the DDP model's parameters bypasses DDP's gradient all-reduce"


@pytest.mark.parametrize(
    ("gradient", "reviewed"),
    [
        ("params = [p for p in model.parameters() if p.requires_grad]\n            grads = torch.autograd.grad(F.cross_entropy(model(x), y), params)", True),
        ("grads = torch.autograd.grad(F.cross_entropy(model(x), y), list(model.parameters()))", True),
        ("x = x.clone().requires_grad_(True)\n            (g,) = torch.autograd.grad(F.cross_entropy(model(x), y), x)\n            x = (x + 0.1 * g.sign()).detach()", False),
    ],
    ids=["params-in-a-name", "params-in-the-call", "inputs-of-an-attack"],
)
def test_autograd_grad_over_the_parameters_is_left_to_a_human(tmp_path: Path, gradient: str, reviewed: bool) -> None:
    _, report, _ = migrate_script(tmp_path, PROGRAM.replace("GRADIENT", gradient))
    assert (REVIEW in report) is reviewed, report
