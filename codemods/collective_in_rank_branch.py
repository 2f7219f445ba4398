"""DDP033 collective-in-rank-branch."""

from __future__ import annotations

from typing import Iterator

import libcst as cst

from . import names
from .analysis import ScriptAnalysis, dotted_name, walk
from .analysis.script import PROCESS_EXITS
from .analysis.ranks import Condition, Kind, RankFacts, rank_facts
from .base import Example, Match, Phase, Rule, Severity, Valid
from .edits import code_of


def _call_name(call: cst.Call) -> str:
    return dotted_name(call.func) or "collective"


def _branch_has(analysis: ScriptAnalysis, branch: cst.CSTNode | None, targets: set[str]) -> bool:
    """Whether a branch of an ``if`` calls one of the qualified names (``None``: a missing ``else``)."""
    return branch is not None and any(isinstance(n, cst.Call) and analysis.is_call_to(n, targets) for n in walk(branch))


class CollectiveInRankBranch(Rule):
    """Call collectives on every rank: never inside a branch that only some ranks take.

    What it finds: a barrier or collective (``torch.distributed.barrier``, ``all_reduce``, ``all_gather``,
    ``broadcast``, ``reduce``, ``gather``, ``scatter``, ``new_group``, ...) or a runtime helper that runs one
    (``runtime.save``, ``runtime.barrier``, ``runtime.reduce_sum`` / ``reduce_mean`` / ``weighted_mean``)
    under a condition that may differ between ranks, when the other branch does not make the same call,
    or in a function called under such a condition, or run on rank 0 only by its decorator
    (``@rank_zero_only``, mmcv's ``@master_only`` or the program's own). Which conditions may differ is proven by data flow
    (the rank analysis), not by names: a test whose value flows from the rank (``if rank == 0:``, ``if
    master_process:`` with ``master_process = rank == 0``, ``if get_rank() == 0:`` of a helper of the file,
    ``if it % 2 == 0 and master_process:``), and a test the analysis cannot prove is the same on every rank
    (``if acc > best:`` with a per-rank ``acc``, a call of an unknown function); also ``while`` tests,
    ``except`` handlers and loops over rank-dependent ranges. Tests that all ranks answer alike (``if
    local_rank != -1:``, ``if args.distributed:``, ``if epoch % 5 == 0:``) are fine. Two barriers that pair
    up across opposite rank-0 tests in one function (``if rank != 0: barrier()`` ... ``if rank == 0:
    barrier()``, the "let rank 0 download first" idiom) are recognised and left alone.

    Why it is a problem: a collective returns only when every rank of the group has called it. The ranks
    that skip the branch never do, so the ranks inside it wait forever: the job hangs (until the NCCL or
    gloo timeout, typically 10-30 minutes later) without an error pointing at the line.

    What a human must do: move the call out of the branch so every rank makes it, and keep only the
    rank-0 work (printing, writing) inside; ``runtime.save`` already writes on rank 0 only and must be
    called by all ranks. When the branch really must hold a collective, give the other branch the
    matching call.
    """

    code = "DDP033"
    name = "collective-in-rank-branch"
    phase = Phase.CLEANUP
    severity = Severity.ERROR
    triggers = ("barrier", "all_", "reduce", "broadcast", "gather", "scatter", "save", "weighted_mean", "new_group")
    requires = ("distributed", "ddp_migrate", "ddp_runtime")  # every collective is spelled through one of these
    needs_names = (names.COLLECTIVES,)
    manual_fix = "call the collective on every rank: move it out of the rank branch"
    examples = (
        Example(
            before="""\
import torch
import torch.distributed as dist

if dist.get_rank() == 0:
    torch.save(model.module.state_dict(), "model.pt")
    dist.barrier()
""",
        ),
        Example(
            before="""\
from ddp_migrate import runtime

def report(correct, seen):
    print(f"accuracy {runtime.weighted_mean(correct, seen):.3f}")

if runtime.is_main_process():
    report(correct, seen)
""",
        ),
        Example(
            before="""\
import torch.distributed as dist

if rank == 0:
    dist.broadcast(config, src=0)
else:
    print("waiting for the configuration")
""",
        ),
        # An early return on the other ranks: the barrier after it is reached by rank 0 alone (a trial's hang).
        Example(
            before="""\
import torch
import torch.distributed as dist

def save_checkpoint(state, path):
    if dist.get_rank() != 0:
        return
    torch.save(state, path)
    dist.barrier()
""",
        ),
        # Rank tests found by data flow (issue 14): a variable, a helper of the file, a conjunction.
        Example(
            before="""\
import os
import torch.distributed as dist
from ddp_migrate import runtime

master_process = int(os.environ.get("RANK", 0)) == 0

def get_rank():
    return dist.get_rank() if dist.is_initialized() else 0

for it in range(4):
    if it % 2 == 0 and master_process:
        runtime.save(state, "ckpt.pt")
    if get_rank() == 0:
        dist.barrier()
""",
        ),
        # A condition the analysis cannot prove is the same on every rank.
        Example(
            before="""\
from ddp_migrate import runtime

for x, y in loader:
    acc = (model(x).argmax(1) == y).float().mean().item()
    if acc > best:
        runtime.save(model.state_dict(), "best.pt")
""",
        ),
        Valid(
            """\
import torch.distributed as dist

if dist.get_rank() == 0:
    dist.gather(t, gather_list=parts, dst=0)
else:
    dist.gather(t, dst=0)
if args.local_rank not in [-1, 0]:
    dist.barrier()
dataset = load_and_cache(args)
if args.local_rank == 0:
    dist.barrier()
if args.local_rank != -1:
    dist.barrier()
"""
        ),
        # Conditions every rank answers alike, a reduced metric, a self-recursive helper.
        Valid(
            """\
import argparse
import torch.distributed as dist
from torch.utils.data import DataLoader
from ddp_migrate import runtime

args = argparse.ArgumentParser().parse_args()
loader = DataLoader(dataset, batch_size=args.batch_size)
best = 0.0

def flatten(h):
    return h if isinstance(h, int) else tuple(flatten(v) for v in h)

def checkpoint(path):
    flatten((1, (2, 3)))
    runtime.save(state, path)

for epoch in range(args.epochs):
    for i, (x, y) in enumerate(loader):
        if i % 10 == 0:
            dist.barrier()
    acc = runtime.reduce_mean(correct)
    if acc > best and epoch % 5 == 0:
        checkpoint("best.pt")
"""
        ),
    )

    def matches(self, analysis: ScriptAnalysis) -> Iterator[Match]:
        facts = rank_facts(analysis)
        collectives = analysis.calls_to(names.COLLECTIVES)
        placed = [(call, [c for c in facts.conditions(call) if c.splits_ranks]) for call in collectives]
        for call, conditions in placed:
            targets = analysis.qualified_names(call.func) & names.COLLECTIVES
            for condition in conditions:
                if isinstance(condition.owner, cst.If) and condition.in_body is not None:
                    other = condition.owner.orelse if condition.in_body else condition.owner.body
                    if _branch_has(analysis, other, targets):
                        continue  # both branches make the call: every rank takes one of them
                if self._paired(facts, call, targets, condition, placed):
                    break
                yield Match(call, f"{_call_name(call)}() is a collective but {_where(condition)}", fixable=False)
                break
            else:
                outer = self._caller_condition(facts, call)
                if outer is not None:
                    yield Match(
                        call,
                        f"{_call_name(call)}() is a collective in a function whose call {_where(outer)}",
                        fixable=False,
                    )
                    continue
                function = analysis.enclosing_function(call)
                decorator = next(
                    (d.decorator for d in (function.decorators if function is not None else ()) if facts.decorator_guard(d.decorator) is not None),
                    None,
                )
                if decorator is not None:  # ``@rank_zero_only def log_metrics(): dist.all_reduce(...)``
                    yield Match(
                        call,
                        f"{_call_name(call)}() is a collective in a function that @{code_of(decorator)} runs on rank 0 "
                        "only: the other ranks never call it and the job hangs",
                        fixable=False,
                    )

    def _paired(
        self,
        facts: RankFacts,
        call: cst.Call,
        targets: set[str],
        condition: Condition,
        placed: list[tuple[cst.Call, list[Condition]]],
    ) -> bool:
        """Whether the call pairs up with the same collective under the opposite rank test in its function."""
        analysis = facts.analysis
        if not isinstance(condition.owner, cst.If) or condition.in_body is None:
            return False
        side = facts.zero_side(condition.test)  # type: ignore[arg-type]
        if side is None:
            return False
        side = side if condition.in_body else not side
        function = analysis.enclosing_function(call)
        for other, conditions in placed:
            if other is call or not conditions or analysis.enclosing_function(other) is not function:
                continue
            if not targets & analysis.qualified_names(other.func):
                continue
            nearest = conditions[0]
            if nearest.owner is condition.owner or not isinstance(nearest.owner, cst.If) or nearest.in_body is None:
                continue
            other_side = facts.zero_side(nearest.test)  # type: ignore[arg-type]
            if other_side is not None and (other_side if nearest.in_body else not other_side) != side:
                return True
        return False

    def _caller_condition(self, facts: RankFacts, call: cst.Call) -> Condition | None:
        """A condition that may keep some ranks from calling the function the collective is in (through
        every call site, transitively; bounded)."""
        analysis = facts.analysis
        function = analysis.enclosing_function(call)
        if function is None:
            return None
        for caller in analysis.callers_of(function):
            if analysis.is_inside(caller, function):
                continue  # a recursive call runs only once the function runs
            home = analysis.shared.analysis_of(caller) or analysis  # (a call in another module: its own facts)
            condition = (rank_facts(home) if home is not analysis else facts).unsafe_condition(caller)
            if condition is None:
                continue
            if isinstance(condition.owner, cst.If) and condition.in_body is not None:
                other = condition.owner.orelse if condition.in_body else condition.owner.body
                if other is not None and any(isinstance(n, cst.Call) and home.call_target(n) is function for n in walk(other)):
                    continue  # both branches call the function
            return condition
        return None


