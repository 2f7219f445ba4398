"""Output that only the main process produces."""

from __future__ import annotations

import logging
from typing import Any

from .environment import is_main_process

__all__ = ["print0", "silence_non_main_logging"]


def print0(*args: Any, **kwargs: Any) -> None:
    """``print(*args, **kwargs)`` on global rank 0 only; other ranks print nothing."""
    if is_main_process():
        print(*args, **kwargs)


def silence_non_main_logging() -> None:
    """Stop the ``logging`` records below ``ERROR`` on the ranks other than global rank 0.

    Uses ``logging.disable``, so it covers all loggers and handlers, including loggers created
    later. Errors and critical records (``logger.exception`` of a failing step) still come from
    every rank: a rank that fails alone must say why. Rank 0 is left as it is. Calling it again
    changes nothing. Output written with ``print`` or ``warnings`` is not affected (use
    :func:`print0`).
    """
    if is_main_process():
        return
    logging.disable(logging.WARNING)  # DEBUG, INFO and WARNING records
