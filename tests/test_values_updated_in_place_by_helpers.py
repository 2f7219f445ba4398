"""A value a helper updates in place, through the argument it is handed, holds this rank's shard (DDP041).

A trial's segmentation program accumulated a confusion matrix with ``update_confusion(conf, pred, y)``, whose body
does ``conf += torch.bincount(...)``, then stepped ReduceLROnPlateau on ``miou(conf)`` (or left the loop on it). The
in-place update was not followed: the shard's matrix read as the whole set's, no review, and under torchrun the
ranks' learning rates split (0.0625 and 0.125) or one rank left the loop ("Connection closed by peer"). Written
inline, the same accumulation got the review.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from migrated import migrate_script

PROGRAM = """import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset


def update_confusion(conf, pred, target, k):
    UPDATE


def accuracy(conf):
    return (conf.diag().sum() / conf.sum()).item()


def main():
    data = TensorDataset(torch.randn(64, 4), torch.randint(0, 3, (64,)))
    loader = DataLoader(data, batch_size=8, shuffle=True)
    model = nn.Linear(4, 3)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(5):
        conf = torch.zeros(3, 3)
        for x, y in loader:
            out = model(x)
            opt.zero_grad()
            F.cross_entropy(out, y).backward()
            opt.step()
            update_confusion(conf, out.argmax(1), y, 3)
        if accuracy(conf) > 0.9:
            break


if __name__ == "__main__":
    main()
"""


@pytest.mark.parametrize(
    "update",
    [
        "conf += torch.bincount(target * k + pred, minlength=k * k).reshape(k, k).float()",
        "conf.add_(torch.bincount(target * k + pred, minlength=k * k).reshape(k, k).float())",
    ],
    ids=["augmented", "add_"],
)
def test_a_decision_on_a_matrix_a_helper_fills_in_place_is_reviewed(tmp_path: Path, update: str) -> None:
    _, report, code = migrate_script(tmp_path, PROGRAM.replace("UPDATE", update))
    assert code == 1, report
    assert "DDP041 `accuracy(conf) > 0.9` decides on" in report, report


def test_a_helper_that_fills_its_own_copy_changes_nothing_of_the_callers(tmp_path: Path) -> None:
    update = "conf = conf + torch.bincount(target * k + pred, minlength=k * k).reshape(k, k).float()"
    _, report, _ = migrate_script(tmp_path, PROGRAM.replace("UPDATE", update))
    assert "DDP041" not in report, report
