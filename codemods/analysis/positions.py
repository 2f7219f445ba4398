"""Where the nodes of a module start and end, as libcst's ``PositionProvider`` gives them.

Two ways to the same spans:

* :func:`generate` runs libcst's code generation once over the whole module, recording the span of every
  node on the way (and the module's code). A rewritten module has no other source of positions.
* :class:`StatementSpans` serves a module parsed from a source text that is still at hand (a lint): it
  generates only the statement around the node asked about (the innermost one that sits directly in the
  module or in an indented block). The line that statement starts on comes from Python's own ``ast`` of
  the same source (one C parse, ten times cheaper than generating the whole module's code); the generated
  statement must then be found, character for character, at the start of that line. Where it is not
  (libcst prints a few layouts differently from the source: a leading form feed, blank lines at the end),
  the caller falls back to :func:`generate`, so the spans are always those of the whole generation.
"""

from __future__ import annotations

import ast
import inspect
from typing import Iterator, Mapping, Sequence

import libcst as cst
from libcst._nodes.internal import CodegenState

from .lines import LINE_BREAK, line_starts
from .project import nested_statements
from .tree import NODE_TYPES

#: Where a node starts and ends: ``(start line, start column, end line, end column)``, lines 1-based and
#: columns 0-based, as libcst's ``PositionProvider`` gives them (a tuple: cheaper to make than its ranges).
Span = tuple[int, int, int, int]

#: libcst's statement classes (small and compound), for a ``type() in`` test (see :data:`tree.NODE_TYPES`).
_STATEMENT_TYPES = frozenset(t for t in NODE_TYPES if issubclass(t, (cst.BaseSmallStatement, cst.BaseCompoundStatement)))


class _SyntacticRecord:
    """What ``record_syntactic_position`` returns: libcst's generator-based context manager, as a plain one
    (the generator machinery cost more than the recording itself)."""

    __slots__ = ("state", "node", "start_node", "end_node", "line", "column")

    def __init__(self, state: _PositionState, node: cst.CSTNode, start_node: cst.CSTNode | None, end_node: cst.CSTNode | None) -> None:
        self.state, self.node, self.start_node, self.end_node = state, node, start_node, end_node
        self.line, self.column = state.line, state.column

    def __enter__(self) -> None:
        return None

    def __exit__(self, *_: object) -> None:
        state = self.state
        computed = state.computed
        start = computed[self.start_node][:2] if self.start_node is not None else (self.line, self.column)
        end = computed[self.end_node][2:] if self.end_node is not None else (state.line, state.column)
        computed[self.node] = (*start, *end)  # type: ignore[assignment]


