"""A progress bar for standard error: advances per file, labelled with what the run does, honest ETA.

It draws only on a terminal (and not under ``--quiet``), and only for runs with enough files to be worth a
bar. The ETA is the average time per finished file so far times the files left; it is shown only once a
few files are done and a second has passed, so that the first (slow, worker start-up) files do not
produce a wild guess. It redraws at most ten times a second, and the line is erased when the run ends.
"""

from __future__ import annotations

import sys
import time
from typing import IO, Any, Callable

#: Fewer files than this: no bar (the run is over before a bar would help).
THRESHOLD = 20
#: Files done and seconds passed before an ETA is shown.
ETA_AFTER_FILES = 3
ETA_AFTER_SECONDS = 1.0
WIDTH = 30


def _duration(seconds: float) -> str:
    seconds = int(round(seconds))
    if seconds >= 3600:
        return f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"
    return f"{seconds // 60:02d}:{seconds % 60:02d}"


class Progress:
    """Progress of one run over ``total`` files; :meth:`advance` after each finished file."""

    def __init__(
        self,
        label: str,
        enabled: bool,
        stream: IO[str] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.label = label
        self.enabled = enabled
        self.stream = stream or sys.stderr
        self.clock = clock
        self.total = 0
        self.done = 0
        self.started = clock()
        self.last_draw = float("-inf")
        self.drawn = False

    def start(self, total: int) -> None:
        """Begin with the number of files the run will report on (a bar only when there are many)."""
        self.total = total
        self.done = 0
        self.started = self.clock()
        if total < THRESHOLD:
            self.enabled = False
        self._draw(force=True)

    def advance(self, count: int = 1) -> None:
        """Count ``count`` more files as finished."""
        self.done += count
        self._draw(force=self.done >= self.total)

    def eta(self) -> float | None:
        """Seconds left, from the average time per finished file; ``None`` until that average means something."""
        elapsed = self.clock() - self.started
        if self.done < ETA_AFTER_FILES or elapsed < ETA_AFTER_SECONDS or self.done >= self.total:
            return None
        return elapsed / self.done * (self.total - self.done)

    def line(self) -> str:
        """The bar as it is drawn now, e.g. ``linting  [#######-------]  12/40  30%  eta 00:07``."""
        total = max(self.total, 1)
        filled = min(WIDTH, WIDTH * self.done // total)
        percent = min(100, 100 * self.done // total)
        text = f"{self.label}  [{'#' * filled}{'-' * (WIDTH - filled)}]  {self.done}/{self.total}  {percent:3d}%"
        eta = self.eta()
        if eta is not None:
            text += f"  eta {_duration(eta)}"
        return text

    def _draw(self, force: bool = False) -> None:
        if not self.enabled:
            return
        now = self.clock()
        if not force and now - self.last_draw < 0.1:
            return
        self.last_draw = now
        self.stream.write("\r\x1b[2K" + self.line())
        self.stream.flush()
        self.drawn = True

    def close(self) -> None:
        """Erase the bar, so what follows starts on a clean line."""
        if self.drawn:
            self.stream.write("\r\x1b[2K")
            self.stream.flush()
            self.drawn = False

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def progress_for(label: str, quiet: bool, stream: IO[str] | None = None) -> Progress:
    """A bar on standard error when it is a terminal and the run is not quiet; a silent one otherwise."""
    stream = stream or sys.stderr
    try:
        terminal = stream.isatty()
    except (AttributeError, ValueError):
        terminal = False
    return Progress(label, enabled=terminal and not quiet, stream=stream)
