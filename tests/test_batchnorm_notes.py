"""What a migrated model with BatchNorm keeps on CPUs, where SyncBatchNorm does not run (DDP030's note).

A trial's program (98 training samples, batch 16, ``nn.BatchNorm1d``) migrated with "BatchNorm converted to
SyncBatchNorm (on CUDA only)" and nothing else; under torchrun on CPUs each rank's share of 49 samples left a
last batch of one sample and both ranks died ("Expected more than 1 value per channel when training"). The
report now says what a CPU run keeps and what to do.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from launch import run_torchrun
from migrated import migrate_script

PROGRAM = '''
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


def main():
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(98, 10), torch.randint(0, 2, (98,)))
    loader = DataLoader(data, batch_size=16, shuffle=True)
    model = nn.Sequential(nn.Linear(10, 32), NORM(32), nn.ReLU(), nn.Linear(32, 2))DEVICE
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        for x, y in loader:
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()


if __name__ == "__main__":
    main()
'''


def test_a_cpu_program_with_batchnorm_is_told_what_its_shares_keep(tmp_path: Path) -> None:
    migrated, report, code = migrate_script(tmp_path, PROGRAM.replace("NORM", "nn.BatchNorm1d").replace("DEVICE", ""))
    assert code == 0, report
    assert "runtime.convert_sync_batchnorm(model)" in migrated
    note = next(line for line in report.splitlines() if line.strip().startswith("note DDP030"))
    assert "the program trains on the CPU, where SyncBatchNorm does not run" in note and "drop_last=True" in note
    # A trial: an EMA copied each rank's own running statistics, and the metric evaluated on it differed per rank
    # (a hang where an early stop read it); the runtime now averages them after each DDP forward.
    assert "the running statistics are averaged across processes after each training forward" in note, note


def test_a_cuda_program_is_told_about_its_cpu_runs(tmp_path: Path) -> None:
    source = PROGRAM.replace("NORM", "nn.BatchNorm1d").replace("DEVICE", '.to("cuda" if torch.cuda.is_available() else "cpu")')
    _, report, _ = migrate_script(tmp_path, source)
    assert "note DDP030" in report and "on a CPU run SyncBatchNorm does not run" in report, report


def test_a_model_without_batchnorm_gets_no_note(tmp_path: Path) -> None:
    _, report, _ = migrate_script(tmp_path, PROGRAM.replace("NORM", "nn.LayerNorm").replace("DEVICE", ""))
    assert "DDP030" not in report


EMA_PROGRAM = '''
import copy
import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset


def evaluate(model, loader):
    model.eval()
    with torch.no_grad():
        return sum(F.mse_loss(model(x), y, reduction="sum").item() for x, y in loader) / len(loader.dataset)


def main():
    torch.manual_seed(0)
    x = torch.randn(256, 8)
    train = DataLoader(TensorDataset(x, x[:, :1] * 2), batch_size=32, shuffle=True)
    val = DataLoader(TensorDataset(torch.randn(64, 8) * 3, torch.randn(64, 1)), batch_size=64)
    model = nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, 1))
    ema = copy.deepcopy(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    for epoch in range(3):
        model.train()
        for xb, yb in train:
            optimizer.zero_grad()
            F.mse_loss(model(xb), yb).backward()
            optimizer.step()
            with torch.no_grad():
                for e, m in zip(ema.state_dict().values(), model.state_dict().values()):
                    e.copy_(0.5 * e + 0.5 * m) if e.dtype.is_floating_point else e.copy_(m)
        print(f"rank {os.environ.get('RANK', '0')}: epoch {epoch} ema val {evaluate(ema, val):.6f}")


if __name__ == "__main__":
    main()
'''


@pytest.mark.distributed
def test_an_ema_copy_of_a_cpu_model_with_batchnorm_evaluates_alike_on_every_rank(tmp_path: Path) -> None:
    """A trial (YOLO-style): early stopping and a plateau scheduler on the EMA model's validation loss. On the CPU
    each rank's EMA copied its own BatchNorm running statistics, the losses differed, and the ranks stepped their
    learning rates apart or stopped at different epochs (gloo: "Connection closed by peer"), with 0 items for a
    human. The runtime now averages the running statistics after each DDP forward: every rank evaluates alike."""
    migrated, report, code = migrate_script(tmp_path, EMA_PROGRAM)
    assert code == 0 and "runtime.convert_sync_batchnorm(model)" in migrated, report
    run = run_torchrun(tmp_path / "train.py", nproc_per_node=2, cwd=tmp_path, timeout=120)
    scores = [re.findall(rf"rank {r}: epoch (\d) ema val ([\d.]+)", run.stdout) for r in range(2)]
    assert len(scores[0]) == 3 and scores[0] == scores[1], run.stdout