class _PositionState(CodegenState):
    """libcst's code generation recording the positions its ``PositionProvider`` gives (the syntactic span
    of a node, else the span of all it generates), as :data:`Span` tuples: one pass gives the code and the
    positions of every node, at about a third of the cost of libcst's position provider.

    ``line``: the line the generated code starts on (a statement generated alone, :class:`StatementSpans`)."""

    def __init__(self, module: cst.Module, line: int = 1) -> None:
        super().__init__(default_indent=module.default_indent, default_newline=module.default_newline)
        self.line = line
        self.column = 0
        self._starts: list[tuple[int, int]] = []
        self.computed: dict[cst.CSTNode, Span] = {}
        #: In :func:`generate`: the statements generated before (``reuse``) and those of this generation
        #: (``made``), for the statements of indented blocks as for those of the module's body.
        self.reuse: dict[cst.BaseStatement, _Statement] = {}
        self.made: dict[cst.BaseStatement, _Statement] | None = None
        #: The statements replayed in the statement (or module) being generated, each with how many lines
        #: it moved: the spans of the nodes inside them are moved when asked for (:class:`Spans`).
        self.moved: dict[cst.CSTNode, tuple[_Statement, int]] = {}
        #: The statement last replayed, and the number of tokens once its code (one token) was added: while
        #: that number holds, its code is the last token (:meth:`ends_with_replay`).
        self.replayed: tuple[_Statement, int] | None = None

    def statement(self, stmt: cst.BaseStatement) -> None:
        """Generate a statement of a body (the module's, or an indented block's), or replay it when an
        earlier generation made the same statement object at the same indentation."""
        indent = tuple(self.indent_tokens)
        done = self.reuse.get(stmt)
        if done is not None and done.indent == indent and self.column == 0:
            _replay(self, stmt, done)
        else:
            done = _generate_statement(self, stmt, indent)
        if done is not None and self.made is not None:
            self.made[stmt] = done

    def ends_with_replay(self) -> _Statement | None:
        """The statement replayed last when its code is the last token so far, else ``None``."""
        replayed = self.replayed
        return replayed[0] if replayed is not None and replayed[1] == len(self.tokens) else None

    def _advance(self, value: str) -> None:
        if "\n" not in value and "\r" not in value:
            self.column += len(value)
            return
        segments = LINE_BREAK.split(value)
        self.line += len(segments) - 1
        self.column = len(segments[-1])

    def add_indent_tokens(self) -> None:
        self.tokens.extend(self.indent_tokens)
        for token in self.indent_tokens:
            self._advance(token)

    def add_token(self, value: str) -> None:
        self.tokens.append(value)
        self._advance(value)

    def before_codegen(self, node: cst.CSTNode) -> None:
        self._starts.append((self.line, self.column))

    def after_codegen(self, node: cst.CSTNode) -> None:
        line, column = self._starts.pop()
        if node not in self.computed:  # a syntactic position recorded inside wins
            self.computed[node] = (line, column, self.line, self.column)

    def record_syntactic_position(  # type: ignore[override]
        self, node: cst.CSTNode, *, start_node: cst.CSTNode | None = None, end_node: cst.CSTNode | None = None
    ) -> _SyntacticRecord:
        return _SyntacticRecord(self, node, start_node, end_node)


class _Statement:
    """What generating one statement of a body gave: its code, the spans of the nodes it generated, the
    statements it replayed inside it (each with the lines it moved them by), the line it started on, how
    many lines it spans and the column it ends at."""

    __slots__ = ("code", "last", "spans", "moved", "line", "lines", "column", "indent")

    def __init__(
        self,
        tokens: list[str],
        spans: dict[cst.CSTNode, Span],
        moved: dict[cst.CSTNode, tuple[_Statement, int]],
        line: int,
        lines: int,
        column: int,
        indent: tuple[str, ...],
    ) -> None:
        #: Its tokens joined, and the last token it generated (a module without a trailing newline drops that
        #: one), a statement's it replayed at its end included.
        self.code, self.last = "".join(tokens), tokens[-1] if tokens else ""
        self.spans, self.moved, self.line, self.lines, self.column = spans, moved, line, lines, column
        #: The indentation it was generated under (its code starts with it): replayed only under the same.
        self.indent = indent


class Generated:
    """The statements of a module's body as one generation gave them, for the generation of a module that
    keeps some of them: a fix rebuilds only the nodes it edits, so a statement it did not touch is the same
    object in the rewritten module, and its code and spans (shifted by the lines above it) are reused."""

    def __init__(self, module: cst.Module) -> None:
        self.indent = module.default_indent
        self.newline = module.default_newline
        self.statements: dict[cst.BaseStatement, _Statement] = {}

    def fits(self, module: cst.Module) -> bool:
        """Whether statements generated for this module would print the same in ``module`` (the same
        default indent and newline: a statement of the module's body starts with no indent)."""
        return self.indent == module.default_indent and self.newline == module.default_newline


