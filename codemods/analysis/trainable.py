"""Which parameters train: the writes of ``requires_grad`` on a model's parameters (freezing a backbone,
unfreezing it at some epoch) and whether they run before the model is wrapped. DDP decides, when it wraps a
model, which parameters it synchronises: a fact for the rule about changes after the wrap and for the
placement of the wrap the migration inserts (computed once per analysis: :func:`requires_grad_changes`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, NamedTuple, Sequence

import libcst as cst

from .. import names
from . import tree
from .loaders import without_gradients
from .ranks import rank_facts
from .script import (
    SELF_RETURNING_METHODS,
    ScriptAnalysis,
    all_parameters,
    call_method_name,
    callee_name,
    dotted_name,
    is_none,
    is_true,
    keyword_argument,
    leaves_function,
    own_method,
    own_methods,
    subscript_key,
    under_self_returning_calls,
    walk,
    wrapped_argument,
)
from .values import SOME_OBJECT, UNKNOWN, literal_value, truth, value_at

#: Methods whose results are a model's parameters or its submodules (whose ``requires_grad`` is theirs).
PARAMETER_SOURCES = frozenset({"parameters", "named_parameters", "modules", "named_modules", "children", "named_children"})


@dataclass(frozen=True)
class RequiresGradChange:
    """``p.requires_grad = False`` or ``model.backbone.requires_grad_(False)`` on a model's parameters."""

    node: cst.CSTNode
    statement: cst.BaseStatement
    receiver: cst.BaseExpression


def requires_grad_changes(analysis: ScriptAnalysis) -> list[RequiresGradChange]:
    """The module's writes of ``requires_grad`` on a model's parameters or submodules, in source order."""
    return analysis.derived("requires_grad_changes", _changes)


def _changes(analysis: ScriptAnalysis) -> list[RequiresGradChange]:
    found = []
    for node in analysis.preorder:
        receiver = _requires_grad_written(node)
        if receiver is None and type(node) is cst.Call and call_method_name(node) == "apply" and node.args and _freezes_what_it_is_given(analysis, node.args[0].value):  # type: ignore[arg-type, attr-defined]
            receiver = node.func.value  # type: ignore[attr-defined]  (``model.backbone.apply(freeze_bn)``)
        if receiver is not None and holds_model_state(analysis, receiver):
            found.append(RequiresGradChange(node, analysis.statement(node), receiver))
    return found


def _requires_grad_written(node: cst.CSTNode) -> cst.BaseExpression | None:
    """What a node writes ``requires_grad`` of: ``x`` of ``x.requires_grad = ...`` or ``x.requires_grad_(...)``."""
    kind = type(node)
    if kind is cst.AssignTarget and type(node.target) is cst.Attribute and node.target.attr.value == "requires_grad":  # type: ignore[attr-defined]
        return node.target.value  # type: ignore[attr-defined, no-any-return]
    if kind is cst.Call and call_method_name(node) == "requires_grad_":  # type: ignore[arg-type]
        return node.func.value  # type: ignore[attr-defined, no-any-return]
    return None


def _freezes_what_it_is_given(analysis: ScriptAnalysis, function: cst.BaseExpression) -> bool:
    """Whether a function handed to ``Module.apply`` is one of the program's that writes ``requires_grad`` (a
    ``freeze_bn(m)`` setting ``m.weight.requires_grad = False``): it changes the modules it is applied to."""
    for found in analysis.origins(function):
        if type(found) is cst.FunctionDef:
            home = analysis.shared.analysis_of(found) or analysis
            if any(_requires_grad_written(node) is not None for node in home.nodes_below(found.body)):  # type: ignore[attr-defined]
                return True
    return False


def holds_model_state(analysis: ScriptAnalysis, expr: cst.BaseExpression, depth: int = 3) -> bool:
    """Whether an expression is a model, one of its submodules or parameters: reached from a trained model
    (``model.backbone``) or from ``self`` in a method, or holding what ``parameters()``, ``modules()`` and the
    like hand out (``for p in model.parameters()``), followed through names ``depth`` steps deep. A batch of
    inputs (``x.requires_grad_()`` for input gradients) is none of these."""
    name = part_name(expr) or _through_unwrap(expr)
    if name is None or name.split(".")[-1] == "grad":  # a parameter's gradient is a tensor of its own
        return False
    root = name.split(".")[0]
    if root == "self" or root in {model.split(".")[0] for model in analysis.trained_models}:
        return True
    if within_a_wrapped_model(analysis, expr):
        return True
    if depth <= 0:
        return False
    for value in analysis.flows_into(expr, name):
        if _a_copy(analysis, value):
            continue  # ``ema = copy.deepcopy(model.module)``: a module of its own, whose parameters no wrap holds
        if type(value) is cst.Call and analysis.is_call_to(value, names.PARAMETER):  # type: ignore[arg-type]
            continue  # ``master = nn.Parameter(torch.cat([p.detach() ...]))``: a parameter of its own, made from copies
        for part in walk(value):
            if type(part) is cst.Call and call_method_name(part) in PARAMETER_SOURCES:  # type: ignore[arg-type]
                if _a_copy(analysis, part.func.value):  # type: ignore[attr-defined]
                    continue  # ``ema.parameters()``
                return True
            parent = analysis.parent(part)
            if type(part) in (cst.Name, cst.Attribute) and type(parent) is not cst.Attribute:
                if type(parent) is cst.Call and parent.func is part:  # type: ignore[attr-defined]
                    continue  # ``G(z)``: what the model computes, not the model
                if part is not expr and holds_model_state(analysis, part, depth - 1):  # type: ignore[arg-type]
                    return True
    return False


def within_a_wrapped_model(analysis: ScriptAnalysis, expr: cst.BaseExpression) -> bool:
    """Whether an expression is a wrapped model or a part of one, in any module: reached from a wrap
    (``trainer.model.module.backbone`` in a hook, ``runtime.unwrap(trainer.model).backbone``) or from what a wrap
    takes (``net[0]`` of ``D = DDP(net)``)."""
    wraps = set(analysis.program_wrap_calls)
    if not wraps or type(expr) not in (cst.Attribute, cst.Subscript, cst.Name):
        return False
    wrapped = wraps | _wrapped_origins(analysis)
    part = expr
    while True:
        if type(part) is cst.Call and callee_name(part) == "unwrap" and len(part.args) == 1:  # type: ignore[arg-type, attr-defined]
            part = part.args[0].value  # type: ignore[attr-defined]
        if type(part) in (cst.Name, cst.Attribute) and wrapped & analysis.origins(part):  # type: ignore[arg-type]
            return True
        if type(part) not in (cst.Attribute, cst.Subscript):
            return False
        part = part.value  # type: ignore[attr-defined]


def part_name(expr: cst.BaseExpression) -> str | None:
    """The dotted name of a model's part with its indexing left out: ``model.blocks.attn`` for
    ``model.blocks[3].attn``, ``net`` for ``net[0]`` (``nn.Sequential`` and ``nn.ModuleList`` items)."""
    if type(expr) is cst.Subscript:
        return part_name(expr.value)  # type: ignore[attr-defined]
    if type(expr) is cst.Attribute:
        base = part_name(expr.value)  # type: ignore[attr-defined]
        return f"{base}.{expr.attr.value}" if base is not None else None  # type: ignore[attr-defined]
    return dotted_name(expr)


def _a_copy(analysis: ScriptAnalysis, expr: cst.BaseNode) -> bool:
    """Whether an expression holds a copy of a model (:func:`_is_model_copy`: ``copy.deepcopy(model.module)
    .eval()``, or a name every value of which is one) that no wrap of the program takes: its parameters are
    its own."""
    if type(expr) is cst.Call:
        return _is_model_copy(analysis, expr) and under_self_returning_calls(expr) not in _wrapped_origins(analysis)  # type: ignore[arg-type]
    origins = analysis.origins(expr) if isinstance(expr, (cst.Name, cst.Attribute)) else set()
    return bool(origins) and all(type(o) is cst.Call and _a_copy(analysis, o) for o in origins)


def _wrapped_origins(analysis: ScriptAnalysis) -> frozenset[cst.CSTNode]:
    """The calls the models the program's wraps take may come from (``DDP(copy.deepcopy(net))``)."""

    def find(_: ScriptAnalysis) -> frozenset[cst.CSTNode]:
        found: set[cst.CSTNode] = set()
        for wrap in analysis.program_wrap_calls:
            home = analysis.shared.analysis_of(wrap) or analysis
            if wrap.args:
                found |= {wrap.args[0].value, *home.origins(wrap.args[0].value)}
        return frozenset(found)

    return analysis.derived("wrapped origins", find)


def _through_unwrap(expr: cst.BaseExpression) -> str | None:
    """``model.backbone`` for ``runtime.unwrap(model).backbone`` (the migration's own spelling of a model
    that may be wrapped): the model's name and the attributes read from it."""
    attributes: list[str] = []
    while type(expr) is cst.Attribute:
        attributes.insert(0, expr.attr.value)  # type: ignore[attr-defined]
        expr = expr.value  # type: ignore[attr-defined]
    if type(expr) is not cst.Call or callee_name(expr) != "unwrap" or len(expr.args) != 1:  # type: ignore[arg-type, attr-defined]
        return None
    root = dotted_name(expr.args[0].value)  # type: ignore[attr-defined]
    return ".".join([root, *attributes]) if root is not None else None


