"""The index of ``enumerate(loader)`` counts the passes, the same on every rank, also under a progress bar
(``tqdm(enumerate(loader), total=nb)``) or through a name (YOLOv5's ``pbar = enumerate(train_loader)``, then ``pbar =
tqdm(pbar, total=nb)``). A trial's DDP041 (an error) said an accumulation step decided on ``ni = i + nb * epoch``
was this rank's shard's decision once the loop went through a progress bar."""

from __future__ import annotations

from pathlib import Path

import pytest

from migrated import migrate_script

PROGRAM = """
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset
from tqdm import tqdm


def main():
    ds = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
    loader = DataLoader(ds, batch_size=16, shuffle=True)
    model = nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    nb = len(loader)
    last_opt_step = -1
    for epoch in range(2):
        ITERATED
            ni = i + nb * epoch
            loss = F.mse_loss(model(x), y)
            loss.backward()
            if DECISION:
                opt.step()
                opt.zero_grad()
                last_opt_step = ni


if __name__ == "__main__":
    main()
"""

LOOPS = {
    "progress-bar": "for i, (x, y) in tqdm(enumerate(loader), total=nb):",
    "name": "pbar = enumerate(loader)\n        for i, (x, y) in pbar:",
    "name-wrapped-again": "pbar = enumerate(loader)\n        if epoch >= 0:\n            pbar = tqdm(pbar, total=nb)\n        for i, (x, y) in pbar:",
}


@pytest.mark.parametrize("loop", LOOPS.values(), ids=LOOPS.keys())
def test_a_step_decided_on_the_pass_index_is_every_ranks(tmp_path: Path, loop: str) -> None:
    text, report, _ = migrate_script(tmp_path, PROGRAM.replace("ITERATED", loop).replace("DECISION", "ni - last_opt_step >= 2"))
    assert "DDP041" not in report, report


@pytest.mark.parametrize("loop", LOOPS.values(), ids=LOOPS.keys())
def test_a_step_decided_on_the_batch_is_still_this_ranks(tmp_path: Path, loop: str) -> None:
    text, report, _ = migrate_script(tmp_path, PROGRAM.replace("ITERATED", loop).replace("DECISION", "loss.item() > 0.5"))
    assert "DDP041 `loss.item() > 0.5` decides on" in report, report
