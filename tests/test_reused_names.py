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


RUNNING = """import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
model = nn.DataParallel(nn.Linear(8, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=16, shuffle=True)
for epoch in range(30):
    INIT
    BODY
"""


@pytest.mark.parametrize(
    "init, body",
    [
        # changed in place: the binding of ``stats`` in effect is no longer the whole story
        ("stats = torch.zeros(2)", "for x, y in loader:\n        loss = nn.functional.mse_loss(model(x), y)\n        opt.zero_grad()\n        loss.backward()\n        opt.step()\n        stats[0] = loss.item()\n    if stats[0] < 1.0:\n        break"),
        ('logs = {"loss": 0.0}', 'for x, y in loader:\n        loss = nn.functional.mse_loss(model(x), y)\n        opt.zero_grad()\n        loss.backward()\n        opt.step()\n        logs["loss"] += loss.item()\n    if logs["loss"] < 1.0:\n        break'),
        # read in the try's else: the try body bound it
        ("last = 0.0", "try:\n        for x, y in loader:\n            loss = nn.functional.mse_loss(model(x), y)\n            opt.zero_grad()\n            loss.backward()\n            opt.step()\n            last = loss.item()\n    except KeyboardInterrupt:\n        pass\n    else:\n        if last < 1.0:\n            break"),
        # read in a finally
        ("last = 0.0", "try:\n        for x, y in loader:\n            loss = nn.functional.mse_loss(model(x), y)\n            opt.zero_grad()\n            loss.backward()\n            opt.step()\n            last = loss.item()\n    finally:\n        if last < 1.0:\n            break"),
    ],
)
def test_a_value_changed_in_place_or_bound_in_a_try_stays_per_rank(tmp_path: Path, init: str, body: str) -> None:
    """The review of this change: ``stats[0] = loss.item()`` (a running value kept in a tensor or a dict) and a
    ``try`` body's binding read in its ``else`` or ``finally`` were taken past: the binding in effect was the one
    before (``stats = torch.zeros(2)``) and the early stop on this rank's loss went silent (rank 1 left the loop, rank
    0 died with "Connection closed by peer")."""
    path = tmp_path / "train.py"
    path.write_text(RUNNING.replace("INIT", init).replace("BODY", body))
    result = CliRunner().invoke(cli, ["--diff", str(path)])
    assert sum(1 for line in result.output.splitlines() if line.strip().startswith("review") and "DDP041" in line) == 1, result.output
