"""One epoch function for training and evaluation (``def run_epoch(model, loader, optimizer=None)``).

A trial's early stopping on ``val_loss = run_epoch(model, val_loader)``: the function's result counted as
per-rank wherever it was called, since the training call goes over a sharded loader. DDP041 asked to reduce
``val_loss`` before ``if val_loss >= best: break`` and DDP033 flagged the barrier after it, though every rank
evaluates the whole validation set (the evaluation loader stays unsharded) and decides alike. A call that
hands the function only unsharded loaders, and nothing else per-rank, computes the same on every rank.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from migrated import migrate_script

PROGRAM = '''
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset
VAL_IMPORT

def run_epoch(model, loader, optimizer=None):
    total, n = 0.0, 0
    for xb, yb in loader:
        loss = nn.functional.mse_loss(model(xb), yb)
        if optimizer is not None:
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        total += loss.item() * len(xb)
        n += len(xb)
    return total / n


def main():
    train = DataLoader(TensorDataset(torch.randn(64, 4), torch.randn(64, 1)), batch_size=8, shuffle=True)
    val_set = TensorDataset(torch.randn(16, 4), torch.randn(16, 1))
    val = VAL_LOADER
    model = nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    best = float("inf")
    for epoch in range(5):
        run_epoch(model, train, opt)
        val_loss = run_epoch(model, val)
        if val_loss >= best:
            break
        best = val_loss


if __name__ == "__main__":
    main()
'''


def test_a_decision_on_a_whole_evaluation_needs_no_reduction(tmp_path: Path) -> None:
    source = PROGRAM.replace("VAL_IMPORT", "").replace("VAL_LOADER", "DataLoader(val_set, batch_size=8)")
    _, report, code = migrate_script(tmp_path, source)
    assert code == 0 and "0 item(s) need a human" in report, report


def test_a_decision_on_a_sharded_evaluation_is_still_reviewed(tmp_path: Path) -> None:
    source = PROGRAM.replace("VAL_IMPORT", "from torch.utils.data.distributed import DistributedSampler\n").replace(
        "VAL_LOADER", "DataLoader(val_set, batch_size=8, sampler=DistributedSampler(val_set, shuffle=False))"
    )
    _, report, _ = migrate_script(tmp_path, source)
    assert "DDP041 `val_loss >= best` decides on val_loss, computed on this rank's shard" in report, report


@pytest.mark.parametrize("call", ["run_epoch(model, train)", "run_epoch(model, val) + train_loss"])
def test_a_call_over_the_training_shard_or_with_a_per_rank_argument_stays_per_rank(tmp_path: Path, call: str) -> None:
    source = (
        PROGRAM.replace("VAL_IMPORT", "")
        .replace("VAL_LOADER", "DataLoader(val_set, batch_size=8)")
        .replace("        run_epoch(model, train, opt)\n", "        train_loss = run_epoch(model, train, opt)\n")
        .replace("val_loss = run_epoch(model, val)", f"val_loss = {call}")
    )
    _, report, _ = migrate_script(tmp_path, source)
    assert "DDP041 `val_loss >= best` decides on val_loss" in report, report


def test_a_shuffled_evaluation_cut_after_some_batches_stays_per_rank(tmp_path: Path) -> None:
    """Each rank evaluates other samples when the unsharded loader shuffles and the loop leaves early."""
    source = (
        PROGRAM.replace("VAL_IMPORT", "")
        .replace("VAL_LOADER", "DataLoader(val_set, batch_size=2, shuffle=True)")
        .replace("    for xb, yb in loader:\n", "    for i, (xb, yb) in enumerate(loader):\n        if i >= 2:\n            break\n")
    )
    _, report, _ = migrate_script(tmp_path, source)
    assert "DDP041 `val_loss >= best` decides on val_loss" in report, report


def test_a_per_rank_value_the_function_reads_from_outside_stays_per_rank(tmp_path: Path) -> None:
    """``history`` filled from the training loss on each rank, read through a helper in the evaluation's result."""
    source = (
        PROGRAM.replace("VAL_IMPORT", "\nhistory = []\n\n\ndef smoothed():\n    return sum(history[-3:]) / max(len(history), 1)\n")
        .replace("VAL_LOADER", "DataLoader(val_set, batch_size=8)")
        .replace("            optimizer.step()\n", "            optimizer.step()\n            history.append(loss.item())\n")
        .replace("    return total / n\n", "    return total / n - 0.1 * smoothed()\n")
    )
    _, report, _ = migrate_script(tmp_path, source)
    assert "DDP041 `val_loss >= best` decides on val_loss" in report, report


TWO_PHASES = '''
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset


def run_epoch(net, dl, opt):
    for xb, yb in dl:
        loss = F.cross_entropy(net(xb), yb)
        opt.zero_grad()
        loss.backward()
        opt.step()


def main():
    x = torch.randn(64, 10)
    dl = DataLoader(TensorDataset(x, (x[:, 0] > 0).long()), batch_size=8, shuffle=True)
    teacher = nn.Linear(10, 2)
    t_opt = torch.optim.SGD(teacher.parameters(), lr=0.1)
    for ep in range(3):
        run_epoch(teacher, dl, t_opt)
    student = nn.Linear(10, 2)
    s_opt = torch.optim.SGD(student.parameters(), lr=0.1)
    for ep in range(3):
        run_epoch(student, dl, s_opt)


if __name__ == "__main__":
    main()
'''


def test_every_epoch_loop_that_calls_the_epoch_function_tells_the_sampler(tmp_path: Path) -> None:
    """A trial's teacher pre-training then distillation: only the first loop got set_epoch, so the second phase
    drew one fixed order every epoch (0 items for a human)."""
    migrated, report, _ = migrate_script(tmp_path, TWO_PHASES)
    assert migrated.count("dl.sampler.set_epoch(ep)") == 2, report + migrated
