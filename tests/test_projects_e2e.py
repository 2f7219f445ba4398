"""End-to-end evidence for programs that span several files (``fixtures/projects/manifest.toml``).

For every project: the original trains with plain ``python``; a copy is migrated by naming only its entry
(``python -m ddp_migrate <entry>``), which must migrate every module the training reaches in one run and
leave tests and untouched modules byte-identical; a second run changes nothing (``--check``). The copy
then trains under ``torchrun --standalone --nproc_per_node=2`` (gloo, CPU), as plain ``python`` and, for
some, on two nodes. Deterministic projects reproduce the original's final weights; every project writes
the same checkpoint keys as the original, only global rank 0 writes files, and the ranks' training shards
are disjoint and cover the data set in every epoch.

What the processes did is recorded by ``tests/e2e_support/sitecustomize.py``. Every launch has a
timeout. Projects run two at a time; each one's launches happen once per session.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import pytest

try:
    import tomllib
except ModuleNotFoundError:  # Python < 3.11
    tomllib = pytest.importorskip("tomli")

torch = pytest.importorskip("torch")

from launch import (  # noqa: E402
    LaunchError,
    LaunchResult,
    run_command,
    run_python,
    run_torchrun,
    run_two_nodes,
    torchrun_command,
)

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parent.parent
PROJECTS = ROOT / "fixtures" / "projects"
SUPPORT_DIR = Path(__file__).resolve().parent / "e2e_support"
MANIFEST: dict[str, dict[str, Any]] = tomllib.loads((PROJECTS / "manifest.toml").read_text(encoding="utf-8"))
NAMES = sorted(MANIFEST)
TIMEOUT = 120.0
ATOL = 1e-6


@dataclass
class Run:
    """One launch of a project: where it ran, what it printed, what it recorded, why it failed."""

    cwd: Path
    results: list[LaunchResult] = field(default_factory=list)
    records: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None

    def check(self) -> None:
        """Fail the test with the launch's output when it did not succeed."""
        if self.error:
            pytest.fail(self.error)


@dataclass
class ProjectRuns:
    """Everything the checks of one project look at."""

    name: str
    original: Run
    migrated_dir: Path
    migrate_output: str
    migrate_status: int
    check_status: int
    check_output: str
    torchrun: Run
    plain: Run
    two_node: Run | None


def _command(entry: dict[str, Any]) -> list[str]:
    command = entry["command"]
    return command.split() if command.startswith("-m ") else [command]


def _run(argv: list[str], nproc: int | None, cwd: Path, env: dict[str, str]) -> LaunchResult:
    """``python argv`` (``nproc`` None) or ``torchrun --standalone --nproc_per_node=nproc argv``, unchecked: a
    script through ``launch``'s forking launches, ``-m module`` as new processes."""
    if argv[0] == "-m":
        launcher = [sys.executable] if nproc is None else torchrun_command("--standalone", f"--nproc_per_node={nproc}")
        return run_command([*launcher, *argv], cwd=cwd, env=env, timeout=TIMEOUT, check=False)
    if nproc is None:
        return run_python(argv[0], *argv[1:], cwd=cwd, env=env, timeout=TIMEOUT, check=False)
    return run_torchrun(argv[0], *argv[1:], nproc_per_node=nproc, cwd=cwd, env=env, timeout=TIMEOUT, check=False)


def _launch(cwd: Path, start: Callable[[dict[str, str]], list[LaunchResult]], record: bool) -> Run:
    env = {"PYTHONHASHSEED": "0", "OMP_NUM_THREADS": "1"}
    run = Run(cwd)
    record_dir = cwd.parent / f"{cwd.name}-records"
    if record:
        shutil.rmtree(record_dir, ignore_errors=True)
        record_dir.mkdir(parents=True)
        existing = os.environ.get("PYTHONPATH", "")
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(SUPPORT_DIR), existing) if p)
        env["DDP_MIGRATE_E2E_RECORD_DIR"] = str(record_dir)
    try:
        run.results = start(env)
    except LaunchError as error:
        run.results, run.error = error.results, str(error)
    if run.error is None and any(r.returncode != 0 for r in run.results):
        run.error = "\n".join(f"$ {' '.join(r.args)}\nexit status {r.returncode}\n{r.tail()}" for r in run.results)
    if record:
        for path in sorted(record_dir.glob("record-*.jsonl")):
            run.records.extend(json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip())
    return run


