"""A program that scales its learning rate by the number of processes (``lr=0.1 * get_world_size()``, the linear
scaling rule, a helper that answers 1 without a process group): its batch is per process by design. A trial: the
migration kept the global batch (each process half of it) and the rate doubled under 2 processes, unreported. The
batch size is kept per process now, as where the program divides its steps by the world size."""

from __future__ import annotations

from pathlib import Path

import pytest

from migrated import migrate_script

PROGRAM = """
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


def get_world_size():
    return dist.get_world_size() if dist.is_initialized() else 1


def main():
    torch.manual_seed(0)
    ds = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
    loader = DataLoader(ds, batch_size=16, shuffle=False)
    model = nn.Linear(4, 1)
    LR
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    for x, y in loader:
        loss = nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()


if __name__ == "__main__":
    main()
"""


@pytest.mark.parametrize("lr", ["lr = 0.1 * get_world_size()", "lr = 0.1 * dist.get_world_size()"])
def test_a_learning_rate_scaled_by_the_world_size_keeps_the_batch_per_process(tmp_path: Path, lr: str) -> None:
    text, report, code = migrate_script(tmp_path, PROGRAM.replace("LR", lr))
    assert code == 0, report
    assert "per_process_batch_size" not in text and "batch_size=16" in text, text
    assert "batch size kept per process: the program already multiplies the learning rate by the world size" in report, report


def test_a_learning_rate_of_its_own_keeps_the_global_batch(tmp_path: Path) -> None:
    text, report, code = migrate_script(tmp_path, PROGRAM.replace("LR", "lr = 0.1 * 2"))
    assert "batch_size=runtime.per_process_batch_size(16)" in text, text


@pytest.mark.parametrize(
    "lr",
    ["lr = 0.1 * get_world_size() if len(ds) > 1000 else 0.1", "lr = 0.1 / (2 * get_world_size())"],
    ids=["under-a-test", "in-a-divisor"],
)
def test_a_learning_rate_not_simply_scaled_keeps_the_global_batch(tmp_path: Path, lr: str) -> None:
    text, report, code = migrate_script(tmp_path, PROGRAM.replace("LR", lr))
    assert "batch_size=runtime.per_process_batch_size(16)" in text, text
