"""Parameter groups per layer of an ``nn.Sequential`` (``{"params": model[0].parameters(), "lr": 0.05}``).

A trial's program: the review called ``model[0]`` "a model held in a container" and suggested wrapping that
layer alone; the model stayed unwrapped while the data was sharded, and the replicas ended apart (-6.77
against 8.37). A container the program runs as a model (``model(x)``) is the model its layers' groups train:
it is wrapped, and the groups read ``model.module[0]``. A list of separate models (``models[0]``, never run
itself) keeps its review.
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


def main():
    torch.manual_seed(0)
    loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8, shuffle=True)
    model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1))
    optimizer = torch.optim.SGD([{"params": model[0].parameters(), "lr": 0.05}, {"params": model[2].parameters(), "lr": 0.1}])
    for epoch in range(2):
        for x, y in loader:
            loss = nn.functional.mse_loss(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    os.write(1, f"weights {sum(p.sum().item() for p in model.parameters()):.6f}\\n".encode())


if __name__ == "__main__":
    main()
'''


def test_the_sequential_is_wrapped_and_its_layers_read_through_module(tmp_path: Path) -> None:
    migrated, report, code = migrate_script(tmp_path, PROGRAM)
    assert code == 0 and "held in a container" not in report, report
    assert "model = DistributedDataParallel(model, device_ids=runtime.device_ids())" in migrated, migrated
    assert '{"params": model.module[0].parameters(), "lr": 0.05}' in migrated, migrated


def test_a_list_of_models_keeps_its_review(tmp_path: Path) -> None:
    source = PROGRAM.replace(
        "    model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1))\n",
        "    models = [nn.Linear(8, 1), nn.Linear(8, 1)]\n    model = lambda x: models[0](x) + models[1](x)\n",
    ).replace('model[0].parameters(), "lr": 0.05}, {"params": model[2]', 'models[0].parameters(), "lr": 0.05}, {"params": models[1]')
    _, report, _ = migrate_script(tmp_path, source)
    assert "held in a container" in report, report


@pytest.mark.distributed
def test_the_replicas_stay_alike_under_torchrun(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    from launch import run_torchrun

    migrate_script(tmp_path, PROGRAM)
    launch = run_torchrun(tmp_path / "train.py", nproc_per_node=2, cwd=tmp_path, timeout=120)
    found = re.findall(r"weights (-?\d+\.\d+)", launch.output)
    assert len(found) == 2 and found[0] == found[1], launch.output
