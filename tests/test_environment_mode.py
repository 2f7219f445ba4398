"""A program already distributed the torchvision/DeiT way (a trial of correct DDP programs):
``init_distributed_mode(args)`` reads ``RANK``/``WORLD_SIZE``/``LOCAL_RANK`` when torchrun set them and falls back
to ``args.rank, args.world_size, args.gpu = 0, 1, 0`` otherwise, then sets the group up under
``args.distributed = args.world_size > 1``.

- DDP022 removed the fallback as a dead store of the rank (with ``args.world_size`` and ``args.gpu`` in the same
  tuple: ``pass`` was left) and the environment's rank (the setup runs only under the switch): plain python
  and a one-process torchrun then crashed on ``args.world_size``/``args.rank``; the report called it fixed.
- DDP011 reported ``args.distributed`` as a switch a torchrun launch leaves off (and the migration wrote a
  TODO): it is on exactly in a job of several processes.
- DDP004 reported ``torch.device("cuda", args.gpu)`` as hard-coded: the program sets its group up itself, in
  another module, and ``args.gpu`` is the local rank.
- DDP022 reported the rank and world size given to ``init_process_group`` as the script's own, and the ``1`` of
  the fallback as a constant world size: they are the environment's, or one process where it is absent.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner
from launch import run_python, run_torchrun

from ddp_migrate.cli import cli

DIST_UTILS = '''
import os

import torch
import torch.distributed as dist


def init_distributed_mode(args):
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        args.rank = int(os.environ["RANK"])
        args.world_size = int(os.environ["WORLD_SIZE"])
        args.gpu = int(os.environ["LOCAL_RANK"])
    else:
        args.rank, args.world_size, args.gpu = 0, 1, 0
    args.distributed = args.world_size > 1
    if torch.cuda.is_available():
        torch.cuda.set_device(args.gpu)
    if args.distributed:
        dist.init_process_group(backend="nccl" if torch.cuda.is_available() else "gloo", init_method="env://",
                                world_size=args.world_size, rank=args.rank)
        dist.barrier()
'''

TRAIN = '''
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

import dist_utils


def main(args):
    dist_utils.init_distributed_mode(args)
    device = torch.device("cuda", args.gpu) if torch.cuda.is_available() else torch.device("cpu")
    torch.manual_seed(0)
    ds = TensorDataset(torch.randn(64, 8), torch.randint(0, 2, (64,)))
    sampler = DistributedSampler(ds) if args.distributed else torch.utils.data.RandomSampler(ds)
    loader = DataLoader(ds, batch_size=8, sampler=sampler)
    model = nn.Linear(8, 2).to(device)
    if args.distributed:
        model = DistributedDataParallel(model, device_ids=[args.gpu] if torch.cuda.is_available() else None)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        if args.distributed:
            sampler.set_epoch(epoch)
        for x, y in loader:
            optimizer.zero_grad()
            F.cross_entropy(model(x.to(device)), y.to(device)).backward()
            optimizer.step()
    print(f"done rank {args.rank} of {args.world_size} distributed {args.distributed}", flush=True)


if __name__ == "__main__":
    main(argparse.ArgumentParser().parse_args())
'''


def _migrated(folder: Path) -> tuple[str, str, str]:
    (folder / "dist_utils.py").write_text(DIST_UTILS)
    (folder / "train.py").write_text(TRAIN)
    report = CliRunner().invoke(cli, [str(folder)], catch_exceptions=False).output
    return (folder / "dist_utils.py").read_text(), (folder / "train.py").read_text(), report


def test_the_fallback_of_a_run_without_torchrun_is_kept(tmp_path: Path) -> None:
    utils, train, report = _migrated(tmp_path)
    assert "        args.rank = int(os.environ[\"RANK\"])\n" in utils, utils
    assert "        args.rank, args.world_size, args.gpu = 0, " in utils and "        pass\n" not in utils, utils
    assert "DDP011" not in report and "TODO" not in train, report + train


def test_lint_takes_the_switch_and_the_device_for_what_they_are(tmp_path: Path) -> None:
    (tmp_path / "dist_utils.py").write_text(DIST_UTILS)
    (tmp_path / "train.py").write_text(TRAIN)
    found = CliRunner().invoke(cli, ["lint", str(tmp_path)], catch_exceptions=False).output
    assert "DDP011" not in found and "DDP004" not in found and "DDP022" not in found, found


@pytest.mark.distributed
def test_the_migrated_program_runs_alone_and_under_torchrun(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    _migrated(tmp_path)
    alone = run_python(tmp_path / "train.py", cwd=tmp_path, timeout=120)
    assert "done rank 0 of 1 distributed False" in alone.output, alone.output
    one = run_torchrun(tmp_path / "train.py", nproc_per_node=1, cwd=tmp_path, timeout=120)
    assert "done rank 0 of 1 distributed False" in one.output, one.output
    two = run_torchrun(tmp_path / "train.py", nproc_per_node=2, cwd=tmp_path, timeout=120)
    assert "done rank 1 of 2 distributed True" in two.output, two.output


OTHER_SWITCH = """
import os

import torch.distributed as dist

if not os.environ.get("MULTI_NODE"):
    rank, world_size = 0, 1
else:
    rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
dist.init_process_group("gloo", rank=rank, world_size=world_size)
"""


def test_a_fallback_under_a_test_of_another_variable_is_the_scripts_own(tmp_path: Path) -> None:
    """A review: any test of the environment with a ``not`` in it counted as "the launch is absent"; under
    torchrun without ``MULTI_NODE`` every process trained alone as rank 0 of 1, and nothing was reported."""
    (tmp_path / "train.py").write_text(OTHER_SWITCH)
    found = CliRunner().invoke(cli, ["lint", str(tmp_path / "train.py")], catch_exceptions=False).output
    assert "DDP022" in found, found
