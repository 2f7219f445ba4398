"""An evaluation written for shards, over a loader the migration leaves whole.

A trial's torchvision-style segmentation trainer evaluates in ``engine.evaluate`` and combines what it
counted across processes (``utils.reduce_across_processes(num_processed_samples)``, a confusion matrix's
``reduce_from_all_processes()``): with the evaluation loader left unsharded, every process evaluated the whole
set and the combined count came out N times the set ("32 samples, but 64 were used") while the report said the
unsharded evaluation was correct. Such a loader is now a review item (DDP005), not a note.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from ddp_migrate.cli import cli

TRAIN = '''
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

import engine


def main():
    torch.manual_seed(0)
    train = TensorDataset(torch.randn(64, 8), torch.randint(0, 2, (64,)))
    test = TensorDataset(torch.randn(32, 8), torch.randint(0, 2, (32,)))
    train_loader = DataLoader(train, batch_size=8, shuffle=True)
    test_loader = DataLoader(test, batch_size=8)
    model = nn.Linear(8, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        engine.train_one_epoch(model, optimizer, train_loader)
        print(epoch, engine.evaluate(model, test_loader))


if __name__ == "__main__":
    main()
'''

ENGINE = '''
import torch
import torch.distributed as dist
import torch.nn.functional as F


def reduce_across_processes(value):
    if not (dist.is_available() and dist.is_initialized()):
        return torch.tensor(value)
    t = torch.tensor(value, dtype=torch.float64)
    dist.all_reduce(t)
    return t


def train_one_epoch(model, optimizer, loader):
    for x, y in loader:
        loss = F.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


def evaluate(model, loader):
    correct, seen = 0, 0
    with torch.no_grad():
        for x, y in loader:
            correct += (model(x).argmax(1) == y).sum().item()
            seen += len(y)
COMBINE
    return correct / seen
'''

COMBINED = "    seen = reduce_across_processes(seen)\n    correct = reduce_across_processes(correct)\n"


def migrate_program(folder: Path, combine: str) -> tuple[str, str]:
    """Write the two-file program, migrate the folder; the migrated ``train.py`` and the report."""
    (folder / "train.py").write_text(TRAIN)
    (folder / "engine.py").write_text(ENGINE.replace("COMBINE\n", combine))
    result = CliRunner().invoke(cli, [str(folder)], catch_exceptions=False)
    return (folder / "train.py").read_text(), result.output


def test_an_evaluation_that_combines_across_processes_over_a_whole_set_is_reviewed(tmp_path: Path) -> None:
    migrated, report = migrate_program(tmp_path, COMBINED)
    assert "DDP005" in report and "its evaluation combines values across processes (`reduce_across_processes(seen)`)" in report, report
    assert "correct but slower" not in report
    assert "# TODO(ddp-migrate): evaluation DataLoader left unsharded, but its evaluation combines" in migrated
    assert "DistributedSampler(train" in migrated  # the training loader is sharded as before


@pytest.mark.parametrize("combine", ["", "    print(reduce_across_processes)\n"], ids=["no-combining", "helper-not-called"])
def test_an_evaluation_that_combines_nothing_keeps_its_note(tmp_path: Path, combine: str) -> None:
    migrated, report = migrate_program(tmp_path, combine)
    assert "evaluation DataLoader left unsharded: every process evaluates the whole set, which is correct" in report, report
    assert "its evaluation combines" not in report and "TODO" not in migrated


#: Training and evaluation in one function (a trial): the training loss is averaged across processes
#: (``all_reduce_mean(train_sum / n)``), the evaluation counts its own set. The review said the evaluation combined
#: values across processes, pointing at the training loss.
ONE_FUNCTION = '''
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


def all_reduce_mean(t):
    if dist.is_initialized():
        dist.all_reduce(t)
        t /= dist.get_world_size()
    return t


def main():
    train_loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randint(0, 2, (64,))), batch_size=16, shuffle=True)
    val_loader = DataLoader(TensorDataset(torch.randn(32, 8), torch.randint(0, 2, (32,))), batch_size=8)
    model = nn.Linear(8, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        train_sum = 0.0
        for x, y in train_loader:
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            train_sum += loss.item()
        correct = 0
        with torch.no_grad():
            for x, y in val_loader:
                correct += (model(x).argmax(1) == y).sum().item()
        REDUCED
        print(epoch, train_loss, correct / len(val_loader.dataset))


if __name__ == "__main__":
    main()
'''


def test_a_training_value_reduced_beside_the_evaluation_is_no_combined_evaluation(tmp_path: Path) -> None:
    path = tmp_path / "train.py"
    path.write_text(ONE_FUNCTION.replace("REDUCED", "train_loss = all_reduce_mean(torch.tensor(train_sum / len(train_loader))).item()"))
    output = CliRunner().invoke(cli, [str(path)]).output
    assert "combines values across processes" not in output and "note DDP005" in output, output


def test_the_evaluations_own_count_summed_is_a_combined_evaluation(tmp_path: Path) -> None:
    path = tmp_path / "train.py"
    summed = "train_loss = train_sum\n        correct = torch.tensor(float(correct))\n        dist.all_reduce(correct)\n        correct = correct.item()"
    path.write_text(ONE_FUNCTION.replace("REDUCED", summed))
    output = CliRunner().invoke(cli, [str(path)]).output
    assert "combines values across processes" in output, output


def test_the_evaluations_own_count_averaged_is_counted_once(tmp_path: Path) -> None:
    """A mean across processes of a count every process makes over the whole set is that count (a trial's
    ``all_reduce_mean`` helper got a review that it was N times the set's)."""
    path = tmp_path / "train.py"
    path.write_text(ONE_FUNCTION.replace("REDUCED", "train_loss = train_sum\n        correct = all_reduce_mean(torch.tensor(float(correct))).item()"))
    output = CliRunner().invoke(cli, [str(path)]).output
    assert "combines values across processes" not in output, output
