"""Where a new import goes so that a file isort or ruff (``--select I``) accepts still passes.

The rules of ruff's isort (its defaults, which are isort's "black" profile): the leading import block is
made of sections in the order future, standard library, third party, first party, local (relative), one
blank line apart; inside a section every ``import x`` comes before every ``from x import y``, each kind
sorted by module name, case-insensitively. A new import joins the section it belongs to at its sorted
place, or opens that section at its place among the others.

Which section an import of the file belongs to is known for the standard library (``sys.stdlib_module_names``),
``__future__`` and relative imports. Third party against first party is a property of the project (ruff
looks for the module in the project's source folders), so the file's own grouping decides: the blank-line
separated group that holds torch (every file this tool rewrites imports it) is the third-party one; a group
of neither kind is third party when its module is installed outside the project (``site-packages``), else
first party. The imports fixes add are of known kinds: the standard library (``os``, ``contextlib``),
torch, ``ddp_migrate`` (third party) and the vendored ``ddp_runtime`` (first party: it is written beside
the program).
"""

from __future__ import annotations

import enum
import importlib.util
import sys
from functools import lru_cache
from typing import Sequence

import libcst as cst

from .analysis import dotted_name, is_docstring_line, is_import_line

#: Top-level modules known to be third party without looking them up.
KNOWN_THIRD_PARTY = frozenset({"torch", "torchvision", "torchaudio", "torchtext", "numpy", "ddp_migrate"})
#: Top-level modules known to be first party: the runtime ``--runtime vendor`` writes beside the program.
KNOWN_FIRST_PARTY = frozenset({"ddp_runtime"})


class Section(enum.IntEnum):
    """isort's sections, in their order in a file."""

    FUTURE = 0
    STDLIB = 1
    THIRD_PARTY = 2
    FIRST_PARTY = 3
    LOCAL = 4


def _module_of(stmt: cst.SimpleStatementLine) -> tuple[bool, str]:
    """Whether an import line is a from-import, and the module it names (relative ones with their dots)."""
    small = stmt.body[0]
    if isinstance(small, cst.ImportFrom):
        module = dotted_name(small.module) or "" if small.module is not None else ""
        return True, "." * len(small.relative) + module
    assert isinstance(small, cst.Import)
    return False, dotted_name(small.names[0].name) or ""


def import_sort_key(stmt: cst.SimpleStatementLine) -> tuple[int, str, str]:
    """isort's order inside a section: straight imports first, then from-imports, each by module name."""
    is_from, module = _module_of(stmt)
    return int(is_from), module.lower(), module


def section_of(stmt: cst.SimpleStatementLine) -> Section | None:
    """The section of an import line when its module says it (``None``: third or first party, unknown)."""
    top = _module_of(stmt)[1].split(".")[0]
    if top == "":
        return Section.LOCAL  # a relative import
    if top == "__future__":
        return Section.FUTURE
    if top in KNOWN_THIRD_PARTY:
        return Section.THIRD_PARTY
    if top in KNOWN_FIRST_PARTY:
        return Section.FIRST_PARTY
    if top in sys.stdlib_module_names:
        return Section.STDLIB
    return None


@lru_cache(maxsize=1024)
def _installed(top: str) -> bool:
    """Whether a top-level module is installed (found in a ``site-packages`` or ``dist-packages`` folder)."""
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        return False
    origin = (spec.origin or "") if spec is not None else ""
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    return any(part in path for path in (origin, *locations) for part in ("site-packages", "dist-packages"))


def _group_section(group: Sequence[cst.SimpleStatementLine]) -> Section:
    """The section of a blank-line separated group of imports (see the module's docstring)."""
    known = [section for section in map(section_of, group) if section is not None]
    if Section.THIRD_PARTY in known:
        return Section.THIRD_PARTY
    unknown = [stmt for stmt in group if section_of(stmt) is None]
    if unknown:
        tops = [_module_of(stmt)[1].split(".")[0] for stmt in unknown]
        return Section.THIRD_PARTY if any(_installed(top) for top in tops) else Section.FIRST_PARTY
    return min(known) if known else Section.FIRST_PARTY


def insert_sorted(body: list[cst.BaseStatement], new: cst.SimpleStatementLine) -> list[cst.BaseStatement] | None:
    """The module body with ``new`` placed in its leading import block where isort would put it; ``None``
    when the module has no leading import block (the caller then places it after the docstring)."""
    start = 1 if body and is_docstring_line(body[0]) else 0
    end = start
    while end < len(body) and is_import_line(body[end]) and len(body[end].body) == 1:  # type: ignore[attr-defined]
        end += 1
    if end == start:
        return None
    groups: list[list[int]] = []
    for index in range(start, end):
        if not groups or _starts_group(body[index]):
            groups.append([])
        groups[-1].append(index)
    section = section_of(new) or Section.FIRST_PARTY
    sections = [_group_section([body[i] for i in group]) for group in groups]  # type: ignore[misc]
    key = import_sort_key(new)
    for group, group_section in zip(groups, sections):
        if group_section == section:
            later = next((i for i in group if import_sort_key(body[i]) > key), None)  # type: ignore[arg-type]
            if later is None:
                return [*body[: group[-1] + 1], new.with_changes(leading_lines=[]), *body[group[-1] + 1 :]]
            return _before(body, later, new, opens_group=later == group[0])
    following = next((group for group, group_section in zip(groups, sections) if group_section > section), None)
    if following is None:
        last = groups[-1][-1]
        return [*body[: last + 1], new.with_changes(leading_lines=[cst.EmptyLine()]), *body[last + 1 :]]
    return _before(body, following[0], new, opens_group=True, new_group=True)


def _starts_group(stmt: cst.BaseStatement) -> bool:
    """Whether a blank line above it opens a new group (comment lines alone stay with the import below)."""
    return any(line.comment is None for line in stmt.leading_lines)  # type: ignore[attr-defined]


def _before(
    body: list[cst.BaseStatement], index: int, new: cst.SimpleStatementLine, opens_group: bool, new_group: bool = False
) -> list[cst.BaseStatement]:
    """``new`` inserted before ``body[index]``. When ``new`` now opens that statement's group it takes over
    the lines above it (a blank line, comments); as a group of its own it gets one blank line after it."""
    old = body[index]
    if not opens_group:
        return [*body[:index], new.with_changes(leading_lines=[]), *body[index:]]
    moved = old.with_changes(leading_lines=[cst.EmptyLine()] if new_group else [])
    return [*body[:index], new.with_changes(leading_lines=old.leading_lines), moved, *body[index + 1 :]]  # type: ignore[attr-defined]
