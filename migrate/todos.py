"""Every ``# TODO(ddp-migrate): ...`` a migration writes is an item of its report.

A fix may write a TODO comment for something it cannot do, and the finding behind it may be gone from the
final analysis (another rule's fix in the same run changed what the rule sees: a second loader's TODO
written in the pass that gave the first its ``set_epoch``). The report, which counts findings, would then
say "0 item(s) need a human" above code that asks for one. The engine records which rule wrote each TODO
(:class:`TodoAuthors`) and turns the TODO comments of the final text that no finding stands under into
findings of their rule (:func:`unreported_todos`).
"""

from __future__ import annotations

import ast
from collections import Counter

from ddp_migrate.codemods.analysis.lines import split_lines
from ddp_migrate.codemods.analysis.project import child_statements, first_line
from ddp_migrate.codemods.base import Finding, Rule, Severity
from ddp_migrate.codemods.edits import TODO_PREFIX

_MARK = TODO_PREFIX.strip()


def todo_messages(text: str) -> Counter[str]:
    """The messages of the TODO comments of the tool in a text, each with how often it occurs."""
    if _MARK not in text:
        return Counter()
    return Counter(message for _, _, message in _todo_lines(split_lines(text)))


def _todo_lines(lines: list[str]) -> list[tuple[int, str, str]]:
    """``(line number, indentation, message)`` of each line that is a TODO comment of the tool."""
    found = []
    for number, line in enumerate(lines, 1):
        stripped = line.lstrip()
        if stripped.startswith(_MARK):
            found.append((number, line[: len(line) - len(stripped)], stripped[len(_MARK) :].strip()))
    return found


class TodoAuthors:
    """Which rule wrote each TODO message during one migration (the first rule to write it)."""

    def __init__(self) -> None:
        self._rules: dict[str, Rule] = {}

    def record(self, rule: Rule, old_text: str, new_text: str) -> None:
        """Note the TODO messages a fix of ``rule`` added when it turned ``old_text`` into ``new_text``."""
        if new_text.count(_MARK) <= old_text.count(_MARK):
            return
        for message in todo_messages(new_text) - todo_messages(old_text):
            self._rules.setdefault(message, rule)

    def rule_of(self, message: str) -> Rule | None:
        """The rule that wrote the message in this migration, ``None`` for one it did not write."""
        return self._rules.get(message)


def unreported_todos(text: str, findings: list[Finding], authors: TodoAuthors) -> list[Finding]:
    """A finding for each TODO comment this migration wrote into ``text`` (its final code) that no finding
    stands under: at the statement below the comment, with the rule and message of the TODO."""
    lines = split_lines(text)
    written = [(number, indent, message) for number, indent, message in _todo_lines(lines) if authors.rule_of(message)]
    if not written:
        return []
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return []
    covered = _comments_above(lines, {statement_start(tree, f.line, f.column) for f in findings} - {None})  # type: ignore[arg-type]
    found = []
    for number, indent, message in written:
        if number in covered:
            continue
        below = number + 1
        while below <= len(lines) and lines[below - 1].lstrip().startswith("#"):
            below += 1
        rule = authors.rule_of(message)
        assert rule is not None
        found.append(
            Finding(
                code=rule.code,
                name=rule.name,
                line=below,
                column=len(indent),
                end_line=below,
                end_column=len(indent),
                message=message,
                severity=Severity.WARNING,
                fixable=False,
            )
        )
    return found


def _comments_above(lines: list[str], starts: set[int]) -> set[int]:
    """The numbers of the comment lines right above each of the statements starting at ``starts``."""
    covered: set[int] = set()
    for start in starts:
        above = start - 1
        while above >= 1 and lines[above - 1].lstrip().startswith("#"):
            covered.add(above)
            above -= 1
    return covered


def statement_start(tree: ast.Module, line: int, column: int) -> int | None:
    """The first line (decorators included) of the innermost statement at a position."""
    found: ast.stmt | None = None
    body: list[ast.stmt] = tree.body
    while True:
        inner = next(
            (
                s
                for s in body
                if (s.lineno, s.col_offset) <= (line, column) <= (s.end_lineno or s.lineno, s.end_col_offset or 0)
            ),
            None,
        )
        if inner is None:
            break
        found = inner
        body = child_statements(inner)
    return None if found is None else first_line(found)
