"""Processing many files, in parallel processes when there are several, and writing the results.

Work is handed out one unit at a time (chunk size 1) and results come back in the order units finish,
so a progress bar advances per file; callers sort what they print. Worker processes ignore SIGINT: on
Ctrl-C the main process terminates them at once (they never write; only the main process writes, and
atomically), so an interrupted run stops within a second and leaves every file whole.
"""

from __future__ import annotations

import gc
import multiprocessing
import multiprocessing.pool
import os
import signal
import tempfile
from pathlib import Path
from typing import Callable, Iterator, Protocol, Sequence, Union

from ddp_migrate.codemods.base import Options, Rule

from .engine import FileResult
from .program import RulesFor, Unit, plan, process_unit, scan_path
from .writer import interrupts_held, write_atomic

#: One piece of work: a unit of Python files, or one notebook.
Work = Union[Unit, Path]


class ProgressSink(Protocol):
    """What the runner reports progress to (:class:`ddp_migrate.progress.Progress`)."""

    def start(self, total: int) -> None: ...

    def advance(self, count: int = 1) -> None: ...


class _PerPathRules:
    """A picklable ``rules_for`` built from a mapping (worker processes receive it)."""

    def __init__(self, table: dict[Path, tuple[type[Rule], ...]]) -> None:
        self.table = table

    def __call__(self, path: Path) -> Sequence[type[Rule]]:
        return self.table[path]


def is_notebook(path: Path | str) -> bool:
    """Whether a path names a Jupyter notebook (processed through :mod:`ddp_migrate.notebook`)."""
    return str(path).endswith(".ipynb")


def _process_work(args: tuple[Work, RulesFor, Options, bool, frozenset[type[Rule]] | None, bool]) -> list[FileResult]:
    work, rules_for, options, fix, fixable, sources = args
    # A lint builds one analysis per unit and drops it whole at the end, so the cyclic collector, paused
    # while a unit is linted, would only have walked the unit's live tree again and again (a twelfth of
    # a worker's time): it collects once, after. A migration keeps collecting: each fix leaves an analysis.
    paused = not fix and gc.isenabled()
    if paused:
        gc.disable()
    try:
        if isinstance(work, Unit):
            results = process_unit(work, rules_for, options, fix, fixable)
        else:
            from .notebook import process_notebook

            results = [process_notebook(work, tuple(rules_for(work)), options, fix, fixable)]
    finally:
        if paused:
            gc.enable()
    parsed = [r for r in results if not r.skipped]
    if parsed and (paused or any(len(r.original) > LARGE_UNIT_BYTES for r in parsed)):
        # The unit's trees hold cycles (analyses and their program): free them before the next. Paused, the
        # collector left everything the unit made in its youngest generation: collecting that one is enough,
        # and does not walk again what the process holds for longer (a run in-process keeps every result).
        gc.collect(0 if paused else 2)
    if not sources:
        for result in results:
            if result.output is None:
                result.original, result.text, result.new_text = b"", "", ""
    return results


#: A parsed file this large leaves enough cyclic garbage (libcst trees, analyses) to collect at once.
LARGE_UNIT_BYTES = 64_000


#: The cyclic garbage collector's thresholds in a worker. libcst trees are millions of small objects that
#: live as long as their file's work; with the default thresholds the collector walks them again and
#: again (a tenth of a worker's time). Collected less often, they are freed the same way when dropped.
WORKER_GC_THRESHOLDS = (10_000, 10, 10)


def _init_worker() -> None:
    """Worker initialiser: Ctrl-C is the main process's to handle (it terminates the workers); the
    modules inherited from the main process are frozen out of the collector's way, which runs less often."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    gc.freeze()
    gc.set_threshold(*WORKER_GC_THRESHOLDS)


def default_jobs() -> int:
    """All the cores this process may use."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def _size(work: Work) -> int:
    return len(_paths_of(work))


def _paths_of(work: Work) -> tuple[Path, ...]:
    return work.paths if isinstance(work, Unit) else (work,)


def _bytes(work: Work) -> int:
    """The unit's size on disk (0 for a file that cannot be read: its error is reported by the worker)."""
    total = 0
    for path in _paths_of(work):
        try:
            total += os.stat(path).st_size
        except OSError:
            pass
    return total


