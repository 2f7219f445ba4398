"""Programs, not files: grouping the files to process into units that are analysed and migrated together.

A unit is either a *program* (an entry script and the local modules it imports, migrated as one) or a
*standalone* file (a library module or a test no entry reaches: linted, never migrated). The runner hands
each unit to one worker; :func:`process_unit` runs the engine over the whole unit.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

from ddp_migrate.codemods.base import Options, Rule

from .engine import FileResult, process

RulesFor = Callable[[Path], Sequence[type[Rule]]]


@dataclass(frozen=True)
class Unit:
    """Files processed together by one worker.

    ``paths`` are every file of the unit, the entry first for a program; ``named`` are the ones the user
    asked for (the others were reached by following imports); ``entry`` is ``None`` for a standalone file.
    """

    paths: tuple[Path, ...]
    named: frozenset[Path] = field(default_factory=frozenset)
    entry: Path | None = None


def plan(files: Sequence[Path], follow_imports: bool = True) -> list[Unit]:
    """Group the files into units (today: one unit per file; programs come with the project analysis)."""
    return [Unit(paths=(path,), named=frozenset({path})) for path in files]


def read_result(path: Path) -> tuple[bytes | None, FileResult | None]:
    """A file's bytes, or the result that reports why it cannot be read."""
    try:
        return path.read_bytes(), None
    except OSError as error:
        return None, FileResult(path=str(path), original=b"", error=f"{path}:1:1: cannot read: {error.strerror or error}")


def process_unit(unit: Unit, rules_for: RulesFor, options: Options, fix: bool) -> list[FileResult]:
    """Run the engine over every file of a unit; one result per file, in the unit's order."""
    results = []
    for path in unit.paths:
        data, failed = read_result(path)
        if failed is not None:
            results.append(failed)
            continue
        results.append(process(str(path), data, tuple(rules_for(path)), options, fix))  # type: ignore[arg-type]
    return results
