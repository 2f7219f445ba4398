"""BatchNorm inside a part the wrapped model is built from under a name of its own (DDP030).

``body = mlp()`` (a Sequential with a BatchNorm1d) then ``model = nn.Sequential(body, nn.Linear(16, 1))``: the
wrap was not converted and nothing was noted (running statistics of rank 0's shard: -0.547 against -0.575),
where the same layers written inline were.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from migrated import migrate_script

PROGRAM = """import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset


def mlp():
    return nn.Sequential(nn.Linear(8, 16), NORM(16), nn.ReLU())


def main():
    loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=16)
    body = mlp()
    model = nn.Sequential(body, nn.Linear(16, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    for epoch in range(3):
        for xb, yb in loader:
            loss = F.mse_loss(model(xb), yb)
            opt.zero_grad()
            loss.backward()
            opt.step()


if __name__ == "__main__":
    main()
"""


@pytest.mark.parametrize(("norm", "converted"), [("nn.BatchNorm1d", True), ("nn.LayerNorm", False)])
def test_a_part_built_under_its_own_name_is_read_for_batchnorm(tmp_path: Path, norm: str, converted: bool) -> None:
    migrated, report, _ = migrate_script(tmp_path, PROGRAM.replace("NORM", norm))
    assert ("runtime.convert_sync_batchnorm(model)" in migrated) is converted, migrated
    assert ("DDP030" in report) is converted, report
