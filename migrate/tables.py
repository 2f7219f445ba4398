"""Big tables of numbers inside other literals, which a lint that writes nothing parses as empty literals.

Generated data sits in real code bases as Python literals: kernel tuning tables, lookup tables of hundreds
of kilobytes. libcst needs well over a kilobyte of memory per character of such a table (torch's 0.5 MB
``sparse/_triton_ops_meta.py`` takes 680 MB and seconds to parse), while no rule finds anything in it.

Which literals: a list, tuple or dict display made of numbers only (``int``, ``float``, ``complex``,
``True``, ``False``, ``None``, signed numbers, and displays of them: no string, no name, no call) that is
itself an element, key or value of another display (``{("mm", torch.int8): {(16, 32): (1, 4), ...}}``),
at least :data:`MIN_TABLE` characters long. Not a set: emptied, ``{}`` would read as a dict. Rules do read
literals the code reads directly (a loader's keyword dict, the environment a dict sets, ``local_rank in
(-1, 0)``, the values a ``for`` loop takes, a literal quoted in a message), so a literal in such a place is
never blanked, whatever its size, nor one that holds a string (a key a rule looks for); a block of numbers
one level down in another literal is data no rule reads.

A lint that only reports (never ``--fix``, ``--diff`` or a migration: those print the module they parsed)
parses a lone module (a script, a library file: :func:`ddp_migrate.engine.process`) with each such table
blanked (:func:`blank_number_tables`): its brackets kept, the inside replaced by as many line breaks as
it spanned and spaces up to the closing bracket's column. Every line and column outside the table stays
where it was, so findings, ``# noqa`` comments (read from the original text) and the source lines a report
shows are the original's. The modules of a program analysed together are parsed whole (their code is
generated again from the tree).
"""

from __future__ import annotations

import ast
import re

from ddp_migrate.codemods.analysis.lines import LINE_BREAK, line_starts

#: The size, in characters of source, from which a table of numbers is blanked: far above any literal a
#: rule reads, far below the tables that cost memory.
MIN_TABLE = 32 * 1024

#: The displays a table may be (a set is left whole: emptied, ``{}`` would be a dict).
_CONTAINERS = (ast.Dict, ast.List, ast.Tuple)
_SIGNS = (ast.USub, ast.UAdd)
#: The constants a table of numbers holds (``bool`` is an ``int``).
_NUMBERS = (int, float, complex, type(None))


def _tables(tree: ast.AST) -> tuple[list[ast.AST], set[ast.AST]]:
    """The nodes of a tree in preorder (a node's descendants right after it; not into f-strings, whose
    positions older Pythons get wrong), and the displays made of numbers only that are an element, key or
    value of another display."""
    order: list[ast.AST] = []
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        order.append(node)
        if not isinstance(node, ast.JoinedStr):
            stack.extend(reversed(list(ast.iter_child_nodes(node))))
    numbers: set[ast.AST] = set()
    nested: set[ast.AST] = set()
    for node in reversed(order):  # every child before its parent
        if isinstance(node, ast.Constant):
            if isinstance(node.value, _NUMBERS):
                numbers.add(node)
        elif isinstance(node, ast.UnaryOp):
            if isinstance(node.op, _SIGNS) and node.operand in numbers:
                numbers.add(node)
        elif isinstance(node, ast.Dict):
            parts = [*node.keys, *node.values]
            nested.update(part for part in parts if part is not None)
            if all(part is not None and part in numbers for part in parts):
                numbers.add(node)
        elif isinstance(node, (ast.List, ast.Tuple, ast.Set)):
            nested.update(node.elts)
            if all(element in numbers for element in node.elts):
                numbers.add(node)
    return order, {node for node in numbers & nested if isinstance(node, _CONTAINERS)}


