"""Processing many files, in parallel processes when there are several, and writing the results."""

from __future__ import annotations

import os
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Callable, Iterator, Sequence

from ddp_migrate.codemods.base import Options, Rule

from .engine import FileResult, process
from .writer import write_atomic


def process_path(path: Path, rules: Sequence[type[Rule]], options: Options, fix: bool) -> FileResult:
    """Read one file and run the engine on it (a read error becomes the result's error line)."""
    try:
        data = path.read_bytes()
    except OSError as error:
        return FileResult(path=str(path), original=b"", error=f"{path}:1:1: cannot read: {error.strerror or error}")
    return process(str(path), data, rules, options, fix)


def _process_star(args: tuple[Path, Sequence[type[Rule]], Options, bool]) -> FileResult:
    return process_path(*args)


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
) -> Iterator[FileResult]:
    """Yield one result per file, in the order given; several worker processes when ``jobs > 1``.

    ``rules`` is either the rules for every file or a function choosing them per file (per-file ignores).
    """
    rules_for = rules if callable(rules) else (lambda _path: rules)
    work = [(path, tuple(rules_for(path)), options, fix) for path in files]
    if jobs <= 1 or len(files) <= 1:
        for item in work:
            yield _process_star(item)
        return
    with ProcessPoolExecutor(max_workers=min(jobs, len(files))) as pool:
        yield from pool.map(_process_star, work, chunksize=max(1, len(work) // (jobs * 4)))


def write_result(result: FileResult) -> str | None:
    """Write a changed file atomically; return an error line if that fails."""
    if not result.changed or result.error or result.output is None:
        return None
    try:
        write_atomic(Path(result.path), result.output)
    except OSError as error:
        return f"{result.path}:1:1: cannot write: {error.strerror or error}"
    return None
