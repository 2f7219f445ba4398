"""What the user reads: per-file migration summaries, unified diffs and finding lines."""

from __future__ import annotations

import difflib
import re
from dataclasses import replace
from pathlib import Path

import click

from ddp_migrate.codemods.analysis.lines import split_lines
from ddp_migrate.codemods.base import Finding

from .color import paint
from .engine import FileResult


def finding_line(path: str, finding: Finding, cell: int | None = None, color: bool = False) -> str:
    """``path:line:col: CODE message`` with a 1-based column, like ruff and flake8.

    In a notebook the line counts within a code cell: ``path:cell 3:2:1: CODE message``. With ``color``
    the path is bold, the separators cyan and the code bold red, as in ruff (the reset before any newline).
    """
    where = [f"cell {cell}"] if cell is not None else []
    where += [str(finding.line), str(finding.column + 1)]
    if not color:
        return f"{path}:{':'.join(where)}: {finding.code} {finding.message}"
    colon = click.style(":", fg="cyan")
    head = click.style(path, bold=True) + colon + colon.join(where) + colon
    return f"{head} {click.style(finding.code, fg='red', bold=True)} {finding.message}"


def migration_summary(result: FileResult, verbose: bool, written: bool = True) -> list[str]:
    """The lines that tell what a migration did to one file and what still needs a human.

    ``written`` is false under ``--check`` and ``--diff``: a changed file then "would be migrated".
    """
    lines: list[str] = []
    if result.error:
        return [result.error]
    write_path = getattr(result, "write_path", "")
    if write_path or getattr(result, "extracted", None) is not None:
        return _notebook_summary(result, write_path, verbose, written)
    if result.skipped:
        return [f"{result.path}: skipped (nothing a rule could match)"] if verbose else []
    if not result.changes and not result.findings and not result.notes:
        return [f"{result.path}: unchanged"] if verbose else []
    verb = ("migrated" if written else "would be migrated") if result.changed else "unchanged"
    head = f"{result.path}: {verb}, {len(result.changes)} change(s)"
    if result.findings:
        head += f", {len(result.findings)} item(s) need a human"
    lines.append(head)
    # changes at lines of the original file, findings and notes at lines of the migrated one (the engine's)
    for change in sorted(result.changes, key=lambda change: (change.line, change.code)):
        lines.append(f"  {change.code} line {change.line}: {change.message}")
    for finding in result.findings:
        lines.append(f"  review {finding_line(result.path, finding)}")
    for note in result.notes:
        lines.append(f"  note {note.code} line {note.line}: {note.message}")
    if result.changed and written and result.path != "-" and result.role == "entry":  # a module runs with its entry
        after = (
            " (once the review items above are done)"
            if result.findings
            else " (once the review items of its modules are done)"
            if result.reviews_elsewhere
            else ""
        )
        lines.append(f"  launch it with: torchrun --standalone --nproc_per_node=<processes> {_launch_target(result)}{after}")
    return lines


_RELATIVE_IMPORT = re.compile(r"^[ \t]*from[ \t]+\.", re.MULTILINE)


def _launch_target(result: FileResult) -> str:
    """What torchrun runs: the script's path, or ``-m package.module`` (from the folder above its package)
    where the script imports relatively (``from .engine import ...``) or imports the package it sits in by
    its name (``from mypkg.models import Net`` in ``mypkg/train.py``): run by its path, the folder above the
    package is not on ``sys.path`` and the import fails. A package's ``__main__.py`` is ``-m package``."""
    text = result.new_text or result.text or ""
    path = Path(result.path)
    parts = [path.stem]
    folder = path.parent
    while (folder / "__init__.py").is_file():
        parts.insert(0, folder.name)
        folder = folder.parent
    if len(parts) == 1 and _RELATIVE_IMPORT.search(text) and folder.name:
        # A namespace package (no ``__init__.py``) imported relatively: run as a module of its folder too
        parts.insert(0, folder.name)
        folder = folder.parent
    if len(parts) == 1:
        return result.path
    if parts[-1] == "__main__":  # ``python -m proj`` runs ``proj/__main__.py``
        parts.pop()
    own_package = re.compile(rf"^[ \t]*(?:from|import)[ \t]+{re.escape(parts[0])}\b", re.MULTILINE)
    if not _RELATIVE_IMPORT.search(text) and not own_package.search(text):
        return result.path
    return f"-m {'.'.join(parts)} (from {folder})" if str(folder) not in ("", ".") else f"-m {'.'.join(parts)}"


def _notebook_summary(result: FileResult, write_path: str, verbose: bool, written: bool) -> list[str]:
    """A notebook is never rewritten: its migrated code goes to a script beside it, and the report says so."""
    status = getattr(result, "script_status", "")
    if not result.changed:
        if write_path:
            return [f"{result.path}: {write_path} is up to date (the notebook is left as it is)"] if verbose else []
        if not result.findings:
            return [f"{result.path}: nothing to migrate (the notebook is left as it is)"] if verbose else []
        lines = [f"{result.path}: nothing migrated, {len(result.findings)} item(s) need a human"]
    else:
        verb = {"new": "written to", "updated": "rewritten into"}.get(status, "written to")
        action = f"migrated code {verb}" if written else f"migrated code would be {verb}"
        lines = [f"{result.path}: {action} {write_path or 'standard output'}, {len(result.changes)} change(s); the notebook is left as it is"]
        if result.findings:
            lines[0] += f", {len(result.findings)} item(s) need a human"
    extracted = getattr(result, "extracted", None)
    for change in result.changes:
        cell, line = extracted.position(change.line) if extracted is not None else (0, change.line)
        lines.append(f"  {change.code} cell {cell} line {line}: {change.message}")
    for finding in result.findings:
        cell, line = extracted.position(finding.line) if extracted is not None else (None, finding.line)
        end = extracted.position(finding.end_line)[1] if extracted is not None else finding.end_line
        lines.append(f"  review {finding_line(result.path, replace(finding, line=line, end_line=end), cell)}")
    if result.changed and written and write_path:
        lines.append(f"  launch it with: torchrun --standalone --nproc_per_node=<processes> {write_path}")
    return lines


def unified_diff(result: FileResult, color: bool) -> str:
    """The change to one file as a unified diff (coloured for a terminal when asked, reset before the newline).

    A notebook's diff is that of the script its migration writes (from nothing, for a new script).
    """
    name = getattr(result, "write_path", "") or result.path
    old = split_lines(result.text, keepends=True)
    new = split_lines(result.new_text, keepends=True)
    fromfile = f"a/{name}" if old else "/dev/null"
    diff = list(difflib.unified_diff(old, new, fromfile=fromfile, tofile=f"b/{name}"))
    out = []
    for line in diff:
        if not line.endswith("\n"):
            line += "\n\\ No newline at end of file\n"
        if color:
            if line.startswith(("+++", "---")):
                line = paint(line, True, bold=True)
            elif line.startswith("@@"):
                line = paint(line, True, fg="cyan")
            elif line.startswith("+"):
                line = paint(line, True, fg="green")
            elif line.startswith("-"):
                line = paint(line, True, fg="red")
        out.append(line)
    return "".join(out)
