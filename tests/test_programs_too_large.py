"""A training script whose program has more local modules than one analysis holds (timm's ``train.py`` importing the
``timm`` package): it is read alone. What the modules it imports do is out of sight, so the lint must not say that
the program never sets up its process group (DDP003) or never wraps its model (DDP011), and the migration must not
add either (a trial: both reported on timm, whose ``utils/distributed.py`` and ``prepare_distributed`` do both)."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from ddp_migrate.cli import cli
from ddp_migrate.program import MAX_PROGRAM_MODULES

TRAIN = """import torch
import torch.nn.functional as F

from lib import build_loader, build_model, setup_distributed


def main():
    setup_distributed()
    model = build_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for x, y in build_loader():
        loss = F.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


if __name__ == "__main__":
    main()
"""

SETUP = """import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel


def setup_distributed():
    if "RANK" in os.environ:
        dist.init_process_group("gloo")


def build_model():
    model = torch.nn.Linear(4, 1)
    return DistributedDataParallel(model) if dist.is_initialized() else model
"""


def _project(folder: Path, modules: int) -> Path:
    lib = folder / "lib"
    lib.mkdir()
    parts = [f"part{i}" for i in range(modules)]
    (lib / "__init__.py").write_text(
        "from .setup import build_model, setup_distributed\nfrom .data import build_loader\n" + "".join(f"from . import {p}\n" for p in parts)
    )
    (lib / "setup.py").write_text(SETUP)
    (lib / "data.py").write_text("import torch\n\n\ndef build_loader():\n    return [(torch.randn(8, 4), torch.randn(8, 1))]\n")
    for part in parts:
        (lib / f"{part}.py").write_text("VALUE = 1\n")
    (folder / "train.py").write_text(TRAIN)
    return folder / "train.py"


def test_a_script_read_alone_is_not_said_to_lack_what_its_imports_may_do(tmp_path: Path) -> None:
    train = _project(tmp_path, MAX_PROGRAM_MODULES + 1)
    output = CliRunner().invoke(cli, ["lint", "--select", "DDP003,DDP011", str(train)]).output
    assert "Found 0 problem" in output, output


def test_the_migration_of_a_script_read_alone_adds_nothing_and_says_why(tmp_path: Path) -> None:
    train = _project(tmp_path, MAX_PROGRAM_MODULES + 1)
    result = CliRunner().invoke(cli, [str(train)])
    assert train.read_text() == TRAIN or "runtime.setup()" not in train.read_text(), train.read_text()
    assert "DistributedDataParallel" not in train.read_text()
    assert "note DDP003 line 1: read alone: the program imports more of its own modules than one analysis holds" in result.output, result.output


def test_the_same_script_in_a_program_of_a_size_to_read_is_read_whole(tmp_path: Path) -> None:
    train = _project(tmp_path, 3)
    output = CliRunner().invoke(cli, ["lint", "--select", "DDP003,DDP011", str(train)]).output
    assert "never sets up" not in output and "DDP011" not in output, output
    assert "DDP003 the program sets up a process group but never destroys it" in output, output  # (read whole: seen)
    (tmp_path / "lib" / "setup.py").write_text(SETUP.replace('dist.init_process_group("gloo")', "pass"))
    output = CliRunner().invoke(cli, ["lint", "--select", "DDP003", str(train)]).output
    assert "DDP003 training script never sets up a process group" in output, output


def test_a_script_whose_many_imports_distribute_nothing_is_migrated_whole(tmp_path: Path) -> None:
    # (a review: with the imports out of sight whatever they held, the entry got a sampler but no process group)
    train = _project(tmp_path, MAX_PROGRAM_MODULES + 1)
    (tmp_path / "lib" / "setup.py").write_text(
        "import torch\n\n\ndef setup_distributed():\n    pass\n\n\ndef build_model():\n    return torch.nn.Linear(4, 1)\n"
    )
    result = CliRunner().invoke(cli, [str(train)])
    text = train.read_text()
    assert "runtime.setup(" in text and "DistributedDataParallel(" in text, result.output + text


def test_a_module_past_the_cap_that_distributes_still_keeps_the_script_read_alone(tmp_path: Path) -> None:
    # The modules past the cap are never scanned for the closure; whether one distributes is read from its text.
    train = _project(tmp_path, MAX_PROGRAM_MODULES + 1)
    init = tmp_path / "lib" / "__init__.py"
    lines = init.read_text().splitlines()
    init.write_text("\n".join([*lines[2:], *lines[:2]]) + "\n")  # the parts first, the setup and data modules last
    output = CliRunner().invoke(cli, ["lint", "--select", "DDP003,DDP011", str(train)]).output
    assert "Found 0 problem" in output, output
    result = CliRunner().invoke(cli, [str(train)])
    assert "note DDP003 line 1: read alone: the program imports more of its own modules than one analysis holds" in result.output, result.output
