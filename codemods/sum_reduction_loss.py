"""DDP039 sum-reduction-loss."""

from __future__ import annotations

from typing import Iterator

import libcst as cst

from . import names
from .analysis import ScriptAnalysis, call_method_name, dotted_name, keyword_argument, tree, walk
from .analysis.script import backward_loss
from .analysis.batch_axis import batch_axis_reduced
from .analysis.legacy import int_value
from .analysis.loaders import loader_facts
from .analysis.per_rank import per_rank_values, shards_training_data, training_batch_values
from .analysis.ranks import calls_feeding_the_losses, draws_per_rank, per_rank_draws
from .base import Change, Example, FixResult, FixSafety, Match, Note, Options, Phase, Rule, Valid
from .edits import Edits, code_of, expression
from .runtime_calls import runtime_name


TODO = (
    "a summed loss divided by a fixed number: DDP averages gradients over the processes, so the update may be "
    "world_size times smaller than the original's; multiply by runtime.world_size() if the divisor is the global batch"
)


SUMMED = (
    "the update shrinks with the number of processes (a .sum() over this process's share of the batch); "
    "multiply the loss by runtime.world_size() if every term of it sums over the batch"
)
SUMMED_TODO = (
    "a loss summed over the batch with .sum(): DDP averages gradients over the processes, so the update is "
    "world_size times smaller than the original's; multiply by runtime.world_size() if every term of the loss sums over the batch"
)


class SumReductionLoss(Rule):
    """Scale a summed loss by the number of processes before ``backward()`` under DDP.

    What it finds: ``backward()`` on a loss computed with ``reduction="sum"`` (a loss module such as
    ``nn.MSELoss(reduction="sum")`` or a functional loss such as ``F.cross_entropy(..., reduction="sum")``,
    also the legacy ``size_average=False``), or a mean multiplied by this process's batch size (``loss * bs``
    with ``bs = x.shape[0]``, also returned in a tuple: YOLOv5's ``ComputeLoss``), in a file that wraps the
    model in DistributedDataParallel.

    Why it is a problem: DDP averages the gradients over the processes. A mean loss is fine (the average of
    the per-shard means is the mean over the global batch), but the gradient of a sum over the global batch
    is the sum, not the average, of the per-shard gradients: with N processes every update is N times
    smaller than the original's, and the training silently changes (measured: weights off by 0.24 with 2
    processes).

    What the fix does: ``(loss * runtime.world_size()).backward()`` (``scaler.scale(loss *
    runtime.world_size())`` with AMP), so the averaged gradient is the original's summed gradient. The loss
    value itself is untouched: what is printed is still this process's shard (DDP038 reports that).

    A summed loss divided by this process's own batch size (``/ len(x)``, ``/ x.size(0)``) is a mean and
    is left alone. Divided by anything else (``/ args.batch_size``: the global batch, or not?) it is
    reported with a TODO: a human must say which.

    A note (no finding): a training loss that averages over the targets it does not ignore
    (``F.cross_entropy(..., ignore_index=pad)``, ``nn.CrossEntropyLoss(ignore_index=-100)``) divides by each
    shard's own count of kept targets; where the shards hold different numbers of them (padding), DDP's
    average of the processes' means differs a little from the original's mean over the whole batch.

    Fix safety: with the global batch kept (the default), the migrated run computes the original's update;
    with ``--batch-size per-process`` it computes the sum over the N times larger global batch.
    """

    code = "DDP039"
    name = "sum-reduction-loss"
    fix_safety = FixSafety.UNSAFE
    phase = Phase.MODULE_ACCESS
    triggers = ("sum", "size_average", "shape[0]", "size(0)", "len(")  # (a mean times the batch size is a sum too)
    manual_fix = "multiply the loss by runtime.world_size() when it is divided by the global batch size"
    requires = names.TRAINING_STEP_WORDS
    needs_names = (names.TRAINING_SCRIPT_NAMES, names.DISTRIBUTED_DATA_PARALLEL)
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
from ddp_migrate import runtime
from torch.nn.parallel import DistributedDataParallel as DDP

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
from ddp_migrate import runtime
from torch.nn.parallel import DistributedDataParallel as DDP

model = DDP(net, device_ids=None)
for x, y in loader:
    scaler.scale(
        0.5 * F.mse_loss(model(x), y, reduction="sum") * runtime.world_size()
    ).backward()
""",
        ),
        Example(
            before="""\
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

