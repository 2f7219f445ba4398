"""Writing a file atomically: a temporary file in the same folder, then ``os.replace``."""

from __future__ import annotations

import os
import signal
import stat
import tempfile
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator


@contextmanager
def interrupts_held() -> Iterator[None]:
    """Hold Ctrl-C back for the moment of one file's write: a ``KeyboardInterrupt`` between the creation
    of the temporary file and the ``try`` that removes it would leave it behind. The signal is noted (a
    handler of its own: masking it would not do, another thread of the process may take it) and raised
    again as soon as the write is done."""
    if threading.current_thread() is not threading.main_thread() or signal.getsignal(signal.SIGINT) is None:
        yield  # only the main thread handles signals; a handler set outside Python is left alone
        return
    received: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: received.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        if received:
            signal.raise_signal(signal.SIGINT)


def write_atomic(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` so that a crash never leaves a half-written file; keep its mode.

    A symbolic link is followed: the file it points to is replaced and the link stays a link.
    """
    with interrupts_held():
        _write_atomic(path, data)


def _write_atomic(path: Path, data: bytes) -> None:
    path = Path(os.path.realpath(path))
    mode = stat.S_IMODE(os.stat(path).st_mode)
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".ddp-migrate")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(temporary, mode)
        os.replace(temporary, path)
    except BaseException:
        try:
            os.unlink(temporary)
        except FileNotFoundError:
            pass
        raise
