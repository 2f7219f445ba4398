"""A ``torch.distributed.launch`` program whose process group is set up in a helper module (a trial).

``lib/dist_utils.py``'s ``init_distributed(args)`` called ``torch.cuda.set_device(args.local_rank)`` and
``init_process_group(backend="nccl", init_method="env://")``, while ``--local_rank`` was the entry's option: the
helper was read as a torchrun-native module and kept both (on a CPU machine torchrun failed at
``_cuda_setDevice``). The same code written in the entry became ``runtime.setup()``; now the helper's does too.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner
from launch import run_torchrun

from ddp_migrate.cli import cli

HELPER = '''import os

import torch
import torch.distributed as dist


def init_distributed(args):
    args.world_size = int(os.environ["WORLD_SIZE"]) if "WORLD_SIZE" in os.environ else 1
    args.distributed = args.world_size > 1
    if args.distributed:
        torch.cuda.set_device(args.local_rank)
        dist.init_process_group(backend="nccl", init_method="env://")
'''

TRAIN = '''import argparse

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

from dist_utils import init_distributed

parser = argparse.ArgumentParser()
parser.add_argument("--local_rank", type=int, default=0)
args = parser.parse_args()


def main():
    init_distributed(args)
    device = torch.device("cuda", args.local_rank) if torch.cuda.is_available() else torch.device("cpu")
    model = nn.Linear(4, 1).to(device)
    if args.distributed:
        model = nn.parallel.DistributedDataParallel(model, device_ids=[args.local_rank])
    data = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
    sampler = DistributedSampler(data) if args.distributed else None
    loader = DataLoader(data, batch_size=8, sampler=sampler, shuffle=sampler is None)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        if sampler is not None:
            sampler.set_epoch(epoch)
        for x, y in loader:
            loss = nn.functional.mse_loss(model(x.to(device)), y.to(device))
            opt.zero_grad()
            loss.backward()
            opt.step()
    if args.local_rank == 0:
        print("done", flush=True)


if __name__ == "__main__":
    main()
'''


def migrated(tmp_path: Path) -> str:
    from click.testing import CliRunner

    from ddp_migrate.cli import cli

    (tmp_path / "dist_utils.py").write_text(HELPER)
    (tmp_path / "train.py").write_text(TRAIN)
    result = CliRunner().invoke(cli, [str(tmp_path / "train.py")])
    assert result.exit_code == 0, result.output
    return (tmp_path / "dist_utils.py").read_text()


def test_the_helpers_group_set_up_becomes_the_runtimes(tmp_path: Path) -> None:
    helper = migrated(tmp_path)
    assert "runtime.setup()" in helper and "init_process_group" not in helper and "set_device" not in helper, helper


@pytest.mark.distributed
def test_the_migrated_program_trains_under_torchrun_on_the_cpu(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    migrated(tmp_path)
    launch = run_torchrun(tmp_path / "train.py", nproc_per_node=2, cwd=tmp_path, timeout=120)
    assert launch.returncode == 0 and "done" in launch.stdout, launch.stdout + launch.stderr


SET_UP_UNLESS_UP = """import torch
import torch.distributed as dist


def setup_dist():
    if TEST:
        return
    dist.init_process_group("gloo", init_method="env://")


def main():
    setup_dist()
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model(torch.randn(8, 4)).sum().backward()
    optimizer.step()


if __name__ == "__main__":
    main()
"""


@pytest.mark.parametrize(("test", "reported"), [("dist.is_initialized()", False), ("not dist.is_initialized()", True)])
def test_a_set_up_skipped_where_the_group_is_up_sets_it_up_on_every_path(tmp_path: Path, test: str, reported: bool) -> None:
    """guided-diffusion's ``setup_dist()``: ``if dist.is_initialized(): return`` before ``init_process_group``
    (a trial's false DDP003, "sets up its process group only under a condition"); returning where the group is
    not up is such a condition."""
    (tmp_path / "train.py").write_text(SET_UP_UNLESS_UP.replace("TEST", test))
    output = CliRunner().invoke(cli, ["lint", "--select", "DDP003", str(tmp_path / "train.py")]).output
    assert ("only under a condition" in output) is reported, output