model = DDP(net, device_ids=None)
criterion = nn.MSELoss(reduction="sum")
for x, y in loader:
    loss = criterion(model(x), y) / args.batch_size
    loss.backward()
""",
            after="""\
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

model = DDP(net, device_ids=None)
criterion = nn.MSELoss(reduction="sum")
for x, y in loader:
    loss = criterion(model(x), y) / args.batch_size
    # TODO(ddp-migrate): a summed loss divided by a fixed number: DDP averages gradients over the processes, so the update may be world_size times smaller than the original's; multiply by runtime.world_size() if the divisor is the global batch
    loss.backward()
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
    (criterion(model(x), y) / x.size(0)).backward()
    (criterion(model(x), y) * runtime.world_size()).backward()
total = nn.functional.l1_loss(a, b, reduction="sum")
"""
        ),
    )

    def _cases(self, analysis: ScriptAnalysis) -> Iterator[tuple[cst.Call, cst.BaseExpression, str]]:
        """(``backward()`` call, the loss expression to scale, what :meth:`_sums` found) for every summed loss:
        ``"sum"`` is fixed, the others are left to a human."""
        if not any(analysis.is_call_to(w, names.DISTRIBUTED_DATA_PARALLEL) for w in analysis.program_wrap_calls):
            return
        if not shards_training_data(analysis) and per_rank_draws(analysis):
            return  # (each rank draws its own batches, seeded from its rank: no batch the migration splits)
        for backward in analysis.backward_calls:
            receiver = backward_loss(backward)
            loss = receiver
            if isinstance(receiver, cst.Call) and call_method_name(receiver) == "scale" and receiver.args:
                loss = receiver.args[0].value
            if _scaled(loss) or _scaled_by_a_name(analysis, loss):
                continue
            kind = self._sums(analysis, loss, backward, depth=0)
            if kind is not None:
                yield backward, loss, kind

    def _sums(self, analysis: ScriptAnalysis, expr: cst.BaseExpression, at: cst.CSTNode, depth: int) -> str | None:
        """``"sum"`` when the expression's value is a summed loss, ``"divided"`` when it is a summed loss
        divided by something other than the shard's own size (a human must look), ``"summed"`` when it holds
        a full ``.sum()`` / ``torch.sum`` of a value computed from this process's batch (a human must look:
        other terms of the loss may be means), ``None`` otherwise."""
        if depth > 3:
            return None
        divisors = [
            n.right for n in walk(expr) if isinstance(n, cst.BinaryOperation) and isinstance(n.operator, (cst.Divide, cst.FloorDivide))
        ]
        if any(_counts_this_batch(d) or _holds_a_count_of_this_batch(analysis, d) or _of_this_batch(analysis, d) for d in divisors):
            # ``criterion(out, y) / len(x)``: a mean over this process's shard, which DDP averages right (also
            # ``/ batch_size`` of a helper whose every caller passes ``x.size(0)``)
            return None
        factors = _product_factors(expr)
        if not divisors and len(factors) > 1 and any(_counts_this_batch(f, first_axis=True) or _holds_a_count_of_this_batch(analysis, f) for f in factors):
            return "sum"  # ``F.mse_loss(out, y) * bs`` with ``bs = x.shape[0]`` (YOLOv5's loss): a mean made a sum again
        found = False
        summed = False  # a ``.sum()`` over the batch, in this expression or in what it reads
        for node in _loss_terms(analysis, expr):
            if not isinstance(node, cst.Call):
                continue
            if _sums_its_loss(analysis, node):
                found = True
                break
            returned = self._returns_sum(analysis, node, depth)
            if returned == "divided":
                return "divided"  # ``sum_loss(out, y, args.batch_size)`` of ``return F.cross_entropy(..., reduction="sum") / batch_size``
            found = returned == "sum"
            if found:
                break
            summed = summed or returned == "summed" or _sums_the_batch(analysis, node)
        if not found:
            function = analysis.enclosing_function(at)
            for node in _loss_terms(analysis, expr):
                if not isinstance(node, cst.Name):
                    continue
                called = _called(analysis, node)
                unpacked = self._unpacked_sum(analysis, function, node, at, depth)
                if unpacked is not None:
                    found = found or unpacked == "sum"
                    summed = summed or unpacked == "summed"
                for assign in analysis.assignments_in(function):
                    if not isinstance(assign, cst.Assign) or (called and isinstance(assign.value, cst.Call)):
                        continue  # (``criterion = nn.CrossEntropyLoss(weight=w)``: its reduction was read above, its weights sum no loss)
                    if not any(dotted_name(t.target) == node.value for t in assign.targets) or not analysis.comes_before(assign, at):
                        continue
                    if _scaled(assign.value) or _scaled_by_a_name(analysis, assign.value):
                        return None  # ``loss = per.sum() * ws`` with ``ws = dist.get_world_size()``: scaled already
                    inner = self._sums(analysis, assign.value, assign, depth + 1)
                    if inner == "divided" or (inner in ("sum", "summed") and divisors):
                        return "divided"
                    if inner == "sum":
                        found = True
                    summed = summed or inner == "summed"
        if not found:
            if summed and divisors and any(_of_this_batch(analysis, d) for d in divisors):
                return None  # ``(loss * mask).sum() / mask.sum()``, Dice: a ratio of this batch's own sums
            return ("divided" if divisors else "summed") if summed else None
        if divisors:
            return "divided"
        terms = _added_terms(expr)
        if len(terms) > 1 and any(self._sums(analysis, term, at, depth + 1) != "sum" for term in terms):
            # ``criterion(out, y) + 0.5 * w.pow(2).sum()``, a summed term beside a mean: scaling the whole loss by
            # the world size would scale the others too (a weight penalty N times heavier)
            return "summed"
        return "sum"

    def _unpacked_sum(self, analysis: ScriptAnalysis, function: cst.FunctionDef | None, name: cst.Name, at: cst.CSTNode, depth: int) -> str | None:
        """:meth:`_sums` of the item a name is unpacked from before ``at``: ``loss, items = compute_loss(pred, y)``
        where the program's ``compute_loss`` returns ``(lbox + lcls) * bs, ...`` (YOLOv5's)."""
        for assign in analysis.assignments_in(function):
            if not isinstance(assign, cst.Assign) or len(assign.targets) != 1 or not isinstance(assign.value, cst.Call):
                continue
            target = assign.targets[0].target
            if not isinstance(target, (cst.Tuple, cst.List)) or not analysis.comes_before(assign, at):
                continue
            position = next((i for i, e in enumerate(target.elements) if isinstance(e.value, cst.Name) and e.value.value == name.value), None)
            function_called = analysis.call_target(assign.value)
            if position is None or function_called is None:
                continue
            home = analysis.shared.analysis_of(function_called) or analysis
            items = [
                r.value.elements[position].value
                for r in analysis.shared.returns(function_called)
                if isinstance(r.value, cst.Tuple) and len(r.value.elements) > position
            ]
            kinds = {self._sums(home, item, item, depth + 1) for item in items}
            if items and kinds <= {"sum", "summed"}:
                return "summed" if "summed" in kinds else "sum"
        return None

    def _returns_sum(self, analysis: ScriptAnalysis, call: cst.Call, depth: int) -> str | None:
        """``"sum"`` when the call runs a function of the program that returns a summed loss (``def
        loss_function(recon, x, mu, logvar): return F.binary_cross_entropy(recon, x, reduction="sum") + kld``),
        not divided by anything; ``"summed"`` when what it returns sums over the batch with ``.sum()`` (a
        triplet loss: ``return torch.sum(F.relu(d_pos - d_neg + margin))``); ``"divided"`` when it divides such a
        sum by something other than this process's batch size (``/ batch_size``, a parameter its callers give
        ``args.batch_size``); ``None`` otherwise."""
        function = analysis.call_target(call)
        if function is None:
            return None
        home = analysis.shared.analysis_of(function) or analysis
        returned = [r for r in analysis.shared.returns(function) if r.value is not None]
        kinds = {self._sums(home, r.value, r, depth + 1) for r in returned}  # type: ignore[arg-type]
        if not returned or not kinds <= {"sum", "summed", "divided"}:
            return None
        if "divided" in kinds:
            return "divided"
        return "summed" if "summed" in kinds else "sum"

    def matches(self, analysis: ScriptAnalysis) -> Iterator[Match]:
        # Scaled only where each process trains on its share: on the whole batch everywhere (a loader left to a
        # human), DDP's average of N equal sums is the sum already, and the scale would make it N times larger.
        sharded = not _trains_on_whole_loaders_only(analysis)
        for backward, loss, kind in self._cases(analysis):
            yield Match(
                backward,
                f"`{code_of(loss)}` sums over the batch, but DDP averages gradients over the processes: "
                + (
                    "the update shrinks with the number of processes; scale the loss by runtime.world_size()"
                    if kind == "sum" and sharded
                    else "once each process trains on its share of the data (its training data is not sharded yet), the "
                    "update shrinks with the number of processes: then scale the loss by runtime.world_size()"
                    if kind == "sum"
                    else SUMMED
                    if kind == "summed"
                    else "divided by something other than this process's batch size, the update may shrink with the number of processes; check the scale"
                ),
                fixable=kind == "sum" and sharded,
            )

    def notes(self, analysis: ScriptAnalysis, options: Options) -> list[Note]:
        """A training loss that is a mean over the targets it does not ignore (``ignore_index=``): each process
        divides by its own count, which differs between shards."""
        if not any(analysis.is_call_to(w, names.DISTRIBUTED_DATA_PARALLEL) for w in analysis.program_wrap_calls):
            return []
        if not shards_training_data(analysis) and training_batch_values(analysis) is None:
            return []  # (a training loader left to a human counts: sharded by hand, each shard's mean is its own)
        feeding = calls_feeding_the_losses(analysis)
        return [
            Note(
                self.code,
                analysis.line(call),
                (IGNORED_TARGETS if keyword_argument(call, "ignore_index") is not None else WEIGHTED_CLASSES).format(call=code_of(call.func)),
            )
            for call in analysis.calls
            if call in feeding and _mean_over_counted_targets(analysis, call)
        ] + [
            Note(self.code, analysis.line(division), WEIGHED_TARGETS.format(division=code_of(division).strip()))
            for division in _means_over_batch_weights(analysis, feeding)
        ]

    def fix(self, analysis: ScriptAnalysis, options: Options) -> FixResult | None:
        edits = Edits(analysis)
        sharded = not _trains_on_whole_loaders_only(analysis)
        for backward, loss, kind in self._cases(analysis):
            if kind == "sum" and not sharded:
                continue  # (left as it is: the review says when to scale it)
            if kind != "sum":
                edits.todo(analysis.statement(backward), SUMMED_TODO if kind == "summed" else TODO)
                continue
            rt = runtime_name(analysis, edits)
            scaled = expression(f"({code_of(loss)}) * {rt}.world_size()")
            assert isinstance(scaled, cst.BinaryOperation)
            if isinstance(loss, (cst.Name, cst.Attribute, cst.Call, cst.Subscript, cst.BinaryOperation)) and not _low_precedence(loss):
                scaled = scaled.with_changes(left=loss)
            if type(backward.func) is cst.Attribute and loss is backward.func.value:  # type: ignore[union-attr]
                scaled = scaled.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
            edits.replace(loss, lambda _updated, scaled=scaled: scaled)
            edits.changes.append(Change(self.code, analysis.line(backward), "summed loss scaled by runtime.world_size() before backward()"))
        return edits.apply(analysis.module) if edits else None


#: The note of a mean weighted by class (``F.cross_entropy(out, y, weight=w)``): divided by the weights of the targets.
WEIGHTED_CLASSES = (
    "{call}(..., weight=...) averages over this process's targets weighted by class (it divides by the sum of their "
    "weights), and DDP then averages the processes' means alike: where the shards hold different classes, each update "
    "differs a little from the original's weighted mean over the whole batch; for the exact mean, sum the loss "
    "(reduction=\"sum\"), divide by the sum of the targets' weights summed across processes (runtime.reduce_sum) and "
    "multiply by runtime.world_size()"
)
#: The note of a mean over the targets not ignored.
IGNORED_TARGETS = (
    "{call}(..., ignore_index=...) averages over the targets this process does not ignore, and DDP then averages "
    "the processes' means alike: where the shards hold different numbers of ignored targets (padding), each "
    "update differs a little from the original's mean over the whole batch; for the exact mean, sum the loss "
    "(reduction=\"sum\"), divide by the count of targets kept summed across processes (runtime.reduce_sum) and "
    "multiply by runtime.world_size()"
)
WEIGHED_TARGETS = (
    "`{division}` divides by this process's own count of targets or sum of weights (boxes, a mask, sample weights): DDP then "
    "averages the processes' means alike, so where the shards' sums differ each update differs a little from the "
    "original's mean over the whole batch; for the exact mean, divide by the sum across processes "
    "(runtime.reduce_sum of the denominator) and multiply by runtime.world_size()"
)


def _means_over_batch_weights(analysis: ScriptAnalysis, feeding: frozenset[cst.Call]) -> list[cst.BinaryOperation]:
    """The divisions of a training loss of this module that divide a sum by a sum of this batch's values
    (``(w * err).sum() / w.sum()``, ``(loss * mask).sum() / mask.sum()``): a mean over the batch's own weights,
    in the statement that binds the loss ``backward()`` is called on, or returned by a function whose call
    feeds such a loss."""
    losses = {
        (analysis.enclosing_function(call), name)
        for call in analysis.backward_calls
        if (name := dotted_name(backward_loss(call))) is not None
    }
    # (the names the loss is computed from in its function: ``Lu = ... / mask.sum()``; ``loss = Lx + lam * Lu``)
    for _ in range(3):
        grown = {
            (function, n.value)
            for function, name in list(losses)
            for assign in analysis.assignments_in(function)
            if isinstance(assign, cst.Assign) and any(dotted_name(t.target) == name for t in assign.targets)
            for n in walk(assign.value)
            if type(n) is cst.Name
        } - losses
        if not grown:
            break
        losses |= grown
    found: list[cst.BinaryOperation] = []
    for node in analysis.preorder:
        if type(node) is not cst.BinaryOperation or type(node.operator) is not cst.Divide:  # type: ignore[attr-defined]
            continue
        # (``criterion(out, y) / lengths.sum()`` of ``criterion = CrossEntropyLoss(reduction="sum")``)
        summed = _sums_something(node.left) or (type(node.left) is cst.Call and _sums_its_loss(analysis, node.left))  # type: ignore[attr-defined, arg-type]
        if not summed or not (_of_this_batch(analysis, node.right) or _counts_joined_targets(analysis, node.right)):  # type: ignore[attr-defined]
            continue
        statement = analysis.statement(node)
        small = statement.body[0] if isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1 else None
        function = analysis.enclosing_function(node)
        if isinstance(small, cst.Assign) and any((function, dotted_name(t.target)) in losses for t in small.targets):
            found.append(node)  # type: ignore[arg-type]
        elif isinstance(small, cst.Return) and function is not None and any(
            call in feeding for call in analysis.callers_in_program(function)
        ):
            found.append(node)  # type: ignore[arg-type]
    return found


def _counts_joined_targets(analysis: ScriptAnalysis, divisor: cst.BaseExpression) -> bool:
    """Whether a divisor counts the targets of this batch's samples joined together (``len(torch.cat(targets))``,
    ``torch.cat(boxes).numel()``, ``sum(len(t) for t in targets)``): a number that varies with the shard, unlike the
    batch's own size (detection losses are averaged over all boxes of the batch)."""
    values = per_rank_values(analysis)
    if values is None:
        return False
    for node in walk(divisor):
        if type(node) is not cst.Call:
            continue
        counted = None
        if dotted_name(node.func) == "len" and node.args and type(node.args[0].value) is cst.Call:  # type: ignore[attr-defined]
            counted = node.args[0].value  # type: ignore[attr-defined]
        elif call_method_name(node) in ("numel", "size") and type(node.func) is cst.Attribute and type(node.func.value) is cst.Call:  # type: ignore[attr-defined]
            counted = node.func.value  # type: ignore[attr-defined]
        if counted is not None and analysis.is_call_to(counted, {"torch.cat", "torch.concat", "torch.concatenate"}) and values.mention(counted) is not None:  # type: ignore[arg-type]
            return True
        if dotted_name(node.func) == "sum" and node.args and type(node.args[0].value) is cst.GeneratorExp:  # type: ignore[attr-defined]
            element = node.args[0].value.elt  # type: ignore[attr-defined]
            if type(element) is cst.Call and dotted_name(element.func) == "len" and values.mention(node.args[0].value.for_in.iter) is not None:  # type: ignore[attr-defined]
                return True
    return False


