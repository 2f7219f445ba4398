"""A helper module shared by the training program and a script that trains nothing (an evaluation script).

The plan processes the evaluation script alone (it trains nothing), so the helper's functions were migrated as
if only the training program called them: ``load_checkpoint(model, path)`` became ``model.module.load_state_dict``
and the unchanged evaluation script, handing it a plain model, stopped with ``AttributeError: 'Linear' object has
no attribute 'module'`` (a trial, 0 items). A module such a script imports reaches its models through
``runtime.unwrap(...)``, which takes both.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner
from ddp_migrate.cli import cli

COMMON = """\
import torch


def save_checkpoint(model, path):
    torch.save(model.state_dict(), path)


def load_checkpoint(model, path):
    model.load_state_dict(torch.load(path, map_location="cpu"))
"""

TRAIN = """\
import os

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

from common import load_checkpoint, save_checkpoint

torch.manual_seed(0)
model = nn.Linear(4, 1)
if os.path.exists("model.pt"):
    load_checkpoint(model, "model.pt")  # resume
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
loader = DataLoader(TensorDataset(torch.randn(32, 4), torch.randn(32, 1)), batch_size=8)
for x, y in loader:
    loss = nn.functional.mse_loss(model(x), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
save_checkpoint(model, "model.pt")
"""

EVALUATE = """\
import torch
import torch.nn as nn

from common import load_checkpoint

model = nn.Linear(4, 1)
load_checkpoint(model, "model.pt")
print("evaluated", round(model(torch.ones(1, 4)).item(), 4))
"""


def write(folder: Path) -> None:
    (folder / "common.py").write_text(COMMON)
    (folder / "train.py").write_text(TRAIN)
    (folder / "evaluate.py").write_text(EVALUATE)


def test_a_helper_an_evaluation_script_shares_reaches_the_model_through_unwrap(tmp_path: Path) -> None:
    write(tmp_path)
    result = CliRunner().invoke(cli, ["migrate", str(tmp_path)])
    assert result.exit_code == 0, result.output
    common = (tmp_path / "common.py").read_text()
    assert "runtime.unwrap(model).state_dict()" in common and "runtime.unwrap(model).load_state_dict(" in common, common
    assert ".module" not in common.replace("module.", ""), common
    assert (tmp_path / "evaluate.py").read_text() == EVALUATE


@pytest.mark.distributed
def test_the_evaluation_script_loads_what_the_migrated_program_saved(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    from launch import run_python, run_torchrun

    write(tmp_path)
    CliRunner().invoke(cli, ["migrate", str(tmp_path)])
    run_torchrun(tmp_path / "train.py", nproc_per_node=2, cwd=tmp_path, env={"OMP_NUM_THREADS": "1"}, timeout=120)
    result = run_python(tmp_path / "evaluate.py", cwd=tmp_path, env={"OMP_NUM_THREADS": "1"}, timeout=120)
    assert "evaluated" in result.stdout, result.stdout + result.stderr


def test_an_evaluation_script_that_wraps_in_data_parallel_keeps_it_beside_the_training_program(tmp_path: Path) -> None:
    """A trial: ``eval.py`` (DataParallel, ``no_grad``) migrated alone kept its DataParallel ("the program only
    infers"), but migrated with the folder it was merged into the training program that shares its model
    module, and got DDP and a process group it has no use for."""
    (tmp_path / "models.py").write_text("import torch.nn as nn\n\n\ndef make():\n    return nn.Linear(4, 2)\n")
    (tmp_path / "train.py").write_text(
        "import torch\nimport torch.nn as nn\nfrom torch.utils.data import DataLoader, TensorDataset\n\nfrom models import make\n\n"
        "model = nn.DataParallel(make())\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "loader = DataLoader(TensorDataset(torch.randn(16, 4)), batch_size=4)\n"
        "for (x,) in loader:\n    loss = model(x).pow(2).mean()\n    opt.zero_grad()\n    loss.backward()\n    opt.step()\n"
        'torch.save(model.state_dict(), "w.pt")\n'
    )
    evaluation = (
        "import torch\nimport torch.nn as nn\n\nfrom models import make\n\nmodel = nn.DataParallel(make())\n"
        'model.load_state_dict(torch.load("w.pt"))\nmodel.eval()\nwith torch.no_grad():\n    print(model(torch.ones(2, 4)).sum().item())\n'
    )
    (tmp_path / "eval.py").write_text(evaluation)
    result = CliRunner().invoke(cli, ["migrate", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "eval.py").read_text() == evaluation, result.output
    assert "DistributedDataParallel(" in (tmp_path / "train.py").read_text()
