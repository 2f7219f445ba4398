"""Golden before/after pairs: every legacy fixture migrates to its checked-in expected file.

Set ``DDP_MIGRATE_UPDATE_GOLDEN=1`` to rewrite the expected files after an intended change, then review
the diff like any other code change.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ddp_migrate.codemods import ALL_RULES
from ddp_migrate.codemods.base import Options
from ddp_migrate.engine import process

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
SOURCES = sorted([*FIXTURES.glob("scripts/*.py"), *FIXTURES.glob("cases/*.py"), *FIXTURES.glob("legacy/*.py")])
EXPECTED = FIXTURES / "expected"
#: Fixtures that are already correct (or not training code): migrating them must change nothing.
UNCHANGED = {"already_ddp.py", "not_training.py"}


def migrate(source: bytes, name: str) -> str:
    result = process(name, source, ALL_RULES, Options(review_todos=True), fix=True)
    assert result.error is None, result.error
    return result.new_text


@pytest.mark.parametrize("source", SOURCES, ids=lambda p: p.name)
def test_golden_migration(source: Path) -> None:
    migrated = migrate(source.read_bytes(), source.name)
    expected_path = EXPECTED / source.name
    if os.environ.get("DDP_MIGRATE_UPDATE_GOLDEN"):
        expected_path.write_text(migrated, encoding="utf-8", newline="")
    assert migrated == expected_path.read_text(encoding="utf-8")
    if source.name in UNCHANGED:
        assert migrated == source.read_text(encoding="utf-8")
    else:
        assert migrated != source.read_text(encoding="utf-8")


@pytest.mark.parametrize("expected", sorted(EXPECTED.glob("*.py")), ids=lambda p: p.name)
def test_expected_output_is_a_fixed_point(expected: Path) -> None:
    text = expected.read_text(encoding="utf-8")
    compile(text, str(expected), "exec")
    assert migrate(expected.read_bytes(), expected.name) == text


def test_every_expected_file_has_a_source() -> None:
    assert {p.name for p in EXPECTED.glob("*.py")} == {p.name for p in SOURCES}
