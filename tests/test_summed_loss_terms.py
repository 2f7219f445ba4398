"""A summed loss beside terms that are no sums over the batch (DDP039's fix).

A trial's loss was ``MSELoss(reduction="sum")(out, y) + 0.5 * w.pow(2).sum()``: the fix scaled the whole loss by
the world size, the weight penalty with it, and on 2 processes the weights ended at 10.94 where the original
and one process gave 11.87 ("0 item(s) need a human"). A summed term beside a mean or a penalty is now a review;
a loss whose every term sums over the batch is still scaled.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from migrated import migrate_script

PROGRAM = """import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


def main():
    loader = DataLoader(TensorDataset(torch.randn(64, 4), torch.randn(64, 1)), batch_size=16, shuffle=True)
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    criterion = nn.MSELoss(reduction="sum")
    for epoch in range(2):
        for x, y in loader:
            opt.zero_grad()
            out = model(x)
            LOSS
            loss.backward()
            opt.step()


if __name__ == "__main__":
    main()
"""


@pytest.mark.parametrize(
    "loss",
    [
        "loss = criterion(out, y) + 0.5 * model[0].weight.pow(2).sum()",
        "loss = criterion(out, y) + nn.functional.mse_loss(out, y)",
        "data_loss = criterion(out, y)\n            reg = 0.5 * sum(p.pow(2).sum() for p in model.parameters())\n            loss = data_loss + reg",
    ],
    ids=["weight-penalty", "beside-a-mean", "penalty-in-names"],
)
def test_a_summed_term_beside_another_kind_of_term_is_left_to_a_human(tmp_path: Path, loss: str) -> None:
    migrated, report, code = migrate_script(tmp_path, PROGRAM.replace("LOSS", loss))
    assert code == 1, report
    assert "multiply the loss by runtime.world_size() if every term of it sums over the batch" in report, report
    assert "world_size()).backward()" not in migrated and "* runtime.world_size()" not in migrated, migrated


@pytest.mark.parametrize(
    "loss",
    [
        "loss = criterion(out, y)",
        "loss = criterion(out, y) + nn.functional.l1_loss(out, y, reduction=\"sum\")",
    ],
    ids=["one-sum", "two-sums"],
)
def test_a_loss_whose_every_term_sums_over_the_batch_is_scaled(tmp_path: Path, loss: str) -> None:
    migrated, report, code = migrate_script(tmp_path, PROGRAM.replace("LOSS", loss))
    assert code == 0, report
    assert "(loss * runtime.world_size()).backward()" in migrated, migrated


TOKENS = """import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


def main():
    data = TensorDataset(torch.randn(64, 5, 4), torch.randint(0, 3, (64, 5)), torch.randint(1, 6, (64,)))
    loader = DataLoader(data, batch_size=16, shuffle=True)
    model = nn.Linear(4, 3)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    criterion = nn.CrossEntropyLoss(reduction="sum", ignore_index=-100)
    for epoch in range(2):
        for x, tags, lengths in loader:
            opt.zero_grad()
            loss = criterion(model(x).reshape(-1, 3), tags.reshape(-1)) / lengths.sum()
            loss.backward()
            opt.step()


if __name__ == "__main__":
    main()
"""


def test_a_sum_divided_by_this_batchs_own_count_is_a_note_not_a_review(tmp_path: Path) -> None:
    """A trial's tagger divided its summed loss by the batch's token count (``/ lengths.sum()``): the review said "a
    summed loss divided by a fixed number ... multiply by runtime.world_size()" (following it doubled the update).
    It is each process's own mean over its tokens, as ``(loss * mask).sum() / mask.sum()``: the same note."""
    migrated, report, code = migrate_script(tmp_path, TOKENS)
    assert code == 0, report
    assert "note DDP039 line" in report and "divides by this process's own count of targets" in report, report
    assert "world_size()" not in migrated


def test_a_class_weighted_mean_gets_the_note_of_a_per_process_mean(tmp_path: Path) -> None:
    """``F.cross_entropy(out, y, weight=w)`` divides by the weights of this batch's targets (a trial: 7.121 on 2
    processes where the original gave 7.067, nothing said): the note ``ignore_index=`` gets, in its own words."""
    source = TOKENS.replace(
        'criterion = nn.CrossEntropyLoss(reduction="sum", ignore_index=-100)', "criterion = nn.CrossEntropyLoss(weight=torch.tensor([1.0, 2.0, 4.0]))"
    ).replace("criterion(model(x).reshape(-1, 3), tags.reshape(-1)) / lengths.sum()", "criterion(model(x).reshape(-1, 3), tags.reshape(-1))")
    _, report, code = migrate_script(tmp_path, source)
    assert code == 0, report
    assert "nn.CrossEntropyLoss(..., weight=...) averages over this process's targets weighted by class" in report, report
