"""DDP010 on writes that are prints in all but name: ``tqdm.write(msg)`` and ``sys.stdout.write`` (a trial: each rank wrote its own loss line, 0.7282 and 0.7908, under the progress bar the
migration had disabled off rank 0)."""

from __future__ import annotations

from pathlib import Path

import pytest
from migrated import migrate_script

SCRIPT = """
import os
import sys

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset
from tqdm import tqdm

torch.manual_seed(0)
model = nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
loader = DataLoader(TensorDataset(torch.randn(32, 4), torch.randn(32, 1)), batch_size=8)
for epoch in range(2):
    for x, y in tqdm(loader):
        loss = nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    tqdm.write(f"epoch {epoch}")
    sys.stdout.write(f"written {epoch}\\n")
    sys.stderr.write(f"warned {epoch}\\n")
    sys.stdout.write(f"rank-aware {os.environ.get('RANK', '0')}\\n")
"""


def test_writes_of_lines_go_through_print0(tmp_path: Path) -> None:
    pytest.importorskip("tqdm")
    migrated, report, code = migrate_script(tmp_path, SCRIPT)
    assert code == 0, report
    assert 'runtime.print0(f"epoch {epoch}")' in migrated, migrated
    assert 'runtime.print0(f"written {epoch}\\n", end="")' in migrated, migrated
    assert 'sys.stderr.write(f"warned {epoch}\\n")' in migrated, migrated  # a rank's own diagnostics
    assert 'sys.stdout.write(f"rank-aware' in migrated, migrated  # it says which rank writes: every rank's


@pytest.mark.distributed
def test_each_line_is_written_once_under_torchrun(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("tqdm")
    from launch import run_torchrun

    migrate_script(tmp_path, SCRIPT)
    result = run_torchrun(tmp_path / "train.py", nproc_per_node=2, cwd=tmp_path, env={"OMP_NUM_THREADS": "1"}, timeout=120)
    assert result.stdout.count("epoch 1") == 1 and result.stdout.count("written 1") == 1, result.stdout
    assert result.stderr.count("warned 1") == 2, result.stderr
    assert result.stdout.count("rank-aware") == 4, result.stdout


def test_a_write_to_a_stream_given_by_position_is_left_to_a_human(tmp_path: Path) -> None:
    """``tqdm.write(msg, sys.stderr)``: print would print the stream object; reported, not rewritten."""
    pytest.importorskip("tqdm")
    migrated, report, _ = migrate_script(tmp_path, SCRIPT.replace('tqdm.write(f"epoch {epoch}")', 'tqdm.write(f"epoch {epoch}", sys.stderr)'))
    assert 'tqdm.write(f"epoch {epoch}", sys.stderr)' in migrated and "DDP010 tqdm.write() writes on every process" in report, report


NAN_STOP = '''import math
import sys

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


def main():
    model = nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(TensorDataset(torch.randn(64, 4), torch.randn(64, 1)), batch_size=8, shuffle=True)
    for epoch in range(2):
        for x, y in loader:
            loss = nn.functional.mse_loss(model(x), y)
            if not math.isfinite(loss.item()):
                print(f"Loss is {loss.item()}, stopping training")
                sys.exit(1)
            opt.zero_grad()
            loss.backward()
            opt.step()
        print(f"epoch {epoch} loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
'''


def test_a_print_that_says_why_the_process_stops_stays_on_every_rank(tmp_path: Path) -> None:
    """torchvision's ``print(f"Loss is {loss_value}, stopping training"); sys.exit(1)``: on rank 0 alone, the rank that
    stops would die without a word (a trial). The epoch's progress line still goes to rank 0."""
    migrated, report, _ = migrate_script(tmp_path, NAN_STOP)
    assert '                print(f"Loss is {loss.item()}, stopping training")' in migrated, migrated
    assert 'runtime.print0(f"epoch {epoch} loss {loss.item():.4f}")' in migrated, migrated


def test_a_print_before_a_loop_that_may_raise_is_no_reason_to_stop(tmp_path: Path) -> None:
    """A raise inside a later loop's branch ends the process on some paths only: the print is progress output."""
    source = NAN_STOP.replace(
        '        print(f"epoch {epoch} loss {loss.item():.4f}")\n',
        '        print(f"epoch {epoch} loss {loss.item():.4f}")\n        for p in model.parameters():\n            if p.isnan().any():\n                raise RuntimeError("nan")\n',
    )
    migrated, _, _ = migrate_script(tmp_path, source)
    assert 'runtime.print0(f"epoch {epoch} loss {loss.item():.4f}")' in migrated, migrated
