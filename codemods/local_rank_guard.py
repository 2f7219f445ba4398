"""DDP025 local-rank-guard."""

from __future__ import annotations

import re
from typing import Iterator

import libcst as cst

from . import names
from .analysis import ScriptAnalysis, dotted_name, walk
from .base import Change, Example, FixResult, FixSafety, Match, Options, Phase, Rule, Valid
from .edits import Edits, expression
from .analysis.legacy import RANK_SOURCE_WORDS, LegacyFacts, int_value, legacy_facts
from .runtime_calls import runtime_name

#: Calls that write files or print: a guard around them decides which processes produce output.
OUTPUT_CALLS = frozenset(
    {
        "print", "open", "makedirs", "mkdir", "copyfile", "copy", "copy2", "savefig", "add_scalar", "add_scalars",
        "debug", "info", "warning", "error", "log", "log_metric", "log_metrics", "log_dict", "log_artifact",
    }
)
OUTPUT_PREFIXES = ("save", "write", "dump", "print")


def _callee(call: cst.Call) -> str:
    func = call.func
    return func.value if isinstance(func, cst.Name) else func.attr.value if isinstance(func, cst.Attribute) else ""


#: The expressions a guard variable is assigned: tests (``local_rank in (-1, 0)``, ``not a or b``).
_TESTS = (cst.Comparison, cst.UnaryOperation, cst.BooleanOperation)


