"""DDP042 requires-grad-after-wrap."""

from __future__ import annotations

from typing import Iterator

from . import names
import libcst as cst

from .analysis import SELF_RETURNING_METHODS, ScriptAnalysis, call_method_name, dotted_name, walk
from .analysis.trainable import RequiresGradChange, after_a_wrap, frozen_models, requires_grad_changes, within_a_wrapped_model
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
        if not analysis.program_wrap_calls:
            return
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
    for owner, expr in held:
        wrap = owner.wrapped_at(expr)
        if wrap is None:
            if within_a_wrapped_model(owner, expr):
                return False  # (a part of a wrapped model: ``set_requires_grad(D.module.head, False)``)
            continue  # a model no wrap holds (``set_requires_grad([D, vgg], False)``): DDP has no say in it
        if _frozen_before(owner, wrap, expr):
            return False
    name = dotted_name(model)  # type: ignore[arg-type]
    return all(
        after_a_wrap(analysis, other.node) is not None
        for other in changes
        if (other_model := _whole_model(analysis, other)) is not None and dotted_name(other_model) == name
    )


def _whole_model(analysis: ScriptAnalysis, change: RequiresGradChange) -> cst.Name | None:
    """The model a change sets every parameter of: ``D`` of ``for p in D.parameters(): p.requires_grad = ...``
    (the loop's whole body), of ``D.requires_grad_(...)`` and ``D.module.requires_grad_(...)``."""
    loop = _parameter_loop(analysis, change)
    if loop is not None:
        return loop.iter.func.value  # type: ignore[attr-defined, no-any-return]
    receiver = change.receiver
    if type(change.node) is not cst.Call:
        return None
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


def _frozen_before(analysis: ScriptAnalysis, wrap: cst.Call, wrapper: cst.BaseExpression) -> bool:
    """Whether a statement that runs before the wrap may change ``requires_grad`` of the model it wraps
    (``net[0].requires_grad_(False)`` then ``D = DDP(net)``, or a helper handed ``net``), in the wrap's function or,
    up the calls that run it, before each call (``D = wrap(net)`` of ``def wrap(model): return DDP(model)``, a
    global model frozen at the top of the module before ``main()`` wraps it): the wrap then saw part of it frozen,
    and unfreezing the whole wrapper later trains parameters DDP never averages. A statement whose changes the
    analysis cannot place counts, unless it only builds another model (``features = VGGFeatures()`` freezing
    itself)."""
    home = analysis if analysis.owns(wrap) else analysis.shared.analysis_of(wrap)
    if not wrap.args or home is None:
        return True
    wrapped = {dotted_name(_built_from(wrap.args[0].value))}
    if home is analysis and analysis.enclosing_function(wrapper) is analysis.enclosing_function(wrap):
        wrapped.add(dotted_name(wrapper))
    return _changed_before(home, wrap, {name.split(".")[0] for name in wrapped if name is not None}, depth=3, own=True)


def _changed_before(analysis: ScriptAnalysis, node: cst.CSTNode, names_of_model: set[str], depth: int, own: bool = False) -> bool:
    """Whether what runs before the node may change ``requires_grad`` of the model the names hold there: the
    statements before it in its function, then before each call of the program that runs the function, the
    model named there by the argument a parameter takes (a global by its own name; a local of the function was
    built in it). ``own``: the node's own statement runs before it too (``D = DDP(build())``; not a call's, which
    runs the function the walk came from)."""
    for statement in _statements_before(analysis, node, own):
        frozen = frozen_models(analysis, statement)
        if frozen is None:
            if not _builds_another_model(statement, names_of_model):
                return True
        elif frozen & names_of_model:
            return True
    function = analysis.enclosing_function(node)
    if function is None:
        return False
    handed = {name for name in names_of_model if analysis.is_parameter(function, name)}
    kept = {name for name in names_of_model if not analysis.binds_locally(function, name)}
    if not handed and not kept:
        return False
    callers = analysis.callers_in_program(function)
    if depth <= 0:
        return bool(callers)
    for call in callers:
        owner = analysis.shared.analysis_of(call) or analysis
        there = set(kept) if owner is analysis else set()
        for parameter in handed:
            argument = owner.argument_for(call, function, parameter)
            name = dotted_name(_built_from(argument)) if argument is not None else None
            if name is None:
                return True
            there.add(name.split(".")[0])
        if there and _changed_before(owner, call, there, depth - 1):  # (the call's own statement runs the rest)
            return True
    return False


def _built_from(value: cst.BaseExpression) -> cst.BaseExpression:
    """The model under the self-returning calls of ``net.to(device)``."""
    while isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute) and value.func.attr.value in SELF_RETURNING_METHODS:
        value = value.func.value
    return value


def _statements_before(analysis: ScriptAnalysis, node: cst.CSTNode, own: bool) -> Iterator[cst.BaseStatement]:
    """The statements of the node's function (or module) that run before it: the earlier statements of its block
    and of each block around it, and with ``own`` the one holding it."""
    function = analysis.enclosing_function(node)
    if own:
        yield analysis.statement(node)
    below: cst.CSTNode = node
    for above in analysis.ancestors(node):
        if above is function:
            return
        if type(above) in (cst.IndentedBlock, cst.Module):
            for earlier in above.body:  # type: ignore[attr-defined]
                if earlier is below:
                    break
                yield earlier
        below = above


def _builds_another_model(statement: cst.BaseStatement, model_names: set[str]) -> bool:
    """Whether the statement only binds a new object to a name that is not the model's, built from arguments
    that do not name it (``features = Features(layers)``): what its constructor freezes is its own."""
    if not (isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1 and isinstance(statement.body[0], cst.Assign)):
        return False
    assign = statement.body[0]
    targets = {dotted_name(target.target) for target in assign.targets}
    if None in targets or any(target.split(".")[0] in model_names for target in targets):  # type: ignore[union-attr]
        return False
    value = _built_from(assign.value)
    if not isinstance(value, cst.Call):
        return False
    used = {part.value for part in walk(value) if isinstance(part, cst.Name)}
    return not used & model_names


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
