"""Values computed from a loader the program shards by hand are each rank's own, as with a DistributedSampler.

A program (or a migration whose own-sampler TODO a human followed) draws each rank's share with its own
``Sampler`` (``indices[self.rank::self.world_size]``): the tool said the loader "already draws this rank's
share", yet only loaders with a ``DistributedSampler`` seeded the per-rank values, so DDP050 (in-batch
comparisons), DDP041 (decisions on a shard's loss) and the notes on values rank 0 shows said nothing
(a trial's triplet loss trained other weights: 3.765 alone, 4.128 on 2 processes).
"""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from ddp_migrate.cli import cli

PROGRAM = """import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Sampler, TensorDataset


class RankSampler(Sampler):
    def __init__(self, data, rank, world_size, seed=0):
        self.data, self.rank, self.world_size, self.seed = data, rank, world_size, seed

    def __iter__(self):
        order = torch.randperm(len(self.data), generator=torch.Generator().manual_seed(self.seed)).tolist()
        return iter(CUT)

    def __len__(self):
        return len(self.data) // self.world_size


dist.init_process_group("gloo")
rank, world_size = dist.get_rank(), dist.get_world_size()
torch.manual_seed(0)
data = TensorDataset(torch.randn(256, 8), torch.arange(256) % 8)
loader = DataLoader(data, batch_size=16, sampler=RankSampler(data, rank, world_size))
model = DDP(nn.Linear(8, 4))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
best = float("inf")
for epoch in range(10):
    total = 0.0
    for x, y in loader:
        z = model(x)
        loss = nn.functional.cross_entropy(z @ z.t(), torch.arange(len(z)))
        opt.zero_grad()
        loss.backward()
        opt.step()
        total += loss.item()
    if total > best:
        break
    best = total
dist.destroy_process_group()
"""


def _codes(tmp_path: Path, cut: str) -> list[str]:
    script = tmp_path / "train.py"
    script.write_text(PROGRAM.replace("CUT", cut))
    result = CliRunner().invoke(cli, ["lint", "-q", "--select", "DDP041,DDP050", str(script)])
    assert result.exit_code in (0, 1), result.output
    return sorted(line.split(" ")[1] for line in result.output.splitlines() if " DDP0" in line)


def test_a_sampler_that_cuts_by_the_rank_makes_the_batches_each_ranks_own(tmp_path: Path) -> None:
    assert _codes(tmp_path, "order[self.rank :: self.world_size]") == ["DDP041", "DDP050"]


def test_a_sampler_that_orders_the_whole_set_leaves_every_rank_the_whole_batch(tmp_path: Path) -> None:
    assert _codes(tmp_path, "order") == []
