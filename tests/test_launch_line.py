"""The launch line a migration prints for its entry script, and that the line it prints runs.

A trial's entry sat in its package and imported the package by name (``from mypkg.models import make`` in
``mypkg/train.py``): the report said ``torchrun ... mypkg/train.py``, which fails at the import (run by its
path, the folder above the package is not on ``sys.path``). It is run as a module, like a relative import.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from ddp_migrate.cli import cli

MODELS = "import torch.nn as nn\n\n\ndef make():\n    return nn.Linear(4, 1)\n"

TRAIN = '''
import torch
from torch.utils.data import DataLoader, TensorDataset

IMPORT


def main():
    model = make()
    data = TensorDataset(torch.randn(32, 4), torch.randn(32, 1))
    loader = DataLoader(data, batch_size=8)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        for x, y in loader:
            loss = (model(x) - y).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    print("trained", flush=True)


if __name__ == "__main__":
    main()
'''


def _project(root: Path, package: bool, spelled: str) -> str:
    folder = root / "mypkg" if package else root
    folder.mkdir(exist_ok=True)
    if package:
        (folder / "__init__.py").write_text("")
    (folder / "models.py").write_text(MODELS)
    (folder / "train.py").write_text(TRAIN.replace("IMPORT", spelled))
    entry = "mypkg/train.py" if package else "train.py"
    result = CliRunner().invoke(cli, [entry], catch_exceptions=False)
    return result.output


@pytest.mark.parametrize(
    ("package", "spelled", "target"),
    [
        (True, "from mypkg.models import make", "-m mypkg.train"),
        (True, "import mypkg.models as models\nmake = models.make", "-m mypkg.train"),
        (True, "from .models import make", "-m mypkg.train"),
        (False, "from models import make", "train.py"),
    ],
    ids=["own-package-by-name", "import-own-package", "relative", "plain-folder"],
)
def test_the_launch_line_runs_a_script_that_imports_its_own_package_as_a_module(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, package: bool, spelled: str, target: str
) -> None:
    monkeypatch.chdir(tmp_path)
    report = _project(tmp_path, package, spelled)
    assert f"launch it with: torchrun --standalone --nproc_per_node=<processes> {target}\n" in report, report


def test_a_package_script_that_imports_only_other_packages_runs_by_its_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    report = _project(tmp_path, True, "import torch.nn as nn\nmake = lambda: nn.Linear(4, 1)")
    assert "--nproc_per_node=<processes> mypkg/train.py\n" in report, report


@pytest.mark.distributed
def test_the_printed_launch_line_trains(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("torch")
    from launch import run_command

    monkeypatch.chdir(tmp_path)
    report = _project(tmp_path, True, "from mypkg.models import make")
    spelled = re.search(r"--nproc_per_node=<processes> (.+)\n", report).group(1)  # type: ignore[union-attr]
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", *spelled.split()]
    launch = run_command(command, cwd=tmp_path, timeout=120)
    assert launch.output.count("trained") == 1, launch.output  # rank 0 prints
