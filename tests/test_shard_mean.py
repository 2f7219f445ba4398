"""A sum over the training loader divided by the data set's size: DDP044 and DDP047 must agree.

A trial's most common idiom, ``correct / len(loader.dataset)`` after a training epoch, made every migration of it
fail (exit 2, "fixes did not settle after 8 passes"): DDP044 divides the shard's sum by the shard's size,
``len(loader.sampler)``, and DDP047, which reads ``len(loader.sampler)`` of a sharded loader as the original's
whole set, put ``len(loader.dataset)`` back. A length that divides a sum over this process's shard is the shard's
size on purpose: DDP047 leaves it. The length kept in a name (``n_train = len(ds)``, a trial's silent wrong: the
shard's sum over the whole set's size, saved to a history file) is the shard's size at the division too.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from migrated import migrate_script

PROGRAM = '''
import os

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
x = torch.randn(64, 4)
y = (x[:, 0] > 0).long()
ds = TensorDataset(x, y)
n_train = len(ds)
loader = DataLoader(ds, batch_size=8, shuffle=True)
model = nn.Linear(4, 2)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for epoch in range(2):
    correct = 0
    seen = 0
    for xb, yb in loader:
        out = model(xb)
        loss = nn.functional.cross_entropy(out, yb)
        opt.zero_grad()
        loss.backward()
        opt.step()
        correct += (out.argmax(1) == yb).sum().item()
        seen += len(xb)
    os.write(1, f"correct {correct} seen {seen} acc {correct / DIVISOR:.6f}\\n".encode())
'''


@pytest.mark.parametrize(
    "divisor, shard",
    [
        ("len(loader.dataset)", "len(loader.sampler)"),
        ("len(ds)", "len(loader.sampler)"),
        ("n_train", "len(loader.sampler)"),
        # (a trial's sequence loss: the size as a factor of the divisor; DDP047 once turned DDP044's fix back)
        ("(len(loader.dataset) * 2)", "(len(loader.sampler) * 2)"),
    ],
)
def test_the_shard_sum_is_divided_by_the_shard_size_and_the_migration_settles(tmp_path: Path, divisor: str, shard: str) -> None:
    migrated, report, code = migrate_script(tmp_path, PROGRAM.replace("DIVISOR", divisor))
    assert code == 0 and "did not settle" not in report, report
    assert f"{{correct / {shard}:.6f}}" in migrated, migrated
    assert "DDP044" in report and "DDP047" not in report, report


def test_a_schedule_sized_by_the_sampler_still_reads_the_whole_set(tmp_path: Path) -> None:
    """DDP047's own case is kept: ``len(loader.sampler)`` sizing a schedule is not a shard's mean."""
    source = PROGRAM.replace("DIVISOR", "len(loader.dataset)").replace(
        "for epoch in range(2):", "total_steps = len(loader.sampler) // 8 * 2\nfor epoch in range(2):"
    )
    migrated, report, code = migrate_script(tmp_path, source)
    assert code == 0, report
    assert "total_steps = len(loader.dataset) // 8 * 2" in migrated, migrated


@pytest.mark.distributed
def test_each_rank_prints_the_mean_over_its_own_share(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    from launch import run_torchrun

    migrate_script(tmp_path, PROGRAM.replace("DIVISOR", "len(loader.dataset)"))
    launch = run_torchrun(tmp_path / "train.py", nproc_per_node=2, cwd=tmp_path, timeout=120)
    found = re.findall(r"correct (\d+) seen (\d+) acc (\d\.\d+)", launch.output)
    assert len(found) == 4, launch.output  # two epochs on two ranks
    for correct, seen, acc in found:
        assert seen == "32" and abs(int(correct) / 32 - float(acc)) < 1e-6, launch.output


GLOBAL_LOADER = """import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
train_ds = TensorDataset(torch.randn(256, 8), torch.randint(0, 2, (256,)))
train_loader = DataLoader(train_ds, batch_size=32, shuffle=True)
model = nn.Linear(8, 2)
opt = torch.optim.SGD(model.parameters(), lr=0.1)


def train_epoch(SIGNATURE):
    total = 0.0
    for x, y in train_loader:
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        total += loss.item() * len(x)
    return total / len(train_ds)


def main():
    for epoch in range(3):
        print(epoch, train_epoch(ARGUMENTS))


if __name__ == "__main__":
    main()
"""


@pytest.mark.parametrize(
    ("signature", "arguments"),
    [("", ""), ("model, opt, train_loader, train_ds", "model, opt, train_loader, train_ds")],
    ids=["module-globals", "handed-in"],
)
def test_a_function_iterating_a_loader_built_elsewhere_divides_by_the_shard_size(tmp_path: Path, signature: str, arguments: str) -> None:
    """A trial's epoch function read the loader and its data set as module globals (or was handed both): the shard's
    sum was divided by the whole set's size, the logged loss N times too small, and nothing said so."""
    migrated, report, _ = migrate_script(tmp_path, GLOBAL_LOADER.replace("SIGNATURE", signature).replace("ARGUMENTS", arguments))
    assert "    return total / len(train_loader.sampler)\n" in migrated, migrated
    assert "DDP044 line 21: the shard's sum divided by the shard's size (len(train_loader.sampler))" in report, report


def test_a_set_no_iterated_loader_draws_from_is_left_alone(tmp_path: Path) -> None:
    other = GLOBAL_LOADER.replace("SIGNATURE", "").replace("ARGUMENTS", "").replace(
        "model = nn.Linear", "val_ds = TensorDataset(torch.randn(64, 8), torch.randint(0, 2, (64,)))\nmodel = nn.Linear"
    ).replace("return total / len(train_ds)", "return total / len(val_ds)")
    migrated, report, _ = migrate_script(tmp_path, other)
    assert "return total / len(val_ds)" in migrated
    assert "DDP044" not in report


def test_a_shard_sum_divided_in_place_is_divided_by_the_shard_size(tmp_path: Path) -> None:
    """``total /= len(train_set)`` (a trial's tabular program logged half its loss on 2 processes): the same fix as
    ``total / len(train_set)``, and the migration settles (DDP047 reads the new divisor as DDP044's)."""
    source = GLOBAL_LOADER.replace("SIGNATURE", "").replace("ARGUMENTS", "").replace(
        "    return total / len(train_ds)", "    total /= len(train_ds)\n    return total"
    )
    migrated, report, code = migrate_script(tmp_path, source)
    assert code == 0, report
    assert "    total /= len(train_loader.sampler)\n" in migrated, migrated