def _generate_statement(state: _PositionState, stmt: cst.BaseStatement, indent: tuple[str, ...]) -> _Statement | None:
    """Generate a statement of a body; what to reuse (``None``: it did not start a line)."""
    line, column, first = state.line, state.column, len(state.tokens)
    outer, outer_moved = state.computed, state.moved
    state.computed, state.moved = {}, {}
    stmt._codegen(state)
    spans, moved = state.computed, state.moved
    state.computed, state.moved = outer, outer_moved
    outer.update(spans)
    outer_moved.update(moved)
    if column != 0:
        return None
    made = _Statement(state.tokens[first:], spans, moved, line, state.line - line, state.column, indent)
    replayed = state.ends_with_replay()
    if replayed is not None:
        made.last = replayed.last  # (it ends with a statement it replayed: that one's own last token)
    return made


def _replay(state: _PositionState, stmt: cst.BaseStatement, done: _Statement) -> None:
    """Add a statement generated before at the line it now starts on: its own span is moved now, those of
    the nodes inside it when asked for (:class:`Spans`)."""
    shift = state.line - done.line
    state.tokens.append(done.code)
    state.replayed = (done, len(state.tokens))
    a, b, c, d = done.spans[stmt]
    state.computed[stmt] = (a + shift, b, c + shift, d)
    state.moved[stmt] = (done, shift)
    state.line += done.lines
    state.column = done.column


class Spans(Mapping[cst.CSTNode, Span]):
    """The span of every node of a generated module. The nodes of a statement replayed from an earlier
    generation keep their spans there, moved by as many lines as the statement moved when one is asked
    for: the statement is found among the node's ancestors (``parents``, the module's index), and within it
    the statements it replayed in turn. A node the index does not hold (layout, which one object may stand
    for at several places) is answered from a generation of the whole module afresh, as are iteration and
    length: the spans are always those of that generation."""

    __slots__ = ("_module", "_own", "_moved", "_parents", "_whole")

    def __init__(
        self,
        module: cst.Module,
        own: dict[cst.CSTNode, Span],
        moved: dict[cst.CSTNode, tuple[_Statement, int]],
        parents: Mapping[cst.CSTNode, cst.CSTNode] | None,
    ) -> None:
        self._module, self._own, self._moved = module, own, moved
        self._parents: Mapping[cst.CSTNode, cst.CSTNode] = parents if parents is not None else {}
        self._whole: dict[cst.CSTNode, Span] | None = None if moved else own

    def __getitem__(self, node: cst.CSTNode) -> Span:
        if node not in self._parents and node is not self._module:
            return self._whole_generation()[node]
        found = self._own.get(node)  # (an indexed node has one place: in the code generated now, or replayed)
        if found is not None:
            return found
        chain = [node]  # the node and its ancestors, up to the nearest statement replayed here
        current = node
        moved = self._moved
        while current not in moved:
            current = self._parents.get(current)  # type: ignore[assignment]
            if current is None:
                return self._whole_generation()[node]
            chain.append(current)
        done, shift = moved[current]
        found = done.spans.get(node)
        for inner in reversed(chain[:-1]):  # down through the statements it replayed in turn
            if found is not None:
                break
            nested = done.moved.get(inner)
            if nested is not None:
                done, by = nested
                shift += by
                found = done.spans.get(node)
        if found is None:
            return self._whole_generation()[node]
        a, b, c, d = found
        return (a + shift, b, c + shift, d)

    def _whole_generation(self) -> dict[cst.CSTNode, Span]:
        if self._whole is None:
            self._whole = generate(self._module)[1]._own
        return self._whole

    def __iter__(self) -> Iterator[cst.CSTNode]:
        return iter(self._whole_generation())

    def __len__(self) -> int:
        return len(self._whole_generation())


