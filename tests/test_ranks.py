"""Unit tests of the rank-dependence fact (codemods/analysis/ranks.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import libcst as cst
import pytest

from ddp_migrate.codemods.analysis import ScriptAnalysis
from ddp_migrate.codemods.analysis.ranks import Kind, rank_facts

CODE = '''
import argparse
import os
import torch.distributed as dist
from ddp_migrate import runtime
from torch.utils.data import DataLoader

args = argparse.ArgumentParser().parse_args()
rank = int(os.environ["RANK"])
master_process = rank == 0
world = int(os.environ.get("WORLD_SIZE", 1))
loader = DataLoader(data, batch_size=args.batch_size)

def get_rank():
    if not dist.is_initialized():
        return 0
    return dist.get_rank()

def is_main_process():
    return get_rank() == 0

def flatten(h):
    return h if isinstance(h, int) else tuple(flatten(v) for v in h)

def report(flag):
    if flag:
        dist.barrier()

for epoch in range(args.epochs):
    for i, (x, y) in enumerate(loader):
        acc = model(x).mean().item()
    mean = runtime.reduce_mean(acc)
    if it % 2 == 0 and master_process: pass
    if is_main_process(): pass
    if acc > best: pass
    if mean > best_known and epoch % 5 == 0: pass
    if world > 1 and i % 10 == 0: pass
    if rank != -1: pass
    if flatten((1, 2)): pass
report(master_process)
report(True)
'''


@pytest.fixture(scope="module")
def facts():
    return rank_facts(ScriptAnalysis(cst.parse_module(CODE)))


def _test(facts, text: str) -> cst.BaseExpression:
    for node in facts.analysis.ifs:
        if cst.Module([]).code_for_node(node.test) == text:
            return node.test
    raise AssertionError(text)


@pytest.mark.parametrize(
    ("test", "kind"),
    [
        ("it % 2 == 0 and master_process", Kind.RANK),
        ("is_main_process()", Kind.RANK),
        ("acc > best", Kind.UNKNOWN),
        ("world > 1 and i % 10 == 0", Kind.UNIFORM),
        ("rank != -1", Kind.UNIFORM),
    ],
)
def test_kinds(facts, test: str, kind: Kind) -> None:
    assert facts.kind(_test(facts, test)) is kind


def test_self_recursive_helper_is_not_rank_dependent(facts) -> None:
    assert facts.kind(_test(facts, "flatten((1, 2))")) is not Kind.RANK


def test_queries(facts) -> None:
    assert facts.is_rank_dependent(_test(facts, "is_main_process()"))
    assert facts.may_differ_between_ranks(_test(facts, "acc > best"))
    assert not facts.may_differ_between_ranks(_test(facts, "world > 1 and i % 10 == 0"))
    assert facts.zero_side(_test(facts, "is_main_process()")) is True


def test_collective_safe_through_call_sites(facts) -> None:
    barrier = next(c for c in facts.analysis.calls if facts.analysis.is_call_to(c, {"torch.distributed.barrier"}))
    condition = facts.unsafe_condition(barrier)
    assert condition is not None and cst.Module([]).code_for_node(condition.test) == "flag"
    assert not facts.collective_safe_at(barrier)


def test_recursive_helpers_are_bounded() -> None:
    code = "import torch\ndef f(h):\n    return tuple(f(v) for v in h)\ndef g(x):\n    return g(x) if x else f(x)\nif g(1):\n    torch.save(f(2), 'p')\n"
    facts = rank_facts(ScriptAnalysis(cst.parse_module(code)))
    save = next(c for c in facts.analysis.calls if facts.analysis.is_call_to(c, {"torch.save"}))
    assert facts.guard(save) is None
    assert facts.unsafe_condition(save) is None  # g and f only ever compute from their arguments


GUARDS = '''
import os
import torch
import torch.distributed as dist

rank = int(os.environ["RANK"])
flag = os.environ.get("FLAG") == "1"
if not flag or (flag and rank == 0):
    torch.save(1, "a.pt")
if flag and rank == 0:
    torch.save(2, "b.pt")
if rank == 0 or flag:
    torch.save(3, "c.pt")
if not (rank != 0 or flag):
    torch.save(4, "d.pt")
if rank != 0 or flag:
    pass
else:
    torch.save(5, "e.pt")
'''


@pytest.mark.parametrize(
    ("value", "guarded"),
    [(1, False), (2, True), (3, False), (4, True), (5, True)],
    ids=["not-switch-or-switch-and-rank0", "switch-and-rank0", "rank0-or-switch", "not-of-nonzero-or-switch", "else-of-nonzero-or-switch"],
)
def test_a_rank_test_or_ed_with_a_switch_does_not_keep_the_other_ranks_out(value: int, guarded: bool) -> None:
    analysis = ScriptAnalysis(cst.parse_module(GUARDS))
    facts = rank_facts(analysis)
    [save] = [c for c in analysis.calls if analysis.is_call_to(c, {"torch.save"}) and c.args[0].value.value == str(value)]  # type: ignore[attr-defined]
    assert (facts.guard(save) is not None) is guarded


def _cyclic_module(width: int, seed: str) -> str:
    """``width`` values that all feed each other (each read from the next two, around a ring) inside one
    loop, with ``seed`` flowing into the first: every query walks one big cycle of the data flow."""
    lines = ["import os", "import torch.distributed as dist", f"v0 = {seed}"]
    lines += [f"v{i} = 0" for i in range(1, width)]
    lines.append("for step in range(10):")
    lines += [f"    v{i} = v{(i + 1) % width} + v{(i + 2) % width}" for i in range(width)]
    lines += [f"    if v{i} > 0:\n        dist.barrier()" for i in range(width)]
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize(("seed", "kind"), [('int(os.environ["RANK"])', Kind.RANK), ("3", Kind.UNIFORM)])
def test_values_in_a_cycle_get_the_kind_of_what_flows_into_the_cycle(seed: str, kind: Kind) -> None:
    facts = rank_facts(ScriptAnalysis(cst.parse_module(_cyclic_module(12, seed))))
    assert {facts.kind(node.test) for node in facts.analysis.ifs} == {kind}


def _count_steps(monkeypatch: pytest.MonkeyPatch) -> Callable[[], int]:
    """Count the values rank queries compute from here on (``RankFacts._compute`` calls): the count so far."""
    from ddp_migrate.codemods.analysis import ranks

    computed = 0
    compute = ranks.RankFacts._compute

    def counting(self: ranks.RankFacts, expr: cst.CSTNode, depth: int) -> Kind:
        nonlocal computed
        computed += 1
        return compute(self, expr, depth)

    monkeypatch.setattr(ranks.RankFacts, "_compute", counting)
    return lambda: computed


def test_a_cyclic_data_flow_costs_each_query_a_bounded_number_of_steps(monkeypatch: pytest.MonkeyPatch) -> None:
    """Past its exhaustive budget a query reuses the results it found inside a cycle: without that, a query
    followed every path through the ring (exponential in its width: 16 values took 150,000 steps and 15 s,
    a torch test module several minutes). A uniform seed makes every query explore the whole ring."""
    from ddp_migrate.codemods.analysis import ranks

    facts = rank_facts(ScriptAnalysis(cst.parse_module(_cyclic_module(20, "3"))))
    steps_taken = _count_steps(monkeypatch)
    values = len(facts.analysis.assignments) + len(facts.analysis.ifs)
    for node in facts.analysis.ifs:
        before = steps_taken()
        assert facts.kind(node.test) is Kind.UNIFORM
        assert steps_taken() - before <= ranks.RankFacts.MAX_EXHAUSTIVE_STEPS + 10 * values


def test_a_value_read_from_a_cycle_is_kept_once_the_cycle_is_closed(monkeypatch: pytest.MonkeyPatch) -> None:
    """``x = v0 * 2`` reads a ring of values that feed each other: the walk from ``x`` closes the ring below
    it, so its answer is final and kept. Every later test of ``x`` is then a look-up: when any cycle met
    on the way kept nothing, each of torch's test modules asked the same ring again for every statement
    (common_utils.py: 232,000 steps for 1,182 queries)."""
    code = _cyclic_module(12, "3") + "x = v0 * 2\n" + "".join(f"if x > {i}:\n    dist.barrier()\n" for i in range(20))
    facts = rank_facts(ScriptAnalysis(cst.parse_module(code)))
    steps_taken = _count_steps(monkeypatch)
    tests = [branch.test for branch in facts.analysis.ifs if cst.Module([]).code_for_node(branch.test).startswith("x > ")]
    assert len(tests) == 20
    steps = []
    for test in tests:
        before = steps_taken()
        assert facts.kind(test) is Kind.UNIFORM
        steps.append(steps_taken() - before)
    assert steps[0] > 20  # the first query walks the ring
    assert max(steps[1:]) <= 4  # the test, its two sides, ``x``: the rest is kept


CYCLE_BEHIND_A_RANK_TEST = """
import torch.distributed as dist

