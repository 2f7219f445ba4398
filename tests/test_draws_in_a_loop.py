"""A split or subset drawn anew at each pass of a loop (DDP043's fix).

A trial trained each epoch on a fresh random quarter of its data (``torch.randperm(len(data))[:16]`` inside
``for epoch in range(6):``, torch unseeded). The fix gave the draw ``generator=torch.Generator().manual_seed(0)``
right there: every epoch then took the same 16 samples (16 distinct samples seen in 6 epochs where the original
saw 53), even on one process, with nothing for a human. In a loop over ``range`` the seed is now its counter (alike
on every rank, another subset each epoch); in any other loop the draw is a review.
"""

from __future__ import annotations

from pathlib import Path

from launch import run_python
from migrated import migrate_script

PROGRAM = """import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Subset, TensorDataset


def main():
    data = TensorDataset(torch.randn(64, 4), torch.randint(0, 2, (64,)))
    model = nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    seen = set()
    LOOP
        chosen = torch.randperm(len(data))[:16].tolist()
        seen.update(chosen)
        loader = DataLoader(Subset(data, chosen), batch_size=8, shuffle=True)
        for x, y in loader:
            opt.zero_grad()
            F.cross_entropy(model(x), y).backward()
            opt.step()
    print("distinct", len(seen))


if __name__ == "__main__":
    main()
"""


def test_a_subset_drawn_each_epoch_is_seeded_by_the_epoch(tmp_path: Path) -> None:
    migrated, report, code = migrate_script(tmp_path, PROGRAM.replace("LOOP", "for epoch in range(6):"))
    assert code == 0, report
    assert "torch.randperm(len(data), generator=torch.Generator().manual_seed(epoch))" in migrated, migrated
    assert "(the same split on every rank, another at each epoch)" in report
    distinct = int(run_python(tmp_path / "train.py", cwd=tmp_path, timeout=120).stdout.split()[-1])
    assert distinct > 16  # six different quarters (a fixed seed: the same 16 samples every epoch)


def test_a_subset_drawn_in_a_loop_without_a_counter_is_left_to_a_human(tmp_path: Path) -> None:
    migrated, report, code = migrate_script(tmp_path, PROGRAM.replace("LOOP", "for stage in (\"warm\", \"main\"):"))
    assert code == 1, report
    assert "DDP043 the random order this split takes its Subset indices from differs on every rank" in report
    assert "anew at each pass of the loop around it" in report
    assert "manual_seed(0)" not in migrated