def after_a_wrap(analysis: ScriptAnalysis, node: cst.CSTNode, depth: int = 3) -> tuple[ScriptAnalysis, cst.CSTNode] | None:
    """Where the node may run after the program wraps its model: the node itself (later in the function
    that wraps, or in a loop around the wrap too), or the call that runs its function there (in any
    module, with that module's analysis); ``None`` when it runs only before every wrap. A function with
    unknown callers, or none, counts as run after."""
    wraps = analysis.program_wrap_calls
    if not wraps:
        return None
    scope = analysis.enclosing_function(node)
    if scope is not None and scope.name.value == "__init__" and analysis.enclosing_class(scope) is not None:
        return None  # the model builds itself: before anything can wrap it
    here = [wrap for wrap in wraps if analysis.owns(wrap) and analysis.enclosing_function(wrap) is scope]
    if here:
        before = all(analysis.comes_before(node, wrap) and not _loop_around_both(analysis, node, wrap) for wrap in here)
        return None if before or _wrapped_again(analysis, node, here) or _frozen_under_search(analysis, node, here) else (analysis, node)
    if scope is None:
        # Module level, every wrap inside a function: it runs when the module is imported, before the wraps, unless
        # a call at the module's top level before it runs one (``D = wrap(net)`` of ``def wrap(m): return DDP(m)``).
        for wrap in wraps:
            for owner, place in analysis.places_up_the_calls(wrap):
                if owner is analysis and place is not wrap and analysis.enclosing_function(place) is None and analysis.comes_before(place, node):
                    return (analysis, node)
        return None
    callers = [(owner, call) for call in analysis.callers_in_program(scope) if (owner := analysis.shared.analysis_of(call)) is not None]
    if not callers and _never_runs(analysis, scope):
        return None  # (``def freeze(self): ...`` of a model the program never freezes)
    if depth <= 0 or not callers:
        return (analysis, node)
    for owner, call in callers:
        found = after_a_wrap(owner, call, depth - 1)
        if found is not None:
            return found
    return None


def _never_runs(analysis: ScriptAnalysis, function: cst.FunctionDef) -> bool:
    """Whether a function of a program that runs (one with an entry script) is never called nor named anywhere in
    it (a method no code reaches: not as ``x.name``, nor handed on as a callback); a library module read alone
    may be called from anywhere."""
    programs = analysis.shared.analyses
    if not any(module.is_entry for module in programs):
        return False
    name = function.name.value
    if analysis.enclosing_class(function) is not None:
        return not any(attribute.attr.value == name for module in programs for attribute in module.attributes)
    return not any(
        type(node) is cst.Name and node.value == name and node is not function.name  # type: ignore[attr-defined]
        for module in programs
        for node in module.preorder
    )


def frozen_models(analysis: ScriptAnalysis, statement: cst.BaseStatement) -> set[str] | None:
    """The names (their roots, as the statement's scope spells them) of the models whose ``requires_grad``
    the statement changes, itself or in a function of the program it calls with the model as an argument
    (``Distiller(student, teacher)`` freezing its ``teacher`` parameter: ``{"teacher"}``); ``None`` where
    the analysis cannot tell (a change through ``self``, a global, an argument written as an expression);
    empty where the statement changes none (a definition changes nothing when it runs)."""
    found: set[str] = set()
    if isinstance(statement, (cst.FunctionDef, cst.ClassDef)):
        return found
    for change in requires_grad_changes(analysis):
        if analysis.is_inside(change.node, statement):
            roots = _model_roots(analysis, change.receiver)
            if roots is None:
                return None
            found |= _with_owners(analysis, statement, roots)
    for part in walk(statement):
        if type(part) is not cst.Call:
            continue
        function = analysis.call_target(part)  # type: ignore[arg-type]
        owner = analysis.shared.analysis_of(function) if function is not None else None
        if function is None or owner is None:
            continue
        for change in requires_grad_changes(owner):
            if not owner.is_inside(change.node, function) or _changes_a_copy(owner, function, change.receiver):
                continue
            roots = _model_roots(owner, change.receiver)
            if roots is None or any(not owner.is_parameter(function, root) for root in roots):
                return None
            for root in roots:
                argument = analysis.argument_for(part, function, root)  # type: ignore[arg-type]
                name = dotted_name(argument) if argument is not None else None
                if name is None:
                    return None
                found |= _with_owners(analysis, part, {name.split(".")[0]})
    return found


def requires_grad_value(analysis: ScriptAnalysis, change: RequiresGradChange) -> bool | None:
    """The value a ``requires_grad`` write sets: ``False``, ``True`` (``requires_grad_()`` takes ``True`` by
    default), or ``None`` where it is no literal (``requires_grad_(not args.freeze)``)."""
    node = change.node
    if type(node) is cst.AssignTarget:
        value = analysis.parent(node).value  # type: ignore[union-attr]
    elif node.args:  # type: ignore[attr-defined]
        value = node.args[0].value  # type: ignore[attr-defined]
    else:
        return True
    if type(value) is cst.Name and value.value in ("True", "False"):
        return value.value == "True"
    return None


def freezes_every_parameter(analysis: ScriptAnalysis, change: RequiresGradChange, model: str) -> bool:
    """Whether the write sets ``requires_grad`` to ``False`` on every parameter of the model ``model`` names:
    ``model.requires_grad_(False)``, or ``p.requires_grad = False`` right in the body of ``for p in
    model.parameters():`` (no test between the loop and the write). DDP refuses to wrap a model left so."""
    if requires_grad_value(analysis, change) is not False:
        return False
    if type(change.node) is cst.Call and dotted_name(change.receiver) == model:
        return True
    if type(change.receiver) is not cst.Name:
        return False
    loop = analysis.parent(analysis.parent(change.statement))
    return (
        type(loop) is cst.For
        and type(loop.target) is cst.Name
        and loop.target.value == change.receiver.value
        and type(loop.iter) is cst.Call
        and call_method_name(loop.iter) == "parameters"
        and not loop.iter.args
        and dotted_name(loop.iter.func.value) == model  # type: ignore[attr-defined]
    )


def unfrozen_after(analysis: ScriptAnalysis, node: cst.CSTNode, model: str) -> bool:
    """Whether a write after the node, or in a loop around it, may set ``requires_grad`` back on a parameter
    of the model ``model`` names (``encoder.requires_grad_(True)`` once the head has warmed up)."""
    root = model.split(".")[0]
    for change in requires_grad_changes(analysis):
        if requires_grad_value(analysis, change) is False:
            continue
        roots = _model_roots(analysis, change.receiver)
        if roots is not None and root not in roots:
            continue
        if not analysis.comes_before(change.node, node) or _loop_around_both(analysis, change.node, node):
            return True
    return False


def frozen_before_the_wrap(analysis: ScriptAnalysis, wrap: cst.Call, wrapper: cst.BaseExpression) -> bool:
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
    wrapped = {dotted_name(under_self_returning_calls(wrap.args[0].value))}
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
            name = dotted_name(under_self_returning_calls(argument)) if argument is not None else None
            if name is None:
                return True
            there.add(name.split(".")[0])
        if there and _changed_before(owner, call, there, depth - 1):  # (the call's own statement runs the rest)
            return True
    return False


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
    value = under_self_returning_calls(assign.value)
    if not isinstance(value, cst.Call):
        return False
    used = {part.value for part in walk(value) if isinstance(part, cst.Name)}
    return not used & model_names


def _changes_a_copy(analysis: ScriptAnalysis, function: cst.FunctionDef, receiver: cst.BaseExpression) -> bool:
    """Whether a ``requires_grad`` write in a function of the program reaches only models the function copies
    itself: ``self.ema = deepcopy(model)`` then ``for p in self.ema.parameters(): p.requires_grad_(False)``
    (timm's and YOLOv5's EMA: ``deepcopy(de_parallel(model)).eval()``), or a local ``ema = copy.deepcopy(model)``,
    an ``AveragedModel(model)``. The caller's model keeps its gradients."""
    name = part_name(receiver)
    if name is None:
        return False
    sources = _parameter_sources(analysis, receiver, name) or [name]
    for source in sources:
        if source is None:
            return False
        parts = source.split(".")
        held = ".".join(parts[:2]) if parts[0] == "self" and len(parts) > 1 else parts[0]
        values = analysis.attribute_flows(receiver, held)
        if not values or not all(_is_model_copy(analysis, value) for value in values):
            return False
    return True


def _is_model_copy(analysis: ScriptAnalysis, value: cst.CSTNode) -> bool:
    """A new model made from one (:data:`names.MODEL_COPIES`), also moved or put in a mode (``.eval()``)."""
    value = under_self_returning_calls(value) if type(value) is cst.Call else value  # type: ignore[arg-type]
    return type(value) is cst.Call and analysis.copies_a_model(value)  # type: ignore[arg-type]


def _with_owners(analysis: ScriptAnalysis, at: cst.CSTNode, roots: set[str]) -> set[str]:
    """The names, and the models they are parts of where a name holds a submodule of another
    (``backbone = model.backbone`` adds ``model``; a copy, ``teacher = copy.deepcopy(model)``, does not)."""
    found = set(roots)
    for root in roots:
        for value in analysis.flows_into(at, root):
            owner = dotted_name(value)
            if owner is not None and "." in owner:
                found.add(owner.split(".")[0])
    return found


