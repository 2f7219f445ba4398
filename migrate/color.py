"""When to colour output, and colouring that never puts a reset code after the newline.

The choice follows the conventions ruff, black and most command-line tools share:

1. ``--color always`` / ``--color never`` win;
2. else ``NO_COLOR`` set to anything but the empty string turns colour off (https://no-color.org);
3. else ``FORCE_COLOR`` set to anything but the empty string turns colour on (even when piped);
4. else colour only when the stream is a terminal.
"""

from __future__ import annotations

import os
from typing import IO, Any, Mapping

import click

CHOICES = ("auto", "always", "never")


def use_color(choice: str | None, stream: IO[Any], environ: Mapping[str, str] | None = None) -> bool:
    """Whether to colour what goes to ``stream`` (see the module docstring for the order)."""
    env = os.environ if environ is None else environ
    if choice == "always":
        return True
    if choice == "never":
        return False
    if env.get("NO_COLOR", ""):
        return False
    if env.get("FORCE_COLOR", ""):
        return True
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def paint(line: str, enabled: bool, **style: Any) -> str:
    """``line`` styled with click's ``style`` arguments, the reset code before any trailing newline."""
    if not enabled or not line:
        return line
    body = line.rstrip("\r\n")
    ending = line[len(body):]
    return click.style(body, **style) + ending if body else line
