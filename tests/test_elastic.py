"""Restartable training end to end: a migrated script survives a killed worker and a smaller world.

``fixtures/elastic/train.py`` (deterministic: no shuffle, no dropout, a data set the batch divides) is
migrated in-process with every rule and ``Options(elastic=True)`` (DDP013 adds ``runtime.Snapshot``),
then launched with torchrun. Its probe (``fixtures/elastic/probe.py``) kills global rank 1 once at a
chosen step when ``ELASTIC_FAULT`` says so, and records every trained step of every process.

- Under ``--max-restarts=1`` the job finishes after the kill, with the weights of an uninterrupted
  run (the original script as plain python); the restarted workers begin where the last snapshot was
  (with ``snapshot_every=2``: the step after it), so no epoch and no step done before the snapshot
  runs twice.
- A job stopped for good on 2 processes (epoch snapshots) resumes on 1: it continues with the next
  epoch, finishes with the same weights, and its single process's sampler covers the whole data set
  in every resumed epoch.
"""

from __future__ import annotations

import shutil
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from launch import LaunchResult, run_command, run_python, torchrun_command

from ddp_migrate.codemods import ALL_RULES, Options
from ddp_migrate.engine import process

pytestmark = [pytest.mark.e2e, pytest.mark.distributed]

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "elastic"
EPOCHS = 4
SAMPLES = 64
STEPS = 8  # SAMPLES / BATCH_SIZE: one step is one global batch whatever the world size
TIMEOUT = 120.0


@dataclass
class Step:
    """One trained step of one process, as the probe recorded it."""

    rank: int
    attempt: int
    world: int
    epoch: int
    step: int
    indices: list[int]


def migrate(folder: Path, options: Options) -> Path:
    """Migrate the fixture into ``folder`` (with its probe) and return the migrated script."""
    folder.mkdir()
    result = process("train.py", (FIXTURE / "train.py").read_bytes(), ALL_RULES, options, fix=True)
    assert result.error is None, result.error
    assert "runtime.Snapshot(" in result.new_text and not result.findings, result.new_text
    (folder / "train.py").write_text(result.new_text, encoding="utf-8")
    shutil.copy(FIXTURE / "probe.py", folder / "probe.py")
    return folder / "train.py"


def launch(script: Path, out: Path, nproc: int, restarts: int, fault: str | None = None) -> LaunchResult:
    """torchrun --standalone with ``restarts`` restarts; ``fault`` is ``<rank>:<epoch>:<step>``."""
    out.mkdir(exist_ok=True)
    env = {"ELASTIC_PROBE_DIR": str(out), "DDP_MIGRATE_SNAPSHOT": str(out / "snapshot.pt")}
    if fault:
        env["ELASTIC_FAULT"] = f"{fault}:{out / 'killed'}"
    argv = torchrun_command(
        "--standalone",
        f"--nproc_per_node={nproc}",
        f"--max-restarts={restarts}",
        "--monitor-interval=0.1",
        str(script),
        str(out),
    )
    return run_command(argv, cwd=script.parent, env=env, timeout=TIMEOUT, check=False)


def steps(out: Path) -> list[Step]:
    """Every step the probe recorded, in the order each process trained them."""
    found = []
    for path in sorted(out.glob("steps-rank*.log")):
        rank = int(path.stem.removeprefix("steps-rank"))
        for line in path.read_text().splitlines():
            attempt, world, epoch, step, *indices = map(int, line.split())
            found.append(Step(rank, attempt, world, epoch, step, indices))
    return found


def epochs_logged(out: Path) -> list[int]:
    """The epochs in rank 0's epoch log, one line per completed epoch."""
    return [int(line.split()[1]) for line in (out / "epochs.log").read_text().splitlines()]


def final_weights(out: Path) -> dict[str, torch.Tensor]:
    """The state dict the job saved at its end."""
    return torch.load(out / "final.pt", weights_only=True)


def assert_same_weights(got: dict[str, torch.Tensor], want: dict[str, torch.Tensor]) -> None:
    assert got.keys() == want.keys()
    for key in want:
        torch.testing.assert_close(got[key], want[key], atol=1e-6, rtol=0, msg=key)


