"""The device-agnostic way of choosing a process's device (torch >= 2.6: ``torch.accelerator.set_device_index``), as
PyTorch's DDP examples now write it, is read like ``torch.cuda.set_device``.

A trial: an ``mp.spawn`` program of that shape migrated with "0 items need a human" and kept
``torch.accelerator.set_device_index(rank)`` with the global rank: on a second machine, rank 8 asks for a GPU the
node does not have.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from migrated import lint_findings, migrate_script

SPAWNED = """
import os

import torch
import torch.multiprocessing as mp
import torch.nn.functional as F
from torch.distributed import destroy_process_group, init_process_group
from torch.nn.parallel import DistributedDataParallel as DDP


def setup(rank, world_size):
    os.environ["MASTER_ADDR"] = "localhost"
    os.environ["MASTER_PORT"] = "12355"
    if torch.accelerator.is_available():
        SET_DEVICE
    init_process_group(backend="gloo", rank=rank, world_size=world_size)


def main(rank, world_size):
    setup(rank, world_size)
    model = DDP(torch.nn.Linear(4, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(3):
        opt.zero_grad()
        F.mse_loss(model(torch.randn(8, 4)), torch.randn(8, 1)).backward()
        opt.step()
    destroy_process_group()


if __name__ == "__main__":
    mp.spawn(main, args=(2,), nprocs=2)
"""


@pytest.mark.parametrize(
    "call", ["torch.accelerator.set_device_index", "torch.accelerator.set_device_idx", "torch.cuda.set_device", "torch.xpu.set_device"]
)
def test_a_device_chosen_by_the_global_rank_is_reported(tmp_path: Path, call: str) -> None:
    findings = lint_findings(tmp_path, SPAWNED.replace("SET_DEVICE", f"{call}(rank)"), "DDP024")
    assert any(f"DDP024 {call}(global rank): the GPU of a process is its local rank" in line for line in findings), findings


def test_the_migration_leaves_the_device_to_the_runtime(tmp_path: Path) -> None:
    migrated, report, _ = migrate_script(tmp_path, SPAWNED.replace("SET_DEVICE", "torch.accelerator.set_device_index(rank)"))
    assert "set_device_index" not in migrated, migrated
    assert any("torch.accelerator.set_device_index" in line and "removed (runtime.setup() sets" in line for line in report.splitlines()), report


def test_a_fixed_device_index_is_reported_as_hard_coded(tmp_path: Path) -> None:
    findings = lint_findings(tmp_path, SPAWNED.replace("SET_DEVICE", "torch.accelerator.set_device_index(0)"), "DDP004")
    assert any("DDP004 torch.accelerator.set_device_index with a fixed device" in line for line in findings), findings


def test_a_device_index_of_the_local_rank_is_left_alone(tmp_path: Path) -> None:
    source = SPAWNED.replace("SET_DEVICE", 'torch.accelerator.set_device_index(int(os.environ["LOCAL_RANK"]))')
    assert lint_findings(tmp_path, source, "DDP004,DDP024") == [], source
