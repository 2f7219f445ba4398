"""Spans generated one top-level statement at a time (a lint's reports) are those of the whole module's
code generation, for every node, in the layouts where libcst's printout and the source part ways too."""

from __future__ import annotations

import libcst as cst
import pytest

from ddp_migrate.codemods.analysis import positions
from ddp_migrate.codemods.analysis.script import ModuleIndex

SOURCES = {
    "plain": "import os\n\nx = 1\n\n\ndef f(a, b=2):\n    return a + b\n",
    "comments and blank lines": "# header\n\n# about x\nx = 1  # trailing\n\n\n# about f\n\ndef f():\n    pass\n    # end of body\n\n# footer\n",
    "decorators": (
        "import functools\n\n\n# before the decorator\n@functools.lru_cache(maxsize=None)\n# between decorators\n\n"
        "@staticmethod\ndef f():\n    return 1\n\n\n@dataclass\n\nclass C:\n    @property\n    def p(self):\n        return 2\n"
    ),
    "async and compound": (
        "async def main():\n    async with a as b:\n        await b\n\n"
        "for i in range(3):\n    if i:\n        continue\nelse:\n    pass\n"
        "try:\n    x = 1\nexcept (ValueError, TypeError) as error:\n    raise\nfinally:\n    y = 2\n"
        "while False:\n    break\nwith open('f') as fh, open('g') as gh:\n    pass\n"
        "match x:\n    case [1, *rest]:\n        pass\n    case _:\n        pass\n"
    ),
    "several statements on a line": "a = 1; b = 2; c = (a +\n    b)\nif a: b = 3; c = 4\n",
    "continuations and strings": 'x = """one\ntwo\n"""\ny = [\n    1,\n    2,\n]\nz = 1 + \\\n    2\nw = f"{x!r:>{y}}"\n',
    "carriage returns": "x = 1\r\ny = 2\r\ndef f():\r\n    return x\r\n",
    "old mac line ends": "x = 1\ry = 2\rif x:\r    y = 3\r",
    "no trailing newline": "x = 1\ny = 2",
    "trailing blank lines": "import os\n\n\n  \n",
    "leading form feed": "\x0cimport os\nx = 1\n",
    "form feed between statements": "x = 1\n\x0c\ny = 2\n\x0c\ndef f():\n    pass\n",
    "unicode": "café = 'naïve'\n# ñ\ndef π():\n    return café\n",
    "only comments": "# nothing here\n",
    "tabs": "if x:\n\ty = 1\n\tif y:\n\t\tz = 2\n",
    "mixed indentation": "class C:\n  def f(self):\n        if self:\n         return 1\n        # c\n        return 2\n  x = 3\n",
    "nested clauses": (
        "def f(x):\n    if x:\n        a = 1\n    elif x > 1:  # two\n        a = 2\n\n    else:\n        try:\n"
        "            a = 3\n        except* ValueError:\n            pass\n    while x:\n        x -= 1\n    else:\n"
        "        for i in x: pass\n    match x:\n        case {'k': v} if v:\n            return v\n"
        "    class D:\n        @property\n        def g(self): return 1\n    return a\n"
    ),
}


@pytest.mark.parametrize("name", sorted(SOURCES))
def test_statement_spans_equal_the_whole_generation(name: str) -> None:
    source = SOURCES[name]
    module = cst.parse_module(source)
    _, expected, _ = positions.generate(module)
    index = ModuleIndex(module, source)
    nodes = [node for node in index.preorder if node is not module]
    assert nodes or name == "only comments"
    for node in nodes:
        assert index.span(node) == expected[node], (name, type(node).__name__)


def test_statements_are_generated_only_around_what_is_asked() -> None:
    source = SOURCES["plain"]
    module = cst.parse_module(source)
    index = ModuleIndex(module, source)
    assert index.span(module.body[1]) == (3, 0, 3, 5)
    assert "positions" not in index.__dict__  # the whole module was never generated
    computed = index._statement_spans.computed
    assert module.body[1] in computed and module.body[0] not in computed and module.body[2] not in computed


def test_a_node_in_a_function_generates_only_its_own_statement() -> None:
    source = "def f(x):\n    y = x + 1\n    return y\n\n\nz = 2\n"
    module = cst.parse_module(source)
    index = ModuleIndex(module, source)
    function = module.body[0]
    returned = function.body.body[1]
    assert index.span(returned.body[0].value) == (3, 11, 3, 12)
    computed = index._statement_spans.computed
    assert function not in computed and function.body.body[0] not in computed and module.body[1] not in computed


def test_a_statement_that_does_not_print_back_falls_back_to_the_whole_generation() -> None:
    source = SOURCES["leading form feed"]  # libcst's printout drops the form feed
    module = cst.parse_module(source)
    assert module.code != source
    index = ModuleIndex(module, source)
    _, expected, _ = positions.generate(module)
    assert index.span(module.body[0]) == expected[module.body[0]]
    assert index._statement_spans.failed and "positions" in index.__dict__


