"""A program that sets up its own process group, on gloo where there is no GPU (DETR's ``init_distributed_mode``),
with a helper that all-reduces on ``device="cuda"`` once the group is up (a trial). The original never reached the
helper's CUDA tensor on one process; migrated, every torchrun process did, and on a CPU machine each failed with
"Torch not compiled with CUDA enabled" while the report said nothing. A group that may be gloo's runs on CPUs: a
``device="cuda"`` no CUDA test guards is reported there. One set up on NCCL alone keeps ``"cuda"`` (the current
device its own ``set_device`` chose)."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from ddp_migrate.cli import cli
from launch import run_torchrun

HELPERS = """import os

import torch
import torch.distributed as dist


def average(value):
    if not (dist.is_available() and dist.is_initialized()):
        return value
    t = torch.tensor([value], dtype=torch.float64, device="cuda")
    dist.all_reduce(t)
    return t.item() / dist.get_world_size()


def init_distributed_mode():
    if "RANK" not in os.environ:
        return False
    dist.init_process_group(BACKEND)
    return True
"""

TRAIN = """import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

from helpers import average, init_distributed_mode


def main():
    init_distributed_mode()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    ds = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
    loader = DataLoader(ds, batch_size=16, shuffle=True)
    model = nn.Linear(4, 1).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for epoch in range(2):
        total = 0.0
        for x, y in loader:
            loss = F.mse_loss(model(x.to(device)), y.to(device))
            opt.zero_grad()
            loss.backward()
            opt.step()
            total += loss.item()
        print("epoch", epoch, average(total / len(loader)))


if __name__ == "__main__":
    main()
"""

MAY_BE_GLOO = 'backend="nccl" if torch.cuda.is_available() else "gloo"'


def _write(folder: Path, backend: str) -> Path:
    (folder / "helpers.py").write_text(HELPERS.replace("BACKEND", backend))
    (folder / "train.py").write_text(TRAIN)
    return folder


@pytest.mark.parametrize("backend", [MAY_BE_GLOO, "", '"gloo"'], ids=["nccl-or-gloo", "default", "gloo"])
def test_a_cuda_device_in_a_group_that_may_run_on_cpus_is_reported(tmp_path: Path, backend: str) -> None:
    folder = _write(tmp_path, backend)
    output = CliRunner().invoke(cli, ["lint", "--select", "DDP004", str(folder)]).output
    assert "helpers.py:10:59: DDP004 hard-coded CUDA device" in output, output


def test_a_cuda_device_in_a_group_on_nccl_alone_is_the_current_device(tmp_path: Path) -> None:
    folder = _write(tmp_path, 'backend="nccl"')
    output = CliRunner().invoke(cli, ["lint", "--select", "DDP004", str(folder)]).output
    assert "helpers.py" not in output, output


@pytest.mark.distributed
def test_the_migrated_program_reduces_on_its_own_device_under_torchrun(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    folder = _write(tmp_path, MAY_BE_GLOO)
    result = CliRunner().invoke(cli, [str(folder / "train.py")])
    assert result.exit_code == 0, result.output
    launch = run_torchrun(folder / "train.py", nproc_per_node=2, cwd=folder, timeout=120)
    assert launch.returncode == 0 and launch.stdout.count("epoch 1") == 1, launch.stdout + launch.stderr


def test_a_cuda_device_a_cuda_test_guards_is_kept(tmp_path: Path) -> None:
    folder = _write(tmp_path, MAY_BE_GLOO)
    helpers = folder / "helpers.py"
    helpers.write_text(helpers.read_text().replace('device="cuda")', 'device="cuda" if torch.cuda.is_available() else "cpu")'))
    output = CliRunner().invoke(cli, ["lint", "--select", "DDP004", str(folder)]).output
    assert "helpers.py" not in output, output


def test_a_cuda_device_a_named_cuda_test_guards_is_kept(tmp_path: Path) -> None:
    # (a review: ``use_cuda = torch.cuda.is_available()`` then ``if use_cuda:`` was taken for no CUDA test)
    folder = _write(tmp_path, MAY_BE_GLOO)
    helpers = folder / "helpers.py"
    helpers.write_text(
        helpers.read_text()
        .replace('    t = torch.tensor([value], dtype=torch.float64, device="cuda")', '    use_cuda = torch.cuda.is_available()\n    if use_cuda:\n        t = torch.tensor([value], dtype=torch.float64, device="cuda")\n    else:\n        t = torch.tensor([value], dtype=torch.float64)')
    )
    output = CliRunner().invoke(cli, ["lint", "--select", "DDP004", str(folder)]).output
    assert "helpers.py" not in output, output
