"""The global batch size kept on ``self`` by the class whose method trains (DDP047).

A trial's Trainer kept ``self.bs = cfg["batch_size"]`` and skipped incomplete batches with ``if xb.size(0) < self.bs:
continue``. The migration split the loader's batch (``CFG["batch_size"]``), the comparison kept the global size, and
every batch was skipped on 2 processes (0 steps; the weights stayed as built), 0 items for a human. Written inline or
passed as an argument, the same comparison was rewritten: the attribute is now read through to what it holds.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from launch import run_python, run_torchrun
from migrated import migrate_script

PROGRAM = """import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

CFG = {"batch_size": 16, "epochs": 2}


class Trainer:
    def __init__(self, model, loader, cfg):
        self.model, self.loader, self.cfg = model, loader, cfg
        self.opt = torch.optim.SGD(model.parameters(), lr=0.1)
        KEPT

    def epoch(self):
        steps = 0
        for xb, yb in self.loader:
            if xb.size(0) < SIZE:
                continue
            loss = F.mse_loss(self.model(xb), yb)
            self.opt.zero_grad()
            loss.backward()
            self.opt.step()
            steps += 1
        return steps


def main():
    torch.manual_seed(0)
    x = torch.randn(72, 4)
    loader = DataLoader(TensorDataset(x, x.sum(1, keepdim=True)), batch_size=CFG["batch_size"], shuffle=False)
    model = nn.Linear(4, 1)
    trainer = Trainer(model, loader, CFG)
    for epoch in range(CFG["epochs"]):
        print("steps", trainer.epoch())
    torch.save(model.state_dict(), "final.pt")


if __name__ == "__main__":
    main()
"""

SHAPES = {
    "attribute": ('self.bs = cfg["batch_size"]', "self.bs"),
    "config-attribute": ("pass", 'self.cfg["batch_size"]'),
}


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_a_batch_compared_with_a_size_the_class_keeps_is_compared_with_the_per_process_size(tmp_path: Path, shape: str) -> None:
    kept, size = SHAPES[shape]
    migrated, report, code = migrate_script(tmp_path, PROGRAM.replace("KEPT", kept).replace("SIZE", size))
    assert code == 0, report
    assert f"if xb.size(0) < runtime.per_process_batch_size({size}):" in migrated, migrated


@pytest.mark.distributed
def test_the_kept_size_trains_every_batch_under_torchrun(tmp_path: Path) -> None:
    """4 full batches of 16 an epoch (the last one of 8 skipped): 2 processes each take 4 of 8 samples, as the
    original took 4 of 16 (before: 0 steps)."""
    source = PROGRAM.replace("KEPT", 'self.bs = cfg["batch_size"]').replace("SIZE", "self.bs")
    original = tmp_path / "original"
    original.mkdir()
    (original / "train.py").write_text(source)
    assert run_python(original / "train.py", cwd=original, timeout=120).stdout.split() == ["steps", "4", "steps", "4"]
    migrate_script(tmp_path, source)
    launch = run_torchrun(tmp_path / "train.py", nproc_per_node=2, cwd=tmp_path, timeout=120)
    assert launch.stdout.split() == ["steps", "4", "steps", "4"], launch.stdout
