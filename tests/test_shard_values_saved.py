"""A checkpoint that holds a value computed on rank 0's shard of the data (a note of DDP007).

An anomaly detector's threshold, the 95th percentile of the per-sample errors gathered in the last training
epoch, went into the checkpoint: on 2 processes rank 0 wrote the percentile of its half (1.368 against 1.417),
and the report said nothing of the file.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from migrated import migrate_script

PROGRAM = """import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


def main():
    loader = DataLoader(TensorDataset(torch.randn(256, 8)), batch_size=32, shuffle=True)
    model = nn.Sequential(nn.Linear(8, 3), nn.Linear(3, 8))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(3):
        errors = []
        for (x,) in loader:
            err = ((model(x) - x) ** 2).mean(1)
            loss = err.mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            errors.append(err.detach())
    threshold = torch.quantile(torch.cat(errors), 0.95).item()
    torch.save({"model": model.state_dict(), "SAVED": SAVED_VALUE}, "detector.pt")


if __name__ == "__main__":
    main()
"""


@pytest.mark.parametrize(("saved", "noted"), [("threshold", True), ("3", False)], ids=["a-shard-quantile", "a-constant"])
def test_a_checkpoint_holding_a_shard_value_is_noted(tmp_path: Path, saved: str, noted: bool) -> None:
    _, report, code = migrate_script(tmp_path, PROGRAM.replace("SAVED_VALUE", saved).replace('"SAVED"', '"saved"'))
    assert code == 0, report
    assert ("note DDP007" in report and f"the checkpoint holds {saved}, computed on rank 0's share" in report) is noted, report
