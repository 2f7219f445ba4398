"""End-to-end evidence for the model and checkpoint shapes of issue 14 (items 2, 3 and 9).

Fixtures in ``fixtures/shapes_models/`` (small, deterministic, CPU):

- ``dp_resume.py``: a DataParallel script whose checkpoints carry ``module.`` keys, with resume in a
  closure (``def resume(path): model.load_state_dict(...)``), a new head (``model.module.head =
  nn.Linear(...)``) and ``if train_on_gpu: model.cuda()`` after the wrap, and ``raw = model.module if
  isinstance(model, nn.DataParallel) else model`` before an EMA-style ``copy.deepcopy(raw)``;
- ``single_shapes.py`` (+ ``shapes_loss.py``): a single-device script with a ``reduction="sum"`` loss,
  a new head (``model.head = nn.Linear(...).to(device)``) that the inserted wrap must come after,
  ``model.hyp`` set after the (inserted) wrap and read by a class of another module, an EMA
  ``copy.deepcopy(model)``, ``torch.jit.trace(model, ...)`` and resume in a closure;
- ``cond_accum.py``: gradient accumulation in a script that wraps in DDP only when launched distributed
  (``if distributed: model = DDP(model)``): the inserted ``no_sync()`` must work wrapped or not;
- ``grad_sync_switch.py``: a DDP script that skips the gradient sync on accumulating steps with
  ``model.require_backward_grad_sync = ...``: the switch must stay on the DDP object (same number of
  all-reduces, counted by a communication hook, and the same weights);
- ``method_step.py``: a training step that calls a model method (``model.module.compute_loss``): the
  migration must not pass it off as done (it bypasses DDP's forward); it leaves a TODO and a review line.

For each trained fixture: the original runs with plain ``python`` (2 epochs, then 1 more resumed from its
checkpoint); the migrated copy (``python -m ddp_migrate``) runs under ``torchrun --nproc_per_node=2``: its
final weights equal the original's (atol 1e-6) and its checkpoints have exactly the original's keys; then
it resumes under torchrun from the ORIGINAL's checkpoint, and as plain ``python`` (a world of one) from the
migrated run's checkpoint, and both end with the weights of the original's resumed run. Each migrated
training fixture (``dp_resume.py``, ``single_shapes.py``, ``cond_accum.py``, ``grad_sync_switch.py``) also
runs once as a two-node job (two torchrun agents with one worker each: LOCAL_RANK is 0 on both, global
ranks 0 and 1): it finishes and ends with the weights of the one-node two-process run, with the original's
checkpoint keys and rank 0's prints once. Launches run two at a time, each with a timeout.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from launch import LaunchError, LaunchResult, run_python, run_torchrun, run_two_nodes  # noqa: E402

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parent.parent
SHAPES = ROOT / "fixtures" / "shapes_models"
TIMEOUT = 90.0
#: Fixtures that train; each writes ``<out>/ckpt.pt`` (a dict) and ``<out>/final.pt`` (a state dict).
TRAINED = ("dp_resume.py", "single_shapes.py")
ENV = {"OMP_NUM_THREADS": "1"}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Run every launch once: originals, migrated copies under torchrun and python, and the resumes."""
    original = tmp_path_factory.mktemp("original")
    migrated = tmp_path_factory.mktemp("migrated")
    for folder in (original, migrated):
        for source in SHAPES.glob("*.py"):
            shutil.copy(source, folder / source.name)
    migration = subprocess.run(
        [sys.executable, "-m", "ddp_migrate", *TRAINED, "grad_sync_switch.py"], cwd=migrated, capture_output=True, text=True, timeout=120
    )
    assert migration.returncode == 0, migration.stdout + migration.stderr
    # cond_accum.py has no epoch loop, and its sampler does not shuffle: no set_epoch to ask a human for.
    migration = subprocess.run(
        [sys.executable, "-m", "ddp_migrate", "cond_accum.py"], cwd=migrated, capture_output=True, text=True, timeout=120
    )
    assert migration.returncode == 0 and "DDP031" in migration.stderr, migration.stdout + migration.stderr
    assert 'hasattr(model, "no_sync")' in (migrated / "cond_accum.py").read_text()
    for folder in (original, migrated):
        for run in ("python", "torchrun"):
            (folder / f"cond_{run}").mkdir()
        (folder / "switch").mkdir()
    for name in ("cond_two_nodes", "switch_two_nodes"):
        (migrated / name).mkdir()

    def original_run(script: str, *args: str) -> LaunchResult:
        return run_python(original / script, *args, cwd=original, env=ENV, timeout=TIMEOUT)

    def torchrun(script: str, *args: str) -> LaunchResult:
        return run_torchrun(migrated / script, *args, nproc_per_node=2, cwd=migrated, env=ENV, timeout=TIMEOUT)

    def plain(script: str, *args: str) -> LaunchResult:
        return run_python(migrated / script, *args, cwd=migrated, env=ENV, timeout=TIMEOUT)

    def two_nodes(script: str, *args: str, cwd: Path = migrated) -> list[LaunchResult] | LaunchError:
        """The two-node launch (checked, so launch.py runs it again after a gloo teardown abort); its
        failure or timeout is kept for the two-node tests, not raised here."""
        try:
            return run_two_nodes(migrated / script, *args, cwd=cwd, env=ENV, timeout=TIMEOUT)
        except LaunchError as error:
            return error

    outputs: dict[str, LaunchResult] = {}
    with ThreadPoolExecutor(max_workers=2) as pool:
        first = {}
        for script in TRAINED:
            stem = Path(script).stem
            first[f"{stem}/original"] = pool.submit(original_run, script, "--out", f"{stem}_o1")
            first[f"{stem}/torchrun"] = pool.submit(torchrun, script, "--out", f"{stem}_m1")
        for label, folder in (("original", original), ("migrated", migrated)):
            script = folder / "cond_accum.py"
            first[f"cond_accum/{label}-python"] = pool.submit(
                run_python, script, cwd=folder / "cond_python", env=ENV, timeout=TIMEOUT
            )
            first[f"cond_accum/{label}-torchrun"] = pool.submit(
                run_torchrun, script, nproc_per_node=2, cwd=folder / "cond_torchrun", env=ENV, timeout=TIMEOUT
            )
            first[f"grad_sync_switch/{label}"] = pool.submit(
                run_torchrun, folder / "grad_sync_switch.py", nproc_per_node=2, cwd=folder / "switch", env=ENV, timeout=TIMEOUT
            )
        # Queued behind the first launches, ahead of the resumes: no worker waits while the first finish.
        nodes = {}
        for script in TRAINED:
            stem = Path(script).stem
            nodes[f"{stem}/two-nodes"] = pool.submit(two_nodes, script, "--out", f"{stem}_n1")
        nodes["cond_accum/two-nodes"] = pool.submit(two_nodes, "cond_accum.py", cwd=migrated / "cond_two_nodes")
        nodes["grad_sync_switch/two-nodes"] = pool.submit(two_nodes, "grad_sync_switch.py", cwd=migrated / "switch_two_nodes")
        outputs.update({key: future.result() for key, future in first.items()})
        second = {}
        for script in TRAINED:
            stem = Path(script).stem
            own = str(original / f"{stem}_o1" / "ckpt.pt")
            second[f"{stem}/original-resumed"] = pool.submit(original_run, script, "--resume", own, "--epochs", "1", "--out", f"{stem}_o2")
            second[f"{stem}/resumed-from-original"] = pool.submit(torchrun, script, "--resume", own, "--epochs", "1", "--out", f"{stem}_m2")
            second[f"{stem}/resumed-from-migrated"] = pool.submit(
                plain, script, "--resume", f"{stem}_m1/ckpt.pt", "--epochs", "1", "--out", f"{stem}_m3"
            )
        outputs.update({key: future.result() for key, future in second.items()})
        two_node_outputs = {key: future.result() for key, future in nodes.items()}
    return {"original": original, "migrated": migrated, "outputs": outputs, "two_nodes": two_node_outputs}  # type: ignore[dict-item]


