"""A model bound anew after its wrap and trained again (DDP011 review).

A notebook's second stage, ``model = torch.load("stage1.pt")`` and a new optimizer over it, trained the
reloaded model unwrapped on every rank (ranks ended apart: 3.129 and 3.286), and the migration said nothing
needed a human.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from migrated import migrate_script

PROGRAM = """import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

loader = DataLoader(TensorDataset(torch.randn(64, 4), torch.randn(64, 1)), batch_size=8, shuffle=True)
model = nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)


def train():
    for xb, yb in loader:
        optimizer.zero_grad()
        nn.functional.mse_loss(model(xb), yb).backward()
        optimizer.step()


for epoch in range(2):
    train()
torch.save(model, "stage1.pt")

model = STAGE_TWO
AFTER
for epoch in range(2, 4):
    train()
"""


@pytest.mark.parametrize(
    ("stage_two", "after", "reported"),
    [
        ('torch.load("stage1.pt", weights_only=False)', "optimizer = torch.optim.SGD(model.parameters(), lr=0.01)", True),
        ("nn.Linear(4, 1)", "optimizer = torch.optim.SGD(model.parameters(), lr=0.01)", True),
        ('torch.load("stage1.pt", weights_only=False)', "print(model.weight.sum())", False),
    ],
    ids=["reloaded-and-trained", "rebuilt-and-trained", "reloaded-and-only-read"],
)
def test_a_model_bound_anew_and_trained_after_its_wrap_is_reviewed(tmp_path: Path, stage_two: str, after: str, reported: bool) -> None:
    _, report, _ = migrate_script(tmp_path, PROGRAM.replace("STAGE_TWO", stage_two).replace("AFTER", after))
    assert ("DDP011 model is bound anew here, after its DistributedDataParallel wrap" in report) is reported, report


BRANCHES = """import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


def reference(model, wrap_it, make):
    if wrap_it:
        ref = DDP(model)
    else:
        ref = make(model)
    opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    for _ in range(3):
        opt.zero_grad()
        ref(torch.randn(2, 4)).sum().backward()
        opt.step()
    return ref
"""


def test_a_binding_on_the_other_branch_of_the_wrap_is_no_rebinding(tmp_path: Path) -> None:
    # torch's own FSDP tests: ``ref_model = DDP(model)`` or, on the else branch, ``ref_init_fn(model)``.
    from migrated import lint_findings

    assert lint_findings(tmp_path, BRANCHES, "DDP011") == []
