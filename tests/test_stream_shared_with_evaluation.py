"""An IterableDataset class that feeds both the training and the evaluation loader.

The migration's TODO asks a human to cut the training stream by the rank in the class's ``__iter__``. Done as
asked, the cut shards the evaluation loader too (the same class), and the re-check still noted "evaluation
DataLoader left unsharded: every process evaluates the whole set, which is correct" while each rank's
validation loss was its half's (1.507 over 16 targets against 1.198 over 32). Nor did anything say that every
rank must stream the same number of batches (an uneven stream hung the job).
"""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from ddp_migrate.cli import cli

PROGRAM = """import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, IterableDataset


class Stream(IterableDataset):
    def __init__(self, data):
        self.data = data

    def __iter__(self):
        for x, y in self.data:
            yield x, y


def evaluate(model, loader):
    total, n = 0.0, 0
    with torch.no_grad():
        for x, y in loader:
            total += F.mse_loss(model(x), y, reduction="sum").item()
            n += y.numel()
    return total / n


def main():
    torch.manual_seed(0)
    train = [(torch.randn(4), torch.randn(1)) for _ in range(64)]
    val = [(torch.randn(4), torch.randn(1)) for _ in range(32)]
    train_loader = DataLoader(Stream(train), batch_size=8)
    val_loader = DataLoader(Stream(val), batch_size=8)
    model = nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        for x, y in train_loader:
            loss = F.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
        print(f"epoch {epoch} val_loss {evaluate(model, val_loader):.6f}")


if __name__ == "__main__":
    main()
"""


def _run(arguments: list[str]) -> str:
    result = CliRunner().invoke(cli, arguments)
    assert result.exit_code in (0, 1), result.output
    return result.output


def test_the_todo_says_the_stream_class_also_feeds_the_evaluation(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(PROGRAM)
    _run([str(script)])
    todo = next(line for line in script.read_text().splitlines() if "TODO(ddp-migrate): this IterableDataset" in line)
    assert "every process must stream the same number of batches" in todo
    assert "Stream also feeds an evaluation loader: cut only the training stream" in todo


def test_a_stream_cut_by_the_rank_makes_its_evaluation_each_ranks_share(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(PROGRAM)
    _run([str(script)])
    done = script.read_text().replace(
        "        for x, y in self.data:\n            yield x, y",
        "        for i, (x, y) in enumerate(self.data):\n            if i % runtime.world_size() == runtime.rank():\n                yield x, y",
    )
    script.write_text("\n".join(line for line in done.splitlines() if "TODO(ddp-migrate)" not in line) + "\n")
    report = _run(["--diff", str(script)])
    assert "evaluation DataLoader left unsharded" not in report, report
    assert "evaluation DataLoader over a data set the program cuts by the rank itself" in report
    assert "every process must stream the same number of batches" in report
