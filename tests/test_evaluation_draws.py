"""A batch drawn with ``next(iter(val_loader))`` under ``torch.no_grad()`` in the epoch loop is evaluation.

A trial found the validation loader taken for a training one: it got a DistributedSampler and a per-process
batch, so the printed validation loss (and any decision on it) covered half the set under 2 processes
(0.4899579 over 16 samples against 0.9385043 over 32), with no review item. A batch drawn under ``no_grad``
whose values are used, outside that block, only where nothing is stored or trained is now evaluation; one
drawn there and trained on outside it is still training.
"""

from __future__ import annotations

from pathlib import Path

from migrated import migrate_script

VALIDATION_DRAW = '''
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
train_loader = DataLoader(TensorDataset(torch.randn(64, 5), torch.randn(64, 1)), batch_size=16)
val_loader = DataLoader(TensorDataset(torch.randn(32, 5), torch.randn(32, 1)), batch_size=32)
model = nn.Linear(5, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.05)
for epoch in range(2):
    for x, y in train_loader:
        loss = F.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    with torch.no_grad():
        xv, yv = next(iter(val_loader))
        val = F.mse_loss(model(xv), yv).item()
    print(f"epoch {epoch} val {val:.7f} n_val {len(xv)}")
'''

AUGMENTED_UNDER_NO_GRAD = '''
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

loader = DataLoader(TensorDataset(torch.randn(64, 5), torch.randn(64, 1)), batch_size=16, shuffle=True)
model = nn.Linear(5, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.05)
batches = iter(loader)
for step in range(4):
    with torch.no_grad():
        x, y = next(batches)
        x = x + 0.1 * torch.randn_like(x)
    loss = F.mse_loss(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
'''


def test_a_validation_batch_drawn_without_gradients_is_not_sharded(tmp_path: Path) -> None:
    migrated, report, code = migrate_script(tmp_path, VALIDATION_DRAW)
    assert code == 0, report
    assert migrated.count("DistributedSampler(") == 1 and "batch_size=32)" in migrated, migrated
    assert "set_epoch(val_loader" not in migrated and "val_loader.sampler" not in migrated, migrated


def test_a_batch_drawn_without_gradients_and_trained_on_is_still_sharded(tmp_path: Path) -> None:
    migrated, report, _ = migrate_script(tmp_path, AUGMENTED_UNDER_NO_GRAD)
    assert "sampler=DistributedSampler(" in migrated, report + migrated


def test_a_batch_drawn_without_gradients_and_kept_for_later_is_still_sharded(tmp_path: Path) -> None:
    """``buffer.append((x, y))`` keeps the batch: what is kept may train later (a replay buffer)."""
    source = AUGMENTED_UNDER_NO_GRAD.replace(
        "        x = x + 0.1 * torch.randn_like(x)\n    loss = F.mse_loss(model(x), y)\n",
        "    buffer.append((x, y))\n    bx, by = buffer[-1]\n    loss = F.mse_loss(model(bx), by)\n",
    ).replace("batches = iter(loader)\n", "batches = iter(loader)\nbuffer = []\n")
    assert "buffer.append((x, y))" in source
    migrated, report, _ = migrate_script(tmp_path, source)
    assert "sampler=DistributedSampler(" in migrated, report + migrated
