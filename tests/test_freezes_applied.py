"""A freeze applied to a wrapped model's layers through ``Module.apply(fn)`` (DDP042).

A trial's detection-style program froze its BatchNorm layers after the wrap, ``model.module.backbone.apply(freeze_bn)``
of ``def freeze_bn(m): if isinstance(m, nn.BatchNorm2d): m.weight.requires_grad = False ...``: every run failed at
the next step ("Expected to have finished reduction in the prior iteration"), with nothing for a human, where the
same freeze written as a loop over the parameters got the review.
"""

from __future__ import annotations

from pathlib import Path

from migrated import migrate_script

PROGRAM = """import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset


def freeze_bn(m):
    if isinstance(m, nn.BatchNorm1d):
        m.eval()
        m.weight.requires_grad = False
        m.bias.requires_grad = False


def main():
    data = TensorDataset(torch.randn(64, 4), torch.randint(0, 2, (64,)))
    loader = DataLoader(data, batch_size=8, shuffle=True)
    model = nn.DataParallel(nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.Linear(8, 2)))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        model.train()
        model.module.apply(freeze_bn)
        for x, y in loader:
            opt.zero_grad()
            F.cross_entropy(model(x), y).backward()
            opt.step()


if __name__ == "__main__":
    main()
"""


def test_a_freeze_applied_after_the_wrap_is_left_to_a_human(tmp_path: Path) -> None:
    _, report, code = migrate_script(tmp_path, PROGRAM)
    assert code == 1, report
    assert "DDP042 requires_grad of model.module changes where the model may already be wrapped" in report, report


def test_a_function_applied_that_freezes_nothing_is_no_change(tmp_path: Path) -> None:
    source = PROGRAM.replace("        m.weight.requires_grad = False\n        m.bias.requires_grad = False\n", "        pass\n")
    _, report, _ = migrate_script(tmp_path, source)
    assert "DDP042" not in report, report
