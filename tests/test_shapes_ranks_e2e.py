"""Issue 14 items 1, 6, 7, 8 end to end: the shapes in fixtures/shapes_ranks/ are migrated in process and
run as the original (plain python), the migrated copy under torchrun with 2 processes, and the migrated
copy as plain python, each under a timeout (a hang fails with the ranks' output tails). Checks: no hang,
final weights equal to the original's (atol 1e-6), only rank 0 writes files (the e2e recorder), the
user's CPU choice and per-rank prints kept, no internal error. The migrated copy also runs once as a
two-node job (two torchrun agents, one worker each: LOCAL_RANK is 0 on both, global ranks 0 and 1): it
finishes, ends with the two-process run's weights, and only global rank 0 writes and prints."""

from __future__ import annotations

import json
import os
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch

from ddp_migrate.codemods import ALL_RULES
from ddp_migrate.codemods.base import Options
from ddp_migrate.engine import process
from launch import LaunchError, LaunchResult, run_python, run_torchrun, run_two_nodes

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parent.parent
SHAPES = ROOT / "fixtures" / "shapes_ranks"
SUPPORT_DIR = Path(__file__).resolve().parent / "e2e_support"
RECORD_VARIABLE = "DDP_MIGRATE_E2E_RECORD_DIR"
TIMEOUT = 90.0
RULES = [rule for rule in ALL_RULES if rule.enabled_by_default]


