"""DDP012 and the program's own folder helpers: ``utils.mkdir(out)`` calls the user's ``def mkdir(path)``,
not ``os.makedirs`` or ``Path.mkdir``, so it must not get ``exist_ok=True`` (the migrated program died
with ``TypeError: mkdir() got an unexpected keyword argument 'exist_ok'``). The folder creation inside the
helper is what the rule fixes, in the helper's own module.
"""

from __future__ import annotations

import os
from pathlib import Path

from click.testing import CliRunner

from ddp_migrate.cli import cli
from launch import run_python

TRAIN = """\
import torch

import utils
from utils import mkdir as make_folder


def main():
    utils.mkdir("out")
    make_folder("out/logs")
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loss = model(torch.randn(8, 4)).pow(2).mean()
    loss.backward()
    opt.step()
    torch.save(model.state_dict(), "out/m.pt")


if __name__ == "__main__":
    main()
"""

UTILS = """\
import os


def mkdir(path):
    os.makedirs(path)
"""


def test_a_helper_called_mkdir_keeps_its_signature(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(TRAIN, encoding="utf-8")
    (tmp_path / "utils.py").write_text(UTILS, encoding="utf-8")
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        result = CliRunner().invoke(cli, ["train.py"])
    finally:
        os.chdir(cwd)
    assert result.exit_code == 0, result.output
    train = (tmp_path / "train.py").read_text(encoding="utf-8")
    utils = (tmp_path / "utils.py").read_text(encoding="utf-8")
    assert '    utils.mkdir("out")\n' in train
    assert '    make_folder("out/logs")\n' in train
    assert "exist_ok" not in train
    # The helper's own folder creation is the one every rank runs: fixed where it is.
    assert "    os.makedirs(path, exist_ok=True)\n" in utils
    assert "DDP012" in result.output and "0 item(s) need a human" in result.output

    run = run_python("train.py", cwd=tmp_path, env={"CUDA_VISIBLE_DEVICES": ""}, timeout=240, check=False)
    assert run.returncode == 0, run.stderr
    assert (tmp_path / "out" / "m.pt").is_file()
    assert (tmp_path / "out" / "logs").is_dir()
