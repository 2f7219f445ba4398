"""Edits a fix collects against the analysed tree and applies in one pass.

Fixes find nodes in the analysis and describe what to do with them (replace, remove, insert statements
around them, add a TODO comment, add an import); :meth:`Edits.apply` runs one transformer that matches
the nodes by identity. Replacements are functions of the *updated* node, so edits nested in one another
compose instead of overwriting each other.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Iterable, Union

import libcst as cst
from libcst.codemod import CodemodContext
from libcst.codemod.visitors import RemoveImportsVisitor

from .base import Change, FixResult, Note
from .analysis import statements_of, walk

if TYPE_CHECKING:
    from .analysis import ScriptAnalysis

TODO_PREFIX = "# TODO(ddp-migrate): "

Replacement = Callable[[cst.CSTNode], Union[cst.CSTNode, cst.RemovalSentinel, cst.FlattenSentinel]]


def statement(code: str) -> cst.BaseStatement:
    """Parse one statement of source code."""
    return cst.parse_statement(code)


def expression(code: str) -> cst.BaseExpression:
    """Parse one expression of source code."""
    return cst.parse_expression(code)


def code_of(node: cst.CSTNode) -> str:
    """The source code of a node, as it would be written out."""
    return cst.Module(body=[]).code_for_node(node)


class Edits:
    """The edits of one fix, applied together by :meth:`apply`."""

    def __init__(self, code: str) -> None:
        self.code = code
        self._replacements: dict[cst.CSTNode, list[Replacement]] = {}
        self._before: dict[cst.CSTNode, list[cst.BaseStatement]] = {}
        self._after: dict[cst.CSTNode, list[cst.BaseStatement]] = {}
        self._todos: dict[cst.CSTNode, list[str]] = {}
        self._imports: list[tuple[str, str | None, str | None]] = []
        self._unused_imports: list[tuple[str, str | None, str | None]] = []
        self.changes: list[Change] = []
        self.notes: list[Note] = []

    def __bool__(self) -> bool:
        return bool(self._replacements or self._before or self._after or self._todos or self._imports or self._unused_imports)

    def replace(self, node: cst.CSTNode, new: cst.CSTNode | Replacement) -> None:
        """Replace a node by a new one, or by what a function makes of the updated node."""
        make: Replacement = new if callable(new) else (lambda _updated, _new=new: _new)  # type: ignore[misc]
        self._replacements.setdefault(node, []).append(make)

    def remove(self, stmt: cst.CSTNode) -> None:
        """Remove a statement (or a small statement within a line)."""
        self.replace(stmt, lambda _updated: cst.RemoveFromParent())

    def insert_before(self, stmt: cst.BaseStatement, *new: cst.BaseStatement) -> None:
        """Insert statements right before a statement, in the same block."""
        self._before.setdefault(stmt, []).extend(new)

    def insert_after(self, stmt: cst.BaseStatement, *new: cst.BaseStatement) -> None:
        """Insert statements right after a statement, in the same block."""
        self._after.setdefault(stmt, []).extend(new)

    def todo(self, stmt: cst.BaseStatement, message: str) -> None:
        """Put a ``# TODO(ddp-migrate): ...`` comment on the line above a statement (once)."""
        self._todos.setdefault(stmt, []).append(message)

    def add_import(self, module: str, name: str | None = None, asname: str | None = None) -> None:
        """Make sure ``from module import name [as asname]`` (or ``import module``) is in the file."""
        if (module, name, asname) not in self._imports:
            self._imports.append((module, name, asname))

    def remove_import_if_unused(self, module: str, name: str | None = None, asname: str | None = None) -> None:
        """Drop ``from module import name [as asname]`` once nothing in the file uses it any more."""
        self._unused_imports.append((module, name, asname))

    def apply(self, module: cst.Module) -> FixResult:
        """Run every collected edit over the module and return the new one with the report items."""
        new = module.visit(_Applier(self)) if (self._replacements or self._before or self._after or self._todos) else module
        if self._imports:
            new = _add_imports(new, sorted(self._imports, key=lambda i: (i[0].startswith("ddp_migrate"), i)))
        if self._unused_imports:
            context = CodemodContext()
            for mod, name, asname in self._unused_imports:
                RemoveImportsVisitor.remove_unused_import(context, mod, name, asname)
            new = RemoveImportsVisitor(context).transform_module(new)
        return FixResult(new, list(self.changes), list(self.notes))


