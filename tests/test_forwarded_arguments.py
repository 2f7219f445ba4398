"""A Trainer subclass that passes its arguments on (``super().__init__(*args, **kwargs)``), and a Trainer class
picked by name (a trial of multi-file repositories).

The loaders handed to ``ClassifierTrainer(model, optimizer, train_loader, ...)`` reached the base class's
``self.train_loader`` only through ``*args``: the analysis lost them, the training loader got no
DistributedSampler and every rank trained on the whole set, with nothing to review. A class picked by name
(``cls = getattr(trainers, cfg["type"])``) cannot be followed at all: its loaders are now reviewed.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from ddp_migrate.cli import cli

BASE = '''import torch


class BaseTrainer:
    def __init__(self, model, optimizer, train_loader, val_loader, epochs):
        self.model = model
        self.optimizer = optimizer
        self.train_loader = train_loader
        self.val_loader = val_loader
        self.epochs = epochs

    def train_step(self, batch):
        raise NotImplementedError

    def fit(self):
        for epoch in range(self.epochs):
            self.model.train()
            for batch in self.train_loader:
                self.train_step(batch)
            self.model.eval()
            with torch.no_grad():
                total = sum(float(self.model(x).sum()) for x, _ in self.val_loader)
            print(epoch, total)
'''

CLASSIFIER = '''import torch.nn.functional as F

from trainers.base import BaseTrainer


class ClassifierTrainer(BaseTrainer):
    def __init__(self, *args, accum_steps=1, **kwargs):
        super().__init__(*args, **kwargs)
        self.accum_steps = accum_steps

    def train_step(self, batch):
        x, y = batch
        loss = F.cross_entropy(self.model(x), y)
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
'''

RUN = '''import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

IMPORT

CONFIG = {"type": "ClassifierTrainer", "args": {"accum_steps": 1}}


def main():
    torch.manual_seed(0)
    train_loader = DataLoader(TensorDataset(torch.randn(64, 4), torch.randint(0, 2, (64,))), batch_size=8, shuffle=True)
    val_loader = DataLoader(TensorDataset(torch.randn(16, 4), torch.randint(0, 2, (16,))), batch_size=8)
    model = nn.Linear(4, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    BUILD
    trainer.fit()


if __name__ == "__main__":
    main()
'''


def migrate(tmp_path: Path, imports: str, build: str) -> tuple[str, str]:
    (tmp_path / "trainers").mkdir()
    (tmp_path / "trainers" / "__init__.py").write_text("from .classifier import ClassifierTrainer\n")
    (tmp_path / "trainers" / "base.py").write_text(BASE)
    (tmp_path / "trainers" / "classifier.py").write_text(CLASSIFIER)
    (tmp_path / "run.py").write_text(RUN.replace("IMPORT", imports).replace("BUILD", build))
    result = CliRunner().invoke(cli, [str(tmp_path / "run.py")])
    return (tmp_path / "run.py").read_text(), result.output


@pytest.mark.parametrize(
    "build",
    [
        "trainer = ClassifierTrainer(model, optimizer, train_loader, val_loader, 2, accum_steps=1)",
        'trainer = ClassifierTrainer(model, optimizer, train_loader, val_loader, epochs=2, **CONFIG["args"])',
    ],
    ids=["positional", "keywords-spread"],
)
def test_loaders_passed_on_through_args_and_kwargs_are_followed(tmp_path: Path, build: str) -> None:
    run, output = migrate(tmp_path, "from trainers import ClassifierTrainer", build)
    assert "0 item(s) need a human" in output, output
    train = run[run.index("train_loader = DataLoader(") : run.index("val_loader = DataLoader(")]
    assert "DistributedSampler(" in train, run
    assert "DistributedSampler" not in run[run.index("val_loader = DataLoader(") :].split("\n")[0], run
    base = (tmp_path / "trainers" / "base.py").read_text()
    assert "self.train_loader.sampler.set_epoch(epoch)" in base, base


def test_loaders_handed_to_a_class_picked_by_name_are_reviewed(tmp_path: Path) -> None:
    run, output = migrate(tmp_path, "import trainers", 'trainer = getattr(trainers, CONFIG["type"])(model, optimizer, train_loader, val_loader, 2)')
    reviews = [line for line in output.splitlines() if line.strip().startswith("review") and "DDP040" in line]
    assert len(reviews) == 2 and all("handed to code the analysis cannot follow" in line for line in reviews), output
