"""What a migrated model with BatchNorm keeps on CPUs, where SyncBatchNorm does not run (DDP030's note).

A trial's program (98 training samples, batch 16, ``nn.BatchNorm1d``) migrated with "BatchNorm converted to
SyncBatchNorm (on CUDA only)" and nothing else; under torchrun on CPUs each rank's share of 49 samples left a
last batch of one sample and both ranks died ("Expected more than 1 value per channel when training"). The
report now says what a CPU run keeps and what to do.
"""

from __future__ import annotations

from pathlib import Path

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
    # A trial: an EMA copied each rank's own running statistics, and the metric evaluated on it differed per rank.
    assert "the running statistics differ between processes too" in note and "runtime.reduce_mean" in note, note


def test_a_cuda_program_is_told_about_its_cpu_runs(tmp_path: Path) -> None:
    source = PROGRAM.replace("NORM", "nn.BatchNorm1d").replace("DEVICE", '.to("cuda" if torch.cuda.is_available() else "cpu")')
    _, report, _ = migrate_script(tmp_path, source)
    assert "note DDP030" in report and "on a CPU run SyncBatchNorm does not run" in report, report


def test_a_model_without_batchnorm_gets_no_note(tmp_path: Path) -> None:
    _, report, _ = migrate_script(tmp_path, PROGRAM.replace("NORM", "nn.LayerNorm").replace("DEVICE", ""))
    assert "DDP030" not in report
