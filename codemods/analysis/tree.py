"""Fast walks over libcst trees: a node's children in source order without libcst's visitor machinery.

libcst finds a node's children (``node.children``) and visits a tree (``module.visit(visitor)``) through
``_visit_and_replace_children``, which builds a new node for every node visited and calls several hooks per
attribute: a read-only walk costs more than the parse. The analysis only reads trees, so it walks them here:
each node class's child fields are read once from libcst's own ``_visit_and_replace_children`` (the order
libcst visits them in, which is the order of the source), and a walk is a loop over those attributes.
"""

from __future__ import annotations

import inspect
import re
from operator import attrgetter
from typing import Callable, Iterable, Iterator

import libcst as cst

from . import libcst_mends  # noqa: F401  (libcst's own bugs, mended before any parse)

#: ``visit_required(self, "func", ...)``, ``visit_sequence(self, "args", ...)``: the field names a node class
#: hands to libcst's visit helpers, in the order it visits them.
_VISITED_FIELD = re.compile(r'visit_(?:required|optional|sequence|sentinel|body_sequence|iterable)\(\s*self,\s*"(\w+)"')

#: Every concrete libcst node class (a ``type(x) in`` test: ``isinstance`` against libcst's abstract base
#: classes goes through ``abc`` and costs several times more).
NODE_TYPES = frozenset(
    value for value in vars(cst).values() if isinstance(value, type) and issubclass(value, cst.CSTNode) and not inspect.isabstract(value)
)
_SEQUENCES = (tuple, list)

#: Layout nodes: spaces, newlines, blank and comment lines. No fact of the analysis is about them, and they
#: are more than half of a module's nodes, so the index walk does not record them (nor what they hold).
LAYOUT_NODES = frozenset(
    {cst.SimpleWhitespace, cst.ParenthesizedWhitespace, cst.TrailingWhitespace, cst.Newline, cst.EmptyLine, cst.Comment}
)

#: Nodes that hold no value: layout, punctuation and operators (none of them has an expression below it).
TOKEN_NODES = LAYOUT_NODES | frozenset(
    t
    for t in NODE_TYPES
    if issubclass(t, (cst.BaseBinaryOp, cst.BaseBooleanOp, cst.BaseCompOp, cst.BaseUnaryOp, cst.BaseAugOp))
    or t.__name__
    in {
        "Comma", "Colon", "Dot", "Semicolon", "AssignEqual", "ImportStar", "Asynchronous",
        "LeftParen", "RightParen", "LeftSquareBracket", "RightSquareBracket", "LeftCurlyBrace", "RightCurlyBrace",
    }
)

#: The nodes a module's index leaves out: layout, and the dot of an attribute. libcst gives every ``Attribute``
#: built without a ``dot=`` the same ``Dot`` object (a dataclass default), so a fix that builds two attributes
#: puts one node at two places of the tree; no fact of the analysis is about a dot.
UNINDEXED_NODES = LAYOUT_NODES | {cst.Dot}

#: A node class's child fields in visiting order, as one getter of all of them (it returns a tuple) and
#: ``None`` where they could not be read (libcst's own ``children`` is used for that class).
_GETTERS: dict[type, Callable[[cst.CSTNode], tuple[object, ...]] | None] = {}


def _getter(node: cst.CSTNode) -> Callable[[cst.CSTNode], tuple[object, ...]] | None:
    """The getter of the node's class, checked on this first node of the class against libcst's own
    ``children``: a libcst whose visiting code reads differently falls back to ``children``, never to a
    wrong walk."""
    cls = type(node)
    try:
        source = inspect.getsource(cls._visit_and_replace_children)  # type: ignore[attr-defined]
    except (OSError, TypeError):  # no source (a frozen install): libcst's own walk for this class
        found = None
    else:
        fields = tuple(dict.fromkeys(_VISITED_FIELD.findall(source)))
        found = None if not fields or cls not in NODE_TYPES else attrgetter(*fields, "__class__") if len(fields) == 1 else attrgetter(*fields)
    if found is not None:
        try:
            agrees = [id(c) for c in _read(found, node)] == [id(c) for c in node.children]
        except AttributeError:  # a field the class does not have
            agrees = False
        except Exception:  # noqa: BLE001  libcst could not rebuild this node: check on the next node of its class
            return found
        found = found if agrees else None
    _GETTERS[cls] = found
    return found


def _read(getter: Callable[[cst.CSTNode], tuple[object, ...]], node: cst.CSTNode) -> list[cst.CSTNode]:
    """The nodes among the field values the getter reads (a field holds a node, a sequence of them, or none)."""
    found: list[cst.CSTNode] = []
    for value in getter(node):
        kind = type(value)
        if kind in NODE_TYPES:
            found.append(value)  # type: ignore[arg-type]
        elif kind in _SEQUENCES:
            found.extend(item for item in value if type(item) in NODE_TYPES)  # type: ignore[attr-defined]
    return found


def children(node: cst.CSTNode) -> list[cst.CSTNode]:
    """The node's direct children in source order: the same nodes, in the same order, as ``node.children``."""
    cls = type(node)
    getter = _GETTERS[cls] if cls in _GETTERS else _getter(node)
    if getter is None:
        return list(node.children)
    return _read(getter, node)