def _import_statement(module: str, name: str | None, asname: str | None) -> cst.SimpleStatementLine:
    alias = f" as {asname}" if asname else ""
    text = f"from {module} import {name}{alias}" if name else f"import {module}{alias}"
    stmt = cst.parse_statement(text)
    assert isinstance(stmt, cst.SimpleStatementLine)
    return stmt


def _is_import_line(stmt: cst.BaseStatement) -> bool:
    return isinstance(stmt, cst.SimpleStatementLine) and all(isinstance(s, (cst.Import, cst.ImportFrom)) for s in stmt.body)


def _is_docstring_line(stmt: cst.BaseStatement) -> bool:
    return (
        isinstance(stmt, cst.SimpleStatementLine)
        and isinstance(stmt.body[0], cst.Expr)
        and isinstance(stmt.body[0].value, (cst.SimpleString, cst.ConcatenatedString))
    )


def _add_imports(module: cst.Module, imports: list[tuple[str, str | None, str | None]]) -> cst.Module:
    """Add missing imports after the file's leading block of imports (after its docstring if none).

    The fixes only ask for imports the analysis found missing, so this stays a cheap list insertion
    instead of a full import-gathering pass over the tree.
    """
    body = list(module.body)
    existing = {cst.Module(body=[]).code_for_node(s).strip() for s in body if _is_import_line(s)}
    position = 0
    for index, stmt in enumerate(body):
        if _is_import_line(stmt) or (index == 0 and _is_docstring_line(stmt)):
            position = index + 1
        else:
            break
    new_lines = []
    for mod, name, asname in imports:
        stmt = _import_statement(mod, name, asname)
        code = cst.Module(body=[]).code_for_node(stmt).strip()
        if code not in existing:
            existing.add(code)
            new_lines.append(stmt)
    if not new_lines:
        return module
    if position == 0 and body and not _is_import_line(body[0]):
        # Keep the file's leading comments on top and separate the new imports from the code below.
        first = body[0]
        new_lines[0] = new_lines[0].with_changes(leading_lines=first.leading_lines)
        body[0] = first.with_changes(leading_lines=[cst.EmptyLine(), *first.leading_lines[len(first.leading_lines):]])
    elif position and not _is_import_line(body[position - 1]) and position < len(body):
        new_lines[0] = new_lines[0].with_changes(leading_lines=[cst.EmptyLine()])
    return module.with_changes(body=[*body[:position], *new_lines, *body[position:]])


def has_todo(stmt: cst.BaseStatement, message: str) -> bool:
    """Whether the statement already carries this TODO comment."""
    return any(
        line.comment is not None and line.comment.value == TODO_PREFIX + message for line in stmt.leading_lines
    )


class _Applier(cst.CSTTransformer):
    def __init__(self, edits: Edits) -> None:
        super().__init__()
        self.edits = edits

    def on_leave(self, original: cst.CSTNode, updated: cst.CSTNode):  # type: ignore[override]
        result: cst.CSTNode | cst.RemovalSentinel | cst.FlattenSentinel = updated
        for make in self.edits._replacements.get(original, ()):
            if isinstance(result, cst.CSTNode):
                result = make(result)
        todos = self.edits._todos.get(original)
        if todos and isinstance(result, (cst.SimpleStatementLine, cst.BaseCompoundStatement)):
            lines = list(result.leading_lines)
            for message in todos:
                if not has_todo(result, message):
                    lines.append(cst.EmptyLine(comment=cst.Comment(TODO_PREFIX + message)))
            result = result.with_changes(leading_lines=lines)
        before = self.edits._before.get(original, [])
        after = self.edits._after.get(original, [])
        if before or after:
            kept = [result] if isinstance(result, cst.CSTNode) else list(result.nodes) if isinstance(result, cst.FlattenSentinel) else []
            if before and kept and isinstance(kept[0], (cst.SimpleStatementLine, cst.BaseCompoundStatement)):
                # Comments above the original statement stay above the first statement of the group.
                first = before[0].with_changes(leading_lines=[*kept[0].leading_lines, *before[0].leading_lines])
                kept[0] = kept[0].with_changes(leading_lines=[])
                before = [first, *before[1:]]
            return cst.FlattenSentinel([*before, *kept, *after])
        return result


def without_argument(call: cst.Call, removed: cst.Arg) -> cst.Call:
    """The call without one of its arguments, keeping the layout of the others (and a trailing comma)."""
    args = list(call.args)
    index = next(i for i, arg in enumerate(args) if arg is removed)
    del args[index]
    if index == len(args) and args:
        # The removed argument was the last one: the new last one takes over its comma (or lack of one).
        args[-1] = args[-1].with_changes(comma=removed.comma, whitespace_after_arg=removed.whitespace_after_arg)
    return call.with_changes(args=args)


