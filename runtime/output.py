"""Output that only the main process produces."""

from __future__ import annotations

import logging
import sys
from typing import Any

from .environment import is_main_process

__all__ = ["print0", "silence_non_main_logging"]


def print0(*args: Any, **kwargs: Any) -> None:
    """``print(*args, **kwargs)`` on global rank 0 only; other ranks print nothing."""
    if is_main_process():
        print(*args, **kwargs)


def silence_non_main_logging() -> None:
    """Stop every ``logging`` record on the ranks other than global rank 0.

    Uses ``logging.disable``, so it covers all loggers and handlers, including loggers created
    later. Rank 0 is left as it is. Calling it again changes nothing. Output written with ``print``
    or ``warnings`` is not affected (use :func:`print0`).
    """
    if is_main_process():
        return
    logging.disable(sys.maxsize)  # above CRITICAL, so custom levels are covered as well