def generate(
    module: cst.Module, earlier: Generated | None = None, parents: Mapping[cst.CSTNode, cst.CSTNode] | None = None
) -> tuple[str, Spans, Generated]:
    """The module's code and the span of every node in it, from one code generation pass; and what the
    next generation may reuse. ``earlier``: what the generation of a module this one was rewritten from
    gave (its statements still in this module's body are not generated again). ``parents``: the module's
    index, where the statement a replayed node sits in is found (:class:`Spans`; without it, every look-up
    is answered from a generation of the whole module afresh).

    The pass is libcst's ``Module._codegen`` with the body's statements taken one by one, and so are the
    statements of every indented block (:func:`_indented_block_codegen`)."""
    state = _PositionState(module)
    made = Generated(module)
    state.reuse = earlier.statements if earlier is not None and earlier.fits(module) else {}
    state.made = made.statements
    state.before_codegen(module)
    for header in module.header:
        header._codegen(state)
    for stmt in module.body:
        state.statement(stmt)
    for footer in module.footer:
        footer._codegen(state)
    if module.has_trailing_newline:
        if not state.tokens:
            state.add_token(state.default_newline)
    elif (done := state.ends_with_replay()) is not None:  # its code is the last token: its own last token goes
        state.tokens[-1] = done.code[: len(done.code) - len(done.last)]
    else:
        state.pop_trailing_newline()
    state.after_codegen(module)
    return "".join(state.tokens), Spans(module, state.computed, state.moved, parents), made


_LIBCST_INDENTED_BLOCK_CODEGEN = cst.IndentedBlock._codegen_impl
#: libcst's ``IndentedBlock._codegen_impl``, token for token (comments and layout aside), as
#: :func:`_indented_block_codegen` repeats it; another libcst's is left alone (statements of blocks are then
#: generated afresh every time, as libcst does).
_EXPECTED_INDENTED_BLOCK_CODEGEN = (
    "def _codegen_impl(self, state: CodegenState) -> None:",
    "self.header._codegen(state)",
    "indent = self.indent",
    "state.increase_indent(state.default_indent if indent is None else indent)",
    "if self.body:",
    "with state.record_syntactic_position(",
    "self, start_node=self.body[0], end_node=self.body[-1]",
    "):",
    "for stmt in self.body:",
    "stmt._codegen(state)",
    "else:",
    "state.add_indent_tokens()",
    "with state.record_syntactic_position(self):",
    'state.add_token("pass")',
    "state.add_token(state.default_newline)",
    "for f in self.footer:",
    "f._codegen(state)",
    "state.decrease_indent()",
)


def _indented_block_codegen(self: cst.IndentedBlock, state: CodegenState) -> None:
    """libcst's ``IndentedBlock._codegen_impl``, with each statement of the block through
    :meth:`_PositionState.statement` in a generation that may reuse statements (else libcst's own)."""
    if type(state) is not _PositionState or state.made is None:
        _LIBCST_INDENTED_BLOCK_CODEGEN(self, state)
        return
    self.header._codegen(state)
    indent = self.indent
    state.increase_indent(state.default_indent if indent is None else indent)
    if self.body:
        with state.record_syntactic_position(self, start_node=self.body[0], end_node=self.body[-1]):
            for stmt in self.body:
                state.statement(stmt)
    else:
        state.add_indent_tokens()
        with state.record_syntactic_position(self):
            state.add_token("pass")
        state.add_token(state.default_newline)
    for f in self.footer:
        f._codegen(state)
    state.decrease_indent()


def _libcst_block_codegen_is_the_expected() -> bool:
    """Whether this libcst's ``IndentedBlock._codegen_impl`` reads as :func:`_indented_block_codegen` repeats."""
    try:
        source = inspect.getsource(_LIBCST_INDENTED_BLOCK_CODEGEN)
    except (OSError, TypeError):
        return False
    lines = [line.split("#", 1)[0].strip() for line in source.splitlines()]
    return tuple(line for line in lines if line) == _EXPECTED_INDENTED_BLOCK_CODEGEN


if _libcst_block_codegen_is_the_expected():
    cst.IndentedBlock._codegen_impl = _indented_block_codegen  # type: ignore[method-assign]