def assert_shards_cover_the_data(records: list[Step], attempt: int, world: int) -> None:
    """In every epoch of ``attempt`` that ran every step, the ranks' samples are the data set, each once."""
    by_epoch: dict[int, list[int]] = defaultdict(list)
    step_count: dict[int, set[int]] = defaultdict(set)
    for record in records:
        if record.attempt == attempt:
            assert record.world == world
            by_epoch[record.epoch].extend(record.indices)
            step_count[record.epoch].add(record.step)
    full = [epoch for epoch, done in step_count.items() if done == set(range(STEPS))]
    assert full, "no complete epoch in this attempt"
    for epoch in full:
        assert sorted(by_epoch[epoch]) == list(range(SAMPLES)), epoch


@pytest.fixture(scope="module")
def scripts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The fixture migrated with epoch snapshots, and with snapshots every 2 steps as well."""
    root = tmp_path_factory.mktemp("elastic")
    return {
        "epochs": migrate(root / "epochs", Options(elastic=True)),
        "steps": migrate(root / "steps", Options(elastic=True, snapshot_every=2)),
    }


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> dict[str, torch.Tensor]:
    """The final weights of an uninterrupted run: the original script, as plain python."""
    out = tmp_path_factory.mktemp("uninterrupted")
    run_python(FIXTURE / "train.py", out, cwd=out, timeout=TIMEOUT)
    assert epochs_logged(out) == list(range(EPOCHS))
    return final_weights(out)


def test_a_killed_worker_resumes_from_the_last_step_snapshot(
    scripts: dict[str, Path], reference: dict[str, torch.Tensor], tmp_path: Path
) -> None:
    result = launch(scripts["steps"], tmp_path, nproc=2, restarts=1, fault="1:2:5")
    assert result.returncode == 0, result.tail()
    assert (tmp_path / "killed").exists(), "the fault was never injected"
    records = steps(tmp_path)
    first = [(r.epoch, r.step) for r in records if r.attempt == 0 and r.rank == 0]
    again = [(r.epoch, r.step) for r in records if r.attempt == 1 and r.rank == 0]
    # Rank 1 died before step 5 of epoch 2; snapshots follow steps 1, 3, 5 and 7 of every epoch,
    # so the last one before the kill was taken after step 3 of epoch 2.
    assert first == [(e, s) for e in range(2) for s in range(STEPS)] + [(2, s) for s in range(5)]
    # The restarted workers begin with step 4 of epoch 2: no epoch (and no step before the
    # snapshot) ran twice, and every epoch completed once.
    assert again == [(2, s) for s in range(4, STEPS)] + [(3, s) for s in range(STEPS)]
    assert epochs_logged(tmp_path) == list(range(EPOCHS))
    assert_shards_cover_the_data(records, attempt=1, world=2)
    assert_same_weights(final_weights(tmp_path), reference)


def test_a_job_resumes_on_fewer_processes(
    scripts: dict[str, Path], reference: dict[str, torch.Tensor], tmp_path: Path
) -> None:
    # No restart allowed: the job fails on 2 processes in epoch 2, with epochs 0 and 1 in the snapshot.
    failed = launch(scripts["epochs"], tmp_path, nproc=2, restarts=0, fault="1:2:1")
    assert failed.returncode != 0 and (tmp_path / "killed").exists(), failed.tail()
    assert not (tmp_path / "final.pt").exists()
    # Started again by hand on 1 process: it continues with epoch 2 and finishes.
    resumed = launch(scripts["epochs"], tmp_path, nproc=1, restarts=0)
    assert resumed.returncode == 0, resumed.tail()
    records = steps(tmp_path)
    alone = [r for r in records if r.world == 1]
    assert {r.rank for r in alone} == {0}
    assert [(r.epoch, r.step) for r in alone] == [(e, s) for e in range(2, EPOCHS) for s in range(STEPS)]
    # Every resumed epoch: the single process's sampler covers the data set, each sample once.
    for epoch in range(2, EPOCHS):
        seen = [i for r in alone if r.epoch == epoch for i in r.indices]
        assert sorted(seen) == list(range(SAMPLES)), epoch
    assert epochs_logged(tmp_path) == list(range(EPOCHS))
    assert_same_weights(final_weights(tmp_path), reference)
