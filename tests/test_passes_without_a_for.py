"""Passes over the training loader written without a ``for`` over it (DDP045).

``pos_weight`` for ``BCEWithLogitsLoss`` computed from ``it = iter(loader)`` and ``next(it)`` in a ``while True``
loop, or from ``torch.cat(list(map(lambda b: b[1], loader)))``: once the loader is sharded each rank computes
it from its share (1.327 where the original had 1.438), and the migration said nothing needed a human; the same
pass written as ``for _, y in loader`` got the review.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from migrated import migrate_script

PROGRAM = """import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

STATS


def main():
    x = torch.randn(256, 8)
    y = (x[:, :3] > 0).float()
    loader = DataLoader(TensorDataset(x, y), batch_size=32, shuffle=True)
    pos_weight = label_stats(loader)
    model = nn.Linear(8, 3)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    criterion = nn.BCEWithLogitsLoss(pos_weight=pos_weight)
    for epoch in range(3):
        for xb, yb in loader:
            opt.zero_grad()
            criterion(model(xb), yb).backward()
            opt.step()
        PEEK


if __name__ == "__main__":
    main()
"""
THROUGH_NEXT = '''def label_stats(loader):
    it = iter(loader)
    pos, count = torch.zeros(3), 0
    while True:
        try:
            _, y = next(it)
        except StopIteration:
            break
        pos += y.sum(0)
        count += y.size(0)
    return (count - pos) / pos'''
THROUGH_MAP = '''def label_stats(loader):
    y = torch.cat(list(map(lambda batch: batch[1], loader)))
    return (len(y) - y.sum(0)) / y.sum(0)'''
THROUGH_FOR = '''def label_stats(loader):
    return torch.ones(3)'''


@pytest.mark.parametrize("stats", [THROUGH_NEXT, THROUGH_MAP], ids=["iter-and-next", "list-of-map"])
def test_a_pass_without_a_for_is_reviewed(tmp_path: Path, stats: str) -> None:
    _, report, code = migrate_script(tmp_path, PROGRAM.replace("STATS", stats).replace("PEEK", "pass"))
    assert "DDP045 this pass over the training loader does not train" in report and code == 1, report


def test_a_look_at_one_batch_is_no_pass(tmp_path: Path) -> None:
    peek = "first, _ = next(iter(loader))\n        print(first.shape)"
    _, report, _ = migrate_script(tmp_path, PROGRAM.replace("STATS", THROUGH_FOR).replace("PEEK", peek))
    assert "DDP045" not in report, report
