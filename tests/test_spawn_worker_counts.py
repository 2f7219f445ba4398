"""A spawned worker that counts its node's processes again to split the batch (DDP020).

``main_worker(gpu, args)`` of an ImageNet-style script recomputes ``ngpus = args.ngpus or
torch.cuda.device_count()`` (or reads ``args.ngpus``, the count the launch used) and splits the global batch
by it: ``args.batch_size = int(args.batch_size / ngpus)``. The migration replaced the count where the launch
made it but left the worker's: on a CPU machine the split divided by 0 on every rank, and with a flag the
global batch followed the flag, not the processes torchrun started (32 where the original trained on 64).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from launch import run_torchrun
from migrated import migrate_script

SPAWNED = '''import argparse

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

parser = argparse.ArgumentParser()
parser.add_argument("--batch-size", default=64, type=int)
parser.add_argument("--ngpus", default=DEFAULT, type=int)
parser.add_argument("--node-rank", default=0, type=int)


def main():
    args = parser.parse_args()
    COUNT_IN_MAIN
    mp.spawn(main_worker, nprocs=NPROCS, args=(args,))


def main_worker(gpu, args):
    COUNT_IN_WORKER
    rank = args.node_rank * ngpus + gpu
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:29672", world_size=args.world_size, rank=rank)
    torch.manual_seed(0)
    model = nn.parallel.DistributedDataParallel(nn.Linear(4, 1))
    args.batch_size = int(args.batch_size / ngpus)
    data = TensorDataset(torch.randn(256, 4), torch.randn(256, 1))
    loader = DataLoader(data, batch_size=args.batch_size, sampler=DistributedSampler(data))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for x, y in loader:
        loss = nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    n = torch.tensor([len(x)])
    dist.all_reduce(n)
    if rank == 0:
        print(f"global batch {n.item()}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
'''
RECOMPUTED = {
    "DEFAULT": "0",
    "COUNT_IN_MAIN": "ngpus = args.ngpus or torch.cuda.device_count()\n    args.world_size = ngpus",
    "NPROCS": "ngpus",
    "COUNT_IN_WORKER": "ngpus = args.ngpus or torch.cuda.device_count()",
}
GPU_COUNT = dict(RECOMPUTED, COUNT_IN_WORKER="ngpus = torch.cuda.device_count()")
FLAG = {
    "DEFAULT": "2",
    "COUNT_IN_MAIN": "args.world_size = args.ngpus",
    "NPROCS": "args.ngpus",
    "COUNT_IN_WORKER": "ngpus = args.ngpus",
}


def _source(parts: dict[str, str]) -> str:
    source = SPAWNED
    for key, value in parts.items():
        source = source.replace(key, value)
    return source


@pytest.mark.parametrize("parts", [RECOMPUTED, GPU_COUNT, FLAG], ids=["recomputed", "gpu-count", "the-launchs-flag"])
def test_the_workers_own_count_is_torchruns_processes_on_the_node(tmp_path: Path, parts: dict[str, str]) -> None:
    migrated, report, code = migrate_script(tmp_path, _source(parts))
    assert code == 0, report
    worker = migrated.split("def main_worker", 1)[1]
    assert "    ngpus = runtime.local_world_size()\n" in worker, migrated
    assert "args.batch_size = int(args.batch_size / ngpus)" in worker


@pytest.mark.distributed
def test_the_split_keeps_the_originals_global_batch_under_torchrun(tmp_path: Path) -> None:
    migrate_script(tmp_path, _source(RECOMPUTED))
    launch = run_torchrun(tmp_path / "train.py", nproc_per_node=2, cwd=tmp_path, timeout=120)
    assert "global batch 64" in launch.stdout, launch.stdout + launch.stderr