def _without_weights(layer: cst.Call) -> bool:
    """A normalisation layer built without its affine weights (``nn.LayerNorm(d, elementwise_affine=False)``)."""
    return any(
        arg.keyword is not None and arg.keyword.value in ("elementwise_affine", "affine") and dotted_name(arg.value) == "False"
        for arg in layer.args
    )


def _parameter_sources(analysis: ScriptAnalysis, receiver: cst.BaseExpression, name: str) -> list[str | None]:
    """What a parameter taken from a loop comes from: ``self.target`` of ``for p in self.target.parameters()``
    (``None`` for a source that is no dotted name), for each ``parameters()``-like call flowing into it."""
    return [
        dotted_name(part.func.value)  # type: ignore[attr-defined]
        for value in analysis.flows_into(receiver, name)
        for part in walk(value)
        if type(part) is cst.Call and call_method_name(part) in PARAMETER_SOURCES  # type: ignore[arg-type]
    ]


def _frozen_names(analysis: ScriptAnalysis, receiver: cst.BaseExpression) -> set[str]:
    """The dotted names a ``requires_grad`` write reaches: the receiver's (``self.target.weight``), and for a
    parameter taken from a loop, what it comes from (``self.target`` of ``for p in self.target.parameters()``)."""
    name = part_name(receiver)
    if name is None:
        return set()
    return {name, *(source for source in _parameter_sources(analysis, receiver, name) if source is not None)}


def _model_roots(analysis: ScriptAnalysis, receiver: cst.BaseExpression) -> set[str] | None:
    """The root names of the models a ``requires_grad`` write reaches: the receiver's own (``model.head``),
    or, for a parameter taken from a loop (``for p in teacher.parameters()``), the model it comes from."""
    name = part_name(receiver)
    if name is None:
        return None
    sources = _parameter_sources(analysis, receiver, name)
    if None in sources:
        return None
    roots = {source.split(".")[0] for source in sources if source is not None} or {name.split(".")[0]}
    return None if "self" in roots else roots


def _wrapped_again(analysis: ScriptAnalysis, node: cst.CSTNode, wraps: list[cst.Call]) -> bool:
    """Whether a wrap follows the node in its block or in an enclosing block of its function (``for p in
    raw.parameters(): p.requires_grad = True`` then ``model = DDP(raw)``): the new wrapper sees the change."""
    blocks = {id(a) for a in analysis.ancestors(node) if type(a) in (cst.IndentedBlock, cst.Module) and analysis.enclosing_function(a) is analysis.enclosing_function(node)}
    return any(id(analysis.parent(analysis.statement(wrap))) in blocks and analysis.comes_before(node, wrap) for wrap in wraps)


def _frozen_under_search(analysis: ScriptAnalysis, node: cst.CSTNode, wraps: list[cst.Call]) -> bool:
    """Whether the node freezes (``requires_grad = False``, ``requires_grad_(False)``) after wraps that all
    look for unused parameters: DDP then takes a frozen parameter for an unused one."""
    value = None
    if type(node) is cst.AssignTarget:
        value = analysis.parent(node).value  # type: ignore[union-attr]
    elif type(node) is cst.Call and node.args:  # type: ignore[attr-defined]
        value = node.args[0].value  # type: ignore[attr-defined]
    if not (type(value) is cst.Name and value.value == "False"):  # type: ignore[union-attr]
        return False
    earlier = [wrap for wrap in wraps if analysis.comes_before(wrap, node)]
    return bool(earlier) and all(
        (flag := keyword_argument(wrap, "find_unused_parameters")) is not None and is_true(flag.value) for wrap in earlier
    )


def _loop_around_both(analysis: ScriptAnalysis, node: cst.CSTNode, wrap: cst.CSTNode) -> bool:
    """Whether a loop runs both the node and the wrap (a later iteration runs the node after the wrap)."""
    return any(isinstance(a, (cst.For, cst.While)) and analysis.is_inside(wrap, a) for a in analysis.ancestors(node))


class SkippedLayer(NamedTuple):
    """A layer of a model that gets no gradient on some steps: the analysis of its module, the call (of the
    layer in ``forward()``, or the layer's construction when nothing uses it) and why, for a report."""

    analysis: ScriptAnalysis
    node: cst.Call
    why: str


def skipped_in_some_steps(analysis: ScriptAnalysis, model: cst.BaseExpression) -> SkippedLayer | None:
    """A layer of the model's class that its ``forward()`` calls only on some steps (with the analysis of
    its module), or ``None``: a call of a submodule (``self.head(x)``, ``layer(x)`` in a loop over
    ``self.layers``) under a condition, or after an early ``continue`` / ``break`` / ``return``, whose test
    reads something besides the model's own settings (an input, ``torch.rand()``, a task name). Those
    layers' parameters get no gradient on such steps, which DDP refuses unless it looks for unused
    parameters. A test of settings alone (``self.training``, ``self.downsample is not None``) is the same on
    every step. Classes whose instances the model builds are searched too, three levels deep."""
    classes = [analysis.shared.constructed[origin] for origin in analysis.origins(model) if origin in analysis.shared.constructed]
    if _forwards_per_step(analysis, model) > 1:
        # ``loss = ce(model(x, "cls"), y) + mse(model(x2, "reg"), y2)``: one step runs every head through
        # several forwards; with find_unused_parameters DDP marks a head ready twice and stops.
        return None
    dropped = _output_used_on_some_steps(analysis, model)
    if dropped is not None:
        return dropped
    searched = _model_classes(analysis, classes)
    for owner, cls, forward in searched:
        if forward is not None and _checkpoints_reentrantly(owner, forward):
            return None  # reentrant activation checkpointing cannot run with find_unused_parameters=True
    for owner, cls, forward in searched:
        if forward is not None:
            changing = _graph_changes(owner, cls, forward)
            if changing is not None:
                return changing
            gradless = _gradless_layer(owner, cls, forward)
            if gradless is not None:
                return SkippedLayer(owner, gradless, f"its forward() runs `{dotted_name(gradless.func)}` only without gradients (no_grad or detach)")
            unused = _unused_layer(owner, cls)
            if unused is not None:
                attribute, layer = unused
                return SkippedLayer(owner, layer, f"`self.{attribute}` ({dotted_name(layer.func) or 'a layer'}) is never used")
    return None


def _graph_changes(analysis: ScriptAnalysis, cls: cst.ClassDef, forward: cst.FunctionDef) -> SkippedLayer | None:
    """A layer the class's ``forward`` calls on some steps only: under a test that can change from step to
    step, or picked from a container by an input."""
    found = _conditional_layer_call(analysis, cls, forward)
    if found is not None:
        return SkippedLayer(analysis, *found)
    picked = _layer_picked_by_input(analysis, cls, forward)
    if picked is not None:
        container = dotted_name(picked.func.value)  # type: ignore[attr-defined]
        return SkippedLayer(analysis, picked, f"its forward() picks an entry of `{container}` by an input: the others get no gradient on that step")
    return None


class ReenteredLayer(NamedTuple):
    """Parameters that one step reaches through more than one reentrant activation checkpoint (or through one
    and a plain call): the analysis of the model's module, the checkpoint call, why (for a report), and
    whether the model's graph is otherwise the same on every step (DDP's ``static_graph=True`` fits then)."""

    analysis: ScriptAnalysis
    node: cst.Call
    why: str
    static: bool


def reentered_in_one_step(analysis: ScriptAnalysis, model: cst.BaseExpression) -> ReenteredLayer | None:
    """Where the model's ``forward()`` (or that of a class whose instances it builds) checkpoints a part of
    itself the reentrant way more than once per step: ``checkpoint(self.block, h, use_reentrant=True)`` on
    each pass of a loop that does not change ``self.block`` (a block whose weights are shared across depth),
    two checkpoints of the same callable, or a checkpoint of a layer that ``forward()`` also calls plainly.
    Each reentrant checkpoint runs a backward pass of its own, so DDP's hooks mark those parameters ready
    once per checkpoint, and DDP stops at the first ``backward()`` ("Expected to mark a variable ready only
    once") unless the wrap passes ``static_graph=True``, which holds only for a graph that is the same on
    every step. Found once per model expression (the rule's findings and its fix both ask)."""
    found = analysis.derived("reentered in one step", lambda _: {})
    if model not in found:
        found[model] = _reentered_in_one_step(analysis, model)
    return found[model]  # type: ignore[no-any-return]


def _reentered_in_one_step(analysis: ScriptAnalysis, model: cst.BaseExpression) -> ReenteredLayer | None:
    classes = [analysis.shared.constructed[origin] for origin in analysis.origins(model) if origin in analysis.shared.constructed]
    searched = _model_classes(analysis, classes)
    for owner, cls, forward in searched:
        if forward is None:
            continue
        found = _reentered_checkpoint(owner, cls, forward)
        if found is not None:
            static = (
                _forwards_per_step(analysis, model) <= 1
                and _output_used_on_some_steps(analysis, model) is None
                and all(f is None or _graph_changes(o, c, f) is None for o, c, f in searched)
            )
            return ReenteredLayer(owner, *found, static)
    return None


