"""The analysis's fast tree walks (codemods/analysis/tree.py) see exactly what libcst's own walks see.

They replace ``node.children`` and ``module.visit(visitor)`` for read-only walks, so every node, in the same
order, is what the whole analysis rests on: checked here over every node of the repository's fixtures, of
this project's own sources and of a few large modules of the installed torch.
"""

from __future__ import annotations

from pathlib import Path

import libcst as cst
import pytest

from ddp_migrate.codemods.analysis import tree
from ddp_migrate.codemods.analysis.script import ScriptAnalysis
from ddp_migrate.codemods.edits import Edits, expression

REPO = Path(__file__).resolve().parents[1]


def _sources() -> list[Path]:
    found = sorted((REPO / "fixtures").rglob("*.py")) + sorted((REPO / "codemods").rglob("*.py"))
    torch = pytest.importorskip("torch")
    root = Path(torch.__file__).parent
    found += [root / "nn" / "modules" / "module.py", root / "utils" / "data" / "dataloader.py", root / "_tensor.py"]
    return [path for path in found if path.is_file()]


SOURCES = _sources()


def _libcst_walk(node: cst.CSTNode) -> list[cst.CSTNode]:
    found = [node]
    for child in node.children:
        found.extend(_libcst_walk(child))
    return found


@pytest.mark.parametrize("path", SOURCES[::7] + SOURCES[-3:], ids=lambda p: p.name)
def test_children_and_walk_match_libcst(path: Path) -> None:
    module = cst.parse_module(path.read_text(encoding="utf-8"))
    expected = _libcst_walk(module)
    for node in expected:
        assert [id(c) for c in tree.children(node)] == [id(c) for c in node.children], type(node).__name__
    assert [id(n) for n in tree.walk(module)] == [id(n) for n in expected]


@pytest.mark.parametrize("path", SOURCES[::11] + SOURCES[-2:], ids=lambda p: p.name)
def test_the_nodes_below_a_node_are_its_walk_without_layout(path: Path) -> None:
    """``ModuleIndex.below``: a slice of the index's pre-order walk for every node of the module, the same
    nodes in the same order as libcst's walk of the node with layout and dots left out; ``None`` for a node
    of another tree (the analysis then walks it)."""
    module = cst.parse_module(path.read_text(encoding="utf-8"))
    analysis = ScriptAnalysis(module)
    for node in analysis.preorder:
        expected = [id(n) for n in _libcst_walk(node) if type(n) not in tree.UNINDEXED_NODES]
        assert [id(n) for n in analysis.index.below(node)] == expected, type(node).__name__
    other = cst.parse_expression("f(a, (b  .c))")
    assert analysis.index.below(other) is None
    assert analysis.nodes_below(other) == [n for n in _libcst_walk(other) if type(n) not in tree.UNINDEXED_NODES]


