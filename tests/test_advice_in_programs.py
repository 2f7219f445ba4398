"""Advice left unfixed is a note in every module of a program, as in a lone file (a migration's exit code).

A trial's package accumulated gradients in a Trainer of its own module (``mypkg/trainer.py``): the ``no_sync()`` the
migration cannot place there (a speed matter only: the update is the original's, 2 processes gave 242.64850592
where the original gave 242.64850516) was a review item, exit 1 and "once the review items ... are done", where
the same loop in one file was a note.
"""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from ddp_migrate.cli import cli

TRAINER = """import torch.nn.functional as F


class Trainer:
    def __init__(self, model, opt, loader, accum):
        self.model = model
        self.opt = opt
        self.loader = loader
        self.accum = accum

    def fit(self, epochs):
        for epoch in range(epochs):
            self.opt.zero_grad()
            for i, (x, y) in enumerate(self.loader):
                loss = F.cross_entropy(self.model(x), y)
                (loss / self.accum).backward()
                if (i + 1) % self.accum == 0 or (i + 1) == len(self.loader):
                    self.opt.step()
                    self.opt.zero_grad()
"""

TRAIN = """import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

from mypkg.trainer import Trainer


def main():
    data = TensorDataset(torch.randn(64, 4), torch.randint(0, 2, (64,)))
    model = nn.Linear(4, 2)
    loader = DataLoader(data, batch_size=8, shuffle=True)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    trainer = Trainer(model, optimizer, loader, 4)
    trainer.fit(2)


if __name__ == "__main__":
    main()
"""


def test_an_unplaced_no_sync_in_a_module_of_the_program_is_a_note(tmp_path: Path) -> None:
    (tmp_path / "mypkg").mkdir()
    (tmp_path / "mypkg" / "__init__.py").write_text("")
    (tmp_path / "mypkg" / "trainer.py").write_text(TRAINER)
    (tmp_path / "train.py").write_text(TRAIN)
    result = CliRunner().invoke(cli, [str(tmp_path / "train.py")])
    assert result.exit_code == 0, result.output
    assert "note DDP031 line" in result.output and "no_sync()" in result.output, result.output
    assert "0 item(s) need a human" in result.output
    assert "TODO" not in (tmp_path / "mypkg" / "trainer.py").read_text()
