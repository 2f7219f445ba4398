"""What the user reads: per-file migration summaries, unified diffs and finding lines."""

from __future__ import annotations

import difflib

import click

from ddp_migrate.codemods.base import Finding

from .engine import FileResult


def finding_line(path: str, finding: Finding) -> str:
    """``path:line:col: CODE message`` with a 1-based column, like ruff and flake8."""
    return f"{path}:{finding.line}:{finding.column + 1}: {finding.code} {finding.message}"


def migration_summary(result: FileResult, verbose: bool, written: bool = True) -> list[str]:
    """The lines that tell what a migration did to one file and what still needs a human.

    ``written`` is false under ``--check`` and ``--diff``: a changed file then "would be migrated".
    """
    lines: list[str] = []
    if result.error:
        return [result.error]
    if result.skipped:
        return [f"{result.path}: skipped (nothing a rule could match)"] if verbose else []
    if not result.changes and not result.findings and not result.notes:
        return [f"{result.path}: unchanged"] if verbose else []
    verb = ("migrated" if written else "would be migrated") if result.changed else "unchanged"
    head = f"{result.path}: {verb}, {len(result.changes)} change(s)"
    if result.findings:
        head += f", {len(result.findings)} item(s) need a human"
    lines.append(head)
    for change in result.changes:
        lines.append(f"  {change.code} line {change.line}: {change.message}")
    for finding in result.findings:
        lines.append(f"  review {finding_line(result.path, finding)}")
    for note in result.notes:
        lines.append(f"  note {note.code} line {note.line}: {note.message}")
    if result.changed and written and result.path != "-":
        lines.append(f"  launch it with: torchrun --standalone --nproc_per_node=<processes> {result.path}")
    return lines


def unified_diff(result: FileResult, color: bool) -> str:
    """The change to one file as a unified diff (coloured for a terminal when asked)."""
    old = result.text.splitlines(keepends=True)
    new = result.new_text.splitlines(keepends=True)
    diff = list(difflib.unified_diff(old, new, fromfile=f"a/{result.path}", tofile=f"b/{result.path}"))
    out = []
    for line in diff:
        if not line.endswith("\n"):
            line += "\n\\ No newline at end of file\n"
        if color:
            if line.startswith(("+++", "---")):
                line = click.style(line, bold=True)
            elif line.startswith("@@"):
                line = click.style(line, fg="cyan")
            elif line.startswith("+"):
                line = click.style(line, fg="green")
            elif line.startswith("-"):
                line = click.style(line, fg="red")
        out.append(line)
    return "".join(out)
