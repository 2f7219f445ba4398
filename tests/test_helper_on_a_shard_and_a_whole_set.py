"""A helper that takes a part of the data it is handed (``get_batch(source, i)``: ``data = source[i:i + 8]``,
returned as an input and its target) called on this rank's shard in training and on the whole validation set in
``evaluate`` (a trial's word-language model, once its columns were split by rank): the validation loss is the same on
every rank, yet a DDP041 error said the learning-rate decision on it was this rank's."""

from __future__ import annotations

from pathlib import Path

from migrated import lint_findings

PROGRAM = """
import torch
import torch.nn as nn
import torch.nn.functional as F
from ddp_migrate import runtime
from torch.nn.parallel import DistributedDataParallel

runtime.setup()
torch.manual_seed(0)
train_x = torch.randn(64, 8)[runtime.rank()::runtime.world_size()]
val_x = torch.randn(32, 8)
model = DistributedDataParallel(nn.Linear(8, 8))
opt = torch.optim.SGD(model.parameters(), lr=0.1)


def get_batch(source, i):
    data = source[i:i + 8]
    return data, data


def evaluate(x):
    with torch.no_grad():
        xb, t = get_batch(x, 0)
        return F.mse_loss(model(xb), t).item()


best = None
for epoch in range(3):
    for i in range(0, len(train_x), 8):
        xb, t = get_batch(train_x, i)
        loss = F.mse_loss(model(xb), t)
        opt.zero_grad()
        loss.backward()
        opt.step()
    val = evaluate(val_x)
    STOP
    if best is None or val < best:
        best = val
    else:
        for g in opt.param_groups:
            g["lr"] /= 4
runtime.cleanup()
"""


def test_a_decision_on_the_whole_validation_set_is_every_ranks(tmp_path: Path) -> None:
    findings = lint_findings(tmp_path, PROGRAM.replace("STOP", "pass"), "DDP041")
    assert not any("DDP041" in f for f in findings), findings


def test_a_decision_on_the_training_shard_is_still_this_ranks(tmp_path: Path) -> None:
    findings = lint_findings(tmp_path, PROGRAM.replace("STOP", "if loss.item() < 1e-9:\n        break"), "DDP041")
    assert any("DDP041 `loss.item() < 1e-9` decides on loss" in f for f in findings), findings
    assert not any("decides on best" in f for f in findings), findings
