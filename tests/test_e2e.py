"""End-to-end evidence: migrated scripts train, under torchrun, what the originals trained.

For every legacy script in ``fixtures/scripts/manifest.toml`` (see DESIGN.md, "End-to-end evidence"):

1. the original runs with plain ``python`` in its own working directory;
2. a copy is migrated with ``python -m ddp_migrate``; the result compiles and a second run with
   ``--check`` changes nothing;
3. the migrated copy runs under ``torchrun --standalone --nproc_per_node=2`` (gloo, CPU; where CUDA
   is, one process per GPU, at most two, with NCCL) and, in another directory, as plain ``python``
   (a world of one); every rank wraps its model on its own device with the machine's backend;
4. deterministic scripts reproduce the original's final weights in both runs; the others train to a
   finite, falling loss;
5. only global rank 0 called ``torch.save``, opened a file for writing or called ``os.mkdir`` in the
   working directory; the torchrun run leaves the same files as the original, and prints each epoch's
   loss once;
6. every rank drew a disjoint shard of the training set, the shards together are the whole set, every
   epoch; with ``shuffle=True`` the order changes between epochs (``set_epoch`` is called);
7. the saved weights have no ``module.`` prefix and load with ``strict=True`` into the plain model,
   built from the migrated script imported as a module (for scripts without an entry-point guard, the
   keys must equal those of the original's weights, which come from the plain model);
8. for three representative scripts, a two-node launch on this machine (two torchrun agents, one worker
   each, c10d rendezvous on 127.0.0.1) works and agrees with the original.

What the processes did is recorded by ``tests/e2e_support/sitecustomize.py``, which the suite puts first
on the ``PYTHONPATH`` of the migrated runs (the originals run untouched). It also delays a direct
``os.mkdir`` of a new folder by two seconds, so a check-then-create race between ranks fails every time
rather than now and then. Every launch has a timeout (``tests/launch.py``): a hang fails with the
tail of the output instead of blocking the suite. No launch is repeated: a process that aborts at exit
in torch's gloo teardown fails its test (``runtime.cleanup()`` waits for gloo's worker threads so that it
does not: tests/test_runtime_teardown.py).

Each script's runs happen once per session (cached by fixture name); the checks are separate tests so
that a failure names the script and the property. Known defects of the migration are listed in
``KNOWN_BUGS`` and marked ``xfail(strict=True)``: when one gets fixed, its test starts passing and the
strict xfail fails, so the entry has to be removed.

Run: ``python -m pytest tests/test_e2e.py -q`` (marked ``e2e``).
"""

from __future__ import annotations

import ast
import importlib.util
import json
import logging
import math
import os
import re
import shutil
import sys
import threading
from collections import defaultdict
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

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
)

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS_DIR = ROOT / "fixtures" / "scripts"
SUPPORT_DIR = Path(__file__).resolve().parent / "e2e_support"
RECORD_VARIABLE = "DDP_MIGRATE_E2E_RECORD_DIR"
#: A direct ``os.mkdir`` of a missing folder waits this many seconds in the migrated runs, so that an
#: unguarded ``if not os.path.isdir(d): os.mkdir(d)`` on every rank fails every time instead of now and
#: then (see tests/e2e_support/sitecustomize.py).
MKDIR_DELAY_VARIABLE = "DDP_MIGRATE_E2E_MKDIR_DELAY"
MKDIR_DELAY = 2.0

#: Seconds one launch (a training run, or one ddp-migrate call) may take before it is killed.
LAUNCH_TIMEOUT = 120.0
MIGRATE_TIMEOUT = 60.0
#: CUDA devices here: with any, the migrated runs train on them with NCCL (one process per device).
CUDA_DEVICES = torch.cuda.device_count() if torch.cuda.is_available() else 0
#: Processes per torchrun launch: two on the CPU; one per GPU, at most two, where CUDA is.
NPROC = min(2, CUDA_DEVICES) if CUDA_DEVICES else 2
#: Tolerance for "the same final weights". Measured: at most 1.3e-7 under torchrun (the gradient is
#: averaged in a different summation order), bit-identical as plain python.
ATOL = 1e-6
RTOL = 1e-5

with (SCRIPTS_DIR / "manifest.toml").open("rb") as _fh:
    MANIFEST: dict[str, dict[str, Any]] = tomllib.load(_fh)["fixtures"]