class LocalRankGuard(Rule):
    """Write files and print on global rank 0, not on local rank 0.

    What it finds: an ``if`` that lets only the local rank 0 write or print: ``if local_rank == 0:``,
    ``if args.local_rank in [-1, 0]:``, ``if not local_rank:``, and the ImageNet example's
    ``if args.rank % ngpus_per_node == 0:`` (the first process of each machine). The guarded block saves,
    writes, logs or prints (also through a function of the file it calls).

    Why it is a problem: every machine has a local rank 0, so on a job of several nodes each node writes
    the same checkpoint (racing on shared storage) and prints the same lines. On one machine the two
    tests agree, which is why the bug survives until the first multi-node run.

    What the fix does: the local-rank test becomes ``runtime.is_main_process()`` (global rank 0). A guard
    whose block only prepares something each machine needs (a download, a cache) is per node on purpose
    and is left alone.

    Fix safety: the guarded block runs once per job (global rank 0) instead of once per node (local rank
    0): on several nodes, work that every node did under the guard is done by one.
    """

    code = "DDP025"
    name = "local-rank-guard"
    fix_safety = FixSafety.UNSAFE
    phase = Phase.OUTPUT
    triggers = ("rank", "RANK", "spawn", "Process")
    #: Tests of values the analysis knows to be a rank, and ``rank % n`` / ``global_rank % n`` by name
    #: (:meth:`_is_node_first`): the name, then closing brackets, blanks, comments or a line continuation, then ``%``.
    #: (``\b(?:global_)?rank\b...``, spelled to start with the word itself: Python's regex engine then scans for
    #: the word and tries the rest only where it is, twenty times faster over a large package's text.)
    requires = RANK_SOURCE_WORDS
    requires_pattern = re.compile(r"rank(?:(?<!\wrank)|(?<=(?<!\w)global_rank))\b(?:[\s)\\]|#[^\n]*)*%")
    manual_fix = "guard the output with the global rank (runtime.is_main_process())"
    examples = (
        Example(
            before="""\
import os

import torch

local_rank = int(os.environ["LOCAL_RANK"])
for epoch in range(10):
    train(model, loader)
    if local_rank == 0:
        torch.save(model.module.state_dict(), "model.pt")
        print("saved epoch", epoch)
""",
            after="""\
import os

import torch
from ddp_migrate import runtime

local_rank = int(os.environ["LOCAL_RANK"])
for epoch in range(10):
    train(model, loader)
    if runtime.is_main_process():
        torch.save(model.module.state_dict(), "model.pt")
        print("saved epoch", epoch)
""",
        ),
        # The guard kept in a variable (a trial's half-distributed script: on several nodes every node's
        # local rank 0 saved).
        Example(
            before="""\
import os

import torch

local_rank = int(os.environ.get("LOCAL_RANK", -1))
is_main = local_rank in (-1, 0)
if is_main:
    torch.save(model.module.state_dict(), "model.pt")
""",
            after="""\
import os

import torch
from ddp_migrate import runtime

local_rank = int(os.environ.get("LOCAL_RANK", -1))
is_main = runtime.is_main_process()
if is_main:
    torch.save(model.module.state_dict(), "model.pt")
""",
        ),
        Example(
            before="""\
import logging

import torch


def save_checkpoint(state, filename="checkpoint.pth.tar"):
    torch.save(state, filename)


def main_worker(gpu, ngpus_per_node, args):
    args.rank = args.rank * ngpus_per_node + gpu
    if args.local_rank in [-1, 0]:
        logging.info("step done")
    if not args.multiprocessing_distributed or args.rank % ngpus_per_node == 0:
        save_checkpoint({"state_dict": model.state_dict()})
""",
            after="""\
import logging

import torch
from ddp_migrate import runtime


def save_checkpoint(state, filename="checkpoint.pth.tar"):
    torch.save(state, filename)


def main_worker(gpu, ngpus_per_node, args):
    args.rank = args.rank * ngpus_per_node + gpu
    if runtime.is_main_process():
        logging.info("step done")
    if not args.multiprocessing_distributed or runtime.is_main_process():
        save_checkpoint({"state_dict": model.state_dict()})
""",
        ),
        Valid(
            """\
import os

import torch.distributed as dist

local_rank = int(os.environ["LOCAL_RANK"])
if local_rank == 0:
    download_dataset("data/")
dist.barrier()
if dist.get_rank() == 0:
    print("ready")
"""
        ),
    )

    def _local_zero_tests(self, facts: LegacyFacts, test: cst.BaseExpression) -> Iterator[cst.BaseExpression]:
        """The parts of an ``if`` test that mean "local rank 0"."""
        for node in walk(test):
            if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Not):
                if self._is_local(facts, node.expression):
                    yield node
            if not isinstance(node, cst.Comparison) or len(node.comparisons) != 1:
                continue
            target = node.comparisons[0]
            left, right, operator = node.left, target.comparator, target.operator
            if isinstance(operator, cst.Equal):
                for side, other in ((left, right), (right, left)):
                    if int_value(other) != 0:
                        continue
                    if self._is_local(facts, side) or self._is_node_first(facts, side):
                        yield node
                        break
            elif isinstance(operator, cst.In) and isinstance(right, (cst.List, cst.Tuple, cst.Set)):
                values = {int_value(e.value) for e in right.elements}
                if 0 in values and values <= {0, -1} and self._is_local(facts, left):
                    yield node
            elif isinstance(operator, (cst.LessThanEqual, cst.LessThan)):
                bound = int_value(right)
                if bound == (0 if isinstance(operator, cst.LessThanEqual) else 1) and self._is_local(facts, left):
                    yield node

    @staticmethod
    def _is_local(facts: LegacyFacts, node: cst.BaseExpression) -> bool:
        return isinstance(node, (cst.Name, cst.Attribute, cst.Call)) and facts.holds_local_rank(node)

    @staticmethod
    def _is_node_first(facts: LegacyFacts, node: cst.BaseExpression) -> bool:
        """``rank % ngpus_per_node``: the position of the process on its machine."""
        if not (isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Modulo)):
            return False
        left = node.left
        if isinstance(left, (cst.Name, cst.Attribute, cst.Call)) and facts.holds_global_rank(left):
            return True
        name = dotted_name(left)
        return bool(name) and name.split(".")[-1] in ("rank", "global_rank")  # type: ignore[union-attr]

    def _writes(self, analysis: ScriptAnalysis, node: cst.CSTNode, depth: int = 0, seen: frozenset[cst.CSTNode] = frozenset()) -> bool:
        """Whether running the block prints, logs or writes (a writer of ``names.WRITERS`` other than a
        download, or an output call), looking two calls deep into the file (each function once)."""
        for inner in walk(node):
            if not isinstance(inner, cst.Call):
                continue
            name = _callee(inner)
            kind = names.writer_kind(analysis.qualified_names(inner.func))
            if kind == "download":
                continue
            if kind is not None or name in OUTPUT_CALLS or name.startswith(OUTPUT_PREFIXES):
                return True
            target = analysis.call_target(inner)
            if target is not None and target not in seen and depth < 2 and self._writes(analysis, target.body, depth + 1, seen | {target}):
                return True
        return False

    def _cases(self, analysis: ScriptAnalysis) -> Iterator[cst.BaseExpression]:
        """The local-rank-0 tests that decide whether output happens: in an ``if`` test, or in the value of a
        variable an ``if`` tests (``is_main = not args.distributed or args.local_rank in (-1, 0)``, then
        ``if is_main: torch.save(...)``; also a parameter its callers pass such a test for)."""
        facts = legacy_facts(analysis)
        found: set[cst.BaseExpression] = set()
        # The tests a variable or a parameter may hold: assigned, or passed by a call (read once; most
        # modules hold none, and then no name an ``if`` tests is looked up).
        stored = [a.value for a in analysis.assignments if type(a.value) in _TESTS]
        passed = [arg.value for call in analysis.calls for arg in call.args if type(arg.value) in _TESTS]
        in_values = {value: tests for value in stored + passed if (tests := list(self._local_zero_tests(facts, value)))}  # type: ignore[arg-type]
        held: dict[tuple[object, str], list[cst.CSTNode]] = {}  # each name's values looked up once
        for branch in analysis.ifs:
            tests = list(self._local_zero_tests(facts, branch.test))
            for node in walk(branch.test) if in_values else ():
                name = dotted_name(node) if type(node) in (cst.Name, cst.Attribute) else None
                if name is None or type(analysis.parent(node)) is cst.Attribute:
                    continue
                key = (analysis.enclosing_function(node), name)
                if key not in held:
                    held[key] = [value for value in self._values_of(analysis, node, name) if type(value) in _TESTS]
                for value in held[key]:
                    tests.extend(in_values.get(value, ()))
            fresh = [test for test in tests if test not in found]
            if fresh and self._writes(analysis, branch.body):
                found.update(fresh)
                yield from fresh

    @staticmethod
    def _values_of(analysis: ScriptAnalysis, node: cst.CSTNode, name: str) -> list[cst.CSTNode]:
        """What a name an ``if`` tests may hold: its assignments in the function (or module), and for a
        parameter what the callers pass (:meth:`ScriptAnalysis.flows_into`, which reads every binding)."""
        function = analysis.enclosing_function(node)
        if function is not None and "." not in name and analysis.is_parameter(function, name):
            return analysis.flows_into(node, name)
        return analysis.assigned_values(function, name)  # type: ignore[return-value]

    def matches(self, analysis: ScriptAnalysis) -> Iterator[Match]:
        blocked = legacy_facts(analysis).blocked()
        for test in self._cases(analysis):
            message = "output guarded by the local rank: every node's local rank 0 writes it; guard with the global rank 0"
            yield Match(test, message + blocked, not blocked)

    def fix(self, analysis: ScriptAnalysis, options: Options) -> FixResult | None:
        if legacy_facts(analysis).blocked():
            return None
        edits = Edits(analysis)
        for test in self._cases(analysis):
            rt = runtime_name(analysis, edits)
            edits.replace(test, expression(f"{rt}.is_main_process()"))
            edits.changes.append(Change(self.code, analysis.line(test), "local-rank guard replaced by runtime.is_main_process() (global rank 0)"))
        return edits.apply(analysis.module) if edits else None
