"""DDP008 wrapped-module-access."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

import libcst as cst

from . import names
from .analysis import WRAPPER_ATTRIBUTES, ScriptAnalysis, call_method_name, dotted_name, walk
from .analysis.loaders import without_gradients
from .analysis.script import SELF_RETURNING_METHODS, backward_loss, callee_name, keyword_argument
from .analysis.ranks import Kind, rank_facts
from .analysis.trainable import wrapped_model_methods
from .base import Change, Example, FixResult, FixSafety, Match, Options, Phase, Rule, Valid
from .edits import Edits, accepting_both_key_formats, code_of, expression, state_dict_argument
from .runtime_calls import DDP_CLASS, DDP_MODULE, imported_name, nullcontext_name, runtime_name

#: DDP's own attributes, which stay on the wrapper (should move to the analysis's WRAPPER_ATTRIBUTES).
DDP_ATTRIBUTES = frozenset(
    {
        "require_backward_grad_sync",
        "require_forward_param_sync",
        "broadcast_buffers",
        "find_unused_parameters",
        "static_graph",
        "_set_static_graph",
        "process_group",
        "reducer",
        "gradient_as_bucket_view",
        "bucket_bytes_cap",
        # DDP's own private methods that tests and tools call on the wrapper (torch's distributed tests do).
        "_get_ddp_logging_data",
        "_register_builtin_comm_hook",
        "_register_buffer_comm_hook",
        "_register_fused_optim",
        "_remove_autograd_hooks",
        "_set_ddp_sink_clone",
        "_set_ddp_runtime_logging_sample_rate",
        "_set_params_and_buffers_to_ignore_for_model",
        "_update_process_group",
        "_check_comm_hook",
    }
)
#: Methods that read or write the model's state, never a forward pass.
STATE_METHODS = frozenset({"state_dict", "load_state_dict", "named_modules", "get_submodule", "get_parameter", "extra_repr"})
#: Calls that take a model as their first argument and must get the model itself, not its DDP wrapper:
#: copies (an EMA by ``copy.deepcopy`` or ``AveragedModel``), traces, exports.
COPIES = names.MODEL_COPIES
HANDOFFS = COPIES | frozenset({"torch.jit.trace", "torch.jit.script", "torch.jit.trace_module", "torch.onnx.export", "torch.export.export"})
RANK_FORWARD = (
    "the DDP wrapper's forward runs here on some ranks only: it broadcasts the model's buffers (BatchNorm "
    "statistics) from rank 0 and waits for every rank, which never come (a hang): run the model itself (.module)"
)
PART_IN_STEP_TODO = (
    "a part of the model runs in the training step past DDP's forward, which then skips the gradient all-reduce; "
    "give the model a forward() that runs its parts and call the model instead"
)
OWN_STEP_TODO = (
    "this method runs the model's own training step: through .module DDP's forward never runs and no gradient "
    "is all-reduced; move the step out of the class and call the wrapped model (its forward)"
)
#: Cases left to a human: a TODO at the statement, the call kept as the user wrote it.
UNFIXABLE = frozenset({"step", "own_step", "one_rank", "grad"})
ONE_RANK_TODO = (
    "this model method runs the training step's forward on the processes a test of the rank lets through: "
    "through DDP's forward they would wait for the others (a hang), through .module no gradient is all-reduced; "
    "run the step on every process and keep only the logging or saving under the test"
)
TRAINING_STEP_TODO = (
    "this model method runs in the training step: through .module it would skip DDP's gradient all-reduce; "
    "call the model (its forward) instead, e.g. make forward() return the loss (where the gradients this call "
    "gives the model train nothing, as a critic's Q-value in the actor's loss that only the actor's optimizer "
    "steps, .module is right)"
)


class WrappedModuleAccess(Rule):
    """Reach the model's own state and attributes through ``.module`` once it is wrapped.

    What it finds: ``state_dict()``, ``load_state_dict()`` and the model's own attributes and methods
    (``model.fc``, ``model.predict(...)``, or by name: ``getattr(model, "config")``, ``hasattr(model,
    "config")``) used on a name that holds the DDP-wrapped model, also from a nested function (``def resume():
    model.load_state_dict(...)``); the ``state_dict()`` of a wrapped model held in a container
    (``state["model"]``, ``models[0]``); the wrapper handed to code that needs
    the model itself (``copy.deepcopy``, ``AveragedModel``, ``torch.jit.trace``/``script``, ``torch.onnx.export``,
    ``SummaryWriter.add_graph``); settings assigned on the wrapper (``model.hyp = {...}``); ``no_sync()``
    on a model that is not wrapped on every path; ``isinstance(model, nn.DataParallel)`` checks, which are
    False for DDP; a model method called in the training step (``loss = model.compute_loss(x)``), or a part of a
    wrapped container (``towers["text"](x)`` of an ``nn.ModuleDict``); the
    wrapper's forward run under a test of the rank (``if is_main_process(): evaluate(model, loader)``, or
    ``model(x)`` there). Calls (``forward``) elsewhere, ``train()``, ``eval()``, ``parameters()``, ``to()``,
    ``zero_grad()``, ``no_sync()`` and DDP's own switches (``require_backward_grad_sync``) stay on the
    wrapper.

    Why it is a problem: the wrapper has no attribute ``fc`` (AttributeError), and its ``state_dict()``
    prefixes every key with ``module.``, so the checkpoint no longer loads into the plain model. A copy or a
    trace of the wrapper carries DDP's hooks (tracing fails on its buffer broadcast); a plain model has no
    ``no_sync()``; ``raw = model.module if isinstance(model, nn.DataParallel) else model`` keeps the wrapper.
    The wrapper's forward broadcasts the model's buffers (BatchNorm statistics) from rank 0 and waits for
    every rank: run on rank 0 alone, it hangs.

    What the fix does: inserts ``.module``: ``model.module.state_dict()``, ``model.module.fc``,
    ``copy.deepcopy(model.module)``, ``evaluate(model.module, loader)`` on rank 0. ``load_state_dict`` accepts both forms of checkpoint, with and without
    the ``module.`` prefix (one written by a DataParallel or DDP run, or by a plain one): ``{k.removeprefix(
    "module."): v for k, v in state.items()}``. A setting assigned on the wrapper is set on the model too
    (``model.hyp = model.module.hyp = ...``), so code that reads it through either finds it. Where the wrap
    happens only on some paths (``if args.distributed:``), the access sits in a nested function that may
    run before the wrap, or a function is handed the wrapped model by some calls and a plain one by others
    (``evaluate(model)`` and ``evaluate(ema_model)``), it uses ``runtime.unwrap(model)`` instead, which returns the model itself when it
    was not wrapped; ``no_sync()`` there becomes ``(model.no_sync() if hasattr(model, "no_sync") else
    contextlib.nullcontext())``. ``isinstance`` checks for ``DistributedDataParallel`` too.

    A model method in the training step (``loss = model.compute_loss(x, y)``; a runner's ``self.outputs =
    self.model.train_step(batch)`` whose loss a hook backpropagates) is not reached through ``.module``: there it
    would run without DDP, whose forward is what all-reduces the gradients, so the ranks would drift apart. A
    method of the program's model runs inside the wrapper's own forward instead,
    ``runtime.call_through_ddp(model, "compute_loss", x, y)``; any other (a method the analysis cannot find), or one
    called under a test of the rank (DDP's forward on some ranks only would hang), gets a TODO asking a human to
    route it through ``forward()`` on every rank.

    Left to a human too, as gradients DDP never averages: ``torch.autograd.grad`` over the wrapped model's
    parameters (a functional SAM ascent: DDP's hooks average what ``backward()`` accumulates only), and a second
    ``backward()`` over outputs of forwards an earlier backward of the same step already reduced (``d_real.backward();
    d_fake.backward()`` after both forwards: DDP all-reduces once per forward).

    Fix safety: the checkpoint keeps the keys ``model.module.state_dict()`` gives (unprefixed), which is
    what a single-device original wrote; DDP016 keeps a DataParallel script's ``module.`` keys. Loading
    strips one leading ``module.`` from every key, so a model whose own top-level submodule is named
    ``module`` would need the keys as they are; the state dict's ``_metadata`` (module versions) is not
    carried over by the comprehension.
    """

    code = "DDP008"
    name = "wrapped-module-access"
    fix_safety = FixSafety.UNSAFE
    phase = Phase.MODULE_ACCESS
    triggers = ("DistributedDataParallel", "DataParallel")
    needs_names = (names.MODEL_WRAPPERS,)  # it acts only on model wraps
    manual_fix = "call the model (its forward) in the training step, e.g. make forward() return the loss"
    examples = (
        # Evaluation on rank 0 only: the wrapper's forward would wait there for the other ranks.
        Example(
            before="""\
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel


def evaluate(net, batch):
    return net(batch).argmax(1)


model = DistributedDataParallel(model, device_ids=None)
if dist.get_rank() == 0:
    predictions = evaluate(model, batch)
    scores = model(batch)
""",
            after="""\
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel


def evaluate(net, batch):
    return net(batch).argmax(1)


model = DistributedDataParallel(model, device_ids=None)
if dist.get_rank() == 0:
    predictions = evaluate(model.module, batch)
    scores = model.module(batch)
""",
        ),
        # Every rank runs a forward, only on other inputs.
        Valid(
            """\
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

model = DistributedDataParallel(model, device_ids=None)
if dist.get_rank() == 0:
    out = model(first)
elif dist.get_rank() == 1:
    out = model(second)
else:
    out = model(third)
"""
        ),
        Example(
            before="""\
from torch.nn.parallel import DistributedDataParallel

model = DistributedDataParallel(model, device_ids=None)
torch.save(model.state_dict(), "model.pt")
features = model.backbone(x)
model.train()
""",
            after="""\
from torch.nn.parallel import DistributedDataParallel

model = DistributedDataParallel(model, device_ids=None)
torch.save(model.module.state_dict(), "model.pt")
features = model.module.backbone(x)
model.train()
""",
        ),
        Example(
            before="""\
from torch.nn.parallel import DistributedDataParallel

if args.distributed:
    model = DistributedDataParallel(model, device_ids=None)
torch.save(model.state_dict(), "model.pt")
""",
            after="""\
from ddp_migrate import runtime
from torch.nn.parallel import DistributedDataParallel

if args.distributed:
    model = DistributedDataParallel(model, device_ids=None)
torch.save(runtime.unwrap(model).state_dict(), "model.pt")
""",
        ),
        Example(
            before="""\
from torch.nn.parallel import DistributedDataParallel


def main():
    model = DistributedDataParallel(net, device_ids=None)

    def resume(path):
        model.load_state_dict(torch.load(path)["model"])

    resume("ckpt.pt")
    model.load_state_dict(torch.load("best.pt"), strict=False)
""",
            after="""\
from torch.nn.parallel import DistributedDataParallel


def main():
    model = DistributedDataParallel(net, device_ids=None)

    def resume(path):
        model.module.load_state_dict(
            {k.removeprefix("module."): v for k, v in torch.load(path)["model"].items()}
        )

    resume("ckpt.pt")
    model.module.load_state_dict(
        {k.removeprefix("module."): v for k, v in torch.load("best.pt").items()},
        strict=False,
    )
""",
        ),
        Example(
            before="""\
import contextlib
from torch.nn.parallel import DistributedDataParallel

if args.distributed:
    model = DistributedDataParallel(model, device_ids=None)
for i, (x, y) in enumerate(loader):
    with model.no_sync():
        loss_fn(model(x), y).backward()
""",
            after="""\
import contextlib
from torch.nn.parallel import DistributedDataParallel

if args.distributed:
    model = DistributedDataParallel(model, device_ids=None)
for i, (x, y) in enumerate(loader):
    with (model.no_sync() if hasattr(model, "no_sync") else contextlib.nullcontext()):
        loss_fn(model(x), y).backward()
""",
        ),
        Example(
            before="""\
from torch.nn.parallel import DistributedDataParallel

model = DistributedDataParallel(net, device_ids=None)
model.load_state_dict(strict=True, state_dict=checkpoint["model"])
""",
            after="""\
from torch.nn.parallel import DistributedDataParallel

model = DistributedDataParallel(net, device_ids=None)
model.module.load_state_dict(
    strict=True,
    state_dict={k.removeprefix("module."): v for k, v in checkpoint["model"].items()},
)
""",
        ),
        Example(
            before="""\
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel

model = DistributedDataParallel(net, device_ids=None)
model.fc = nn.Linear(8, 1).to(device)
""",
            after="""\
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel

model = DistributedDataParallel(net, device_ids=None)
model.module.fc = nn.Linear(8, 1).to(device)
""",
        ),
        Example(
            before="""\
import copy
import torch
from torch.nn.parallel import DistributedDataParallel
from torch.optim.swa_utils import AveragedModel

model = DistributedDataParallel(net, device_ids=None)
model.hyp = {"box": 0.05}
model.require_backward_grad_sync = False
ema = copy.deepcopy(model)
swa = AveragedModel(model)
traced = torch.jit.trace(model, example)
writer.add_graph(model, example)
""",
            after="""\
import copy
import torch
from torch.nn.parallel import DistributedDataParallel
from torch.optim.swa_utils import AveragedModel

model = DistributedDataParallel(net, device_ids=None)
model.hyp = model.module.hyp = {"box": 0.05}
model.require_backward_grad_sync = False
ema = copy.deepcopy(model.module)
swa = AveragedModel(model.module)
traced = torch.jit.trace(model.module, example)
writer.add_graph(model.module, example)
""",
        ),
        Example(
            before="""\
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel

model = DistributedDataParallel(net, device_ids=None)
raw = model.module if isinstance(model, nn.DataParallel) else model
torch.save(raw.state_dict(), "final.pt")
""",
            after="""\
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel

model = DistributedDataParallel(net, device_ids=None)
raw = (
    model.module
    if isinstance(model, (nn.DataParallel, DistributedDataParallel))
    else model
)
torch.save(raw.state_dict(), "final.pt")
""",
        ),
        Example(
            before="""\
from torch.nn.parallel import DistributedDataParallel

model = DistributedDataParallel(net, device_ids=None)
for x, y in loader:
    loss = model.compute_loss(x, y)
    loss.backward()
    optimizer.step()
""",
            after="""\
from torch.nn.parallel import DistributedDataParallel

model = DistributedDataParallel(net, device_ids=None)
for x, y in loader:
    # TODO(ddp-migrate): this model method runs in the training step: through .module it would skip DDP's gradient all-reduce; call the model (its forward) instead, e.g. make forward() return the loss (where the gradients this call gives the model train nothing, as a critic's Q-value in the actor's loss that only the actor's optimizer steps, .module is right)
    loss = model.compute_loss(x, y)
    loss.backward()
    optimizer.step()
""",
        ),
        # DDP's own (private) methods belong to the wrapper.
        Valid(
            """\
from torch.nn.parallel import DistributedDataParallel

ddp_model = DistributedDataParallel(net, device_ids=None)
ddp_model._register_builtin_comm_hook(hook)
for (x,) in loader:
    ddp_model(x).sum().backward()
stats = ddp_model._get_ddp_logging_data()
"""
        ),
        # A part of a wrapped container run in the training step (a trial's two towers in an nn.ModuleDict).
        Example(
            before="""\
from torch.nn.parallel import DistributedDataParallel

towers = DistributedDataParallel(towers, device_ids=None)
for images, texts in loader:
    loss = contrastive(towers["image"](images), towers["text"](texts))
    loss.backward()
""",
            after="""\
from torch.nn.parallel import DistributedDataParallel

towers = DistributedDataParallel(towers, device_ids=None)
for images, texts in loader:
    # TODO(ddp-migrate): a part of the model runs in the training step past DDP's forward, which then skips the gradient all-reduce; give the model a forward() that runs its parts and call the model instead
    loss = contrastive(towers["image"](images), towers["text"](texts))
    loss.backward()
""",
        ),
        Example(
            before="""\
from torch.nn.parallel import DistributedDataParallel

model = DistributedDataParallel(net, device_ids=None)
for (x,) in loader:
    loss = model.module.compute_loss(x)
    loss.backward()
""",
            after="""\
from torch.nn.parallel import DistributedDataParallel

model = DistributedDataParallel(net, device_ids=None)
for (x,) in loader:
    # TODO(ddp-migrate): this model method runs in the training step: through .module it would skip DDP's gradient all-reduce; call the model (its forward) instead, e.g. make forward() return the loss (where the gradients this call gives the model train nothing, as a critic's Q-value in the actor's loss that only the actor's optimizer steps, .module is right)
    loss = model.module.compute_loss(x)
    loss.backward()
""",
        ),
        Valid(
            """\
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel

model = DistributedDataParallel(net, device_ids=None)
raw = model.module if isinstance(model, (nn.DataParallel, DistributedDataParallel)) else model
torch.save(raw.state_dict(), "final.pt")
net = model.module if args.distributed else model
net.fc.reset_parameters()
model.require_backward_grad_sync = False
with model.no_sync():
    model(x).sum().backward()
"""
        ),
        Valid(
            """\
from torch.nn.parallel import DistributedDataParallel

net.load_state_dict(weights)
model = DistributedDataParallel(net, device_ids=None)
out = model(x)
torch.save(model.module.state_dict(), "model.pt")
"""
        ),
        # The other side of the wrap's own test: the model is not wrapped there (a trial's timm-style save).
        Valid(
            """\
import torch
from torch.nn.parallel import DistributedDataParallel as DDP

if distributed:
    model = DDP(model)
state = model.module.state_dict() if distributed else model.state_dict()
torch.save(state, "last.pt")
"""
        ),
    )

    def matches(self, analysis: ScriptAnalysis) -> Iterator[Match]:
        for case in self.cases(analysis):
            yield Match(case.node, case.message, fixable=case.kind not in UNFIXABLE)

    def cases(self, analysis: ScriptAnalysis) -> Iterator[_Case]:
        """Every place that reaches the model through a wrapper, with how to fix it."""
        if not analysis.program_wrap_calls:
            return
        loads: set[cst.CSTNode] | None = None
        for attribute in analysis.attributes:
            attr = attribute.attr.value
            if attr == "module" and not isinstance(analysis.parent(attribute), cst.AssignTarget):
                if loads is None:
                    loads = {c for module in analysis.shared.analyses for c in module.calls_to(names.CHECKPOINT_LOADS)} if _saves_whole_wraps(analysis) else set()
                    loads |= {
                        c for c in analysis.calls_to({"copy.deepcopy"})
                        if c.args and analysis.is_unwrapped(c.args[0].value)
                    }
                origins = analysis.origins(attribute.value) if loads else set()
                if origins and origins <= loads:
                    yield _Case("loaded", attribute, attribute, True, LOADED_MODULE)
                elif _forward_bypasses_ddp(analysis, attribute):
                    call = analysis.parent(attribute)
                    yield _Case(
                        "step", call, attribute, False,  # type: ignore[arg-type]
                        f"{code_of(attribute)}(...) in the training step runs the model past DDP's forward: its gradients are "
                        f"never all-reduced and the ranks' weights drift apart; call {code_of(attribute.value)}(...) instead",
                    )
                elif (handed := _handed_to_a_forward(analysis, attribute)) is not None:
                    yield _Case(
                        "step", handed, attribute, False,  # type: ignore[arg-type]
                        f"{code_of(attribute)} handed to {code_of(handed.func)}(), which runs it in the training step: past "
                        f"DDP's forward, its gradients are never all-reduced and the ranks' weights drift apart; hand it "
                        f"{code_of(attribute.value)} instead",
                    )
                elif (alias := _alias_trained_past_ddp(analysis, attribute)) is not None:
                    yield _alias_case(*alias, attribute, attribute.value)
                continue
            if attr == "forward":  # ``model.module.forward(x)``: past DDP; ``model.forward(x)``: the wrapper's own
                parent = analysis.parent(attribute)
                if _bypasses_ddp(analysis, attribute, parent):
                    yield _Case("step", parent, attribute, False, "forward() through .module in the training step bypasses DDP's forward (no gradient all-reduce): call the model itself")
                continue
            if attr in WRAPPER_ATTRIBUTES and attr != "no_sync" or attr in DDP_ATTRIBUTES:
                continue
            if dotted_name(attribute.value) is None:
                held = analysis.wrapped_at(attribute.value) if attr in ("state_dict", "load_state_dict") and type(attribute.value) is cst.Subscript else None
                if held is not None:
                    # ``state["model"].state_dict()``, ``models[0]``: a container holds the wrapper (unwrapped whatever it holds)
                    kind = "DDP" if analysis.is_call_to(held, names.DISTRIBUTED_DATA_PARALLEL) else "DataParallel"
                    call = analysis.parent(attribute)
                    if attr == "state_dict":
                        yield _Case("access", attribute, attribute, True, f"state_dict() of a model held in a container that holds its {kind} wrapper: every key gains module.; use runtime.unwrap(...).state_dict()")
                    elif type(call) is cst.Call and call.func is attribute:  # type: ignore[attr-defined]
                        yield _Case("load", call, attribute, True, f"load_state_dict on a model held in a container that holds its {kind} wrapper takes only module.-prefixed keys: load into runtime.unwrap(...), accepting keys with and without the prefix")
                continue
            parent = analysis.parent(attribute)
            assigned = isinstance(parent, cst.AssignTarget)
            if assigned and attr == "module":
                continue
            if _bypasses_ddp(analysis, attribute, parent):
                yield _Case("step", parent, attribute, False, f"{attr}() through .module in the training step bypasses DDP's forward (no gradient all-reduce): route it through the model's forward()")
                continue
            wrap, closure = _wrap_of(analysis, attribute.value)
            if wrap is None or _on_the_unwrapped_side(analysis, wrap, attribute):
                continue
            sometimes = (
                closure
                or self._wrapped_only_sometimes(analysis, wrap, attribute)
                or analysis.handed_unwrapped(attribute.value)
                or _unwrapped_on_one_branch(analysis, attribute.value)
                or _rebound_after_the_wrap(analysis, wrap)
            )
            kind = "DDP" if analysis.is_call_to(wrap, names.DISTRIBUTED_DATA_PARALLEL) else "DataParallel"
            if attr == "no_sync":
                guarded = _asks_for_no_sync(analysis, parent)
                if sometimes and isinstance(parent, cst.Call) and parent.func is attribute and not guarded:
                    yield _Case("no_sync", parent, attribute, sometimes, "no_sync() exists only on the DDP wrapper, and the model is not wrapped on every path: fall back to contextlib.nullcontext()")
                continue
            if assigned:
                statement_ = analysis.parent(parent)
                if isinstance(statement_, cst.Assign) and not analysis.builds_layer(statement_.value):
                    if any(t.target is not attribute and _same_attribute_unwrapped(analysis, t.target, attr) for t in statement_.targets):
                        continue  # already set on both
                    yield _Case("assign", statement_, attribute, sometimes, f"{attr} set on the {kind} wrapper: set it on the model too, so code that reads it through either finds it")
                    continue
            if isinstance(parent, cst.Call) and parent.func is attribute:
                if attr == "load_state_dict":
                    yield _Case("load", parent, attribute, sometimes, f"load_state_dict on the {kind} wrapper takes only module.-prefixed keys: load into .module, accepting keys with and without the prefix")
                    continue
                if attr not in STATE_METHODS and not _runs_no_layer(analysis, parent):
                    if _in_training_step(analysis, parent) or _runs_a_forward_for_the_step(analysis, parent):
                        if _on_one_rank(analysis, parent):
                            yield _Case("one_rank", parent, attribute, sometimes, _ONE_RANK.format(attr=attr))
                            continue
                        if _model_method(analysis, parent) is not None and not any(a.star for a in parent.args):
                            # A method of the program's model: DDP's own forward can run it (runtime.call_through_ddp).
                            yield _Case(
                                "through", parent, attribute, sometimes,
                                f"{attr}() in the training step bypasses DDP's forward (no gradient all-reduce through .module): "
                                "run it through the wrapper's forward (runtime.call_through_ddp)",
                            )
                            continue
                        yield _Case("step", parent, attribute, sometimes, f"{attr}() in the training step bypasses DDP's forward (no gradient all-reduce through .module): route it through the model's forward()")
                        continue
                    method = analysis.call_target(parent)
                    if method is not None and analysis.runs_its_own_training_step(method):
                        yield _Case(
                            "own_step", parent, attribute, sometimes,
                            f"{attr}() runs a training step of the model itself (its forward, backward() and step()): through "
                            ".module DDP's forward never runs, its gradients are never all-reduced and each process trains "
                            "its own replica; move the step out of the model's class and call the wrapped model",
                        )
                        continue
            if attr == "state_dict":
                if _asks_whether_wrapped(analysis, attribute.value):
                    continue  # (timm's ModelEma: ``needs_module = hasattr(model, "module")`` matches the keys itself)
                message = f"state_dict() of the {kind} wrapper prefixes every key with module. (a checkpoint the plain model cannot load): use .module.state_dict()"
            else:
                message = f"{attr} is not on the {kind} wrapper: use .module.{attr}"
            yield _Case("access", attribute, attribute, sometimes, message)
        yield from _untraced_model_method_calls(analysis)
        for call in analysis.calls_to(_GRADIENT_CALLS):
            inputs = keyword_argument(call, "inputs") or (call.args[1] if len(call.args) > 1 and call.args[1].keyword is None else None)
            if inputs is not None and _holds_ddp_parameters(analysis, inputs.value):
                yield _Case(
                    "grad", call, call, False,
                    "torch.autograd.grad over the DDP model's parameters bypasses DDP's gradient all-reduce (its hooks "
                    "average what backward() accumulates only): each process gets its own shard's gradients, and what "
                    "it does with them (a SAM ascent step, a gradient penalty) differs between ranks; average them "
                    "across processes first (dist.all_reduce of each, divided by runtime.world_size())",
                )
        for second in _backwards_after_the_reduction(analysis):
            yield _Case(
                "grad", second, second, False,
                f"`{code_of(second).strip()}` runs a second backward pass over the outputs of DDP forwards that an "
                "earlier backward() of this step already reduced: DDP all-reduces the gradients once per forward, so "
                "what this pass adds stays each process's own and the replicas drift apart; sum the losses and call "
                "backward() once (or run each forward right before its backward)",
            )
        for subscript in analysis.subscripts:
            # ``model[0]`` of an ``nn.Sequential``: the wrapper holds one module and is not indexable.
            if dotted_name(subscript.value) is None or isinstance(analysis.parent(subscript), cst.AssignTarget):
                continue
            call = analysis.parent(subscript)
            if type(call) is cst.Call and call.func is subscript:  # type: ignore[attr-defined]
                inner = subscript.value
                model = inner.value if type(inner) is cst.Attribute and inner.attr.value == "module" else inner  # type: ignore[attr-defined]
                if _trains_past_ddp(analysis, model, call):  # type: ignore[arg-type]
                    # ``towers["text"](x)`` of a wrapped ``nn.ModuleDict``: DDP's forward never runs.
                    yield _Case(
                        "step", call, subscript, False,
                        f"{code_of(subscript)}(...) in the training step runs a part of the model past DDP's forward: its "
                        "gradients are never all-reduced and the ranks' weights drift apart; give the model a forward() "
                        f"that runs its parts, and call {code_of(model)}(...)",
                    )
                    continue
            wrap, closure = _wrap_of(analysis, subscript.value)
            if wrap is not None:
                sometimes = closure or self._wrapped_only_sometimes(analysis, wrap, subscript) or analysis.handed_unwrapped(subscript.value)
                kind = "DDP" if analysis.is_call_to(wrap, names.DISTRIBUTED_DATA_PARALLEL) else "DataParallel"
                yield _Case("access", subscript, subscript, sometimes, f"{code_of(subscript)} indexes the {kind} wrapper, which cannot be indexed: index the model (.module)")
        for call in analysis.calls:
            reflected = _reflected_attribute(analysis, call)
            if reflected is not None:
                yield _Case(
                    "reflect", call.args[0].value, call.args[0].value, True,
                    f"{code_of(call.func)}(..., {code_of(call.args[1].value).strip()}) asks the DDP wrapper, which has "
                    "none of the model's own attributes: ask the model itself (runtime.unwrap(...))",
                )
                continue
            if _type_of_a_wrapped_model(analysis, call):
                # ``type(self.model).__name__`` saved as a checkpoint's architecture: "DistributedDataParallel"
                yield _Case(
                    "reflect", call.args[0].value, call.args[0].value, True,
                    "type() of the model asks the DDP wrapper (DistributedDataParallel): ask the model itself (runtime.unwrap(...))",
                )
                continue
            if dotted_name(call.func) == "getattr" and len(call.args) >= 2 and code_of(call.args[1].value).strip("'\"") == "module":
                alias = _alias_trained_past_ddp(analysis, call, call.args[0].value)
                if alias is not None:
                    yield _alias_case(*alias, call, call.args[0].value)
                continue
            if analysis.is_call_to(call, HANDOFFS) or call_method_name(call) == "add_graph" or analysis.copies_a_model(call):
                if call.args and not call.args[0].keyword and not call.args[0].star:
                    wrap, closure = _wrap_of(analysis, call.args[0].value)
                    if wrap is not None and dotted_name(call.args[0].value) is not None:
                        sometimes = (
                            closure
                            or self._wrapped_only_sometimes(analysis, wrap, call)
                            or analysis.handed_unwrapped(call.args[0].value)
                            or _rebound_after_the_wrap(analysis, wrap)  # (``model = torch.load(f)`` of the model saved whole)
                        )
                        what = "copy" if analysis.copies_a_model(call) else "tracing"
                        yield _Case("handoff", call.args[0].value, call.args[0].value, sometimes, f"{code_of(call.func)} gets the DDP wrapper: hand it the model itself ({what} of the wrapper fails or keeps DDP's hooks)")
            elif (forwarded := self._forward_on_some_ranks(analysis, call)) is not None:
                model, wrap, closure = forwarded
                sometimes = closure or self._wrapped_only_sometimes(analysis, wrap, call) or analysis.handed_unwrapped(model)
                yield _Case("rank_forward", model, model, sometimes, RANK_FORWARD)
            elif _is_data_parallel_check(analysis, call):
                yield _Case("isinstance", call, call, False, "isinstance(..., DataParallel) is False for a DistributedDataParallel model: check for both")

    @staticmethod
    def _forward_on_some_ranks(
        analysis: ScriptAnalysis, call: cst.Call
    ) -> tuple[cst.BaseExpression, cst.Call, bool] | None:
        """The DDP-wrapped model a call runs forward on (``model(x)``, or ``evaluate(model, loader)`` of a
        function of the program that calls that parameter) under a test of the rank (``if
        is_main_process():``), with its wrap and whether it is reached from a closure; ``None`` elsewhere."""
        function = analysis.call_target(call)
        candidates: list[cst.BaseExpression] = [call.func] if dotted_name(call.func) is not None else []
        if type(call.func) is cst.Call and call_method_name(call.func) in _RETURNING_THE_MODEL and dotted_name(call.func.func.value) is not None:  # type: ignore[attr-defined]
            candidates.append(call.func.func.value)  # type: ignore[attr-defined]  (``model.eval()(probe)``: the model's forward)
        if function is not None:
            home = analysis.shared.analysis_of(function) or analysis
            called = home.derived("parameters called", _parameters_called).get(function, ())
            candidates += [argument for param, argument in analysis.bound_arguments(call, function) if param in called and dotted_name(argument) is not None]
            if home is analysis and _runs_on_some_ranks_only(analysis, function):
                # ``if is_main_process(): self.evaluate()``: the method runs ``self.model(x)`` itself (rewritten
                # there only where no call of it runs on every rank: a training step's would bypass DDP)
                candidates += analysis.derived("models called on self", _self_models_called).get(function, [])
        wraps, holding, attributes = analysis.derived("DDP wraps of the program", _ddp_wraps)
        # (Cheap tests first: most calls call no model, and most model calls run on every rank.)
        candidates = [
            model
            for model in candidates
            if ((name := dotted_name(model)) in holding or name.partition(".")[2] in attributes)  # type: ignore[union-attr]
            and analysis.origins(model) & wraps
        ]
        if not candidates:
            return None
        conditions = [c for c in rank_facts(analysis).conditions(call) if c.kind is Kind.RANK and c.in_body is not None]
        if not conditions:
            return None
        for model in candidates:
            wrap, closure = _wrap_of(analysis, model)
            if wrap is None or not analysis.is_call_to(wrap, names.DISTRIBUTED_DATA_PARALLEL):
                continue
            for condition in conditions:
                # ``if rank == 0: out = ddp(x) elif ...: ... else: out = ddp(y)``: every rank runs a forward.
                if isinstance(condition.owner, cst.If) and _other_branch_uses(analysis, condition.owner, call, dotted_name(model)):  # type: ignore[arg-type]
                    continue
                return model, wrap, closure
        return None

    @staticmethod
    def _wrapped_only_sometimes(analysis: ScriptAnalysis, wrap: cst.Call, access: cst.CSTNode) -> bool:
        """Whether the wrap sits under a condition that does not also hold where the model is used."""
        function = analysis.enclosing_function(wrap)
        home = analysis.shared.analysis_of(wrap) or analysis  # (the wrap may be in another module's main block)
        for ancestor in analysis.ancestors(wrap):
            if ancestor is function:
                break
            if isinstance(ancestor, cst.If) and not analysis.is_inside(access, ancestor) and ancestor is not home.main_guard:
                return True
        return False

    def fix(self, analysis: ScriptAnalysis, options: Options) -> FixResult | None:
        edits = Edits(analysis)
        for case in self.cases(analysis):
            line = analysis.line(case.node)
            if case.kind == "step":
                edits.todo(analysis.statement(case.node), PART_IN_STEP_TODO if type(case.attribute) is cst.Subscript else TRAINING_STEP_TODO)
                continue
            if case.kind == "own_step":
                edits.todo(analysis.statement(case.node), OWN_STEP_TODO)
                continue
            if case.kind == "one_rank":
                edits.todo(analysis.statement(case.node), ONE_RANK_TODO)
                continue
            if case.kind == "grad":
                continue  # (a review: its TODO is the migration's, at the statement)
            if case.kind == "through":
                call, attribute = case.node, case.attribute
                assert isinstance(call, cst.Call) and isinstance(attribute, cst.Attribute)
                rt = runtime_name(analysis, edits)
                method = attribute.attr.value
                routed = cst.Call(
                    func=expression(f"{rt}.call_through_ddp"),
                    args=[cst.Arg(attribute.value), cst.Arg(cst.SimpleString(f'"{method}"')), *[a.with_changes(comma=cst.MaybeSentinel.DEFAULT) for a in call.args]],
                )
                edits.replace(call, lambda _updated, routed=routed: routed)
                edits.changes.append(Change(self.code, line, f"{method}() runs through DDP's forward (runtime.call_through_ddp), which all-reduces its gradients"))
                continue
            if case.kind == "isinstance":
                call = case.node
                assert isinstance(call, cst.Call)
                ddp = imported_name(analysis, edits, DDP_MODULE, DDP_CLASS)
                classes = call.args[1].value
                both = expression(f"({code_of(classes)}, {ddp})")
                edits.replace(classes, lambda _updated, both=both: both)
                edits.changes.append(Change(self.code, line, f"isinstance checks for {ddp} too"))
                continue
            if case.kind == "loaded":
                attribute = case.attribute
                assert isinstance(attribute, cst.Attribute)
                inner = self._inner(analysis, edits, attribute.value, True)
                edits.replace(attribute, lambda _updated, inner=inner: inner)
                edits.changes.append(Change(self.code, line, "a model loaded whole or copied from the model itself is reached through runtime.unwrap(...) (it is no wrapper)"))
                continue
            if case.kind == "reflect":
                model = case.node
                assert isinstance(model, cst.BaseExpression)
                inner = self._inner(analysis, edits, model, True)
                edits.replace(model, lambda _updated, inner=inner: inner)
                asker = analysis.parent(analysis.parent(model))
                what = code_of(asker.func) if isinstance(asker, cst.Call) else "getattr/hasattr"  # type: ignore[union-attr]
                edits.changes.append(Change(self.code, line, f"{what} asks the model itself (runtime.unwrap(...)), not its wrapper"))
                continue
            if case.kind in ("handoff", "rank_forward"):
                model = case.node
                assert isinstance(model, cst.BaseExpression)
                inner = self._inner(analysis, edits, model, case.sometimes)
                edits.replace(model, lambda _updated, inner=inner: inner)
                what = "copied or traced" if case.kind == "handoff" else "run where only some ranks run (no buffer broadcast)"
                edits.changes.append(Change(self.code, line, f"the model itself (not its DDP wrapper) is {what}"))
                continue
            attribute = case.attribute
            if isinstance(attribute, cst.Subscript):
                inner = self._inner(analysis, edits, attribute.value, case.sometimes)
                edits.replace(attribute, lambda updated, inner=inner: updated.with_changes(value=inner))
                how = "runtime.unwrap(...)" if case.sometimes else ".module"
                edits.changes.append(Change(self.code, line, f"the model is indexed through {how}"))
                continue
            assert isinstance(attribute, cst.Attribute)
            how = "runtime.unwrap(...)" if case.sometimes else ".module"
            inner = self._inner(analysis, edits, attribute.value, case.sometimes) if case.kind != "no_sync" else attribute.value
            if case.kind == "no_sync":
                call = case.node
                nullcontext = nullcontext_name(analysis, edits)
                fallback = expression('(MODEL.no_sync() if hasattr(MODEL, "no_sync") else ' + nullcontext + "())")
                assert isinstance(fallback, cst.IfExp)
                fallback = fallback.with_changes(
                    body=call, test=fallback.test.with_changes(args=[cst.Arg(attribute.value, comma=fallback.test.args[0].comma), fallback.test.args[1]])  # type: ignore[attr-defined]
                )
                edits.replace(call, lambda _updated, new=fallback: new)
                edits.changes.append(Change(self.code, line, "no_sync() falls back to contextlib.nullcontext() when the model is not wrapped"))
            elif case.kind == "assign":
                assign = case.node
                assert isinstance(assign, cst.Assign)
                also = cst.AssignTarget(attribute.with_changes(value=inner))
                edits.replace(assign, lambda updated, also=also: updated.with_changes(targets=[*updated.targets, also]))  # type: ignore[attr-defined]
                edits.changes.append(Change(self.code, line, f"{attribute.attr.value} set on the DDP wrapper and on the model"))
            elif case.kind == "load":
                call = case.node
                assert isinstance(call, cst.Call)
                edits.replace(attribute, lambda updated, inner=inner: updated.with_changes(value=inner))
                given = state_dict_argument(call)
                if given is not None:
                    stripped = accepting_both_key_formats(given.value)
                    edits.replace(given.value, lambda _updated, stripped=stripped: stripped)
                edits.changes.append(Change(self.code, line, f"load_state_dict reached through {how}, accepting keys with and without module."))
            else:
                edits.replace(attribute, lambda updated, inner=inner: updated.with_changes(value=inner))
                what = attribute.attr.value
                after = " (its keys carry no module. prefix)" if what == "state_dict" else ""
                edits.changes.append(Change(self.code, line, f"{what} reached through {how}{after}"))
        return edits.apply(analysis.module) if edits else None

    @staticmethod
    def _inner(analysis: ScriptAnalysis, edits: Edits, model: cst.BaseExpression, sometimes: bool) -> cst.BaseExpression:
        """``model.module``, or ``runtime.unwrap(model)`` where the model is not wrapped on every path."""
        if not sometimes:
            return cst.Attribute(value=model, attr=cst.Name("module"))
        rt = runtime_name(analysis, edits)
        unwrapped = expression(f"{rt}.unwrap(MODEL)")
        assert isinstance(unwrapped, cst.Call)
        return unwrapped.with_changes(args=[cst.Arg(model)])


def _reflected_attribute(analysis: ScriptAnalysis, call: cst.Call) -> str | None:
    """The attribute ``getattr(model, "config")`` / ``hasattr(model, "config")`` / ``setattr`` asks a wrapped
    model for, where only the model has it (not ``module``, nor what the wrapper has too: ``parameters``,
    ``training``, DDP's own settings); ``None`` elsewhere."""
    if dotted_name(call.func) not in ("getattr", "hasattr", "setattr") or len(call.args) < 2 or call.args[0].keyword or call.args[0].star:
        return None
    name = call.args[1].value
    if isinstance(name, cst.SimpleString):
        attribute = str(name.evaluated_value)
    elif isinstance(name, (cst.Name, cst.Attribute, cst.Subscript)) and _parameters_of(analysis, call):
        # ``{"params": getattr(model, k).parameters(), "lr": lr}`` over part names: the model's own parts, which
        # the wrapper does not have (a name read otherwise may be the wrapper's own: ``module``, ``forward``)
        attribute = code_of(name).strip()
    else:
        return None
    if attribute == "module" or attribute in WRAPPER_ATTRIBUTES or attribute in DDP_ATTRIBUTES:
        return None
    model = call.args[0].value
    if dotted_name(model) is None or analysis.wrapped_at(model) is None:
        return None
    return attribute


def _type_of_a_wrapped_model(analysis: ScriptAnalysis, call: cst.Call) -> bool:
    """``type(model).__name__`` (or ``__qualname__``) of a name (or attribute) that holds a wrapped model there: the
    model's class name is meant (a checkpoint's ``arch``); not ``type(model) == nn.DataParallel``, a test of the
    wrapper."""
    if dotted_name(call.func) != "type" or len(call.args) != 1 or call.args[0].keyword or call.args[0].star:
        return False
    parent = analysis.parent(call)
    if not (isinstance(parent, cst.Attribute) and parent.value is call and parent.attr.value in ("__name__", "__qualname__")):
        return False
    model = call.args[0].value
    return dotted_name(model) is not None and analysis.wrapped_at(model) is not None and not analysis.holds_unwrapped(model)


def _parameters_of(analysis: ScriptAnalysis, call: cst.Call) -> bool:
    """Whether the value of the call is asked for its parameters (``getattr(model, k).parameters()``)."""
    parent = analysis.parent(call)
    grand = analysis.parent(parent) if isinstance(parent, cst.Attribute) else None
    return (
        isinstance(parent, cst.Attribute)
        and parent.attr.value in ("parameters", "named_parameters")
        and isinstance(grand, cst.Call)
        and grand.func is parent
    )


LOADED_MODULE = (
    ".module of a model loaded whole or copied from the model itself: runtime.save writes the model, not its "
    "DataParallel/DDP wrapper, and a copy of copy.deepcopy(model.module) is no wrapper, so the object has no "
    ".module; reach it through runtime.unwrap(...) (which also takes a wrapper saved before)"
)


@dataclass(frozen=True)
class _Case:
    kind: str
    node: cst.CSTNode
    attribute: cst.CSTNode
    sometimes: bool
    message: str


def _rebound_after_the_wrap(analysis: ScriptAnalysis, wrap: cst.Call) -> bool:
    """Whether the name the wrap is assigned to is bound again after it, in the wrap's scope, to something
    that is no wrap (``model = torch.load(f)`` of the best model, saved whole and unwrapped, for the final
    test): from there on it holds the model itself, and a function reading it runs before and after."""
    statement = analysis.parent(wrap)
    if not isinstance(statement, cst.Assign) or statement.value is not wrap:
        return False
    function = analysis.enclosing_function(wrap)
    wraps = set(analysis.program_wrap_calls)
    return any(
        analysis.comes_before(wrap, value) and not (wraps & analysis.origins(value))
        for target in statement.targets
        if (name := dotted_name(target.target)) is not None
        for value in analysis.assigned_values(function, name)
    )


def _unwrapped_on_one_branch(analysis: ScriptAnalysis, expr: cst.BaseExpression) -> bool:
    """Whether the name was assigned a conditional expression one branch of which reaches into the wrapper
    (``raw = model.module._orig_mod if compiled else model``): it holds the wrapper on some runs only."""
    name = dotted_name(expr)
    if name is None:
        return False
    for value in analysis.assigned_values(analysis.enclosing_function(expr), name):
        if isinstance(value, cst.IfExp):
            inside = [_reaches_inside(branch) for branch in (value.body, value.orelse)]
            if any(inside) and not all(inside):
                return True
    return False


def _reaches_inside(expr: cst.BaseExpression) -> bool:
    """``model.module...`` or ``runtime.unwrap(model)...``: an expression that reads past a wrapper; or
    ``model._orig_mod``, an attribute of the model itself, which this rule reaches through ``.module``."""
    if isinstance(expr, cst.Attribute) and isinstance(expr.value, cst.Name):
        attr = expr.attr.value
        if attr == "module" or not (attr in WRAPPER_ATTRIBUTES or attr in DDP_ATTRIBUTES):
            return True
    while isinstance(expr, (cst.Attribute, cst.Call)):
        if isinstance(expr, cst.Attribute):
            if expr.attr.value == "module":
                return True
            expr = expr.value
        else:
            if callee_name(expr) == "unwrap":
                return True
            expr = expr.func
    return False


def _saves_whole_wraps(analysis: ScriptAnalysis) -> bool:
    """Whether the program hands a wrapped model itself to ``runtime.save`` (which writes the model inside)."""
    return any(
        call.args and module.wrapped_at(call.args[0].value) is not None
        for module in analysis.shared.analyses
        for call in module.calls_to(names.RUNTIME_SAVE)
    )


def _wrap_of(analysis: ScriptAnalysis, expr: cst.BaseExpression) -> tuple[cst.Call | None, bool]:
    """The wrap the expression's model comes from, and whether it is reached from a nested function
    (a closure: it may run before or after the wrap, so only ``runtime.unwrap`` is safe there)."""
    name = dotted_name(expr)
    if name is None or analysis.holds_unwrapped(expr):
        return None, False
    wrap = analysis.wrapped_at(expr)
    if wrap is not None:
        return wrap, False
    # Should move to the analysis: a free variable of a nested function is bound in the enclosing one.
    root = name.split(".")[0]
    function = analysis.enclosing_function(expr)
    if function is None or root == "self" or _binds(analysis, function, root):
        return None, False
    for outer in analysis.ancestors(function):
        if not isinstance(outer, cst.FunctionDef):
            continue
        if not _binds(analysis, outer, root):
            continue
        for assign in analysis.assignments_in(outer):
            for target in _targets(assign):
                if dotted_name(target) == name:
                    origins = analysis.origins(target)
                    found = next((w for w in analysis.program_wrap_calls if w in origins), None)
                    if found is not None:
                        return found, True
        return None, False
    return None, False


def _targets(assign: cst.Assign | cst.AnnAssign) -> list[cst.BaseExpression]:
    return [assign.target] if isinstance(assign, cst.AnnAssign) else [t.target for t in assign.targets]


def _binds(analysis: ScriptAnalysis, function: cst.FunctionDef, name: str) -> bool:
    """Whether the function itself (not a function nested in it) binds the name."""
    if analysis.is_parameter(function, name):
        return True
    return any(
        any(isinstance(t, cst.Name) and t.value == name for t in _targets(assign)) for assign in analysis.assignments_in(function)
    )


def _same_attribute_unwrapped(analysis: ScriptAnalysis, target: cst.BaseExpression, attr: str) -> bool:
    """Whether an assignment target is ``<unwrapped model>.attr`` (``model.module.hyp``, ``runtime.unwrap(model).hyp``)."""
    return isinstance(target, cst.Attribute) and target.attr.value == attr and analysis.is_unwrapped(target.value)


def _is_data_parallel_check(analysis: ScriptAnalysis, call: cst.Call) -> bool:
    """``isinstance(x, nn.DataParallel)`` in a file that wraps with DDP (the check no longer matches)."""
    if not (isinstance(call.func, cst.Name) and call.func.value == "isinstance" and len(call.args) == 2):
        return False
    if not any(analysis.is_call_to(w, names.DISTRIBUTED_DATA_PARALLEL) for w in analysis.program_wrap_calls):
        return False
    classes = call.args[1].value
    elements = [e.value for e in classes.elements] if isinstance(classes, cst.Tuple) else [classes]
    qualified = set().union(*(analysis.qualified_names(e) for e in elements))
    return bool(qualified & names.DATA_PARALLEL) and not qualified & names.DISTRIBUTED_DATA_PARALLEL


def _bypasses_ddp(analysis: ScriptAnalysis, attribute: cst.Attribute, parent: cst.CSTNode | None) -> bool:
    """``model.module.compute_loss(x)`` on a DDP model, in the training step."""
    inner = attribute.value
    if not (isinstance(inner, cst.Attribute) and inner.attr.value == "module" and dotted_name(inner.value) is not None):
        return False
    if not (isinstance(parent, cst.Call) and parent.func is attribute):
        return False
    if attribute.attr.value in STATE_METHODS | WRAPPER_ATTRIBUTES and attribute.attr.value != "forward":
        return False
    return _trains_past_ddp(analysis, inner.value, parent) and not _runs_no_layer(analysis, parent)


def _forward_bypasses_ddp(analysis: ScriptAnalysis, attribute: cst.Attribute) -> bool:
    """``model.module(x)`` on a DDP model, in the training step (outside ``torch.no_grad()``)."""
    call = analysis.parent(attribute)
    if not (isinstance(call, cst.Call) and call.func is attribute and dotted_name(attribute.value) is not None):
        return False
    return _trains_past_ddp(analysis, attribute.value, call)


def _trains_past_ddp(analysis: ScriptAnalysis, model: cst.BaseExpression, call: cst.Call) -> bool:
    """Whether ``model`` holds a DDP wrap and the call (that runs its inner module) is in the training step,
    with gradients (pseudo-labels under ``no_grad`` have no gradient to reduce)."""
    wrap, _ = _wrap_of(analysis, model)
    return (
        wrap is not None
        and analysis.is_call_to(wrap, names.DISTRIBUTED_DATA_PARALLEL)
        and _in_training_step(analysis, call)
        and not without_gradients(analysis, call)
    )


def _runs_no_layer(analysis: ScriptAnalysis, call: cst.Call) -> bool:
    """Whether the model method the call runs is one of the program's that calls nothing on ``self`` but
    ``self.parameters()`` and the like (``init_hidden(bsz)`` building zeros from ``next(self.parameters())``):
    through ``.module`` it runs none of the model's layers, so there is nothing DDP would have to reduce."""
    method = analysis.call_target(call)
    if method is None:
        return False
    for node in walk(method.body):
        if type(node) is cst.Call and type(node.func) is cst.Attribute:
            receiver = dotted_name(node.func.value)  # type: ignore[attr-defined]
            if (receiver == "self" or (receiver or "").startswith("self.")) and node.func.attr.value not in PARAMETER_READS:  # type: ignore[attr-defined]
                return False
        elif type(node) is cst.Call and ((called := dotted_name(node.func) or "") == "self" or called.startswith("self.")):
            return False  # ``self(x)``: the model's own forward
    return True


#: What a method may ask of ``self`` without running a layer.
PARAMETER_READS = frozenset({"parameters", "named_parameters", "buffers", "named_buffers"})


def _in_training_step(analysis: ScriptAnalysis, call: cst.CSTNode, depth: int = 0) -> bool:
    """Whether the call runs in a loop that calls ``backward()`` after it, in the same function, or in a
    function of the file such a loop calls before ``backward()`` (``loss = compute_loss(model, x, y)``, a
    few calls deep)."""
    function = analysis.enclosing_function(call)
    loop = next((a for a in analysis.ancestors(call) if isinstance(a, (cst.For, cst.While))), None)
    if loop is None or (function is not None and not analysis.is_inside(loop, function)):
        if function is not None and _backward_after(analysis, call, function):
            return True  # a step function (``def step(model, opt, x)``, ``Trainer.train_step``): its callers loop
        if function is None or depth >= 3 or analysis.enclosing_class(function) is not None:
            return False  # (a method's callers are the model's forward and the like, not a training step)
        # (in any module of the program; a call under ``torch.no_grad()`` takes no gradient through it)
        return any(
            _in_training_step(home, caller, depth + 1) and not without_gradients(home, caller)
            for caller in analysis.callers_in_program(function)
            for home in [analysis.shared.analysis_of(caller) or analysis]
        )
    if any(
        analysis.is_inside(b, loop)
        and analysis.enclosing_function(b) is function
        and (analysis.comes_before(call, b) or analysis.is_inside(call, b))  # (``loss_fn(model.module(x), y).backward()``)
        for b in analysis.backward_calls
    ):
        return True
    # A loop whose pass runs ``backward()`` in a function it calls (a runner's hooks: ``for h in self.hooks:
    # h.after_train_iter(self)`` backpropagates the ``self.outputs`` the call stored), the call taking gradients,
    # its value kept, and its method running the model's own forward (``self(x)``; not ``save_pretrained(path)``).
    return (
        loop in analysis.reaching_nodes(analysis.program_backward_calls)
        and not without_gradients(analysis, call)
        and type(call) is cst.Call
        and isinstance(analysis.parent(call), cst.Assign)
        and _runs_its_own_forward(analysis, call)  # type: ignore[arg-type]
    )


def _untraced_model_method_calls(analysis: ScriptAnalysis) -> Iterator[_Case]:
    """Calls of a method only the wrapped models define (:func:`wrapped_model_methods`) on an object the
    analysis cannot trace (``runner.model.val_step(batch)`` in a hook a registry built): the object is the model
    or its wrapper, so it is reached through ``runtime.unwrap(...)`` (the object itself when not wrapped), or in the
    training step run through DDP's forward. (Before: an ``AttributeError`` of the wrapper at the first
    evaluation.)"""
    methods = wrapped_model_methods(analysis)
    if not methods:
        return
    for attribute in analysis.attributes:
        attr = attribute.attr.value
        if attr not in methods:
            continue
        call = analysis.parent(attribute)
        receiver = dotted_name(attribute.value)
        if type(call) is not cst.Call or call.func is not attribute or receiver is None or receiver == "self":  # type: ignore[attr-defined]
            continue
        if receiver.endswith(".module") or analysis.origins(attribute.value):
            continue  # (traced: the cases above decide)
        if (_in_training_step(analysis, call) or _runs_a_forward_for_the_step(analysis, call)) and not any(a.star for a in call.args):  # type: ignore[attr-defined, arg-type]
            if _on_one_rank(analysis, call):
                yield _Case("one_rank", call, attribute, True, _ONE_RANK.format(attr=attr))
                continue
            yield _Case(
                "through", call, attribute, True,
                f"{attr}() of the wrapped model in the training step: run it through the wrapper's forward (runtime.call_through_ddp)",
            )
        else:
            yield _Case("access", attribute, attribute, True, f"{attr} is a method of the wrapped model, not of its DDP wrapper: use runtime.unwrap(...).{attr}")


#: Methods of a module that return the module itself (``model.eval()(x)`` runs the model's forward).
_RETURNING_THE_MODEL = SELF_RETURNING_METHODS | {"requires_grad_"}


#: A training step's model method called on some processes only: DDP's forward there would wait for the others.
_ONE_RANK = (
    "{attr}() in the training step runs under a test of the rank: through DDP's forward it would wait for the "
    "processes that skip it (a hang), through .module its gradients are never all-reduced; run it on every process"
)


#: Gradients computed without ``backward()``: DDP's hooks never see them.
_GRADIENT_CALLS = frozenset({"torch.autograd.grad"})


def _holds_ddp_parameters(analysis: ScriptAnalysis, expr: cst.BaseExpression, depth: int = 0) -> bool:
    """Whether an expression holds parameters of a DDP-wrapped model: ``model.parameters()`` of the wrapper (or of
    its ``.module``), directly or through names that hold them (``params = [p for p in model.parameters() if
    p.requires_grad]``), a few steps deep."""
    for node in walk(expr):
        if type(node) is cst.Call and call_method_name(node) in ("parameters", "named_parameters") and type(node.func) is cst.Attribute:  # type: ignore[arg-type, attr-defined]
            held = node.func.value  # type: ignore[attr-defined]
            if type(held) is cst.Attribute and held.attr.value == "module":
                held = held.value
            wrap, _ = _wrap_of(analysis, held)
            if wrap is not None and analysis.is_call_to(wrap, names.DISTRIBUTED_DATA_PARALLEL):
                return True
        elif type(node) is cst.Name and depth < 3:
            values = [v for v in analysis.flows_into(node, node.value) if isinstance(v, cst.BaseExpression) and v is not expr]  # type: ignore[attr-defined]
            if any(_holds_ddp_parameters(analysis, value, depth + 1) for value in values):
                return True
    return False


def _backwards_after_the_reduction(analysis: ScriptAnalysis) -> Iterator[cst.Call]:
    """Each ``backward()`` of a training step that follows another in the same pass of its loop, on a loss computed
    from DDP forwards that all ran before that earlier backward (``out_a = net(a); out_b = net(b);
    out_a.backward(); out_b.backward()``): the earlier one reduced every gradient already."""
    forwards = analysis.program_ddp_forward_calls
    if len(analysis.backward_calls) < 2 or not forwards:
        return
    by_loop: dict[cst.CSTNode, list[cst.Call]] = {}
    for call in analysis.backward_calls:
        loop = analysis.nearest_loop(call)
        if loop is not None and type(call.func) is cst.Attribute and call.func.attr.value == "backward":  # type: ignore[attr-defined]
            by_loop.setdefault(loop, []).append(call)
    for loop, calls in by_loop.items():
        calls.sort(key=analysis.line)
        for first, second in zip(calls, calls[1:]):
            if analysis.nearest_loop(first) is not analysis.nearest_loop(second) or analysis.in_exclusive_branches(first, second):
                continue
            fed = _ddp_forwards_feeding(analysis, second, forwards)
            # (the earlier backward reduced the same model's gradients: not a local twin's, ``loss.backward()`` of a
            # reference model beside ``loss_ddp.backward()``)
            earlier = {analysis.wrapped_at(f.func) for f in _ddp_forwards_feeding(analysis, first, forwards)}
            if (
                fed
                and all(analysis.comes_before(f, first) for f in fed)
                and any(analysis.wrapped_at(f.func) in earlier for f in fed)
                and not any(analysis.comes_before(first, f) and analysis.comes_before(f, second) for f in forwards if analysis.owns(f))
            ):
                yield second


def _ddp_forwards_feeding(analysis: ScriptAnalysis, backward: cst.Call, forwards: list[cst.Call]) -> list[cst.Call]:
    """The DDP forwards whose outputs the loss a ``backward()`` runs on is computed from."""
    loss = backward_loss(backward)
    name = dotted_name(loss)
    roots = analysis.flows_into(backward, name) if name is not None else [loss]  # (what ``loss`` holds there)
    return [f for f in analysis.feeding_calls(roots) if f in forwards]


def _on_one_rank(analysis: ScriptAnalysis, call: cst.CSTNode) -> bool:
    """Whether the call runs only where a test of the rank holds (``if rank == 0:``, ``if is_main_process():``)."""
    return any(c.kind is Kind.RANK for c in rank_facts(analysis).conditions(call))


def _runs_a_forward_for_the_step(analysis: ScriptAnalysis, call: cst.Call) -> bool:
    """Whether a model method that runs the model's own forward (``train_step(batch)`` calling ``self(x)``) is
    called where gradients are taken, its value kept, on every rank (no test of the rank around it): the
    forward of a training step, whichever code backpropagates it (a hook a registry built, out of the
    analysis's sight)."""
    method = _model_method(analysis, call)
    return (
        method is not None
        and isinstance(analysis.parent(call), cst.Assign)
        and not without_gradients(analysis, call)
        and not _on_one_rank(analysis, call)
        and _runs_its_own_forward(analysis, call)
        and not analysis.runs_its_own_training_step(method)  # (``model.fit(loader, opt)``: its own backward, a human's)
        and not any(type(node) is cst.Call and call_method_name(node) == "backward" for node in walk(method.body))
    )


def _model_method(analysis: ScriptAnalysis, call: cst.Call) -> cst.FunctionDef | None:
    """The model method a call runs: resolved, or by its name among the wrapped models' own methods (a class a
    registry built from a config)."""
    method = analysis.call_target(call)
    if method is None and type(call.func) is cst.Attribute:
        method = wrapped_model_methods(analysis).get(call.func.attr.value)  # type: ignore[attr-defined]
    return method


def _runs_its_own_forward(analysis: ScriptAnalysis, call: cst.Call) -> bool:
    """Whether the model method the call runs calls the model itself (``self(x)``, ``self.forward(x)``)."""
    method = _model_method(analysis, call)
    return method is not None and any(
        type(node) is cst.Call and dotted_name(node.func) in ("self", "self.forward")  # type: ignore[attr-defined]
        for node in walk(method.body)
    )


def _backward_after(analysis: ScriptAnalysis, call: cst.CSTNode, function: cst.FunctionDef) -> bool:
    """Whether the function runs ``backward()`` itself after the call (or on its value), outside any loop of its
    own over the data: the call is part of one training step, which the function's callers repeat."""
    data_loops = {found.loop for found in analysis.loader_loops}
    steps = analysis.optimizer_step_calls

    def trains(ancestor: cst.CSTNode) -> bool:
        # (a loop of its own over the data is the training, and the call runs once before it: a set-up; so is a
        # loop that steps the optimizer, minGPT's ``while True:`` drawing ``next(data_iter)``; a loop over the
        # model's heads is part of one step)
        if ancestor in data_loops:
            return True
        return (
            type(ancestor) in (cst.For, cst.While)
            and not analysis.is_inside(call, ancestor)
            and any(analysis.is_inside(s, ancestor) for s in steps)
        )

    return any(
        analysis.enclosing_function(b) is function
        and not any(trains(ancestor) for ancestor in analysis.ancestors(b) if analysis.is_inside(ancestor, function))
        and (analysis.comes_before(call, b) or analysis.is_inside(call, b))
        for b in analysis.backward_calls
    )


def _test_text(test: cst.BaseExpression) -> str:
    return " ".join(code_of(test).split())


def _asks_whether_wrapped(analysis: ScriptAnalysis, receiver: cst.BaseExpression) -> bool:
    """Whether the function around the receiver asks whether it holds a wrapper, ``hasattr(model, "module")``:
    its code handles both the wrapper and the model (prefixing keys with ``module.`` itself where it finds one),
    so reaching the model through ``.module`` there would undo what it does."""
    name = dotted_name(receiver)
    function = analysis.enclosing_function(receiver)
    if name is None or function is None:
        return False
    return any(
        type(node) is cst.Call
        and dotted_name(node.func) == "hasattr"  # type: ignore[attr-defined]
        and len(node.args) >= 2  # type: ignore[attr-defined]
        and dotted_name(node.args[0].value) == name  # type: ignore[attr-defined]
        and isinstance(node.args[1].value, cst.SimpleString)  # type: ignore[attr-defined]
        and node.args[1].value.evaluated_value == "module"  # type: ignore[attr-defined]
        for node in analysis.nodes_below(function)
    )


def _asks_for_no_sync(analysis: ScriptAnalysis, node: cst.CSTNode) -> bool:
    """Whether a node runs only where a test found the model a wrapper: ``hasattr(model, "no_sync")`` or
    ``isinstance(model, DDP)`` in the test of an ``if`` (or conditional expression) around it, also through a name
    assigned that test (timm's ``has_no_sync = hasattr(model, "no_sync")``, then ``if has_no_sync and ...:``)."""

    def asks(test: cst.BaseExpression, depth: int = 0) -> bool:
        # Only a part every path through the test must pass (``a and b``; not under ``or`` nor ``not``).
        if isinstance(test, cst.BooleanOperation) and isinstance(test.operator, cst.And):
            return asks(test.left, depth) or asks(test.right, depth)
        if type(test) is cst.Call and (
            (dotted_name(test.func) == "hasattr" and "no_sync" in code_of(test))  # type: ignore[attr-defined]
            or analysis.wrapper_tested(test) is not None
        ):
            return True
        if type(test) is cst.Name and depth < 2:
            values = analysis.flows_into(test, test.value)  # type: ignore[attr-defined]
            return bool(values) and all(isinstance(v, cst.BaseExpression) and asks(v, depth + 1) for v in values)
        return False

    child = node
    for ancestor in analysis.ancestors(node):
        if isinstance(ancestor, (cst.If, cst.IfExp)) and child is ancestor.body and asks(ancestor.test):
            return True
        child = ancestor
    return False


def _on_the_unwrapped_side(analysis: ScriptAnalysis, wrap: cst.Call, node: cst.CSTNode) -> bool:
    """Whether the node runs only where the wrap did not: the wrap sits in the body of ``if T:`` and the node
    on the other side of the same test (``model.module.state_dict() if T else model.state_dict()``, the
    ``else:`` of ``if T:``, the body of ``if not T:``)."""
    guard = next((a for a in analysis.ancestors(wrap) if isinstance(a, cst.If) and analysis.is_inside(wrap, a.body)), None)
    if guard is None:
        return False
    test = _test_text(guard.test)
    for ancestor in analysis.ancestors(node):
        if isinstance(ancestor, (cst.If, cst.IfExp)):
            inside_body = analysis.is_inside(node, ancestor.body)
            own = _test_text(ancestor.test)
            if own == test and ancestor.orelse is not None and analysis.is_inside(node, ancestor.orelse):
                return True
            if own in (f"not {test}", f"not ({test})") and inside_body:
                return True
    return False


def _alias_case(name: str, step: cst.Call, reach: cst.BaseExpression, model: cst.BaseExpression) -> _Case:
    """The review of a training forward through an alias (``name``, bound to ``reach``: ``model.module`` or
    ``getattr(model, "module", model)``) of the wrapped ``model``."""
    return _Case(
        "step", step, step.func, False,  # type: ignore[arg-type]
        f"{name} holds {code_of(reach)}, and {code_of(step.func)}(...) in the training step runs the model past "
        f"DDP's forward: its gradients are never all-reduced and the ranks' weights drift apart; call "
        f"{code_of(model)}(...) instead",
    )


#: What a call through a model may run that is no forward of its layers: state, parameters, mode and moves.
_NOT_A_FORWARD = STATE_METHODS | WRAPPER_ATTRIBUTES | PARAMETER_READS | {"eval", "train", "to", "cuda", "cpu"}


def _alias_trained_past_ddp(
    analysis: ScriptAnalysis, reach: cst.BaseExpression, model: cst.BaseExpression | None = None
) -> tuple[str, cst.Call] | None:
    """``net = model.module`` (a DataParallel program's alias of its model; also ``model.module if
    isinstance(model, nn.DataParallel) else model`` and ``getattr(model, "module", model)``) on a DDP model,
    then ``net(x)`` or ``net.encoder(x)`` in the training step: the alias's name and that call. ``reach``:
    the ``model.module`` attribute or the ``getattr`` call; ``model``: what it reaches into (the attribute's
    value by default)."""
    model = model if model is not None else reach.value  # type: ignore[attr-defined]
    value: cst.CSTNode = reach
    statement_ = analysis.parent(reach)
    if isinstance(statement_, cst.IfExp):
        value, statement_ = statement_, analysis.parent(statement_)
    if not (isinstance(statement_, cst.Assign) and statement_.value is value and dotted_name(model) is not None):
        return None
    wrap, _ = _wrap_of(analysis, model)
    if wrap is None or not analysis.is_call_to(wrap, names.DISTRIBUTED_DATA_PARALLEL):
        return None
    aliases = {name for t in statement_.targets if (name := dotted_name(t.target)) is not None}
    for call in analysis.calls:
        called = dotted_name(call.func)
        if called is None:
            continue
        name, _, layer = called.partition(".") if called.split(".")[0] in aliases else (called, "", "")
        if called.startswith("self.") and called not in aliases:
            name, layer = next(((a, called[len(a) + 1 :]) for a in aliases if called.startswith(a + ".")), (called, ""))
        if name not in aliases or layer in _NOT_A_FORWARD | {"zero_grad"}:
            continue
        in_effect = analysis.binding_in_effect(call, name) if "." not in name else None
        if in_effect is not None and in_effect is not statement_:
            continue  # (``model = model.module`` later, then wrapped again: the call runs before or after, on the wrap)
        if (
            (
                value in analysis.flows_into(call.func if not layer else call.func.value, name)  # type: ignore[attr-defined]
                # ``self.raw_model = self.model.module`` in ``__init__``, ``self.raw_model(x)`` in ``fit()``
                or (name.startswith("self.") and analysis.enclosing_class(call) is not None and analysis.enclosing_class(call) is analysis.enclosing_class(statement_))
            )
            and _in_training_step(analysis, call)
            and not without_gradients(analysis, call)
            and not _runs_no_layer(analysis, call)
            # (``if rank == 0:`` around it: a step of one rank's own, which no other rank waits on)
            and not any(c.kind is Kind.RANK and c.in_body is not None for c in rank_facts(analysis).conditions(call))
        ):
            return code_of(call.func.value) if layer else name, call  # type: ignore[attr-defined, return-value]
    return None


def _handed_to_a_forward(analysis: ScriptAnalysis, attribute: cst.Attribute) -> cst.Call | None:
    """``compute_loss(model.module, x, y)`` in the training step, on a DDP model, where ``compute_loss`` (of
    any module of the program) calls the parameter it gets (``model(x)``) or its layers (``model.encoder(x)``):
    the call."""
    argument = analysis.parent(attribute)
    call = analysis.parent(argument) if isinstance(argument, cst.Arg) else None
    if not (isinstance(call, cst.Call) and dotted_name(attribute.value) is not None):
        return None
    function = analysis.call_target(call)
    home = analysis.shared.analysis_of(function) if function is not None else None
    if function is None or home is None:
        return None
    wrap, _ = _wrap_of(analysis, attribute.value)
    if wrap is None or not analysis.is_call_to(wrap, names.DISTRIBUTED_DATA_PARALLEL):
        return None
    params = {param for param, value in analysis.bound_arguments(call, function) if value is attribute}
    runs = any(
        type(node) is cst.Call
        and (called := dotted_name(node.func)) is not None  # type: ignore[attr-defined]
        and called.split(".")[0] in params
        and called.partition(".")[2] not in _NOT_A_FORWARD
        and not without_gradients(home, node)
        for node in walk(function.body)
    )
    if runs and _in_training_step(analysis, call) and not without_gradients(analysis, call):
        return call
    return None


def _ddp_wraps(analysis: ScriptAnalysis) -> tuple[frozenset[cst.CSTNode], frozenset[str], frozenset[str]]:
    """The ``DistributedDataParallel(...)`` calls of the program, the names that may hold one, and the
    attributes of ``self`` that may (``trainer.model`` of a class that stores ``self.model``)."""
    wraps = frozenset(wrap for wrap in analysis.program_wrap_calls if analysis.is_call_to(wrap, names.DISTRIBUTED_DATA_PARALLEL))
    holding = analysis.names_holding(wraps)  # type: ignore[arg-type]
    return wraps, holding, frozenset(name[5:] for name in holding if name.startswith("self."))


def _parameters_called(analysis: ScriptAnalysis) -> dict[cst.FunctionDef, set[str]]:
    """For each function of a module, the parameters it calls (``net(batch)`` in ``def evaluate(net, ...)``)."""
    found: dict[cst.FunctionDef, set[str]] = {}
    for call in analysis.calls:
        if type(call.func) is cst.Name:
            function = analysis.enclosing_function(call)
            if function is not None and analysis.is_parameter(function, call.func.value):  # type: ignore[attr-defined]
                found.setdefault(function, set()).add(call.func.value)  # type: ignore[attr-defined]
    return found


def _runs_on_some_ranks_only(analysis: ScriptAnalysis, function: cst.FunctionDef) -> bool:
    """Whether every call of the function in the program sits under a test of the rank."""
    callers = analysis.callers_in_program(function)
    for caller in callers:
        owner = analysis.shared.analysis_of(caller) or analysis
        if not any(c.kind is Kind.RANK and c.in_body is not None for c in rank_facts(owner).conditions(caller)):
            return False
    return bool(callers)


def _self_models_called(analysis: ScriptAnalysis) -> dict[cst.FunctionDef, list[cst.BaseExpression]]:
    """For each method of a module, the attributes of ``self`` it calls (``self.model`` of
    ``self.model(x)``), each as written there."""
    found: dict[cst.FunctionDef, list[cst.BaseExpression]] = {}
    for call in analysis.calls:
        func = call.func
        if type(func) is cst.Attribute and type(func.value) is cst.Name and func.value.value == "self":  # type: ignore[attr-defined]
            function = analysis.enclosing_function(call)
            if function is not None:
                found.setdefault(function, []).append(func)
    return found


def _other_branch_uses(analysis: ScriptAnalysis, branch: cst.If, node: cst.CSTNode, name: str) -> bool:
    """Whether a branch of the ``if``/``elif``/``else`` chain the ``if`` belongs to, other than the one that
    holds the node, uses the name."""
    top = branch
    while isinstance(analysis.parent(top), cst.If) and analysis.parent(top).orelse is top:  # type: ignore[union-attr]
        top = analysis.parent(top)  # type: ignore[assignment]
    bodies: list[cst.CSTNode] = []
    current: cst.CSTNode | None = top
    while isinstance(current, cst.If):
        bodies.append(current.body)
        current = current.orelse
    if isinstance(current, cst.Else):
        bodies.append(current.body)
    return any(not analysis.is_inside(node, body) and _uses_name(body, name) for body in bodies)


def _uses_name(node: cst.CSTNode, name: str) -> bool:
    """Whether the (dotted) name occurs in the code under a node."""
    return any(type(n) in (cst.Name, cst.Attribute) and dotted_name(n) == name for n in walk(node))
