"""DDP016 data-parallel-checkpoint-keys."""

from __future__ import annotations

from typing import Iterator

import libcst as cst

from . import names
from .analysis import ScriptAnalysis, call_method_name, dotted_name, walk
from .analysis.script import assignment_targets, item_name
from .base import Change, Example, FixResult, FixSafety, Match, Options, Phase, Rule, Severity, Valid
from .edits import Edits, accepting_both_key_formats, accepts_both_key_formats, expression, state_dict_argument
from .runtime_calls import runtime_name


class DataParallelCheckpointKeys(Rule):
    """Keep the ``module.`` keys of a wrapped model's ``state_dict()`` through the migration.

    What it finds: ``model.state_dict()`` on a model that an unconditional ``nn.DataParallel(...)`` or
    ``DistributedDataParallel(...)`` of the original program wraps (held in a name, an attribute, or an
    entry of a container: ``state["model"].state_dict()``). Its keys start with ``module.``
    (``module.fc.weight``), and that is the format of every checkpoint the program ever wrote.

    Why it is a problem: the migration replaces DataParallel by DistributedDataParallel and reaches the
    model's state through ``.module`` (DDP008), which drops the prefix: checkpoints the original wrote no
    longer resume in the new code, and downstream code that reads ``module.``-keyed checkpoints breaks. A
    program that already wraps in DDP would change its format the same way.

    What the fix does: ``runtime.unwrap(model).state_dict(prefix="module.")``: the same keys, whether the
    model is wrapped or not. It runs before the migration wraps anything (phase ``devices``: every wrap it
    sees is the original's; loading is DDP008's, which accepts keys with and without the prefix). A wrap
    under a condition (``if torch.cuda.device_count() > 1:``, ``if args.distributed:``) wrote either format
    depending on how it ran; it is left to DDP008, which saves the plain keys.

    A deep copy of such a model (``ema = copy.deepcopy(model)``) is wrapped alike: its ``state_dict()`` keeps the
    prefix too, and its ``load_state_dict(sd)`` becomes ``load_state_dict({k.removeprefix("module."): v for k, v in
    sd.items()})``, since the migration copies the model itself (DDP008) and the original's checkpoints have it.

    A state dict that never reaches a file (an EMA updated key by key from ``msd = model.state_dict()``, or
    ``ema.load_state_dict(model.state_dict())``) is left to DDP008 (``.module.state_dict()``): its keys must
    match the copy it updates, which the migration makes of ``model.module``. Loaded into a DataParallel that
    the migration keeps (a copy never trained, see DDP001), it keeps the prefix that copy expects.

    In a lint, this finding stands for DDP008's on the same call (whose ``.module.state_dict()`` the fix makes
    moot): one piece of advice per call.

    Fix safety: none; the checkpoint keeps its format.
    """

    code = "DDP016"
    name = "data-parallel-checkpoint-keys"
    fix_safety = FixSafety.SAFE
    phase = Phase.DEVICES
    severity = Severity.INFO
    triggers = ("DataParallel",)  # in DistributedDataParallel too
    supersedes = ("DDP008",)  # (its ``.module.state_dict()`` advice for the same call, made moot by this fix)
    needs_names = (names.MODEL_WRAPPERS,)  # it acts only on model wraps
    examples = (
        Example(
            before="""\
import torch.nn as nn

model = nn.DataParallel(Net())
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
torch.save({"model": model.state_dict()}, "ckpt.pt")
""",
            after="""\
import torch.nn as nn
from ddp_migrate import runtime

model = nn.DataParallel(Net())
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
torch.save({"model": runtime.unwrap(model).state_dict(prefix="module.")}, "ckpt.pt")
""",
        ),
        Example(
            before="""\
import torch
from torch.nn.parallel import DistributedDataParallel as DDP

ddp_model = DDP(model)
torch.save(ddp_model.state_dict(), "ckpt.pt")
""",
            after="""\
import torch
from ddp_migrate import runtime
from torch.nn.parallel import DistributedDataParallel as DDP

ddp_model = DDP(model)
torch.save(runtime.unwrap(ddp_model).state_dict(prefix="module."), "ckpt.pt")
""",
        ),
        # An EMA deep-copied from a DataParallel model is a DataParallel too: the migration copies the model
        # itself (DDP008), so its checkpoint keeps the prefix and its load accepts it (a trial's resume crashed).
        Example(
            before="""\
import copy
import torch.nn as nn

model = nn.DataParallel(Net())
ema = copy.deepcopy(model)
ema.load_state_dict(ckpt["ema"])
torch.save({"ema": ema.state_dict()}, "ckpt.pt")
""",
            after="""\
import copy
import torch.nn as nn
from ddp_migrate import runtime

model = nn.DataParallel(Net())
ema = copy.deepcopy(model)
ema.load_state_dict({k.removeprefix("module."): v for k, v in ckpt["ema"].items()})
torch.save({"ema": runtime.unwrap(ema).state_dict(prefix="module.")}, "ckpt.pt")
""",
        ),
        Valid(
            """\
import torch.nn as nn

model = nn.DataParallel(Net())
torch.save(model.module.state_dict(), "plain.pt")
raw = model.module if hasattr(model, "module") else model
torch.save(raw.state_dict(), "plain.pt")
if torch.cuda.device_count() > 1:
    net = nn.DataParallel(net)
torch.save(net.state_dict(), "either.pt")
"""
        ),
    )

    def matches(self, analysis: ScriptAnalysis) -> Iterator[Match]:
        for call in analysis.method_calls("state_dict"):
            receiver = call.func.value  # type: ignore[union-attr]
            if call.args or (dotted_name(receiver) is None and type(receiver) is not cst.Subscript) or analysis.holds_unwrapped(receiver):
                continue  # (``raw = model.module if hasattr(model, "module") else model``: plain keys already)
            # (``state["model"].state_dict()``: a container that holds the wrapped model, as a name does)
            wrap = analysis.wrapped_at(receiver)
            if wrap is None and _saved_here(analysis, call):
                # A copy's keys are kept only in what is saved (an EMA updated key by key from the model's own
                # state dict must keep the keys the migrated copy has).
                wrap = _copy_of_a_wrap(analysis, receiver)
            if wrap is not None and _conditional(analysis, wrap):
                # ``if many_gpus: model = DP(model)``, then ``model = DP(model) if not isinstance(model, DP) else model``:
                # a later wrap on every path makes the keys ``module.`` whatever the first did.
                wrap = _unconditional_wrap_reaching(analysis, receiver, call)
            if wrap is None or not analysis.is_call_to(wrap, names.MODEL_WRAPPERS):
                continue
            if analysis.wrapped_at(receiver) is wrap and _rebound_unwrapped(analysis, receiver, wrap, call):
                continue  # (``state["model"] = net`` after the training: the plain model's keys, as the original's)
            if _kept_in_memory(analysis, call):
                continue  # (an EMA's update from the model's weights: its keys must match the EMA's own)
            wrapper = "DataParallel" if analysis.is_call_to(wrap, names.DATA_PARALLEL) else "DistributedDataParallel"
            yield Match(call, f"state_dict() of a {wrapper} model has module. keys: keep them through the migration")
        for call in analysis.method_calls("load_state_dict"):
            receiver = call.func.value  # type: ignore[union-attr]
            given = state_dict_argument(call)
            if given is not None and not accepts_both_key_formats(given.value) and _copy_of_a_wrap(analysis, receiver) is not None:
                yield Match(
                    call,
                    "load_state_dict() of a copy of a wrapped model takes module. keys: the migration copies the model "
                    "itself, so accept the keys with and without the prefix",
                )

    def fix(self, analysis: ScriptAnalysis, options: Options) -> FixResult | None:
        edits = Edits(analysis)
        for match in self.matches_in(analysis):
            call = match.node
            assert isinstance(call, cst.Call)
            if call_method_name(call) == "load_state_dict":
                state = state_dict_argument(call).value  # type: ignore[union-attr]
                stripped = accepting_both_key_formats(state)
                edits.replace(state, lambda _updated, stripped=stripped: stripped)
                edits.changes.append(Change(self.code, analysis.line(call), "load_state_dict of the model's copy accepts keys with and without module."))
                continue
            rt = runtime_name(analysis, edits)
            new = expression(f'{rt}.unwrap(MODEL).state_dict(prefix="module.")')
            assert isinstance(new, cst.Call) and isinstance(new.func, cst.Attribute)
            unwrap = new.func.value
            assert isinstance(unwrap, cst.Call)
            receiver = call.func.value  # type: ignore[union-attr]
            new = new.with_changes(func=new.func.with_changes(value=unwrap.with_changes(args=[cst.Arg(receiver)])))
            edits.replace(call, lambda _updated, new=new: new)
            edits.changes.append(Change(self.code, analysis.line(call), "state_dict keeps the module. keys of the original's checkpoints"))
        return edits.apply(analysis.module) if edits else None


