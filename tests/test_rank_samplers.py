"""DDP005 and a training loader whose own sampler already draws this rank's share.

A trial's bucketed program built its batch sampler with ``rank=``/``num_replicas=`` (another cut its indices by
``dist.get_rank()`` in ``__iter__``): DDP005 still said "its own batch sampler is not sharded: shard it by hand",
with no way to clear it but a ``# noqa``. Such a sampler is the user's own sharding: a note says so. A sampler of
the same class built without the rank is still reviewed.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from ddp_migrate.cli import cli

PROGRAM = '''import os

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.utils.data import DataLoader, RandomSampler, Sampler, TensorDataset


class BucketBatchSampler(Sampler):
    def __init__(self, lengths, batch_size, rank=0, num_replicas=1):
        self.lengths, self.batch_size = lengths, batch_size
        self.rank, self.num_replicas = rank, num_replicas

    def __iter__(self):
        order = sorted(range(len(self.lengths)), key=lambda i: self.lengths[i])
        batches = [order[i : i + self.batch_size] for i in range(0, len(order), self.batch_size)]
        return iter(batches[self.rank :: self.num_replicas])

    def __len__(self):
        return len(self.lengths) // self.batch_size // self.num_replicas


class ShardedSampler(Sampler):
    def __init__(self, n):
        self.n = n

    def __iter__(self):
        for i in range(self.n):
            if i % dist.get_world_size() != dist.get_rank():
                continue
            yield i

    def __len__(self):
        return self.n // dist.get_world_size()


def main():
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    ds = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
    lengths = [int(x) for x in torch.randint(1, 10, (64,))]
    SAMPLER
    model = nn.parallel.DistributedDataParallel(nn.Linear(4, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        for x, y in loader:
            loss = nn.functional.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()


if __name__ == "__main__":
    main()
'''


def report(tmp_path: Path, loader: str) -> str:
    path = tmp_path / "train.py"
    path.write_text(PROGRAM.replace("    SAMPLER", f"    {loader}"))
    result = CliRunner().invoke(cli, ["--diff", str(path)])
    assert result.exit_code in (0, 1), result.output
    return result.output


@pytest.mark.parametrize(
    ("loader", "sampler"),
    [
        ("loader = DataLoader(ds, batch_sampler=BucketBatchSampler(lengths, 8, rank=rank, num_replicas=world))", "BucketBatchSampler"),
        ("batches = BucketBatchSampler(lengths, 8, rank, world)\n    loader = DataLoader(ds, batch_sampler=batches)", "BucketBatchSampler"),
        ("loader = DataLoader(ds, batch_size=8, sampler=ShardedSampler(len(ds)))", "ShardedSampler"),
    ],
    ids=["built-with-the-rank", "held-in-a-name", "cut-in-iter"],
)
def test_a_sampler_that_draws_by_the_rank_is_noted_not_reviewed(tmp_path: Path, loader: str, sampler: str) -> None:
    output = report(tmp_path, loader)
    assert "review" not in output and "DistributedSampler(" not in output, output
    assert f"its own sampler, `{sampler}(...)`, already draws this rank's share" in output, output


def test_the_same_sampler_built_without_the_rank_is_reviewed(tmp_path: Path) -> None:
    output = report(tmp_path, "loader = DataLoader(ds, batch_sampler=BucketBatchSampler(lengths, 8))")
    assert "review" in output and "DDP005" in output and "its own batch sampler is not sharded" in output, output


def test_a_sampler_seeded_from_the_rank_orders_the_whole_set_and_is_reviewed(tmp_path: Path) -> None:
    """A generator seeded from the rank gives each rank its own order of the whole set: no share of it."""
    output = report(tmp_path, "loader = DataLoader(ds, batch_size=8, sampler=RandomSampler(ds, generator=torch.Generator().manual_seed(rank)))")
    assert "review" in output and "DDP005" in output and "already draws this rank's share" not in output, output


def test_the_calls_that_build_the_data_set_are_not_the_samplers(tmp_path: Path) -> None:
    """A rank read while the data set is built (``rank == 0`` for a flag) says nothing of how the sampler draws: a
    review found the note ("its own sampler, `TensorDataset(...)`, already draws this rank's share") and no
    DistributedSampler, every rank training on the whole set."""
    loader = (
        "ds = TensorDataset(torch.full((64, 4), float(rank == 0)), torch.randn(64, 1))\n"
        "    loader = DataLoader(ds, batch_size=8, sampler=RandomSampler(ds))"
    )
    output = report(tmp_path, loader)
    assert "already draws this rank's share" not in output and "in place of its RandomSampler" in output, output