def _reentered_checkpoint(analysis: ScriptAnalysis, cls: cst.ClassDef, forward: cst.FunctionDef) -> tuple[cst.Call, str] | None:
    """The first reentrant checkpoint in ``forward`` whose callable (read from the model: ``self.block``, a
    lambda or ``partial`` over it) runs more than once per forward pass, with why."""
    checkpoints = [
        node
        for node in walk(forward.body)
        if type(node) is cst.Call and analysis.is_call_to(node, CHECKPOINTS) and _reentrant(node) and node.args and node.args[0].keyword is None  # type: ignore[arg-type, attr-defined]
    ]
    owner = cls.name.value
    for call in checkpoints:
        function = call.args[0].value
        read = {n.value for n in walk(function) if type(n) is cst.Name}  # type: ignore[attr-defined]
        if not _reads_the_model(analysis, function, read, forward):
            continue  # a function of the module's own, not a part of the model
        text = " ".join(cst.Module([]).code_for_node(function).split())
        loop = _repeating_loop(analysis, call, forward, read)
        if loop is not None:
            return call, f"{owner}.forward() checkpoints `{text}` the reentrant way on each pass of {loop}, so DDP marks its parameters ready once per pass"
        callee = dotted_name(function)
        for other in walk(forward.body):
            if other is call or type(other) is not cst.Call or analysis.in_exclusive_branches(other, call):
                continue
            if other in checkpoints and " ".join(cst.Module([]).code_for_node(other.args[0].value).split()) == text:  # type: ignore[attr-defined]
                return call, f"{owner}.forward() checkpoints `{text}` the reentrant way twice, so DDP marks its parameters ready twice"
            if callee is not None and dotted_name(other.func) == callee:  # type: ignore[attr-defined]
                return call, f"{owner}.forward() checkpoints `{text}` the reentrant way and also calls it plainly, so DDP marks its parameters ready twice"
    return None


def _reads_the_model(analysis: ScriptAnalysis, function: cst.BaseExpression, read: set[str], forward: cst.FunctionDef) -> bool:
    """Whether a checkpointed callable is (a part of) the model: it reads ``self``, or a loop variable of
    ``forward`` over the model's own containers (``block`` of ``for block in self.blocks``)."""
    if "self" in read:
        return True
    for ancestor in analysis.ancestors(function):
        if ancestor is forward:
            return False
        if type(ancestor) is cst.For and read & {n.value for n in walk(ancestor.target) if type(n) is cst.Name}:  # type: ignore[attr-defined]
            if any(type(n) is cst.Name and n.value == "self" for n in walk(ancestor.iter)):  # type: ignore[attr-defined]
                return True
    return False


def _repeating_loop(analysis: ScriptAnalysis, call: cst.Call, forward: cst.FunctionDef, read: set[str]) -> str | None:
    """A loop (or comprehension) of ``forward`` around the checkpoint call that runs it again with the same
    callable, said for a report (``a loop``); ``None`` when each pass takes a callable of its own (``for block
    in self.blocks: checkpoint(block, h)``, ``self.blocks[i]``). A callable that is not a layer of the model
    itself (a method taking the layer as an argument) repeats only when no argument reads the loop's
    variables."""
    function = call.args[0].value
    layer = dotted_name(function)
    own_layer = layer is not None and layer.startswith("self.") and layer.count(".") == 1
    every = read if own_layer else {n.value for n in walk(call) if type(n) is cst.Name}  # type: ignore[attr-defined]
    for ancestor in analysis.ancestors(call):
        if ancestor is forward:
            return None
        kind = type(ancestor)
        if kind is cst.For:
            if not every & {n.value for n in walk(ancestor.target) if type(n) is cst.Name}:  # type: ignore[attr-defined]
                return "a loop"
        elif kind is cst.While:
            if not every & analysis.names_bound_in(ancestor.body):
                return "a loop"
        elif kind in (cst.ListComp, cst.SetComp, cst.GeneratorExp, cst.DictComp):
            targets: set[str] = set()
            clause = ancestor.for_in  # type: ignore[attr-defined]
            while clause is not None:
                targets |= {n.value for n in walk(clause.target) if type(n) is cst.Name}  # type: ignore[attr-defined]
                clause = clause.inner_for_in
            if not every & targets:
                return "a comprehension"
        elif kind in (cst.FunctionDef, cst.Lambda):
            return None
    return None


def wrapped_model_classes(analysis: ScriptAnalysis) -> frozenset[cst.ClassDef]:
    """The classes of the program whose instances the program's wraps take (themselves, or in a container of
    torch's: ``DDP(nn.Sequential(VAE()))``), and those whose instances they build (three levels deep): the classes
    whose ``forward`` runs in a wrapped model's step. Found once per analysis."""

    def find(_: ScriptAnalysis) -> frozenset[cst.ClassDef]:
        constructed = analysis.shared.constructed
        wrapped: list[cst.ClassDef] = []
        for origin in _wrapped_origins(analysis):
            if type(origin) is not cst.Call:
                continue
            if origin in constructed:
                wrapped.append(constructed[origin])  # type: ignore[index]
                continue
            # A container of torch's (``nn.Sequential(VAE(), head)``, ``nn.ModuleList([...])``): the models in it.
            home = analysis.shared.analysis_of(origin) or analysis
            for arg in origin.args:  # type: ignore[attr-defined]
                for part in walk(arg.value):
                    parts = [part] if type(part) is cst.Call else home.origins(part) if type(part) is cst.Name else set()  # type: ignore[arg-type]
                    wrapped.extend(constructed[o] for o in parts if o in constructed)  # type: ignore[index]
        return frozenset(cls for _, cls, _ in _model_classes(analysis, wrapped))

    return analysis.derived("wrapped model classes", find)


#: ``nn.Module``'s own methods, which a DDP wrapper has too (``model.train()`` works on either).
MODULE_METHODS = frozenset(
    {
        "forward", "train", "eval", "to", "cuda", "cpu", "half", "float", "double", "bfloat16", "type", "parameters",
        "named_parameters", "buffers", "named_buffers", "modules", "named_modules", "children", "named_children",
        "state_dict", "load_state_dict", "zero_grad", "apply", "register_buffer", "register_parameter", "add_module",
        "get_submodule", "get_parameter", "requires_grad_", "extra_repr", "register_forward_hook",
        "register_forward_pre_hook", "register_full_backward_hook",
    }
)


def wrapped_model_methods(analysis: ScriptAnalysis) -> dict[str, cst.FunctionDef]:
    """The methods (by name) that only the classes of the models the program wraps (and the program's
    classes they derive from) define, not ``nn.Module``'s own nor any other class of the program: a call
    ``x.val_step(batch)`` by such a name, on an object the analysis cannot trace (a hook a registry built, handed
    the runner), is a call on the wrapped model, which its DDP wrapper does not have. Found once per analysis."""

    def find(_: ScriptAnalysis) -> dict[str, cst.FunctionDef]:
        constructed = analysis.shared.constructed
        wrapped = {constructed[o] for o in _wrapped_origins(analysis) if type(o) is cst.Call and o in constructed}  # type: ignore[index]
        if not wrapped:
            wrapped = _classes_of_methods_called_on_wraps(analysis)
        if not wrapped:
            return {}
        owners = {ancestor for cls in wrapped for ancestor in analysis.shared.ancestors_of(cls)}
        theirs: dict[str, cst.FunctionDef] = {}
        others: set[str] = set()
        for module in analysis.shared.analyses:
            for cls in module.classes:
                for method in own_methods(cls):
                    if cls in owners:
                        theirs.setdefault(method.name.value, method)
                    else:
                        others.add(method.name.value)
        return {n: f for n, f in theirs.items() if n not in others and n not in MODULE_METHODS and not n.startswith("__")}

    return analysis.derived("wrapped model methods", find)


def _classes_of_methods_called_on_wraps(analysis: ScriptAnalysis) -> set[cst.ClassDef]:
    """Where the wrapped model's class cannot be traced (a registry built it from a config): the program's
    ``nn.Module`` classes that define a method (not ``nn.Module``'s own) the program calls on a wrapped model
    (``self.model.train_step(batch)`` of a runner whose ``self.model`` holds the wrap), when one class alone does."""
    defined: dict[cst.ClassDef, set[str]] = {}
    for module in analysis.shared.analyses:
        for cls in module.classes:
            methods = {m.name.value for m in own_methods(cls) if not m.name.value.startswith("__")} - MODULE_METHODS
            if methods and module.derives_from(cls, names.MODULE_BASES):
                defined[cls] = methods
    candidates = set().union(*defined.values()) if defined else set()
    called: set[str] = set()
    for module in analysis.shared.analyses:
        for attribute in module.attributes:
            name = attribute.attr.value
            if name not in candidates or name in called:
                continue
            parent = module.parent(attribute)
            if type(parent) is cst.Call and parent.func is attribute and module.wrapped_at(attribute.value) is not None:  # type: ignore[attr-defined]
                called.add(name)
    found = {cls for cls, methods in defined.items() if methods & called}
    return found if len(found) == 1 else set()


def _model_classes(analysis: ScriptAnalysis, classes: list[cst.ClassDef]) -> list[tuple[ScriptAnalysis, cst.ClassDef, cst.FunctionDef | None]]:
    """The model's classes and those whose instances they build, three levels deep, each with the analysis
    of its module and its own ``forward`` (nearest first)."""
    found: list[tuple[ScriptAnalysis, cst.ClassDef, cst.FunctionDef | None]] = []
    seen: set[cst.ClassDef] = set()
    for _ in range(3):
        inner: list[cst.ClassDef] = []
        for cls in classes:
            if cls in seen:
                continue
            seen.add(cls)
            owner = analysis.shared.analysis_of(cls)
            if owner is None:
                continue
            found.append((owner, cls, own_method(cls, "forward")))
            inner.extend(owner.shared.constructed[n] for n in walk(cls) if type(n) is cst.Call and n in owner.shared.constructed)  # type: ignore[comparison-overlap]
        classes = inner
    return found