def _sums_something(expr: cst.BaseExpression) -> bool:
    """Whether an expression ends in a sum (``(w * err).sum()``, ``torch.sum(x)``)."""
    return type(expr) is cst.Call and (call_method_name(expr) == "sum" or dotted_name(expr.func) == "torch.sum")  # type: ignore[attr-defined, arg-type]


#: Losses that skip the targets equal to ``ignore_index`` when they average.
_IGNORING_LOSSES = frozenset({
    "torch.nn.functional.cross_entropy", "torch.nn.functional.nll_loss", "torch.nn.CrossEntropyLoss", "torch.nn.NLLLoss",
})


def _mean_over_counted_targets(analysis: ScriptAnalysis, call: cst.Call) -> bool:
    """Whether a call is a loss (or builds a loss module) that averages over the targets it does not ignore:
    ``F.cross_entropy(..., ignore_index=-100)``, ``nn.CrossEntropyLoss(ignore_index=pad)``, reduction mean."""
    if (keyword_argument(call, "ignore_index") is None and not _class_weighted(call)) or not analysis.is_call_to(call, _IGNORING_LOSSES):
        return False
    reduction = keyword_argument(call, "reduction")
    return reduction is None or (isinstance(reduction.value, cst.SimpleString) and reduction.value.evaluated_value == "mean")


