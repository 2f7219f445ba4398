"""The word-language model's ``--onnx-export`` (a trial): the model is saved whole, loaded back (``model =
torch.load(f)``, the model itself), and an export function reads the global ``model``. The migration handed the
export ``model.module``, which the reloaded model does not have (``AttributeError``): the name holds the wrapper
before the reload and the model itself after it, so the export takes ``runtime.unwrap(model)``."""

from __future__ import annotations

from pathlib import Path

import pytest

from launch import run_torchrun
from migrated import migrate_script

PROGRAM = """
import torch
import torch.nn as nn

model = nn.Linear(4, 2)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(3):
    opt.zero_grad()
    model(torch.randn(8, 4)).sum().backward()
    opt.step()
torch.save(model, "m.pt")
model = torch.load("m.pt", weights_only=False)


def export():
    torch.jit.trace(model, (torch.randn(1, 4),)).save("m.ts")
    print("exported")


export()
"""


def test_an_export_of_a_name_rebound_to_the_reloaded_model_unwraps_either(tmp_path: Path) -> None:
    text, report, _ = migrate_script(tmp_path, PROGRAM)
    assert "torch.jit.trace(runtime.unwrap(model), " in text, text


@pytest.mark.distributed
def test_the_migrated_export_runs_under_torchrun(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    migrate_script(tmp_path, PROGRAM)
    launch = run_torchrun(tmp_path / "train.py", nproc_per_node=2, cwd=tmp_path, timeout=120)
    assert launch.returncode == 0 and "exported" in launch.stdout, launch.stdout + launch.stderr