def _load(path: Path) -> dict:
    return torch.load(path, map_location="cpu", weights_only=True)


def _assert_same_weights(actual: dict, expected: dict) -> None:
    assert list(actual) == list(expected)
    for key in expected:
        torch.testing.assert_close(actual[key], expected[key], atol=1e-6, rtol=0, msg=key)


def _checkpoint_keys(checkpoint: dict) -> dict[str, list[str]]:
    """The checkpoint's top-level keys, and the keys of every state dict in it."""
    keys = {"": sorted(checkpoint)}
    for name, value in checkpoint.items():
        if isinstance(value, dict):
            keys[name] = sorted(map(str, value))
    return keys


@pytest.mark.parametrize("script", TRAINED)
def test_final_weights_equal_the_original(runs, script: str) -> None:
    stem = Path(script).stem
    expected = _load(runs["original"] / f"{stem}_o1" / "final.pt")
    _assert_same_weights(_load(runs["migrated"] / f"{stem}_m1" / "final.pt"), expected)


@pytest.mark.parametrize("script", TRAINED)
def test_checkpoints_keep_the_original_keys(runs, script: str) -> None:
    stem = Path(script).stem
    for name in ("ckpt.pt", "final.pt"):
        expected = _load(runs["original"] / f"{stem}_o1" / name)
        actual = _load(runs["migrated"] / f"{stem}_m1" / name)
        assert _checkpoint_keys(actual) == _checkpoint_keys(expected), name
    if script == "dp_resume.py":
        assert all(key.startswith("module.") for key in _load(runs["migrated"] / f"{stem}_m1" / "ckpt.pt")["model"])


@pytest.mark.parametrize("script", TRAINED)
@pytest.mark.parametrize("source", ["resumed-from-original", "resumed-from-migrated"])  # torchrun, python
def test_resume_gives_the_original_resumed_weights(runs, script: str, source: str) -> None:
    stem = Path(script).stem
    out = "m2" if source == "resumed-from-original" else "m3"
    expected = _load(runs["original"] / f"{stem}_o2" / "final.pt")
    _assert_same_weights(_load(runs["migrated"] / f"{stem}_{out}" / "final.pt"), expected)


