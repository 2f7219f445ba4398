"""Jupyter notebooks: lint their code cells, and migrate them into a torchrun-ready script beside them.

The code cells are joined into one Python text, each behind a ``# %% cell N`` marker (the "percent" cell
format editors know), and run through the engine like any script. A cell that does not compile as it is
has its IPython lines neutralised first: line magics and shell escapes (``%time``, ``!pip install``,
``x = !ls``) and help lines (``obj?``) become comments (``pass  # ...`` where a statement is needed);
a cell magic (``%%bash``) comments out the whole cell. Cells that compile are never touched, so a ``%``
inside a string is safe.

Positions are reported per cell, as ruff does: ``train.ipynb:cell 3:2:1: DDP001 ...`` (cells counted from
1, code cells only; lines within the cell). A notebook cannot be launched by torchrun, so ``migrate`` never
touches it: it writes the migrated code to ``<name>_ddp.py`` beside it, and refuses to overwrite a file of
that name it did not write itself.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from ddp_migrate.codemods.analysis.lines import split_lines
from ddp_migrate.codemods.base import Options, Rule

from .engine import FileResult, process

#: The first line of every script ddp-migrate writes from a notebook (how it knows it may overwrite one).
HEADER = "# Migrated by ddp-migrate from {name}: its code cells, IPython lines commented out."
LAUNCH = "# Launch: torchrun --standalone --nproc_per_node=<processes> {script}   (or: python {script})"

_ASSIGNED_MAGIC = re.compile(r"^(\s*)([A-Za-z_][\w.]*(?:\s*,\s*[A-Za-z_][\w.]*)*)\s*=\s*([%!].*)$")
_LINE_MAGIC = re.compile(r"^(\s*)([%!].*)$")
_HELP = re.compile(r"^(\s*)([%A-Za-z_][\w.]*\?\??)\s*$")
_POSITION = re.compile(r"^(?P<path>.*?):(?P<line>\d+):(?P<col>\d+): (?P<message>.*)$", re.S)


class NotebookError(Exception):
    """The file is not a notebook we can read."""


@dataclass(frozen=True)
class Extracted:
    """The code cells as one Python text, and where each of its lines came from."""

    text: str
    #: ``origin[i]`` is the (cell, line in cell) of line ``i + 1`` of ``text``; line 0 for a marker line.
    origin: tuple[tuple[int, int], ...]

    def position(self, line: int) -> tuple[int, int]:
        """The (cell, line) of a 1-based line of the joined text (past the end: the last cell's end)."""
        if not self.origin:
            return (1, 1)
        cell, in_cell = self.origin[min(max(line, 1), len(self.origin)) - 1]
        return (cell, max(in_cell, 1))


@dataclass
class NotebookResult(FileResult):
    """What happened to a notebook; ``output`` is the migrated script's bytes, for ``write_path``."""

    write_path: str = ""
    #: "new", "updated" (a script ddp-migrate wrote before) or "" (nothing to write).
    script_status: str = ""
    extracted: Extracted = field(default_factory=lambda: Extracted("", ()))


def script_path(notebook: Path | str) -> Path:
    """Where the migrated script of a notebook goes: ``train.ipynb`` → ``train_ddp.py`` beside it."""
    path = Path(notebook)
    return path.with_name(f"{path.stem}_ddp.py")


def _compiles(text: str) -> bool:
    try:
        compile(text, "<cell>", "exec", dont_inherit=True)
    except (SyntaxError, ValueError):
        return False
    return True


def neutralise(cell: str) -> str:
    """A cell's source with its IPython-only lines turned into comments (cells that compile: as they are)."""
    if _compiles(cell):
        return cell
    lines = split_lines(cell)
    if lines and lines[0].lstrip().startswith("%%"):
        return "".join(f"# {line}\n" if line.strip() else "\n" for line in lines)
    out = []
    for line in lines:
        assigned = _ASSIGNED_MAGIC.match(line)
        magic = _LINE_MAGIC.match(line) or _HELP.match(line)
        if assigned:
            indent, names, rest = assigned.groups()
            out.append(f"{indent}{names} = None  # {rest}")
        elif magic:
            indent, rest = magic.groups()
            out.append(f"{indent}pass  # {rest}" if indent else f"# {rest}")
        else:
            out.append(line)
    return "\n".join(out) + "\n"


def code_cells(data: bytes) -> list[str]:
    """The sources of a notebook's code cells, in order."""
    try:
        notebook = json.loads(data.decode("utf-8-sig"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise NotebookError(f"not a readable notebook: {error}") from None
    if not isinstance(notebook, dict) or not isinstance(notebook.get("cells"), list):
        raise NotebookError("not a notebook: no list of cells")
    sources = []
    for cell in notebook["cells"]:
        if not isinstance(cell, dict) or cell.get("cell_type") != "code":
            continue
        source = cell.get("source", "")
        sources.append("".join(source) if isinstance(source, list) else str(source))
    return sources


def extract(data: bytes) -> Extracted:
    """Join a notebook's code cells into one Python text, each behind a ``# %% cell N`` marker."""
    lines: list[str] = []
    origin: list[tuple[int, int]] = []
    for number, source in enumerate(code_cells(data), start=1):
        lines.append(f"# %% cell {number}")
        origin.append((number, 0))
        body = neutralise(source.replace("\r\n", "\n"))
        for index, line in enumerate(split_lines(body), start=1):
            lines.append(line)
            origin.append((number, index))
        lines.append("")
        origin.append((number, len(split_lines(body)) + 1))
    return Extracted("\n".join(lines) + "\n" if lines else "", tuple(origin))


def relocate_error(error: str, extracted: Extracted) -> str:
    """An engine error line ``path:line:col: message`` with its line turned into ``cell N:line``."""
    match = _POSITION.match(error)
    if not match:
        return error
    cell, line = extracted.position(int(match["line"]))
    return f"{match['path']}:cell {cell}:{line}:{match['col']}: {match['message']}"


def _script_text(notebook: str, script: str, migrated: str) -> str:
    header = HEADER.format(name=Path(notebook).name)
    return f"{header}\n{LAUNCH.format(script=Path(script).name)}\n\n{migrated}"


def process_notebook_bytes(
    path: str,
    data: bytes,
    rules: Sequence[type[Rule]],
    options: Options,
    fix: bool,
    target: Path | None = None,
    fixable: frozenset[type[Rule]] | None = None,
) -> NotebookResult:
    """Lint (or migrate) a notebook's code cells; the migrated script goes to ``target`` (see module docs).
    ``fixable``: the rules whose fixes may run (``lint --fix`` without ``--unsafe-fixes``), as for a file.

    Finding positions stay those of the joined text (:attr:`NotebookResult.extracted` maps them to cells);
    an error line is already given per cell.
    """
    result = NotebookResult(path=path, original=data)
    try:
        extracted = extract(data)
    except NotebookError as error:
        result.error = f"{path}:1:1: {error}"
        return result
    result.extracted = extracted
    engine = process(path, extracted.text.encode("utf-8"), rules, options, fix, fixable=fixable)
    result.changes, result.findings, result.notes, result.skipped = engine.changes, engine.findings, engine.notes, engine.skipped
    if engine.error:
        result.error = relocate_error(engine.error, extracted)
        return result
    if not fix or engine.output is None:
        return result
    script = _script_text(path, str(target or script_path(path)), engine.new_text)
    result.new_text = script
    if target is None:  # standard input: the script goes to standard output
        result.output = script.encode("utf-8")
        return result
    result.write_path = str(target)
    try:
        existing = target.read_bytes() if target.exists() else None
    except OSError as error:
        result.error = f"{target}:1:1: cannot read: {error.strerror or error}"
        return result
    if existing is not None:
        result.text = existing.decode("utf-8", errors="replace")
        if existing == script.encode("utf-8"):
            return result  # up to date: nothing to write
        if not result.text.startswith(HEADER.format(name=Path(path).name)):
            result.error = (
                f"{path}:1:1: {target} exists and was not written by ddp-migrate from this notebook: "
                "not overwritten (move it away to migrate the notebook)"
            )
            result.changes = []
            return result
        result.script_status = "updated"
    else:
        result.script_status = "new"
    result.output = script.encode("utf-8")
    return result


def process_notebook(
    path: Path, rules: Sequence[type[Rule]], options: Options, fix: bool, fixable: frozenset[type[Rule]] | None = None
) -> NotebookResult:
    """Read a notebook file and :func:`process_notebook_bytes` it, its script beside it."""
    try:
        data = path.read_bytes()
    except OSError as error:
        return NotebookResult(path=str(path), original=b"", error=f"{path}:1:1: cannot read: {error.strerror or error}")
    return process_notebook_bytes(str(path), data, rules, options, fix, target=script_path(path), fixable=fixable)