def main(flag):
    rank = mystery()
    gpu = 0
    for _ in range(3):
        rank = gpu + 0
        gpu = rank + dist.get_rank()
    s = rank * 1
    t = (gpu != -1) or (rank != -1)
    if t:
        dist.barrier()
    u = gpu * 1 if flag else s
    if u:
        print("a")
    if s == 0:
        dist.barrier()
"""


def test_a_cycle_behind_a_rank_test_keeps_the_exact_answers() -> None:
    """``gpu != -1`` is "is this run distributed" (uniform) when ``gpu`` holds a rank, which it does only
    through a cycle: reusing partial results inside the cycle answered UNKNOWN for ``t``, and a later query
    kept a partial result for ``s`` (review of the speed change)."""
    facts = rank_facts(ScriptAnalysis(cst.parse_module(CYCLE_BEHIND_A_RANK_TEST)))
    kinds = {cst.Module([]).code_for_node(node.test): facts.kind(node.test) for node in facts.analysis.ifs}
    assert kinds == {"t": Kind.UNIFORM, "u": Kind.RANK, "s == 0": Kind.RANK}


def test_a_long_query_without_cycles_is_answered_exactly() -> None:
    """A 20,000-element table indexed by the rank: a long query, but one without cycles, keeps its answer."""
    table = ", ".join(["0"] * 20_000)
    code = f"import torch.distributed as dist\ntable = [{table}]\nflag = table[dist.get_rank()]\nif flag:\n    dist.barrier()\n"
    facts = rank_facts(ScriptAnalysis(cst.parse_module(code)))
    assert facts.kind(facts.analysis.ifs[0].test) is Kind.RANK


@pytest.mark.parametrize(("literal", "value"), [("0", 0), ("-1", -1), ("0x04", 4), ("-0b1", -1), ("1_000", 1000), ("0o17", 15), ("x", None)])
def test_integer_literals_in_every_spelling(literal: str, value: int | None) -> None:
    """``0x04`` in a comparison crashed DDP025 on torch's own sources (int() of the spelling)."""
    from ddp_migrate.codemods.analysis.legacy import int_value

    assert int_value(cst.parse_expression(literal)) == value