def _output_used_on_some_steps(analysis: ScriptAnalysis, model: cst.BaseExpression) -> SkippedLayer | None:
    """``recon, logits = model(x)`` in a training loop that reads ``logits`` only under an ``if`` that leaves
    ``backward()`` out (``if step % 2 == 0: loss = loss + ce(logits, y)``), or never (``_``): the layers that
    compute that output get no gradient on the other steps."""
    name = dotted_name(model)
    home = analysis.shared.analysis_of(model) or analysis
    function = home.enclosing_function(model)
    if name is None:
        return None
    for backward in home.backward_calls:
        loop = home.nearest_loop(backward)
        if loop is None or home.enclosing_function(loop) is not function:
            continue
        for node in walk(loop.body):
            if not (
                type(node) is cst.Assign
                and type(node.value) is cst.Call  # type: ignore[attr-defined]
                and dotted_name(node.value.func) == name  # type: ignore[attr-defined]
                and len(node.targets) == 1  # type: ignore[attr-defined]
                and home.comes_before(node, backward)
            ):
                continue
            if type(node.targets[0].target) is cst.Name:  # type: ignore[attr-defined]
                key = _dict_output_read_on_some_steps(home, node, backward, loop)  # type: ignore[arg-type]
                if key is not None:
                    return SkippedLayer(home, node.value, f"the training step uses `{key}`, an output of its forward(), only on some steps")  # type: ignore[arg-type]
                continue
            if type(node.targets[0].target) not in (cst.Tuple, cst.List):  # type: ignore[attr-defined]
                continue
            elements = node.targets[0].target.elements  # type: ignore[attr-defined]
            for index, element in enumerate(elements):
                output = element.value.value if type(element.value) is cst.Name else None
                if output is None:
                    continue
                reads = [
                    n for n in walk(loop.body)
                    if type(n) is cst.Name and n.value == output and n is not element.value and home.comes_before(node, n)  # type: ignore[attr-defined]
                    and not isinstance(home.parent(n), cst.AssignTarget)
                ]
                never = output == "_" or not reads
                if never and _outputs_share_layers(home, node.value, index, len(elements)):  # type: ignore[arg-type]
                    continue  # ``logits, loss = model(x, y)``: the loss is computed from the logits
                if never:
                    return SkippedLayer(home, node.value, f"the training step never uses `{output}`, an output of its forward()")  # type: ignore[arg-type]
                if all(_read_apart_from(home, read, backward, loop) for read in reads):
                    return SkippedLayer(home, node.value, f"the training step uses `{output}`, an output of its forward(), only on some steps")  # type: ignore[arg-type]
    return None


def _built_models(analysis: ScriptAnalysis, model: cst.BaseExpression) -> list[cst.Call]:
    """The calls that build the model a name holds: not its device moves (``LM().to(device)`` hands back the
    model ``LM()`` built, among the origins too) nor the DDP wrap the migration put around it; through
    ``torch.compile(model)``, the model compiled."""
    found: list[cst.Call] = []
    pending, seen = [model], set()
    while pending:
        for origin in analysis.origins(pending.pop()):
            if type(origin) is not cst.Call or origin in seen or call_method_name(origin) in SELF_RETURNING_METHODS or analysis.is_call_to(origin, names.MODEL_WRAPPERS):  # type: ignore[arg-type]
                continue
            seen.add(origin)
            if analysis.is_call_to(origin, names.MODEL_COMPILERS) and origin.args:  # type: ignore[arg-type, attr-defined]
                pending.append(origin.args[0].value)  # type: ignore[attr-defined]  (``model = torch.compile(model)``)
            else:
                found.append(origin)  # type: ignore[arg-type]
    return found


def _dict_output_read_on_some_steps(analysis: ScriptAnalysis, assign: cst.Assign, backward: cst.CSTNode, loop: cst.CSTNode) -> str | None:
    """``out = model(x)`` of a forward that returns a dict (``{"logits": self.cls(f), "aux": self.aux(f)}``),
    whose step reads ``out["aux"]`` only under an ``if`` that leaves ``backward()`` out: the item, spelled as
    read. An item the forward computes from the others (``"loss": F.cross_entropy(logits, y)``) is no head of
    its own."""
    output = assign.targets[0].target.value  # type: ignore[attr-defined]
    keys = _returned_dict_items(analysis, assign.value)  # type: ignore[arg-type]
    if not keys:
        return None
    reads: dict[str, list[cst.CSTNode]] = {}
    for node in walk(loop.body):  # type: ignore[attr-defined]
        if type(node) is cst.Subscript and type(node.value) is cst.Name and node.value.value == output and analysis.comes_before(assign, node):  # type: ignore[attr-defined]
            key = subscript_key(node)  # type: ignore[arg-type]
            if key is not None:
                reads.setdefault(key, []).append(node)
    for key, own in keys.items():
        found = reads.get(key)
        if own and found and all(_read_apart_from(analysis, read, backward, loop) for read in found):
            return f'{output}["{key}"]'
    return None


def _returned_dict_items(analysis: ScriptAnalysis, call: cst.Call) -> dict[str, bool]:
    """For a forward that returns dict literals (every class the model may be), each literal key with whether
    its value runs a layer of the model's own (``self.aux(f)``) rather than computing from the other items."""
    constructed = analysis.shared.constructed
    origins = _built_models(analysis, call.func)
    if not origins or not all(o in constructed for o in origins):
        return {}
    items: dict[str, bool] = {}
    for cls in {constructed[o] for o in origins}:  # type: ignore[index]
        forward = own_method(cls, "forward")
        returned = analysis.shared.returned_values(forward) if forward is not None else []
        if not returned or not all(type(v) is cst.Dict for v in returned):
            return {}
        for value in returned:
            for element in value.elements:  # type: ignore[attr-defined]
                if type(element) is cst.DictElement and type(element.key) is cst.SimpleString:
                    key = str(element.key.evaluated_value)
                    runs_a_layer = any(type(n) is cst.Call and (dotted_name(n.func) or "").startswith("self.") for n in walk(element.value))  # type: ignore[attr-defined]
                    items[key] = items.get(key, False) or runs_a_layer
    return items


#: Recurrent layers of torch: every output (``output, (h_n, c_n)``) comes from all their parameters.
RECURRENT_LAYERS = frozenset({f"torch.nn.{n}" for n in ("LSTM", "GRU", "RNN")})


def _outputs_share_layers(analysis: ScriptAnalysis, call: cst.Call, discarded: int, count: int) -> bool:
    """Whether an output of a forward that the step never reads leaves no parameter without a gradient: the
    model is a recurrent layer of torch (``out, _ = lstm(x)``), or every class of the program it may be returns
    tuples whose other outputs are computed from that one (nanoGPT's ``return logits, loss`` with ``loss =
    F.cross_entropy(logits, ...)``). Anything else may compute it with layers of its own."""
    receiver = call.func
    origins = _built_models(analysis, receiver)
    if not origins:
        return False
    if all(analysis.is_call_to(o, RECURRENT_LAYERS) for o in origins):  # type: ignore[arg-type]
        return True
    constructed = analysis.shared.constructed
    if not all(o in constructed for o in origins):
        return False
    for cls in {constructed[o] for o in origins}:  # type: ignore[index]
        owner = analysis.shared.analysis_of(cls) or analysis
        forward = own_method(cls, "forward")
        if forward is None:
            return False
        returned = analysis.shared.returned_values(forward)
        if not returned:
            return False
        for value in returned:
            if type(value) is not cst.Tuple or len(value.elements) != count:  # type: ignore[attr-defined]
                return False
            kept = value.elements[discarded].value  # type: ignore[attr-defined]
            name = kept.value if type(kept) is cst.Name else None  # type: ignore[attr-defined]
            others = [e.value for i, e in enumerate(value.elements) if i != discarded]  # type: ignore[attr-defined]
            if name is None or not all(_computed_from(owner, other, name) for other in others):
                return False
    return True


def _computed_from(analysis: ScriptAnalysis, expr: cst.BaseExpression, name: str, depth: int = 4) -> bool:
    """Whether a value of a function reads the name, directly or through the names it is assigned from."""
    if any(type(n) is cst.Name and n.value == name for n in walk(expr)):  # type: ignore[attr-defined]
        return True
    if depth == 0:
        return False
    reads = [n for n in walk(expr) if type(n) is cst.Name]
    values = [v for n in reads for v in analysis.flows_into(n, n.value) if v is not expr]  # type: ignore[attr-defined]
    return bool(values) and all(_computed_from(analysis, v, name, depth - 1) for v in values if not is_none(v)) and any(not is_none(v) for v in values)


def _read_apart_from(analysis: ScriptAnalysis, read: cst.CSTNode, backward: cst.CSTNode, loop: cst.CSTNode) -> bool:
    """Whether the read sits under an ``if`` inside the loop that does not hold the ``backward()`` call."""
    for ancestor in analysis.ancestors(read):
        if ancestor is loop:
            return False
        if type(ancestor) is cst.If and not analysis.is_inside(backward, ancestor):
            return True
    return False