def _always_leaves(condition: Condition) -> bool:
    """Whether the branch of an early exit's ``if`` that leaves ends by leaving (``if not nodes: return``),
    rather than only may leave (a ``break`` under an ``if`` of its own)."""
    branch = condition.owner.orelse if condition.in_body else condition.owner.body  # type: ignore[union-attr]
    if type(branch) is cst.Else:
        branch = branch.body  # type: ignore[union-attr]
    body = getattr(branch, "body", None)
    if type(branch) is not cst.IndentedBlock or not body:
        return False
    last = body[-1]
    if type(last) is not cst.SimpleStatementLine:
        return False
    small = last.body[-1]  # type: ignore[attr-defined]
    if type(small) in (cst.Return, cst.Break, cst.Continue, cst.Raise):
        return True
    return type(small) is cst.Expr and type(small.value) is cst.Call and dotted_name(small.value.func) in PROCESS_EXITS  # type: ignore[attr-defined]


def _where(condition: Condition) -> str:
    """Which ranks get to a place under the condition, for a message."""
    test = code_of(condition.test)
    if condition.in_body is None:
        return f"runs only where `{test}` lets it, which may differ between ranks: the others never call it and the job hangs"
    if condition.early_exit and not _always_leaves(condition):
        # ``if val < best: ... else: if bad >= patience: break`` before it: the place is skipped only where the
        # leaving branch leaves, not wherever the test goes that way.
        branch = "its else branch" if condition.in_body else "its body"
        if condition.kind is Kind.RANK:
            return (
                f"runs only on the ranks that do not leave early at the `if {test}:` before it ({branch} may leave "
                "the loop or the function): the others never call it and the job hangs"
            )
        return (
            f"runs only where the `if {test}:` before it does not leave early ({branch} may leave the loop or the "
            "function), which the analysis cannot prove is the same on every rank: if it differs, the others never "
            "call it and the job hangs"
        )
    value = "true" if condition.in_body else "false"
    if condition.kind is Kind.RANK:
        return f"runs only on the ranks for which `{test}` is {value}: the others never call it and the job hangs"
    return (
        f"runs only where `{test}` is {value}, which the analysis cannot prove is the same on every rank: "
        "if it differs, the others never call it and the job hangs"
    )
