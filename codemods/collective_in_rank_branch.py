"""DDP033 collective-in-rank-branch."""

from __future__ import annotations

from typing import Iterator

import libcst as cst

from . import names
from .analysis import ScriptAnalysis, dotted_name, walk
from .base import Example, Match, Phase, Rule, Severity, Valid
from .edits import code_of


def _call_name(call: cst.Call) -> str:
    return dotted_name(call.func) or "collective"


def _zero_side(analysis: ScriptAnalysis, test: cst.BaseExpression) -> bool | None:
    """Whether an ``if`` body runs on rank 0 only (``True``), on the other ranks only (``False``), or unknown.

    Recognises ``rank == 0``, ``rank != 0``, ``rank > 0``, ``rank in (-1, 0)``, ``rank not in [-1, 0]``,
    ``is_main_process()`` and ``not`` of any of these.
    """
    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        inner = _zero_side(analysis, test.expression)
        return None if inner is None else not inner
    if isinstance(test, cst.Call) and analysis.is_call_to(test, names.RUNTIME_MAIN_CHECK):
        return True
    if isinstance(test, (cst.Name, cst.Attribute)) and (dotted_name(test) or "").split(".")[-1] in ("is_main", "is_master", "is_main_process", "main_process"):
        return True
    if isinstance(test, cst.Comparison) and len(test.comparisons) == 1:
        operator, comparator = test.comparisons[0].operator, test.comparisons[0].comparator
        zero = isinstance(comparator, cst.Integer) and comparator.value == "0"
        holds_zero = isinstance(comparator, (cst.List, cst.Tuple, cst.Set)) and any(
            isinstance(e.value, cst.Integer) and e.value.value == "0" for e in comparator.elements
        )
        if (zero and isinstance(operator, cst.Equal)) or (holds_zero and isinstance(operator, cst.In)):
            return True
        if (zero and isinstance(operator, (cst.NotEqual, cst.GreaterThan))) or (holds_zero and isinstance(operator, cst.NotIn)):
            return False
    return None


def _branch_has(analysis: ScriptAnalysis, branch: cst.CSTNode | None, targets: set[str]) -> bool:
    """Whether a branch of an ``if`` calls one of the qualified names (``None``: a missing ``else``)."""
    return branch is not None and any(isinstance(n, cst.Call) and analysis.is_call_to(n, targets) for n in walk(branch))


class CollectiveInRankBranch(Rule):
    """Call collectives on every rank: never inside a branch that only some ranks take.

    What it finds: a barrier or collective (``torch.distributed.barrier``, ``all_reduce``, ``all_gather``,
    ``broadcast``, ``reduce``, ``gather``, ``scatter``, ``new_group``, ...) or a runtime helper that runs one
    (``runtime.save``, ``runtime.barrier``, ``runtime.reduce_sum`` / ``reduce_mean`` / ``weighted_mean``)
    inside one branch of a rank test (``if rank == 0:``, ``if runtime.is_main_process():``, ``if
    args.local_rank != 0:``) when the other branch does not make the same call, or in a function that is
    only called under such a test. Tests that all ranks answer alike (``if local_rank != -1:``) are not
    rank tests. Two barriers that pair up across opposite tests in one function (``if rank != 0:
    barrier()`` ... ``if rank == 0: barrier()``, the "let rank 0 download first" idiom) are recognised and
    left alone.

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
    )

    def matches(self, analysis: ScriptAnalysis) -> Iterator[Match]:
        collectives = analysis.calls_to(names.COLLECTIVES)
        placed = [(call, list(analysis.rank_branches(call))) for call in collectives]
        for call, branches in placed:
            targets = analysis.qualified_names(call.func) & names.COLLECTIVES
            for branch_if, in_body in branches:
                other = branch_if.orelse if in_body else branch_if.body
                if _branch_has(analysis, other, targets):
                    continue  # both branches make the call: every rank takes one of them
                if self._paired(analysis, call, targets, branch_if, in_body, placed):
                    break
                yield Match(
                    call,
                    f"{_call_name(call)}() is a collective but runs only on the ranks for which "
                    f"`{code_of(branch_if.test)}` is {'true' if in_body else 'false'}: the others never call it and the job hangs",
                    fixable=False,
                )
                break
            else:
                guard = self._guarded_function(analysis, call)
                if guard is not None:
                    yield Match(
                        call,
                        f"{_call_name(call)}() is a collective in a function called only under "
                        f"`{code_of(guard.test)}`: the other ranks never call it and the job hangs",
                        fixable=False,
                    )

    def _paired(
        self,
        analysis: ScriptAnalysis,
        call: cst.Call,
        targets: set[str],
        branch_if: cst.If,
        in_body: bool,
        placed: list[tuple[cst.Call, list[tuple[cst.If, bool]]]],
    ) -> bool:
        """Whether the call pairs up with the same collective under the opposite rank test in its function."""
        side = _zero_side(analysis, branch_if.test)
        if side is None:
            return False
        side = side if in_body else not side
        function = analysis.enclosing_function(call)
        for other, branches in placed:
            if other is call or not branches or analysis.enclosing_function(other) is not function:
                continue
            if not targets & analysis.qualified_names(other.func):
                continue
            other_if, other_in_body = branches[0]
            other_side = _zero_side(analysis, other_if.test)
            if other_if is not branch_if and other_side is not None and (other_side if other_in_body else not other_side) != side:
                return True
        return False

    def _guarded_function(self, analysis: ScriptAnalysis, call: cst.Call) -> cst.If | None:
        """The rank test around every call of the function the collective is in (when there is one)."""
        function = analysis.enclosing_function(call)
        callers = analysis.callers_of(function) if function is not None else []
        if not callers:
            return None
        guards = []
        for caller in callers:
            branches = list(analysis.rank_branches(caller))
            if not branches:
                return None
            branch_if, in_body = branches[0]
            other = branch_if.orelse if in_body else branch_if.body
            if other is not None and any(isinstance(n, cst.Call) and analysis.call_target(n) is function for n in walk(other)):
                return None
            guards.append(branch_if)
        return guards[0]
