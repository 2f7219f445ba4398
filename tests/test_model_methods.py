"""A model's own method that saves, called through the DDP wrapper (``model.save_pretrained(out)``).

The migration reaches the method through ``.module``; the analysis must still see which function that call
runs. A trial's fine-tuning script deadlocked: ``torch.save`` inside the method became ``runtime.save`` (a
barrier on every rank), and the call, no longer resolved through ``model.module``, was taken for a plain
file write and guarded for rank 0, so rank 0 waited alone in the barrier.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from migrated import migrate_script

SCRIPT = '''
import os

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = nn.Linear(4, 1)

    def forward(self, x):
        return self.layer(x)

    def save_pretrained(self, folder):
        os.makedirs(folder, exist_ok=True)
        torch.save(self.state_dict(), os.path.join(folder, "model.bin"))


def main():
    torch.manual_seed(0)
    loader = DataLoader(TensorDataset(torch.randn(64, 4), torch.randn(64, 1)), batch_size=8, shuffle=True)
    model = Net()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        for x, y in loader:
            optimizer.zero_grad()
            nn.functional.mse_loss(model(x), y).backward()
            optimizer.step()
        model.save_pretrained(f"out/epoch{epoch}")
    model.save_pretrained("out/final")


if __name__ == "__main__":
    main()
'''


def migrate(tmp_path: Path) -> tuple[str, str]:
    text, output, code = migrate_script(tmp_path, SCRIPT)
    assert code == 0, output
    return text, output


def test_a_saving_method_called_through_the_wrapper_runs_on_every_rank(tmp_path: Path) -> None:
    text, _ = migrate(tmp_path)
    assert "runtime.save(self.state_dict()" in text  # rank 0 writes, every rank waits
    assert 'model.module.save_pretrained("out/final")' in text
    assert "is_main_process" not in text  # the call is not kept from the other ranks


@pytest.mark.e2e
@pytest.mark.distributed
def test_the_migrated_saving_method_does_not_hang_under_torchrun(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    from launch import run_torchrun

    migrate(tmp_path)
    run_torchrun(tmp_path / "train.py", nproc_per_node=2, cwd=tmp_path, env={"OMP_NUM_THREADS": "1"}, timeout=120)
    assert (tmp_path / "out" / "final" / "model.bin").exists()