ALL = sorted(MANIFEST)
DETERMINISTIC = [name for name in ALL if MANIFEST[name]["deterministic"]]
NON_DETERMINISTIC = [name for name in ALL if not MANIFEST[name]["deterministic"]]
SHUFFLED = [name for name in ALL if MANIFEST[name]["shuffle"]]
#: Two-node launches are slow; these three cover a main() script, a Trainer class and a module-level
#: script that saves its best checkpoint under a condition.
TWO_NODE = [name for name in ("main_argparse", "trainer_class", "best_checkpoint") if name in MANIFEST]

#: Names the constructor call of a model uses that are local at the call site, mapped to the
#: module-level expression they hold when the script runs (for :func:`plain_models`).
MODEL_CALL_NAMES: dict[str, dict[str, str]] = {
    "config_shuffle": {"cfg": "CONFIG"},
}

#: (fixture, check) -> why the migrated script fails that check: a defect of the migration tool,
#: documented by a strict xfail. Besides a check's own name, the key may name a group of checks:
#: ``"torchrun"`` (every check of a torchrun or two-node run) or ``"*"`` (every check of a migrated run).
KNOWN_BUGS: dict[tuple[str, str], str] = {}

#: Checks that look at a torchrun (or two-node) run of the migrated script.
TORCHRUN_CHECKS = {
    "torchrun_runs", "same_weights_torchrun", "training_works", "printed_once", "same_files",
    "rank0_saves", "rank0_writes", "disjoint_shards", "set_epoch", "checkpoint_loads", "two_node",
    "on_the_device",
}
#: Checks that look at the plain-python run of the migrated script.
PLAIN_CHECKS = {"plain_runs", "same_weights_plain", "whole_set_plain", "training_works"}


def known_bug(name: str, check: str) -> str | None:
    """Why ``check`` is expected to fail for fixture ``name``, or None."""
    groups = [check]
    if check in TORCHRUN_CHECKS:
        groups.append("torchrun")
    if check in TORCHRUN_CHECKS | PLAIN_CHECKS:
        groups.append("*")
    for group in groups:
        if (name, group) in KNOWN_BUGS:
            return KNOWN_BUGS[(name, group)]
    return None


def cases(check: str, names: list[str]) -> list[Any]:
    """``names`` as parameters of the test of ``check``, with a strict xfail on known defects."""
    params = []
    for name in names:
        reason = known_bug(name, check)
        marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
        params.append(pytest.param(name, id=name, marks=marks))
    return params


# ------------------------------------------------------------------------------------------------
# Running things
# ------------------------------------------------------------------------------------------------


@dataclass
class Launch:
    """One launch of a script (all processes of it) and what the instrumentation recorded."""

    what: str
    cwd: Path
    results: list[LaunchResult] = field(default_factory=list)
    error: str | None = None
    records: list[dict[str, Any]] = field(default_factory=list)

    @property
    def output(self) -> str:
        return "".join(result.output for result in self.results)

    def require(self) -> Launch:
        """Fail the calling test, with the output tails, unless the launch succeeded."""
        if self.error is not None:
            pytest.fail(f"{self.what} failed:\n{self.error}", pytrace=False)
        return self

    def kinds(self, kind: str) -> list[dict[str, Any]]:
        return [record for record in self.records if record["kind"] == kind]


@dataclass
class Migration:
    """The migrated copy of a script and the two ddp-migrate calls on it."""

    script: Path
    original_source: str
    first: LaunchResult | None = None
    source: bytes = b""
    check: LaunchResult | None = None
    source_after_check: bytes = b""
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and self.first is not None and self.first.returncode in (0, 1)


@dataclass
class FixtureRuns:
    """Everything the suite ran for one fixture."""

    name: str
    entry: dict[str, Any]
    original: Launch
    migration: Migration
    torchrun: Launch
    plain: Launch


def _read_records(folder: Path) -> list[dict[str, Any]]:
    records = []
    for path in sorted(folder.glob("record-*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                records.append(json.loads(line))
    return records


def _attempt(what: str, cwd: Path, start: Callable[[dict[str, str]], list[LaunchResult]],
             record_dir: Path | None) -> Launch:
    """One attempt at a launch, in a fresh ``cwd`` (and record folder)."""
    env = {"PYTHONHASHSEED": "0"}
    for folder in (cwd, record_dir):
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir(parents=True)
    if record_dir is not None:
        existing = os.environ.get("PYTHONPATH", "")
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(SUPPORT_DIR), existing) if p)
        env[RECORD_VARIABLE] = str(record_dir)
        env[MKDIR_DELAY_VARIABLE] = str(MKDIR_DELAY)
    launch = Launch(what, cwd)
    try:
        launch.results = start(env)
    except LaunchError as error:  # LaunchTimeout included
        launch.results = error.results
        launch.error = str(error)
    if launch.error is None:
        failed = [r for r in launch.results if r.returncode != 0]
        if failed:
            launch.error = "\n".join(
                f"$ {' '.join(r.args)}\nexit status {r.returncode}\n{r.tail()}" for r in launch.results
            )
    if record_dir is not None:
        launch.records = _read_records(record_dir)
    return launch


