"""A batch size the program calls each device's own (``--per_device_train_batch_size``, an option whose help says
"per GPU"): the migration splits it like any global batch (the original's global batch is kept), and says so. A
trial's user read the option's name and expected each process to take the whole of it."""

from __future__ import annotations

from pathlib import Path

import pytest

from migrated import migrate_script

PROGRAM = """
import argparse

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

parser = argparse.ArgumentParser()
parser.add_argument(OPTION, type=int, default=8HELP)
args = parser.parse_args()
model = nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
loader = DataLoader(TensorDataset(torch.randn(64, 4), torch.randn(64, 1)), batch_size=args.DEST, shuffle=True)
for epoch in range(2):
    for x, y in loader:
        loss = nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
"""


def _report(tmp_path: Path, option: str, help_text: str, *flags: str) -> str:
    source = PROGRAM.replace("OPTION", f'"{option}"').replace("DEST", option.lstrip("-").replace("-", "_"))
    source = source.replace("HELP", f', help="{help_text}"' if help_text else "")
    _, report, code = migrate_script(tmp_path, source)
    assert code == 0, report
    return report


@pytest.mark.parametrize(
    ("option", "help_text", "said"),
    [
        ("--per_device_train_batch_size", "", "`args.per_device_train_batch_size`"),
        ("--per-gpu-batch", "", "`args.per_gpu_batch`"),
        ("--bs", "Batch size per GPU/CPU for training.", "the option --bs"),
    ],
)
def test_a_batch_size_said_to_be_per_device_gets_a_note(tmp_path: Path, option: str, help_text: str, said: str) -> None:
    report = _report(tmp_path, option, help_text)
    assert f": the batch size comes from {said}, which says it is per device: the migration keeps" in report, report


@pytest.mark.parametrize(("option", "help_text"), [("--batch_size", ""), ("--batch-size", "input batch size for training")])
def test_a_plain_batch_size_gets_no_note(tmp_path: Path, option: str, help_text: str) -> None:
    assert "per device" not in _report(tmp_path, option, help_text)


def test_a_per_device_size_the_program_multiplies_by_its_devices_gets_no_note(tmp_path: Path) -> None:
    # A trial (DataParallel): ``batch_size = args.batch_size * max(1, n_gpu)`` is the global batch already; the note
    # told the user to keep the per-device size per process, which would have made the global batch N times larger.
    source = PROGRAM.replace("OPTION", '"--batch-size"').replace("HELP", ', help="batch size per GPU"')
    source = source.replace("batch_size=args.DEST", "batch_size=batch_size").replace(
        "model = nn.Linear(4, 1)\n", "model = nn.Linear(4, 1)\nbatch_size = args.batch_size * max(1, torch.cuda.device_count())\n"
    )
    _, report, _ = migrate_script(tmp_path, source)
    assert "runtime.per_process_batch_size(batch_size)" in (tmp_path / "train.py").read_text(), report
    assert "per device" not in report, report