#: Activation checkpointing, reentrant unless ``use_reentrant=False`` is given.
CHECKPOINTS = frozenset({"torch.utils.checkpoint.checkpoint", "torch.utils.checkpoint.checkpoint_sequential"})


def _checkpoints_reentrantly(analysis: ScriptAnalysis, forward: cst.FunctionDef) -> bool:
    """Whether ``forward`` checkpoints activations the reentrant way (``checkpoint(f, x)`` or
    ``use_reentrant=True``): DDP with ``find_unused_parameters=True`` then marks a parameter ready twice."""
    return any(type(node) is cst.Call and analysis.is_call_to(node, CHECKPOINTS) and _reentrant(node) for node in walk(forward.body))  # type: ignore[arg-type]


def _reentrant(checkpoint: cst.Call) -> bool:
    """Whether a checkpoint call runs the reentrant way: without ``use_reentrant`` (torch's default is
    ``True``) or with anything but a literal ``False``."""
    flag = keyword_argument(checkpoint, "use_reentrant")
    return flag is None or not (type(flag.value) is cst.Name and flag.value.value == "False")  # type: ignore[attr-defined]


def _forwards_per_step(analysis: ScriptAnalysis, model: cst.BaseExpression) -> int:
    """How many times the model is called in a loop around a ``backward()`` of the function the model is
    named in (the most over those loops): more than one forward per backward."""
    name = dotted_name(model)
    most = 0
    home = analysis.shared.analysis_of(model) or analysis
    function = home.enclosing_function(model)
    if name is None:
        return most
    for backward in home.backward_calls:
        loop = home.nearest_loop(backward)
        if loop is None or home.enclosing_function(loop) is not function:
            continue
        try:
            calls = _calls_on_one_path(loop.body, name)
        except RecursionError:  # (a body nested deeper than the interpreter recurses: every call counts)
            calls = sum(1 for node in walk(loop.body) if type(node) is cst.Call and dotted_name(node.func) == name)  # type: ignore[attr-defined]
        most = max(most, calls)
    return most


def _calls_on_one_path(node: cst.CSTNode, name: str) -> int:
    """The most calls of ``name`` one run through the node makes: the two sides of an ``if`` (or of a
    conditional expression) are alternatives, not both run (``out, aux = model(x, with_aux=True)`` on even
    steps, ``model(x)`` on the others: one forward per step)."""
    kind = type(node)
    if kind is cst.If or kind is cst.IfExp:
        other = node.orelse  # type: ignore[attr-defined]
        sides = [_calls_on_one_path(node.body, name), _calls_on_one_path(other, name) if other is not None else 0]  # type: ignore[attr-defined]
        return _calls_on_one_path(node.test, name) + max(sides)  # type: ignore[attr-defined]
    own = 1 if kind is cst.Call and dotted_name(node.func) == name else 0  # type: ignore[attr-defined]
    return own + sum(_calls_on_one_path(child, name) for child in tree.children(node))


def _conditional_layer_call(analysis: ScriptAnalysis, cls: cst.ClassDef, forward: cst.FunctionDef) -> tuple[cst.Call, str] | None:
    """The first call in ``forward`` of a layer that has parameters (``self.head(x)``, ``block(x)`` in a
    loop over ``self.blocks``) that may not run on some training step, with why: no path through
    ``forward`` is sure to call the layer (:func:`_runs_on_every_path`) past tests that can change from step
    to step, or settings that may keep it from running at all (:func:`_setting_verdict`)."""
    layers: dict[str | None, str | None] = {}
    for loop in walk(forward):
        if type(loop) is not cst.For:
            continue
        target, iterated = loop.target, loop.iter  # type: ignore[attr-defined]
        if type(iterated) is cst.Call and callee_name(iterated) == "enumerate" and iterated.args and type(target) is cst.Tuple and len(target.elements) == 2:
            # ``for e, expert in enumerate(self.experts):``: the second name holds each layer
            target, iterated = target.elements[1].value, iterated.args[0].value
        if (dotted_name(iterated) or "").startswith("self."):
            layers[dotted_name(target)] = dotted_name(iterated)
    methods = {method.name.value for method in own_methods(cls)}
    changing = analysis.shared.attributes_set_after_construction()
    holders: dict[cst.Call, str] = {}
    for node in walk(forward.body):
        if type(node) is not cst.Call:
            continue
        callee = dotted_name(node.func)  # type: ignore[attr-defined]
        if callee is None and type(node.func) is cst.Subscript:  # type: ignore[attr-defined]
            held = dotted_name(node.func.value)  # type: ignore[attr-defined]
            if held is not None and held.startswith("self.") and held.count(".") == 1:
                callee = held  # ``self.experts[e](x)``: a layer of the container
        if callee is None:
            continue
        if callee.startswith("self.") and callee.count(".") == 1:
            attribute = callee.split(".")[1]
            if attribute in methods or not _may_have_parameters(analysis, cls, attribute):
                continue
            holders[node] = callee  # type: ignore[index]
        elif callee in layers:
            holders[node] = layers[callee] or callee  # type: ignore[index]
    paths = _Paths(analysis, cls, holders, changing)
    reported: set[str] = set()
    for node, holder in holders.items():
        if holder in reported:
            continue
        reported.add(holder)
        if not isinstance(forward.body, cst.IndentedBlock) or paths.always(forward.body.body, holder):
            continue
        callee = dotted_name(node.func) or holder
        conditions = list(rank_facts(analysis).conditions(node))
        setting = next((c for c in conditions if c.in_body is not None and _settings_only(c.test, changing)), None)
        if setting is not None and all(_settings_only(c.test, changing) for c in conditions):
            test = " ".join(cst.Module([]).code_for_node(setting.test).split())
            held = "holds" if setting.in_body else "does not hold"
            return node, f"its forward() calls `{callee}` only when `{test}` {held}, and builds it whether or not"
        return node, f"its forward() calls `{callee}` only on some steps"
    return None


#: How a run through a block of ``forward`` ends, as far as one layer goes (:class:`_Paths`).
_CALLED, _LEFT, _OUT_OF_LOOP, _ON = "called", "left", "out of the loop", "on"


