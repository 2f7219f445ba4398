"""A pass that does not train over a loader whose own sampler draws this rank's share (DDP045).

A trial followed the migration's advice for its bucketing batch sampler and made it draw each rank's share (``rank=
runtime.rank(), world_size=runtime.world_size()``); a training-set error pass over that loader then showed rank 0's
share (0.4375 on 2 processes where one process computed 0.4609) with no review: the pass was reviewed over a
loader with a DistributedSampler only.
"""

from __future__ import annotations

from pathlib import Path

from migrated import lint_findings

PROGRAM = """import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, Sampler, TensorDataset


class ShardedBatches(Sampler):
    def __init__(self, n, batch_size, rank, world_size):
        self.n, self.bs, self.rank, self.world = n, batch_size, rank, world_size

    def __iter__(self):
        for i in range(0, self.n, self.bs):
            yield list(range(i, min(i + self.bs, self.n)))[self.rank :: self.world]

    def __len__(self):
        return (self.n + self.bs - 1) // self.bs


def error_rate(model, loader):
    wrong = total = 0
    with torch.no_grad():
        for x, y in loader:
            wrong += (model(x).argmax(1) != y).sum().item()
            total += len(y)
    return wrong / total


dist.init_process_group("gloo")
data = TensorDataset(torch.randn(64, 4), torch.randint(0, 2, (64,)))
loader = DataLoader(data, batch_sampler=ShardedBatches(len(data), 16, dist.get_rank(), dist.get_world_size()))
model = DistributedDataParallel(nn.Linear(4, 2))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for epoch in range(2):
    for x, y in loader:
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()
    print(error_rate(model, loader))
"""


def test_a_metric_pass_over_a_loader_sharded_by_its_own_sampler_is_reviewed(tmp_path: Path) -> None:
    found = lint_findings(tmp_path, PROGRAM, "DDP045")
    assert any("this pass over the training loader does not train" in line for line in found), found
