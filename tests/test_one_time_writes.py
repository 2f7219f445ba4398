"""Files written once and read back by every rank: rank 0 writes, every rank waits, then reads. A trial's
migrated programs crashed on rank 1 (FileNotFoundError, a half-written JSON) where the write had become
rank 0's with nothing to wait on, and hung where a save sat under ``if not os.path.exists(path):`` (a rank
that starts late sees the file and skips the save's barrier). A test of the file system may differ between
ranks; a write in a loop, or a file nothing reads back, gets no barrier.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from ddp_migrate.cli import cli
from launch import run_torchrun
from migrated import migrate_script

VOCABULARY = '''
import json
import os

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def build_vocab(path):
    with open(path, "w") as f:
        json.dump({f"w{i}": i for i in range(50000)}, f)


def main():
    build_vocab("vocab.json")
    with open("vocab.json") as f:
        vocab = json.load(f)
    loader = DataLoader(TensorDataset(torch.randn(32, 4), torch.randn(32, 1)), batch_size=8)
    model = nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        for x, y in loader:
            optimizer.zero_grad()
            nn.functional.mse_loss(model(x), y).backward()
            optimizer.step()
    print(len(vocab))


if __name__ == "__main__":
    main()
'''

CREATE_IF_MISSING = '''
import os

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def main():
    if not os.path.exists("init.pt"):
        torch.save(nn.Linear(4, 1).state_dict(), "init.pt")
    model = nn.Linear(4, 1)
    model.load_state_dict(torch.load("init.pt"))
    loader = DataLoader(TensorDataset(torch.randn(32, 4), torch.randn(32, 1)), batch_size=8)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        for x, y in loader:
            optimizer.zero_grad()
            nn.functional.mse_loss(model(x), y).backward()
            optimizer.step()


if __name__ == "__main__":
    main()
'''


def test_a_file_read_back_by_every_rank_is_waited_for(tmp_path: Path) -> None:
    text, report, code = migrate_script(tmp_path, VOCABULARY)
    assert code == 0, report
    guard = text.index("if runtime.is_main_process():\n        with open(path")
    assert text.index("runtime.barrier()") > guard, text
    assert "every rank waits for it before reading on" in report


def test_a_file_nothing_reads_back_is_not_waited_for(tmp_path: Path) -> None:
    source = VOCABULARY.replace('    with open("vocab.json") as f:\n        vocab = json.load(f)\n', "    vocab = {}\n")
    text, report, _ = migrate_script(tmp_path, source)
    assert "if runtime.is_main_process():" in text and "runtime.barrier()" not in text, text


def test_a_save_under_a_test_of_the_file_system_waits_after_the_test(tmp_path: Path) -> None:
    text, report, code = migrate_script(tmp_path, CREATE_IF_MISSING)
    assert code == 0, report
    body = text[text.index('    if not os.path.exists("init.pt"):'):]
    lines = [line.strip() for line in body.splitlines()[:4]]
    assert lines == [
        'if not os.path.exists("init.pt"):',
        "if runtime.is_main_process():",
        'torch.save(nn.Linear(4, 1).state_dict(), "init.pt")',
        "runtime.barrier()",
    ], text


@pytest.mark.distributed
def test_the_migrated_vocabulary_program_runs_under_torchrun(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    migrate_script(tmp_path, VOCABULARY)
    launch = run_torchrun(tmp_path / "train.py", nproc_per_node=2, cwd=tmp_path, timeout=120)
    assert "50000" in launch.output


NESTED = '''
import json

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def write_json(path, obj):
    with open(path, "w") as f:
        json.dump(obj, f)


def predict_and_dump(model, x):
    with open("preds.txt", "w") as f:
        write_json("preds.json", {"n": 1})
        f.write(str(model(x)))


def main():
    model = nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(TensorDataset(torch.randn(32, 4), torch.randint(0, 2, (32,))), batch_size=8)
    for epoch in range(2):
        for x, y in loader:
            opt.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
        write_json(f"epoch{epoch}.json", {"loss": 1.0})
    predict_and_dump(model, torch.randn(2, 4))
    with open("preds.json") as f:
        print(json.load(f))


if __name__ == "__main__":
    main()
'''


def test_no_barrier_goes_where_only_rank_0_or_every_epoch_runs(tmp_path: Path) -> None:
    """``write_json`` runs inside a block the same fix gives to rank 0, and in the epoch loop: a barrier
    in it would wait for ranks that never come (a review's counter-example hung). The one barrier is after
    the guarded block, which every rank passes once."""
    text, report, _ = migrate_script(tmp_path, NESTED)
    helper = text[text.index("def write_json"):text.index("def predict_and_dump")]
    dump = text[text.index("def predict_and_dump"):text.index("def main")]
    assert "barrier" not in helper, text
    assert dump.count("runtime.barrier()") == 1 and dump.rstrip().endswith("runtime.barrier()"), dump


@pytest.mark.distributed
def test_the_nested_writes_run_under_torchrun(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    migrate_script(tmp_path, NESTED)
    launch = run_torchrun(tmp_path / "train.py", nproc_per_node=2, cwd=tmp_path, timeout=90)
    assert "{'n': 1}" in launch.output


BEST_COPY_HELPER = '''
import shutil

import torch


def save_checkpoint(state, is_best, path="checkpoint.pth.tar"):
    torch.save(state, path)
    if is_best:
        shutil.copyfile(path, "model_best.pth.tar")
'''

BEST_COPY_ENTRY = '''
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

from utils import save_checkpoint


def main():
    torch.manual_seed(0)
    loader = DataLoader(TensorDataset(torch.randn(64, 4), torch.randn(64, 1)), batch_size=16)
    xv, yv = torch.randn(32, 4), torch.randn(32, 1)
    model = nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    best = float("inf")
    for epoch in range(2):
        for x, y in loader:
            optimizer.zero_grad()
            nn.functional.mse_loss(model(x), y).backward()
            optimizer.step()
        with torch.no_grad():
            val_loss = nn.functional.mse_loss(model(xv), yv).item()
        is_best = val_loss < best
        best = min(best, val_loss)
        save_checkpoint({"model": model.state_dict(), "epoch": epoch}, is_best)
    print("best epoch", torch.load("model_best.pth.tar")["epoch"], flush=True)


if __name__ == "__main__":
    main()
'''


def test_a_file_a_helper_copies_on_rank_0_is_waited_for_where_another_module_reads_it(tmp_path: Path) -> None:
    """The ImageNet example's ``save_checkpoint(state, is_best)``: its ``shutil.copyfile`` to the best
    checkpoint is made rank 0's, and ``main`` (another module) reads that file on every rank: a barrier
    goes before the read (a trial: rank 1 read a half-copied 160 MB file in 3 runs of 3)."""
    (tmp_path / "utils.py").write_text(BEST_COPY_HELPER)
    (tmp_path / "train.py").write_text(BEST_COPY_ENTRY)
    result = CliRunner().invoke(cli, [str(tmp_path / "train.py")], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    train = (tmp_path / "train.py").read_text()
    assert "    runtime.barrier()\n    runtime.print0(\n" in train and train.index("runtime.barrier()") < train.index('torch.load("model_best'), train


def test_a_log_file_set_up_by_basic_config_is_opened_on_rank_0_only(tmp_path: Path) -> None:
    """``logging.basicConfig(filename="run.log", filemode="w")`` on every rank: a late rank truncated what
    rank 0 had written (a trial: the first line lost, NUL bytes in its place, in 4 runs of 10)."""
    source = '''
import logging

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

logging.basicConfig(filename="run.log", filemode="w", level=logging.INFO)
logging.info("start")
loader = DataLoader(TensorDataset(torch.randn(64, 4), torch.randn(64, 1)), batch_size=16)
model = nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for epoch in range(2):
    for x, y in loader:
        optimizer.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
'''
    migrated, report, code = migrate_script(tmp_path, source)
    assert code == 0, report
    assert 'if runtime.is_main_process():\n    logging.basicConfig(filename="run.log"' in migrated, migrated


INIT_HELPER = '''
import os

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


def make_init_weights(path):
    torch.manual_seed(123)
    torch.save(nn.Linear(4, 1).state_dict(), path)


def main():
    if not os.path.exists("init.pt"):
        make_init_weights("init.pt")
    torch.manual_seed(0)
    loader = DataLoader(TensorDataset(torch.randn(64, 4), torch.randn(64, 1)), batch_size=16)
    model = nn.Linear(4, 1)
    model.load_state_dict(torch.load("init.pt"))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        for x, y in loader:
            optimizer.zero_grad()
            nn.functional.mse_loss(model(x), y).backward()
            optimizer.step()


if __name__ == "__main__":
    main()
'''


def test_a_file_a_helper_saves_under_a_file_system_test_is_waited_for_before_the_read(tmp_path: Path) -> None:
    """``if not os.path.exists("init.pt"): make_init_weights("init.pt")`` whose ``torch.save(..., path)``
    becomes rank 0's: every rank waits before ``torch.load("init.pt")`` (a trial: FileNotFoundError on rank
    1, exit 0). The helper's path parameter is the literal every call site passes."""
    migrated, report, code = migrate_script(tmp_path, INIT_HELPER)
    assert code == 0, report
    assert "    runtime.barrier()\n    model.load_state_dict(torch.load(\"init.pt\"" in migrated, migrated