def _class_weighted(call: cst.Call) -> bool:
    """Whether a loss is given class weights (``weight=w``, not ``None``): its mean divides by the sum of the weights
    of this batch's targets, like a count of the targets kept."""
    weight = keyword_argument(call, "weight")
    return weight is not None and not (type(weight.value) is cst.Name and weight.value.value == "None")  # type: ignore[attr-defined]


def _counts_this_batch(divisor: cst.BaseExpression, first_axis: bool = False) -> bool:
    """``len(x)``, ``x.size(0)``, ``x.shape[0]``, ``x.numel()``: a count of this process's own batch; with
    ``first_axis``, only the length of the first axis (``len(x)``, ``x.size(0)``, ``x.shape[0]``)."""
    if isinstance(divisor, cst.Call):
        if isinstance(divisor.func, cst.Name) and divisor.func.value == "len":
            return True
        if first_axis:
            return call_method_name(divisor) == "size" and len(divisor.args) == 1 and code_of(divisor.args[0].value).strip() == "0"
        return call_method_name(divisor) in ("size", "numel")
    if not (isinstance(divisor, cst.Subscript) and isinstance(divisor.value, cst.Attribute) and divisor.value.attr.value == "shape"):
        return False
    return not first_axis or (len(divisor.slice) == 1 and code_of(divisor.slice[0].slice).strip() == "0")


