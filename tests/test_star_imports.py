"""Names a program's modules bind with ``from .module import *``: the PyTorch-Template shape (``trainer/__init__.py``
re-exports ``Trainer`` from ``trainer/trainer.py``) and mmdetection's package ``__init__`` files.

The program analysis skipped star imports: ``from trainer_pkg import Trainer`` in ``train.py`` led nowhere, the
trainer's loop over the loader it was handed was never seen as the training, and the migration added no
``DistributedSampler`` and no ``.module`` (every rank trained on the whole data set; new checkpoints carried
``module.`` keys and an original checkpoint no longer resumed), with nothing for a human to review.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from ddp_migrate.cli import cli

BASE = """import torch


class BaseTrainer:
    def __init__(self, model, optimizer):
        self.model, self.optimizer = model, optimizer

    def save(self, path):
        torch.save({"state_dict": self.model.state_dict()}, path)

    def resume(self, path):
        self.model.load_state_dict(torch.load(path)["state_dict"])
"""

TRAINER = """import torch.nn.functional as F

from base import BaseTrainer

__all__ = EXPORTS


class Trainer(BaseTrainer):
    def __init__(self, model, optimizer, loader):
        super().__init__(model, optimizer)
        self.loader = loader

    def train_epoch(self):
        for x, y in self.loader:
            self.optimizer.zero_grad()
            F.mse_loss(self.model(x), y).backward()
            self.optimizer.step()


class _Helper:
    pass
"""

TRAIN = """import sys

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

from trainer_pkg import Trainer


def main():
    torch.manual_seed(0)
    model = nn.Linear(4, 1)
    loader = DataLoader(TensorDataset(torch.randn(32, 4), torch.randn(32, 1)), batch_size=8)
    t = Trainer(model, torch.optim.SGD(model.parameters(), lr=0.1), loader)
    if len(sys.argv) > 1:
        t.resume(sys.argv[1])
    for epoch in range(2):
        t.train_epoch()
    t.save("ck.pt")


if __name__ == "__main__":
    main()
"""


def write_program(folder: Path, exports: str, init: str = "from .trainer import *  # noqa\n") -> None:
    (folder / "trainer_pkg").mkdir()
    (folder / "trainer_pkg" / "__init__.py").write_text(init)
    (folder / "trainer_pkg" / "trainer.py").write_text(TRAINER.replace("EXPORTS", exports))
    (folder / "base.py").write_text(BASE)
    (folder / "train.py").write_text(TRAIN)


@pytest.mark.parametrize("exports", ['["Trainer"]', '("Trainer", "BaseTrainer")'])
def test_a_trainer_re_exported_by_a_star_import_is_migrated(tmp_path: Path, exports: str) -> None:
    write_program(tmp_path, exports)
    result = CliRunner().invoke(cli, [str(tmp_path / "train.py")], catch_exceptions=False)
    train = (tmp_path / "train.py").read_text()
    base = (tmp_path / "base.py").read_text()
    assert "DistributedSampler(" in train, result.output + train
    assert "self.model.module.state_dict()" in base or "runtime.unwrap(self.model)" in base, result.output + base


def test_without_all_the_public_names_are_exported(tmp_path: Path) -> None:
    write_program(tmp_path, "None\ndel __all__")
    CliRunner().invoke(cli, [str(tmp_path / "train.py")], catch_exceptions=False)
    assert "DistributedSampler(" in (tmp_path / "train.py").read_text()


def test_a_name_left_out_of_all_is_not_bound(tmp_path: Path) -> None:
    # ``Trainer`` is not in ``__all__``: ``from trainer_pkg import Trainer`` would fail in Python, and the
    # analysis does not make it up either (no loop over a loader is reached: nothing to shard).
    write_program(tmp_path, '["_Helper"]')
    result = CliRunner().invoke(cli, [str(tmp_path / "train.py")], catch_exceptions=False)
    code = [line for line in (tmp_path / "train.py").read_text().splitlines() if not line.lstrip().startswith("#")]
    assert not any("DistributedSampler(" in line for line in code), result.output


def test_a_name_the_importing_module_binds_itself_stays_its_own() -> None:
    """``from utils import *`` then ``loader = DataLoader(...)``: the module's own ``loader`` (and what it defines) is
    its own, not the one ``utils`` exports; what it does not bind comes from ``utils`` (``__all__`` absent: its
    public names, not ``_private``)."""
    import libcst as cst

    from ddp_migrate.codemods.analysis.program import ModuleInfo, Program

    utils = "import torch\n\nloader = None\nEPOCHS = 2\n_private = 1\n\n\ndef accuracy(out, y):\n    return out\n"
    train = "from utils import *\n\nloader = make()\n\n\ndef accuracy(out, y):\n    return y\n\n\nfor epoch in range(EPOCHS):\n    pass\n"
    program = Program({"utils.py": (cst.parse_module(utils), ModuleInfo("utils", False)), "train.py": (cst.parse_module(train), ModuleInfo("train", True))})
    imports = program.analysis("train.py").local_imports
    assert imports.get("EPOCHS") == ("utils", "EPOCHS") and imports.get("torch") == ("utils", "torch")
    assert "loader" not in imports and "accuracy" not in imports and "_private" not in imports
