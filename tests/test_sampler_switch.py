"""A ``DistributedSampler`` chosen by the program's own switch, beside a model wrapped whatever it says.

A trial's silent wrong: ``sampler = DistributedSampler(ds) if args.distributed else None`` with a
``--distributed`` flag, and an unconditional ``nn.DataParallel``. The migration made the wrap DDP and set the
group up, but a torchrun launch leaves the flag off: every process trained on the whole data set, and the
report said nothing needed a human. The switch is now also true under torchrun (as for a switched wrap), and
a sampler that may be none gets ``runtime.set_epoch`` (the loader's own sampler has no ``set_epoch``).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from ddp_migrate.cli import cli
from launch import run_python, run_torchrun

FLAGGED = '''
import argparse
import os

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--distributed", action="store_true")
    args = parser.parse_args()
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
    sampler = DistributedSampler(data) if args.distributed else None
    loader = DataLoader(data, batch_size=8, shuffle=(sampler is None), sampler=sampler)
    WRAP
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    seen = 0
    for epoch in range(2):
        if sampler is not None:
            sampler.set_epoch(epoch)
        for x, y in loader:
            seen += len(x)
            loss = nn.functional.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
    weight = sum(p.sum().item() for p in model.parameters())
    os.write(1, f"samples {seen} weight {weight:.6f}\\n".encode())  # every rank (a print would become print0)


if __name__ == "__main__":
    main()
'''

DATA_PARALLEL = "model = nn.DataParallel(nn.Linear(4, 1))"
UNWRAPPED = "model = nn.Linear(4, 1)"


def _migrate(path: Path, text: str, *options: str) -> str:
    path.write_text(text)
    return CliRunner().invoke(cli, [*options, str(path)], catch_exceptions=False).output


@pytest.mark.parametrize("wrap", [DATA_PARALLEL, UNWRAPPED], ids=["DataParallel", "no wrap"])
def test_the_switch_is_also_true_under_torchrun(tmp_path: Path, wrap: str) -> None:
    report = _migrate(tmp_path / "train.py", FLAGGED.replace("WRAP", wrap))
    migrated = (tmp_path / "train.py").read_text()
    assert "    args = parser.parse_args()\n    args.distributed = args.distributed or runtime.world_size() > 1\n" in migrated, report + migrated
    assert "DDP011 line 14: args.distributed is also true under torchrun" in report, report
    assert "DistributedDataParallel(" in migrated, migrated


def test_lint_names_the_sampler_the_switch_keeps_off(tmp_path: Path) -> None:
    report = _migrate(tmp_path / "train.py", FLAGGED.replace("WRAP", DATA_PARALLEL), "lint", "--select", "DDP011")
    assert re.search(
        r"train\.py:17:\d+: DDP011 DistributedSampler only under `args\.distributed`, which a torchrun launch leaves "
        r"off while the model is wrapped anyway: every process would train on the whole data set",
        report,
    ), report


LAUNCH_AWARE = '''
import os

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

distributed = int(os.environ.get("WORLD_SIZE", 1)) > 1
data = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
sampler = DistributedSampler(data) if distributed else None
loader = DataLoader(data, batch_size=8, sampler=sampler)
model = nn.DataParallel(nn.Linear(4, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for x, y in loader:
    nn.functional.mse_loss(model(x), y).backward()
    opt.step()
'''


def test_a_switch_that_follows_the_launch_is_left_alone(tmp_path: Path) -> None:
    report = _migrate(tmp_path / "train.py", LAUNCH_AWARE, "lint", "--select", "DDP011")
    assert "DDP011" not in report, report


STATEMENT_IF = '''
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

use_dist = False
data = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
if use_dist:
    sampler = DistributedSampler(data)
else:
    sampler = None
loader = DataLoader(data, batch_size=8, sampler=sampler)
model = nn.DataParallel(nn.Linear(4, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for epoch in range(2):
    for x, y in loader:
        nn.functional.mse_loss(model(x), y).backward()
        opt.step()
'''


def test_a_sampler_chosen_in_an_if_statement_and_maybe_none(tmp_path: Path) -> None:
    """The switch's own assignment is extended; ``loader.sampler`` may be the loader's own ``SequentialSampler``
    (no ``set_epoch``) on a plain run, so the epoch is passed through the runtime."""
    report = _migrate(tmp_path / "train.py", STATEMENT_IF)
    migrated = (tmp_path / "train.py").read_text()
    assert "use_dist = False or runtime.world_size() > 1\n" in migrated, report + migrated
    assert "    runtime.set_epoch(loader, epoch)\n" in migrated and "loader.sampler.set_epoch" not in migrated, migrated


@pytest.mark.distributed
def test_the_migrated_program_shards_its_data_under_torchrun(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    script = tmp_path / "train.py"
    _migrate(script, FLAGGED.replace("WRAP", DATA_PARALLEL))
    alone = run_python(script, cwd=tmp_path, timeout=120)
    assert "samples 128 " in alone.output, alone.output
    launch = run_torchrun(script, nproc_per_node=2, cwd=tmp_path, timeout=120)
    found = re.findall(r"samples (\d+) weight (-?\d+\.\d{6})", launch.output)
    assert [samples for samples, _ in found] == ["64", "64"], launch.output  # half of 64 samples, two epochs
    assert found[0][1] == found[1][1], launch.output  # one model: the gradients were averaged


@pytest.mark.parametrize(
    "chosen",
    [
        "sampler = None if not args.distributed else DistributedSampler(data)",
        "if not args.distributed:\n        sampler = None\n    else:\n        sampler = DistributedSampler(data)",
        "sampler = DistributedSampler(data) if args.distributed and len(data) > 1 else None",
    ],
    ids=["negated-expression", "negated-statement", "and-test"],
)
def test_a_switch_spelled_otherwise_is_turned_on_too(tmp_path: Path, chosen: str) -> None:
    source = FLAGGED.replace("WRAP", DATA_PARALLEL).replace("sampler = DistributedSampler(data) if args.distributed else None", chosen)
    report = _migrate(tmp_path / "train.py", source)
    migrated = (tmp_path / "train.py").read_text()
    assert "    args.distributed = args.distributed or runtime.world_size() > 1\n" in migrated, report + migrated
