"""A project in the src layout: ``pyproject.toml``, ``src/mylib/data.py`` building the loader, ``train.py`` at the root.

A trial's program imported ``from mylib.data import make_loader``: the plan found ``src/mylib/data.py`` (``<root>/src``
is a search root), but named it ``src.mylib.data`` after the first root that holds it, so the import bound
nothing. The loader was never seen ("training batches here come from no DataLoader"), every rank trained on
the whole data set. A module now answers to every name a search root gives it (``mylib.data`` and
``src.mylib.data``, which research code spells without an ``__init__.py`` in ``src``).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from ddp_migrate.cli import cli

DATA = '''
import torch
from torch.utils.data import DataLoader, TensorDataset


def make_loader():
    ds = TensorDataset(torch.arange(64.0).unsqueeze(1), torch.randn(64, 1))
    return DataLoader(ds, batch_size=8, shuffle=True)
'''

TRAIN = '''
import os

import torch
import torch.nn as nn

IMPORT


def main():
    loader = make_loader()
    model = nn.Linear(1, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for epoch in range(2):
        seen = set()
        for xb, yb in loader:
            seen.update(int(v) for v in xb.flatten())
            loss = nn.functional.mse_loss(model(xb), yb)
            opt.zero_grad()
            loss.backward()
            opt.step()
        os.write(1, f"epoch {epoch} distinct samples {len(seen)}\\n".encode())


if __name__ == "__main__":
    main()
'''


def _project(root: Path, spelled: str) -> str:
    (root / "pyproject.toml").write_text('[project]\nname = "mylib"\nversion = "0.1"\n')
    package = root / "src" / "mylib"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "data.py").write_text(DATA)
    (root / "train.py").write_text(TRAIN.replace("IMPORT", spelled))
    return CliRunner().invoke(cli, [str(root / "train.py")], catch_exceptions=False).output


@pytest.mark.parametrize("spelled", ["from mylib.data import make_loader", "from src.mylib.data import make_loader"])
def test_the_loader_a_src_module_builds_is_sharded(tmp_path: Path, spelled: str) -> None:
    report = _project(tmp_path, spelled)
    assert "data.py: migrated, 1 change(s)\n  DDP005" in report, report
    assert "0 item(s) need a human" in report and "DDP040" not in report, report
    assert "sampler=DistributedSampler(ds, shuffle=True)" in (tmp_path / "src" / "mylib" / "data.py").read_text()


@pytest.mark.distributed
def test_each_rank_trains_on_half_of_the_data(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    from launch import run_torchrun

    _project(tmp_path, "from mylib.data import make_loader")
    launch = run_torchrun(tmp_path / "train.py", nproc_per_node=2, cwd=tmp_path, env={"PYTHONPATH": str(tmp_path / "src")}, timeout=120)
    assert re.findall(r"distinct samples (\d+)", launch.output) == ["32"] * 4, launch.output