def _launch(what: str, cwd: Path, start: Callable[[dict[str, str]], list[LaunchResult]],
            record: bool) -> Launch:
    """Run ``start(env)`` and capture its results, failure and (when ``record``) records."""
    record_dir = cwd.parent / f"{cwd.name}-records" if record else None
    return _attempt(what, cwd, start, record_dir)


def _skipped(what: str, cwd: Path, why: str) -> Launch:
    return Launch(what, cwd, error=f"not run: {why}")


def _migrate(name: str, folder: Path) -> Migration:
    entry = MANIFEST[name]
    folder.mkdir(parents=True, exist_ok=True)
    script = folder / entry["script"]
    shutil.copyfile(SCRIPTS_DIR / entry["script"], script)
    migration = Migration(script, script.read_text(encoding="utf-8"))
    command = [sys.executable, "-m", "ddp_migrate"]
    try:
        migration.first = run_command([*command, str(script)], cwd=folder, timeout=MIGRATE_TIMEOUT,
                                      check=False)
        migration.source = script.read_bytes()
        if migration.first.returncode not in (0, 1):
            migration.error = (f"ddp-migrate exited {migration.first.returncode}\n"
                               f"{migration.first.tail()}")
            return migration
        migration.check = run_command([*command, "--check", str(script)], cwd=folder,
                                      timeout=MIGRATE_TIMEOUT, check=False)
        migration.source_after_check = script.read_bytes()
    except LaunchError as error:
        migration.error = str(error)
    return migration


def _run_fixture(name: str, base: Path) -> FixtureRuns:
    """Run the original, migrate a copy, run the copy as plain python and under torchrun.

    The original runs in a second thread while the copy is migrated and run as plain python (each of
    them is one single-threaded process; the machine has at least two cores); torchrun runs alone.
    """
    entry = MANIFEST[name]
    args = [str(arg) for arg in entry["args"]]
    original_script = SCRIPTS_DIR / entry["script"]

    with ThreadPoolExecutor(max_workers=1) as pool:
        original_future = pool.submit(
            _launch, f"original {entry['script']} (python)", base / "original",
            lambda env: [run_python(original_script, *args, cwd=base / "original", env=env,
                                    timeout=LAUNCH_TIMEOUT, check=False)],
            False,
        )
        migration = _migrate(name, base / "migrated")
        if migration.ok:
            plain = _launch(
                f"migrated {entry['script']} (python)", base / "plain",
                lambda env: [run_python(migration.script, *args, cwd=base / "plain", env=env,
                                        timeout=LAUNCH_TIMEOUT, check=False)],
                True,
            )
        else:
            plain = _skipped("migrated (python)", base / "plain", "the migration failed")
        original = original_future.result()

    if migration.ok:
        torchrun = _launch(
            f"migrated {entry['script']} (torchrun --standalone --nproc_per_node={NPROC})",
            base / "torchrun",
            lambda env: [run_torchrun(migration.script, *args, nproc_per_node=NPROC,
                                      cwd=base / "torchrun", env=env, timeout=LAUNCH_TIMEOUT,
                                      check=False)],
            True,
        )
    else:
        torchrun = _skipped("migrated (torchrun)", base / "torchrun", "the migration failed")
    return FixtureRuns(name, entry, original, migration, torchrun, plain)


def _run_two_nodes(runs: FixtureRuns, base: Path) -> Launch:
    if not runs.migration.ok:
        return _skipped("migrated (two nodes)", base / "two_node", "the migration failed")
    args = [str(arg) for arg in runs.entry["args"]]
    return _launch(
        f"migrated {runs.entry['script']} (two torchrun agents, --nnodes=2 --nproc_per_node=1)",
        base / "two_node",
        lambda env: run_two_nodes(runs.migration.script, *args, cwd=base / "two_node", env=env,
                                  timeout=LAUNCH_TIMEOUT, check=False),
        True,
    )