class _Offsets:
    """Character offsets of the compiler's positions (line from 1, column in UTF-8 bytes)."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.starts = line_starts(text)

    def of(self, line: int, byte_column: int) -> int:
        start = self.starts[line - 1]
        end = self.starts[line] if line < len(self.starts) else len(self.text)
        row = self.text[start:end]
        if row.isascii():
            return start + byte_column
        return start + len(row.encode("utf-8")[:byte_column].decode("utf-8", errors="ignore"))


def _brackets_its_own(node: ast.AST) -> bool:
    """Whether the literal's span is its own brackets around its elements (a tuple written without
    parentheses, ``1, 2``, or whose first element is parenthesized, ``(1, 2), (3, 4)``, is not)."""
    if not isinstance(node, ast.Tuple):
        return True
    if not node.elts:
        return True
    first, last = node.elts[0], node.elts[-1]
    return (first.lineno, first.col_offset) > (node.lineno, node.col_offset) and (
        last.end_lineno,
        last.end_col_offset,
    ) < (node.end_lineno, node.end_col_offset)


#: The start of a line that looks like code, not like the inside of a table of literals: it starts with
#: something else than an element (a bracket, a quote or a string prefix, a number, a sign, ``True``,
#: ``False``, ``None``), a separator, a comment or nothing.
_CODE_LINE = re.compile(r"^[ \t]*(?![ \t(\[{)\]}'\"0-9.+\-#,:\r\n]|(?:True|False|None)\b|[rRbBuU]{1,2}['\"])", re.MULTILINE)


def may_hold_a_table(text: str, minimum: int = MIN_TABLE) -> bool:
    """The cheap look before :func:`number_tables` parses a source: whether a stretch of at least
    ``minimum`` characters runs from one line that looks like code to the next (a table's lines after its
    first start with its elements; a table on one line is a line that long). A table this misses (one whose
    lines start with a multi-line string's text) is only parsed whole: this decides the cost, not a finding."""
    if len(text) < minimum:
        return False
    previous = 0
    for match in _CODE_LINE.finditer(text):
        if match.start() - previous >= minimum:
            return True
        previous = match.start()
    return len(text) - previous >= minimum


def number_tables(text: str, minimum: int = MIN_TABLE) -> list[tuple[int, int]]:
    """The spans (start, end: character offsets, end excluded) of the outermost tables of numbers nested in
    another literal (see the module's docstring) that are at least ``minimum`` characters long, in source
    order. None for a source with no stretch that long between lines that look like code
    (:func:`may_hold_a_table`), or one Python cannot parse (its error is reported elsewhere)."""
    if not may_hold_a_table(text, minimum):
        return []
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return []
    order, tables = _tables(tree)
    offsets = _Offsets(text)
    spans: list[tuple[int, int]] = []
    covered = -1  # the end of the last table taken: the nodes inside it come right after it in preorder
    for node in order:
        if node not in tables:
            continue
        if node.end_lineno is None or node.end_col_offset is None:
            continue
        start = offsets.of(node.lineno, node.col_offset)
        if start < covered:
            continue
        end = offsets.of(node.end_lineno, node.end_col_offset)
        if end - start >= minimum and _brackets_its_own(node) and text[start] in "([{" and text[end - 1] in ")]}":
            spans.append((start, end))
            covered = end
    return spans


def _blank(segment: str) -> str:
    """A bracketed literal emptied: its brackets, its line breaks, and spaces up to its closing bracket."""
    breaks = list(LINE_BREAK.finditer(segment))
    if not breaks:
        return segment[0] + " " * (len(segment) - 2) + segment[-1]
    last_line = len(segment) - breaks[-1].end()  # the closing bracket's line: its characters before it, and it
    return segment[0] + "".join(match.group() for match in breaks) + " " * (last_line - 1) + segment[-1]


def blank_number_tables(text: str, minimum: int = MIN_TABLE) -> str:
    """The source with every table of numbers of at least ``minimum`` characters emptied
    (:func:`number_tables`), every line and column outside them unchanged; the source itself when it has
    none."""
    spans = number_tables(text, minimum)
    if not spans:
        return text
    parts: list[str] = []
    done = 0
    for start, end in spans:
        parts.append(text[done:start])
        parts.append(_blank(text[start:end]))
        done = end
    parts.append(text[done:])
    return "".join(parts)
