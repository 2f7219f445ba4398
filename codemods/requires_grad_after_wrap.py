"""DDP042 requires-grad-after-wrap."""

from __future__ import annotations

from typing import Iterator

from . import names
import libcst as cst

from .analysis import ScriptAnalysis, call_method_name, dotted_name
from .analysis.trainable import (
    RequiresGradChange,
    after_a_wrap,
    frozen_before_the_wrap,
    requires_grad_changes,
    within_a_wrapped_model,
    wrapped_for_changes,
)
from .base import Example, Match, Phase, Rule, Severity, Valid
from .edits import code_of


class RequiresGradAfterWrap(Rule):
    """Freeze or unfreeze a model's parameters before DDP wraps it, not after.

    What it finds, in a program that wraps its model: ``p.requires_grad = ...`` or ``requires_grad_(...)`` on
    the model's parameters or submodules (``for p in model.backbone.parameters()``, a ``freeze_backbone``
    helper, ``model.head.requires_grad_(True)`` at some epoch) where it may run after the wrap.

    Why it is a problem: DDP decides, when it wraps the model, which parameters it synchronises: those that
    require gradients then. A parameter frozen after the wrap gets no gradient, and DDP fails at the next
    step ("Expected to have finished reduction in the prior iteration ..."). A parameter unfrozen after a
    wrap that saw it frozen trains on every rank, but its gradients are never averaged: the ranks' copies
    drift apart without an error. DataParallel copies the model at every step and never noticed.

    Not reported: every parameter of a wrapped model set alike (``for p in D.parameters(): p.requires_grad = False``
    around a GAN's generator step) where the model was wrapped with all of them training: while all are frozen no
    gradient hook of them fires and DDP has nothing to reduce.

    What a human must do: freeze before the wrap and leave it frozen; for a schedule that changes what
    trains (unfreeze at epoch N), wrap while every parameter that will ever train requires gradients and
    pass ``find_unused_parameters=True`` (frozen parameters then count as unused), or wrap the model again
    after each change (and build the optimizer on the new wrapper).
    """

    code = "DDP042"
    name = "requires-grad-after-wrap"
    phase = Phase.OUTPUT
    severity = Severity.ERROR
    #: Writes, not reads: ``x.requires_grad`` alone is in hundreds of torch's own files.
    triggers = (".requires_grad =", ".requires_grad=", "requires_grad_(")
    needs_names = (names.TRAINING_CODE_NAMES,)
    manual_fix = "change requires_grad before the wrap, or wrap with find_unused_parameters=True while every parameter trains"
    examples = (
        Example(
            before="""\
from torch.nn.parallel import DistributedDataParallel as DDP

model = DDP(Net().to(device), device_ids=[local_rank])
for epoch in range(10):
    if epoch == 3:
        for p in model.module.backbone.parameters():
            p.requires_grad = True
    train_one_epoch(model, loader)
    loss.backward()
""",
        ),
        Valid(
            """\
from torch.nn.parallel import DistributedDataParallel as DDP

net = Net().to(device)
for p in net.backbone.parameters():
    p.requires_grad = False
model = DDP(net, device_ids=[local_rank])
for x, y in loader:
    x.requires_grad_(True)
    loss_fn(model(x), y).backward()
"""
        ),
        # The whole discriminator frozen for the generator's step, unfrozen for its own: no hook of it fires while
        # frozen, and unfrozen it is what DDP wrapped.
        Valid(
            """\
from torch.nn.parallel import DistributedDataParallel as DDP

G, D = DDP(Generator()), DDP(Discriminator())
for real in loader:
    for p in D.parameters():
        p.requires_grad = True
    d_loss(D(real), D(G(z).detach())).backward()
    for p in D.parameters():
        p.requires_grad = False
    g_loss(D(G(z))).backward()
"""
        ),
    )

    def matches(self, analysis: ScriptAnalysis) -> Iterator[Match]:
        if not analysis.program_wrap_calls or wrapped_for_changes(analysis):
            return  # (wrapped with every parameter training and find_unused_parameters=True: as advised)
        changes = requires_grad_changes(analysis)
        for change in changes:
            found = after_a_wrap(analysis, change.node)
            if found is not None and not _toggles_a_whole_wrapped_model(analysis, change, changes):
                owner, node = found
                # (another module's line numbers may be those of a version the migration has rewritten since)
                where = f"line {owner.line(node)}" if owner is analysis else f"in {owner.module_name}"
                through = "" if node is change.node else f" (through `{code_of(node)}`, {where})"
                yield Match(
                    change.statement,
                    f"requires_grad of {code_of(change.receiver)} changes where the model may already be wrapped{through}: DDP "
                    "synchronises only the parameters that required gradients when it wrapped the model (freezing "
                    "after it fails at the next step, unfreezing leaves those gradients unaveraged); change it before "
                    "the wrap, or wrap with find_unused_parameters=True while every parameter trains",
                    fixable=False,
                )