LOGGER_HELPER = '''
import logging


def get_logger(path):
    logger = logging.getLogger("train")
    logger.setLevel(logging.INFO)
    logger.addHandler(logging.FileHandler(path))
    return logger
'''

LOGGER_ENTRY = '''
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

from utils import get_logger


def main():
    logger = get_logger("train.log")
    loader = DataLoader(TensorDataset(torch.randn(64, 4), torch.randn(64, 1)), batch_size=16)
    model = nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        for x, y in loader:
            optimizer.zero_grad()
            loss = nn.functional.mse_loss(model(x), y)
            loss.backward()
            optimizer.step()
        logger.info(f"epoch {epoch} loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
'''


def test_a_logger_a_helper_module_builds_logs_on_rank_0_only(tmp_path: Path) -> None:
    """``logger = utils.get_logger(path)`` (a ``logging.getLogger`` logger with a FileHandler, built in
    another module): logging is silenced off rank 0 (a trial: every line twice in train.log, exit 0)."""
    (tmp_path / "utils.py").write_text(LOGGER_HELPER)
    (tmp_path / "train.py").write_text(LOGGER_ENTRY)
    result = CliRunner().invoke(cli, [str(tmp_path / "train.py")], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert "runtime.silence_non_main_logging()" in (tmp_path / "train.py").read_text()


EARLY_STOPPING_BEST = '''
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def evaluate(model, loader):
    with torch.no_grad():
        return sum(nn.functional.mse_loss(model(x), y).item() for x, y in loader)


def main():
    train = DataLoader(TensorDataset(torch.randn(64, 4), torch.randn(64, 1)), batch_size=8, shuffle=True)
    val = DataLoader(TensorDataset(torch.randn(32, 4), torch.randn(32, 1)), batch_size=8)
    model = nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    best, bad = float("inf"), 0
    for epoch in range(20):
        for x, y in train:
            optimizer.zero_grad()
            nn.functional.mse_loss(model(x), y).backward()
            optimizer.step()
        val_loss = evaluate(model, val)
        if val_loss < best:
            best, bad = val_loss, 0
            torch.save(model.state_dict(), "best.pt")
        else:
            bad += 1
            if bad >= 2:
                break
    model.load_state_dict(torch.load("best.pt"))


if __name__ == "__main__":
    main()
'''


def test_a_best_save_beside_an_early_stop_waits_after_the_loop(tmp_path: Path) -> None:
    """``if val_loss < best: save() else: ... break``, the best file loaded after the loop (a trial's early
    stopping): the barrier went right after the ``if``, where a rank whose ``else`` left the loop never comes,
    and the report raised its own DDP033 hang review there. The ranks meet after the loop."""
    migrated, report, _ = migrate_script(tmp_path, EARLY_STOPPING_BEST)
    lines = migrated.splitlines()
    barrier = lines.index("    runtime.barrier()")  # after the epoch loop, in main's own block
    assert "load_state_dict(" in lines[barrier + 1] and lines[barrier - 1].startswith("                break"), migrated
    assert migrated.count("runtime.barrier()") == 1 and "TODO" not in migrated, migrated
    assert "every rank waits after the loop" in report and "0 item(s) need a human" in report, report
