"""The rank and world size a DETR/DeiT-style ``init_distributed_mode(args)`` stores on ``args`` live on
after the function: its callers read them (``args.lr = args.blr * args.world_size``). DDP022 once removed
``args.world_size = int(os.environ["WORLD_SIZE"])`` as a computation only the replaced
``init_process_group`` read, and put nothing back: under torchrun ``args.world_size`` stayed at its
default of 1, the learning rate was half the original's and the weights differed (a trial), with exit 0.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from launch import run_torchrun
from migrated import migrate_script

INIT_MODE = '''
import argparse
import os

import torch
import torch.distributed as dist
from torch import nn


def init_distributed_mode(args):
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        args.rank = int(os.environ["RANK"])
        args.world_size = int(os.environ["WORLD_SIZE"])
        args.gpu = int(os.environ["LOCAL_RANK"])
    elif "SLURM_PROCID" in os.environ:
        args.rank = int(os.environ["SLURM_PROCID"])
        args.gpu = args.rank % max(1, torch.cuda.device_count())
    else:
        args.distributed = False
        return
    args.distributed = True
    dist.init_process_group(backend="gloo", init_method=args.dist_url, world_size=args.world_size, rank=args.rank)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--blr", default=0.01, type=float)
    parser.add_argument("--world_size", default=1, type=int)
    parser.add_argument("--dist_url", default="env://")
    args = parser.parse_args()
    init_distributed_mode(args)
    args.lr = args.blr * args.world_size
    model = nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
    optimizer.zero_grad()
    model(torch.randn(2, 4)).sum().backward()
    optimizer.step()
    print(f"world {args.world_size} rank {args.rank if args.distributed else 0} lr {args.lr:.2f}", flush=True)


if __name__ == "__main__":
    main()
'''


def test_the_world_size_an_init_helper_stores_on_args_is_put_back_from_the_runtime(tmp_path: Path) -> None:
    migrated, report, _ = migrate_script(tmp_path, INIT_MODE)
    assert "runtime.setup(backend=\"gloo\")\n    args.rank = runtime.rank()\n    args.world_size = runtime.world_size()\n" in migrated, migrated


@pytest.mark.distributed
def test_the_learning_rate_scaled_by_that_world_size_is_the_originals(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    migrate_script(tmp_path, INIT_MODE)
    launch = run_torchrun(tmp_path / "train.py", nproc_per_node=2, cwd=tmp_path, timeout=120)
    assert "world 2 rank 0 lr 0.02" in launch.output and "world 2 rank 1 lr 0.02" in launch.output, launch.output


FROZEN = 'import argparse\nfrom dataclasses import dataclass\n\nimport torch\nimport torch.distributed as dist\nimport torch.nn as nn\nfrom torch.utils.data import DataLoader, TensorDataset\n\n\n@dataclass(frozen=True)\nclass DistConfig:\n    rank: int\n    world_size: int\n\n\ndef init_distributed(cfg):\n    dist.init_process_group("gloo", rank=cfg.rank, world_size=cfg.world_size)\n\n\ndef main():\n    parser = argparse.ArgumentParser()\n    parser.add_argument("--local_rank", type=int, default=0)\n    parser.add_argument("--node_rank", type=int, default=0)\n    parser.add_argument("--nproc", type=int, default=1)\n    args = parser.parse_args()\n    cfg = DistConfig(rank=args.node_rank * args.nproc + args.local_rank, world_size=args.nproc)\n    init_distributed(cfg)\n    torch.manual_seed(0)\n    model = nn.Linear(4, 1)\n    opt = torch.optim.SGD(model.parameters(), lr=0.1)\n    loader = DataLoader(TensorDataset(torch.randn(16, 4), torch.randn(16, 1)), batch_size=4)\n    for epoch in range(2):\n        for x, y in loader:\n            opt.zero_grad()\n            nn.functional.mse_loss(model(x), y).backward()\n            opt.step()\n    print("done", cfg.rank)\n\n\nif __name__ == "__main__":\n    main()\n'


def test_no_rank_is_put_back_into_a_frozen_config(tmp_path: Path) -> None:
    """``cfg`` is a ``@dataclass(frozen=True)``: ``cfg.rank = runtime.rank()`` would raise
    FrozenInstanceError even as plain python."""
    migrated, report, _ = migrate_script(tmp_path, FROZEN)
    assert "cfg.rank = " not in migrated and "runtime.setup(" in migrated, migrated
