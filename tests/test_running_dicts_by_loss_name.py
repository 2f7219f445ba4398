"""A running dict of losses keyed by their names is no table over the data set (DDP046).

A trial's detection-style loop summed ``running[k] = running.get(k, 0.0) + v.item()`` for ``k, v in
loss_dict.items()``: DDP046 reviewed it as "a table over the whole data set ... written at the batch's sample
indices" (its only review item, a false alarm), because the key came from a value of the batch.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from migrated import migrate_script

PROGRAM = """import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


def main():
    data = TensorDataset(torch.randn(64, 4), torch.randn(64, 1), torch.arange(64))
    loader = DataLoader(data, batch_size=8, shuffle=True)
    model = nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    seen = torch.zeros(64)
    for epoch in range(2):
        running = {}
        for x, y, idx in loader:
            pred = model(x)
            loss_dict = {"mse": ((pred - y) ** 2).mean(), "l1": (pred - y).abs().mean()}
            loss = sum(loss_dict.values()) * (1 + seen[idx].mean())
            opt.zero_grad()
            loss.backward()
            opt.step()
            WRITE
        print(epoch, running)


if __name__ == "__main__":
    main()
"""


@pytest.mark.parametrize(
    ("write", "reviewed"),
    [
        ("for k, v in loss_dict.items():\n                running[k] = running.get(k, 0.0) + v.item()", False),
        ("seen[idx] = seen[idx] + 1", True),  # a table over the data set, written at the batch's sample indices
    ],
    ids=["by-loss-name", "at-sample-indices"],
)
def test_only_a_table_written_at_sample_indices_is_reviewed(tmp_path: Path, write: str, reviewed: bool) -> None:
    _, report, _ = migrate_script(tmp_path, PROGRAM.replace("WRITE", write))
    assert ("DDP046" in report) is reviewed, report