def test_a_rewritten_module_has_no_statement_spans() -> None:
    module = cst.parse_module("x = 1\n")
    rewritten = module.with_changes(body=[*module.body, cst.parse_statement("y = 2\n")])
    index = ModuleIndex(rewritten)
    assert index._statement_spans is None
    assert index.span(rewritten.body[1]) == (2, 0, 2, 5)


def test_a_rewritten_module_reuses_what_the_fix_kept_and_gets_the_same_code_and_spans(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every module a migration of the fixtures rewrites: the code and the span of every node are the same
    as from a generation of the whole module, while the statements a fix left alone were not generated
    again (in the odd layouts too: CRLF, a form feed, no final newline, a body indented with tabs)."""
    from pathlib import Path

    from ddp_migrate.codemods import ALL_RULES
    from ddp_migrate.codemods.base import Options
    from ddp_migrate.engine import process

    real = positions.generate
    reused: list[int] = []

    def checked(
        module: cst.Module, earlier: positions.Generated | None = None, parents: dict | None = None
    ) -> tuple[str, positions.Spans, positions.Generated]:
        code, spans, made = real(module, earlier, parents)
        whole_code, whole_spans, _ = real(module)
        assert code == whole_code
        if parents is not None:  # every node of the index, answered through its statement (nothing moved at once)
            assert all(spans[node] == whole_spans[node] for node in [*parents, module])
            assert spans._whole is None or not spans._moved
        assert spans == whole_spans
        code, spans, made = real(module, earlier, parents)  # (a fresh one for the caller)
        if earlier is not None:
            reused.append(sum(1 for stmt, done in made.statements.items() if earlier.statements.get(stmt) is done))
        return code, spans, made

    monkeypatch.setattr(positions, "generate", checked)
    fixtures = Path(__file__).resolve().parents[1] / "fixtures"
    sources = sorted([*fixtures.glob("scripts/*.py"), *fixtures.glob("legacy/*.py")])
    rules = [r for r in ALL_RULES if r.enabled_by_default]
    for path in sources:
        text = path.read_text()
        for variant in (text, text.replace("\n", "\r\n"), text.replace("\n\n", "\n\x0c\n"), text.rstrip("\n"), text.replace("    ", "\t")):
            process(path.name, variant.encode(), rules, Options(), fix=True)
    assert len(reused) > 100 and sum(reused) > 3 * len(reused)  # most rewrites kept most statements


def test_statements_of_an_edited_function_are_replayed_only_at_the_indentation_they_were_made_at() -> None:
    """A fix inside a function rebuilds the function: the statements of its body that it kept are replayed
    (code and spans as a whole generation gives them), and a kept statement the fix moved into a new block
    (one level deeper, the same object) is generated again at its new indentation."""
    module = cst.parse_module("def main():\n    a = 1\n    for i in range(3):\n        b = i\n    c = 2\n")
    _, _, first = positions.generate(module)
    function = module.body[0]
    assert isinstance(function, cst.FunctionDef) and isinstance(function.body, cst.IndentedBlock)
    kept_a, loop, kept_c = function.body.body
    moved = cst.If(test=cst.Name("ready"), body=cst.IndentedBlock(body=[kept_c]))
    edited = module.with_changes(body=[function.with_changes(body=function.body.with_changes(body=[kept_a, loop, moved]))])
    code, spans, made = positions.generate(edited, first)
    whole_code, whole_spans, _ = positions.generate(edited)
    assert code == whole_code == edited.code == "def main():\n    a = 1\n    for i in range(3):\n        b = i\n    if ready:\n        c = 2\n"
    assert spans == whole_spans
    assert made.statements[kept_a] is first.statements[kept_a] and made.statements[loop] is first.statements[loop]
    assert made.statements[kept_c] is not first.statements[kept_c]
    assert made.statements[kept_c].indent == ("    ", "    ")


@pytest.mark.parametrize("newline", ["\n", "\r\n", "\r"])
def test_a_module_without_a_final_newline_keeps_the_last_statement_of_a_replayed_block(newline: str) -> None:
    """The last statement of a module without a trailing newline ends in a block whose last statement an
    earlier generation replayed: when the whole compound statement is replayed in turn, only the final line
    break goes, not that inner statement (found by a review: ``y = 2`` was lost)."""
    first = cst.parse_module(newline.join(["if a:", "    x = 1", "    y = 2"]))
    _, _, made = positions.generate(first)
    branch = first.body[0]
    assert isinstance(branch, cst.If) and isinstance(branch.body, cst.IndentedBlock)
    edited = first.with_changes(
        body=[branch.with_changes(body=branch.body.with_changes(body=[cst.parse_statement("x = 3" + newline), branch.body.body[1]]))]
    )
    code, _, made = positions.generate(edited, made, ModuleIndex(edited).parents)
    assert code == edited.code
    moved = edited.with_changes(body=[cst.parse_statement("z = 0" + newline), *edited.body])
    code, spans, _ = positions.generate(moved, made, ModuleIndex(moved).parents)
    assert code == moved.code and code.endswith("y = 2")
    _, whole, _ = positions.generate(moved)
    assert all(spans[node] == whole[node] for node in ModuleIndex(moved).preorder)