def walk(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    """The node and everything below it, in pre-order (source order)."""
    stack = [node]
    pop, extend = stack.pop, stack.extend
    while stack:
        current = pop()
        yield current
        extend(reversed(children(current)))


#: libcst checks every node it builds (``CSTNode.__post_init__`` runs ``_validate``): the mistakes a hand-made
#: node may hold. The parser's own nodes are right by construction (libcst's comment on that hook says as
#: much), and the checks cost a seventh of a parse. ``None``: this libcst validates some other way.
_VALIDATE = cst.CSTNode.__dict__.get("__post_init__")


def _built_by_the_parser(self: cst.CSTNode) -> None:
    return None


def parse_module(source: str) -> cst.Module:
    """``libcst.parse_module``, without re-checking the nodes the parser builds. The check is back on as
    soon as the parse is over (a node built by a fix is checked as before), error or not."""
    if _VALIDATE is None:
        return cst.parse_module(source)
    cst.CSTNode.__post_init__ = _built_by_the_parser  # type: ignore[method-assign]
    try:
        return cst.parse_module(source)
    finally:
        cst.CSTNode.__post_init__ = _VALIDATE  # type: ignore[method-assign]


_LEAVE = object()
_Hooks = tuple[Callable[[cst.CSTNode], object] | None, Callable[[cst.CSTNode], object] | None]


def visit(
    root: cst.CSTNode,
    visitor: object,
    parents: dict[cst.CSTNode, cst.CSTNode] | None = None,
    order: list[cst.CSTNode] | None = None,
    skip: frozenset[type] = frozenset(),
) -> None:
    """Walk a tree calling the visitor's ``visit_<Node>`` before a node's children and ``leave_<Node>``
    after them, as ``root.visit(visitor)`` does for a read-only :class:`libcst.CSTVisitor` (a ``visit_``
    method returning ``False`` skips the children, not the ``leave_``). ``parents``, when given, is filled
    with every node's parent on the way, and ``order`` with the nodes visited, in order. Nodes of a class in
    ``skip`` (and everything below them) are left out of all three."""
    hooks: dict[type, _Hooks] = {}
    wanted = NODE_TYPES - skip  # the classes of the children walked into
    stack: list[object] = [root]
    pop, extend = stack.pop, stack.extend
    record = order.append if order is not None else None
    while stack:
        current = pop()
        if current is _LEAVE:
            node, leave = pop(), pop()
            leave(node)  # type: ignore[operator]
            continue
        node = current  # type: ignore[assignment]
        if record is not None:
            record(node)
        cls = type(node)
        pair = hooks.get(cls)
        if pair is None:
            pair = hooks[cls] = (
                getattr(visitor, f"visit_{cls.__name__}", None),
                getattr(visitor, f"leave_{cls.__name__}", None),
            )
        enter, leave = pair
        descend = enter is None or enter(node) is not False
        if leave is not None:
            extend((leave, node, _LEAVE))
        if not descend:
            continue
        # :func:`children`, inlined (this loop runs once per node of every parsed file)
        getter = _GETTERS[cls] if cls in _GETTERS else _getter(node)
        below: list[cst.CSTNode] = []
        if getter is None:
            below = [child for child in node.children if type(child) not in skip]
        else:
            for value in getter(node):
                kind = type(value)
                if kind in _SEQUENCES:
                    below.extend(item for item in value if type(item) in wanted)  # type: ignore[attr-defined]
                elif kind in wanted:
                    below.append(value)  # type: ignore[arg-type]
        if parents is not None:
            for child in below:
                parents[child] = node
        below.reverse()
        extend(below)


def dispatch(nodes: Iterable[cst.CSTNode], visitor: object) -> None:
    """Call the visitor's ``visit_<Node>`` for each node in turn: a walk already done (a module index's
    nodes in order, see :func:`visit`) replayed for a visitor that neither skips children nor leaves."""
    hooks: dict[type, Callable[[cst.CSTNode], object] | None] = {}
    for node in nodes:
        cls = type(node)
        if cls in hooks:
            enter = hooks[cls]
        else:
            enter = hooks[cls] = getattr(visitor, f"visit_{cls.__name__}", None)
        if enter is not None:
            enter(node)


def _identity_hash_in_c() -> None:
    """Give every libcst node class Python's own identity hash. libcst sets a ``__hash__`` of its own on each
    node class (``return id(self)``: the same identity semantics), a Python function that every dict and set
    keyed by nodes calls: ten million calls over a large package's lint. ``object.__hash__`` answers the same
    question in C; equality stays libcst's (identity)."""
    libcst_hash = cst.CSTNode.__dict__.get("__hash__")
    stack: list[type] = [cst.CSTNode]
    while stack:
        cls = stack.pop()
        if libcst_hash is not None and cls.__dict__.get("__hash__") is libcst_hash:
            cls.__hash__ = object.__hash__  # type: ignore[method-assign,assignment]
        stack.extend(cls.__subclasses__())


_identity_hash_in_c()
