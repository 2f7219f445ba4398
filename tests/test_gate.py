"""The gate before the parse (issue 11): what a file's code spells decides which rules can match it.

- The names of the compiled code: a word in a docstring or a comment is no name; an alias, a dotted import
  or a postponed annotation still spells its parts.
- Sound: for every fixture and every rule example, lint and migration give the same result with the gate
  as without it (every rule run on every parsed file).
- Sharp: a library module whose collective or rank words are only in its docs is never parsed by libcst.
- The syntax check that feeds it reports what Python's parser reports, and nothing more.
"""

from __future__ import annotations

import ast
import multiprocessing
import multiprocessing.connection
from pathlib import Path

import pytest

import libcst as cst

from ddp_migrate import engine
from ddp_migrate.codemods import names
from ddp_migrate.codemods.analysis.script import ModuleIndex, dotted_name
from ddp_migrate.codemods.analysis.spelled import resolvable_names
from ddp_migrate.codemods.base import Example, Options, Valid
from ddp_migrate.engine import check_syntax, process, vocabulary_of
from ddp_migrate.registry import all_rules
from ddp_migrate.vocabulary import Vocabulary, unreachable_words

REPO = Path(__file__).resolve().parents[1]
RULES = all_rules()
RULE = {rule.code: rule for rule in RULES}


def _names(source: str) -> frozenset[str]:
    names = vocabulary_of(source, "t.py").names
    assert names is not None
    return names


def test_names_are_the_codes_not_its_docs() -> None:
    names = _names('"""Call dist.all_reduce on every rank."""\nimport functools  # all_gather\nx = functools.reduce(f, y)\n')
    assert {"functools", "reduce", "x", "f", "y"} <= names
    assert not {"dist", "all_reduce", "all_gather", "Call"} & names


@pytest.mark.parametrize(
    "source, spelled",
    [
        ("import torch.distributed as dist\ndist.all_reduce(t)\n", "torch.distributed.all_reduce"),
        ("from torch.distributed import all_reduce as ar\nar(t)\n", "torch.distributed.all_reduce"),
        ("import torch\ndef f():\n    torch.distributed.barrier()\n", "torch.distributed.barrier"),
        ("from torch import distributed\nclass A:\n    def m(self):\n        distributed.gather(t)\n", "torch.distributed.gather"),
        ("import ddp_runtime as runtime\nruntime.save(s, p)\n", "ddp_migrate.runtime.save"),
        ("from ddp_runtime import save\nsave(s, p)\n", "ddp_migrate.runtime.save"),
        ("if False:\n    import torch.distributed as dist\n    dist.broadcast(t, 0)\n", "torch.distributed.broadcast"),
        ("from __future__ import annotations\ndef f(x: dist.ProcessGroup = None) -> torch.Tensor: ...\n", "dist.ProcessGroup"),
    ],
)
def test_code_spells_the_qualified_names_the_analysis_resolves(source: str, spelled: str) -> None:
    assert Vocabulary.of(source, compile(source, "t.py", "exec")).spells(spelled)


def test_unknown_names_let_every_rule_through() -> None:
    assert Vocabulary("dist.all_reduce(t)\nx = 1 if y else z\n", None).could_match(RULE["DDP033"]) is False  # no 'distributed'
    assert Vocabulary("import torch.distributed\n", None).spells("torch.distributed.all_reduce")


# ---------------------------------------------------------------------------------- sound: same results


def _sources() -> list[tuple[str, str]]:
    """Every fixture, and every example of every rule (before and after)."""
    found = [(str(p.relative_to(REPO)), p.read_text()) for p in sorted((REPO / "fixtures").rglob("*.py"))]
    for rule in RULES:
        for index, example in enumerate(rule.examples):
            if isinstance(example, Example):
                found.append((f"{rule.code}-{index}-before", example.before))
                if example.after:
                    found.append((f"{rule.code}-{index}-after", example.after))
            elif isinstance(example, Valid):
                found.append((f"{rule.code}-{index}-valid", example.code))
    return found


SOURCES = _sources()


def _outcome(name: str, source: str, fix: bool) -> tuple:
    result = process(f"{name}.py" if not name.endswith(".py") else name, source.encode(), RULES, Options(), fix)
    return (
        [(f.code, f.line, f.column, f.message) for f in result.findings],
        [(c.code, c.line, c.message) for c in result.changes],
        result.output,
        result.error,
    )


def _outcomes() -> dict[str, tuple]:
    return {name: (_outcome(name, source, False), _outcome(name, source, True)) for name, source in SOURCES}


