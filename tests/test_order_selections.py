"""Hard-example selection by order over the batch (OHEM: sort the per-pixel losses, keep the top ones) (DDP050).

A trial's BiSeNet-style OhemCELoss sorted ``criteria(logits, labels).view(-1)`` and kept at least ``n_min`` pixels;
another kept the top ``k`` of ``mse_loss(..., reduction="none").flatten()``. Under DDP each rank kept ``k`` of its
half: the weights came out 155.5611 / 3.3720 where the original and one process gave 155.5682 / 3.8006, with no
review and no note. The selection is now reviewed like other statistics of the batch.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from migrated import lint_findings

PROGRAM = """import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


class HardLoss(nn.Module):
    def __init__(self, k=8):
        super().__init__()
        self.k = k

    def forward(self, out, y):
        BODY


data = TensorDataset(torch.randn(64, 4), torch.randint(0, 3, (64,)))
loader = DataLoader(data, batch_size=16, sampler=DistributedSampler(data))
model = DistributedDataParallel(nn.Linear(4, 3))
criterion = HardLoss()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for x, y in loader:
    opt.zero_grad()
    criterion(model(x), y).backward()
    opt.step()
"""

SELECTIONS = {
    "sort-a-flat-view": 'loss = F.cross_entropy(out, y, reduction="none").view(-1)\n        loss, _ = torch.sort(loss, descending=True)\n        return loss[: self.k].mean()',
    "topk-of-a-flattening": 'return F.cross_entropy(out, y, reduction="none").flatten().topk(self.k)[0].mean()',
}


@pytest.mark.parametrize("selection", sorted(SELECTIONS))
def test_a_selection_by_order_over_the_batch_is_reviewed(tmp_path: Path, selection: str) -> None:
    found = lint_findings(tmp_path, PROGRAM.replace("BODY", SELECTIONS[selection]), "DDP050")
    assert any("orders the values of every sample of this process's batch" in line for line in found), found


def test_a_top_k_over_each_samples_classes_is_no_selection_of_samples(tmp_path: Path) -> None:
    body = "top = out.topk(2, dim=1)[0]\n        return F.cross_entropy(out, y) + 0.1 * top.mean()"
    assert lint_findings(tmp_path, PROGRAM.replace("BODY", body), "DDP050") == []


def test_a_count_of_hard_samples_is_no_summed_loss(tmp_path: Path) -> None:
    """The number kept, ``int((loss > 0.5).sum())``, counts samples: DDP039 said the loss summed over the batch and
    advised scaling it by the world size (which moved the result further from the original's)."""
    body = (
        'loss = F.cross_entropy(out, y, reduction="none").flatten()\n'
        "        k = max(self.k, int((loss > 0.5).sum()))\n"
        "        return loss.sort(descending=True)[0][:k].mean()"
    )
    found = lint_findings(tmp_path, PROGRAM.replace("BODY", body), "DDP039,DDP050")
    assert not any("DDP039" in line for line in found), found
    assert any("DDP050" in line and "orders the values" in line for line in found), found
