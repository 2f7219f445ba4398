"""A training set a legacy worker already cut to its rank's share (``Subset(full, range(rank, n,
world_size))``, ``x[rank::world_size]``) is not sharded again: a ``DistributedSampler`` on it left half of
every share untrained and halved the global batch (a trial: 16 of 32 samples per rank, other weights), with
exit 0. The loader is left as it is, with a note; a data set that depends on the rank in another way is
still sharded.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from launch import run_torchrun
from migrated import migrate_script

SPAWNED = '''
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, Subset, TensorDataset


def run(rank, world_size):
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:29561", rank=rank, world_size=world_size)
    torch.manual_seed(0)
    full = TensorDataset(torch.randn(64, 4), torch.arange(64))
    {shard}
    loader = DataLoader(shard, batch_size=8)
    model = DistributedDataParallel(nn.Linear(4, 1))
    seen = set()
    for epoch in range(2):
        for x, index in loader:
            seen.update(index.tolist())
            model(x).mean().backward()
    print(f"rank {{rank}}: {{len(seen)}} distinct", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(run, args=(2,), nprocs=2)
'''

BY_SUBSET = "shard = Subset(full, list(range(rank, len(full), world_size)))"
BY_SLICE = "shard = TensorDataset(full.tensors[0][rank::world_size], full.tensors[1][rank::world_size])"
NOT_CUT = "shard = TensorDataset(full.tensors[0] + 0 * rank, full.tensors[1])"


@pytest.mark.parametrize("shard", [BY_SUBSET, BY_SLICE], ids=["subset", "slice"])
def test_a_share_cut_from_the_rank_is_not_sharded_again(tmp_path: Path, shard: str) -> None:
    migrated, report, code = migrate_script(tmp_path, SPAWNED.format(shard=shard))
    assert code == 0, report
    assert "DistributedSampler" not in migrated and "per_process_batch_size" not in migrated, migrated
    assert "its data set is already this rank's share" in report, report


def test_a_data_set_that_only_reads_the_rank_is_still_sharded(tmp_path: Path) -> None:
    migrated, _, _ = migrate_script(tmp_path, SPAWNED.format(shard=NOT_CUT))
    assert "sampler=DistributedSampler(shard" in migrated, migrated


@pytest.mark.distributed
def test_each_rank_trains_on_its_whole_share(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    migrate_script(tmp_path, SPAWNED.format(shard=BY_SUBSET))
    launch = run_torchrun(tmp_path / "train.py", nproc_per_node=2, cwd=tmp_path, timeout=120)
    assert "rank 0: 32 distinct" in launch.output and "rank 1: 32 distinct" in launch.output, launch.output


BATCHED = '''
import os

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.utils.data import BatchSampler, DataLoader, RandomSampler, TensorDataset
from torch.utils.data.distributed import DistributedSampler

distributed = "WORLD_SIZE" in os.environ
if distributed:
    dist.init_process_group("gloo")
data = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
sampler = DistributedSampler(data) if distributed else RandomSampler(data)
loader = DataLoader(data, batch_sampler=BatchSampler(sampler, 8, drop_last=True))
model = nn.Linear(4, 1)
if distributed:
    model = nn.parallel.DistributedDataParallel(model)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for epoch in range(2):
    if distributed:
        sampler.set_epoch(epoch)
    for x, y in loader:
        optimizer.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
'''


def test_a_batch_sampler_over_a_distributed_sampler_is_sharded_already(tmp_path: Path) -> None:
    """``batch_sampler=BatchSampler(DistributedSampler(ds), 8, ...)`` (DETR's shape): no TODO to shard it by
    hand (following it would shard twice), no note about a batch size of 1."""
    migrated, report, code = migrate_script(tmp_path, BATCHED)
    assert code == 0 and "DDP005" not in report and "TODO" not in migrated, report


PICKED = 'import os\n\nimport torch\nimport torch.distributed as dist\nimport torch.nn as nn\nfrom torch.nn.parallel import DistributedDataParallel as DDP\nfrom torch.utils.data import DataLoader, Subset, TensorDataset\n\n\ndef pick(data, idx):\n    return Subset(data, idx)\n\n\ndef main():\n    dist.init_process_group("gloo")\n    rank, world = dist.get_rank(), dist.get_world_size()\n    torch.manual_seed(0)\n    full = TensorDataset(torch.randn(80, 4), torch.randn(80, 1))\n    train_set = pick(full, range(0, 64))\n    val_share = pick(full, range(64 + rank, 80, world))  # this rank\'s share of the validation samples\n    model = DDP(nn.Linear(4, 1))\n    opt = torch.optim.SGD(model.parameters(), lr=0.1)\n    loader = DataLoader(train_set, batch_size=8, shuffle=True)\n    seen = 0\n    for epoch in range(2):\n        for x, y in loader:\n            opt.zero_grad()\n            nn.functional.mse_loss(model(x), y).backward()\n            opt.step()\n            seen += len(x)\n    with torch.no_grad():\n        total = torch.tensor([sum(nn.functional.mse_loss(model(x[None]), y[None]).item() for x, y in val_share)])\n    dist.all_reduce(total)\n    print(f"rank {rank}: trained on {seen} samples, val {total.item():.3f}")\n    dist.destroy_process_group()\n\n\nif __name__ == "__main__":\n    main()\n'


def test_a_share_cut_only_at_another_call_site_does_not_count(tmp_path: Path) -> None:
    """``pick(data, idx)`` builds the training set from every index and, at another call site, a rank's
    share of the validation set: the training loader is still sharded (it was left whole: each rank
    trained on all 128 samples)."""
    migrated, report, _ = migrate_script(tmp_path, PICKED)
    assert "sampler=DistributedSampler(" in migrated and "DDP005 line 23: DistributedSampler added" in report, report
