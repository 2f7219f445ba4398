"""Golden lint snapshots: what ``ddp-migrate lint`` reports on every fixture, line by line.

Each file in ``fixtures/scripts``, ``fixtures/cases`` and ``fixtures/pitfalls`` is linted with every rule
(no fixes), and its ``path:line:col: CODE message`` lines are compared with ``fixtures/lint/<name>.txt``.
``fixtures/pitfalls`` holds realistic DDP scripts with the pitfalls the lint-only rules report; it is not
migrated by the golden migration test.

Set ``DDP_MIGRATE_UPDATE_GOLDEN=1`` to rewrite the snapshots after an intended change, then review the
diff like any other code change.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ddp_migrate.codemods import ALL_RULES
from ddp_migrate.codemods.base import Options
from ddp_migrate.engine import process
from ddp_migrate.report import finding_line

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"
SOURCES = sorted([*FIXTURES.glob("scripts/*.py"), *FIXTURES.glob("cases/*.py"), *FIXTURES.glob("pitfalls/*.py")])
SNAPSHOTS = FIXTURES / "lint"


def lint(source: Path) -> str:
    """The finding lines for one file, with its path relative to the repository, one per line."""
    path = source.relative_to(ROOT).as_posix()
    result = process(path, source.read_bytes(), ALL_RULES, Options(), fix=False)
    assert result.error is None, result.error
    assert not result.changed
    return "".join(finding_line(path, finding) + "\n" for finding in result.findings)


def test_sources_have_distinct_names() -> None:
    names = [source.name for source in SOURCES]
    assert len(names) == len(set(names)), "snapshots are named after the file: fixture names must not repeat"


@pytest.mark.parametrize("source", SOURCES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_lint_snapshot(source: Path) -> None:
    reported = lint(source)
    snapshot = SNAPSHOTS / f"{source.stem}.txt"
    if os.environ.get("DDP_MIGRATE_UPDATE_GOLDEN"):
        SNAPSHOTS.mkdir(exist_ok=True)
        snapshot.write_text(reported, encoding="utf-8", newline="")
    assert snapshot.is_file(), f"no snapshot {snapshot.relative_to(ROOT)}: run with DDP_MIGRATE_UPDATE_GOLDEN=1"
    assert reported == snapshot.read_text(encoding="utf-8")


def test_every_snapshot_has_a_source() -> None:
    assert {p.stem for p in SNAPSHOTS.glob("*.txt")} == {p.stem for p in SOURCES}


@pytest.mark.parametrize("source", sorted(FIXTURES.glob("pitfalls/*.py")), ids=lambda p: p.name)
def test_every_pitfall_fixture_shows_a_pitfall(source: Path) -> None:
    assert lint(source), f"{source.name} is in fixtures/pitfalls but no rule reports anything in it"
