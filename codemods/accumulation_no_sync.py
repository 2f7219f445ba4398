"""DDP031 accumulation-without-no-sync."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Iterator, Sequence

import libcst as cst

from . import names
from .analysis import ScriptAnalysis, call_method_name, dotted_name, tree, walk
from .base import Change, Example, FixResult, FixSafety, Match, Options, Phase, Rule, Severity, Valid
from .edits import Edits, code_of, statement
from .runtime_calls import nullcontext_name

#: Calls that read or change gradients, which hold only this process's share inside ``no_sync()``.
GRADIENT_READERS = frozenset({"clip_grad_norm_", "clip_grad_value_", "clip_grad_norm", "unscale_"})
#: Expressions an accumulation test may be made of, so it can be evaluated earlier with the same result.
PURE_NODES = (
    cst.Name,
    cst.Attribute,
    cst.Integer,
    cst.BinaryOperation,
    cst.UnaryOperation,
    cst.Comparison,
    cst.ComparisonTarget,
    cst.BaseBinaryOp,
    cst.BaseUnaryOp,
    cst.BaseCompOp,
    cst.LeftParen,
    cst.RightParen,
    cst.BaseParenthesizableWhitespace,
    cst.Dot,
)


@dataclass(frozen=True)
class Accumulation:
    """A loop that calls ``backward()`` every step and steps the optimizer under ``gate`` only."""

    loop: cst.For
    backward: cst.Call
    gate: cst.If
    model: str
    #: The block holding the statements to wrap (``start`` … ``end``, inclusive) and the gate; ``None`` when
    #: the rewrite would not be safe.
    block: cst.IndentedBlock | None = None
    start: int = 0
    end: int = 0
    #: An optimizer step after the loop (``if len(loader) % k: optimizer.step()``) takes the last window's
    #: gradients as they are: with ``no_sync()`` on those iterations, each rank's own.
    flushed_after: bool = False


@dataclass(frozen=True)
class MicroSteps:
    """An inner loop that calls ``backward()`` on every micro-step while the optimizer steps after it."""

    loop: cst.For
    backward: cst.Call
    model: str
    #: The test that holds on the last micro-step only (``micro_step == steps - 1``); ``None`` when setting
    #: DDP's sync switch from it would not be safe.
    last: str | None = None


class AccumulationWithoutNoSync(Rule):
    """Skip DDP's gradient all-reduce on the steps where gradient accumulation does not step.

    What it finds: a training loop over a DDP-wrapped model that calls ``backward()`` on every
    iteration but ``optimizer.step()`` (or ``scaler.step(optimizer)``) only under an ``if`` that counts
    iterations (its test uses ``%`` or an ``accum...`` name: gradient accumulation), without
    ``model.no_sync()``.

    Why it is a problem: DDP all-reduces the gradients during every ``backward()``. With accumulation over k
    micro-batches, k-1 of those all-reduces are wasted: their result is only added to and synchronised again
    at the stepping iteration. The training is right but communication costs up to k times what it
    needs to.

    What the fix does: for the usual gate ``if (i + 1) % k == 0:`` it wraps the statements from the
    forward pass through ``backward()`` in ``with (model.no_sync() if (i + 1) % k != 0 else
    contextlib.nullcontext()):``. On accumulating steps the gradients then accumulate locally; the
    stepping iteration's ``backward()`` all-reduces their sum, which gives the same averaged gradient as
    before (up to float rounding). A trailing partial window is synchronised by the next synchronising
    ``backward()``, as before. The rewrite is made only when it keeps the result:
    - the gate's test is a single ``<expr> % <k> == 0`` made of names, attributes and numbers (no calls),
      and the wrapped statements do not assign any name it uses, so testing it earlier gives the same answer;
    - the forward pass through the DDP model, ``backward()`` and the gate are statements of the same block,
      in that order (the forward pass must run inside ``no_sync()`` too);
    - nothing outside the gate reads gradients on every step (``.grad``, gradient clipping,
      ``scaler.unscale_``): inside ``no_sync()`` they hold only this process's share;
    - the optimizer does not step again after the loop (``if len(loader) % k: optimizer.step()``, a
      flush of the last partial window): that step would take the last iterations' gradients unreduced,
      each rank its own (a trial: the ranks' weights drifted apart). Such a loop is reported for review.
    Where the model is wrapped only on some paths (``if args.distributed: model = DDP(model)``), the test
    also asks ``hasattr(model, "no_sync")``: a plain model has no ``no_sync()``.
    Micro-steps in a loop of their own (``for micro_step in range(k): ... loss.backward()`` with the
    optimizer stepping after that loop, as in nanoGPT) get DDP's own switch as the loop's first statement:
    ``model.require_backward_grad_sync = micro_step == k - 1``, so only the last micro-step's ``backward()``
    all-reduces. That rewrite is made when the loop is ``for <name> in range(<k>)`` with ``k`` made of names,
    attributes and numbers that the loop does not assign (nor its own variable), the loop has no ``break``,
    ``continue`` or ``else``, nothing in it reads gradients, and every iteration runs the forward pass and
    then its one ``backward()``, neither under a condition (DDP reads the switch in the forward pass: a loss
    computed ahead for the next micro-step, or a ``backward()`` skipped on the last one, would leave the
    last gradients unreduced). On a model that is not wrapped the attribute is inert.
    Other accumulation patterns are reported only: wrap the forward and backward of the non-stepping
    iterations in ``with model.no_sync():`` by hand.

    Fix safety: the update is the original's: the summed gradient is all-reduced on the stepping
    iteration instead of every one, which changes float rounding only; the rewrite is made only under
    the conditions above.
    """

    code = "DDP031"
    name = "accumulation-without-no-sync"
    fix_safety = FixSafety.SAFE
    phase = Phase.WRAPPING
    severity = Severity.WARNING
    triggers = names.TRAINING_STEP_WORDS
    needs_names = (names.TRAINING_SCRIPT_NAMES,)
    manual_fix = "run the forward and backward passes of the non-stepping iterations inside model.no_sync()"
    examples = (
        Example(
            before="""\
from torch.nn.parallel import DistributedDataParallel as DDP

model = DDP(net, device_ids=[local_rank])
for i, (x, y) in enumerate(loader):
    loss = criterion(model(x), y) / accum_steps
    loss.backward()
    if (i + 1) % accum_steps == 0:
        optimizer.step()
        optimizer.zero_grad()
""",
            after="""\
import contextlib

from torch.nn.parallel import DistributedDataParallel as DDP

model = DDP(net, device_ids=[local_rank])
for i, (x, y) in enumerate(loader):
    with (model.no_sync() if (i + 1) % accum_steps != 0 else contextlib.nullcontext()):
        loss = criterion(model(x), y) / accum_steps
        loss.backward()
    if (i + 1) % accum_steps == 0:
        optimizer.step()
        optimizer.zero_grad()
""",
        ),
        Example(
            before="""\
from torch.nn.parallel import DistributedDataParallel as DDP

if distributed:
    model = DDP(model, device_ids=[local_rank])
for i, (x, y) in enumerate(loader):
    loss = criterion(model(x), y) / accum_steps
    loss.backward()
    if (i + 1) % accum_steps == 0:
        optimizer.step()
""",
            after="""\
import contextlib

from torch.nn.parallel import DistributedDataParallel as DDP

if distributed:
    model = DDP(model, device_ids=[local_rank])
for i, (x, y) in enumerate(loader):
    with (
        model.no_sync()
        if (i + 1) % accum_steps != 0 and hasattr(model, "no_sync")
        else contextlib.nullcontext()
    ):
        loss = criterion(model(x), y) / accum_steps
        loss.backward()
    if (i + 1) % accum_steps == 0:
        optimizer.step()
""",
        ),
        Example(
            before="""\
from torch.nn.parallel import DistributedDataParallel as DDP

model = DDP(net, device_ids=[local_rank])
for it in range(max_iters):
    for micro_step in range(grad_accum):
        loss = model(x, y) / grad_accum
        x, y = get_batch()
        loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
""",
            after="""\
from torch.nn.parallel import DistributedDataParallel as DDP

model = DDP(net, device_ids=[local_rank])
for it in range(max_iters):
    for micro_step in range(grad_accum):
        model.require_backward_grad_sync = micro_step == grad_accum - 1
        loss = model(x, y) / grad_accum
        x, y = get_batch()
        loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
""",
        ),
        Example(
            before="""\
from torch.nn.parallel import DistributedDataParallel as DDP

model = DDP(net, device_ids=[local_rank])
for it in range(max_iters):
    for micro_step in range(grad_accum):
        loss = model(x, y) / grad_accum
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
""",
        ),
        Example(
            before="""\
from torch.nn.parallel import DistributedDataParallel as DDP

model = DDP(net, device_ids=[local_rank])
loss = model(*get_batch())
for it in range(max_iters):
    for micro_step in range(grad_accum):
        loss.backward()
        loss = model(*get_batch())  # the next micro-step's loss, computed ahead
    optimizer.step()
""",
        ),
        Example(
            before="""\
from torch.nn.parallel import DistributedDataParallel as DDP

model = DDP(net, device_ids=[local_rank])
for it in range(max_iters):
    for micro_step in range(grad_accum):
        loss = model(x, y) / grad_accum
        if micro_step % 2 == 0:
            loss.backward()
    optimizer.step()
""",
        ),
        Example(
            before="""\
from torch.nn.parallel import DistributedDataParallel as DDP

model = DDP(net, device_ids=[local_rank])
for step, (x, y) in enumerate(loader):
    loss = criterion(model(x), y)
    loss.backward()
    if step % 4 == 3 or step == len(loader) - 1:
        optimizer.step()
        optimizer.zero_grad()
""",
        ),
        Valid(
            """\
from torch.nn.parallel import DistributedDataParallel as DDP

model = DDP(net, device_ids=[local_rank])
for i, (x, y) in enumerate(loader):
    if (i + 1) % accum_steps != 0:
        with model.no_sync():
            criterion(model(x), y).backward()
    else:
        criterion(model(x), y).backward()
        optimizer.step()
        optimizer.zero_grad()
for step, (x, y) in enumerate(loader):
    model.require_backward_grad_sync = (step + 1) % 4 == 0
    criterion(model(x), y).backward()
    if (step + 1) % 4 == 0:
        optimizer.step()
for x, y in loader:
    optimizer.zero_grad()
    criterion(model(x), y).backward()
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    if torch.isfinite(norm):
        optimizer.step()
for _ in range(6):
    model.zero_grad()
    model(x).sum().backward()
for _ in range(6):
    optimizer.zero_grad()
    model(x).sum().backward()
    optimizer.step()
"""
        ),
    )

    # ------------------------------------------------------------------------------ finding

    def _ddp_model(self, analysis: ScriptAnalysis, node: cst.CSTNode) -> str | None:
        """The DDP-wrapped model a statement runs forward (``model(x)``, or ``model`` handed to a call)."""
        for call in (n for n in walk(node) if isinstance(n, cst.Call)):
            for expr in (call.func, *(a.value for a in call.args)):
                name = dotted_name(expr)
                if name is None:
                    continue
                wrap = analysis.wrapped_at(expr)
                if wrap is not None and analysis.is_call_to(wrap, names.DISTRIBUTED_DATA_PARALLEL):
                    return name
        return None

    def _wrapped_only_sometimes(self, analysis: ScriptAnalysis, found: Accumulation) -> bool:
        """Whether the model's DDP wrap sits under a condition that does not also hold around the loop
        (``if args.distributed: model = DDP(model)``)."""
        for node in walk(found.loop.body):
            if isinstance(node, (cst.Name, cst.Attribute)) and dotted_name(node) == found.model:
                wrap = analysis.wrapped_at(node)
                if wrap is None:
                    continue
                function = analysis.enclosing_function(wrap)
                for ancestor in analysis.ancestors(wrap):
                    if ancestor is function:
                        break
                    if isinstance(ancestor, (cst.If, cst.IfExp)) and not analysis.is_inside(found.loop, ancestor):
                        return True
                return False
        return False

    def _nearest_loop(self, analysis: ScriptAnalysis, node: cst.CSTNode) -> cst.CSTNode | None:
        """The loop that runs the node on each iteration, else its function (calls of one function group
        together, apart from those of the module's top level)."""
        return analysis.nearest_loop(node) or analysis.enclosing_function(node)

    def _gate(self, analysis: ScriptAnalysis, node: cst.CSTNode, loop: cst.For) -> cst.If | None:
        """The outermost ``if`` within the loop whose body holds the node."""
        child, found = node, None
        for ancestor in analysis.ancestors(node):
            if ancestor is loop:
                return found
            if isinstance(ancestor, cst.If) and child is ancestor.body:
                found = ancestor
            child = ancestor
        return None

    def _by_loop(self, analysis: ScriptAnalysis) -> tuple[dict[cst.CSTNode | None, list[cst.Call]], dict[cst.CSTNode | None, list[cst.Call]]]:
        """The ``backward()`` calls and the optimizer steps, grouped by :meth:`_nearest_loop`."""
        backwards_in: dict[cst.CSTNode | None, list[cst.Call]] = {}
        for call in analysis.backward_calls:
            backwards_in.setdefault(self._nearest_loop(analysis, call), []).append(call)
        steps_in: dict[cst.CSTNode | None, list[cst.Call]] = {}
        if backwards_in:
            for call in analysis.calls:
                if analysis.is_optimizer_step(call):
                    steps_in.setdefault(self._nearest_loop(analysis, call), []).append(call)
        return backwards_in, steps_in

    @staticmethod
    def _syncs_itself(analysis: ScriptAnalysis, loop: cst.For) -> bool:
        """Whether the loop already skips DDP's gradient sync itself: ``no_sync()`` in it or around it, or
        DDP's ``require_backward_grad_sync`` switch set in it."""
        if any(call_method_name(c) == "no_sync" for c in _calls_in([loop])):
            return True
        if any(isinstance(n, cst.Attribute) and n.attr.value == "require_backward_grad_sync" for n in walk(loop.body)):
            return True
        return any(call_method_name(c) == "no_sync" for a in analysis.ancestors(loop) if isinstance(a, cst.With) for c in _calls_in(a.items))

    def accumulations(self, analysis: ScriptAnalysis) -> Iterator[Accumulation]:
        """Every accumulating loop without ``no_sync()``, with what the rewrite needs when it is safe."""
        backwards_in, steps_in = self._by_loop(analysis)
        for loop in analysis.for_loops:
            backwards, steps = backwards_in.get(loop), steps_in.get(loop)
            if not backwards or not steps:
                continue
            gates = {self._gate(analysis, step, loop) for step in steps}
            if None in gates or len(gates) != 1:
                continue  # the optimizer steps on every iteration: no accumulation
            gate = gates.pop()
            assert gate is not None
            if any(analysis.is_inside(b, gate) for b in backwards) or not _counts_steps(gate.test):
                continue
            if self._syncs_itself(analysis, loop):
                continue
            model = self._ddp_model(analysis, loop.body)
            if model is None:
                continue
            yield self._plan(analysis, Accumulation(loop, backwards[0], gate, model), backwards)

    def micro_steps(self, analysis: ScriptAnalysis) -> Iterator[MicroSteps]:
        """Every loop of micro-steps (``backward()`` on each, no optimizer step) followed, in the same
        block, by the optimizer's step, without a sync switch."""
        backwards_in, steps_in = self._by_loop(analysis)
        for loop in analysis.for_loops:
            backwards = backwards_in.get(loop)
            if not backwards or loop in steps_in:
                continue
            block = analysis.parent(loop)
            if not isinstance(block, (cst.IndentedBlock, cst.Module)):
                continue
            body = list(block.body)
            after = body[body.index(loop) + 1 :]
            if not any(analysis.is_inside(s, a) for s in steps_in.get(self._nearest_loop(analysis, loop), []) for a in after):
                continue  # no step after the loop, at its level
            if any(call_method_name(c) == "zero_grad" for c in _calls_in([loop.body])):
                continue  # the gradients are cleared on every micro-step: nothing accumulates
            if self._syncs_itself(analysis, loop):
                continue
            model = self._ddp_model(analysis, loop.body)
            if model is not None:
                safe = len(backwards) == 1 and self._forward_then_backward(analysis, loop, model, backwards[0])
                yield MicroSteps(loop, backwards[0], model, _last_micro_step(loop) if safe else None)

    def _forward_then_backward(self, analysis: ScriptAnalysis, loop: cst.For, model: str, backward: cst.Call) -> bool:
        """Whether every micro-step runs the model's forward pass and then ``backward()``, both on every
        iteration: DDP reads its sync switch in the forward pass, so a forward that ran before the switch
        was set (a loss computed ahead, for the next micro-step) or a ``backward()`` skipped on the last
        micro-step would leave the last gradients unreduced, and the ranks would drift apart."""
        body = loop.body
        if not isinstance(body, cst.IndentedBlock):
            return False
        conditional = (cst.If, cst.IfExp, cst.While, cst.For, cst.Try, cst.BooleanOperation, cst.CompFor, cst.Lambda, cst.FunctionDef)
        for ancestor in analysis.ancestors(backward):
            if ancestor is loop:
                break
            if isinstance(ancestor, conditional):
                return False
        holder = _child_of(analysis, backward, body)
        if holder is None:
            return False
        at = list(body.body).index(holder)
        forwards = [i for i, stmt in enumerate(body.body) if self._ddp_model(analysis, stmt) == model]
        return bool(forwards) and max(forwards) <= at

    def _plan(self, analysis: ScriptAnalysis, found: Accumulation, backwards: list[cst.Call]) -> Accumulation:
        """The accumulation with the statements to wrap, when the rewrite is safe (see the docstring)."""
        block = analysis.parent(found.gate)
        if not isinstance(block, cst.IndentedBlock) or not _is_modulo_gate(found.gate.test):
            return found
        body = list(block.body)
        gate_index = body.index(found.gate)
        holders = [_child_of(analysis, b, block) for b in backwards]
        if any(h is None for h in holders):
            return found
        end = max(body.index(h) for h in holders)  # type: ignore[arg-type]
        start = next((i for i in range(end + 1) if self._ddp_model(analysis, body[i]) == found.model), None)
        if start is None or end >= gate_index or self._ddp_model(analysis, body[start]) is None:
            return found
        used = {dotted_name(n) for n in walk(found.gate.test) if isinstance(n, (cst.Name, cst.Attribute))}
        if used & _assigned(body[start:gate_index]):
            return found
        if _reads_gradients(found.loop.body, skip=found.gate.body):
            return found
        if self._steps_after(analysis, found.loop):
            return dataclasses.replace(found, flushed_after=True)
        return Accumulation(found.loop, found.backward, found.gate, found.model, block, start, end)

    def _steps_after(self, analysis: ScriptAnalysis, loop: cst.For) -> bool:
        """Whether the optimizer steps after the loop, in the function that runs it (the partial window
        flushed once the loop is over)."""
        function = analysis.enclosing_function(loop)
        return any(
            analysis.is_optimizer_step(call)
            and analysis.enclosing_function(call) is function
            and not analysis.is_inside(call, loop)
            and analysis.comes_before(loop, call)
            # not a step of another loop that follows (it accumulates on its own)
            and ((around := analysis.nearest_loop(call)) is None or analysis.is_inside(loop, around))
            for call in analysis.calls
        )

    def matches(self, analysis: ScriptAnalysis) -> Iterator[Match]:
        for found in self.accumulations(analysis):
            if found.flushed_after:
                yield Match(
                    found.backward,
                    f"gradient accumulation: backward() all-reduces gradients on every iteration but the optimizer "
                    f"steps only when `{code_of(found.gate.test)}`, and once more after the loop on the last "
                    f"iterations' gradients: {found.model}.no_sync() on the non-stepping iterations would leave those "
                    "unsynchronised (each rank would step on its own); skip the sync only where a later backward() "
                    "in the same window syncs",
                    fixable=False,
                    advice=True,
                )
                continue
            yield Match(
                found.backward,
                f"gradient accumulation: backward() all-reduces gradients on every iteration but the optimizer "
                f"steps only when `{code_of(found.gate.test)}`; skip the sync on the other iterations with {found.model}.no_sync()",
                fixable=found.block is not None,
                advice=True,
            )
        for micro in self.micro_steps(analysis):
            switch = micro.last or "<last micro-step>"
            yield Match(
                micro.backward,
                "gradient accumulation: backward() all-reduces gradients on every micro-step of this loop but the "
                f"optimizer steps only after it; sync on the last one only ({micro.model}.require_backward_grad_sync = {switch})",
                fixable=micro.last is not None,
                advice=True,
            )

    # ------------------------------------------------------------------------------- fixing

    def fix(self, analysis: ScriptAnalysis, options: Options) -> FixResult | None:
        edits = Edits(analysis)
        nullcontext = None
        for found in self.accumulations(analysis):
            if found.block is None:
                continue
            nullcontext = nullcontext or nullcontext_name(analysis, edits)
            test = found.gate.test
            assert isinstance(test, cst.Comparison)
            negated = test.with_changes(
                comparisons=[test.comparisons[0].with_changes(operator=cst.NotEqual())]
            )
            test_code = code_of(negated)
            if self._wrapped_only_sometimes(analysis, found):
                # ``if distributed: model = DDP(model)``: a plain model has no no_sync().
                test_code = f'{test_code} and hasattr({found.model}, "no_sync")'
            header = statement(f"with ({found.model}.no_sync() if {test_code} else {nullcontext}()):\n    pass\n")
            assert isinstance(header, cst.With)
            edits.replace(found.block, lambda updated, _f=found, _h=header: _wrap(updated, _f.start, _f.end, _h))  # type: ignore[misc]
            edits.changes.append(
                Change(
                    self.code,
                    analysis.line(found.backward),
                    f"forward and backward of the accumulating iterations run inside {found.model}.no_sync()",
                )
            )
        for micro in self.micro_steps(analysis):
            if micro.last is None:
                continue
            switch = statement(f"{micro.model}.require_backward_grad_sync = {micro.last}\n")
            edits.replace(micro.loop.body, lambda updated, _s=switch: updated.with_changes(body=[_s, *updated.body]))
            edits.changes.append(
                Change(self.code, analysis.line(micro.backward), f"gradients all-reduced on the last micro-step only ({micro.model}.require_backward_grad_sync)")
            )
        return edits.apply(analysis.module) if edits else None


def _last_micro_step(loop: cst.For) -> str | None:
    """``micro_step == k - 1`` for ``for micro_step in range(k):`` when DDP's sync switch may be set from it
    at the top of the loop (see the rule's docstring), else ``None``."""
    iterated = loop.iter
    if not (isinstance(loop.target, cst.Name) and isinstance(iterated, cst.Call) and dotted_name(iterated.func) == "range"):
        return None
    if len(iterated.args) != 1 or iterated.args[0].keyword is not None or iterated.args[0].star:
        return None
    count = iterated.args[0].value
    if loop.orelse is not None or not isinstance(loop.body, cst.IndentedBlock) or not all(isinstance(n, PURE_NODES) for n in walk(count)):
        return None
    if any(isinstance(n, (cst.Break, cst.Continue)) for n in walk(loop.body)):
        return None
    counted = {dotted_name(n) for n in walk(count) if isinstance(n, (cst.Name, cst.Attribute))}
    if loop.target.value in {name.split(".")[0] for name in counted if name}:
        return None  # ``for steps in range(steps)``: the count is gone once the loop starts
    if (counted | {loop.target.value}) & _assigned(list(loop.body.body)) or _reads_gradients(loop.body, skip=loop.target):
        return None
    return f"{loop.target.value} == {code_of(count)} - 1"


def _wrap(block: cst.CSTNode, start: int, end: int, header: cst.With) -> cst.CSTNode:
    """The block with statements ``start`` … ``end`` moved into the ``with`` statement."""
    assert isinstance(block, cst.IndentedBlock)
    body = list(block.body)
    group = body[start : end + 1]
    first = group[0]
    comments = first.leading_lines
    group[0] = first.with_changes(leading_lines=[])
    with_statement = header.with_changes(body=cst.IndentedBlock(body=group), leading_lines=comments)
    return block.with_changes(body=[*body[:start], with_statement, *body[end + 1 :]])


def _calls_in(nodes: Sequence[cst.CSTNode]) -> Iterator[cst.Call]:
    for node in nodes:
        yield from (n for n in walk(node) if isinstance(n, cst.Call))


def _child_of(analysis: ScriptAnalysis, node: cst.CSTNode, block: cst.IndentedBlock) -> cst.BaseStatement | None:
    """The statement of ``block`` that holds the node."""
    for ancestor in analysis.ancestors(node):
        if analysis.parent(ancestor) is block:
            return ancestor  # type: ignore[return-value]
    return None


def _counts_steps(test: cst.BaseExpression) -> bool:
    """Whether a test looks like an accumulation counter (``i % k``, ``accum_count == k``), not a condition
    such as ``torch.isfinite(grad_norm)`` that skips a step now and then."""
    for node in walk(test):
        if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Modulo):
            return True
        if isinstance(node, (cst.Name, cst.Attribute)) and "accum" in (dotted_name(node) or "").lower():
            return True
    return False


def _is_modulo_gate(test: cst.BaseExpression) -> bool:
    """``<expr> % <k> == 0`` built only of names, attributes, numbers and arithmetic."""
    if not isinstance(test, cst.Comparison) or len(test.comparisons) != 1:
        return False
    target = test.comparisons[0]
    if not isinstance(target.operator, cst.Equal):
        return False
    if not (isinstance(target.comparator, cst.Integer) and target.comparator.value == "0"):
        return False
    if not (isinstance(test.left, cst.BinaryOperation) and isinstance(test.left.operator, cst.Modulo)):
        return False
    return all(isinstance(n, PURE_NODES) for n in walk(test))


def _assigned(statements: Sequence[cst.BaseStatement]) -> set[str | None]:
    """Dotted names the statements assign (plain, augmented, annotated, ``for`` targets, ``:=``)."""
    found: set[str | None] = set()
    for stmt in statements:
        for node in walk(stmt):
            targets: list[cst.BaseExpression] = []
            if isinstance(node, cst.Assign):
                targets = [t.target for t in node.targets]
            elif isinstance(node, (cst.AnnAssign, cst.AugAssign)):
                targets = [node.target]
            elif isinstance(node, (cst.For, cst.CompFor)):
                targets = [node.target]
            elif isinstance(node, cst.NamedExpr):
                targets = [node.target]
            for target in targets:
                found.update(dotted_name(n) for n in walk(target) if isinstance(n, (cst.Name, cst.Attribute)))
    return found


def _reads_gradients(node: cst.CSTNode, skip: cst.CSTNode) -> bool:
    """Whether the code outside ``skip`` reads gradients: ``.grad``, gradient clipping, ``scaler.unscale_``."""
    for n in _walk_except(node, skip):
        if isinstance(n, cst.Attribute) and n.attr.value == "grad":
            return True
        if isinstance(n, cst.Call) and isinstance(n.func, (cst.Name, cst.Attribute)):
            last = n.func.value if isinstance(n.func, cst.Name) else n.func.attr.value
            if last in GRADIENT_READERS:
                return True
    return False


def _walk_except(node: cst.CSTNode, skip: cst.CSTNode) -> Iterator[cst.CSTNode]:
    if node is skip:
        return
    yield node
    for child in tree.children(node):
        yield from _walk_except(child, skip)
