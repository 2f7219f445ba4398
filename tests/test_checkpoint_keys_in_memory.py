"""DDP016 keeps the ``module.`` keys of a wrapped model's ``state_dict()`` for the files it writes, not for an
in-memory copy.

A trial's DataParallel program kept an EMA (``ema = copy.deepcopy(model)``) updated key by key from
``model.state_dict()``. The migration copied ``model.module`` (plain keys) and kept the prefix on the
model's state dict: ``KeyError: '0.weight'``, as plain python and under torchrun, with nothing to review.
A state dict that never reaches a save is read through ``.module``, like the copy.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from migrated import migrate_script

EMA = '''
import copy

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset


@torch.no_grad()
def ema_update(ema, model, decay=0.9):
    msd = model.state_dict()
    for k, v in ema.state_dict().items():
        v.mul_(decay).add_(msd[k], alpha=1 - decay)


def main():
    torch.manual_seed(0)
    model = nn.DataParallel(nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2)))
    ema = copy.deepcopy(model)
    loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randint(0, 2, (64,))), batch_size=16)
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    for epoch in range(2):
        for xb, yb in loader:
            loss = F.cross_entropy(model(xb), yb)
            opt.zero_grad()
            loss.backward()
            opt.step()
            ema_update(ema, model)
    SAVE


if __name__ == "__main__":
    main()
'''


def test_an_in_memory_state_dict_has_the_keys_of_the_copy_it_updates(tmp_path: Path) -> None:
    migrated, report, code = migrate_script(tmp_path, EMA.replace("SAVE", "pass"))
    assert code == 0, report
    assert "msd = model.module.state_dict()" in migrated, migrated
    assert "copy.deepcopy(model.module)" in migrated


@pytest.mark.parametrize(
    "save",
    [
        'torch.save(model.state_dict(), "final.pt")',
        'sd = model.state_dict()\n    torch.save({"model": sd}, "final.pt")',
        'sd = model.state_dict()\n    torch.save({k: v.cpu() for k, v in sd.items()}, "final.pt")',
    ],
    ids=["saved", "saved-in-a-dict", "copied-then-saved"],
)
def test_a_saved_state_dict_keeps_its_module_keys(tmp_path: Path, save: str) -> None:
    migrated, report, _ = migrate_script(tmp_path, EMA.replace("SAVE", save))
    assert 'runtime.unwrap(model).state_dict(prefix="module.")' in migrated.split("def main")[1], migrated


@pytest.mark.distributed
def test_the_migrated_ema_trains_under_torchrun(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    from launch import run_torchrun

    migrate_script(tmp_path, EMA.replace("SAVE", 'torch.save(ema.state_dict(), "ema.pt")'))
    run = run_torchrun(tmp_path / "train.py", nproc_per_node=2, cwd=tmp_path, timeout=120)
    assert (tmp_path / "ema.pt").exists(), run.output
