"""DDP031's micro-step rewrite, run: a training loop that accumulates over micro-steps of a loop of their own
(``for micro in range(k): ... loss.backward()``, the optimizer stepping after it) migrates to DDP with
``require_backward_grad_sync`` set on the last micro-step only, and two processes under torchrun end with the
weights the original computes alone (the switch leaves no micro-step's gradient unreduced)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from launch import run_python, run_torchrun  # noqa: E402

pytestmark = [pytest.mark.e2e, pytest.mark.distributed]

SCRIPT = '''
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

ACCUM = 3


def main():
    torch.manual_seed(0)
    data, target = torch.randn(96, 4), torch.randn(96, 1)
    loader = DataLoader(TensorDataset(data, target), batch_size=8, shuffle=False)
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    batches = iter(loader)
    for step in range(4):
        for micro in range(ACCUM):
            x, y = next(batches)
            loss = nn.functional.mse_loss(model(x), y) / ACCUM
            loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    torch.save(model.state_dict(), "final.pt")


if __name__ == "__main__":
    main()
'''
ENV = {"OMP_NUM_THREADS": "1"}


def test_micro_steps_synchronised_on_the_last_one_train_what_the_original_trains(tmp_path: Path) -> None:
    original, migrated = tmp_path / "original", tmp_path / "migrated"
    for folder in (original, migrated):
        folder.mkdir()
        (folder / "train.py").write_text(SCRIPT)
    run_python(original / "train.py", cwd=original, env=ENV, timeout=120)
    done = subprocess.run([sys.executable, "-m", "ddp_migrate", "train.py"], cwd=migrated, capture_output=True, text=True, timeout=120)
    assert done.returncode in (0, 1) and ", 0 error(s)" in done.stderr, done.stdout + done.stderr  # 1: set_epoch left to a human
    text = (migrated / "train.py").read_text()
    assert "model.require_backward_grad_sync = micro == ACCUM - 1" in text, text
    run_torchrun(migrated / "train.py", nproc_per_node=2, cwd=migrated, env=ENV, timeout=120)
    expected = torch.load(original / "final.pt")
    got = torch.load(migrated / "final.pt")
    assert expected.keys() == got.keys()
    for key in expected:
        assert torch.allclose(expected[key], got[key], atol=1e-6), key