class _Recorder(cst.CSTVisitor):
    """Records every hook call; skips the body of functions named ``skipped``."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[str, int]] = []

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        self.calls.append(("visit_FunctionDef", id(node)))
        return node.name.value != "skipped"

    def leave_FunctionDef(self, original_node: cst.FunctionDef) -> None:
        self.calls.append(("leave_FunctionDef", id(original_node)))

    def visit_Name(self, node: cst.Name) -> None:
        self.calls.append(("visit_Name", id(node)))

    def leave_Call(self, original_node: cst.Call) -> None:
        self.calls.append(("leave_Call", id(original_node)))


def test_visit_calls_the_hooks_in_libcst_order_and_fills_parents() -> None:
    source = "def skipped(a):\n    return f(a)\n\ndef kept(b):\n    return g(h(b))\n\nx = kept(1)\n"
    module = cst.parse_module(source)
    theirs, ours = _Recorder(), _Recorder()
    module.visit(theirs)
    tree.visit(module, ours)
    assert ours.calls == theirs.calls
    assert ("visit_Name", id(module.body[0].body.body[0].body[0].value.func)) not in ours.calls  # type: ignore[attr-defined]
    parents: dict[cst.CSTNode, cst.CSTNode] = {}
    tree.visit(module, object(), parents)
    for node in _libcst_walk(module)[1:]:
        assert any(child is node for child in parents[node].children)
    assert module not in parents


def test_a_fix_rebuilds_only_the_edited_path() -> None:
    source = "import torch\n\ndef untouched():\n    return 1\n\nmodel = torch.nn.Linear(2, 2)\nmodel.cuda()\n"
    module = cst.parse_module(source)
    analysis = ScriptAnalysis(module)
    call = next(c for c in analysis.calls if cst.Module(body=[]).code_for_node(c) == "model.cuda()")
    edits = Edits(analysis)
    edits.replace(call, expression("model.to(device)"))
    new = edits.apply(module).module
    assert new.code == source.replace("model.cuda()", "model.to(device)")
    assert new.body[1] is module.body[1]  # the function no edit touches is the same object
    assert new.body[3] is not module.body[3]


@pytest.mark.parametrize("path", SOURCES[::9] + SOURCES[-2:], ids=lambda p: p.name)
def test_positions_match_libcsts_position_provider(path: Path) -> None:
    """The analysis's own position pass (one code generation that also gives the code) gives libcst's
    ``PositionProvider`` positions for every node."""
    from libcst.metadata import MetadataWrapper, PositionProvider

    from ddp_migrate.codemods.analysis.script import ModuleIndex

    text = path.read_text(encoding="utf-8")
    module = cst.parse_module(text)
    theirs = MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)
    index = ModuleIndex(module)
    assert index.code == text
    ours = index.positions
    assert set(ours) == set(theirs)
    for node, where in theirs.items():
        assert ours[node] == (where.start.line, where.start.column, where.end.line, where.end.column)


def test_a_fix_that_copies_a_subtree_and_keeps_it_gets_a_module_of_its_own_nodes() -> None:
    """A fix keeps every subtree it does not edit; one that also copies such a subtree elsewhere (DDP002
    moving ``model.to(device)`` inside the wrap) leaves a node at two places, which the index would give
    one parent. The engine analyses a clone of such a module instead: same code, every node once."""
    from ddp_migrate.codemods.analysis.script import ModuleIndex
    from ddp_migrate.engine import index_of

    module = cst.parse_module("model = Net()\nmodel = model.to(device)\n")
    shared = module.with_changes(body=[module.body[0], module.body[1], module.body[1]])
    assert ModuleIndex(shared).shares_nodes
    index = index_of(shared)
    assert not index.shares_nodes and index.code == shared.code
    assert index.module is not shared
    assert index_of(module).module is module  # the common case: no clone


def test_a_class_whose_visiting_code_reads_differently_falls_back_to_libcsts_children(monkeypatch: pytest.MonkeyPatch) -> None:
    """The child fields come from the source of libcst's ``_visit_and_replace_children``; where a libcst
    version reads otherwise (here: only the fields handed to ``visit_required``), the first node of the class is checked against
    ``node.children`` and the class falls back to it instead of walking wrongly."""
    monkeypatch.setattr(tree, "_GETTERS", {})
    monkeypatch.setattr(tree, "_VISITED_FIELD", __import__("re").compile(r'visit_required\(\s*self,\s*"(\w+)"'))
    call = cst.parse_expression("f(a, b=1)")
    assert [id(c) for c in tree.children(call)] == [id(c) for c in call.children]
    assert tree._GETTERS[cst.Call] is None


def test_a_node_libcst_cannot_rebuild_is_walked_and_the_check_waits_for_the_next_node(monkeypatch: pytest.MonkeyPatch) -> None:
    """``node.children`` rebuilds the node, and libcst may refuse a node its own parser built (a bug of its
    checks): the walk of that node reads the fields, as every later node of the class does, and the check
    of the getter against ``node.children`` is made on the next node instead, never decided by the order in
    which the files of a run were read."""
    monkeypatch.setattr(tree, "_GETTERS", {})
    first, second = cst.parse_expression("f(a, b=1)"), cst.parse_expression("g(c)")
    expected = [id(c) for c in first.children]

    def refuse(node: cst.CSTNode) -> list[cst.CSTNode]:
        raise TypeError("libcst could not check the node")

    with monkeypatch.context() as patched:
        patched.setattr(cst.Call, "children", property(refuse))
        assert [id(c) for c in tree.children(first)] == expected
        assert cst.Call not in tree._GETTERS
    assert [id(c) for c in tree.children(second)] == [id(c) for c in second.children]
    assert tree._GETTERS[cst.Call] is not None


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: p.name)
def test_a_parse_without_node_checks_builds_the_same_tree(path: Path) -> None:
    """:func:`tree.parse_module` skips libcst's checks of the nodes its parser builds: the same tree
    (``deep_equals``), the same code."""
    source = path.read_text(encoding="utf-8")
    checked = cst.parse_module(source)
    unchecked = tree.parse_module(source)
    assert unchecked.deep_equals(checked)
    assert unchecked.code == checked.code == source


def test_nodes_built_after_a_parse_are_checked_again() -> None:
    """The checks are off only while the parser builds its nodes: a node a fix builds is checked, after a
    parse that succeeded and after one that failed."""
    tree.parse_module("x = 1\n")
    with pytest.raises(cst.CSTValidationError):
        cst.Name("not a name")
    with pytest.raises(cst.ParserSyntaxError):
        tree.parse_module("def broken(:\n")
    with pytest.raises(cst.CSTValidationError):
        cst.Name("not a name")
    with pytest.raises(cst.CSTValidationError):
        cst.parse_module("x = 1\n").with_changes(body=[cst.SimpleStatementLine([cst.Expr(cst.Name("1x"))])])


#: Valid Python with a parenthesised lambda right after a keyword, which libcst 1.9 cannot check (LibCST
#: issue #1061): every node built around the lambda raised ``TypeError``.
LAMBDA_AFTER_KEYWORD = [
    "def make(m):\n    return(lambda x: m(x))\n",
    "y = a if b else(lambda: c)\n",
    "y = a or(lambda: b)\n",
    "assert(lambda: 0)\n",
    "while(lambda: 0):\n    break\n",
    "for a in(lambda: 0):\n    pass\n",
    "y = not(lambda: 0)\n",
]


@pytest.mark.parametrize("source", LAMBDA_AFTER_KEYWORD)
def test_a_parenthesised_lambda_after_a_keyword_parses_walks_and_rebuilds(source: str) -> None:
    """The mended libcst parses such code with its checks on or off, to the same tree; its own walk, a deep
    copy and a rebuilt node succeed; and a lambda that is not parenthesised is still refused next to a word."""
    checked = cst.parse_module(source)
    unchecked = tree.parse_module(source)
    assert unchecked.deep_equals(checked) and unchecked.code == source
    assert [type(n) for n in tree.walk(unchecked)] == [type(n) for n in _libcst_walk(checked)]
    assert checked.deep_clone().code == source
    bare = cst.Lambda(params=cst.Parameters(), body=cst.Integer("0"))
    with pytest.raises(cst.CSTValidationError):
        cst.Return(value=bare, whitespace_after_return=cst.SimpleWhitespace(""))


def test_the_lambda_mend_leaves_a_libcst_without_the_bug_alone() -> None:
    """The mend probes for the bug first: applied again on the mended libcst, it changes nothing."""
    from ddp_migrate.codemods.analysis import libcst_mends

    mended = cst.Lambda._safe_to_use_with_word_operator
    assert not libcst_mends._lambda_next_to_word_operator_fails()
    libcst_mends.mend_libcst()
    assert cst.Lambda._safe_to_use_with_word_operator is mended
