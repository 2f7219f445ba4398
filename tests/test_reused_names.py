"""A name the evaluation reuses from the training loop (``logits``, ``loss``) holds the evaluation's value there.

The per-rank facts were per name and scope: ``logits = model(src)`` on the training shard made every ``logits``
of the function per rank, and the perplexity computed on the whole validation set after it got a DDP041 review
(an error in lint) though every rank printed the same value. A use now reads the binding in effect where
straight-line code shows it (the last assignment before it in its block or a block around it, the loop whose
target it is); where a branch or a later statement of a loop around it may rebind the name, every binding counts.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from ddp_migrate.cli import cli

PROGRAM = """import math
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
model = nn.DataParallel(nn.Linear(8, 5))
criterion = nn.CrossEntropyLoss()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
train_loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randint(0, 5, (64,))), batch_size=16, shuffle=True)
val_loader = DataLoader(TensorDataset(torch.randn(32, 8), torch.randint(0, 5, (32,))), batch_size=16)
best_ppl = float("inf")
for epoch in range(3):
    for src, tgt in train_loader:
        logits = model(src)
        loss = criterion(logits, tgt)
        opt.zero_grad()
        loss.backward()
        opt.step()
    total_loss, total = 0.0, 0
    with torch.no_grad():
        for src, tgt in EVAL_LOADER:
            EVAL_LOGITS
            loss = criterion(logits, tgt)
            total_loss += loss.item() * len(tgt)
            total += len(tgt)
    ppl = math.exp(total_loss / total)
    if ppl < best_ppl:
        best_ppl = ppl
    elif epoch > 1:
        break
"""


def reviews(tmp_path: Path, loader: str = "val_loader", logits: str = "logits = model(src)") -> list[str]:
    path = tmp_path / "train.py"
    path.write_text(PROGRAM.replace("EVAL_LOADER", loader).replace("EVAL_LOGITS", logits))
    result = CliRunner().invoke(cli, ["--diff", str(path)])
    assert result.exit_code in (0, 1), result.output
    return [line for line in result.output.splitlines() if line.strip().startswith("review") and "DDP041" in line]


def test_the_evaluations_own_logits_and_loss_are_the_same_on_every_rank(tmp_path: Path) -> None:
    assert reviews(tmp_path) == []


def test_an_evaluation_over_the_training_shard_is_still_each_ranks_own(tmp_path: Path) -> None:
    assert len(reviews(tmp_path, loader="train_loader")) == 1


@pytest.mark.parametrize(
    "logits",
    [
        "if len(tgt) > 1:\n                logits = model(src)",  # bound on one path: the training's may reach
        "pass",  # not bound in the evaluation: the training loop's last logits is read
    ],
)
def test_a_binding_that_may_not_replace_the_trainings_keeps_it_per_rank(tmp_path: Path, logits: str) -> None:
    assert len(reviews(tmp_path, logits=logits)) == 1