def largest_first(work: Sequence[Work]) -> list[Work]:
    """The units, largest first (stable among equals): with results taken as they finish, the longest
    unit no longer starts last and keeps one worker busy while the others idle at the end of the run."""
    return sorted(work, key=_bytes, reverse=True)


def run(
    files: Sequence[Path],
    rules: Sequence[type[Rule]] | Callable[[Path], Sequence[type[Rule]]],
    options: Options,
    fix: bool,
    jobs: int,
    follow_imports: bool = True,
    progress: ProgressSink | None = None,
    fixable: frozenset[type[Rule]] | None = None,
    sources: bool = True,
) -> Iterator[FileResult]:
    """Yield the results of every file, unit by unit as units finish; worker processes when ``jobs > 1``.

    Python files are grouped into units (:func:`ddp_migrate.program.plan`): a program's local modules are
    processed with its entry even when they were not named (``follow_imports=False``: only the files
    named). Notebooks are units of their own. ``rules`` is either the rules for every file or a function
    choosing them per file (per-file ignores). ``progress`` hears the number of files, then each finished
    unit's. ``fixable``: the rule classes whose fixes may run (``None``: all). ``sources=False``: the results
    of unchanged files come back without the file's bytes and text (a lint reports findings only: the
    whole tree's sources would otherwise travel back from the workers). Closing the generator early (or
    Ctrl-C while it runs) terminates the workers.
    """
    python_files = [path for path in files if not is_notebook(path)]
    # The workers start before the plan, which scans the files that may start a program over them.
    workers = min(jobs, len(files))
    pool = multiprocessing.get_context().Pool(processes=workers, initializer=_init_worker) if workers > 1 else None
    finished = False
    try:
        scan_many = (lambda paths: pool.map(scan_path, paths, chunksize=1)) if pool is not None else None
        work: list[Work] = [*plan(python_files, follow_imports, scan_many), *(path for path in files if is_notebook(path))]
        yield from _run_units(work, rules, options, fix, pool if len(work) > 1 else None, progress, fixable, sources)
        finished = True
    finally:
        if pool is not None:
            if finished:
                pool.close()
            else:  # interrupted, or the caller stopped early: the workers' work is not wanted
                pool.terminate()
            pool.join()


def _run_units(
    work: list[Work],
    rules: Sequence[type[Rule]] | Callable[[Path], Sequence[type[Rule]]],
    options: Options,
    fix: bool,
    pool: multiprocessing.pool.Pool | None,
    progress: ProgressSink | None,
    fixable: frozenset[type[Rule]] | None,
    sources: bool = True,
) -> Iterator[FileResult]:
    """Process the units, over the pool's workers when there is one (largest first, results as they finish)."""
    choose = rules if callable(rules) else (lambda _path: rules)
    if pool is not None:
        work = largest_first(work)
    # Each unit carries the rules of its own files only: a worker unpickles what its unit needs, not a
    # table of every file of the run (that made the hand-out quadratic in the number of files).
    items = [
        (item, _PerPathRules({path: tuple(choose(path)) for path in _paths_of(item)}), options, fix, fixable, sources)
        for item in work
    ]
    if progress is not None:
        progress.start(sum(_size(item) for item in work))
    if pool is None:
        for item in items:
            results = _process_work(item)
            if progress is not None:
                progress.advance(len(results))
            yield from results
        return
    for results in pool.imap_unordered(_process_work, items, chunksize=1):
        if progress is not None:
            progress.advance(len(results))
        yield from results


def _write_new(path: Path, data: bytes) -> None:
    """Create a file atomically (a notebook's migrated script): never a half-written one, never a clobber."""
    with interrupts_held():
        _create(path, data)


def _create(path: Path, data: bytes) -> None:
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".ddp-migrate")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(temporary, 0o666 & ~umask)
        os.link(temporary, path)  # fails if the file appeared meanwhile: it is not ours to replace
    finally:
        os.unlink(temporary)


def write_result(result: FileResult) -> str | None:
    """Write a changed file atomically; return an error line if that fails."""
    if not result.changed or result.error or result.output is None:
        return None
    target = Path(getattr(result, "write_path", None) or result.path)
    try:
        if target.exists() or target.is_symlink():
            write_atomic(target, result.output)
        else:
            _write_new(target, result.output)
    except OSError as error:
        return f"{target}:1:1: cannot write: {error.strerror or error}"
    return None
