"""A model kept in a module-level global (``model = None``) and built in a function under ``global model``.

A trial's crash with a clean report: the wrap went to module level, after ``model = None`` or after the
builder's ``def`` (read as a statement that rebinds the model), and wrapped ``None`` at import. A placeholder
``None`` is no creation of the model, and a definition binds nothing when it runs: the wrap follows the model's
creation inside the function, where ``global`` makes it rebind the global.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from migrated import migrate_script

BUILDER = '''
import os

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

model = None
optimizer = None


def build():
    global model, optimizer
    model = nn.Linear(4, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)


if __name__ == "__main__":
    torch.manual_seed(0)
    loader = DataLoader(TensorDataset(torch.randn(32, 4), torch.randint(0, 2, (32,))), batch_size=8, shuffle=True)
    build()
    for epoch in range(2):
        for x, y in loader:
            optimizer.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            optimizer.step()
    os.write(1, f"weights {sum(p.sum().item() for p in model.parameters()):.6f}\\n".encode())
'''


def test_the_wrap_follows_the_creation_inside_the_builder(tmp_path: Path) -> None:
    migrated, report, code = migrate_script(tmp_path, BUILDER)
    assert code == 0, report
    assert "    model = nn.Linear(4, 2)\n    model = DistributedDataParallel(model, device_ids=runtime.device_ids())\n" in migrated, migrated
    assert "\nmodel = DistributedDataParallel" not in migrated, migrated  # never at module level


@pytest.mark.distributed
def test_the_migrated_builder_trains_alone_and_under_torchrun(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    from launch import run_python, run_torchrun

    migrate_script(tmp_path, BUILDER)
    alone = run_python(tmp_path / "train.py", cwd=tmp_path, timeout=120)
    assert "weights " in alone.output, alone.output
    launch = run_torchrun(tmp_path / "train.py", nproc_per_node=2, cwd=tmp_path, timeout=120)
    found = re.findall(r"weights (-?\d+\.\d+)", launch.output)
    assert len(found) == 2 and found[0] == found[1], launch.output
