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


SIZING_LOSS = """
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset


class PairLoss(nn.Module):
    def __init__(self, batch_size, temperature=0.5):
        super().__init__()
        self.batch_size = batch_size
        self.temperature = temperature
        BODY

    def forward(self, z_i, z_j):
        z = F.normalize(torch.cat([z_i, z_j]), dim=1)
        sim = (z @ z.t() / self.temperature).masked_fill(self.mask[: len(z), : len(z)], float("-inf"))
        b = z_i.size(0)
        return F.cross_entropy(sim, torch.cat([torch.arange(b, 2 * b), torch.arange(b)]))


def main():
    batch_size = 16
    loader = DataLoader(TensorDataset(torch.randn(64, 8)), batch_size=batch_size, shuffle=True, drop_last=True)
    model = nn.Linear(8, 4)
    criterion = PairLoss(batch_size)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for (x,) in loader:
        loss = criterion(model(x + 0.1 * torch.randn_like(x)), model(x + 0.1 * torch.randn_like(x)))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


if __name__ == "__main__":
    main()
"""


@pytest.mark.parametrize(
    ("body", "sized"),
    [
        ("self.register_buffer(\"mask\", torch.eye(4096, dtype=torch.bool))", False),
        ("n = 2 * batch_size\n        self.register_buffer(\"mask\", torch.ones((n, n), dtype=torch.bool).triu(1) & False)", True),
        ("self.register_buffer(\"mask\", torch.zeros(2 * self.batch_size, 2 * self.batch_size, dtype=torch.bool))", True),
        # A trial (SimCLR's NT-Xent): an identity of the global size, and a helper method handed the size.
        ("self.register_buffer(\"mask\", ~torch.eye(2 * batch_size, dtype=torch.bool))", True),
        ("self.register_buffer(\"mask\", self.correlated_mask(batch_size))\n\n    def correlated_mask(self, batch_size):\n"
         "        N = 2 * batch_size\n        return torch.ones((N, N), dtype=torch.bool).fill_diagonal_(0)", True),
        ("self.register_buffer(\"mask\", self.correlated_mask(4096))\n\n    def correlated_mask(self, size):\n"
         "        return torch.ones((size, size), dtype=torch.bool)", False),
    ],
    ids=["size-not-read", "local-from-the-parameter", "kept-attribute", "identity", "helper-method", "helper-method-other-size"],
)
def test_a_class_built_with_the_global_batch_size_that_sizes_tensors_with_it_is_reviewed(tmp_path: Path, body: str, sized: bool) -> None:
    # A trial (SimCLR): ``NTXentLoss(cfg.batch_size, t)`` built a (2B, 2B) mask in ``__init__``; the migration split the
    # loader's batch and said nothing, and every rank failed at its first step (a shape of 128 for 64 samples).
    _, report, _ = migrate_script(tmp_path, SIZING_LOSS.replace("BODY", body))
    assert ("DDP047 `PairLoss(...)` is handed batch_size, the global batch size, and PairLoss sizes tensors with it" in report) is sized, report