@pytest.mark.parametrize("run", ["python", "torchrun"])
def test_conditional_wrap_accumulates_like_the_original(runs, run: str) -> None:
    """``no_sync()`` inserted for a conditional wrap: no AttributeError on the plain model (python), and
    the same weights as the original with the wrap (torchrun)."""
    expected = _load(runs["original"] / f"cond_{run}" / "final.pt")
    _assert_same_weights(_load(runs["migrated"] / f"cond_{run}" / "final.pt"), expected)


def test_grad_sync_switch_stays_on_the_ddp_object(runs) -> None:
    """``model.require_backward_grad_sync = ...`` still skips the all-reduce: 2 over 8 micro-steps, as before."""
    lines = {}
    for label in ("original", "migrated"):
        output = runs["outputs"][f"grad_sync_switch/{label}"].output
        lines[label] = [l for l in output.splitlines() if l.startswith("all-reduces ")]
    assert lines["original"][0].startswith("all-reduces 2 ")
    assert lines["migrated"] == lines["original"]
    expected = _load(runs["original"] / "switch" / "final.pt")
    _assert_same_weights(_load(runs["migrated"] / "switch" / "final.pt"), expected)


def test_traced_model_is_the_plain_model(runs) -> None:
    """``torch.jit.trace`` gets the unwrapped model: the migrated run prints the original's traced output once."""
    original = runs["outputs"]["single_shapes/original"].output
    migrated = runs["outputs"]["single_shapes/torchrun"].output
    line = next(l for l in original.splitlines() if l.startswith("traced output"))
    assert migrated.count(line) == 1


def test_method_in_training_step_is_left_to_a_human(tmp_path: Path) -> None:
    """``loss = model.module.compute_loss(x)`` in the training step of a DDP model skips the gradient
    all-reduce: the migration reports it (TODO, review line, exit 1) instead of passing it off as done."""
    shutil.copy(SHAPES / "method_step.py", tmp_path / "method_step.py")
    result = subprocess.run(
        [sys.executable, "-m", "ddp_migrate", "method_step.py"], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    migrated = (tmp_path / "method_step.py").read_text()
    assert result.returncode == 1, result.stdout + result.stderr
    assert "runtime.unwrap(model).compute_loss" not in migrated
    assert "# TODO(ddp-migrate): this model method runs in the training step" in migrated
    assert "review method_step.py:" in result.stdout + result.stderr and "DDP008 compute_loss()" in result.stdout + result.stderr


def _two_nodes(runs, stem: str) -> list[LaunchResult]:
    """The two agents' results of ``stem``'s two-node run; fails if it hung or a process failed."""
    results = runs["two_nodes"][f"{stem}/two-nodes"]
    if isinstance(results, LaunchError):
        pytest.fail(f"{stem} (two nodes) hung or failed:\n{results}")
    return results


@pytest.mark.parametrize("script", TRAINED)
def test_two_nodes_compute_what_one_node_computes(runs, script: str) -> None:
    """Two nodes (LOCAL_RANK 0 on both): the weights of the one-node two-process run, the original's
    checkpoint keys, and rank 0's prints once."""
    stem = Path(script).stem
    results = _two_nodes(runs, stem)
    one_node, two_nodes = runs["migrated"] / f"{stem}_m1", runs["migrated"] / f"{stem}_n1"
    _assert_same_weights(_load(two_nodes / "final.pt"), _load(one_node / "final.pt"))
    for name in ("ckpt.pt", "final.pt"):
        expected = _load(runs["original"] / f"{stem}_o1" / name)
        assert _checkpoint_keys(_load(two_nodes / name)) == _checkpoint_keys(expected), name
    for start in ("epoch ", "traced output"):  # printed by global rank 0 only, as on one node
        one = [l for l in runs["outputs"][f"{stem}/torchrun"].output.splitlines() if l.startswith(start)]
        two = [l for result in results for l in result.output.splitlines() if l.startswith(start)]
        assert len(two) == len(one), (start, two, one)


def test_two_nodes_conditional_wrap_accumulates_like_one_node(runs) -> None:
    _two_nodes(runs, "cond_accum")
    expected = _load(runs["migrated"] / "cond_torchrun" / "final.pt")
    _assert_same_weights(_load(runs["migrated"] / "cond_two_nodes" / "final.pt"), expected)


def test_two_nodes_grad_sync_switch_stays_on_the_ddp_object(runs) -> None:
    results = _two_nodes(runs, "grad_sync_switch")
    one_node = runs["outputs"]["grad_sync_switch/migrated"].output
    lines = [l for result in results for l in result.output.splitlines() if l.startswith("all-reduces ")]
    assert lines == [l for l in one_node.splitlines() if l.startswith("all-reduces ")]  # once, the same count
    expected = _load(runs["migrated"] / "switch" / "final.pt")
    _assert_same_weights(_load(runs["migrated"] / "switch_two_nodes" / "final.pt"), expected)
