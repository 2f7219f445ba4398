"""Edits a fix collects against the analysed tree and applies in one pass.

Fixes find nodes in the analysis and describe what to do with them (replace, remove, insert statements
around them, add a TODO comment, add an import); :meth:`Edits.apply` runs one transformer that matches
the nodes by identity. Replacements are functions of the *updated* node, so edits nested in one another
compose instead of overwriting each other.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Iterable, Union

import libcst as cst

from .analysis import dotted_name, is_docstring_line, is_import_line, statements_of, tree, walk
from .base import Change, FixResult, Note
from .import_order import import_sort_key, insert_sorted

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
    """The edits of one fix against the analysed module, applied together by :meth:`apply`."""

    def __init__(self, analysis: ScriptAnalysis) -> None:
        self.analysis = analysis
        self._replacements: dict[cst.CSTNode, list[Replacement]] = {}
        self._before: dict[cst.CSTNode, list[cst.BaseStatement]] = {}
        self._after: dict[cst.CSTNode, list[cst.BaseStatement]] = {}
        self._todos: dict[cst.CSTNode, list[str]] = {}
        self._imports: list[tuple[str, str | None, str | None]] = []
        self._drop_unused_imports = False
        self.changes: list[Change] = []
        self.notes: list[Note] = []

    def __bool__(self) -> bool:
        return bool(self._replacements or self._before or self._after or self._todos or self._imports)

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
        messages = self._todos.setdefault(stmt, [])
        if message not in messages:  # (two findings of one rule on one line: one comment)
            messages.append(message)

    def add_import(self, module: str, name: str | None = None, asname: str | None = None) -> None:
        """Make sure ``from module import name [as asname]`` (or ``import module``) is in the file."""
        if (module, name, asname) not in self._imports:
            self._imports.append((module, name, asname))

    def _path_to(self, module: cst.Module, targets: list[cst.CSTNode]) -> set[cst.CSTNode] | None:
        """The edited nodes and all their ancestors: the only nodes the applier must descend into
        (``None``: everything, for a module other than the analysed one)."""
        if module is not self.analysis.module:
            return None
        path: set[cst.CSTNode] = {module}
        for node in targets:
            path.add(node)
            for ancestor in self.analysis.ancestors(node):
                if ancestor in path:
                    break
                path.add(ancestor)
        return path

    def drop_unused_imports(self) -> None:
        """When applied, remove the top-level imports whose last use these edits removed (the one mechanism
        for imports a fix leaves behind; imports the file never used stay, they are the user's business)."""
        self._drop_unused_imports = True

    def apply(self, module: cst.Module) -> FixResult:
        """Run every collected edit over the module and return the new one with the report items.

        Only the edited nodes and their ancestors are rebuilt; every other subtree of the analysed module
        is kept as it is (the same objects) in the new one.
        """
        targets = [*self._replacements, *self._before, *self._after, *self._todos]
        new = module.visit(_Applier(self, self._path_to(module, targets))) if targets else module
        if self._imports:
            new = _add_imports(new, self._imports)
        if self._drop_unused_imports:
            new = _without_imports_made_unused(module, new)
        return FixResult(new, list(self.changes), list(self.notes))


def _import_statement(module: str, name: str | None, asname: str | None) -> cst.SimpleStatementLine:
    alias = f" as {asname}" if asname else ""
    text = f"from {module} import {name}{alias}" if name else f"import {module}{alias}"
    stmt = cst.parse_statement(text)
    assert isinstance(stmt, cst.SimpleStatementLine)
    return stmt


def _add_imports(module: cst.Module, imports: list[tuple[str, str | None, str | None]]) -> cst.Module:
    """Add the missing imports where isort (and ruff's ``I`` rules) would put them in the file's leading
    import block (:mod:`import_order`); after the docstring when the file has no such block.

    The fixes only ask for imports the analysis found missing, so this stays a cheap list insertion
    instead of a full import-gathering pass over the tree.
    """
    body = list(module.body)
    existing = {cst.Module(body=[]).code_for_node(s).strip() for s in body if is_import_line(s)}
    new_lines = []
    for mod, name, asname in imports:
        stmt = _import_statement(mod, name, asname)
        code = cst.Module(body=[]).code_for_node(stmt).strip()
        if code not in existing:
            existing.add(code)
            new_lines.append(stmt)
    if not new_lines:
        return module
    for stmt in sorted(new_lines, key=import_sort_key):
        body = insert_sorted(body, stmt) or _open_import_block(body, stmt)
    return module.with_changes(body=body)


def _open_import_block(body: list[cst.BaseStatement], stmt: cst.SimpleStatementLine) -> list[cst.BaseStatement]:
    """A module without leading imports gets ``stmt`` after its docstring (or first, keeping the file's
    leading comments on top), a blank line away from the code."""
    position = 1 if body and is_docstring_line(body[0]) else 0
    if position == 0 and body:
        first = body[0]
        # isort (and ruff) want two blank lines between the imports and a function or class, one otherwise.
        gap = [cst.EmptyLine()] * (2 if isinstance(first, (cst.FunctionDef, cst.ClassDef)) else 1)
        return [stmt.with_changes(leading_lines=first.leading_lines), first.with_changes(leading_lines=gap), *body[1:]]
    if position < len(body):
        stmt = stmt.with_changes(leading_lines=[cst.EmptyLine()])
        after = body[position]
        if isinstance(after, (cst.FunctionDef, cst.ClassDef)) and all(line.comment is None for line in after.leading_lines):
            body = [*body[:position], after.with_changes(leading_lines=[cst.EmptyLine()] * 2), *body[position + 1 :]]
    return [*body[:position], stmt, *body[position:]]


def has_todo(stmt: cst.BaseStatement, message: str) -> bool:
    """Whether the statement already carries this TODO comment."""
    return any(
        line.comment is not None and line.comment.value == TODO_PREFIX + message for line in stmt.leading_lines
    )


class _Applier(cst.CSTTransformer):
    def __init__(self, edits: Edits, path: set[cst.CSTNode] | None) -> None:
        super().__init__()
        self.edits = edits
        self.path = path

    def on_visit(self, node: cst.CSTNode) -> bool:
        # A subtree without edits is kept whole (libcst still calls on_leave for its root, unchanged).
        return self.path is None or node in self.path

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
        if type(original) is cst.FormattedString and isinstance(result, cst.FormattedString) and result is not original:
            result = _quotes_apart(result)
        return result


def _quotes_apart(string: cst.FormattedString) -> cst.FormattedString:
    """An edited f-string whose new expressions hold string literals in its own quote (``f"{m.state_dict(
    prefix="module.")}"``, which Python before 3.12 cannot parse) with those literals in the other quote, where
    their text allows it (the engine refuses any output that does not compile)."""
    quote = string.start[-1]
    other = "'" if quote == '"' else '"'

    class Requote(cst.CSTTransformer):
        def leave_SimpleString(self, original_node: cst.SimpleString, updated_node: cst.SimpleString) -> cst.SimpleString:
            value = updated_node.value
            prefix = value[: len(value) - len(value.lstrip("rRbBuU"))]
            body = value[len(prefix):]
            if body[:1] != quote or body[:3] == quote * 3 or other in body[1:-1] or "\\" in body:
                return updated_node
            return updated_node.with_changes(value=f"{prefix}{other}{body[1:-1]}{other}")

    parts = [
        part.with_changes(expression=part.expression.visit(Requote())) if isinstance(part, cst.FormattedStringExpression) else part
        for part in string.parts
    ]
    return string.with_changes(parts=parts)


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


# ------------------------------------------------------------------ edit helpers of the legacy launch rules

def replace_values(analysis: ScriptAnalysis, edits: Edits, values: Iterable[cst.BaseExpression], code: str) -> None:
    """Replace expressions by new code. Two assignments that are the whole of an ``if``/``else`` and now
    assign the same thing become that one assignment; so do the two sides of a conditional expression."""
    values = list(values)
    handled: set[cst.CSTNode] = set()
    for value in values:
        if value in handled:
            continue
        parent = analysis.parent(value)
        if type(parent) is cst.IfExp and value is not parent.test:  # type: ignore[attr-defined]
            # ``device_count() if cuda else 2``, both sides replaced alike: one value, no test
            other = parent.orelse if value is parent.body else parent.body  # type: ignore[attr-defined]
            if any(v is other for v in values):
                edits.replace(parent, expression(code))
                handled.update((value, other))
                continue
        branch = _if_else_branch(analysis, value)
        if branch is not None:
            condition, target = branch
            partner = next(
                (v for v in values if v is not value and (b := _if_else_branch(analysis, v)) is not None and b[0] is condition and b[1] == target),
                None,
            )
            if partner is not None and condition.orelse is not None and isinstance(condition.orelse, cst.Else):
                new = cst.parse_statement(f"{target} = {code}\n")
                edits.replace(condition, new.with_changes(leading_lines=condition.leading_lines))
                handled.update((value, partner))
                continue
        edits.replace(value, expression(code))
        handled.add(value)


def _if_else_branch(analysis: ScriptAnalysis, value: cst.BaseExpression) -> tuple[cst.If, str] | None:
    """``(if_statement, target)`` when the value is assigned by the only statement of one branch of an
    ``if``/``else``."""
    assign = analysis.parent(value)
    if not (isinstance(assign, cst.Assign) and assign.value is value and len(assign.targets) == 1):
        return None
    line = analysis.parent(assign)
    block = analysis.parent(line) if isinstance(line, cst.SimpleStatementLine) and len(line.body) == 1 else None
    if not isinstance(block, cst.IndentedBlock) or len(block.body) != 1:
        return None
    owner = analysis.parent(block)
    if isinstance(owner, cst.Else):
        owner = analysis.parent(owner)
    if not isinstance(owner, cst.If) or not isinstance(owner.orelse, cst.Else):
        return None
    if isinstance(analysis.parent(owner), cst.If):
        return None
    target = dotted_name(assign.targets[0].target)
    return (owner, target) if target else None


def without_launch_comments(lines: Iterable[cst.EmptyLine]) -> list[cst.EmptyLine]:
    """The lines above a launch without the comment block right above it when that block describes the
    launch (mentions spawn or multiprocessing): it would be wrong about the call that replaces it."""
    lines = list(lines)
    start = len(lines)
    while start > 0 and lines[start - 1].comment is not None:
        start -= 1
    block = " ".join(line.comment.value.lower() for line in lines[start:] if line.comment is not None)
    if any(word in block for word in ("spawn", "multiprocessing", "process(")):
        return lines[:start]
    return lines


# --------------------------------------------------------------------------------- small helpers


class _UsedNames:
    """Every name read outside import statements (``os`` in ``os.path.join`` counts)."""

    def __init__(self) -> None:
        self.used: set[str] = set()

    def visit_Import(self, node: cst.Import) -> bool:
        return False

    def visit_ImportFrom(self, node: cst.ImportFrom) -> bool:
        return False

    def visit_Name(self, node: cst.Name) -> None:
        self.used.add(node.value)


def _without_imports_made_unused(original: cst.Module, new: cst.Module) -> cst.Module:
    """Remove the top-level imports (``import os``, ``import torch.multiprocessing as mp``, ``from
    torch.distributed import init_process_group``) whose names the original used and the fixed module no
    longer does: the fix removed their last use.

    Two name scans, much cheaper than libcst's ``RemoveImportsVisitor`` and enough for the imports a
    legacy fix can leave behind.
    """
    before, visitor = _UsedNames(), _UsedNames()
    tree.visit(original, before)
    tree.visit(new, visitor)
    gone = before.used - visitor.used
    body = []
    pending: list[cst.EmptyLine] = []  # the blank lines and comments above removed imports
    for stmt in new.body:
        if isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 and isinstance(stmt.body[0], (cst.Import, cst.ImportFrom)):
            small = stmt.body[0]
            kept = [alias for alias in small.names if not _unused_alias(small, alias, gone)] if not isinstance(small.names, cst.ImportStar) else None
            if kept is not None and len(kept) != len(small.names):  # type: ignore[arg-type]
                if not kept:
                    if stmt is new.body[0]:
                        body.append(None)  # its leading lines go to the next statement
                    elif not pending:
                        pending = list(stmt.leading_lines)
                    continue
                kept[-1] = kept[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
                stmt = stmt.with_changes(body=[small.with_changes(names=kept)])
        if pending and not stmt.leading_lines:
            stmt = stmt.with_changes(leading_lines=pending)
        pending = []
        body.append(stmt)
    if len(body) != len(new.body) or any(b is not s for b, s in zip(body, new.body)):
        first_removed = body and body[0] is None
        body = [b for b in body if b is not None]
        if first_removed and body and not new.body[0].leading_lines:
            lines = list(body[0].leading_lines)
            while lines and lines[0].comment is None:
                lines.pop(0)
            body[0] = body[0].with_changes(leading_lines=lines)
        new = new.with_changes(body=body)
    return new


def _unused_alias(small: cst.Import | cst.ImportFrom, alias: cst.ImportAlias, gone: set[str]) -> bool:
    name = dotted_name(alias.name) or ""
    if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
        return alias.asname.name.value in gone
    # ``import torch.distributed`` binds ``torch``: leave such imports alone.
    return (isinstance(small, cst.ImportFrom) or "." not in name) and name in gone


def call_with(function: cst.BaseExpression, first: cst.BaseExpression, rest: Iterable[cst.Arg]) -> cst.Call:
    """``function(first, *rest)`` with plain ``, `` separators."""
    args = [cst.Arg(first), *(a.with_changes(comma=cst.MaybeSentinel.DEFAULT) for a in rest)]
    # A comma of its own for each argument: one node at two places of a tree makes the engine clone the module.
    args = [a.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))) for a in args[:-1]] + args[-1:]
    return cst.Call(func=function, args=args)


def accepting_both_key_formats(state: cst.BaseExpression) -> cst.BaseExpression:
    """``{k.removeprefix("module."): v for k, v in <state>.items()}``: a state dict with or without the ``module.``
    prefix of a wrapper's keys, loaded into the model itself (see :func:`accepts_both_key_formats`)."""
    return expression(f'{{k.removeprefix("module."): v for k, v in {code_of(state).strip()}.items()}}')


def accepts_both_key_formats(state: cst.BaseExpression) -> bool:
    """Whether a state dict already is :func:`accepting_both_key_formats`'s (a fix that ran before)."""
    return isinstance(state, cst.DictComp) and "removeprefix" in code_of(state)


def state_dict_argument(call: cst.Call) -> cst.Arg | None:
    """The state dict a ``load_state_dict(...)`` call is given: its ``state_dict=`` keyword, else its first
    positional argument (``None`` for ``*args`` or no argument)."""
    given = next((a for a in call.args if a.keyword is not None and a.keyword.value == "state_dict"), None)
    if given is None and call.args and call.args[0].keyword is None and not call.args[0].star:
        given = call.args[0]
    return given