def _product_factors(expr: cst.BaseExpression) -> list[cst.BaseExpression]:
    """The operands of the multiplications an expression is made of at its top (``(a + b) * bs`` gives ``a + b``
    and ``bs``; not the products inside a call's arguments)."""
    if isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, cst.Multiply):
        return _product_factors(expr.left) + _product_factors(expr.right)
    return [expr]


def _trains_on_whole_loaders_only(analysis: ScriptAnalysis) -> bool:
    """Whether the program's training loaders are all left whole (none has a ``DistributedSampler``: one the
    migration could not rewrite, left to a human), so every process still trains on the whole batch."""
    training = [(module, loader) for module in analysis.shared.analyses for loader in loader_facts(module).training_loaders]
    if not training:
        # No loader: batches cut from tensors in ``for i in range(...)`` steps, nothing drawn or cut by the rank:
        # every process trains on the same data (DDP040's review) until a human shards it.
        return not analysis.program_loader_calls and _steps_over_ranges_only(analysis) and not draws_per_rank(analysis)
    # (a data set cut by the rank, ``Subset(ds, range(rank, n, world))``, is sharded as a sampler's is)
    return not shards_training_data(analysis) and not any(loader_facts(m).sharded_by_hand(loader) for m, loader in training)


def _steps_over_ranges_only(analysis: ScriptAnalysis) -> bool:
    """Whether every ``backward()`` of the module runs in a loop over ``range(...)`` (or a ``while`` loop): its
    batches are made by hand, not drawn from an iterable the analysis does not know (a loader of another program)."""
    backward = analysis.backward_calls
    return bool(backward) and all(
        (loop := analysis.nearest_loop(call)) is not None
        and (type(loop) is cst.While or (type(loop.iter) is cst.Call and dotted_name(loop.iter.func) == "range"))  # type: ignore[union-attr]
        for call in backward
    )


