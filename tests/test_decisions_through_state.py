"""Decisions on a rank's shard that set a value the training reads next (DDP041).

A trial's curriculum moved up a stage when the epoch's training loss fell below a threshold (``if total < t:
use_big = True``, then ``loader = big_loader if use_big else small_loader``; or ``stage += 1`` read by the loss or
by the next epoch's ``Subset``), or set its learning rate through a name (``lr = 0.05 if total < t else 0.1; g["lr"] =
lr``). Under torchrun each rank decided on its own shard's loss: rank 0 moved on and rank 1 did not, the numbers of
batches differed and the job died ("Connection closed by peer") or hung, or the ranks trained with different
learning rates (final weights 0.694 and 0.650), with "0 item(s) need a human".
"""

from __future__ import annotations

from pathlib import Path

import pytest

from migrated import migrate_script

PROGRAM = """import sys

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, Subset, TensorDataset


def main():
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
    small, big = Subset(data, range(32)), data
    model = nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    stage, use_big, best = 1, False, float("inf")
    small_loader = DataLoader(small, batch_size=8, shuffle=True)
    big_loader = DataLoader(big, batch_size=8, shuffle=True)
    for epoch in range(4):
        CHOICE
        total = 0.0
        for x, y in loader:
            opt.zero_grad()
            loss = nn.functional.mse_loss(model(x) * SCALE, y)
            loss.backward()
            opt.step()
            total += loss.item() / len(loader)
        print(f"epoch {epoch} stage {stage} loss {total:.6f}")
        DECISION


if __name__ == "__main__":
    main()
"""

TWO_LOADERS = "loader = big_loader if use_big else small_loader"
ONE_LOADER = "loader = small_loader"


def _program(choice: str, decision: str, scale: str = "1.0") -> str:
    return PROGRAM.replace("CHOICE", choice).replace("DECISION", decision).replace("SCALE", scale)


@pytest.mark.parametrize(
    ("choice", "decision", "scale", "read"),
    [
        (TWO_LOADERS, "if total < float(sys.argv[1]):\n            use_big = True", "1.0", "use_big, which chooses the loader the training loop iterates"),
        (ONE_LOADER, "if total < float(sys.argv[1]):\n            stage += 1", "stage", "stage, which the training loss is computed with"),
        (
            "loader = DataLoader(Subset(data, range(16 * stage)), batch_size=8, shuffle=True)",
            "if total < float(sys.argv[1]):\n            stage += 1",
            "1.0",
            "stage, which",
        ),
        (
            ONE_LOADER,
            "lr = 0.05 if total < float(sys.argv[1]) else 0.1\n        for g in opt.param_groups:\n            g[\"lr\"] = lr",
            "1.0",
            "lr, which sets the learning rate",
        ),
    ],
    ids=["loader-chosen-by-a-flag", "loss-scaled-by-a-stage", "subset-sized-by-a-stage", "learning-rate-through-a-name"],
)
def test_a_shard_decision_on_a_value_the_training_reads_is_reviewed(tmp_path: Path, choice: str, decision: str, scale: str, read: str) -> None:
    _, report, code = migrate_script(tmp_path, _program(choice, decision, scale))
    assert code == 1, report
    found = [line for line in report.splitlines() if "DDP041" in line and "the value of" in line]
    assert found and read in found[-1], report
    assert "decides on total, computed on this rank's shard of the data only" in found[-1]


@pytest.mark.parametrize(
    "decision",
    [
        "if total < best:\n            best = total",  # a best value kept for a log line: the training reads nothing of it
        "if total < float(sys.argv[1]):\n            stage += 1",  # (the stage is only printed here)
    ],
    ids=["best-kept", "stage-printed"],
)
def test_a_shard_decision_on_a_value_only_shown_is_no_review(tmp_path: Path, decision: str) -> None:
    _, report, _ = migrate_script(tmp_path, _program(ONE_LOADER, decision))
    assert "DDP041" not in report, report
