"""``ddp-migrate example``: a bundled script that is there after any install, migrates, and trains.

The migrated example runs with plain ``python`` on a CPU (a world of one process) in a few seconds; under
torchrun with two processes it is one of the distributed tests.
"""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ddp_migrate.example import EXAMPLES


def cli(*args: str, cwd: Path, input: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "NO_COLOR": "1"}
    return subprocess.run([sys.executable, "-m", "ddp_migrate", *args], cwd=cwd, capture_output=True, text=True, timeout=300, input=input, env=env)


def test_example_prints_the_bundled_script(tmp_path: Path) -> None:
    done = cli("example", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout == EXAMPLES["dataparallel"][1]
    assert "nn.DataParallel(model)" in done.stdout
    ast.parse(done.stdout)
    listed = cli("example", "--list", cwd=tmp_path)
    assert listed.returncode == 0 and listed.stdout.startswith("dataparallel  ")
    unknown = cli("example", "nope", cwd=tmp_path)
    assert unknown.returncode == 2 and "Invalid value" in unknown.stderr


def _migrated_example(tmp_path: Path) -> Path:
    script = tmp_path / "train.py"
    script.write_text(cli("example", cwd=tmp_path).stdout)
    done = cli("train.py", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "train.py: migrated" in done.stderr and "0 item(s) need a human, 0 error(s)." in done.stderr
    text = script.read_text()
    assert "DistributedDataParallel(" in text and "DistributedSampler(" in text and "runtime.setup(" in text
    assert cli("--check", "train.py", cwd=tmp_path).returncode == 0, "a second run changes nothing"
    return script


def test_the_migrated_example_trains_as_plain_python_on_cpu(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    _migrated_example(tmp_path)
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    env.pop("RANK", None)
    run = subprocess.run([sys.executable, "train.py"], cwd=tmp_path, capture_output=True, text=True, timeout=300, env=env)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "epoch 2: loss" in run.stdout
    assert (tmp_path / "checkpoints" / "model.pt").exists()


@pytest.mark.distributed
def test_the_migrated_example_trains_under_torchrun(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    if shutil.which("torchrun") is None and not (Path(sys.executable).parent / "torchrun").exists():
        pytest.skip("torchrun is not installed")
    _migrated_example(tmp_path)
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "1"}
    run = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "train.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.count("epoch 2: loss") == 1, "rank 0 prints, once"
    assert (tmp_path / "checkpoints" / "model.pt").exists()