def _holds_a_count_of_this_batch(analysis: ScriptAnalysis, expr: cst.BaseExpression) -> bool:
    """Whether a name only ever holds a count of this process's batch (``bs = x.shape[0]``, ``n = len(images)``)."""
    if not isinstance(expr, cst.Name):
        return False
    values = analysis.flows_into(expr, expr.value)
    return bool(values) and all(isinstance(v, cst.BaseExpression) and _counts_this_batch(v, first_axis=True) for v in values)


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


#: Keywords of ``Tensor.sum`` / ``torch.sum`` that sum over some dimensions only.
_DIMENSIONS = ("dim", "axis")


#: Calls whose value is a gradient, not what they are given (``torch.autograd.grad(critic(x).sum(), x)``: the
#: sum only gathers each sample's own gradient, the WGAN-GP penalty).
_GRADIENT_CALLS = frozenset({"torch.autograd.grad"})


def _loss_terms(analysis: ScriptAnalysis, expr: cst.BaseExpression) -> Iterator[cst.CSTNode]:
    """The nodes of a loss expression that make its value: not the inside of a term multiplied by a literal zero
    (``out.sum() * 0``, a loss that keeps the graph on a batch with no label) nor of a gradient call."""
    stack: list[cst.CSTNode] = [expr]
    while stack:
        node = stack.pop()
        if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Multiply) and (_is_zero(node.left) or _is_zero(node.right)):
            continue
        if isinstance(node, cst.Call) and analysis.is_call_to(node, _GRADIENT_CALLS):
            continue
        yield node
        stack.extend(reversed(tree.children(node)))


