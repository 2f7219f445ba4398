"""Legacy launchers migrate to torchrun and train the same model.

For each script in fixtures/legacy/ (see its manifest.toml): run the original the way it was written to
be started (``python script.py`` for ``mp.spawn`` and ``Process`` workers, ``torch.distributed.launch``
for ``--local_rank`` scripts), migrate a copy with ``python -m ddp_migrate``, check that a second
migration changes nothing, then run the copy under ``torchrun --standalone --nproc_per_node=2`` and as
two nodes of one process each (two torchrun agents on this machine, so local and global ranks differ).
Both runs must reproduce the original's final weights, and print each epoch's loss once (global rank 0
only, where the original printed once per machine). Every launch has a timeout.
"""

from __future__ import annotations

import re
import shutil
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pytest

from launch import LaunchResult, free_port, run_command, run_python, run_torchrun, run_two_nodes

try:
    import tomllib
except ModuleNotFoundError:  # Python < 3.11
    tomllib = pytest.importorskip("tomli")

torch = pytest.importorskip("torch")

pytestmark = [pytest.mark.e2e, pytest.mark.distributed]

LEGACY = Path(__file__).resolve().parent.parent / "fixtures" / "legacy"
EXPECTED = LEGACY.parent / "expected"
with (LEGACY / "manifest.toml").open("rb") as _file:
    MANIFEST: dict[str, dict] = tomllib.load(_file)["fixtures"]
NAMES = sorted(MANIFEST)
#: Seconds one launch may take (torch imports dominate; the machine may be busy).
TIMEOUT = 180.0


@dataclass
class Run:
    """A finished training run: where it ran and everything it printed."""

    workdir: Path
    output: str


def _args(entry: dict) -> list[str]:
    port = free_port()
    return [arg.replace("{port}", str(port)) for arg in entry["args"]]


def _run_original(name: str, workdir: Path) -> str:
    entry = MANIFEST[name]
    script = LEGACY / entry["script"]
    launcher = entry["launcher"]
    if launcher in ("spawn", "process"):
        result = run_python(script, *_args(entry), cwd=workdir, timeout=TIMEOUT)
    elif launcher == "launch":
        argv = [
            sys.executable,
            "-m",
            "torch.distributed.launch",
            "--standalone",
            f"--nproc_per_node={entry['world_size']}",
            str(script),
            *_args(entry),
        ]
        result = run_command(argv, cwd=workdir, timeout=TIMEOUT)
    else:
        result = run_torchrun(script, *_args(entry), nproc_per_node=entry["world_size"], cwd=workdir, timeout=TIMEOUT)
    return result.output


def _in(workdir: Path, start: Callable[[], str]) -> Run:
    """Run ``start()`` (which launches in ``workdir`` and returns the output) in a new ``workdir``. A launch
    that dies only of torch's gloo teardown abort is repeated by ``launch`` (see ``launch.TEARDOWN_ABORT``)."""
    workdir.mkdir(parents=True)
    return Run(workdir, start())


def _migrate(path: Path) -> LaunchResult:
    """``python -m ddp_migrate path``: exit 0 when nothing is left to review, 1 when something is."""
    result = run_command([sys.executable, "-m", "ddp_migrate", str(path)], timeout=60, check=False)
    assert result.returncode in (0, 1), result.tail()
    return result


@dataclass
class Pipeline:
    """Everything one fixture goes through; a step that failed holds its exception."""

    original: Run | BaseException | None = None
    copy: Path | None = None
    migration: LaunchResult | BaseException | None = None
    second_migration: LaunchResult | BaseException | None = None
    migrated_text: str = ""
    one_node: Run | BaseException | None = None
    two_nodes: Run | BaseException | None = None


def _attempt(step):  # type: ignore[no-untyped-def]
    try:
        return step()
    except BaseException as error:  # noqa: BLE001 - reported by the test that needs the step
        return error


def _pipeline(name: str, workspace: Path) -> Pipeline:
    entry = MANIFEST[name]
    result = Pipeline()
    original_dir = workspace / f"{name}-original"
    result.original = _attempt(lambda: _in(original_dir, lambda: _run_original(name, original_dir)))
    folder = workspace / f"{name}-migrated"
    folder.mkdir()
    copy = result.copy = folder / entry["script"]
    shutil.copyfile(LEGACY / entry["script"], copy)
    result.migration = _attempt(lambda: _migrate(copy))
    result.migrated_text = copy.read_text(encoding="utf-8")
    result.second_migration = _attempt(lambda: _migrate(copy))
    if isinstance(result.migration, BaseException):
        return result

    one_dir, two_dir = workspace / f"{name}-torchrun", workspace / f"{name}-two-nodes"

    def one_node() -> str:
        return run_torchrun(copy, *_args(entry), nproc_per_node=entry["world_size"], cwd=one_dir, timeout=TIMEOUT).output

    def two_nodes() -> str:
        return "".join(r.output for r in run_two_nodes(copy, *_args(entry), cwd=two_dir, timeout=TIMEOUT))

    result.one_node = _attempt(lambda: _in(one_dir, one_node))
    result.two_nodes = _attempt(lambda: _in(two_dir, two_nodes))
    return result