CONSTANT_FLAGS = '''
import torch
import torch.distributed as dist

master_process = True

def train(model, hook_location):
    is_main = True
    if master_process:
        torch.save(model.state_dict(), "a.pt")
    if is_main:
        torch.save(model.state_dict(), "b.pt")
    pre = torch.nn.parallel.distributed._BufferCommHookLocation.PRE_FORWARD
    for location in [pre, torch.float32]:
        if location == pre:
            dist.barrier()
'''


def test_a_flag_bound_to_a_constant_is_the_same_on_every_rank_whatever_its_name() -> None:
    """``master_process = True`` (at module level, or in the function) is a constant: the saves under it run on
    every rank, so they are unguarded, not rank-0 saves (the flag's name is no evidence when its value is
    known). A loop over a library's constants is the same on every rank too."""
    analysis = ScriptAnalysis(cst.parse_module(CONSTANT_FLAGS))
    facts = rank_facts(analysis)
    saves = [c for c in analysis.calls if analysis.is_call_to(c, {"torch.save"})]
    assert len(saves) == 2 and all(facts.guard(save) is None for save in saves)
    assert {facts.kind(node.test) for node in analysis.ifs} == {Kind.UNIFORM}
    [barrier] = [c for c in analysis.calls if analysis.is_call_to(c, {"torch.distributed.barrier"})]
    assert facts.collective_safe_at(barrier)