def _sums_its_loss(analysis: ScriptAnalysis, call: cst.Call) -> bool:
    """Whether the call is a loss with ``reduction="sum"``, or runs a loss module built so (``criterion(out, y)`` of
    ``criterion = nn.MSELoss(reduction="sum")``)."""
    return _sum_reduction(call) or any(isinstance(o, cst.Call) and _sum_reduction(o) for o in analysis.origins(call.func))


def _added_terms(expr: cst.BaseExpression) -> list[cst.BaseExpression]:
    """The terms a loss adds up (``a + b - c``: a, b and c; a parenthesised sum is one term of a product)."""
    if isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, (cst.Add, cst.Subtract)) and not expr.lpar:
        return [*_added_terms(expr.left), *_added_terms(expr.right)]
    return [expr]


def _called(analysis: ScriptAnalysis, name: cst.Name) -> bool:
    """Whether the name is what a call calls (``criterion`` of ``criterion(out, y)``)."""
    parent = analysis.parent(name)
    return isinstance(parent, cst.Call) and parent.func is name


def _is_zero(expr: cst.BaseExpression) -> bool:
    """Whether an expression is the literal ``0`` or ``0.0``."""
    return isinstance(expr, (cst.Integer, cst.Float)) and float(expr.evaluated_value) == 0.0


def _sums_the_batch(analysis: ScriptAnalysis, call: cst.Call) -> bool:
    """``t.sum()`` or ``torch.sum(t)`` over every dimension, of a value computed from this process's batch
    (:mod:`per_rank <ddp_migrate.codemods.analysis.per_rank>`: not an L2 penalty over the parameters)."""
    positional = [a for a in call.args if a.keyword is None and not a.star]
    dims = [a.value for a in call.args if a.keyword is not None and a.keyword.value in _DIMENSIONS]
    if analysis.is_call_to(call, {"torch.sum"}):
        if not 1 <= len(positional) <= 2:
            return False
        summed: cst.BaseExpression = positional[0].value
        dims += [a.value for a in positional[1:]]
    elif (
        isinstance(call.func, cst.Attribute)
        and call.func.attr.value == "sum"
        and len(positional) <= 1
        and not any(q.startswith(_LIBRARY_FUNCTIONS) for q in analysis.qualified_names(call.func))
    ):
        summed = call.func.value
        dims += [a.value for a in positional]
    else:
        return False
    if dims and not (len(dims) == 1 and _over_the_batch(dims[0])):
        return False
    if _counts(summed) or _made_a_number(analysis, call):
        return False  # ``(loss > thresh).sum()``, ``int(x.sum())``: a count of samples, no loss term
    if batch_axis_reduced(analysis, summed) is not None:
        return False  # ``(usage.mean(0) ** 2).sum()``: the batch axis is gone, the sum is over what is left
    if _holds_means(analysis, summed, call):
        return False
    values = per_rank_values(analysis)
    return values is not None and values.mention(summed) is not None


def _counts(expr: cst.BaseExpression) -> bool:
    """Whether a summed value is a test of each element (``loss > 0.5``, ``(pred == y).float()``): its sum counts."""
    while type(expr) is cst.Call and type(expr.func) is cst.Attribute and expr.func.attr.value in ("float", "int", "long", "double", "to"):  # type: ignore[attr-defined]
        expr = expr.func.value  # type: ignore[attr-defined]
    return type(expr) is cst.Comparison


def _made_a_number(analysis: ScriptAnalysis, call: cst.Call) -> bool:
    """Whether the sum is made a Python number (``int(x.sum())``, ``x.sum().item()``): it carries no gradient."""
    parent = analysis.parent(call)
    if type(parent) is cst.Arg:
        outer = analysis.parent(parent)
        return type(outer) is cst.Call and dotted_name(outer.func) in ("int", "float")  # type: ignore[attr-defined]
    return type(parent) is cst.Attribute and parent.attr.value in ("item", "tolist") and type(analysis.parent(parent)) is cst.Call  # type: ignore[attr-defined]