def _migrate(source: Path, folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    result = process(source.name, source.read_bytes(), RULES, Options(), fix=True)
    assert result.error is None, result.error
    target = folder / source.name
    target.write_text(result.new_text if result.changed else source.read_text(encoding="utf-8"), encoding="utf-8")
    return target


def _recording_env(records: Path) -> dict[str, str]:
    records.mkdir(parents=True, exist_ok=True)
    existing = os.environ.get("PYTHONPATH", "")
    return {
        "PYTHONPATH": os.pathsep.join(p for p in (str(SUPPORT_DIR), existing) if p),
        RECORD_VARIABLE: str(records),
        "PYTHONHASHSEED": "0",
    }


def _two_nodes(script: Path, records: Path) -> list[LaunchResult] | LaunchError:
    """The two-node launch of ``script`` (checked, so launch.py runs it again after a gloo teardown
    abort); its failure or timeout is kept, not raised, so that it fails the two-node tests only."""
    try:
        return run_two_nodes(script, cwd=script.parent, env=_recording_env(records), timeout=TIMEOUT)
    except LaunchError as error:
        return error


def _two_node_results(runs, name: str) -> tuple[Path, list[LaunchResult]]:
    """The folder and the two agents' results of ``name``'s two-node run; fails if it hung or failed."""
    folder, results = runs[name]["two_nodes"]
    if isinstance(results, LaunchError):
        pytest.fail(f"{name} (two nodes) hung or failed:\n{results}")
    return folder, results


def _writes(records: Path) -> list[dict]:
    found = []
    for path in sorted(records.glob("record-*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            record = json.loads(line)
            if record["kind"] in ("save", "open") and record["rank"] is not None:
                # (the agent has no rank; folders made with exist_ok=True are safe on every rank)
                found.append(record)
    return found


def _final(folder: Path) -> dict[str, torch.Tensor]:
    state = torch.load(folder / "final.pt")
    return {k.removeprefix("module."): v for k, v in state.items()}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, object]]:
    """Every fixture, launched four ways (two launches at a time)."""
    base = tmp_path_factory.mktemp("shapes_ranks")
    jobs = {}
    for source in sorted(SHAPES.glob("*.py")):
        name = source.stem
        original = base / name / "original"
        original.mkdir(parents=True)
        shutil.copyfile(source, original / source.name)
        migrated = _migrate(source, base / name / "torchrun")
        plain = _migrate(source, base / name / "python")
        records = base / name / "records"
        jobs[(name, "original")] = (original, lambda o=original, s=source: run_python(o / s.name, cwd=o, timeout=TIMEOUT, check=False))
        jobs[(name, "torchrun")] = (migrated.parent, lambda m=migrated, r=records: run_torchrun(m, cwd=m.parent, env=_recording_env(r), timeout=TIMEOUT, check=False))
        jobs[(name, "python")] = (plain.parent, lambda p=plain: run_python(p, cwd=p.parent, timeout=TIMEOUT, check=False))
        nodes, nodes_records = base / name / "two_nodes" / source.name, base / name / "records-two-nodes"
        nodes.parent.mkdir()
        shutil.copyfile(migrated, nodes)  # the torchrun copy's migration
        jobs[(name, "two_nodes")] = (nodes.parent, lambda n=nodes, r=nodes_records: _two_nodes(n, r))
    # The longest launches first (two agents, then torchrun), so the short ones fill the gaps at the end.
    longest_first = sorted(jobs, key=lambda key: ("two_nodes", "torchrun", "original", "python").index(key[1]))
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = {key: pool.submit(jobs[key][1]) for key in longest_first}
    results: dict[str, dict[str, object]] = {}
    for (name, how), future in futures.items():
        results.setdefault(name, {})[how] = (jobs[(name, how)][0], future.result())
        results[name]["records"] = base / name / "records"
        results[name]["records-two-nodes"] = base / name / "records-two-nodes"  # as nodes_records above
    return results


NAMES = sorted(p.stem for p in SHAPES.glob("*.py"))


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("how", ["original", "torchrun", "python"])
def test_runs_without_hang_or_error(runs, name: str, how: str) -> None:
    folder, result = runs[name][how]
    assert not result.timed_out, f"{name} ({how}) hung:\n{result.tail()}"
    assert result.returncode == 0, f"{name} ({how}) failed:\n{result.tail()}"


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("how", ["torchrun", "python"])
def test_weights_equal_the_original(runs, name: str, how: str) -> None:
    original, migrated = _final(runs[name]["original"][0]), _final(runs[name][how][0])
    assert original.keys() == migrated.keys()
    for key in original:
        torch.testing.assert_close(migrated[key], original[key], atol=1e-6, rtol=0)


@pytest.mark.parametrize("name", NAMES)
def test_only_rank_zero_writes(runs, name: str) -> None:
    writes = _writes(runs[name]["records"])
    assert writes, "the recorder saw no write"
    assert {w["rank"] for w in writes} == {0}, [w for w in writes if w["rank"] != 0]


def test_rank_conditions_keep_the_users_choices(runs) -> None:
    folder, result = runs["rank_conditions"]["torchrun"]
    output = result.output
    assert "rank 0 uses cpu" in output and "rank 1 uses cpu" in output  # per-rank prints stay on every rank
    assert output.count("device kept: cpu") == 1  # the other prints: rank 0 only
    for name in ("ckpt.pt", "last.pt", "best.pt", "log.txt"):
        assert (folder / name).is_file()


def test_downloaded_once_and_every_writer_wrote(runs) -> None:
    folder, _ = runs["writers"]["torchrun"]
    for name in ("cache/data.txt", "out/weights.npy", "out/epoch.txt", "out/history.json", "out/history.pkl", "out/history-copy.json"):
        assert (folder / name).is_file(), name
    writes = _writes(runs["writers"]["records"])
    assert sum(1 for w in writes if w.get("path", "").endswith("data.txt.part")) == 1


@pytest.mark.parametrize("name", NAMES)
def test_two_nodes_compute_what_one_node_computes(runs, name: str) -> None:
    """Two nodes (LOCAL_RANK 0 on both): no hang, no failure, the weights of the one-node two-process run."""
    folder, _ = _two_node_results(runs, name)
    one_node, two_nodes = _final(runs[name]["torchrun"][0]), _final(folder)
    assert one_node.keys() == two_nodes.keys()
    for key in one_node:
        torch.testing.assert_close(two_nodes[key], one_node[key], atol=1e-6, rtol=0)


@pytest.mark.parametrize("name", NAMES)
def test_two_nodes_only_global_rank_zero_writes(runs, name: str) -> None:
    """A write gated on the local rank would show here: both workers have LOCAL_RANK 0."""
    _two_node_results(runs, name)
    writes = _writes(runs[name]["records-two-nodes"])
    assert writes, "the recorder saw no write"
    seen = {(r["rank"], r["local_rank"]) for path in runs[name]["records-two-nodes"].glob("record-*.jsonl")
            for r in map(json.loads, path.read_text(encoding="utf-8").splitlines()) if r["rank"] is not None}
    assert seen == {(0, 0), (1, 0)}, f"not a two-node environment: (rank, local rank) seen {seen}"
    assert {w["rank"] for w in writes} == {0}, [w for w in writes if w["rank"] != 0]


def test_two_nodes_rank_conditions_print_and_write_once(runs) -> None:
    folder, results = _two_node_results(runs, "rank_conditions")
    output = "".join(result.output for result in results)
    assert "rank 0 uses cpu" in output and "rank 1 uses cpu" in output
    assert output.count("device kept: cpu") == 1
    for name in ("ckpt.pt", "last.pt", "best.pt", "log.txt"):
        assert (folder / name).is_file()


def test_two_nodes_download_once_and_every_writer_wrote(runs) -> None:
    folder, _ = _two_node_results(runs, "writers")
    for name in ("cache/data.txt", "out/weights.npy", "out/epoch.txt", "out/history.json", "out/history.pkl", "out/history-copy.json"):
        assert (folder / name).is_file(), name
    writes = _writes(runs["writers"]["records-two-nodes"])
    assert sum(1 for w in writes if w.get("path", "").endswith("data.txt.part")) == 1