def _gated_in_a_child(sender: "multiprocessing.connection.Connection") -> None:
    sender.send(_outcomes())
    sender.close()


def test_the_gate_changes_no_result(monkeypatch: pytest.MonkeyPatch) -> None:
    # The gated half runs in a forked child while this process runs the ungated half: the two cores of CI
    # share the work (one core did both, about a minute).
    if "fork" not in multiprocessing.get_all_start_methods():  # (no fork on Windows: one process does both)
        gated = _outcomes()
        monkeypatch.setattr(Vocabulary, "could_match", lambda self, rule: True)
        ungated = _outcomes()
    else:
        context = multiprocessing.get_context("fork")
        receiver, sender = context.Pipe(duplex=False)
        child = context.Process(target=_gated_in_a_child, args=(sender,))
        child.start()
        sender.close()
        monkeypatch.setattr(Vocabulary, "could_match", lambda self, rule: True)
        ungated = _outcomes()
        try:
            gated = receiver.recv()
        except EOFError:
            child.join(timeout=60)
            raise AssertionError(f"the gated half died in its child process (exit code {child.exitcode}): its error is above") from None
        child.join(timeout=60)
        assert child.exitcode == 0
    for name, _ in SOURCES:
        assert gated[name] == ungated[name], name
    assert len(SOURCES) > 200


# ---------------------------------------------------------------------------------- sharp: files unparsed

LIBRARY_DOCS = '''\
"""Helpers. Under torch.distributed, call dist.all_reduce(t) and dist.barrier() on every rank;
spawn workers with mp.spawn(fn, nprocs=n)."""
import functools
import torch


def total(values, rank=0):
    # gather the values of this rank; torch.distributed is not needed here
    if values:
        return functools.reduce(lambda a, b: a + b, values).to(rank)
    return torch.zeros(())
'''


def test_a_module_whose_distributed_words_are_docs_is_not_parsed(monkeypatch: pytest.MonkeyPatch) -> None:
    text_gate = [r.code for r in RULES if any(w in LIBRARY_DOCS for w in r.triggers) and (not r.requires or any(w in LIBRARY_DOCS for w in r.requires))]
    assert {"DDP033", "DDP037"} <= set(text_gate), "the words alone would have let these rules in"

    def no_parse(text: str) -> None:
        raise AssertionError("parsed with libcst")

    monkeypatch.setattr(engine, "parse_checked", no_parse)
    result = process("helpers.py", LIBRARY_DOCS.encode(), RULES, Options(), fix=False, is_entry=False)
    assert result.skipped and not result.error and not result.findings


AUTOGRAD_LIBRARY = '''
"""Custom autograd functions: forward computes, backward returns the gradient of the input."""
import torch


class Square(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return 2 * x * grad
'''


def test_library_code_that_defines_backward_without_calling_it_is_not_parsed(monkeypatch: pytest.MonkeyPatch) -> None:
    """Autograd code says ``backward`` everywhere (a method it defines, docstrings) without a training step:
    no rule that acts on training code may let it in (its word alone let 479 of torch's 2,285 files be
    parsed, and doubled the time and the memory of a lint of the package)."""

    def no_parse(text: str) -> None:
        raise AssertionError("parsed with libcst")

    monkeypatch.setattr(engine, "parse_checked", no_parse)
    result = process("functions.py", AUTOGRAD_LIBRARY.encode(), RULES, Options(), fix=False, is_entry=True)
    assert result.skipped and not result.error and not result.findings


RANK_SLICED_SHARD = """\
import torch
import torch.distributed as dist

torch.manual_seed(0)
dist.init_process_group("gloo")
model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
rank = dist.get_rank()
data = torch.randn(1000, 4)
shard = data[rank::dist.get_world_size()]
for epoch in range(100):
    for x in shard.split(32):
        loss = model(x).pow(2).mean()
        loss.backward()
        optimizer.step()
    if loss.item() < 0.01:
        break
"""


def test_a_constant_seed_still_lets_per_rank_decisions_through_the_gate() -> None:
    """``torch.manual_seed(0)`` seeds alike, but the data may be per-rank another way (a slice by the rank):
    a gate that skipped files whose only seeds are whole numbers lost this DDP041 (a review's find)."""
    result = process("train.py", RANK_SLICED_SHARD.encode(), RULES, Options(), fix=False)
    assert "DDP041" in [f.code for f in result.findings]


