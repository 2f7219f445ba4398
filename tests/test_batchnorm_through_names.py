"""BatchNorm layers built through a name bound to the class (``norm = nn.BatchNorm1d``; ``norm(8)``) (DDP030).

A trial's adversarial-training model chose its normalisation as ``norm = nn.BatchNorm1d if use_bn else nn.Identity``
and built ``norm(8)`` inside ``nn.Sequential``: DDP030 saw no BatchNorm, so the model was neither converted to
SyncBatchNorm for CUDA nor noted on the CPU (2 processes 145.057 where the original gave 144.997).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from migrated import migrate_script

PROGRAM = """import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset


def main(use_bn=True):
    CHOICE
    data = TensorDataset(torch.randn(64, 4), torch.randint(0, 2, (64,)))
    loader = DataLoader(data, batch_size=8, shuffle=True, drop_last=True)
    model = nn.Sequential(nn.Linear(4, 8), norm(8), nn.ReLU(), nn.Linear(8, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        for x, y in loader:
            opt.zero_grad()
            F.cross_entropy(model(x), y).backward()
            opt.step()


if __name__ == "__main__":
    main()
"""


@pytest.mark.parametrize(
    "choice",
    ["norm = nn.BatchNorm1d", "norm = nn.BatchNorm1d if use_bn else nn.Identity"],
    ids=["alias", "chosen-by-a-flag"],
)
def test_batchnorm_built_through_a_name_is_converted_for_cuda(tmp_path: Path, choice: str) -> None:
    migrated, report, _ = migrate_script(tmp_path, PROGRAM.replace("CHOICE", choice))
    assert "DDP030" in report and "convert_sync_batchnorm" in migrated, report


def test_a_name_bound_to_another_layer_is_no_batchnorm(tmp_path: Path) -> None:
    migrated, report, _ = migrate_script(tmp_path, PROGRAM.replace("CHOICE", "norm = nn.LayerNorm"))
    assert "DDP030" not in report and "convert_sync_batchnorm" not in migrated, report
