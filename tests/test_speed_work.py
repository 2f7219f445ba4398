"""The work a large lint skips (issue 11): the same results, less parsing and less hand-out.

- A file whose only rule past the gate is ``DDP100 unknown-noqa-code`` is linted from its text, without
  libcst: its findings, errors and role are those of the whole pipeline (parse, analysis, rule).
- The runner hands each worker the rules of its own unit only, largest units first; the results are
  the same whatever the number of workers.
- The plan's per-run caches give the same units as before.
"""

from __future__ import annotations

import multiprocessing
from pathlib import Path

import pytest

from ddp_migrate.codemods.base import Options
from ddp_migrate import engine as engine_module
from ddp_migrate.engine import process
from ddp_migrate.program import Unit, plan, process_unit, scan_path
from ddp_migrate.registry import all_rules
from ddp_migrate.runner import largest_first, run

RULES = all_rules()

NOQA_ONLY = """\
def helper(x):
    return x + 1  # noqa: DDP999


value = helper(2)  # noqa: DDP07, E501
other = 3  # noqa
typo = 4  # NOQA: ddp1000
"""

NOQA_AND_RULE = """\
import torch
model = torch.nn.DataParallel(torch.nn.Linear(2, 2))  # noqa: DDP999
"""

BROKEN = "def f(:\n    pass  # noqa: DDP999\n"


def _unit_result(path: Path, entry: bool, fix: bool = False):
    unit = Unit(paths=(path,), migrate=frozenset({path}), entry=path) if entry else Unit(paths=(path,), why_not="x")
    return process_unit(unit, lambda _p: RULES, Options(), fix)[0]


