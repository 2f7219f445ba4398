"""Which models hold BatchNorm layers: the classes and functions of the program that build them, and what a
model's value is built from (read once per program)."""

from __future__ import annotations

import libcst as cst

from .. import names
from .script import SELF_RETURNING_METHODS, ScriptAnalysis, dotted_name, walk

Builder = cst.ClassDef | cst.FunctionDef


def batchnorm_builders(analysis: ScriptAnalysis) -> set[Builder]:
    """Classes and functions of the program (any module) that build BatchNorm layers, directly or through
    others of the program they call (``self.block = Block()``, ``self.features = conv_bn(3, 16)``, one
    in another module); found once per program."""
    cache = analysis.shared.__dict__.setdefault("_batchnorm_builders", {})
    if "found" not in cache:
        cache["found"] = _builders(analysis)
    return cache["found"]


def _builders(analysis: ScriptAnalysis) -> set[Builder]:
    found: set[Builder] = set()
    for module in analysis.shared.analyses:
        for call in [*module.calls_to(names.BATCH_NORM), *_aliased_batchnorm_calls(module)]:
            found.update(owner for owner in (module.enclosing_class(call), module.enclosing_function(call)) if owner)
    # What each class and function builds, read once: the fixed point below goes over them again and again.
    builds = {
        node: {built for n in module.nodes_below(node) if type(n) is cst.Call and (built := _built_by(analysis, n)) is not None}  # type: ignore[arg-type]
        for module in analysis.shared.analyses
        for node in (*module.classes, *module.functions)
    }
    changed = True
    while changed:
        changed = False
        for candidate, built in builds.items():
            if candidate not in found and not built.isdisjoint(found):
                found.add(candidate)
                changed = True
    return found


def _aliased_batchnorm_calls(analysis: ScriptAnalysis) -> frozenset[cst.Call]:
    """Calls of a name bound to a BatchNorm class (``norm = nn.BatchNorm1d``, ``norm = nn.BatchNorm2d if bn else
    nn.Identity``; then ``norm(8)``); read once per module."""
    return analysis.derived(
        "aliased batchnorm calls",
        lambda module: frozenset(
            call
            for call in module.calls
            if type(call.func) is cst.Name
            and any(
                not module.qualified_names(part).isdisjoint(names.BATCH_NORM)  # type: ignore[arg-type]
                for value in module.flows_into(call.func, call.func.value)  # type: ignore[attr-defined]
                for part in ([value.body, value.orelse] if type(value) is cst.IfExp else [value])  # type: ignore[attr-defined]
                if type(part) in (cst.Name, cst.Attribute)
            )
        ),
    )


def _built_by(analysis: ScriptAnalysis, call: cst.Call) -> Builder | None:
    """The class of the program a call constructs (``Net()``, ``models.Net()``, an imported ``Net``), or the
    function of the program it calls."""
    return analysis.shared.constructed.get(call) or analysis.shared.call_targets.get(call)


def batchnorm_source(analysis: ScriptAnalysis, origin: cst.CSTNode, builders: set[Builder], depth: int = 0) -> str | None:
    """What makes a model origin hold BatchNorm layers (a class or function name, or the layer), if anything;
    also through the names a container is built from (``nn.Sequential(body, head)`` of ``body = mlp()``)."""
    if not isinstance(origin, cst.Call):
        return None
    for node in walk(origin):
        if type(node) is cst.Name and depth < 3 and node is not origin.func:
            home = analysis.shared.analysis_of(node) or analysis
            for inner in home.origins(node):
                if inner is not origin and (found := batchnorm_source(home, inner, builders, depth + 1)) is not None:
                    return found
            continue
        if not isinstance(node, cst.Call):
            continue
        if analysis.is_call_to(node, names.BATCH_NORM) or node in _aliased_batchnorm_calls(analysis):
            return dotted_name(node.func) or "BatchNorm"
        built = _built_by(analysis, node)
        if built is not None and built in builders:
            return built.name.value
        home = analysis.shared.analysis_of(node) or analysis
        for held in home.registered_classes(node.func):
            if held in builders:
                return held.name.value  # ``MODELS[name](**kw)`` of ``MODELS = {"resnet": ResNet, ...}``
    return None


def may_hold_batchnorm(analysis: ScriptAnalysis, model: cst.BaseExpression) -> bool:
    """Whether the model an expression holds may have BatchNorm layers: one of the values it is built from
    builds them, or the analysis cannot see into one of them (a library's model, a value it cannot trace).
    ``False`` only for a model built of the program's classes and torch's own layers, none of them a BatchNorm."""
    origins = analysis.origins(model)
    if not origins:
        return True
    builders = batchnorm_builders(analysis)
    return any(batchnorm_source(analysis, origin, builders) is not None or not _seen_into(analysis, origin) for origin in origins)


def _seen_into(analysis: ScriptAnalysis, origin: cst.CSTNode, depth: int = 0) -> bool:
    """Whether every call a model value is built from is the program's (a class or function the analysis reads)
    or torch's own (``nn.Linear``, ``AveragedModel``), through the names handed to them a few steps deep."""
    if not isinstance(origin, cst.Call) or depth > 3:
        return False
    for node in walk(origin):
        if type(node) is cst.Call:
            if _built_by(analysis, node) is None and not any(q.startswith(("torch.", "ddp_migrate.")) for q in analysis.qualified_names(node.func)):  # type: ignore[attr-defined]
                if not (type(node.func) is cst.Attribute and node.func.attr.value in SELF_RETURNING_METHODS):  # type: ignore[attr-defined]
                    return False
        elif type(node) is cst.Name and node is not origin.func and not _names_a_callee(analysis, node):
            home = analysis.shared.analysis_of(node) or analysis
            inners = home.origins(node)
            if not inners and not _a_literal_number(home, node):
                return False  # (a value the analysis cannot trace: ``AveragedModel(model)`` of a model handed in)
            if any(inner is not origin and not _seen_into(home, inner, depth + 1) for inner in inners):
                return False
    return True


def _names_a_callee(analysis: ScriptAnalysis, name: cst.Name) -> bool:
    """Whether the name is the root of what a call calls (``runtime`` of ``runtime.device_ids()``, ``nn`` of
    ``nn.Linear(8, 4)``): a module or a function, no value of the model."""
    node: cst.CSTNode = name
    parent = analysis.parent(node)
    if (type(parent) is cst.Attribute and parent.attr is node) or (type(parent) is cst.Arg and parent.keyword is node):  # type: ignore[attr-defined]
        return True  # (``module`` of ``model.module``, ``device_ids`` of ``device_ids=...``: no value of its own)
    while type(parent) is cst.Attribute and parent.value is node:  # type: ignore[attr-defined]
        node, parent = parent, analysis.parent(parent)
    return type(parent) is cst.Call and parent.func is node  # type: ignore[attr-defined]


def _a_literal_number(analysis: ScriptAnalysis, name: cst.Name) -> bool:
    """Whether the name holds numbers written out (``hidden = 16``, a size): no model to look into."""
    if name.value in ("True", "False", "None"):
        return True
    values = analysis.flows_into(name, name.value)
    return bool(values) and all(type(v) in (cst.Integer, cst.Float) for v in values)