def _copy(name: str, target: Path) -> Path:
    shutil.copytree(PROJECTS / name, target, ignore=shutil.ignore_patterns("__pycache__", "*.pt"))
    return target


def _run_project(name: str, base: Path) -> ProjectRuns:
    entry = MANIFEST[name]
    argv = _command(entry)
    original = _copy(name, base / "original")
    original_run = _launch(original, lambda env: [_run(argv, None, original, env)], record=False)
    migrated = _copy(name, base / "migrated")
    migrate = subprocess.run(
        [sys.executable, "-m", "ddp_migrate", entry["entry"]], cwd=migrated, capture_output=True, text=True, timeout=TIMEOUT
    )
    check = subprocess.run(
        [sys.executable, "-m", "ddp_migrate", "--check", entry["entry"]], cwd=migrated, capture_output=True, text=True, timeout=TIMEOUT
    )

    def workdir(label: str) -> Path:
        folder = base / label
        shutil.copytree(migrated, folder, ignore=shutil.ignore_patterns("__pycache__"))
        return folder

    torchrun_dir, plain_dir = workdir("torchrun"), workdir("plain")
    torchrun = _launch(torchrun_dir, lambda env: [_run(argv, 2, torchrun_dir, env)], record=True)
    plain = _launch(plain_dir, lambda env: [_run(argv, None, plain_dir, env)], record=True)
    two_node = None
    if entry["two_node"] and not argv[0] == "-m":
        nodes_dir = workdir("two_nodes")
        two_node = _launch(nodes_dir, lambda env: run_two_nodes(argv[0], cwd=nodes_dir, env=env, timeout=TIMEOUT, check=False), record=True)
    return ProjectRuns(
        name, original_run, migrated, migrate.stdout + migrate.stderr, migrate.returncode, check.returncode,
        check.stdout + check.stderr, torchrun, plain, two_node,
    )


@pytest.fixture(scope="module")
def projects(tmp_path_factory: pytest.TempPathFactory) -> dict[str, ProjectRuns]:
    base = tmp_path_factory.mktemp("projects")
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = {name: pool.submit(_run_project, name, base / name) for name in NAMES}
        return {name: future.result() for name, future in futures.items()}


def _state(run: Run, entry: dict[str, Any]) -> dict[str, torch.Tensor]:
    loaded = torch.load(run.cwd / entry["weights"], map_location="cpu", weights_only=True)
    return loaded[entry["weights_key"]] if entry["weights_key"] else loaded


@pytest.mark.parametrize("name", NAMES)
def test_original_trains(projects: dict[str, ProjectRuns], name: str) -> None:
    projects[name].original.check()


@pytest.mark.parametrize("name", NAMES)
def test_one_run_migrates_the_whole_program(projects: dict[str, ProjectRuns], name: str) -> None:
    runs, entry = projects[name], MANIFEST[name]
    assert runs.migrate_status in (0, 1), runs.migrate_output
    assert re.search(r" 0 error\(s\)", runs.migrate_output), runs.migrate_output
    for relative in entry["changed"]:
        assert (runs.migrated_dir / relative).read_bytes() != (PROJECTS / name / relative).read_bytes(), f"{relative} not migrated"
    for relative in entry["unchanged"]:
        assert (runs.migrated_dir / relative).read_bytes() == (PROJECTS / name / relative).read_bytes(), f"{relative} changed"
    setups = sum(path.read_text().count(".setup(") for path in runs.migrated_dir.rglob("*.py"))
    inits = sum(path.read_text().count("init_process_group(") for path in (PROJECTS / name).rglob("*.py"))
    assert setups + inits == 1, "the process group must be set up exactly once in the program"


