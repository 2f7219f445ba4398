"""A loss summed over the batch inside a helper of the program (DDP039).

A trial's VAE returned ``F.binary_cross_entropy(recon, x, reduction="sum") + kld`` from ``loss_function``:
under DDP each process sums over its half of the batch and DDP averages the gradients, so the update
halved (weights 178.314 under torchrun against 178.098), with nothing to review. A helper that returns a
summed loss is read like the same call written in the loop: the loss is scaled by the world size.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from migrated import migrate_script

VAE = '''
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset


def loss_function(recon, x):
    return REDUCED


def main():
    torch.manual_seed(0)
    data = torch.rand(32, 6)
    loader = DataLoader(TensorDataset(data), batch_size=8)
    model = nn.Sequential(nn.Linear(6, 6), nn.Sigmoid())
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for epoch in range(2):
        for (x,) in loader:
            loss = loss_function(model(x), x)
            opt.zero_grad()
            loss.backward()
            opt.step()
    print("checksum", round(sum(float(p.sum()) for p in model.parameters()), 5), flush=True)


if __name__ == "__main__":
    main()
'''

SUMMED = 'F.binary_cross_entropy(recon, x, reduction="sum") + 0.5 * F.mse_loss(recon, x, reduction="sum")'


def test_a_helper_returning_a_summed_loss_is_scaled(tmp_path: Path) -> None:
    migrated, report, code = migrate_script(tmp_path, VAE.replace("REDUCED", SUMMED))
    assert code == 0, report
    assert "(loss * runtime.world_size()).backward()" in migrated, migrated


def test_a_helper_returning_a_mean_is_left_alone(tmp_path: Path) -> None:
    migrated, report, _ = migrate_script(tmp_path, VAE.replace("REDUCED", "F.binary_cross_entropy(recon, x)"))
    assert "world_size()" not in migrated and "DDP039" not in report, report


@pytest.mark.distributed
def test_the_scaled_helper_loss_trains_as_the_original(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    from launch import run_python, run_torchrun

    (tmp_path / "original").mkdir()
    source = VAE.replace("REDUCED", SUMMED)
    (tmp_path / "original" / "train.py").write_text(source)
    expected = run_python(tmp_path / "original" / "train.py", cwd=tmp_path / "original", timeout=120).output.split("checksum")[1].split()[0]
    migrate_script(tmp_path, source)
    launch = run_torchrun(tmp_path / "train.py", nproc_per_node=2, cwd=tmp_path, timeout=120)
    assert f"checksum {expected}" in launch.output, (expected, launch.output)