@pytest.fixture(scope="module")
def pipelines(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Pipeline]:
    """Every fixture's runs, two fixtures at a time (a launch alone cannot keep two cores busy)."""
    workspace = tmp_path_factory.mktemp("legacy")
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = {name: pool.submit(_pipeline, name, workspace) for name in NAMES}
        return {name: future.result() for name, future in futures.items()}


def _ok(value):  # type: ignore[no-untyped-def]
    """A step's result, or the step's failure raised here."""
    if isinstance(value, BaseException):
        raise value
    assert value is not None, "the step did not run (an earlier step failed)"
    return value


def _weights(name: str, workdir: Path) -> dict[str, torch.Tensor]:
    entry = MANIFEST[name]
    path = workdir / entry["weights"]
    assert path.is_file(), f"{entry['weights']} was not written in {workdir}"
    state = torch.load(path, map_location="cpu", weights_only=True)
    if entry["weights_key"]:
        state = state[entry["weights_key"]]
    return {key.removeprefix("module."): value for key, value in state.items()}


def _assert_same_weights(name: str, original: Run, run: Run) -> None:
    expected, actual = _weights(name, original.workdir), _weights(name, run.workdir)
    assert expected.keys() == actual.keys()
    for key in expected:
        assert torch.allclose(expected[key], actual[key], rtol=1e-5, atol=1e-6), (
            f"{name}: {key} differs from the original by {(expected[key] - actual[key]).abs().max():.3g}"
        )


def _losses(name: str, output: str) -> list[tuple[int, float]]:
    pattern = re.compile(MANIFEST[name]["loss_pattern"])
    return [(int(m.group(1)), float(m.group(2))) for m in pattern.finditer(output)]


def _assert_printed_once_per_epoch(name: str, original: Run, run: Run) -> None:
    losses = _losses(name, run.output)
    assert [epoch for epoch, _ in losses] == [epoch for epoch, _ in _losses(name, original.output)], run.output[-3000:]
    assert len(losses) == MANIFEST[name]["epochs"], f"expected one loss line per epoch:\n{run.output[-3000:]}"


def test_every_legacy_fixture_is_in_the_manifest_and_has_an_expected_migration() -> None:
    scripts = {p.name for p in LEGACY.glob("*.py")}
    assert scripts == {entry["script"] for entry in MANIFEST.values()}
    for name in scripts:
        assert (EXPECTED / name).is_file(), f"fixtures/expected/{name} is missing"


def test_a_loss_line_is_found_when_another_process_prints_into_it() -> None:
    # What CI saw from the original mp.spawn program: rank 1's print landed before rank 0's loss line,
    # without its newline, so the loss line did not start a line.
    output = (
        "[GPU0] Epoch 0 | Batchsize: 16 | Steps: 8\nepoch 0 loss 3.52852\n"
        "[GPU1] Epoch 2 | Batchsize: 16 | Steps: 8epoch 1 loss 0.39732\n"
        "Epoch 1 | Training checkpoint saved at checkpoint.pt\nepoch 2 loss 0.07816[GPU1] Epoch 3\n"
    )
    assert _losses("spawn_tutorial", output) == [(0, 3.52852), (1, 0.39732), (2, 0.07816)]


@pytest.mark.parametrize("name", NAMES)
def test_original_runs_its_own_way(name: str, pipelines: dict[str, Pipeline]) -> None:
    run = _ok(pipelines[name].original)
    assert len(_losses(name, run.output)) == MANIFEST[name]["epochs"], run.output[-3000:]
    assert _weights(name, run.workdir)


@pytest.mark.parametrize("name", NAMES)
def test_migration_matches_the_expected_file_and_is_a_fixed_point(name: str, pipelines: dict[str, Pipeline]) -> None:
    pipeline = pipelines[name]
    first = _ok(pipeline.migration)
    text = pipeline.migrated_text
    assert text == (EXPECTED / MANIFEST[name]["script"]).read_text(encoding="utf-8")
    assert text != (LEGACY / MANIFEST[name]["script"]).read_text(encoding="utf-8")
    assert "torchrun" in first.output  # the report says how to launch the migrated script
    again = _ok(pipeline.second_migration)
    assert pipeline.copy is not None and pipeline.copy.read_text(encoding="utf-8") == text, again.output
    assert " 0 change(s)" in again.output or "change(s)" not in again.output, again.output


@pytest.mark.parametrize("name", NAMES)
def test_torchrun_one_node_reproduces_the_original(name: str, pipelines: dict[str, Pipeline]) -> None:
    original, run = _ok(pipelines[name].original), _ok(pipelines[name].one_node)
    _assert_same_weights(name, original, run)
    _assert_printed_once_per_epoch(name, original, run)


@pytest.mark.parametrize("name", NAMES)
def test_two_nodes_reproduce_the_original(name: str, pipelines: dict[str, Pipeline]) -> None:
    original, run = _ok(pipelines[name].original), _ok(pipelines[name].two_nodes)
    _assert_same_weights(name, original, run)
    _assert_printed_once_per_epoch(name, original, run)