class _Paths:
    """Whether every path through ``forward`` calls a layer on a training step (``self.training`` is true), the
    tests of the model's settings read where their values are known. A path that raises is no training step
    and counts as calling it."""

    def __init__(self, analysis: ScriptAnalysis, cls: cst.ClassDef, holders: dict[cst.Call, str], changing: frozenset[str]) -> None:
        self.analysis = analysis
        self.cls = cls
        self.holders = holders
        self.changing = changing
        self._verdicts: dict[tuple[cst.CSTNode, str], bool | None] = {}

    def _verdict(self, test: cst.BaseExpression, holder: str) -> bool | None:
        """:func:`_setting_verdict` of a test for a layer, found once (every layer asks of every test)."""
        key = (test, holder)
        if key not in self._verdicts:
            self._verdicts[key] = _setting_verdict(self.analysis, self.cls, test, holder, self.changing)
        return self._verdicts[key]

    def always(self, statements: Sequence[cst.BaseStatement], holder: str) -> bool:
        """Whether running the statements in order calls the layer on every path."""
        return self._run(statements, holder) == _CALLED

    def _run(self, statements: Sequence[cst.BaseStatement], holder: str) -> str:
        """How a run through the statements ends for the layer: :data:`_CALLED` on every path that goes on, else
        :data:`_LEFT` (a ``return`` without it on some path), :data:`_OUT_OF_LOOP` (a ``break`` / ``continue``
        without it) or :data:`_ON` (it falls through without calling it)."""
        for statement in statements:
            kind = type(statement)
            if kind is cst.SimpleStatementLine:
                if self._calls(statement, holder):
                    return _CALLED
                smalls = {type(small) for small in statement.body}  # type: ignore[attr-defined]
                if cst.Raise in smalls:
                    return _CALLED  # (no training step goes that way)
                if cst.Return in smalls:
                    return _LEFT
                if smalls & {cst.Continue, cst.Break}:
                    return _OUT_OF_LOOP
                continue
            if kind is cst.If:
                if self._calls(statement.test, holder):  # type: ignore[attr-defined]
                    return _CALLED
                verdict = self._verdict(statement.test, holder)  # type: ignore[attr-defined]
                sides = [(statement.body, True), (statement.orelse, False)]  # type: ignore[attr-defined]
                ends = [self._side(side, holder) for side, branch in sides if verdict is None or verdict is branch]
                if all(end == _CALLED for end in ends):
                    return _CALLED
                for end in (_LEFT, _OUT_OF_LOOP):
                    if end in ends:
                        return end
                continue
            if kind in (cst.With, cst.Try):
                end = self._run(statement.body.body, holder)  # type: ignore[attr-defined]
                if end != _ON:
                    return end
                continue
            if kind in (cst.For, cst.While):
                # A loop's body runs (a forward's loops do: over its layers, its time steps); a ``break`` or
                # ``continue`` in it ends the loop's own pass, not the forward. Over the layer's own container
                # (``for block in self.blocks:``), every entry runs only if no pass is cut short.
                body = statement.body.body  # type: ignore[attr-defined]
                end = self._run(body, holder)
                over_the_layer = dotted_name(statement.iter) == holder if kind is cst.For else False  # type: ignore[attr-defined]
                if over_the_layer and end == _CALLED and self._may_cut(body, holder):
                    return _ON  # (``x = block(x); if x.abs().mean() < eps: break``: the later blocks do not run)
                if end in (_CALLED, _LEFT):
                    return end
                continue
        return _ON

    def _may_cut(self, statements: Sequence[cst.BaseStatement], holder: str) -> bool:
        """Whether a pass through a loop's body may end early: a reachable ``break``, ``continue`` or
        ``return`` (the tests of settings with known values choosing their side; nested loops' own ``break``
        and ``continue`` excepted)."""
        for statement in statements:
            kind = type(statement)
            if kind is cst.SimpleStatementLine:
                if any(type(small) in (cst.Return, cst.Break, cst.Continue) for small in statement.body):  # type: ignore[attr-defined]
                    return True
            elif kind is cst.If:
                verdict = self._verdict(statement.test, holder)  # type: ignore[attr-defined]
                for side, branch in ((statement.body, True), (statement.orelse, False)):  # type: ignore[attr-defined]
                    if side is None or (verdict is not None and verdict is not branch):
                        continue
                    block = [side] if type(side) is cst.If else (side.body if type(side) is cst.Else else side).body  # type: ignore[attr-defined]
                    if self._may_cut(block, holder):
                        return True
            elif kind in (cst.With, cst.Try):
                if self._may_cut(statement.body.body, holder):  # type: ignore[attr-defined]
                    return True
            elif kind in (cst.For, cst.While) and leaves_function(statement):
                return True
        return False

    def _side(self, side: cst.CSTNode | None, holder: str) -> str:
        if side is None:
            return _ON
        if type(side) is cst.If:  # ``elif``
            return self._run([side], holder)  # type: ignore[list-item]
        block = side.body if type(side) is cst.Else else side  # type: ignore[attr-defined]
        return self._run(block.body, holder)  # type: ignore[attr-defined]

    def _spellings(self, holder: str) -> set[str | None]:
        """The names the forward calls a holder's layers by (``b`` of ``for b in self.blocks: b(x)``)."""
        return {name for call, held in self.holders.items() if held == holder and (name := dotted_name(call.func)) is not None}

    def _calls(self, node: cst.CSTNode, holder: str) -> bool:
        """Whether the node runs the layer whatever its values: calls it, or hands it (or a lambda that calls it)
        to a call that runs it (``checkpoint(self.block, x)``, ``data_parallel(self.main, x, ids)``); in a conditional expression on
        the side a setting's known value takes, or on both sides, not right of an ``and`` / ``or``, nor in a nested function,
        lambda or comprehension."""
        stack = [node]
        while stack:
            current = stack.pop()
            kind = type(current)
            if kind is cst.Call and self.holders.get(current) == holder:  # type: ignore[arg-type]
                return True
            if kind is cst.Arg and (dotted_name(current.value) == holder or dotted_name(current.value) in self._spellings(holder)):  # type: ignore[attr-defined]
                return True  # (``checkpoint(b, x)`` of ``for b in self.blocks``: ``b`` stands for the layer)
            if kind is cst.IfExp:
                stack.append(current.test)  # type: ignore[attr-defined]
                verdict = self._verdict(current.test, holder)  # type: ignore[attr-defined]
                if verdict is not None:
                    stack.append(current.body if verdict else current.orelse)  # type: ignore[attr-defined]
                elif self._calls(current.body, holder) and self._calls(current.orelse, holder):  # type: ignore[attr-defined]
                    return True  # ``checkpoint(b, x) if self.training else b(x)``: either way
                continue
            if kind is cst.BooleanOperation:
                stack.append(current.left)  # type: ignore[attr-defined]
                continue
            if kind is cst.Arg and type(current.value) is cst.Lambda:  # type: ignore[attr-defined]
                stack.append(current.value.body)  # type: ignore[attr-defined]  # (``checkpoint(lambda t: self.block(t), x)``)
                continue
            if kind in (cst.FunctionDef, cst.Lambda, cst.ListComp, cst.SetComp, cst.DictComp, cst.GeneratorExp):
                continue
            stack.extend(tree.children(current))
        return False


def _setting_verdict(analysis: ScriptAnalysis, cls: cst.ClassDef, test: cst.BaseExpression, holder: str, changing: frozenset[str]) -> bool | None:
    """The value of an ``if`` test of ``forward`` on a training step where it reads only the model's settings
    (the same on every step) and the analysis can tell it, or where the test is of the layer itself (``if
    self.downsample is not None:``: true where the layer exists), or where the class builds the layer only
    under some test of its own (``if use_aux: self.aux = ...``: the setting and the layer go together);
    ``None`` otherwise: a test that may change from step to step, or a setting that may be off while the
    layer is built anyway (``self.use_aux = False`` with ``self.aux`` built whatever it is)."""
    if not _settings_only(test, changing):
        return None
    read = {name for n in tree.walk(test) if (name := dotted_name(n)) and name.startswith("self.")}  # type: ignore[arg-type]
    bindings: dict[str, object] = {"self.training": True}
    if holder in read or any(name.startswith(holder + ".") for name in read):
        # The layer's own presence decides (``if self.downsample is not None:``, ``is None`` the other way):
        # where it is called, it exists.
        bindings[holder] = SOME_OBJECT
        verdict = truth(test, bindings)
        return True if verdict is UNKNOWN else bool(verdict)
    for name in read - {"self.training", "self"}:
        if name.count(".") == 1:
            bindings[name] = _setting_value(analysis, cls, name[5:])
    verdict = truth(test, bindings)
    if verdict is not UNKNOWN:
        return bool(verdict)
    return None if _built_whatever_the_settings(cls, holder[5:]) else True


def _setting_value(analysis: ScriptAnalysis, cls: cst.ClassDef, attribute: str) -> object:
    """The value the class's one assignment gives ``self.<attribute>`` in ``__init__``: a literal, or the
    literal every construction of the class passes for the ``__init__`` parameter it copies (or that
    parameter's default); :data:`UNKNOWN` otherwise."""
    init = own_method(cls, "__init__")
    values = [node.value for node in _stores_of(cls, attribute)]  # type: ignore[attr-defined]
    if init is None or len(values) != 1 or values[0] is None or analysis.enclosing_function(values[0]) is not init:
        return UNKNOWN
    value = values[0]
    if not isinstance(value, cst.Name) or value.value not in {p.name.value for p in all_parameters(init)}:
        return literal_value(value)
    found: set[object] = set()
    for call, built in analysis.shared.constructed.items():
        if built is cls:
            found.add(value_at(analysis.shared.analysis_of(call) or analysis, call, init, value.value))
    if len(found) != 1:
        return UNKNOWN
    only = found.pop()
    return UNKNOWN if only is SOME_OBJECT else only


def _stores_of(cls: cst.ClassDef, attribute: str) -> list[cst.CSTNode]:
    """The statements of the class that store into ``self.<attribute>``: assignments, annotated ones and
    augmented ones (``self.calls += 1``), in source order."""
    target = f"self.{attribute}"
    found: list[cst.CSTNode] = []
    for node in walk(cls):
        kind = type(node)
        if kind is cst.Assign:
            if any(dotted_name(t.target) == target for t in node.targets):  # type: ignore[attr-defined]
                found.append(node)
        elif (kind is cst.AnnAssign or kind is cst.AugAssign) and dotted_name(node.target) == target:  # type: ignore[attr-defined]
            found.append(node)
    return found


def _built_whatever_the_settings(cls: cst.ClassDef, attribute: str) -> bool:
    """Whether ``__init__`` builds ``self.<attribute>`` in its own body, under no test (one assignment)."""
    init = own_method(cls, "__init__")
    if init is None or not isinstance(init.body, cst.IndentedBlock):
        return False
    assigned = [node for node in _stores_of(cls, attribute) if type(node) is cst.Assign]
    if len(assigned) != 1 or type(assigned[0].value) is not cst.Call:  # type: ignore[attr-defined]
        return False
    return any(
        isinstance(line, cst.SimpleStatementLine) and assigned[0] in line.body for line in init.body.body
    )


def _layer_picked_by_input(analysis: ScriptAnalysis, cls: cst.ClassDef, forward: cst.FunctionDef) -> cst.Call | None:
    """A call in ``forward`` of one entry of a container of layers the class stores, at a key read from an
    argument of ``forward`` (``self.heads[task](h)``, ``self.experts[batch["domain"]](x)``): one entry runs per
    step and the others' parameters get no gradient. (An index a loop over the container counts runs them all.)"""
    positional = [*forward.params.posonly_params, *forward.params.params][1:]  # (``self`` first, maybe before a ``/``)
    arguments = {p.name.value for p in (*positional, *forward.params.kwonly_params)}
    if not arguments:
        return None
    for node in walk(forward.body):
        if type(node) is not cst.Call or type(node.func) is not cst.Subscript:  # type: ignore[attr-defined]
            continue
        picked = node.func  # type: ignore[attr-defined]
        container = dotted_name(picked.value)
        if container is None or not container.startswith("self.") or container.count(".") != 1 or len(picked.slice) != 1:
            continue
        index = picked.slice[0].slice
        if type(index) is not cst.Index or not _may_have_parameters(analysis, cls, container[5:]):
            continue
        if any(type(n) is cst.Name and n.value in arguments for n in walk(index.value)):  # type: ignore[attr-defined]
            return node  # type: ignore[return-value]
    return None


