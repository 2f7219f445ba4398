"""Per-sample draws from a random state every rank seeds alike, in two more spellings (DDP051).

A trial's augmentations drew a sign per sample with Python's ``random.random()`` in a comprehension over
``range(x.size(0))``, and uniform noise with ``x.new_empty(x.shape).uniform_()``: both ranks drew the same
signs and noise for their shares, the global batch held two copies of each choice, and the migration said
nothing needed a human.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from ddp_migrate.cli import cli

PROGRAM = """import random

import numpy as np
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


def main():
    random.seed(0)
    np.random.seed(0)
    torch.manual_seed(0)
    loader = DataLoader(TensorDataset(torch.randn(64, 4)), batch_size=8, shuffle=True)
    model = nn.Linear(4, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    for epoch in range(2):
        for (x,) in loader:
            AUGMENT
            loss = (model(x) ** 2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()


if __name__ == "__main__":
    main()
"""


def _reviews(tmp_path: Path, augment: str) -> list[str]:
    script = tmp_path / "train.py"
    script.write_text(PROGRAM.replace("AUGMENT", augment))
    result = CliRunner().invoke(cli, [str(script)])
    assert result.exit_code in (0, 1), result.output
    return [line.split(" DDP051 ", 1)[1] for line in result.output.splitlines() if " DDP051 " in line]


@pytest.mark.parametrize(
    ("augment", "drawn"),
    [
        ("x = x * torch.tensor([1.0 if random.random() < 0.5 else -1.0 for _ in range(x.size(0))])[:, None]", "`random.random()` draws a value for each sample"),
        ("x = torch.stack([xi.flip(0) if random.random() < 0.5 else xi for xi in x])", "`random.random()` draws a value for each sample"),
        ("x = x + x.new_empty(x.shape).uniform_()", "`x.new_empty(x.shape).uniform_()` draws noise for each sample"),
        # mixup's partners: every rank the same permutation of its own share (a trial: 6.353 against 6.445)
        ("x = 0.7 * x + 0.3 * x[torch.randperm(x.size(0))]", "`torch.randperm(x.size(0))` draws noise for each sample"),
        ("x = 0.7 * x + 0.3 * x[np.random.permutation(len(x))]", "`np.random.permutation(len(x))` draws noise for each sample"),
    ],
    ids=["python-random-over-a-range", "python-random-over-the-batch", "new-empty-filled", "torch-randperm", "numpy-permutation"],
)
def test_a_per_sample_draw_alike_on_every_rank_is_reviewed(tmp_path: Path, augment: str, drawn: str) -> None:
    found = _reviews(tmp_path, augment)
    assert len(found) == 1 and found[0].startswith(drawn), found


@pytest.mark.parametrize(
    "augment",
    [
        "x = x.flip(1) if random.random() < 0.5 else x",  # one choice for the whole batch: alike on purpose
        "x = x + x.new_empty(4).uniform_()",  # one noise vector for every sample
    ],
    ids=["one-draw-per-batch", "per-feature"],
)
def test_a_draw_that_is_not_per_sample_is_left_alone(tmp_path: Path, augment: str) -> None:
    assert _reviews(tmp_path, augment) == []


AUGMENTED = """import numpy as np
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, Dataset


class Noisy(Dataset):
    def __init__(self):
        self.x = torch.randn(64, 4)

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return self.x[i] + float(np.random.normal(0, 1.0))


def main():
    np.random.seed(0)
    torch.manual_seed(0)
    loader = DataLoader(Noisy(), batch_size=8, shuffle=True, WORKERS)
    model = nn.Linear(4, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    for epoch in range(2):
        for x in loader:
            loss = (model(x) ** 2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()


if __name__ == "__main__":
    main()
"""


@pytest.mark.parametrize(
    ("workers", "advice"),
    [("num_workers=0", "(np.random.seed(seed + runtime.rank()))"), ("num_workers=2", "with torch.manual_seed(seed + runtime.rank())")],
    ids=["in-the-main-process", "in-worker-processes"],
)
def test_the_advice_seeds_what_the_workers_draw_from(tmp_path: Path, workers: str, advice: str) -> None:
    # A trial followed the note's np.random.seed(seed + rank) with loader workers: the ranks still drew the same
    # noise (the workers reseed numpy from torch's seed, alike on every rank).
    script = tmp_path / "train.py"
    script.write_text(AUGMENTED.replace("WORKERS", workers))
    result = CliRunner().invoke(cli, [str(script)])
    notes = [line for line in result.output.splitlines() if "note DDP051" in line and "__getitem__()" in line]
    assert len(notes) == 1 and advice in notes[0], result.output
