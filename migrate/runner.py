"""Processing many files, in parallel processes when there are several, and writing the results."""

from __future__ import annotations

import os
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Callable, Iterator, Sequence

from ddp_migrate.codemods.base import Options, Rule

from .engine import FileResult
from .program import RulesFor, Unit, plan, process_unit
from .writer import write_atomic


class _PerPathRules:
    """A picklable ``rules_for`` built from a mapping (worker processes receive it)."""

    def __init__(self, table: dict[Path, tuple[type[Rule], ...]]) -> None:
        self.table = table

    def __call__(self, path: Path) -> Sequence[type[Rule]]:
        return self.table[path]


def _process_star(args: tuple[Unit, RulesFor, Options, bool]) -> list[FileResult]:
    return process_unit(*args)


def default_jobs() -> int:
    """All the cores this process may use."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def run(
    files: Sequence[Path],
    rules: Sequence[type[Rule]] | Callable[[Path], Sequence[type[Rule]]],
    options: Options,
    fix: bool,
    jobs: int,
    follow_imports: bool = True,
) -> Iterator[FileResult]:
    """Yield one result per file, unit by unit; several worker processes when ``jobs > 1``.

    The files are grouped into units (:func:`ddp_migrate.program.plan`): a program's local modules are
    processed with its entry even when they were not named. ``rules`` is either the rules for every file or
    a function choosing them per file (per-file ignores).
    """
    units = plan(files, follow_imports)
    choose = rules if callable(rules) else (lambda _path: rules)
    rules_for = _PerPathRules({path: tuple(choose(path)) for unit in units for path in unit.paths})
    work = [(unit, rules_for, options, fix) for unit in units]
    if jobs <= 1 or len(units) <= 1:
        for item in work:
            yield from _process_star(item)
        return
    with ProcessPoolExecutor(max_workers=min(jobs, len(units))) as pool:
        for results in pool.map(_process_star, work, chunksize=max(1, len(work) // (jobs * 4))):
            yield from results


def write_result(result: FileResult) -> str | None:
    """Write a changed file atomically; return an error line if that fails."""
    if not result.changed or result.error or result.output is None:
        return None
    try:
        write_atomic(Path(result.path), result.output)
    except OSError as error:
        return f"{result.path}:1:1: cannot write: {error.strerror or error}"
    return None