class E2E:
    """Runs each fixture at most once per session and hands out the results.

    Asking for one fixture also starts the next one (in :data:`ALL` order, the order the tests ask
    in), so that one fixture's launches fill the gaps in another's (process start-up, rendezvous).
    """

    #: One fixture ahead on a 2-core machine; more where there are cores to run them (a GPU machine).
    PREFETCH = max(1, min(5, (os.cpu_count() or 2) // 3))

    def __init__(self, factory: pytest.TempPathFactory) -> None:
        self._factory = factory
        self._pool = ThreadPoolExecutor(max_workers=1 + self.PREFETCH, thread_name_prefix="e2e")
        self._runs: dict[str, Future[FixtureRuns]] = {}
        self._two_node: dict[str, Future[Launch]] = {}
        self._lock = threading.Lock()

    def _submit(self, name: str) -> Future[FixtureRuns]:
        with self._lock:
            if name not in self._runs:
                folder = self._factory.mktemp(f"e2e-{name}")
                self._runs[name] = self._pool.submit(_run_fixture, name, folder)
            return self._runs[name]

    def __call__(self, name: str) -> FixtureRuns:
        future = self._submit(name)
        position = ALL.index(name)
        for upcoming in ALL[position + 1 : position + 1 + self.PREFETCH]:
            self._submit(upcoming)
        return future.result()

    def _submit_two_node(self, name: str, runs: FixtureRuns) -> Future[Launch]:
        with self._lock:
            if name not in self._two_node:
                folder = self._factory.mktemp(f"e2e-{name}-2n")
                self._two_node[name] = self._pool.submit(_run_two_nodes, runs, folder)
            return self._two_node[name]

    def two_node(self, name: str) -> Launch:
        """The two-node launch of ``name``; the next one in TWO_NODE starts in the background when
        its fixture's runs are done (a pool thread never waits for another pool job)."""
        future = self._submit_two_node(name, self(name))
        position = TWO_NODE.index(name)
        for upcoming in TWO_NODE[position + 1 : position + 1 + self.PREFETCH]:
            runs = self._runs.get(upcoming)
            if runs is not None and runs.done() and runs.exception() is None:
                self._submit_two_node(upcoming, runs.result())
        return future.result()

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)


@pytest.fixture(scope="session")
def e2e(tmp_path_factory: pytest.TempPathFactory) -> Iterator[E2E]:
    runner = E2E(tmp_path_factory)
    yield runner
    runner.close()


# ------------------------------------------------------------------------------------------------
# Reading results
# ------------------------------------------------------------------------------------------------


def _load_raw(path: Path, entry: dict[str, Any]) -> Any:
    assert path.is_file(), f"{path} was not written"
    return torch.load(path, map_location="cpu", weights_only=entry["weights_only"])


def state_dict_of(path: Path, entry: dict[str, Any]) -> dict[str, torch.Tensor]:
    """The state dict in the weights file (under ``weights_key`` when set), keys as saved."""
    obj = _load_raw(path, entry)
    if entry["weights_key"]:
        assert isinstance(obj, dict) and entry["weights_key"] in obj, (
            f"{path} has no key {entry['weights_key']!r} (keys: {list(obj)[:10]})"
        )
        obj = obj[entry["weights_key"]]
    assert isinstance(obj, dict) and obj, f"{path}: expected a non-empty state dict, got {type(obj)}"
    return dict(obj)


def strip_module(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {key.removeprefix("module."): value for key, value in state.items()}


def weights(launch: Launch, entry: dict[str, Any]) -> dict[str, torch.Tensor]:
    return strip_module(state_dict_of(launch.cwd / entry["weights"], entry))


def assert_same_weights(expected: dict[str, torch.Tensor], actual: dict[str, torch.Tensor],
                        what: str) -> None:
    assert set(actual) == set(expected), (
        f"{what}: different keys; missing {sorted(set(expected) - set(actual))}, "
        f"unexpected {sorted(set(actual) - set(expected))}"
    )
    problems = []
    for key, want in expected.items():
        got = actual[key]
        if got.shape != want.shape:
            problems.append(f"{key}: shape {tuple(got.shape)} != {tuple(want.shape)}")
        elif want.is_floating_point():
            if not torch.allclose(got.double(), want.double(), atol=ATOL, rtol=RTOL):
                diff = (got.double() - want.double()).abs().max().item()
                problems.append(f"{key}: max |difference| {diff:.3g}")
        elif not torch.equal(got, want):
            problems.append(f"{key}: {got.tolist()} != {want.tolist()}")
    assert not problems, f"{what}: final weights differ from the original's:\n" + "\n".join(problems)


def losses(output: str, entry: dict[str, Any]) -> list[float]:
    """The per-epoch losses printed in ``output``, in order."""
    return [float(match.group(2)) for match in re.finditer(entry["loss_pattern"], output)]


def training_batches(launch: Launch, sampler: str = "DistributedSampler"
                     ) -> dict[int, dict[int, list[int]]]:
    """rank -> epoch -> indices drawn, in order, by the loader that uses ``sampler``.

    Each rank must have exactly one such loader (the training loader).
    """
    per_rank: dict[int, dict[int, dict[int, list[tuple[int, list[int]]]]]] = defaultdict(
        lambda: defaultdict(lambda: defaultdict(list))
    )
    for record in launch.kinds("batch"):
        if record["sampler"] == sampler:
            rank = record["rank"] if record["rank"] is not None else 0
            per_rank[rank][record["loader"]][record["epoch"]].append(
                (record["batch"], record["indices"])
            )
    result: dict[int, dict[int, list[int]]] = {}
    for rank, loaders in per_rank.items():
        assert len(loaders) == 1, (
            f"{launch.what}: rank {rank} iterated {len(loaders)} loaders with a {sampler}; expected "
            "exactly one (the training loader)"
        )
        (epochs,) = loaders.values()
        result[rank] = {
            epoch: [index for _, batch in sorted(batches) for index in batch]
            for epoch, batches in epochs.items()
        }
    return result


def assert_disjoint_shards(launch: Launch, entry: dict[str, Any], world_size: int) -> None:
    per_rank = training_batches(launch)
    assert sorted(per_rank) == list(range(world_size)), (
        f"{launch.what}: ranks that drew from a DistributedSampler: {sorted(per_rank)}; expected "
        f"{list(range(world_size))} (is the training loader sharded?)"
    )
    size = entry["dataset_size"]
    for rank, epochs in per_rank.items():
        assert sorted(epochs) == list(range(entry["epochs"])), (
            f"{launch.what}: rank {rank} iterated the training loader in epochs {sorted(epochs)}; "
            f"expected {entry['epochs']} epochs"
        )
    for epoch in range(entry["epochs"]):
        shards = {rank: per_rank[rank][epoch] for rank in per_rank}
        for rank, shard in shards.items():
            assert len(shard) == len(set(shard)) == size // world_size, (
                f"{launch.what}: epoch {epoch}, rank {rank} drew {len(shard)} indices "
                f"({len(set(shard))} distinct); expected {size // world_size} distinct"
            )
        for a in shards:
            for b in shards:
                if a < b:
                    common = set(shards[a]) & set(shards[b])
                    assert not common, (
                        f"{launch.what}: epoch {epoch}: ranks {a} and {b} both drew "
                        f"{sorted(common)[:10]}... ({len(common)} samples)"
                    )
        union = set().union(*map(set, shards.values()))
        assert union == set(range(size)), (
            f"{launch.what}: epoch {epoch}: the shards cover {len(union)} of {size} samples; "
            f"missing {sorted(set(range(size)) - union)[:10]}"
        )


def assert_rank0_saves(launch: Launch, entry: dict[str, Any]) -> None:
    saves = launch.kinds("save")
    assert saves, f"{launch.what}: no process called torch.save"
    others = [s for s in saves if (s["rank"] or 0) != 0]
    assert not others, (
        f"{launch.what}: torch.save called by ranks other than 0:\n"
        + "\n".join(f"  rank {s['rank']} (local {s['local_rank']}): {s['target']}" for s in others)
    )
    targets = {s["target"] for s in saves}
    final = str((launch.cwd / entry["weights"]).resolve())
    assert final in {str(Path(t).resolve()) for t in targets if t}, (
        f"{launch.what}: {entry['weights']} is not among the saved targets {sorted(targets)}"
    )


def assert_rank0_writes(launch: Launch) -> None:
    """No rank but 0 opened a file under the working directory for writing, or called ``os.mkdir``
    there (``os.makedirs(..., exist_ok=True)`` on every rank is fine)."""
    cwd = str(launch.cwd.resolve())
    writes = [r for r in launch.kinds("open") + launch.kinds("mkdir")
              if str(Path(r["path"]).resolve()).startswith(cwd + os.sep)]
    others = [w for w in writes if (w["rank"] or 0) != 0]
    assert not others, (
        f"{launch.what}: ranks other than 0 wrote under the working directory:\n"
        + "\n".join(f"  rank {w['rank']}: {w['kind']} {w['path']} {w.get('mode', '')}"
                    for w in others)
    )


def files_under(folder: Path) -> set[str]:
    return {path.relative_to(folder).as_posix() for path in folder.rglob("*") if path.is_file()}


# ------------------------------------------------------------------------------------------------
# The plain model, from the migrated script imported as a module
# ------------------------------------------------------------------------------------------------


def has_main_guard(source: str) -> bool:
    """Whether the script runs its training only under ``if __name__ == "__main__":``."""
    for node in ast.parse(source).body:
        if isinstance(node, ast.If) and isinstance(node.test, ast.Compare):
            parts = [node.test.left, *node.test.comparators]
            names = {p.id for p in parts if isinstance(p, ast.Name)}
            strings = {p.value for p in parts if isinstance(p, ast.Constant)}
            if names == {"__name__"} and strings == {"__main__"}:
                return True
    return False


def plain_models(name: str, script: Path, workdir: Path) -> list[tuple[str, torch.nn.Module]]:
    """Fresh models built by the model constructor calls of ``script``, imported without running.

    The script is imported under a private module name (so its ``__main__`` block does not run) with
    ``workdir`` as the working directory; the root logger is restored afterwards. Every call of an
    ``nn.Module`` subclass defined in the script is evaluated in the module's namespace (plus
    ``MODEL_CALL_NAMES``); calls that cannot be evaluated there (sub-module calls in a constructor) are
    skipped.
    """
    module_name = f"_ddp_migrate_e2e_{name}"
    spec = importlib.util.spec_from_file_location(module_name, script)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    root = logging.getLogger()
    saved_handlers, saved_level = list(root.handlers), root.level
    previous_cwd = os.getcwd()
    sys.modules[module_name] = module
    try:
        os.chdir(workdir)
        spec.loader.exec_module(module)
    finally:
        os.chdir(previous_cwd)
        sys.modules.pop(module_name, None)
        for handler in root.handlers:
            if handler not in saved_handlers:
                handler.close()
        root.handlers[:] = saved_handlers
        root.setLevel(saved_level)

    namespace = dict(vars(module))
    classes = {
        key for key, value in namespace.items()
        if isinstance(value, type) and issubclass(value, torch.nn.Module)
        and value.__module__ == module_name
    }
    for local, expression in MODEL_CALL_NAMES.get(name, {}).items():
        namespace[local] = eval(expression, namespace)  # noqa: S307 - test code, own fixtures
    calls: list[str] = []
    for node in ast.walk(ast.parse(script.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in classes:
            text = ast.unparse(node)
            if text not in calls:
                calls.append(text)
    models = []
    for call in calls:
        try:
            model = eval(call, namespace)  # noqa: S307
        except Exception:  # noqa: BLE001 - a call that needs its own local variables
            continue
        models.append((call, model))
    return models


# ------------------------------------------------------------------------------------------------
# 1-2. The original runs; the migration succeeds, compiles and is idempotent
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", cases("original_runs", ALL))
def test_original_runs(e2e: E2E, name: str) -> None:
    runs = e2e(name)
    runs.original.require()
    assert (runs.original.cwd / runs.entry["weights"]).is_file()


@pytest.mark.parametrize("name", cases("migrates", ALL))
def test_migration_succeeds_and_compiles(e2e: E2E, name: str) -> None:
    migration = e2e(name).migration
    assert migration.error is None, migration.error
    assert migration.first is not None
    print(migration.first.output)
    assert migration.first.returncode in (0, 1), migration.first.tail()
    if migration.first.returncode == 1:
        print(f"{name}: review items remain (exit 1):\n{migration.first.output}")
    source = migration.source.decode("utf-8")
    assert source != migration.original_source, "ddp-migrate changed nothing"
    compile(source, str(migration.script), "exec")
    assert "from ddp_migrate import runtime" in source


@pytest.mark.parametrize("name", cases("idempotent", ALL))
def test_migration_is_idempotent(e2e: E2E, name: str) -> None:
    migration = e2e(name).migration
    assert migration.ok, migration.error
    assert migration.check is not None and migration.first is not None
    assert migration.source_after_check == migration.source, "--check modified the file"
    check = migration.check
    # Exit 1 from --check means "would change a file" or "findings remain": after a migration that
    # left review items (exit 1), the items remain, but no file may be about to change.
    expected = (0,) if migration.first.returncode == 0 else (0, 1)
    assert check.returncode in expected, (
        f"`ddp-migrate --check` on the migrated file exited {check.returncode}:\n{check.tail()}"
    )
    if check.returncode == 1:
        would = re.search(r"(\d+) file\(s\) would be migrated", check.output)
        assert would is not None and int(would.group(1)) == 0, (
            f"`ddp-migrate --check` would migrate the migrated file again:\n{check.tail()}"
        )


# ------------------------------------------------------------------------------------------------
# 3-4. The migrated script runs and computes what the original computed
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", cases("torchrun_runs", ALL))
def test_migrated_runs_under_torchrun(e2e: E2E, name: str) -> None:
    runs = e2e(name)
    runs.torchrun.require()
    assert (runs.torchrun.cwd / runs.entry["weights"]).is_file()


@pytest.mark.parametrize("name", cases("plain_runs", ALL))
def test_migrated_runs_as_plain_python(e2e: E2E, name: str) -> None:
    runs = e2e(name)
    runs.plain.require()
    assert (runs.plain.cwd / runs.entry["weights"]).is_file()


@pytest.mark.parametrize("name", cases("same_weights_torchrun", DETERMINISTIC))
def test_torchrun_reproduces_original_weights(e2e: E2E, name: str) -> None:
    runs = e2e(name)
    runs.original.require()
    runs.torchrun.require()
    assert_same_weights(weights(runs.original, runs.entry), weights(runs.torchrun, runs.entry),
                        runs.torchrun.what)


@pytest.mark.parametrize("name", cases("same_weights_plain", DETERMINISTIC))
def test_plain_python_reproduces_original_weights(e2e: E2E, name: str) -> None:
    runs = e2e(name)
    runs.original.require()
    runs.plain.require()
    assert_same_weights(weights(runs.original, runs.entry), weights(runs.plain, runs.entry),
                        runs.plain.what)


@pytest.mark.parametrize("name", cases("training_works", NON_DETERMINISTIC))
def test_non_deterministic_training_works(e2e: E2E, name: str) -> None:
    """Weights finite; the printed loss finite and lower in the last epoch than in the first."""
    runs = e2e(name)
    for launch in (runs.torchrun, runs.plain):
        launch.require()
        for key, value in weights(launch, runs.entry).items():
            if value.is_floating_point():
                assert torch.isfinite(value).all(), f"{launch.what}: {key} has non-finite values"
        printed = losses(launch.output, runs.entry)
        assert len(printed) == runs.entry["epochs"], (
            f"{launch.what}: expected {runs.entry['epochs']} loss lines matching "
            f"{runs.entry['loss_pattern']!r}, found {printed}"
        )
        assert all(math.isfinite(loss) for loss in printed), f"{launch.what}: losses {printed}"
        assert printed[-1] < printed[0], f"{launch.what}: the loss did not fall: {printed}"


@pytest.mark.parametrize("name", cases("printed_once", ALL))
def test_progress_is_printed_once(e2e: E2E, name: str) -> None:
    """Under torchrun, each epoch's loss line appears once (rank 0 prints), not once per rank."""
    runs = e2e(name)
    runs.torchrun.require()
    printed = losses(runs.torchrun.output, runs.entry)
    assert len(printed) == runs.entry["epochs"], (
        f"{runs.torchrun.what}: {len(printed)} loss lines matching {runs.entry['loss_pattern']!r} "
        f"for {runs.entry['epochs']} epochs: {printed}"
    )


@pytest.mark.parametrize("name", cases("same_files", ALL))
def test_torchrun_writes_what_the_original_wrote(e2e: E2E, name: str) -> None:
    runs = e2e(name)
    runs.original.require()
    runs.torchrun.require()
    assert files_under(runs.torchrun.cwd) == files_under(runs.original.cwd)


# ------------------------------------------------------------------------------------------------
# 5. Only rank 0 writes
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", cases("rank0_saves", ALL))
def test_only_rank0_saves(e2e: E2E, name: str) -> None:
    runs = e2e(name)
    runs.torchrun.require()
    assert_rank0_saves(runs.torchrun, runs.entry)


@pytest.mark.parametrize("name", cases("rank0_writes", ALL))
def test_only_rank0_writes_in_the_working_directory(e2e: E2E, name: str) -> None:
    runs = e2e(name)
    runs.torchrun.require()
    assert_rank0_writes(runs.torchrun)


# ------------------------------------------------------------------------------------------------
# 6. Disjoint shards; set_epoch reshuffles
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", cases("disjoint_shards", ALL))
def test_ranks_draw_disjoint_shards_of_the_whole_set(e2e: E2E, name: str) -> None:
    runs = e2e(name)
    runs.torchrun.require()
    assert_disjoint_shards(runs.torchrun, runs.entry, NPROC)


@pytest.mark.parametrize("name", cases("whole_set_plain", ALL))
def test_plain_python_draws_the_whole_set(e2e: E2E, name: str) -> None:
    runs = e2e(name)
    runs.plain.require()
    assert_disjoint_shards(runs.plain, runs.entry, 1)


@pytest.mark.parametrize("name", cases("set_epoch", SHUFFLED))
def test_set_epoch_changes_the_order(e2e: E2E, name: str) -> None:
    runs = e2e(name)
    runs.torchrun.require()
    for rank, epochs in training_batches(runs.torchrun).items():
        assert len(epochs) >= 2, f"rank {rank} ran {len(epochs)} epoch(s)"
        assert epochs[0] != epochs[1], (
            f"rank {rank} drew the same order in epochs 0 and 1: sampler.set_epoch is not called"
        )


@pytest.mark.parametrize("name", cases("on_the_device", ALL))
def test_each_rank_wraps_its_model_on_its_own_device(e2e: E2E, name: str) -> None:
    """Every rank wraps one model, on ``cuda:<local rank>`` with NCCL where CUDA is, else on the
    CPU with gloo: the migrated script neither stays on the CPU nor trains on another rank's GPU."""
    runs = e2e(name)
    runs.torchrun.require()
    wraps = runs.torchrun.kinds("ddp")
    assert {record["rank"] for record in wraps} == set(range(NPROC)), (
        f"{runs.torchrun.what}: DistributedDataParallel built by ranks "
        f"{sorted({record['rank'] for record in wraps})}, expected {list(range(NPROC))}"
    )
    for record in wraps:
        local = record["local_rank"]
        if CUDA_DEVICES:
            expected = ("cpu:gloo,cuda:nccl", [f"cuda:{local}"], [local])
        else:
            expected = ("gloo", ["cpu"], None)
        actual = (record["backend"], record["devices"], record["device_ids"])
        assert actual == expected, (
            f"rank {record['rank']}: (backend, parameter devices, device_ids) {actual}, "
            f"expected {expected}"
        )


# ------------------------------------------------------------------------------------------------
# 7. The checkpoint loads into the plain model
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", cases("checkpoint_loads", ALL))
def test_checkpoint_loads_into_the_plain_model(e2e: E2E, name: str, tmp_path: Path) -> None:
    runs = e2e(name)
    runs.torchrun.require()
    saved = state_dict_of(runs.torchrun.cwd / runs.entry["weights"], runs.entry)
    prefixed = [key for key in saved if key.startswith("module.")]
    assert not prefixed, f"saved keys carry the DDP prefix: {prefixed[:5]}"

    source = runs.migration.source.decode("utf-8")
    if not has_main_guard(source):
        # Importing would train: the original's weights are the plain model's state dict.
        runs.original.require()
        expected = state_dict_of(runs.original.cwd / runs.entry["weights"], runs.entry)
        assert list(saved) == list(expected)
        for key, value in expected.items():
            assert saved[key].shape == value.shape, key
        return

    models = plain_models(name, runs.migration.script, tmp_path)
    assert models, f"no model could be built from the constructor calls in {runs.entry['script']}"
    matching = [(call, model) for call, model in models if set(model.state_dict()) == set(saved)]
    assert matching, "no model built by the script has the saved keys:\n" + "\n".join(
        f"  {call}: {sorted(model.state_dict())[:6]}..." for call, model in models
    )
    call, model = matching[0]
    result = model.load_state_dict(saved, strict=True)
    assert not result.missing_keys and not result.unexpected_keys, (call, result)


# ------------------------------------------------------------------------------------------------
# 8. Two nodes on one machine
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", cases("two_node", TWO_NODE))
def test_two_node_launch(e2e: E2E, name: str) -> None:
    """Global rank 1 has local rank 0 here: saving, sharding and weights must still be right."""
    if CUDA_DEVICES == 1:
        pytest.skip("two agents on one machine would share its only GPU (NCCL refuses that)")
    runs = e2e(name)
    launch = e2e.two_node(name).require()
    ranks = {(r["rank"], r["local_rank"]) for r in launch.kinds("batch")}
    assert ranks == {(0, 0), (1, 0)}, f"expected global ranks 0 and 1, both local rank 0: {ranks}"
    printed = losses(launch.output, runs.entry)
    assert len(printed) == runs.entry["epochs"], (
        f"{launch.what}: {len(printed)} loss lines for {runs.entry['epochs']} epochs (printing must "
        f"be guarded by the global rank, not the local rank): {printed}"
    )
    assert_rank0_saves(launch, runs.entry)
    assert_rank0_writes(launch)
    assert_disjoint_shards(launch, runs.entry, 2)
    if runs.entry["deterministic"]:
        runs.original.require()
        assert_same_weights(weights(runs.original, runs.entry), weights(launch, runs.entry),
                            launch.what)
