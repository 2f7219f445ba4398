"""DDP012 and files opened for writing through a path's own ``open`` (``Path(fname).open("wt")``, PyTorch-Template's
``write_json``) or a compressing module's (``gzip.open(p, "wt")``).

The rule knew ``open(...)`` alone: it guarded the ``json.dump`` inside ``with fname.open("wt") as handle:`` and left the
``open`` on every rank. Rank 1, starting a moment later, truncated the file rank 0 had written: ``config.json`` ended
empty, with the report saying "file written on rank 0 only". The whole ``with`` block is rank 0's now, as for
``open``; reads (``p.open()``, ``p.open("r")``, ``Image.open(p)``) stay every rank's.
"""

from __future__ import annotations

import json
from pathlib import Path

from launch import run_torchrun
from migrated import migrate_script

PROGRAM = """import gzip
import json
import time
from pathlib import Path

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


def write_json(content, fname):
    fname = Path(fname)
    with fname.open("wt") as handle:
        json.dump(content, handle, indent=4)


def read_json(fname):
    with Path(fname).open("rt") as handle:
        return json.load(handle)


def main():
    write_json({"lr": 0.1}, "config.json")
    with gzip.open("log.gz", "wt") as g:
        g.write("start")
    time.sleep(0.2)
    lr = read_json("config.json")["lr"]
    torch.manual_seed(0)
    model = nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    loader = DataLoader(TensorDataset(torch.randn(64, 4), torch.randn(64, 1)), batch_size=8)
    for x, y in loader:
        loss = nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    with Path("done.txt").open(mode="a") as f:
        f.write("done")


if __name__ == "__main__":
    main()
"""


def test_the_whole_with_block_of_a_path_open_for_writing_is_rank_zeros(tmp_path: Path) -> None:
    text, report, _ = migrate_script(tmp_path, PROGRAM)
    assert 'if runtime.is_main_process():\n        with fname.open("wt") as handle:' in text, report + text
    assert 'if runtime.is_main_process():\n        with gzip.open("log.gz", "wt") as g:' in text, report + text
    assert 'if runtime.is_main_process():\n        with Path("done.txt").open(mode="a") as f:' in text, report + text
    assert 'with Path(fname).open("rt") as handle:\n        return json.load(handle)' in text, report + text
    # Rank 1 starts later here: before the fix it truncated the file rank 0 had written.
    launch = run_torchrun(tmp_path / "train.py", nproc_per_node=2, cwd=tmp_path, timeout=120)
    assert launch.returncode == 0, launch.output
    assert json.loads((tmp_path / "config.json").read_text()) == {"lr": 0.1}
    assert (tmp_path / "done.txt").read_text() == "done"


FOLDER = """from pathlib import Path

import torch


def main(run_id=""):
    save_dir = Path("saved") / (run_id or "default")
    save_dir.mkdir(parents=True, exist_ok=EXIST_OK)
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loss = model(torch.randn(8, 4)).pow(2).mean()
    loss.backward()
    opt.step()


main()
"""


def test_a_folder_made_with_an_exist_ok_that_may_be_false_is_for_a_human(tmp_path: Path) -> None:
    """PyTorch-Template's ``save_dir.mkdir(parents=True, exist_ok=run_id == "")``: every rank created the run's
    folder and all but one died with FileExistsError under torchrun, with nothing to review (only a literal
    ``False`` or no ``exist_ok`` was seen)."""
    text, report, _ = migrate_script(tmp_path, FOLDER.replace("EXIST_OK", 'run_id == ""'))
    assert "review" in report and "exist_ok may be False" in report, report
    assert 'save_dir.mkdir(parents=True, exist_ok=run_id == "")' in text  # (left to a human: not made True)
    text, report, _ = migrate_script(tmp_path, FOLDER.replace("EXIST_OK", "True"))
    assert "DDP012" not in report, report
    text, report, _ = migrate_script(tmp_path, FOLDER.replace("EXIST_OK", "False"))
    assert "save_dir.mkdir(parents=True, exist_ok=True)" in text, report + text


def test_a_member_opened_from_an_archive_is_read_on_every_rank(tmp_path: Path) -> None:
    """The review of the path change: ``archive.open("train.csv")`` took its member's name for a mode ("a" in it):
    the read went to rank 0 alone and rank 1 had no data. Only a path's ``open`` takes its mode first."""
    source = """import zipfile

import torch


def main():
    archive = zipfile.ZipFile("data.zip")
    with archive.open("train.csv") as f:
        rows = f.read()
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loss = model(torch.randn(8, 4)).pow(2).mean()
    loss.backward()
    opt.step()


main()
"""
    text, report, _ = migrate_script(tmp_path, source)
    assert '    with archive.open("train.csv") as f:\n        rows = f.read()' in text and "DDP012" not in report, report + text


CAUGHT = """import errno
import os

import torch


def mkdir(path):
    try:
        os.makedirs(path)
    except CAUGHT:
        HANDLED


def main():
    mkdir("out")
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    model(torch.randn(8, 4)).pow(2).mean().backward()
    opt.step()


main()
"""


def test_a_folder_made_under_a_try_that_catches_an_existing_one_is_fine(tmp_path: Path) -> None:
    """torchvision's references' ``utils.mkdir``: ``os.makedirs(path)`` in a ``try`` whose ``except OSError`` re-raises
    anything but EEXIST. The race between ranks is handled; a trial saw DDP012 report it (and ``exist_ok=True`` added)."""
    for caught, handled in [("OSError as e", "if e.errno != errno.EEXIST:\n            raise"), ("FileExistsError", "pass")]:
        text, report, _ = migrate_script(tmp_path, CAUGHT.replace("CAUGHT", caught).replace("HANDLED", handled))
        assert "DDP012" not in report and "os.makedirs(path)\n" in text, report + text
    text, report, _ = migrate_script(tmp_path, CAUGHT.replace("CAUGHT", "ValueError").replace("HANDLED", "pass"))
    assert "os.makedirs(path, exist_ok=True)" in text, report + text
