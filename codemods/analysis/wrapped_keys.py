"""Which ``state_dict()`` calls of a wrapped model keep their ``module.`` keys through the migration: a fact
of the analysis for DDP016, which keeps them, and DDP008, which otherwise reaches the model's own state."""

from __future__ import annotations

import libcst as cst

from .. import names
from .script import ScriptAnalysis, assignment_targets, call_method_name, dotted_name, item_name, walk


def prefixed_keys_wrap(analysis: ScriptAnalysis, call: cst.Call) -> cst.Call | None:
    """The wrap (``nn.DataParallel(...)``, ``DistributedDataParallel(...)``) of the original program whose
    ``module.``-prefixed keys a ``state_dict()`` call gives, where the migration keeps them (DDP016): the call
    reads the wrapped model (a name, an attribute, a container's entry: ``state["model"].state_dict()``) or a
    deep copy of it that is saved, with no arguments; the wrap runs on every path; the model is not given a
    plain model back before the call; and the state dict reaches a file (not an EMA's update key by key).
    ``None`` for any other call: DDP008 then reaches the model's own state through ``.module``."""
    receiver = call.func.value  # type: ignore[union-attr]
    if call.args or (dotted_name(receiver) is None and type(receiver) is not cst.Subscript) or analysis.holds_unwrapped(receiver):
        return None  # (``raw = model.module if hasattr(model, "module") else model``: plain keys already)
    # (``state["model"].state_dict()``: a container that holds the wrapped model, as a name does)
    wrap = analysis.wrapped_at(receiver)
    if wrap is None and _saved_here(analysis, call):
        # A copy's keys are kept only in what is saved (an EMA updated key by key from the model's own
        # state dict must keep the keys the migrated copy has).
        wrap = copy_of_a_wrap(analysis, receiver)
    if wrap is None or not analysis.is_call_to(wrap, names.MODEL_WRAPPERS) or _conditional(analysis, wrap):
        return None
    if analysis.wrapped_at(receiver) is wrap and _rebound_unwrapped(analysis, receiver, wrap, call):
        return None  # (``state["model"] = net`` after the training: the plain model's keys, as the original's)
    if _kept_in_memory(analysis, call):
        return None  # (an EMA's update from the model's weights: its keys must match the EMA's own)
    return wrap


def copy_of_a_wrap(analysis: ScriptAnalysis, receiver: cst.BaseExpression) -> cst.Call | None:
    """The unconditional wrap whose wrapped model the receiver holds a deep copy of (``ema = copy.deepcopy(model)``
    of a DataParallel ``model``: the copy is a DataParallel too, with ``module.`` keys, which the migration
    makes a copy of ``model.module``)."""
    if dotted_name(receiver) is None:
        return None
    for origin in analysis.origins(receiver):
        if type(origin) is cst.Call and analysis.is_call_to(origin, names.DEEP_COPY) and origin.args:  # type: ignore[attr-defined]
            copied = origin.args[0].value  # type: ignore[attr-defined]
            if dotted_name(copied) is None or analysis.holds_unwrapped(copied):
                continue  # (``raw = model.module if isinstance(model, nn.DataParallel) else model``: the model itself)
            wrap = analysis.wrapped_at(copied)
            if wrap is not None and analysis.is_call_to(wrap, names.MODEL_WRAPPERS) and not _conditional(analysis, wrap):
                return wrap
    return None


def _rebound_unwrapped(analysis: ScriptAnalysis, receiver: cst.BaseExpression, wrap: cst.Call, call: cst.Call) -> bool:
    """Whether the name (or container entry) the ``state_dict()`` is read from is assigned, after the wrap and
    before the call, a value that is not the wrapped model (``state["model"] = net``)."""
    name = dotted_name(receiver) or item_name(receiver)
    if name is None:
        return False
    for assign in analysis.assignments:
        if not analysis.comes_before(wrap, assign) or not analysis.comes_before(assign, call):
            continue
        if not any((dotted_name(t) or item_name(t)) == name for t in assignment_targets(assign)):
            continue
        value = getattr(assign, "value", None)
        if value is None:
            continue
        origins = analysis.origins(value)
        # (``else: model = DDP(model)`` of a wrap on every path, a wrap moved to its device: wrapped still)
        if not any(type(o) is cst.Call and analysis.is_call_to(o, names.MODEL_WRAPPERS) for o in origins):  # type: ignore[arg-type]
            return True
    return False


def _saved_here(analysis: ScriptAnalysis, call: cst.Call) -> bool:
    """Whether the call is inside the arguments of a checkpoint save (``torch.save({"ema": ema.state_dict()}, p)``)."""
    return any(isinstance(a, cst.Call) and analysis.is_call_to(a, names.TORCH_SAVE | names.RUNTIME_SAVE) for a in analysis.ancestors(call))


