"""Python's lines of a source text.

Only ``\\r\\n``, ``\\r`` and ``\\n`` end a line of Python source. ``str.splitlines`` also ends lines at a
form feed, a vertical tab, ``\\x1c``-``\\x1e``, ``\\x85`` and the Unicode line and paragraph separators,
which may stand in a file (a form feed between sections, a separator in a comment or a string): counted
its way, line numbers drift from the compiler's and from libcst's after the first of them.
"""

from __future__ import annotations

import re

#: What ends a line of Python source.
LINE_BREAK = re.compile(r"\r\n|\r|\n")
_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+\Z")


def split_lines(text: str, keepends: bool = False) -> list[str]:
    """``text.splitlines(keepends)``, with Python's line breaks only (see the module's docstring)."""
    lines = _LINE.findall(text)
    return lines if keepends else [line.rstrip("\r\n") for line in lines]


def line_starts(text: str) -> list[int]:
    """The offset of every line's first character, as Python counts lines (``\\r\\n``, ``\\r``, ``\\n``)."""
    return [0, *(match.end() for match in LINE_BREAK.finditer(text))]
