"""Draws through a generator an object keeps, seeded from its constructor's argument: per rank only through the
objects built with a seed from the rank.

A nanoGPT-style program samples training windows with ``Windows(data, seed=rank)`` (each rank its own batches)
and validation windows with ``Windows(data, seed=123)`` (the same on every rank). DDP041 took every draw of the
class as per rank (its facts were per class), and every draw from torch's own state as per rank too once any
generator was seeded from the rank, though torch itself was seeded alike: an early stop on the validation loss
was reported as an error.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from ddp_migrate.cli import cli

PROGRAM = """import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
data = torch.randn(1000, 4)


class Windows:
    def __init__(self, data, seed):
        self.data = data
        self.gen = torch.Generator().manual_seed(seed)

    def batch(self, n):
        ix = torch.randint(0, len(self.data) - 1, (n,), generator=self.gen)
        return self.data[ix], self.data[ix + 1]


train = Windows(data, seed=rank)
val = Windows(data, seed=VAL_SEED)
model = DDP(nn.Linear(4, 4))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
best = 1e9
for step in range(100):
    x, y = TRAIN.batch(8)
    loss = ((model(x) - y) ** 2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    if step % 10 == 0:
        with torch.no_grad():
            vx, vy = VAL.batch(64)
            val_loss = ((model(vx) - vy) ** 2).mean().item()
        if val_loss > best:
            break
        best = val_loss
dist.destroy_process_group()
"""


def decisions(tmp_path: Path, val_seed: str = "123", train: str = "train", val: str = "val", head: str = "") -> list[str]:
    path = tmp_path / "train.py"
    source = PROGRAM.replace("VAL_SEED", val_seed).replace("TRAIN.", train + ".").replace("VAL.", val + ".")
    path.write_text(source.replace("torch.manual_seed(0)\n", head) if head != "" else source)
    result = CliRunner().invoke(cli, ["lint", "-q", "--select", "DDP041", str(path)])
    assert result.exit_code in (0, 1), result.output
    return [line for line in result.output.splitlines() if "DDP041" in line]


def test_validation_windows_seeded_alike_decide_alike(tmp_path: Path) -> None:
    assert decisions(tmp_path) == []


def test_validation_windows_seeded_from_the_rank_are_each_ranks_own(tmp_path: Path) -> None:
    assert len(decisions(tmp_path, val_seed="rank + 1")) == 1


def test_validation_drawn_from_the_training_windows_is_each_ranks_own(tmp_path: Path) -> None:
    assert len(decisions(tmp_path, train="val", val="train")) == 1


def test_data_drawn_from_torchs_unseeded_state_is_each_ranks_own(tmp_path: Path) -> None:
    # No torch.manual_seed: ``data = torch.randn(...)`` differs between the processes, and so does every loss.
    assert len(decisions(tmp_path, head="# unseeded\n")) == 1


HAND_SHARDED = """import torch
import torch.distributed as dist

torch.manual_seed(0)
dist.init_process_group("gloo")
model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
rank = dist.get_rank()
devices = ["cpu", "cpu"]
device = devices[rank]
data = torch.randn(1000, 4)
shard = PART
val = torch.randn(100, 4).to(device)
for epoch in range(100):
    for x in shard.split(32):
        loss = model(x.to(device)).pow(2).mean()
        loss.backward()
        optimizer.step()
    if model(val).pow(2).mean().item() < 0.01:
        break
    if loss.item() < 0.01:
        break
"""


@pytest.mark.parametrize("part", ["data[rank::dist.get_world_size()]", "torch.chunk(data, dist.get_world_size())[rank]"])
def test_a_part_of_the_data_taken_by_hand_is_each_ranks_own(tmp_path: Path, part: str) -> None:
    """With torch's draws seeded alike no longer taken as per rank, the data a rank takes by hand (a slice from the
    rank, its part of a split) is what makes its losses its own; an item picked by the rank that is no data
    (``devices[rank]``) makes nothing per rank: the validation loss moved there is the same on every rank."""
    path = tmp_path / "train.py"
    path.write_text(HAND_SHARDED.replace("PART", part))
    result = CliRunner().invoke(cli, ["lint", "-q", "--select", "DDP041", str(path)])
    found = [line for line in result.output.splitlines() if "DDP041" in line]
    assert len(found) == 1 and ":21:" in found[0] and "loss.item()" in found[0], result.output


STATE_SEEDED = """import random

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("gloo")
rank = dist.get_rank()
SEED
torch.manual_seed(1234)
data = torch.randn(1000, 4)
target = torch.randn(1000, 1)
model = DDP(nn.Linear(4, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(1000):
    idx = DRAW
    x, y = data[idx], target[idx]
    loss = ((model(x) - y) ** 2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    if loss.item() < 0.05:
        break
dist.destroy_process_group()
"""


@pytest.mark.parametrize(
    "seed, draw",
    [("random.seed(1234 + rank)", "random.sample(range(1000), 8)"), ("np.random.seed(1234 + rank)", "np.random.choice(1000, 8)")],
)
def test_batches_drawn_from_pythons_or_numpys_state_seeded_from_the_rank_are_each_ranks_own(tmp_path: Path, seed: str, draw: str) -> None:
    """With torch seeded alike, torch's draws are the same on every rank; the batches drawn from Python's or numpy's
    state, seeded from the rank, are not (the review of this change: the early stop on them went silent, and under
    torchrun rank 0 left at step 11 while rank 1 waited)."""
    path = tmp_path / "train.py"
    path.write_text(STATE_SEEDED.replace("SEED", seed).replace("DRAW", draw))
    result = CliRunner().invoke(cli, ["lint", "-q", "--select", "DDP041", str(path)])
    assert sum("DDP041" in line for line in result.output.splitlines()) == 1, result.output
