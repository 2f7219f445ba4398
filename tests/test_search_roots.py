"""A program whose entry sits in a subfolder and imports a package beside that folder (``tools/train.py``
importing ``mylib.engine``, the layout of mmcv-style and detectron-style repositories).

A trial's program of this shape was left exactly as it was, with "0 item(s) need a human": the import did not
resolve, so the training loop in ``mylib/engine.py`` was never seen and the entry looked like no training
program at all. Its imports now resolve through the folders the script puts on ``sys.path`` itself (spelled from
``__file__``, directly or through a name). The folder ddp-migrate runs in decides nothing.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from click.testing import CliRunner
from ddp_migrate.cli import cli
from ddp_migrate.codemods.analysis.project import scan

ENTRY = '''\
import os
import sys
PATH_LINE
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

from mylib.engine import train_one_epoch


def main():
    loader = DataLoader(TensorDataset(torch.randn(64, 4), torch.randn(64, 1)), batch_size=16, shuffle=True)
    model = nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        train_one_epoch(model, optimizer, loader)


if __name__ == "__main__":
    main()
'''

ENGINE = '''\
import torch.nn.functional as F


def train_one_epoch(model, optimizer, loader):
    for x, y in loader:
        loss = F.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
'''


def write(root: Path, path_line: str) -> Path:
    (root / "tools").mkdir(parents=True)
    (root / "mylib").mkdir()
    (root / "mylib" / "__init__.py").write_text("")
    (root / "mylib" / "engine.py").write_text(ENGINE)
    entry = root / "tools" / "train.py"
    entry.write_text(ENTRY.replace("PATH_LINE", path_line))
    return entry


@pytest.mark.parametrize(
    "line",
    [
        'sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))',
        "sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))",
        "sys.path.append(str(Path(__file__).resolve().parents[1]))",
        "sys.path.insert(0, str(Path(__file__).parent.parent))",
        'sys.path.append(str(Path(__file__).resolve().parent / ".."))',
        # YOLOv5's spelling: the folder held in a name first.
        "FILE = Path(__file__).resolve()\nROOT = FILE.parents[1]\nif str(ROOT) not in sys.path:\n    sys.path.append(str(ROOT))",
    ],
)
def test_a_folder_the_script_puts_on_sys_path_is_searched(tmp_path: Path, line: str, monkeypatch: pytest.MonkeyPatch) -> None:
    entry = write(tmp_path / "repo", "from pathlib import Path\n" + line)
    monkeypatch.chdir(tmp_path)  # not the repository: only the script's own sys.path line finds mylib
    facts = scan(entry, entry.read_text())
    assert [p.resolve() for p in facts.path_additions] == [(tmp_path / "repo").resolve()]
    result = CliRunner().invoke(cli, ["migrate", str(tmp_path / "repo")])
    assert result.exit_code == 0, result.output
    text = entry.read_text()
    assert "DistributedSampler(" in text and "DistributedDataParallel(" in text, result.output


def test_a_folder_relative_to_the_working_folder_is_not_guessed(tmp_path: Path) -> None:
    entry = tmp_path / "train.py"
    entry.write_text('import sys\nsys.path.insert(0, "..")\nsys.path.append(some_folder)\n')
    assert scan(entry, entry.read_text()).path_additions == []
    ast.parse(entry.read_text())


def test_a_script_run_from_elsewhere_finds_no_module_through_the_working_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The plan does not depend on the folder ddp-migrate runs in: ``python proj/train.py`` never imports a
    ``helpers.py`` of the working folder, so the migration leaves it alone."""
    (tmp_path / "proj").mkdir()
    (tmp_path / "helpers.py").write_text("import torch\n\n\ndef save(model):\n    torch.save(model.state_dict(), 'm.pt')\n")
    (tmp_path / "proj" / "train.py").write_text(ENTRY.replace("PATH_LINE", "").replace("from mylib.engine import train_one_epoch", "from helpers import save"))
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(cli, ["migrate", "--diff", "proj/train.py"])
    assert "helpers.py" not in result.output, result.output
