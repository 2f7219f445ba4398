"""A table over the whole data set written at the batch's sample indices in the training loop (DDP046).

FlexMatch keeps ``selected_label`` (one entry per unlabelled sample), writes ``selected_label[idx[sel]] =
pseudo[sel]`` from each batch and sets the next steps' class thresholds from its counts: once the loader is
sharded each rank fills the entries of its own shard only (92 samples selected alone, 45 on rank 0 of 2; other
weights), and the migration said nothing needed a human.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from migrated import migrate_script

PROGRAM = """import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset


def main():
    data = TensorDataset(torch.arange(256), torch.randn(256, 8))
    loader = DataLoader(data, batch_size=32, shuffle=True)
    model = nn.Linear(8, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    selected = torch.full((256,), -1, dtype=torch.long)
    for epoch in range(3):
        for step, (idx, x) in enumerate(loader):
            counts = torch.bincount(selected[selected >= 0], minlength=4).float()
            threshold = 0.5 + 0.1 * counts / counts.sum().clamp(min=1)
            probs = F.softmax(model(x), dim=1)
            confidence, pseudo = probs.max(1)
            keep = confidence > threshold[pseudo]
            loss = (F.cross_entropy(model(x), pseudo, reduction="none") * keep).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            WRITE


if __name__ == "__main__":
    main()
"""


@pytest.mark.parametrize(
    ("write", "reported"),
    [("selected[idx[keep]] = pseudo[keep]", True), ("selected[step] = pseudo[0]", False)],
    ids=["at-the-batchs-samples", "at-the-step"],
)
def test_a_table_written_at_the_batchs_samples_is_reviewed(tmp_path: Path, write: str, reported: bool) -> None:
    _, report, _ = migrate_script(tmp_path, PROGRAM.replace("WRITE", write))
    assert ("DDP046" in report and "writes this process's samples into `selected`" in report) is reported, report
