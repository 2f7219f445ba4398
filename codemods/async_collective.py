"""DDP035 unwaited-async-collective."""

from __future__ import annotations

from typing import Iterator

import libcst as cst

from . import names
from .analysis import ScriptAnalysis, dotted_name, is_true, keyword_argument, walk
from .base import Example, Match, Phase, Rule, Severity, Valid

#: Operations whose first argument receives the result, so reading it before ``wait()`` reads garbage.
WRITES_FIRST_ARGUMENT = frozenset(
    q
    for name in (
        "all_reduce",
        "reduce",
        "broadcast",
        "all_gather",
        "all_gather_into_tensor",
        "reduce_scatter",
        "reduce_scatter_tensor",
        "scatter",
        "all_to_all",
        "all_to_all_single",
        "irecv",
    )
    for q in names.distributed(name)
)


def _function_name(call: cst.Call) -> str:
    func = call.func
    return func.attr.value if isinstance(func, cst.Attribute) else func.value if isinstance(func, cst.Name) else "collective"


class UnwaitedAsyncCollective(Rule):
    """Wait for an asynchronous collective before using its result.

    What it finds: a ``torch.distributed`` collective called with ``async_op=True`` (or ``isend`` /
    ``irecv``, which are always asynchronous) whose work handle is thrown away, is assigned to a name
    that is never ``.wait()``-ed, or is waited for only after the tensor it fills has been read.

    Why it is a problem: with ``async_op=True`` the call returns as soon as the operation is queued. Until
    ``work.wait()`` returns, the tensor may still hold this rank's own value or a half-reduced one, so
    a metric or a weight read too early differs between ranks and from run to run; and a handle nobody
    waits for lets the script reach the next collective (or exit) with the operation still in flight.

    What a human must do: keep the handle and call ``handle.wait()`` before the tensor is read (for
    several operations, collect the handles and wait for all of them), or drop ``async_op=True`` when
    nothing useful happens in between. Where the wait belongs depends on what the code overlaps with the
    communication, so the tool does not move code.
    """

    code = "DDP035"
    name = "unwaited-async-collective"
    phase = Phase.CLEANUP
    severity = Severity.WARNING
    triggers = ("async_op", "isend", "irecv")
    needs_names = (names.TORCH_COLLECTIVES | names.TORCH_ASYNC_POINT_TO_POINT,)
    manual_fix = "keep the work handle and call .wait() on it before reading the tensor"
    examples = (
        Example(
            before="""\
import torch.distributed as dist

dist.all_reduce(total, op=dist.ReduceOp.SUM, async_op=True)
print(total.item() / dist.get_world_size())
""",
        ),
        Example(
            before="""\
from torch.distributed import all_reduce

def mean_loss(loss):
    work = all_reduce(loss, async_op=True)
    value = loss.item()
    work.wait()
    return value
""",
        ),
        Valid(
            """\
import torch.distributed as dist

work = dist.all_reduce(total, async_op=True)
optimizer.zero_grad()
work.wait()
print(total.item())
handles = [dist.all_reduce(t, async_op=True) for t in grads]
dist.broadcast(weights, src=0, async_op=True).wait()
"""
        ),
    )

    def matches(self, analysis: ScriptAnalysis) -> Iterator[Match]:
        for call in analysis.calls_to(names.TORCH_COLLECTIVES | names.TORCH_ASYNC_POINT_TO_POINT):
            flag = keyword_argument(call, "async_op")
            if not (analysis.is_call_to(call, names.TORCH_ASYNC_POINT_TO_POINT) or (flag is not None and is_true(flag.value))):
                continue
            message = self._problem(analysis, call)
            if message:
                yield Match(call, message, fixable=False)

    def _problem(self, analysis: ScriptAnalysis, call: cst.Call) -> str | None:
        function = _function_name(call)
        parent = analysis.parent(call)
        if isinstance(parent, cst.Expr):
            return f"{function}() runs asynchronously and its work handle is discarded: nothing waits for the result; keep the handle and call .wait() before reading the tensor"
        if not isinstance(parent, cst.Assign) or len(parent.targets) != 1 or not isinstance(parent.targets[0].target, cst.Name):
            return None  # chained .wait(), or the handle goes into a list, an attribute, an argument: followed elsewhere
        handle = parent.targets[0].target.value
        statement = analysis.statement(call)
        scope = analysis.scope_of(call)
        waits: list[cst.CSTNode] = []
        for use in walk(scope):
            if not (isinstance(use, cst.Name) and use.value == handle) or use is parent.targets[0].target:
                continue
            if analysis.scope_of(use) is not scope or not analysis.comes_before(statement, use):
                continue
            holder = analysis.parent(use)
            if isinstance(holder, cst.Attribute) and holder.attr.value == "wait" and isinstance(analysis.parent(holder), cst.Call):
                waits.append(use)
            elif not (isinstance(holder, cst.Attribute) and holder.attr.value == "is_completed"):
                return None  # the handle is handed on (returned, stored, passed): waited for elsewhere
        if not waits:
            return f"{function}() runs asynchronously and {handle}.wait() is never called: the result may not have arrived when the tensor is read"
        if not analysis.is_call_to(call, WRITES_FIRST_ARGUMENT) or not call.args or call.args[0].keyword is not None:
            return None
        tensor = dotted_name(call.args[0].value)
        if tensor is None:
            return None
        first_wait = min(waits, key=lambda node: analysis.span(node)[0])
        for read in walk(scope):
            if not isinstance(read, (cst.Name, cst.Attribute)) or dotted_name(read) != tensor:
                continue
            if analysis.scope_of(read) is scope and analysis.comes_before(statement, read) and analysis.comes_before(read, first_wait):
                if analysis.is_inside(read, statement):
                    continue
                return f"{tensor} is read before {handle}.wait(): it may still hold a partial result of the asynchronous {function}()"
        return None
