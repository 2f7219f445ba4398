"""The legacy training scripts in fixtures/scripts/ keep the promises their manifest makes.

These are the *inputs* of the end-to-end suite: before anything is migrated, each original script must
run with plain ``python`` on CPU, write exactly the files the manifest lists, save finite final weights
where the manifest says, and print one loss per epoch. Deterministic fixtures must, in addition, obey
the constraints that make "2 processes with half the batch reproduce the original weights" a fair test,
and give bit-identical weights when run twice.
"""

from __future__ import annotations

import ast
import math
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

try:
    import tomllib
except ModuleNotFoundError:  # Python < 3.11
    tomllib = pytest.importorskip("tomli")

torch = pytest.importorskip("torch")

from launch import run_python  # noqa: E402

SCRIPTS_DIR = Path(__file__).resolve().parent.parent / "fixtures" / "scripts"
MANIFEST_PATH = SCRIPTS_DIR / "manifest.toml"
RUN_TIMEOUT_S = 60

with MANIFEST_PATH.open("rb") as _fh:
    MANIFEST: dict[str, dict] = tomllib.load(_fh)["fixtures"]

ALL = sorted(MANIFEST)
DETERMINISTIC = [name for name in ALL if MANIFEST[name]["deterministic"]]

REQUIRED_KEYS = {
    "script": str,
    "description": str,
    "deterministic": bool,
    "nondeterminism": list,
    "args": list,
    "weights": str,
    "weights_key": str,
    "weights_only": bool,
    "writes": list,
    "dataset_size": int,
    "batch_size": int,
    "epochs": int,
    "shuffle": bool,
    "loss_pattern": str,
    "max_loss_ratio": float,
    "pitfalls": list,
}
KNOWN_NONDETERMINISM = {"shuffle", "dropout", "batchnorm"}
FORBIDDEN_SOURCE = ("torch.distributed", "DistributedDataParallel", "DistributedSampler", "torchrun")
ALLOWED_THIRD_PARTY = {"torch", "tqdm"}
STDLIB = set(getattr(sys, "stdlib_module_names", ())) or {
    "__future__", "argparse", "collections", "copy", "dataclasses", "functools", "itertools", "json",
    "logging", "math", "os", "pathlib", "random", "shutil", "sys", "time", "typing",
}


@dataclass
class Run:
    workdir: Path
    returncode: int
    stdout: str
    stderr: str
    wall_s: float

    def explain(self) -> str:
        return (
            f"exit {self.returncode} in {self.workdir} after {self.wall_s:.2f}s\n"
            f"--- stdout (tail) ---\n{self.stdout[-3000:]}\n--- stderr (tail) ---\n{self.stderr[-3000:]}"
        )


def _source(name: str) -> str:
    return (SCRIPTS_DIR / MANIFEST[name]["script"]).read_text(encoding="utf-8")


def _imported_top_level_modules(name: str) -> set[str]:
    tree = ast.parse(_source(name))
    modules: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            modules.add(node.module.split(".")[0])
    return modules


def _skip_without_tqdm(name: str) -> None:
    if "tqdm" in _imported_top_level_modules(name):
        pytest.importorskip("tqdm")


def _run_script(name: str, workdir: Path) -> Run:
    entry = MANIFEST[name]
    workdir.mkdir(parents=True, exist_ok=True)
    env = {"OMP_NUM_THREADS": "1", "PYTHONHASHSEED": "0", "PYTHONPATH": None}
    result = run_python(
        SCRIPTS_DIR / entry["script"], *entry["args"], cwd=workdir, env=env, timeout=RUN_TIMEOUT_S, check=False
    )
    return Run(workdir, result.returncode, result.stdout, result.stderr, result.duration)


@pytest.fixture(scope="session")
def first_run(tmp_path_factory):
    """Run each script at most once per session and share the result between tests."""
    cache: dict[str, Run] = {}

    def get(name: str) -> Run:
        if name not in cache:
            cache[name] = _run_script(name, tmp_path_factory.mktemp(f"{name}-run1"))
        return cache[name]

    return get


def _load_state_dict(name: str, workdir: Path) -> dict:
    entry = MANIFEST[name]
    obj = torch.load(workdir / entry["weights"], map_location="cpu", weights_only=entry["weights_only"])
    if entry["weights_key"]:
        assert isinstance(obj, dict) and entry["weights_key"] in obj, (
            f"{entry['weights']} has no key {entry['weights_key']!r}"
        )
        obj = obj[entry["weights_key"]]
    assert isinstance(obj, dict) and obj, f"{entry['weights']}: expected a non-empty state dict"
    for key, value in obj.items():
        assert isinstance(key, str), f"state dict key {key!r} is not a string"
        assert isinstance(value, torch.Tensor), f"{key} is a {type(value).__name__}, not a tensor"
    return obj


# ------------------------------------------------------------------------------------------------
# The manifest itself
# ------------------------------------------------------------------------------------------------


@pytest.mark.e2e
def test_manifest_covers_every_script():
    listed = {entry["script"] for entry in MANIFEST.values()}
    on_disk = {p.name for p in SCRIPTS_DIR.glob("*.py")}
    assert listed == on_disk
    assert len(DETERMINISTIC) >= 1 and len(DETERMINISTIC) < len(ALL)