def test_a_collective_spelled_through_an_alias_is_still_found() -> None:
    source = "from torch.distributed import all_reduce as ar\n\ndef step(t, ok):\n    if ok:\n        ar(t)\n"
    result = process("helpers.py", source.encode(), RULES, Options(), fix=False, is_entry=False)
    assert [f.code for f in result.findings] == ["DDP033"]


def test_rank_rules_need_a_rank_source() -> None:
    plain = "import torch\n\ndef place(model, rank):\n    return model.to(rank)\n"
    assert not vocabulary_of(plain, "t.py").could_match(RULE["DDP024"])
    sourced = "import torch\nimport torch.distributed as dist\n\ndef place(model):\n    rank = dist.get_rank()\n    return model.to(rank)\n"
    assert vocabulary_of(sourced, "t.py").could_match(RULE["DDP024"])
    assert [f.code for f in process("t.py", sourced.encode(), RULES, Options(), fix=False).findings] == ["DDP024"]


@pytest.mark.parametrize(
    ("text", "passes"),
    [
        ("if rank % 8 == 0:", True),
        ("if global_rank % 8 == 0:", True),
        ("if (rank) % 8 == 0:", True),
        ("if (rank  # the process\n        % 8) == 0:", True),
        ("if rank \\\n% 8 == 0:", True),
        ("rank%8", True),
        ("if myrank % 8 == 0:", False),
        ("if local_rank % 8 == 0:", False),
        ("if _global_rank % 8 == 0:", False),
        ("if xglobal_rank % 8 == 0:", False),
        ("if ranks % 8 == 0:", False),
        ("if rank == 0: x = 3 % 2", False),
    ],
)
def test_a_rank_taken_modulo_by_name_is_what_lets_the_guard_rule_in(text: str, passes: bool) -> None:
    """DDP025's pattern: ``rank`` or ``global_rank`` as a word, then brackets, blanks, comments or a continuation
    before ``%`` (spelled word first for speed; these are its cases, either way)."""
    assert (RULE["DDP025"].requires_pattern.search(text) is not None) is passes


def test_a_rank_taken_modulo_lets_the_guard_rule_in_without_a_rank_source() -> None:
    source = "import torch\n\ndef log(rank, x):\n    if rank % 8 == 0:\n        print(x)\n"
    assert vocabulary_of(source, "t.py").could_match(RULE["DDP025"])
    assert not vocabulary_of(source.replace("rank % 8", "rank == 8"), "t.py").could_match(RULE["DDP025"])


# ---------------------------------------------------------------------------------- resolvable names


def _resolved_by_the_analysis(source: str) -> set[str]:
    """Every qualified name the analysis's index resolves any node of the source to."""
    index = ModuleIndex(cst.parse_module(source))
    return {name for node in index.preorder if dotted_name(node) is not None for name in index.qualified_names(node)}


def test_the_resolvable_names_hold_every_name_the_analysis_resolves() -> None:
    """The ``ast`` reading the gate narrows on is a superset of the libcst index's, node by node, over every
    fixture and every rule example (imports in functions, aliases, relative imports, the vendored runtime)."""
    checked = 0
    for name, source in SOURCES:
        try:
            compile(source, name, "exec")
        except SyntaxError:
            continue
        resolvable = resolvable_names(source)
        assert resolvable is not None, name
        missing = _resolved_by_the_analysis(source) - resolvable
        assert not missing, (name, sorted(missing)[:5])
        checked += 1
    assert checked > 200


@pytest.mark.parametrize(
    "source",
    [
        "import torch.distributed as dist\n\ndef f(t):\n    def g():\n        from torch.distributed import all_reduce as ar\n        ar(t)\n    return g\n",
        "import torch.distributed\nx = torch.distributed.all_reduce\n",
        "import ddp_runtime as runtime\nruntime.barrier()\n",
        "from . import comm\nfrom torch import distributed\ndistributed.broadcast(t, 0)\n",
        "class C:\n    from torch.distributed import barrier\n",
    ],
)
def test_names_resolved_through_any_import_are_resolvable(source: str) -> None:
    assert _resolved_by_the_analysis(source) & names.COLLECTIVES
    assert _resolved_by_the_analysis(source) <= (resolvable_names(source) or set())


FUNCTOOLS_REDUCE = """\
import functools
import torch


def total(values, rank):
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return functools.reduce(lambda a, b: a + b, values).to(rank)
    return torch.zeros(()).scatter_(0, torch.tensor([0]), 1.0)
"""