def _conditional(analysis: ScriptAnalysis, wrap: cst.Call, within: cst.CSTNode | None = None) -> bool:
    """Whether the wrap runs only on some paths (under an ``if`` or in a conditional expression, in its
    function or in ``within``), unless every branch wraps the same model (``if cuda: model = DDP(model,
    device_ids=[gpu]) else: model = DDP(model)``, the ImageNet example's shape)."""
    stop = within or analysis.enclosing_function(wrap)
    home = analysis.shared.analysis_of(wrap) or analysis  # (the wrap may be in another module's main block)
    child: cst.CSTNode = wrap
    for ancestor in analysis.ancestors(wrap):
        if ancestor is stop:
            return False
        if isinstance(ancestor, (cst.If, cst.IfExp)) and child is not ancestor.test and ancestor is not home.main_guard:
            other = ancestor.orelse if child is ancestor.body else ancestor.body
            if not _wraps_too(analysis, other, _wrap_target(analysis, wrap)):
                return True
        child = ancestor
    return False


def _wrap_target(analysis: ScriptAnalysis, wrap: cst.Call) -> str | None:
    """The name a wrap is assigned to (``model`` of ``model = DDP(model)``), or ``None``."""
    parent = analysis.parent(wrap)
    if isinstance(parent, cst.Assign) and len(parent.targets) == 1:
        return dotted_name(parent.targets[0].target)
    return None


def _wraps_too(analysis: ScriptAnalysis, branch: cst.CSTNode | None, target: str | None) -> bool:
    """Whether the other branch of a test wraps a model too: the other side of a conditional expression, or
    the other block of an ``if`` (an ``elif`` included) assigning a wrap to the same name on all its paths."""
    if branch is None:
        return False
    if isinstance(branch, cst.BaseExpression):
        return isinstance(branch, cst.Call) and analysis.is_call_to(branch, names.MODEL_WRAPPERS)
    if target is None:
        return False
    if isinstance(branch, cst.If):  # ``elif``: both of its own branches
        return _wraps_too(analysis, branch.body, target) and _wraps_too(analysis, branch.orelse, target)
    return any(
        isinstance(node, cst.Call)
        and analysis.is_call_to(node, names.MODEL_WRAPPERS)
        and _wrap_target(analysis, node) == target
        and not _conditional(analysis, node, within=branch)
        for node in walk(branch)
    )


def _kept_in_memory(analysis: ScriptAnalysis, call: cst.Call) -> bool:
    """Whether a ``state_dict()`` never reaches a file: handed straight to ``load_state_dict`` (``ema.
    load_state_dict(model.state_dict())``), or held in a local name whose every read in its function is an
    item or a method of it (``msd[k]``, ``msd.items()``) outside any save: no checkpoint keeps its keys, which
    must then match the other model's (an EMA copied from ``model.module``)."""
    parent = analysis.parent(call)
    if isinstance(parent, cst.Arg):
        holder = analysis.parent(parent)
        if not (isinstance(holder, cst.Call) and call_method_name(holder) == "load_state_dict"):
            return False
        # A DataParallel the migration keeps (a copy never trained) takes module. keys still.
        origins = analysis.origins(holder.func.value)  # type: ignore[attr-defined]
        return not any(wrap in origins for wrap in analysis.untrained_wraps)
    if not (isinstance(parent, cst.Assign) and len(parent.targets) == 1 and isinstance(parent.targets[0].target, cst.Name)):
        return False
    function = analysis.enclosing_function(call)
    if function is None:
        return False
    name = parent.targets[0].target.value
    reads = [n for n in walk(function.body) if type(n) is cst.Name and n.value == name and not isinstance(analysis.parent(n), cst.AssignTarget)]  # type: ignore[attr-defined]
    for read in reads:
        used = analysis.parent(read)
        if isinstance(used, cst.Attribute) and used.value is read:
            # ``for k, v in msd.items():`` (a copy into a dict that is saved is no such loop)
            method_call = analysis.parent(used)
            loop = analysis.parent(method_call) if isinstance(method_call, cst.Call) else None
            if not (isinstance(loop, cst.For) and loop.iter is method_call):
                return False
        elif not (isinstance(used, cst.Subscript) and used.value is read):
            return False
        if any(isinstance(a, (cst.Dict, cst.DictComp)) or (isinstance(a, cst.Call) and analysis.is_call_to(a, names.TORCH_SAVE)) for a in analysis.ancestors(read)):
            return False
    return bool(reads)