@pytest.mark.e2e
@pytest.mark.parametrize("name", ALL)
def test_manifest_entry_is_consistent(name):
    entry = MANIFEST[name]
    for key, typ in REQUIRED_KEYS.items():
        assert key in entry, f"{name}: missing key {key!r}"
        if typ is float:
            assert isinstance(entry[key], (int, float)) and not isinstance(entry[key], bool), key
        else:
            assert isinstance(entry[key], typ), f"{name}.{key} should be {typ.__name__}"
    assert (SCRIPTS_DIR / entry["script"]).is_file()
    assert all(isinstance(a, str) for a in entry["args"])

    for path in entry["writes"]:
        assert not os.path.isabs(path) and ".." not in Path(path).parts, path
    assert entry["weights"] in entry["writes"]

    assert entry["dataset_size"] > 0 and entry["batch_size"] > 0 and entry["epochs"] > 0
    assert 0 < entry["max_loss_ratio"] <= 1.0
    assert set(entry["nondeterminism"]) <= KNOWN_NONDETERMINISM
    assert entry["shuffle"] == ("shuffle" in entry["nondeterminism"])
    re.compile(entry["loss_pattern"])
    assert re.compile(entry["loss_pattern"]).groups >= 2

    if "accum_steps" in entry:
        steps_per_epoch = entry["dataset_size"] // entry["batch_size"]
        assert steps_per_epoch % entry["accum_steps"] == 0

    if entry["deterministic"]:
        assert entry["nondeterminism"] == []
        assert entry["shuffle"] is False
        assert entry["dataset_size"] % entry["batch_size"] == 0
        assert entry["batch_size"] % 2 == 0 and entry["batch_size"] % 4 == 0
    else:
        assert entry["nondeterminism"], f"{name}: say why it is not deterministic"


@pytest.mark.e2e
@pytest.mark.parametrize("name", ALL)
def test_script_is_legacy_code(name):
    """Legacy inputs: no distributed code, only stdlib + torch (+ tqdm), no obvious contradictions."""
    source = _source(name)
    for needle in FORBIDDEN_SOURCE:
        assert needle not in source, f"{name} mentions {needle}"
    third_party = _imported_top_level_modules(name) - STDLIB
    assert third_party <= ALLOWED_THIRD_PARTY, f"{name} imports {sorted(third_party)}"
    entry = MANIFEST[name]
    if entry["deterministic"]:
        for needle in ("Dropout", "BatchNorm", "shuffle=True", "Adam"):
            assert needle not in source, f"deterministic {name} contains {needle}"
    if "batchnorm" in entry["nondeterminism"]:
        assert "BatchNorm" in source
    if "dropout" in entry["nondeterminism"]:
        assert "Dropout" in source


# ------------------------------------------------------------------------------------------------
# Running the originals
# ------------------------------------------------------------------------------------------------


@pytest.mark.e2e
@pytest.mark.parametrize("name", ALL)
def test_original_runs_and_saves_finite_weights(name, first_run, request):
    _skip_without_tqdm(name)
    entry = MANIFEST[name]
    run = first_run(name)
    request.node.user_properties.append(("wall_s", round(run.wall_s, 2)))
    assert run.returncode == 0, run.explain()

    written = sorted(
        p.relative_to(run.workdir).as_posix() for p in run.workdir.rglob("*") if p.is_file()
    )
    assert written == sorted(entry["writes"]), f"{name} wrote {written}"

    state = _load_state_dict(name, run.workdir)
    for key, tensor in state.items():
        if tensor.is_floating_point():
            assert torch.isfinite(tensor).all(), f"{name}: {key} has non-finite values"


@pytest.mark.e2e
@pytest.mark.parametrize("name", ALL)
def test_original_prints_one_falling_loss_per_epoch(name, first_run):
    _skip_without_tqdm(name)
    entry = MANIFEST[name]
    run = first_run(name)
    assert run.returncode == 0, run.explain()

    matches = re.findall(entry["loss_pattern"], run.stdout + "\n" + run.stderr)
    assert len(matches) == entry["epochs"], f"{name}: loss lines {matches}\n{run.explain()}"
    epochs = [int(m[0]) for m in matches]
    assert epochs == list(range(epochs[0], epochs[0] + entry["epochs"])) and epochs[0] in (0, 1)
    losses = [float(m[1]) for m in matches]
    assert all(math.isfinite(v) for v in losses)
    assert losses[-1] < losses[0], f"{name}: loss did not fall: {losses}"
    assert losses[-1] <= entry["max_loss_ratio"] * losses[0], f"{name}: {losses}"


@pytest.mark.e2e
@pytest.mark.parametrize("name", DETERMINISTIC)
def test_deterministic_script_repeats_bit_for_bit(name, first_run, tmp_path):
    _skip_without_tqdm(name)
    run1 = first_run(name)
    assert run1.returncode == 0, run1.explain()
    run2 = _run_script(name, tmp_path / "run2")
    assert run2.returncode == 0, run2.explain()

    a = _load_state_dict(name, run1.workdir)
    b = _load_state_dict(name, run2.workdir)
    assert list(a) == list(b)
    for key in a:
        assert a[key].dtype == b[key].dtype and a[key].shape == b[key].shape, key
        assert torch.equal(a[key], b[key]), f"{name}: {key} differs between two runs"