def test_a_module_that_spells_a_collectives_parts_without_one_is_not_parsed(monkeypatch: pytest.MonkeyPatch) -> None:
    """``functools.reduce``, ``torch.distributed.is_available()`` and ``Tensor.scatter_`` spell every part of
    ``torch.distributed.reduce`` and ``torch.distributed.scatter``, and resolve to neither: the collective rules
    have nothing to look at (torch's own library modules are full of these)."""
    vocabulary = vocabulary_of(FUNCTOOLS_REDUCE, "t.py")
    assert vocabulary.could_match(RULE["DDP033"]) and vocabulary.could_match(RULE["DDP037"])

    def no_parse(text: str) -> None:
        raise AssertionError("parsed with libcst")

    monkeypatch.setattr(engine, "parse_checked", no_parse)
    result = process("helpers.py", FUNCTOOLS_REDUCE.encode(), RULES, Options(), fix=False, is_entry=False)
    assert result.skipped and not result.error and not result.findings


def test_the_same_module_with_a_collective_is_parsed_and_reported() -> None:
    source = FUNCTOOLS_REDUCE + "\n\ndef sync(values, ok):\n    if ok:\n        torch.distributed.all_reduce(values[0])\n"
    result = process("helpers.py", source.encode(), RULES, Options(), fix=False, is_entry=False)
    assert not result.skipped
    assert [f.code for f in result.findings] == ["DDP033"]


def test_a_rule_whose_one_part_name_is_spelled_is_not_narrowed() -> None:
    """``backward`` (a method of any receiver) stands beside the model wraps in the training rules' names: a
    file that calls it keeps them, whatever its imports resolve."""
    source = "import torch\n\ndef step(loss, opt):\n    loss.backward()\n    opt.step()\n    torch.save({}, 'x.pt')\n"
    vocabulary = vocabulary_of(source, "t.py")
    live = [rule for rule in RULES if vocabulary.could_match(rule)]
    assert RULE["DDP007"] in live and vocabulary.narrowed(live) == live


# ---------------------------------------------------------------------------------- the syntax check


def test_code_that_parses_but_does_not_compile_is_not_an_error() -> None:
    """``return`` outside a function: Python's parser accepts it, its compiler does not; as before, only a
    parse error is reported (and the file is still linted, every rule let through)."""
    source = "import torch\nmodel = torch.nn.DataParallel(net)\nreturn model\n"
    assert check_syntax(source, "t.py") is None
    assert vocabulary_of(source, "t.py").names is None
    result = process("t.py", source.encode(), RULES, Options(), fix=False)
    assert result.error is None and "DDP001" in {f.code for f in result.findings}


def test_a_syntax_error_is_reported_as_the_parser_reports_it() -> None:
    result = process("t.py", b"def f(:\n    pass\n", RULES, Options(), fix=False)
    try:
        ast.parse("def f(:\n    pass\n", "t.py")
    except SyntaxError as error:
        expected = f"t.py:{error.lineno}:{error.offset}: cannot parse: {error.msg}"
    assert result.error == expected


def test_the_compilers_warnings_about_user_code_are_not_printed(recwarn: pytest.WarningsRecorder) -> None:
    source = "import torch\nx = 1\nif x is 1:\n    print('\\d')\n"
    process("t.py", source.encode(), RULES, Options(), fix=False)
    assert not [w for w in recwarn if issubclass(w.category, SyntaxWarning)]


# ---------------------------------------------------------------------------------- noqa without tokenizing


def test_noqa_comments_of_other_tools_are_not_tokenized(monkeypatch: pytest.MonkeyPatch) -> None:
    """DDP100 reads only comments naming a code with our letters; a file whose noqa comments are all other
    tools' (``# noqa: F401``) is never tokenized, nor is a file with no finding to silence."""
    from ddp_migrate import noqa

    def no_tokenize(readline):  # type: ignore[no-untyped-def]
        raise AssertionError("tokenized")

    source = "import os  # noqa: F401\nimport sys  # NOQA\nx = 1  # noqa: E501, W291\n"
    monkeypatch.setattr(noqa.tokenize, "generate_tokens", no_tokenize)
    noqa.noqa_comments.cache_clear()
    assert noqa.unknown_codes(source) == []
    assert noqa.suppress([], source) == []
    result = process("t.py", source.encode(), RULES, Options(), fix=False, is_entry=False)
    assert not result.findings and not result.error


@pytest.mark.parametrize(
    "source, lines",
    [
        ("x = 1  # noqa: DDP999\n", [1]),
        ('"""Write # noqa: DDP999 to silence."""\nx = 1\n', []),  # in a string: not a comment
        ("x = 1  # noqa: E501,\n# noqa ddp7\ny = 2  # NOQA: ddp1000 F401\n", [3]),
    ],
)
def test_unknown_codes_are_still_found_where_they_are_comments(source: str, lines: list[int]) -> None:
    from ddp_migrate import noqa

    noqa.noqa_comments.cache_clear()
    assert [f.line for f in noqa.unknown_codes(source)] == lines