def _gradless_layer(analysis: ScriptAnalysis, cls: cst.ClassDef, forward: cst.FunctionDef) -> cst.Call | None:
    """A layer with parameters the class stores (``self.encoder = Encoder()``, or one handed to it) that
    ``forward()`` runs only without gradients: under ``torch.no_grad()`` / ``inference_mode()`` or with its
    output detached at once (``self.encoder(x).detach()``). Unless they are frozen, its parameters require
    gradients that never come, which DDP refuses at the second step. A layer the program freezes
    (``requires_grad`` of ``self.target``), one built without parameters, or one the forward also runs with
    gradients (through another attribute holding it) needs no search."""
    stored: dict[str, cst.BaseExpression] = {}
    for node in walk(cls):
        if type(node) is cst.AssignTarget and type(parent := analysis.parent(node)) is cst.Assign:
            name = dotted_name(node.target)  # type: ignore[attr-defined]
            value = parent.value  # type: ignore[attr-defined]
            if name and name.startswith("self.") and name.count(".") == 1 and type(value) in (cst.Call, cst.Name):
                if type(value) is cst.Call and (not _is_layer_with_parameters(analysis, value) or _without_weights(value)):  # type: ignore[arg-type]
                    continue
                stored.setdefault(name[5:], value)
    runs: dict[str, list[tuple[cst.Call, bool]]] = {}
    for node in walk(forward.body):
        if type(node) is cst.Call and type(node.func) is cst.Attribute and dotted_name(node.func.value) == "self":  # type: ignore[attr-defined]
            attribute = node.func.attr.value  # type: ignore[attr-defined]
            if attribute in stored:
                parent = analysis.parent(node)
                detached = type(parent) is cst.Attribute and parent.attr.value == "detach"  # type: ignore[attr-defined]
                runs.setdefault(attribute, []).append((node, detached or without_gradients(analysis, node)))  # type: ignore[arg-type]
    frozen = {name for module in analysis.shared.analyses for change in requires_grad_changes(module) for name in _frozen_names(module, change.receiver)}
    for attribute, calls in runs.items():
        if not all(gradless for _, gradless in calls):
            continue
        held = dotted_name(stored[attribute])  # a module handed in: another attribute may hold it too
        also_trained = held is not None and any(
            other != attribute and dotted_name(value) == held and not all(g for _, g in runs.get(other, []))
            for other, value in stored.items()
            if other in runs
        )
        if also_trained or any(f"self.{attribute}" in name or (held is not None and name.split('.')[0] == held) for name in frozen):
            continue
        return calls[0][0]
    return None


def _unused_layer(analysis: ScriptAnalysis, cls: cst.ClassDef) -> tuple[str, cst.Call] | None:
    """A torch.nn layer with parameters that the class stores (``self.old_head = nn.Linear(...)``) and
    nothing in the program reads: neither ``self.old_head`` in the class nor ``.old_head`` anywhere, and
    no method but ``__init__`` walks the children by itself (``self.children()``, ``getattr``). Its
    parameters never get a gradient, which DDP refuses at the second step unless it looks for unused
    parameters."""
    stored: dict[str, cst.Call] = {}
    targets: set[cst.CSTNode] = set()
    for node in walk(cls):
        if type(node) is cst.Assign:
            for target in node.targets:  # type: ignore[attr-defined]
                name = dotted_name(target.target)
                if name and name.startswith("self.") and name.count(".") == 1 and type(node.value) is cst.Call:  # type: ignore[attr-defined]
                    stored.setdefault(name[5:], node.value)  # type: ignore[attr-defined]
                    targets.add(target.target)
        elif type(node) is cst.Call and callee_name(node) in CHILD_WALKS:  # type: ignore[arg-type]
            method = analysis.enclosing_function(node)
            if method is None or method.name.value != "__init__":
                return None
    candidates = {
        attribute: call
        for attribute, call in stored.items()
        if _is_layer_with_parameters(analysis, call)
    }
    if not candidates:
        return None
    for module in analysis.shared.analyses:
        for node in module.preorder:
            if type(node) is cst.Attribute and node.attr.value in candidates and node not in targets:  # type: ignore[attr-defined]
                if _an_option(module, node.value):  # type: ignore[attr-defined]
                    continue  # ``args.aux``: the command line's setting of the same name, not the layer
                del candidates[node.attr.value]  # type: ignore[attr-defined]
                if not candidates:
                    return None
    return next(iter(candidates.items()))


def _an_option(analysis: ScriptAnalysis, receiver: cst.BaseExpression) -> bool:
    """Whether a value is the command line's options: every value it may hold comes from ``parse_args()``."""
    if type(receiver) is not cst.Name:
        return False
    origins = analysis.origins(receiver)
    return bool(origins) and all(type(o) is cst.Call and call_method_name(o) == "parse_args" for o in origins)  # type: ignore[arg-type]


#: Calls by which a module reaches its layers without naming them.
CHILD_WALKS = frozenset({"getattr", "children", "named_children", "modules", "named_modules", "__getattr__"})


def _is_layer_with_parameters(analysis: ScriptAnalysis, call: cst.Call) -> bool:
    """``nn.Linear(...)``, ``nn.Conv2d(...)``: a torch.nn layer that is none of the parameter-free ones."""
    names = _torch_nn_classes(analysis, call)
    return bool(names) and not any(_parameter_free(n) for n in names)


def _torch_nn_classes(analysis: ScriptAnalysis, call: cst.Call) -> set[str]:
    """The class names of ``torch.nn`` a call constructs (``Linear`` of ``nn.Linear(...)``); none for others."""
    return {q.rsplit(".", 1)[-1] for q in analysis.qualified_names(call.func) if q.startswith("torch.nn.")}


def _parameter_free(name: str) -> bool:
    """Whether a ``torch.nn`` class has no parameters: a loss, an activation, dropout, pooling..."""
    return name.endswith("Loss") or name in PARAMETER_FREE_LAYERS


#: torch.nn layers without parameters: their calls need no gradient on any step.
PARAMETER_FREE_LAYERS = frozenset(
    {
        "ReLU", "ReLU6", "LeakyReLU", "GELU", "SiLU", "ELU", "SELU", "Mish", "Sigmoid", "Tanh", "Softmax",
        "LogSoftmax", "Softplus", "Hardswish", "Hardsigmoid", "Hardtanh", "Dropout", "Dropout1d", "Dropout2d",
        "Dropout3d", "AlphaDropout", "Identity", "Flatten", "Unflatten", "Upsample", "PixelShuffle",
        "MaxPool1d", "MaxPool2d", "MaxPool3d", "AvgPool1d", "AvgPool2d", "AvgPool3d", "AdaptiveAvgPool1d",
        "AdaptiveAvgPool2d", "AdaptiveAvgPool3d", "AdaptiveMaxPool1d", "AdaptiveMaxPool2d", "AdaptiveMaxPool3d",
    }
)


def _may_have_parameters(analysis: ScriptAnalysis, cls: cst.ClassDef, attribute: str) -> bool:
    """Whether ``self.<attribute>`` of the class may hold parameters: not when every value the class gives
    it is a torch.nn loss, activation, dropout or pooling layer (``self.loss_fn = nn.CrossEntropyLoss()``)."""
    values = [node.value for node in _stores_of(cls, attribute) if type(node) is cst.Assign]  # type: ignore[attr-defined]
    if not values:
        return True
    for value in values:
        if type(value) is not cst.Call:
            return True
        names = _torch_nn_classes(analysis, value)  # type: ignore[arg-type]
        if not names or not all(_parameter_free(n) for n in names):
            return True
    return False


def _settings_only(test: cst.CSTNode, changing: frozenset[str]) -> bool:
    """Whether a test reads only the model's own settings and constants (the same on every step): ``self.X``
    that the program sets nowhere but in an ``__init__`` (``changing``: a counter ``forward()`` bumps, a flag
    the training loop sets are not settings), and ``self.training``."""
    kind = type(test)
    if kind is cst.Call:
        return False
    if kind is cst.Attribute:
        name = dotted_name(test) or ""
        return name.startswith("self.") and (name == "self.training" or not set(name.split(".")[1:]) & changing)
    if kind is cst.Name:
        return test.value in ("self", "None", "True", "False")  # type: ignore[attr-defined]
    return all(_settings_only(child, changing) for child in tree.children(test))


def wrapped_for_changes(analysis: ScriptAnalysis) -> bool:
    """Whether every DDP wrap of the program takes a model with all its parameters training (nothing froze a part
    of it before) and ``find_unused_parameters=True``: parameters frozen after the wrap then count as unused, and
    unfrozen again they are those DDP wrapped (the way DDP042 advises)."""
    wraps = [w for w in analysis.program_wrap_calls if (analysis.shared.analysis_of(w) or analysis).is_call_to(w, names.DISTRIBUTED_DATA_PARALLEL)]
    for wrap in wraps:
        home = analysis.shared.analysis_of(wrap) or analysis
        flag = keyword_argument(wrap, "find_unused_parameters")
        inner = wrapped_argument(wrap)
        if flag is None or not is_true(flag.value) or inner is None or frozen_before_the_wrap(home, wrap, inner):
            return False
    return bool(wraps)


def changed_after_a_wrap(analysis: ScriptAnalysis) -> bool:
    """Whether some module of the program changes ``requires_grad`` where its model may already be wrapped."""
    return any(after_a_wrap(module, change.node) is not None for module in analysis.shared.analyses for change in requires_grad_changes(module))