@pytest.mark.parametrize("name", NAMES)
def test_second_run_changes_nothing(projects: dict[str, ProjectRuns], name: str) -> None:
    # ``--check`` exits 1 when files would change or when findings remain for a human: read which.
    runs = projects[name]
    assert runs.check_status in (0, 1), runs.check_output
    assert re.search(r"(^|\n)0 file\(s\) would be migrated", runs.check_output), runs.check_output


@pytest.mark.parametrize("name", NAMES)
def test_migrated_trains_under_torchrun(projects: dict[str, ProjectRuns], name: str) -> None:
    projects[name].torchrun.check()


@pytest.mark.parametrize("name", NAMES)
def test_migrated_trains_as_plain_python(projects: dict[str, ProjectRuns], name: str) -> None:
    projects[name].plain.check()


@pytest.mark.parametrize("name", [n for n in NAMES if MANIFEST[n]["two_node"]])
def test_migrated_trains_on_two_nodes(projects: dict[str, ProjectRuns], name: str) -> None:
    runs = projects[name]
    assert runs.two_node is not None
    runs.two_node.check()


@pytest.mark.parametrize("name", [n for n in NAMES if MANIFEST[n]["deterministic"]])
def test_same_weights_as_the_original(projects: dict[str, ProjectRuns], name: str) -> None:
    runs, entry = projects[name], MANIFEST[name]
    for run in (runs.original, runs.torchrun, runs.plain):
        run.check()
    expected = _state(runs.original, entry)
    for run in (runs.torchrun, runs.plain):
        actual = _state(run, entry)
        assert list(actual) == list(expected)
        for key in expected:
            torch.testing.assert_close(actual[key], expected[key], atol=ATOL, rtol=1e-5)


@pytest.mark.parametrize("name", NAMES)
def test_checkpoint_keys_are_the_originals(projects: dict[str, ProjectRuns], name: str) -> None:
    runs, entry = projects[name], MANIFEST[name]
    runs.original.check()
    runs.torchrun.check()
    assert sorted(_state(runs.torchrun, entry)) == sorted(_state(runs.original, entry))


@pytest.mark.parametrize("name", NAMES)
def test_only_rank0_writes(projects: dict[str, ProjectRuns], name: str) -> None:
    runs = projects[name]
    runs.torchrun.check()
    writes = [r for r in runs.torchrun.records if r["kind"] in ("save", "open", "mkdir") and r.get("rank") not in (0, None)]
    assert not writes, writes
    assert any(r["kind"] == "save" and r.get("rank") == 0 for r in runs.torchrun.records)


@pytest.mark.parametrize("name", NAMES)
def test_shards_are_disjoint_and_cover_the_set(projects: dict[str, ProjectRuns], name: str) -> None:
    runs, entry = projects[name], MANIFEST[name]
    runs.torchrun.check()
    batches = [r for r in runs.torchrun.records if r["kind"] == "batch" and r["sampler"] == "DistributedSampler"]
    assert batches, "no batch came from a DistributedSampler"
    loader = min(r["loader"] for r in batches)
    by_epoch: dict[int, dict[int, list[int]]] = {}
    size = 0
    for record in batches:
        if record["loader"] == loader:
            by_epoch.setdefault(record["epoch"], {}).setdefault(record["rank"], []).extend(record["indices"])
            size = record["dataset_size"]
    orders = []
    for epoch, shards in sorted(by_epoch.items()):
        assert sorted(shards) == [0, 1], f"epoch {epoch}: ranks {sorted(shards)}"
        assert not set(shards[0]) & set(shards[1]), f"epoch {epoch}: the ranks' shards overlap"
        assert set(shards[0]) | set(shards[1]) == set(range(size)), f"epoch {epoch}: the shards miss samples"
        orders.append(shards[0])
    if entry["shuffle"] and len(orders) > 1:
        assert orders[0] != orders[1], "set_epoch was not called: every epoch has the same order"
