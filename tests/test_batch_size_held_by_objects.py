"""The global batch size read through the object it was handed to (a trial's SimCLR: ``torch.arange(self.batch_size)``
in a Trainer's step, ``torch.arange(self.args.batch_size)`` in the ``info_nce_loss`` the step calls). The migration
split the loader's batch, and the labels kept the global size: under torchrun every process failed ("Expected input
batch_size (16) to match target batch_size (32)") with nothing in the report. DDP047 reads the copies now."""

from __future__ import annotations

from pathlib import Path

import pytest

from migrated import migrate_script

PROGRAM = """
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset


class Trainer:
    def __init__(self, HELD, model):
        self.HELD = HELD
        self.model = model
        self.opt = torch.optim.SGD(model.parameters(), lr=0.1)

    def labels(self):
        return torch.arange(READ) % 4

    def fit(self, loader):
        for epoch in range(2):
            for (x,) in loader:
                z = self.model(x)
                loss = F.cross_entropy(z, LABELS)
                self.opt.zero_grad()
                loss.backward()
                self.opt.step()


def main():
    batch_size = 32
    loader = DataLoader(TensorDataset(torch.randn(256, 8)), batch_size=batch_size, shuffle=True, drop_last=True)
    model = nn.Linear(8, 4)
    Trainer(GIVEN, model).fit(loader)


if __name__ == "__main__":
    main()
"""


def _source(held: str, read: str, labels: str, given: str) -> str:
    return PROGRAM.replace("HELD", held).replace("READ", read).replace("LABELS", labels).replace("GIVEN", given)


@pytest.mark.parametrize(
    ("labels", "review"),
    [
        ("torch.arange(self.batch_size) % 4", "`torch.arange(self.batch_size)` is sized with self.batch_size (a copy of batch_size)"),
        ("self.labels()", "`torch.arange(self.batch_size)` is sized with self.batch_size (a copy of batch_size)"),
    ],
    ids=["in-the-step", "in-a-method-the-step-calls"],
)
def test_a_global_batch_size_held_by_the_trainer_is_reviewed(tmp_path: Path, labels: str, review: str) -> None:
    text, report, _ = migrate_script(tmp_path, _source("batch_size", "self.batch_size", labels, "batch_size"))
    assert f"DDP047 {review}, the global batch size" in report, report


def test_a_global_batch_size_read_through_a_held_namespace_is_reviewed(tmp_path: Path) -> None:
    source = _source("args", "self.args.batch_size", "self.labels()", "args").replace(
        "    batch_size = 32\n", "    args = Namespace(batch_size=32)\n    batch_size = args.batch_size\n"
    ).replace("batch_size=batch_size, shuffle", "batch_size=args.batch_size, shuffle").replace("import torch\n", "from argparse import Namespace\n\nimport torch\n", 1)
    text, report, _ = migrate_script(tmp_path, source)
    assert "DDP047 `torch.arange(self.args.batch_size)` is sized with self.args.batch_size (a copy of args.batch_size)" in report, report


def test_another_size_held_by_the_trainer_is_not_the_batch(tmp_path: Path) -> None:
    text, report, _ = migrate_script(tmp_path, _source("classes", "self.classes", "torch.arange(self.classes)[: len(x)] % 4", "32"))
    assert "DDP047" not in report, report