GLOBAL_RANK = '''
import os
import torch
import torch.distributed as dist

rank = None


def setup():
    global rank
    rank = int(os.environ.get("RANK", 0))


def train(model):
    if rank == 0:
        torch.save(model.state_dict(), "m.pt")
        dist.barrier()
'''


def test_a_rank_assigned_through_a_global_declaration_is_the_modules_rank() -> None:
    """``rank = None`` at module level and ``global rank; rank = int(os.environ["RANK"])`` in a function: the
    function's write is the module's variable, so ``if rank == 0:`` is a rank guard (its save is rank 0's,
    its barrier a collective only rank 0 reaches), not a test of the constant ``None``."""
    analysis = ScriptAnalysis(cst.parse_module(GLOBAL_RANK))
    facts = rank_facts(analysis)
    [test] = [node.test for node in analysis.ifs]
    assert facts.kind(test) is Kind.RANK
    [save] = [c for c in analysis.calls if analysis.is_call_to(c, {"torch.save"})]
    assert facts.guard(save) is not None
    [barrier] = [c for c in analysis.calls if analysis.is_call_to(c, {"torch.distributed.barrier"})]
    assert not facts.collective_safe_at(barrier)


@pytest.mark.parametrize(
    "decorator",
    [
        # mmcv's own, written in the program: the wrapper calls the function on rank 0 only.
        "import functools\n\n\ndef master_only(func):\n    @functools.wraps(func)\n    def wrapper(*args, **kwargs):\n"
        "        if dist.get_rank() == 0:\n            return func(*args, **kwargs)\n    return wrapper\n",
        # A library's.
        "from mmcv.runner import master_only\n",
        "from pytorch_lightning.utilities import rank_zero_only as master_only\n",
    ],
)
def test_a_rank_zero_decorator_guards_the_function_it_wraps(decorator: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A trial: mmcv-style @master_only methods were reported (DDP007, DDP010) as running on every process.
    from click.testing import CliRunner

    from ddp_migrate.cli import cli

    monkeypatch.chdir(tmp_path)
    Path("runner.py").write_text(
        "import torch\nimport torch.distributed as dist\n" + decorator + "\n\n"
        "class Runner:\n    def __init__(self, model, optimizer):\n        self.model, self.optimizer = model, optimizer\n\n"
        "    @master_only\n    def log(self, msg):\n        print(msg)\n\n"
        "    @master_only\n    def save(self, path):\n        torch.save(self.model.module.state_dict(), path)\n\n"
        "    def train(self, loader):\n        for x, y in loader:\n            self.optimizer.zero_grad()\n"
        "            loss = torch.nn.functional.mse_loss(self.model(x), y)\n            loss.backward()\n"
        "            self.optimizer.step()\n            self.log(loss.item())\n        self.save('last.pt')\n"
    )
    result = CliRunner().invoke(cli, ["lint", "--select", "DDP007,DDP010", "runner.py"])
    assert result.exit_code == 0 and "DDP007" not in result.output and "DDP010" not in result.output, result.output
    unguarded = Path("runner.py").read_text().replace("    @master_only\n", "")
    Path("runner.py").write_text(unguarded)
    result = CliRunner().invoke(cli, ["lint", "--select", "DDP007,DDP010", "runner.py"])
    assert "DDP007" in result.output and "DDP010" in result.output, result.output


def test_values_from_another_module_are_judged_by_that_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A trial's correct programs got DDP033 errors: a collective under a parameter the entry fills from its
    # settings, and one under timm's args.distributed, which a helper sets beside args.rank.
    from click.testing import CliRunner

    from ddp_migrate.cli import cli

    monkeypatch.chdir(tmp_path)
    Path("util.py").write_text(
        "import os\n\nimport torch\nimport torch.distributed as dist\n\n\n"
        "def init_distributed(args):\n    args.distributed = False\n    args.rank = 0\n"
        "    if int(os.environ.get('WORLD_SIZE', 1)) > 1:\n        dist.init_process_group('gloo')\n"
        "        args.rank = dist.get_rank()\n        args.distributed = True\n\n\n"
        "def gather_metric(x, enabled):\n    if enabled:\n        out = [torch.zeros_like(x) for _ in range(dist.get_world_size())]\n"
        "        dist.all_gather(out, x)\n        return torch.cat(out)\n    return x\n\n\n"
        "def sync_buffers(model):\n    for name, buf in model.named_buffers():\n        if 'running' in name:\n            dist.broadcast(buf, 0)\n"
    )
    Path("train.py").write_text(
        "import argparse\n\nimport torch\nfrom torch.nn.parallel import DistributedDataParallel as DDP\n\n"
        "from util import gather_metric, init_distributed, sync_buffers\n\nCFG = {'gather_metrics': True}\n\n\n"
        "def main():\n    args = argparse.ArgumentParser().parse_args()\n    init_distributed(args)\n"
        "    model = DDP(torch.nn.Linear(4, 1))\n    opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "    for step in range(3):\n        loss = model(torch.randn(8, 4)).pow(2).mean()\n        opt.zero_grad()\n"
        "        loss.backward()\n        opt.step()\n        gather_metric(loss.detach().view(1), CFG['gather_metrics'])\n"
        "    if args.distributed:\n        sync_buffers(model)\n\n\nif __name__ == '__main__':\n    main()\n"
    )
    result = CliRunner().invoke(cli, ["lint", "--select", "DDP033", "."])
    assert result.exit_code == 0 and "DDP033" not in result.output, result.output
    Path("train.py").write_text(Path("train.py").read_text().replace("CFG['gather_metrics']", "args.rank == 0"))
    result = CliRunner().invoke(cli, ["lint", "--select", "DDP033", "."])
    assert "util.py:" in result.output and "DDP033 dist.all_gather()" in result.output, result.output


DIST_INFO = '''
import torch.distributed as dist


def get_dist_info():
    if dist.is_available() and dist.is_initialized():
        rank = dist.get_rank()
        world_size = dist.get_world_size()
    else:
        rank = 0
        world_size = 1
    return rank, world_size


rank, world_size = get_dist_info()
if world_size == 1: pass
if rank == 0: pass
first, *rest = get_dist_info()
if first == 0: pass
'''


@pytest.mark.parametrize(("test", "kind"), [("world_size == 1", Kind.UNIFORM), ("rank == 0", Kind.RANK), ("first == 0", Kind.UNKNOWN)])
def test_names_unpacked_from_a_helpers_tuple_take_the_kind_of_their_element(test: str, kind: Kind) -> None:
    """mmcv's ``rank, world_size = get_dist_info()`` (a trial: DDP033 called ``if world_size == 1:`` a test
    that may differ between ranks). A starred target is not read (unknown)."""
    facts = rank_facts(ScriptAnalysis(cst.parse_module(DIST_INFO)))
    assert facts.kind(_test(facts, test)) is kind


LOGGER_OFF_RANK_0 = """
import logging

import torch.distributed as dist


def setup_logger(rank):
    if DECIDES:
        return None
    logger = logging.getLogger("train")
    logger.addHandler(logging.FileHandler("train.log"))
    return logger


def main(verbose):
    rank = dist.get_rank()
    logger = setup_logger(rank)
    if logger is not None:
        logger.info("epoch done")
"""


@pytest.mark.parametrize(("decides", "kind"), [("rank != 0", Kind.RANK), ("not verbose_logging()", Kind.UNKNOWN)])
def test_a_helper_whose_rank_decides_which_return_runs_returns_a_per_rank_value(decides: str, kind: Kind) -> None:
    """``if rank != 0: return None`` then ``return logger``: a logger only rank 0 has, and ``if logger is not
    None:`` is a rank test (a trial's lint called the ``logger.info`` under it "logging on every process")."""
    module = cst.parse_module(LOGGER_OFF_RANK_0.replace("DECIDES", decides))
    analysis = ScriptAnalysis(module)
    test = next(node.test for node in analysis.ifs if "logger is not None" in module.code_for_node(node.test))
    assert rank_facts(analysis).kind(test) is kind