class _Lines:
    """Where each statement of a module starts, from ``ast``: libcst's statements in source order (one per
    small statement of a line, one per compound statement) are ``ast``'s statements in source order."""

    def __init__(self, module: cst.Module, source: str, preorder: Sequence[cst.CSTNode]) -> None:
        ours = [node for node in preorder if type(node) in _STATEMENT_TYPES]
        try:
            # sorted: a try's handlers come before its else, which nested_statements yields first
            theirs = sorted(nested_statements(ast.parse(source).body), key=lambda s: (s.lineno, s.col_offset))
        except (SyntaxError, ValueError):
            theirs = []
        self.by_statement: dict[cst.CSTNode, ast.stmt] = dict(zip(ours, theirs)) if len(ours) == len(theirs) else {}
        self.starts = line_starts(source)

    def first_line(self, stmt: cst.BaseStatement) -> int | None:
        """The line a statement's code starts on, its leading blank and comment lines included (``None``:
        not known)."""
        first = self.by_statement.get(stmt.body[0] if isinstance(stmt, cst.SimpleStatementLine) else stmt)
        if first is None:
            return None
        decorators = getattr(stmt, "decorators", ())
        if decorators and getattr(first, "decorator_list", None):
            line = first.decorator_list[0].lineno - len(decorators[0].leading_lines)
        else:
            line = first.lineno
        return line - len(stmt.leading_lines)


class StatementSpans:
    """The spans of a module parsed from ``source``, generated on demand one statement at a time: the
    innermost statement around the node that sits directly in a block (the module's body or an indented
    block). :meth:`span` answers ``None`` where it cannot vouch for the answer (then the caller generates
    the whole module, :func:`generate`). ``parents`` and ``preorder``: the module's index."""

    def __init__(
        self, module: cst.Module, source: str, parents: Mapping[cst.CSTNode, cst.CSTNode], preorder: Sequence[cst.CSTNode]
    ) -> None:
        self.module = module
        self.source = source
        self.parents = parents
        self.preorder = preorder
        self.computed: dict[cst.CSTNode, Span] = {}
        self._generated: set[cst.CSTNode] = set()
        self._lines: _Lines | None = None
        self.failed = False

    def _block_statement(self, node: cst.CSTNode) -> tuple[cst.BaseStatement, list[str]] | None:
        """The innermost statement around the node that sits directly in a block, and the indent tokens its
        code generation starts from."""
        current = node
        while (parent := self.parents.get(current)) is not None and not isinstance(parent, (cst.Module, cst.IndentedBlock)):
            current = parent
        if parent is None or not isinstance(current, cst.BaseStatement):
            return None
        indents: list[str] = []
        while parent is not None:
            if isinstance(parent, cst.IndentedBlock):
                indents.append(self.module.default_indent if parent.indent is None else parent.indent)
            parent = self.parents.get(parent)
        return current, indents[::-1]

    def _generate(self, stmt: cst.BaseStatement, indents: list[str]) -> bool:
        if self._lines is None:
            self._lines = _Lines(self.module, self.source, self.preorder)
        line = self._lines.first_line(stmt)
        if line is None or not 1 <= line <= len(self._lines.starts):
            return False
        state = _PositionState(self.module, line)
        state.indent_tokens = indents
        stmt._codegen(state)
        if not self.source.startswith("".join(state.tokens), self._lines.starts[line - 1]):
            return False
        self.computed.update(state.computed)
        return True

    def span(self, node: cst.CSTNode) -> Span | None:
        """The node's span, or ``None``: it lies outside the module's statements, or the statement around
        it does not print back as the source has it (from then on every answer is ``None``)."""
        found = self.computed.get(node)
        if found is not None or self.failed:
            return found
        block = self._block_statement(node)
        if block is None or block[0] in self._generated:
            return None
        self._generated.add(block[0])
        if not self._generate(*block):
            self.failed = True
            return None
        return self.computed.get(node)