def _toggles_a_whole_wrapped_model(analysis: ScriptAnalysis, change: RequiresGradChange, changes: list[RequiresGradChange]) -> bool:
    """Whether the change sets every parameter of wrapped models alike (``for p in D.parameters(): p.requires_grad =
    False`` or ``D.requires_grad_(False)`` around a GAN's generator step, ``True`` again before the
    discriminator's; pix2pix's ``set_requires_grad(nets, flag)`` handed wrapped models), each wrapped with all
    of its parameters training (nothing changed them before the wrap): while all are frozen none of their
    gradient hooks fires and DDP has nothing to reduce; unfrozen, they are what DDP wrapped."""
    model = _whole_model(analysis, change)
    held = _models_held(analysis, model) if model is not None else None
    if not held:
        return False
    name = dotted_name(model)  # type: ignore[arg-type]
    # Frozen whole and never unfrozen (DINO's teacher, updated by hand from the student): whatever DDP wrapped, none
    # of its hooks fires again; a model unfrozen later must have been wrapped with all of it training.
    frozen_only = all(
        _sets_false(other) for other in changes if (other_model := _whole_model(analysis, other)) is not None and dotted_name(other_model) == name
    )
    for owner, expr in held:
        wrap = owner.wrapped_at(expr)
        if wrap is None:
            if within_a_wrapped_model(owner, expr):
                return False  # (a part of a wrapped model: ``set_requires_grad(D.module.head, False)``)
            continue  # a model no wrap holds (``set_requires_grad([D, vgg], False)``): DDP has no say in it
        if frozen_before_the_wrap(owner, wrap, expr) and not frozen_only:
            return False
    return all(
        after_a_wrap(analysis, other.node) is not None
        for other in changes
        if (other_model := _whole_model(analysis, other)) is not None and dotted_name(other_model) == name
    )


def _sets_false(change: RequiresGradChange) -> bool:
    """Whether the change freezes (``p.requires_grad = False``, ``m.requires_grad_(False)``), written out."""
    node = change.node
    if type(node) is cst.Call:
        value = node.args[0].value if node.args else None  # type: ignore[attr-defined]
    else:
        value = getattr(change.statement.body[0], "value", None) if type(change.statement) is cst.SimpleStatementLine else None  # type: ignore[attr-defined]
    return type(value) is cst.Name and value.value == "False"  # type: ignore[attr-defined]


def _whole_model(analysis: ScriptAnalysis, change: RequiresGradChange) -> cst.Name | None:
    """The model a change sets every parameter of: ``D`` of ``for p in D.parameters(): p.requires_grad = ...``
    (the loop's whole body), of ``D.requires_grad_(...)`` and ``D.module.requires_grad_(...)``."""
    loop = _parameter_loop(analysis, change)
    if loop is not None:
        return loop.iter.func.value  # type: ignore[attr-defined, no-any-return]
    receiver = change.receiver
    if type(change.node) is not cst.Call or call_method_name(change.node) == "apply":  # type: ignore[arg-type]
        return None  # (``model.apply(freeze_bn)``: the function picks the layers it freezes)
    if type(receiver) is cst.Attribute and receiver.attr.value == "module":  # type: ignore[attr-defined]
        receiver = receiver.value  # type: ignore[attr-defined]
    return receiver if type(receiver) is cst.Name else None  # type: ignore[return-value]


def _models_held(analysis: ScriptAnalysis, model: cst.Name) -> list[tuple[ScriptAnalysis, cst.BaseExpression]] | None:
    """The expressions, each with its module's analysis, whose models a name holds: the name itself where it holds
    a wrapped model; for a parameter of a function (or a loop over one: ``for net in nets``), what every call of
    the program hands it (each item of a list or tuple written there); ``None`` where the analysis cannot tell."""
    if analysis.wrapped_at(model) is not None:
        return [(analysis, model)]
    function = analysis.enclosing_function(model)
    if function is None:
        return None
    parameter = model.value
    loop = next((a for a in analysis.ancestors(model) if type(a) is cst.For and dotted_name(a.target) == parameter), None)  # type: ignore[attr-defined]
    if loop is not None:
        iterated = _iterated_name(loop.iter)  # type: ignore[attr-defined]
        if iterated is None:
            return None
        parameter = iterated
    if not analysis.is_parameter(function, parameter):
        return None
    held: list[tuple[ScriptAnalysis, cst.BaseExpression]] = []
    for call in analysis.callers_in_program(function):
        owner = analysis.shared.analysis_of(call)
        argument = owner.argument_for(call, function, parameter) if owner is not None else None
        if owner is None or argument is None:
            return None
        items = [element.value for element in argument.elements] if type(argument) in (cst.List, cst.Tuple) else [argument]  # type: ignore[attr-defined]
        if loop is None and len(items) > 1:
            return None
        held.extend((owner, item) for item in items)
    return held or None


def _iterated_name(iterated: cst.BaseExpression) -> str | None:
    """The one name a loop goes over the items of, however it is wrapped in a list: ``nets`` of ``for net in
    nets``, ``for net in nets if isinstance(nets, list) else [nets]``; ``None`` for anything else."""
    kind = type(iterated)
    if kind is cst.Name:
        return iterated.value  # type: ignore[attr-defined, no-any-return]
    if kind is cst.IfExp:
        sides = {_iterated_name(iterated.body), _iterated_name(iterated.orelse)}  # type: ignore[attr-defined]
    elif kind in (cst.List, cst.Tuple):
        sides = {_iterated_name(element.value) for element in iterated.elements}  # type: ignore[attr-defined]
    else:
        return None
    return sides.pop() if len(sides) == 1 else None


def _parameter_loop(analysis: ScriptAnalysis, change: RequiresGradChange) -> cst.For | None:
    """The ``for p in model.parameters():`` whose variable the change sets, its whole body (a plain model name)."""
    block = analysis.parent(change.statement)
    loop = analysis.parent(block) if isinstance(block, cst.IndentedBlock) else None
    if not isinstance(loop, cst.For) or len(block.body) != 1 or dotted_name(loop.target) != dotted_name(change.receiver):  # type: ignore[union-attr]
        return None
    source = loop.iter
    if not (isinstance(source, cst.Call) and call_method_name(source) == "parameters" and not source.args):
        return None
    return loop if isinstance(source.func, cst.Attribute) and isinstance(source.func.value, cst.Name) else None