def _over_the_batch(dims: cst.BaseExpression) -> bool:
    """Whether a tuple of dimensions sums over the batch whether it comes first or second (``(0, 1)``: the batch
    and the positions of a batch-first or a sequence-first tensor)."""
    if not isinstance(dims, (cst.Tuple, cst.List)):
        return False
    return {0, 1} <= {int_value(e.value) for e in dims.elements}


#: Module functions spelled like a method (``np.sum(x)`` is ``numpy.sum``; ``losses.sum()`` is a tensor's).
_LIBRARY_FUNCTIONS = ("numpy.", "torch.", "math.", "builtins.", "jax.")
#: Calls whose value is a stack of values, or a loss reduced to its mean (``F.cross_entropy(out, y)``).
_STACKS = frozenset({"torch.stack", "torch.cat", "torch.tensor", "torch.hstack", "torch.vstack"})


def _holds_means(analysis: ScriptAnalysis, summed: cst.BaseExpression, call: cst.Call) -> bool:
    """Whether a summed value is a stack of losses or a loss already reduced to a mean (``torch.stack([ce, mse]).sum()``,
    ``F.cross_entropy(out, y).sum()``, ``loss = ce(out, y)`` then ``loss = loss.sum()``): its sum adds means, it
    does not sum over the batch."""
    flows = analysis.flows_into(summed, summed.value) if isinstance(summed, cst.Name) else [summed]
    values = [v for v in flows if not any(n is call for n in walk(v))]  # (not ``loss = loss.sum()`` itself)
    if not values:
        return False
    for value in values:
        if not isinstance(value, cst.Call):
            return False
        if analysis.is_call_to(value, _STACKS) or call_method_name(value) == "mean":
            continue
        is_loss = any(_is_reducing_loss(q) for q in analysis.qualified_names(value.func))
        reduction = keyword_argument(value, "reduction")
        if not (is_loss and (reduction is None or (isinstance(reduction.value, cst.SimpleString) and reduction.value.evaluated_value == "mean"))):
            return False
    return True


def _is_reducing_loss(qualified: str) -> bool:
    """A functional loss of torch that reduces to the mean unless told otherwise (``F.cross_entropy``,
    ``F.mse_loss``; not ``F.relu``)."""
    module, _, name = qualified.rpartition(".")
    return module == "torch.nn.functional" and (name.endswith("_loss") or name in _REDUCING_LOSSES)


#: The functional losses whose names do not end in ``_loss``.
_REDUCING_LOSSES = frozenset({"cross_entropy", "binary_cross_entropy", "binary_cross_entropy_with_logits", "kl_div"})


def _of_this_batch(analysis: ScriptAnalysis, divisor: cst.BaseExpression) -> bool:
    """Whether a divisor is computed from this process's batch (``mask.sum()``, ``p.sum() + t.sum()``)."""
    values = per_rank_values(analysis)
    # (a loader left unsharded for a human: its batches are still this process's own, bound by the loop)
    batch_names = analysis.derived(
        "names loader loops bind", lambda module: {name for loop in module.loader_loops for _, name in module.names_in_target(loop.loop.target)}
    )

    def of_the_batch(expr: cst.BaseExpression) -> bool:
        return (values is not None and values.mention(expr) is not None) or any(
            type(n) is cst.Name and n.value in batch_names for n in walk(expr)  # type: ignore[attr-defined]
        )

    return any(
        isinstance(n, cst.Call) and call_method_name(n) == "sum" and isinstance(n.func, cst.Attribute) and of_the_batch(n.func.value)
        or isinstance(n, cst.Call) and analysis.is_call_to(n, {"torch.sum"}) and bool(n.args) and of_the_batch(n.args[0].value)
        for n in walk(divisor)
    )


def _scaled_by_a_name(analysis: ScriptAnalysis, loss: cst.BaseExpression) -> bool:
    """Whether the loss is multiplied by a name that holds the world size (``ws = dist.get_world_size()``)."""
    for node in walk(loss):
        if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Multiply):
            for side in (node.left, node.right):
                if isinstance(side, cst.Name) and any(_scaled(v) for v in analysis.flows_into(side, side.value) if isinstance(v, cst.BaseExpression)):
                    return True
    return False