def with_keyword(call: cst.Call, keyword: str, value: cst.BaseExpression) -> cst.Call:
    """The call with ``keyword=value`` appended to its arguments."""
    new = cst.Arg(value, keyword=cst.Name(keyword), equal=cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace("")))
    if not call.args:
        return call.with_changes(args=[new])
    *rest, last = call.args
    # The new argument sits where the first one does (on its own line in a call laid out one per line) and
    # takes over what followed the last one: its trailing comma and the whitespace before the parenthesis.
    indent = call.whitespace_before_args
    after = indent if isinstance(indent, cst.ParenthesizedWhitespace) else cst.SimpleWhitespace(" ")
    whitespace_before = last.comma.whitespace_before if isinstance(last.comma, cst.Comma) else cst.SimpleWhitespace("")
    moved = last.with_changes(comma=cst.Comma(whitespace_before=whitespace_before, whitespace_after=after), whitespace_after_arg=cst.SimpleWhitespace(""))
    new = new.with_changes(comma=last.comma, whitespace_after_arg=last.whitespace_after_arg)
    return call.with_changes(args=[*rest, moved, new])


# ------------------------------------------- removing statements cleanly (appended for DDP020-DDP025, used by DDP004)

#: Calls that may appear in an ``if`` test that is dropped together with its emptied body.
PURE_CALLS = frozenset({"is_available", "device_count", "get", "getenv", "int", "str", "len", "isinstance", "hasattr", "is_initialized"})


def is_pure(test: cst.BaseExpression) -> bool:
    """Whether evaluating an expression can have no effect (names, literals, comparisons, a few queries)."""
    for node in walk(test):
        if isinstance(node, cst.Call):
            func = node.func
            name = func.value if isinstance(func, cst.Name) else func.attr.value if isinstance(func, cst.Attribute) else ""
            if name not in PURE_CALLS:
                return False
        if isinstance(node, (cst.NamedExpr, cst.Await, cst.Yield, cst.Lambda)):
            return False
    return True


def statement_line(analysis: ScriptAnalysis, node: cst.CSTNode) -> cst.CSTNode:
    """The node to remove for a small statement: its whole line when it is alone on it."""
    parent = analysis.parent(node)
    if isinstance(node, cst.BaseSmallStatement) and isinstance(parent, cst.SimpleStatementLine) and len(parent.body) == 1:
        return parent
    return node


def removal_set(analysis: ScriptAnalysis, statements: Iterable[cst.CSTNode]) -> set[cst.CSTNode]:
    """The statements to remove, plus every ``if`` (no ``else``, side-effect-free test) whose body they
    empty, so no ``if ...: pass`` is left behind."""
    removed = {statement_line(analysis, s) for s in statements}
    changed = True
    while changed:
        changed = False
        for block in {analysis.parent(s) for s in removed}:
            owner = analysis.parent(block) if isinstance(block, cst.IndentedBlock) else None
            if not (isinstance(owner, cst.If) and owner.body is block and owner.orelse is None) or owner in removed:
                continue
            if isinstance(analysis.parent(owner), cst.If):  # an ``elif``
                continue
            if is_pure(owner.test) and all(s in removed for s in block.body):
                removed.add(owner)
                changed = True
    return {s for s in removed if not any(a in removed for a in analysis.ancestors(s))}


def remove_statements(analysis: ScriptAnalysis, edits: Edits, statements: Iterable[cst.CSTNode]) -> set[cst.CSTNode]:
    """Remove statements (see :func:`removal_set`); returns what is removed.

    The blank lines and comments above a run of removed statements stay, above the statement after it.
    """
    removed = removal_set(analysis, statements)
    for stmt in removed:
        edits.remove(stmt)
    for block in {analysis.parent(s) for s in removed}:
        body = list(statements_of(block)) if isinstance(block, (cst.IndentedBlock, cst.Module)) else []
        for i, stmt in enumerate(body):
            if stmt in removed and (i == 0 or body[i - 1] not in removed) and stmt.leading_lines:
                following = next((s for s in body[i + 1 :] if s not in removed), None)
                if following is not None and any(s in removed for s in body[i:body.index(following)]):
                    moved = list(stmt.leading_lines)
                    edits.replace(following, lambda updated, moved=moved: updated.with_changes(leading_lines=[*moved, *updated.leading_lines]))
    return removed
