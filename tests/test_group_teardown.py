"""The process group's end, where the runtime's ``setup()`` makes the group.

- A bare ``destroy_process_group()`` left behind after a program's own ``init_process_group`` became
  ``runtime.setup()``: with gloo a process then aborts at exit about once in fifteen launches, after all its
  work ("terminate called without an active exception", a failed job; CI saw one migrated test program
  abort three launches in a row). It becomes ``runtime.cleanup()``, which also waits for gloo's threads.
- The PyTorch tutorial's ``setup(rank, world_size)`` / ``cleanup()`` in a helper module, with ``mp.spawn(main,
  args=(2,), nprocs=2)`` in the entry: the migration stopped with an internal error (DDP022 rewrote, from the
  helper module, the entry's literal ``2`` that reaches the helper's world size). The entry's count is now
  rewritten by the entry's own fix, as in a one-file program.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from ddp_migrate.cli import cli
from launch import run_python, run_torchrun

DIST_UTILS = '''
import os

import torch.distributed as dist


def setup(rank, world_size):
    os.environ["MASTER_ADDR"] = "localhost"
    os.environ["MASTER_PORT"] = "12355"
    dist.init_process_group("gloo", rank=rank, world_size=world_size)


def cleanup():
    dist.destroy_process_group()
'''

TRAIN = '''
import torch
import torch.multiprocessing as mp
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

from dist_utils import cleanup, setup


def main(rank, world_size):
    setup(rank, world_size)
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(32, 4), torch.randn(32, 1))
    sampler = DistributedSampler(data, num_replicas=world_size, rank=rank)
    loader = DataLoader(data, batch_size=4, sampler=sampler)
    model = DDP(nn.Linear(4, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    seen = 0
    for epoch in range(2):
        sampler.set_epoch(epoch)
        for x, y in loader:
            seen += len(x)
            opt.zero_grad()
            nn.functional.mse_loss(model(x), y).backward()
            opt.step()
    print(f"rank {rank} of {world_size}: {seen} samples, weight sum {model.module.weight.sum().item():.6f}", flush=True)
    cleanup()


if __name__ == "__main__":
    mp.spawn(main, args=(2,), nprocs=2)
'''


def _migrate(folder: Path, files: dict[str, str]) -> str:
    for name, text in files.items():
        (folder / name).write_text(text)
    result = CliRunner().invoke(cli, [str(folder / "train.py")], catch_exceptions=False)
    return result.output


def test_the_tutorials_helper_module_is_migrated_with_its_entry(tmp_path: Path) -> None:
    report = _migrate(tmp_path, {"dist_utils.py": DIST_UTILS, "train.py": TRAIN})
    assert "internal error" not in report and "2 file(s) migrated" in report, report
    helpers = (tmp_path / "dist_utils.py").read_text()
    assert 'runtime.setup("gloo")' in helpers and "init_process_group" not in helpers, helpers
    assert "def cleanup():\n    runtime.cleanup()\n" in helpers, helpers
    assert "import torch.distributed" not in helpers, helpers  # its last use is gone
    entry = (tmp_path / "train.py").read_text()
    assert "    main(runtime.rank(), runtime.world_size())\n" in entry, entry
    assert "DDP022 line 33: world size taken from torchrun" in report, report


@pytest.mark.distributed
def test_the_migrated_tutorial_trains_on_torchrun_and_alone(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    _migrate(tmp_path, {"dist_utils.py": DIST_UTILS, "train.py": TRAIN})
    alone = run_python(tmp_path / "train.py", cwd=tmp_path, timeout=120)
    assert "rank 0 of 1: 64 samples" in alone.output, alone.output
    launch = run_torchrun(tmp_path / "train.py", nproc_per_node=2, cwd=tmp_path, timeout=120)
    found = re.findall(r"rank (\d) of 2: 32 samples, weight sum (-?\d+\.\d{6})", launch.output)
    assert sorted(rank for rank, _ in found) == ["0", "1"], launch.output
    assert found[0][1] == found[1][1], launch.output  # one model: the gradients were averaged


KEPT_GROUP = '''
import torch
import torch.distributed as dist
import torch.nn as nn
from ddp_migrate import runtime


def main():
    runtime.setup()
    model = nn.Linear(4, 1)
    model(torch.ones(2, 4)).sum().backward()
    dist.destroy_process_group(GROUP)


if __name__ == "__main__":
    main()
'''


@pytest.mark.parametrize(
    ("group", "expected"),
    [("", "    runtime.cleanup()\n"), ("group=None", "    dist.destroy_process_group(group=None)\n")],
    ids=["bare", "a group given"],
)
def test_a_bare_destroy_of_the_runtimes_group_becomes_its_cleanup(tmp_path: Path, group: str, expected: str) -> None:
    report = _migrate(tmp_path, {"train.py": KEPT_GROUP.replace("GROUP", group)})
    migrated = (tmp_path / "train.py").read_text()
    assert expected in migrated, report + migrated
    assert ("DDP003" in report) == (group == ""), report


OWN_GROUP = '''
import torch
import torch.distributed as dist
import torch.nn as nn


def main():
    store = dist.FileStore("/tmp/store", 1)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    model = nn.parallel.DistributedDataParallel(nn.Linear(4, 1))
    model(torch.ones(2, 4)).sum().backward()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
'''


def test_a_group_the_program_makes_itself_is_destroyed_as_written(tmp_path: Path) -> None:
    """An ``init_process_group`` with a store stays (the runtime cannot make that group): so does its end."""
    report = _migrate(tmp_path, {"train.py": OWN_GROUP})
    migrated = (tmp_path / "train.py").read_text()
    assert "init_process_group" in migrated and "    dist.destroy_process_group()\n" in migrated, report + migrated
    assert "runtime.cleanup" not in migrated, migrated
