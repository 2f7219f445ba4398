"""What the migration leaves to a human is marked in the code, not only in the report: a ``# TODO(ddp-migrate):
...`` comment above the statement of every review finding (the README's promise), once; ``lint --fix`` adds
none (it fixes, it does not annotate)."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from ddp_migrate.cli import cli

TRAINER = '''
class Trainer:
    def __init__(self, model, optimizer, loader, steps):
        self.model, self.optimizer, self.loader, self.steps = model, optimizer, loader, steps

    def train(self, epochs):
        for epoch in range(epochs):
            for step, (x, y) in enumerate(self.loader):
                loss = ((self.model(x) - y) ** 2).mean() / self.steps
                loss.backward()
                if (step + 1) % self.steps == 0 or step + 1 == len(self.loader):
                    self.optimizer.step()
                    self.optimizer.zero_grad()
'''

ENTRY = '''
import torch
from torch.utils.data import DataLoader, TensorDataset

from trainer import Trainer


def main():
    loader = DataLoader(TensorDataset(torch.randn(64, 4), torch.randn(64, 1)), batch_size=8, shuffle=True)
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    Trainer(model, optimizer, loader, 2).train(2)


if __name__ == "__main__":
    main()
'''

TODO = "# TODO(ddp-migrate): a summed loss divided by a fixed number"
#: (a migration's review in a module: the summed loss divided by a number; the unplaced ``no_sync()`` of the same
#: accumulation is advice, a note, and ``lint --fix`` reports it without annotating)
SUMMED = TRAINER.replace(").mean() / self.steps", ").sum() / self.steps")


def _project(tmp_path: Path, trainer: str = TRAINER) -> Path:
    (tmp_path / "trainer.py").write_text(trainer)
    (tmp_path / "train.py").write_text(ENTRY)
    return tmp_path


def test_a_review_finding_gets_a_todo_above_its_statement_once(tmp_path: Path) -> None:
    folder = _project(tmp_path, SUMMED)
    result = CliRunner().invoke(cli, ["migrate", str(folder / "train.py")])
    assert result.exit_code == 1, result.output
    assert "review" in result.output and "DDP039" in result.output
    lines = (folder / "trainer.py").read_text().splitlines()
    [index] = [i for i, line in enumerate(lines) if line.strip().startswith(TODO)]
    assert lines[index + 1].strip() == "loss.backward()"
    assert lines[index].index("#") == lines[index + 1].index("loss")  # the statement's indentation
    # The report points at the statement, in the file as written.
    review = next(line for line in result.output.splitlines() if "DDP039" in line and "review" in line)
    assert f"trainer.py:{index + 2}:" in review
    before = (folder / "trainer.py").read_text()
    again = CliRunner().invoke(cli, ["migrate", str(folder / "train.py")])
    assert again.exit_code == 1, again.output
    assert (folder / "trainer.py").read_text() == before  # no second TODO


def test_lint_fix_does_not_annotate(tmp_path: Path) -> None:
    folder = _project(tmp_path)
    result = CliRunner().invoke(cli, ["lint", "--fix", "--unsafe-fixes", str(folder)])
    assert "4 fixed" in result.output, result.output  # (the fixes land; the advice left is not annotated)
    assert "TODO(ddp-migrate)" not in (folder / "trainer.py").read_text()