def _copy_of_a_wrap(analysis: ScriptAnalysis, receiver: cst.BaseExpression) -> cst.Call | None:
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




def _unconditional_wrap_reaching(analysis: ScriptAnalysis, receiver: cst.BaseExpression, call: cst.Call) -> cst.Call | None:
    """A wrap on every path (:func:`_conditional`) whose model the receiver may hold at the call, in the call's
    own function before it; ``None`` if there is none."""
    scope = analysis.scope_of(call)
    for origin in analysis.origins(receiver):
        if (
            type(origin) is cst.Call
            and analysis.is_call_to(origin, names.MODEL_WRAPPERS)  # type: ignore[arg-type]
            and analysis.scope_of(origin) is scope
            and analysis.comes_before(origin, call)
            and not _conditional(analysis, origin)  # type: ignore[arg-type]
        ):
            return origin  # type: ignore[return-value]
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
            if not _wraps_too(analysis, other, _wrap_target(analysis, wrap)) and not _a_wrapper_by_the_test(analysis, ancestor, other):
                return True
        child = ancestor
    return False


def _a_wrapper_by_the_test(analysis: ScriptAnalysis, choice: cst.CSTNode, other: cst.CSTNode | None) -> bool:
    """Whether the other side of a conditional expression is a model its test found to be a wrapper already
    (``model`` of ``DP(model) if not isinstance(model, DP) else model``): the expression is a wrapper either way."""
    if type(choice) is not cst.IfExp or other is None:
        return False
    test, wrapper_side = choice.test, choice.body  # type: ignore[attr-defined]
    if type(test) is cst.UnaryOperation and type(test.operator) is cst.Not:  # type: ignore[attr-defined]
        test, wrapper_side = test.expression, choice.orelse  # type: ignore[attr-defined]
    tested = analysis.wrapper_tested(test)
    return other is wrapper_side and tested is not None and dotted_name(other) == tested  # type: ignore[arg-type]


def _wrap_target(analysis: ScriptAnalysis, wrap: cst.Call) -> str | None:
    """The name a wrap is assigned to (``model`` of ``model = DDP(model)``, of ``model = DP(model).cuda()``), or
    ``None``."""
    node: cst.CSTNode = wrap
    parent = analysis.parent(node)
    while type(parent) is cst.Attribute and parent.attr.value in ("cuda", "to") and type(analysis.parent(parent)) is cst.Call:  # type: ignore[attr-defined]
        node = analysis.parent(parent)  # type: ignore[assignment]
        parent = analysis.parent(node)
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
