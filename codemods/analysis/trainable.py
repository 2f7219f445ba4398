"""Which parameters train: the writes of ``requires_grad`` on a model's parameters (freezing a backbone,
unfreezing it at some epoch) and whether they run before the model is wrapped. DDP decides, when it wraps a
model, which parameters it synchronises: a fact for the rule about changes after the wrap and for the
placement of the wrap the migration inserts (computed once per analysis: :func:`requires_grad_changes`)."""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from .script import ScriptAnalysis, call_method_name, dotted_name, walk

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
        kind = type(node)
        receiver = None
        if kind is cst.AssignTarget and type(node.target) is cst.Attribute and node.target.attr.value == "requires_grad":  # type: ignore[attr-defined]
            receiver = node.target.value  # type: ignore[attr-defined]
        elif kind is cst.Call and call_method_name(node) == "requires_grad_":  # type: ignore[arg-type]
            receiver = node.func.value  # type: ignore[attr-defined]
        if receiver is not None and holds_model_state(analysis, receiver):
            found.append(RequiresGradChange(node, analysis.statement(node), receiver))
    return found


def holds_model_state(analysis: ScriptAnalysis, expr: cst.BaseExpression, depth: int = 3) -> bool:
    """Whether an expression is a model, one of its submodules or parameters: reached from a trained model
    (``model.backbone``) or from ``self`` in a method, or holding what ``parameters()``, ``modules()`` and the
    like hand out (``for p in model.parameters()``), followed through names ``depth`` steps deep. A batch of
    inputs (``x.requires_grad_()`` for input gradients) is none of these."""
    name = dotted_name(expr)
    if name is None or name.split(".")[-1] == "grad":  # a parameter's gradient is a tensor of its own
        return False
    root = name.split(".")[0]
    if root == "self" or root in {model.split(".")[0] for model in analysis.trained_models}:
        return True
    if depth <= 0:
        return False
    for value in analysis.flows_into(expr, name):
        for part in walk(value):
            if type(part) is cst.Call and call_method_name(part) in PARAMETER_SOURCES:  # type: ignore[arg-type]
                return True
            if type(part) in (cst.Name, cst.Attribute) and type(analysis.parent(part)) is not cst.Attribute:
                if part is not expr and holds_model_state(analysis, part, depth - 1):  # type: ignore[arg-type]
                    return True
    return False


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
        return None if before else (analysis, node)
    if scope is None:
        return None  # module level, every wrap inside a function: it runs when the module is imported
    callers = [(owner, call) for call, target in analysis.shared.call_targets.items() if target is scope and (owner := analysis.shared.analysis_of(call)) is not None]
    if depth <= 0 or not callers:
        return (analysis, node)
    for owner, call in callers:
        found = after_a_wrap(owner, call, depth - 1)
        if found is not None:
            return found
    return None


def changes_requires_grad(analysis: ScriptAnalysis, statement: cst.BaseStatement) -> bool:
    """Whether a statement changes ``requires_grad`` of a model's parameters, itself or in a function of the
    program it calls (``freeze_backbone(model)``)."""
    for change in requires_grad_changes(analysis):
        if analysis.is_inside(change.node, statement):
            return True
    for part in walk(statement):
        if type(part) is cst.Call:
            function = analysis.call_target(part)  # type: ignore[arg-type]
            owner = analysis.shared.analysis_of(function) if function is not None else None
            if function is not None and owner is not None and any(
                owner.is_inside(change.node, function) for change in requires_grad_changes(owner)
            ):
                return True
    return False


def _loop_around_both(analysis: ScriptAnalysis, node: cst.CSTNode, wrap: cst.CSTNode) -> bool:
    return any(isinstance(a, (cst.For, cst.While)) and analysis.is_inside(wrap, a) for a in analysis.ancestors(node))