# ---------------------------------------------------------------------------------- found by review


@pytest.mark.parametrize(
    "source",
    [
        # The ImageNet example's guard, in a helper module with no rank source of its own.
        "def log_epoch(args, epoch, loss):\n    if args.rank % args.ngpus_per_node == 0:\n        print(f'epoch {epoch} loss {loss}')\n",
        "import logging\n\nclass Trainer:\n    def end(self):\n        if (self.global_rank) % self.gpus_per_node == 0:\n            logging.info('done')\n",
    ],
)
def test_the_first_process_of_a_node_found_by_name_still_passes_the_gate(source: str) -> None:
    """DDP025 reads ``rank % n == 0`` by the name ``rank`` / ``global_rank`` too, without a rank source."""
    assert vocabulary_of(source, "t.py").could_match(RULE["DDP025"])
    assert [f.code for f in process("t.py", source.encode(), RULES, Options(), fix=False, is_entry=False).findings] == ["DDP025"]


def test_the_gate_reads_asserts_whatever_the_optimisation_level() -> None:
    """``python -O`` drops asserts from compiled code; the gate's compile keeps them (optimize=0)."""
    import subprocess
    import sys

    source = "import torch.distributed as dist\nif dist.get_rank() == 0:\n    assert dist.all_gather_object(out, obj) is None\n"
    probe = f"from ddp_migrate.engine import vocabulary_of\nprint('all_gather_object' in vocabulary_of({source!r}, 't.py').names)"
    optimised = subprocess.run([sys.executable, "-O", "-c", probe], capture_output=True, text=True, timeout=60)
    assert optimised.stdout.strip() == "True", optimised.stderr


@pytest.mark.parametrize(
    "source",
    [
        # The compiler drops a lambda defined after a return, with the names inside it.
        "import torch.nn as nn\n\ndef build(net):\n    return net.cuda()\n    wrap = lambda m: nn.DataParallel(m)\n    return wrap(net)\n",
        "import torch.distributed as dist\n\ndef sync(tensors):\n    return tensors\n    return [dist.all_reduce(t) for t in tensors if dist.get_rank() == 0]\n",
        "import torch.distributed as dist\nwhile True:\n    pass\n\ndef step(t, ok):\n    if ok:\n        dist.barrier()\n",
    ],
)
def test_code_the_compiler_drops_is_still_linted_and_migrated(source: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The words of lines the compiler dropped (after a return, an endless loop) count as names; lines
    after a loop that ``break`` leaves have instructions and keep the gate sharp."""
    gated = (_outcome("t.py", source, False), _outcome("t.py", source, True))
    monkeypatch.setattr(Vocabulary, "could_match", lambda self, rule: True)
    ungated = (_outcome("t.py", source, False), _outcome("t.py", source, True))
    assert gated == ungated and gated[0][0]


def test_lines_after_a_loop_left_by_break_are_not_unreachable() -> None:
    source = "while True:\n    if done():\n        break\nx = [dist.all_reduce(t) for t in ts]\n"
    assert unreachable_words(source, compile(source, "t.py", "exec")) == frozenset()
    dead = "def f():\n    return 1\n    g = lambda: nn.DataParallel(m)\n"
    assert {"nn", "DataParallel"} <= unreachable_words(dead, compile(dead, "t.py", "exec"))
    paged = "x = 1  # page\f break\n" + dead + "y = 2\n"  # a form feed ends no line for Python
    assert {"nn", "DataParallel"} <= unreachable_words(paged, compile(paged, "t.py", "exec"))


def test_a_word_spelled_with_escapes_in_a_string_passes_the_gate(monkeypatch: pytest.MonkeyPatch) -> None:
    """``os.environ["\\x52ANK"]`` reads RANK: the code's strings, escapes read, count as text."""
    source = 'import os\nimport torch\nrank = int(os.environ["\\x52ANK"])\nmodel = torch.nn.Linear(2, 2).cuda(rank)\n'
    assert "RANK" not in source
    gated = (_outcome("t.py", source, False), _outcome("t.py", source, True))
    monkeypatch.setattr(Vocabulary, "could_match", lambda self, rule: True)
    assert gated == (_outcome("t.py", source, False), _outcome("t.py", source, True))
    assert [f[0] for f in gated[0][0]] == ["DDP024"]
