"""Files that rank 0 writes and every rank reads back (DDP007's barrier).

A trial's program prepared its data shards once (``if os.path.isdir(root): return`` then ``torch.save`` of
each shard) and then globbed and loaded them. The migration saved on rank 0 only, with no barrier (the early
``return`` keeps the ranks apart inside the helper), and said nothing: from an empty folder 4 runs of 6
crashed (rank 1 found the folder and no shard), one trained on part of the data. The ranks meet again where
the helper is called: the barrier goes there. Where no such place exists, a human is asked.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from migrated import migrate_script

SHARDS = '''
import glob
import os

import torch
import torch.nn as nn
from torch.utils.data import ConcatDataset, DataLoader, TensorDataset


def prepare_shards(root="shards", n_shards=4, per_shard=16):
    if os.path.isdir(root):
        return
    os.makedirs(root)
    g = torch.Generator().manual_seed(0)
    for s in range(n_shards):
        x = torch.randn(per_shard, 3, generator=g)
        torch.save((x, (x[:, 0] > 0).long()), os.path.join(root, f"shard-{s}.pt"))


def main():
    torch.manual_seed(0)
    prepare_shards()
    CALLED_AGAIN
    ds = ConcatDataset([TensorDataset(*torch.load(f)) for f in sorted(glob.glob("shards/*.pt"))])
    loader = DataLoader(ds, batch_size=8, shuffle=True)
    model = nn.Linear(3, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        for x, y in loader:
            opt.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
    print("samples", len(ds), flush=True)


if __name__ == "__main__":
    main()
'''


def test_the_preparing_helper_runs_on_rank_0_and_the_ranks_wait_after_it(tmp_path: Path) -> None:
    """The whole helper on rank 0 (its early return too: a rank that saw the folder another rank had just made
    returned and wrote nothing, a review found), every rank waiting after it."""
    migrated, report, code = migrate_script(tmp_path, SHARDS.replace("    CALLED_AGAIN\n", ""))
    assert code == 0, report
    assert "    if runtime.is_main_process():\n        prepare_shards()\n    runtime.barrier()\n" in migrated, migrated
    assert "prepare_shards() (it saves files the program reads back) runs on rank 0 only" in report, report
    assert "        torch.save((x," in migrated  # (the helper itself is unchanged)


@pytest.mark.parametrize(
    "shape",
    [
        ("    prepare_shards()\n", "    ds0 = prepare_shards() or 'shards'\n"),  # the value is used where it is called
        ("        torch.save(", "        if not os.path.exists(os.path.join(root, f'shard-{s}.pt')):\n            torch.save("),
    ],
    ids=["value-used", "inner-condition"],
)
def test_other_shapes_of_the_preparation_are_left_to_a_human_or_run_on_rank_0(tmp_path: Path, shape: tuple[str, str]) -> None:
    source = SHARDS.replace("    CALLED_AGAIN\n", "").replace(*shape)
    migrated, report, _ = migrate_script(tmp_path, source)
    if "or 'shards'" in source:
        assert "review" in report and "the file is read back later" in report, report
    else:
        assert "    if runtime.is_main_process():\n        prepare_shards()\n    runtime.barrier()\n" in migrated, migrated


def test_without_a_place_to_wait_the_read_back_is_left_to_a_human(tmp_path: Path) -> None:
    migrated, report, _ = migrate_script(tmp_path, SHARDS.replace("CALLED_AGAIN", 'prepare_shards("more")'))
    assert not re.search(r"^\s*runtime\.barrier\(\)$", migrated, flags=re.M), migrated
    assert "review" in report and "the file is read back later, so rank 0 alone should write it" in report, report
    assert "if runtime.is_main_process():" not in migrated  # (left as it was, for the human)


@pytest.mark.distributed
def test_the_migrated_shards_are_read_whole_on_every_rank(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    from launch import run_torchrun

    migrate_script(tmp_path, SHARDS.replace("    CALLED_AGAIN\n", ""))
    run = run_torchrun(tmp_path / "train.py", nproc_per_node=2, cwd=tmp_path, timeout=120)
    assert "samples 64" in run.output, run.output


def test_a_helper_that_also_saves_before_its_early_return_is_left_to_a_human(tmp_path: Path) -> None:
    """A save before the early return becomes runtime.save (a barrier): run on rank 0 alone, the helper would
    wait there for ranks that wait elsewhere. The helper stays on every rank, for review."""
    source = SHARDS.replace("    CALLED_AGAIN\n", "").replace(
        'def prepare_shards(root="shards", n_shards=4, per_shard=16):\n',
        'def prepare_shards(root="shards", n_shards=4, per_shard=16):\n    torch.save({"n": n_shards}, "meta.pt")\n',
    )
    migrated, report, _ = migrate_script(tmp_path, source)
    assert "if runtime.is_main_process():\n        prepare_shards()" not in migrated, migrated
    assert "review" in report and "the file is read back later" in report, report


# The program guards the preparation itself (``if LOCAL_RANK == 0:``), its paths spelled by no literal: the
# migration kept the guard and added no barrier, so rank 1 globbed the folder before rank 0 had filled it (3
# runs of 3 crashed, as a previous review found).
GUARDED = SHARDS.replace("    CALLED_AGAIN\n", "").replace(
    "    prepare_shards()\n", '    if int(os.environ.get("LOCAL_RANK", 0)) == 0:\n        prepare_shards()\n'
)


def test_files_rank_0_prepares_under_the_programs_own_guard_are_waited_for(tmp_path: Path) -> None:
    migrated, report, code = migrate_script(tmp_path, GUARDED)
    assert code == 0, report
    assert "        prepare_shards()\n    runtime.barrier()\n    ds = ConcatDataset(" in migrated, migrated
    assert "DDP012" in report and "every rank waits for rank 0's write before reading the file" in report, report


@pytest.mark.parametrize(
    "between",
    ["    runtime.barrier()\n", "    torch.distributed.barrier()\n"],
    ids=["runtime", "torch"],
)
def test_a_barrier_the_program_already_has_after_the_guard_is_enough(tmp_path: Path, between: str) -> None:
    source = GUARDED.replace("        prepare_shards()\n", "        prepare_shards()\n" + between)
    source = source.replace("import torch\n", "import torch\nimport torch.distributed\nfrom ddp_migrate import runtime\n", 1)
    migrated, report, _ = migrate_script(tmp_path, source)
    assert migrated.count("barrier()") == 1, migrated


def test_a_read_of_another_kind_of_file_waits_for_nothing(tmp_path: Path) -> None:
    """Rank 0 writes a log with ``open(..., "w")`` under its guard; every rank then loads tensors from a
    path no literal spells: not the same kind of file, no barrier."""
    source = GUARDED.replace(
        "        prepare_shards()\n", '        with open(os.path.join("logs", "start.txt"), "w") as f:\n            f.write("start")\n'
    )
    migrated, report, _ = migrate_script(tmp_path, source)
    assert not re.search(r"^\s*runtime\.barrier\(\)$", migrated, flags=re.M), migrated


@pytest.mark.distributed
def test_the_guarded_preparation_is_read_whole_on_every_rank(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    from launch import run_torchrun

    migrate_script(tmp_path, GUARDED)
    run = run_torchrun(tmp_path / "train.py", nproc_per_node=2, cwd=tmp_path, timeout=120)
    assert "samples 64" in run.output, run.output