@pytest.mark.parametrize("entry", [False, True])
@pytest.mark.parametrize("source", [NOQA_ONLY, NOQA_AND_RULE, BROKEN, "x = 1\n"])
def test_text_only_lint_gives_the_engines_result(tmp_path: Path, source: str, entry: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "mod.py"
    path.write_text(source)
    ours = _unit_result(path, entry)
    monkeypatch.setattr(engine_module, "_find_in_text", lambda result, rules: False)  # always parse and analyse
    engine = process(str(path), path.read_bytes(), RULES, Options(), fix=False, is_entry=entry)
    assert ours.findings == engine.findings
    assert ours.error == engine.error
    assert ours.role == engine.role
    assert ours.skipped == engine.skipped
    assert ours.output == engine.output


def test_text_only_lint_reports_unknown_codes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "mod.py"
    path.write_text(NOQA_ONLY)
    monkeypatch.setattr(engine_module, "parse_checked", lambda text: pytest.fail("parsed with libcst"))
    found = _unit_result(path, entry=False).findings
    assert [(f.code, f.line) for f in found] == [("DDP100", 2), ("DDP100", 5), ("DDP100", 7)]


def test_largest_first_is_stable(tmp_path: Path) -> None:
    sizes = {"a.py": 10, "b.py": 300, "c.py": 10, "d.py": 50}
    units = []
    for name, size in sizes.items():
        (tmp_path / name).write_text("#" * size)
        units.append(Unit(paths=(tmp_path / name,)))
    missing = Unit(paths=(tmp_path / "gone.py",))
    ordered = largest_first([*units, missing])
    assert [u.paths[0].name for u in ordered] == ["b.py", "d.py", "a.py", "c.py", "gone.py"]


def _tree(root: Path) -> list[Path]:
    files = {
        "train.py": "import torch\nfrom helpers import build\nmodel = torch.nn.DataParallel(build())\nif __name__ == '__main__':\n    loss.backward()\n",
        "helpers.py": "import torch\ndef build():\n    return torch.nn.Linear(2, 2).cuda()\n",
        "lib/__init__.py": "",
        "lib/comm.py": "import torch.distributed as dist\nif dist.get_rank() == 0:\n    dist.barrier()\n",
        "lib/notes.py": "x = 1  # noqa: DDP999\n",
        "tests/test_it.py": "import os\nrank = os.environ['RANK']\n",
        "bad.py": "def f(:\n",
    }
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return sorted(root / name for name in files)


def _key(result):
    return (result.path, result.error, result.role, result.entry, [(f.code, f.line, f.column, f.message) for f in result.findings])


@pytest.mark.parametrize("fix", [False, True])
def test_results_do_not_depend_on_the_number_of_workers(tmp_path: Path, fix: bool) -> None:
    files = _tree(tmp_path)
    one = sorted(map(_key, run(files, RULES, Options(), fix, jobs=1)))
    two = sorted(map(_key, run(files, RULES, Options(), fix, jobs=2)))
    assert one == two
    assert {r[0] for r in one} == {str(f) for f in files}


def test_plan_groups_a_program_and_leaves_the_rest_alone(tmp_path: Path) -> None:
    files = _tree(tmp_path)
    units = plan(files)
    programs = [u for u in units if len(u.paths) > 1]
    assert [[p.name for p in u.paths] for u in programs] == [["train.py", "helpers.py"]]
    lone = {u.paths[0].name: u for u in units if len(u.paths) == 1}
    assert lone["test_it.py"].why_not == "a test file"
    assert lone["comm.py"].entry is None
    assert lone["notes.py"].entry is None


def _web(root: Path) -> list[Path]:
    """Three training scripts over a chain of 120 modules in a package (past the program cap, so the
    closures stop part way) and a few modules each of them imports directly, one a test helper."""
    package = root / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("from . import m0\n")
    for i in range(120):
        (package / f"m{i}.py").write_text(f"from . import m{i + 1}\n" if i < 119 else "x = 1\n")
    (root / "tests").mkdir()
    (root / "tests" / "helper.py").write_text("import pkg\n")
    (root / "common.py").write_text("import torch\n\ndef step(loss):\n    loss.backward()\n")
    for name, body in [("a", "import pkg.m100\n"), ("b", "from pkg import m3\n"), ("c", "from tests import helper\n")]:
        (root / f"{name}.py").write_text(f"import common\n{body}\nif __name__ == '__main__':\n    common.step(x)\n")
    return sorted(root.rglob("*.py"))


def test_a_plan_scanned_in_batches_is_the_plan_scanned_one_by_one(tmp_path: Path) -> None:
    """The closures grow side by side and scan their queues in batches (the runner's workers); the units
    are those of growing one closure after the other, one scan at a time, cap included."""
    files = _web(tmp_path)
    batches: list[int] = []

    def scan_many(paths):
        batches.append(len(paths))
        return [scan_path(p) for p in paths]

    one_by_one = plan(files)
    assert plan(files, True, scan_many) == one_by_one
    assert max(batches) > 1
    assert any(len(u.paths) > 1 for u in one_by_one)
    with multiprocessing.get_context().Pool(2) as pool:
        assert plan(files, True, lambda paths: pool.map(scan_path, paths)) == one_by_one


def test_a_migration_runs_each_fix_at_most_once_per_analysis(monkeypatch: pytest.MonkeyPatch) -> None:
    """The fixed point re-runs a rule only when the file changed since it last ran (a fix reads nothing but
    the analysis and the options); the migration is still the golden one."""
    fixtures = Path(__file__).resolve().parents[1] / "fixtures"
    # A legacy launcher: its last pass used to run again every rule that had already settled on the final analysis.
    source = (fixtures / "legacy" / "spawn_tutorial.py").read_bytes()
    runs: list[tuple[str, object]] = []
    for rule in RULES:
        if rule.can_fix():
            original = rule.fix

            def counting(self, analysis, options, _original=original):  # type: ignore[no-untyped-def]
                runs.append((type(self).code, analysis))  # the analysis itself: kept alive, no id reused
                return _original(self, analysis, options)

            monkeypatch.setattr(rule, "fix", counting)
    result = process("spawn_tutorial.py", source, RULES, Options(review_todos=True), fix=True)
    assert result.output == (fixtures / "expected" / "spawn_tutorial.py").read_bytes()
    assert len(runs) == len({(code, id(analysis)) for code, analysis in runs})


@pytest.mark.parametrize("tail", ["\nDONE = 1\n    # noqa\n", "\nDONE = 1\n   "])
def test_fixes_compare_printouts_not_the_source(tail: str) -> None:
    """libcst prints a few sources back differently (an indented comment or blank spaces at the end of the
    file are dropped). Fixes are compared with the printout, so such a tail blocks nothing: the migration
    makes the same changes as without it (review of the speed change: every fix had been blocked)."""
    fixtures = Path(__file__).resolve().parents[1] / "fixtures"
    source = (fixtures / "scripts" / "single_gpu_module.py").read_bytes()
    plain = process("train.py", source, RULES, Options(), fix=True)
    tailed = process("train.py", source + tail.encode(), RULES, Options(), fix=True)
    assert plain.changes and [c.code for c in tailed.changes] == [c.code for c in plain.changes]


def test_change_lines_are_lines_of_the_file_with_a_form_feed() -> None:
    fixtures = Path(__file__).resolve().parents[1] / "fixtures"
    source = (fixtures / "scripts" / "single_gpu_module.py").read_bytes()
    plain = process("train.py", source, RULES, Options(), fix=True)
    fed = process("train.py", b"\x0c" + source, RULES, Options(), fix=True)
    assert [(c.code, c.line) for c in fed.changes] == [(c.code, c.line) for c in plain.changes]


def test_a_worker_frees_a_parsed_units_trees_before_the_next(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """libcst trees and analyses hold cycles. A lint pauses the collector while a unit is processed and
    collects once after every unit it parsed; a migration (each fix leaves an analysis) keeps collecting,
    and collects at once after a large unit (goal 5: the largest worker of the torch lint went from 331 MB
    to 297 MB). A skipped file costs no collection. A lint collects the youngest generation only (all the
    paused unit made is there); a migration, whose collector ran during the unit, collects them all."""
    from ddp_migrate import program, runner

    collections: list[tuple[object, ...]] = []
    enabled_inside: list[bool] = []
    monkeypatch.setattr(runner.gc, "collect", lambda *args: collections.append(args) or 0)
    real_process_unit = program.process_unit

    def process_unit(*args: object, **kwargs: object) -> object:
        enabled_inside.append(runner.gc.isenabled())
        return real_process_unit(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(runner, "process_unit", process_unit)
    padding = "\n".join(f"value_{i} = {i}" for i in range(runner.LARGE_UNIT_BYTES // 12))
    large = tmp_path / "large.py"
    large.write_text("import torch\nmodel = torch.nn.DataParallel(net)\n" + padding + "\n")
    skipped = tmp_path / "skipped.py"
    skipped.write_text(padding + "\n")
    small = tmp_path / "small.py"
    small.write_text("import torch\nmodel = torch.nn.DataParallel(net)\n")
    assert runner.gc.isenabled()
    for fix, path, expected in [
        (False, skipped, []), (False, small, [(0,)]), (False, large, [(0,)]), (True, skipped, []), (True, small, []), (True, large, [(2,)])
    ]:
        collections.clear()
        enabled_inside.clear()
        unit = Unit(paths=(path,), migrate=frozenset({path}), entry=path) if fix else Unit(paths=(path,), why_not="x")
        runner._process_work((unit, lambda _p: RULES, Options(), fix, None, True))
        assert collections == expected, (fix, path.name)
        assert enabled_inside == [fix], (fix, path.name)
        assert runner.gc.isenabled()
    assert large.stat().st_size > runner.LARGE_UNIT_BYTES >= small.stat().st_size


def test_a_linted_units_analysis_is_freed_without_the_cyclic_collector(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The analyses of a lint unit are released when the unit is done (``ScriptAnalysis.release``): their facts
    and the rules' caches point back at them, cycles that held every syntax tree until the cyclic collector
    walked it (a tenth of a worker's time). Released, they are freed by reference counting alone: with the
    worker's collection stubbed out and the collector off, nothing of the unit is left alive."""
    import gc
    import types

    from ddp_migrate import runner
    from ddp_migrate.codemods.analysis import ScriptAnalysis

    def alive() -> int:
        return sum(1 for o in gc.get_objects() if isinstance(o, ScriptAnalysis))

    path = tmp_path / "train.py"
    path.write_text("import torch\nimport torch.distributed as dist\nmodel = torch.nn.DataParallel(net)\nif dist.get_rank() == 0:\n    dist.barrier()\n")
    unit = (Unit(paths=(path,), why_not="x"), lambda _p: RULES, Options(), False, None, False)
    gc.collect()
    before = alive()
    was_enabled = gc.isenabled()
    try:
        monkeypatch.setattr(
            runner, "gc", types.SimpleNamespace(isenabled=lambda: True, disable=gc.disable, enable=lambda: None, collect=lambda *a: 0)
        )
        gc.disable()
        results = runner._process_work(unit)
        assert [f.code for f in results[0].findings]  # the unit was parsed and analysed
        assert alive() == before
    finally:
        if was_enabled:
            gc.enable()


def test_a_lint_without_fixes_sends_no_sources_back(tmp_path: Path) -> None:
    """``sources=False`` (``lint`` without ``--fix``): the workers send findings back, not every file's
    bytes and text; with sources, and for a file a fix changed, the result is whole."""
    from ddp_migrate import runner

    script = tmp_path / "train.py"
    script.write_text("import torch\nmodel = torch.nn.DataParallel(net)\n")
    unit = Unit(paths=(script,), migrate=frozenset({script}), entry=script)
    lean = runner._process_work((unit, lambda _p: RULES, Options(), False, None, False))[0]
    whole = runner._process_work((unit, lambda _p: RULES, Options(), False, None, True))[0]
    fixed = runner._process_work((unit, lambda _p: RULES, Options(), True, None, False))[0]
    assert lean.findings == whole.findings and lean.findings
    assert (lean.original, lean.text) == (b"", "") and whole.original == script.read_bytes() and whole.text
    assert fixed.changed and fixed.original == script.read_bytes()
