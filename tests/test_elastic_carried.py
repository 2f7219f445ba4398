"""Values an elastic (``--elastic``) migration's snapshot does not keep across a restart (DDP013).

A name set before the epoch loop and updated in it (``best_acc``) got the review; a list filled in place
(``history.append(acc)``) did not: after a restart at epoch 4 the history written at the end held 2 epochs of 6.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from ddp_migrate.cli import cli

PROGRAM = """import json

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset


def main():
    data = TensorDataset(torch.randn(256, 8), torch.randint(0, 2, (256,)))
    loader = DataLoader(data, batch_size=32, shuffle=True)
    model = nn.Linear(8, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    CARRIED
    for epoch in range(6):
        for x, y in loader:
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
        UPDATE
    with open("history.json", "w") as f:
        json.dump(str(CARRIED_NAME), f)


if __name__ == "__main__":
    main()
"""


@pytest.mark.parametrize(
    ("carried", "update", "name"),
    [
        ("history = []", "history.append(loss.item())", "history"),
        ("seen = {}", "seen.update({epoch: loss.item()})", "seen"),
        ("best = 1e9", "best = min(best, loss.item())", "best"),
        # A trial: an attribute set on the model, halved each epoch (no state_dict() holds it; reached through .module)
        ("model.scale = 1.0", "model.scale = model.scale * 0.5", "model.scale"),
    ],
    ids=["a-list-appended", "a-dict-updated", "a-name-rebound", "an-attribute-of-the-model"],
)
def test_what_the_epochs_carry_over_is_reviewed(tmp_path: Path, carried: str, update: str, name: str) -> None:
    script = tmp_path / "train.py"
    script.write_text(PROGRAM.replace("CARRIED_NAME", name).replace("CARRIED", carried).replace("UPDATE", update))
    result = CliRunner().invoke(cli, ["--elastic", str(script)])
    assert f"DDP013 `{name}` carries over from one epoch to the next but the snapshot does not keep it" in result.output, result.output
