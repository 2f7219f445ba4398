"""DDP039 sum-reduction-loss."""

from __future__ import annotations

from typing import Iterator

import libcst as cst

from . import names
from .analysis import ScriptAnalysis, call_method_name, dotted_name, keyword_argument, walk
from .base import Change, Example, FixResult, Match, Options, Phase, Rule, Valid
from .edits import Edits, code_of, expression
from .runtime_calls import runtime_name


class SumReductionLoss(Rule):
    """Scale a summed loss by the number of processes before ``backward()`` under DDP.

    What it finds: ``backward()`` on a loss computed with ``reduction="sum"`` (a loss module such as
    ``nn.MSELoss(reduction="sum")`` or a functional loss such as ``F.cross_entropy(..., reduction="sum")``,
    also the legacy ``size_average=False``) in a file that wraps the model in DistributedDataParallel.

    Why it is a problem: DDP averages the gradients over the processes. A mean loss is fine (the average of
    the per-shard means is the mean over the global batch), but the gradient of a sum over the global batch
    is the sum, not the average, of the per-shard gradients: with N processes every update is N times
    smaller than the original's, and the training silently changes (measured: weights off by 0.24 with 2
    processes).

    What the fix does: ``(loss * runtime.world_size()).backward()`` (``scaler.scale(loss *
    runtime.world_size())`` with AMP), so the averaged gradient is the original's summed gradient. The loss
    value itself is untouched: what is printed is still this process's shard (DDP038 reports that).

    Fix safety: with the global batch kept (the default), the migrated run computes the original's update.
    """

    code = "DDP039"
    name = "sum-reduction-loss"
    phase = Phase.MODULE_ACCESS
    triggers = ("sum", "size_average")
    examples = (
        Example(
            before="""\
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

model = DDP(net, device_ids=None)
criterion = nn.MSELoss(reduction="sum")
for x, y in loader:
    loss = criterion(model(x), y)
    loss.backward()
""",
            after="""\
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from ddp_migrate import runtime

model = DDP(net, device_ids=None)
criterion = nn.MSELoss(reduction="sum")
for x, y in loader:
    loss = criterion(model(x), y)
    (loss * runtime.world_size()).backward()
""",
        ),
        Example(
            before="""\
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

model = DDP(net, device_ids=None)
for x, y in loader:
    scaler.scale(0.5 * F.mse_loss(model(x), y, reduction="sum")).backward()
""",
            after="""\
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from ddp_migrate import runtime

model = DDP(net, device_ids=None)
for x, y in loader:
    scaler.scale(0.5 * F.mse_loss(model(x), y, reduction="sum") * runtime.world_size()).backward()
""",
        ),
        Valid(
            """\
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

model = DDP(net, device_ids=None)
criterion = nn.MSELoss(reduction="sum")
for x, y in loader:
    loss = criterion(model(x), y) / len(x)
    loss.backward()
    (criterion(model(x), y) * runtime.world_size()).backward()
total = nn.functional.l1_loss(a, b, reduction="sum")
"""
        ),
    )

    def _cases(self, analysis: ScriptAnalysis) -> Iterator[tuple[cst.Call, cst.BaseExpression]]:
        """(``backward()`` call, the loss expression to scale) for every summed loss."""
        if not any(analysis.is_call_to(w, names.DISTRIBUTED_DATA_PARALLEL) for w in analysis.wrap_calls):
            return
        for backward in analysis.backward_calls:
            receiver = backward.func.value  # type: ignore[union-attr]
            loss = receiver
            if isinstance(receiver, cst.Call) and call_method_name(receiver) == "scale" and receiver.args:
                loss = receiver.args[0].value
            if _scaled(loss):
                continue
            if self._sums(analysis, loss, backward, depth=0):
                yield backward, loss

    def _sums(self, analysis: ScriptAnalysis, expr: cst.BaseExpression, at: cst.CSTNode, depth: int) -> bool:
        """Whether the expression's value is a summed loss that nothing divides (following local names)."""
        if depth > 3:
            return False
        if any(isinstance(n, cst.BinaryOperation) and isinstance(n.operator, (cst.Divide, cst.FloorDivide)) for n in walk(expr)):
            return False  # ``loss / len(x)``: normalised by hand, leave it to a human
        for node in walk(expr):
            if isinstance(node, cst.Call) and (_sum_reduction(node) or any(
                isinstance(o, cst.Call) and _sum_reduction(o) for o in analysis.origins(node.func)
            )):
                return True
        function = analysis.enclosing_function(at)
        for node in walk(expr):
            if not isinstance(node, cst.Name):
                continue
            for assign in analysis.assignments:
                if not isinstance(assign, cst.Assign) or analysis.enclosing_function(assign) is not function:
                    continue
                if not analysis.comes_before(assign, at):
                    continue
                if any(dotted_name(t.target) == node.value for t in assign.targets):
                    if self._sums(analysis, assign.value, assign, depth + 1):
                        return True
        return False

    def matches(self, analysis: ScriptAnalysis) -> Iterator[Match]:
        for backward, loss in self._cases(analysis):
            yield Match(
                backward,
                f"`{code_of(loss)}` sums over the batch, but DDP averages gradients over the processes: "
                "the update shrinks with the number of processes; scale the loss by runtime.world_size()",
            )

    def fix(self, analysis: ScriptAnalysis, options: Options) -> FixResult | None:
        edits = Edits(analysis.module.code)
        for backward, loss in self._cases(analysis):
            rt = runtime_name(analysis, edits)
            scaled = expression(f"({code_of(loss)}) * {rt}.world_size()")
            assert isinstance(scaled, cst.BinaryOperation)
            if isinstance(loss, (cst.Name, cst.Attribute, cst.Call, cst.Subscript, cst.BinaryOperation)) and not _low_precedence(loss):
                scaled = scaled.with_changes(left=loss)
            if loss is backward.func.value:  # type: ignore[union-attr]
                scaled = scaled.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
            edits.replace(loss, lambda _updated, scaled=scaled: scaled)
            edits.changes.append(Change(self.code, analysis.line(backward), "summed loss scaled by runtime.world_size() before backward()"))
        return edits.apply(analysis.module) if edits else None


def _sum_reduction(call: cst.Call) -> bool:
    reduction = keyword_argument(call, "reduction")
    if reduction is not None and isinstance(reduction.value, cst.SimpleString) and reduction.value.evaluated_value == "sum":
        return True
    size_average = keyword_argument(call, "size_average")
    return size_average is not None and isinstance(size_average.value, cst.Name) and size_average.value.value == "False"


def _scaled(loss: cst.BaseExpression) -> bool:
    """Whether the loss is already multiplied by the world size (a fixed point)."""
    return any(
        isinstance(n, cst.Call) and call_method_name(n) in ("world_size", "get_world_size") for n in walk(loss)
    )


def _low_precedence(expr: cst.BaseExpression) -> bool:
    """Whether ``expr * k`` would bind differently than ``(expr) * k``: a sum or difference at the top."""
    return isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, (cst.Add, cst.Subtract)) and not expr.lpar
