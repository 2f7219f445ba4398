"""DDP011 missing-ddp-wrap."""

from __future__ import annotations

from typing import Iterator

import libcst as cst

from . import names
from .analysis import (
    ScriptAnalysis,
    call_method_name,
    dotted_name,
    is_none,
    leaves_early,
    statements_of,
    walk,
    wrapped_argument,
)
from .analysis.legacy import legacy_facts
from .analysis.ranks import calls_feeding_the_losses, counts_the_processes, rank_facts
from .analysis.script import is_true, item_name, keyword_argument, under_self_returning_calls
from .analysis.trainable import freezes_every_parameter, frozen_models, requires_grad_changes, skipped_in_some_steps, unfrozen_after
from .base import (
    Change,
    Example,
    FixResult,
    FixSafety,
    Match,
    Options,
    Phase,
    Rule,
    Valid,
)
from .edits import Edits, code_of, expression, statement
from .runtime_calls import ddp_call, find_unused_parameters_argument, runtime_name

#: What a switch's value reads when it already follows a torchrun launch.
LAUNCH_AWARE = ("WORLD_SIZE", "RANK", "launched_by_torchrun", "runtime.", "local_rank", "get_world_size", "is_initialized")

#: Statements that still set the model up (before it may be wrapped).
SETUP_METHODS = frozenset({"to", "cuda", "load_state_dict", "apply", "float", "half", "double", "bfloat16"})
#: Methods that change which parameters a model holds (torch's own, and Hugging Face's).
STRUCTURE_METHODS = frozenset(
    {
        "add_module", "register_module", "register_parameter", "register_buffer", "tie_weights",
        "resize_token_embeddings", "set_input_embeddings", "set_output_embeddings", "add_adapter",
        "load_adapter", "register_classification_head",
    }
)


class MissingDdpWrap(Rule):
    """Wrap the trained model in ``DistributedDataParallel``.

    What it finds: in a training script, a model whose ``parameters()`` go to an optimizer but which is
    never wrapped in DistributedDataParallel (or DataParallel, which DDP001 converts). An optimizer is a
    ``torch.optim`` constructor, or any call given a model's parameters (or the model itself, or its tensors)
    whose value the program steps: a class of the program derived from ``torch.optim.Optimizer``, a library's
    (``Lion(...)``, ``create_optimizer_v2(model, ...)``), one looked up by name (``OPTIMIZERS[name](...)``,
    ``getattr(torch.optim, name)(...)``). A model a function of the program builds the optimizer for
    (``build_optimizer(model, cfg)``, ``model.configure_optimizers()``) is wrapped where that function is called.
    Where the program builds what it steps but no model can be named, its first ``loss.backward()`` is
    reported: nothing would be wrapped (not in a program that FSDP, DeepSpeed, Accelerate or Lightning
    distributes).

    Why it is a problem: without DDP nothing averages the gradients across processes, so each process
    trains its own copy on its own shard and the copies drift apart.

    It also finds a trainable tensor of no module handed to an optimizer beside a model (``SGD(list(model.parameters())
    + [log_temperature])`` with ``log_temperature = nn.Parameter(...)``): DDP averages the gradients of the module it
    wraps only, so each process steps that tensor with its own gradient; left to a human. It also finds a model trained by hand, with no optimizer (``for p in model.parameters(): p.data.add_(p.grad,
    alpha=-lr)``), and leaves its wrap to a human; a DDP wrap that runs only where CUDA is available in a program whose model goes to
    ``runtime.device()`` (the ImageNet example's ``if not torch.cuda.is_available(): ... elif
    args.distributed:``: a CPU launch trains unwrapped), and a DDP wrap that only runs under a distributed
    switch a torchrun launch leaves off: the
    ImageNet-style ``args.distributed = args.world_size > 1 or args.multiprocessing_distributed`` with
    ``if args.distributed: ... DistributedDataParallel ...``. Launched by torchrun with the default options,
    every process then takes the non-distributed path (no process group, no sampler, no DDP) and trains
    alone. Likewise a ``DistributedSampler`` chosen by such a switch (``DistributedSampler(ds) if
    args.distributed else None``) in a program whose model is wrapped whatever the switch says: every
    process would train on the whole data set.

    What the fix does: ``model = DistributedDataParallel(model, device_ids=runtime.device_ids())`` right
    after the last statement that builds, moves or loads the model in the block where it is created, or
    that reads the names of its parameters (parameter groups by name: wrapped, every name would start with
    ``module.``, directly or in a helper the model is handed to). A
    distributed switch becomes ``<its value> or runtime.world_size() > 1`` where it is computed (or,
    for a command-line flag, right after ``parse_args()``), so a torchrun launch takes the distributed
    path while a plain ``python`` run keeps the script's own choice.

    Fix safety: unsafe on its own. The wrap holds none of the model's own attributes and methods, and its
    ``state_dict()`` keys gain ``module.``: the model's uses must go through ``.module`` (DDP008, whose fix is
    unsafe), or ``model.configure_optimizers()`` fails on the wrapper even in a plain run. The migration
    applies both, as does ``lint --fix --unsafe-fixes``; a plain run is then unchanged, and under torchrun the
    script's distributed path runs, as it would with the flags that path expects. A switch whose value cannot
    be found gets a TODO comment.
    """

    code = "DDP011"
    name = "missing-ddp-wrap"
    fix_safety = FixSafety.UNSAFE
    phase = Phase.WRAPPING
    triggers = names.TRAINING_STEP_WORDS
    needs_names = (names.TRAINING_SCRIPT_NAMES,)
    examples = (
        Example(
            before="""\
import torch

model = Net().to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for x, y in loader:
    loss_fn(model(x), y).backward()
    optimizer.step()
""",
            after="""\
import torch
from ddp_migrate import runtime
from torch.nn.parallel import DistributedDataParallel

model = Net().to(device)
model = DistributedDataParallel(model, device_ids=runtime.device_ids())
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for x, y in loader:
    loss_fn(model(x), y).backward()
    optimizer.step()
""",
        ),
        # A frozen backbone: DDP synchronises what requires gradients when it wraps, so the wrap follows
        # the freeze (before it, the next step failed: no gradient for the frozen parameters).
        Example(
            before="""\
import torch

model = Net().to(device)
for param in model.backbone.parameters():
    param.requires_grad = False
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for x, y in loader:
    loss_fn(model(x), y).backward()
    optimizer.step()
""",
            after="""\
import torch
from ddp_migrate import runtime
from torch.nn.parallel import DistributedDataParallel

model = Net().to(device)
for param in model.backbone.parameters():
    param.requires_grad = False
model = DistributedDataParallel(model, device_ids=runtime.device_ids())
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for x, y in loader:
    loss_fn(model(x), y).backward()
    optimizer.step()
""",
        ),
        # Layers skipped at random (LayerDrop): their parameters get no gradient on some steps, which DDP
        # refuses at the next step unless it looks for unused parameters (a trial's crash).
        Example(
            before="""\
import torch
import torch.nn as nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList(nn.Linear(8, 8) for _ in range(4))

    def forward(self, x):
        for block in self.blocks:
            if self.training and torch.rand(()) < 0.2:
                continue
            x = block(x)
        return x


model = Net()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for x, y in loader:
    loss_fn(model(x), y).backward()
    optimizer.step()
""",
            after="""\
import torch
import torch.nn as nn
from ddp_migrate import runtime
from torch.nn.parallel import DistributedDataParallel


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList(nn.Linear(8, 8) for _ in range(4))

    def forward(self, x):
        for block in self.blocks:
            if self.training and torch.rand(()) < 0.2:
                continue
            x = block(x)
        return x


model = Net()
model = DistributedDataParallel(
    model, device_ids=runtime.device_ids(), find_unused_parameters=True
)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for x, y in loader:
    loss_fn(model(x), y).backward()
    optimizer.step()
""",
        ),
        # The parameters reach the optimizer through variables (a weight-decay split): the model still
        # trains, and used to be left unwrapped while its data was sharded (a trial's silent wrong). The
        # wrap follows the split by name (wrapped, every name would start with "module.").
        Example(
            before="""\
import torch

model = Net().to(device)
decay, no_decay = [], []
for name, param in model.named_parameters():
    (no_decay if name.endswith("bias") else decay).append(param)
groups = [{"params": decay, "weight_decay": 0.01}, {"params": no_decay, "weight_decay": 0.0}]
optimizer = torch.optim.AdamW(groups, lr=1e-3)
for x, y in loader:
    loss_fn(model(x), y).backward()
    optimizer.step()
""",
            after="""\
import torch
from ddp_migrate import runtime
from torch.nn.parallel import DistributedDataParallel

model = Net().to(device)
decay, no_decay = [], []
for name, param in model.named_parameters():
    (no_decay if name.endswith("bias") else decay).append(param)
model = DistributedDataParallel(model, device_ids=runtime.device_ids())
groups = [{"params": decay, "weight_decay": 0.01}, {"params": no_decay, "weight_decay": 0.0}]
optimizer = torch.optim.AdamW(groups, lr=1e-3)
for x, y in loader:
    loss_fn(model(x), y).backward()
    optimizer.step()
""",
        ),
        Example(
            before="""\
import torch

args = parser.parse_args()
args.distributed = args.world_size > 1 or args.multiprocessing_distributed
if args.distributed:
    model = torch.nn.parallel.DistributedDataParallel(model)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
loss.backward()
""",
            after="""\
import torch
from ddp_migrate import runtime

args = parser.parse_args()
args.distributed = (
    args.world_size > 1 or args.multiprocessing_distributed or runtime.world_size() > 1
)
if args.distributed:
    model = torch.nn.parallel.DistributedDataParallel(model)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
loss.backward()
""",
        ),
        Example(
            before="""\
import torch

args = parser.parse_args()
if args.distributed:
    model = torch.nn.parallel.DistributedDataParallel(model)
else:
    model = torch.nn.DataParallel(model)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
loss.backward()
""",
            after="""\
import torch
from ddp_migrate import runtime

args = parser.parse_args()
args.distributed = args.distributed or runtime.world_size() > 1
if args.distributed:
    model = torch.nn.parallel.DistributedDataParallel(model)
else:
    model = torch.nn.DataParallel(model)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
loss.backward()
""",
        ),
        # The switch is set where the group is set up, under a helper that reads the launch (timm's layout).
        Valid(
            """\
import os
import torch
import torch.distributed as dist

def is_distributed_env():
    return int(os.environ.get("WORLD_SIZE", 1)) > 1

def init_distributed(args):
    args.distributed = False
    if is_distributed_env():
        dist.init_process_group(backend="nccl")
        args.distributed = True

init_distributed(args)
if args.distributed:
    model = torch.nn.parallel.DistributedDataParallel(model)
loss.backward()
"""
        ),
        Valid(
            """\
import os
import torch

distributed = int(os.environ.get("WORLD_SIZE", 1)) > 1
if distributed:
    model = torch.nn.parallel.DistributedDataParallel(model)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
loss.backward()
"""
        ),
        Valid(
            """\
import torch
from torch.nn.parallel import DistributedDataParallel as DDP

model = DDP(Net().to(device))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
loss.backward()
"""
        ),
    )

    def _wrapped_names(self, analysis: ScriptAnalysis) -> set[str]:
        wrapped: set[str] = set()
        for wrap in analysis.wrap_calls:
            inner = wrapped_argument(wrap)
            if inner is not None and dotted_name(inner):
                wrapped.add(dotted_name(inner))  # type: ignore[arg-type]
            stmt = analysis.statement(wrap)
            if isinstance(stmt, cst.SimpleStatementLine) and isinstance(stmt.body[0], cst.Assign):
                target = dotted_name(stmt.body[0].targets[0].target)
                if target:
                    wrapped.add(target)
        return wrapped

    def _anchor(self, analysis: ScriptAnalysis, model: str) -> tuple[cst.BaseStatement | None, cst.BaseStatement | None]:
        """The statement after which the model is ready to be wrapped, and a statement before it that hands
        the model to an object and freezes part of it there (``FineTuner(model, model.backbone)``): the wrap
        must follow the freeze, yet the object keeps the unwrapped model (no place is right for it)."""
        statements = _statements_from_creation(analysis, model)
        if not statements:
            return None, None
        anchor, kept = statements[0], None
        spellings = [model]  # the model's name, and the names bound to it on the way (``model_without_ddp = model``)
        for stmt in statements[1:]:
            if analysis.reaches_backward(stmt):
                break
            spellings.extend(alias for alias in _plain_aliases(stmt, spellings) if alias not in spellings)
            frozen = frozen_models(analysis, stmt)
            handed = _hands_over(analysis, stmt, model)
            if frozen != set():  # the statement changes requires_grad (``None``: of models it cannot tell)
                if handed:
                    if frozen is not None and model.split(".")[0] not in frozen:
                        break  # ``Distiller(student, teacher)`` keeps the model it is given: wrap it before
                    kept = kept or stmt
                anchor = stmt  # DDP synchronises what requires gradients when it wraps: freeze first
                continue
            if handed:
                break  # ``trainer = Trainer(model, ...)`` keeps the model from here on: wrap it before
            if any(_reads_parameter_names(analysis, stmt, name) for name in spellings):
                # ``n.startswith("backbone.")`` over named_parameters() (of the model, or of an alias of it meant to
                # stay unwrapped: MAE's ``model_without_ddp``): wrapped, every name gains "module."
                anchor = stmt
                continue
            if isinstance(stmt, (cst.For, cst.While)):
                break
            if _sets_up(analysis, stmt, model) or _reassigns(stmt, model) or _runs_forward(stmt, model):
                anchor = stmt  # (a dry run builds lazy layers, ``nn.LazyLinear``: DDP refuses them unbuilt)
        return anchor, kept

    def _cases(self, analysis: ScriptAnalysis) -> Iterator[tuple[str, cst.BaseStatement | None, cst.BaseStatement | None]]:
        if not analysis.is_training_script or analysis.program_out_of_sight or analysis.program_distributed_by_a_library:
            return  # (read alone, its program too large: a module it imports may wrap the model; FSDP, DeepSpeed: theirs)
        wrapped = self._wrapped_names(analysis)
        themselves = analysis.models_training_themselves
        for model in analysis.trained_models:
            if model in themselves:
                continue  # (a review, see matches: a wrap would not see its forward)
            if _holds_parameters_only(analysis, model):
                continue  # ``nn.ParameterList`` beside the model: no forward to wrap (its parameters: DDP011's review)
            if model not in wrapped and not self._wrapped_elsewhere(analysis, model):
                anchor, kept = self._anchor(analysis, model)
                if anchor is not None and kept is None:
                    frozen = _frozen_at_the_wrap(analysis, model, anchor)
                    if frozen == "always":
                        continue  # every parameter frozen before it trains, and never unfrozen: the model trains nothing
                    if frozen == "unfrozen":
                        yield model, None, anchor  # (a review at the anchor: see matches)
                        continue
                yield model, None if kept is not None else anchor, kept  # no place is right: left to a human

    @staticmethod
    def _trained_through_items(analysis: ScriptAnalysis) -> Iterator[tuple[cst.Call, cst.BaseExpression]]:
        """Optimizers of a training script that wraps nothing, given the parameters of a model reached through
        an item (``nets["G"].parameters()`` of an ``nn.ModuleDict``, ``models[0].parameters()``), not a part
        of a model trained by name."""
        if not analysis.is_training_script or analysis.program_wrap_calls:
            return  # a program that wraps (``nets = {k: DDP(v) ...}``) is the wrap rules' to read
        trained = {name.split(".")[0] for name in analysis.trained_models}
        for optimizer in analysis.optimizer_calls:
            for node in walk(optimizer):
                if isinstance(node, cst.Call) and call_method_name(node) in ("parameters", "named_parameters"):
                    receiver = node.func.value  # type: ignore[union-attr]
                    root = (dotted_name(receiver.value) or "").split(".")[0] if isinstance(receiver, cst.Subscript) else None
                    if root and root not in trained:  # (``model.blocks[-1]`` of a trained model: a part of it)
                        yield optimizer, receiver
                        break

    @staticmethod
    def _wrapped_elsewhere(analysis: ScriptAnalysis, model: str) -> bool:
        """Whether the model object is wrapped under another name: the DDP tutorial builds ``model`` in one
        function and wraps ``self.model = DDP(model.to(gpu_id))`` in its ``Trainer`` (of any module); or the name holds a
        wrap made elsewhere (``model = build_model()`` of a factory that returns ``DataParallel(net)``)."""
        if any(_distributes_itself(analysis, origin) for site in analysis.model_training_sites.get(model, ()) for origin in analysis.name_origins(site, model)):
            return True  # (``FSDP(model)``, ``deepspeed.initialize(...)``: distributed by the library)
        if analysis.program_data_parallel_classes and any(
            type(origin) is cst.Call and analysis.builds_a_data_parallel_subclass(origin)  # type: ignore[arg-type]
            for site in analysis.model_training_sites.get(model, ())
            for origin in analysis.name_origins(site, model)
        ):
            return True  # (``MyDP(net)`` of ``class MyDP(nn.DataParallel)``: a wrap DDP001 leaves to a human)
        # (not a wrap of another entry script: it never runs with this one, though both build their models alike)
        wraps = {
            wrap for wrap in analysis.program_wrap_calls
            if (home := analysis.shared.analysis_of(wrap) or analysis) is analysis or not home.is_entry
        }
        wrapped: set[cst.CSTNode] = set()
        for wrap in wraps:  # (in any module: a Trainer of another module wraps the model it is handed)
            inner = wrapped_argument(wrap)
            if inner is not None:
                wrapped |= (analysis.shared.analysis_of(wrap) or analysis).origins(inner)
        for optimizer in analysis.optimizer_calls:
            for call in walk(optimizer):
                if isinstance(call, cst.Call) and call_method_name(call) in ("parameters", "named_parameters"):
                    receiver = call.func.value  # type: ignore[union-attr]
                    if dotted_name(receiver) == model and analysis.origins(receiver) & (wrapped | wraps):
                        return True
        # ``optimizer = create_optimizer(model, lr)`` (a program's factory of parameter groups), the model handed to
        # a Trainer that wraps it: the model's own value is the one a wrap takes.
        built = {o for o in wrapped if type(o) is cst.Call and o not in wraps}
        return bool(built) and any(
            analysis.name_origins(site, model) & built for site in analysis.model_training_sites.get(model, ())
        )

    def _switches(
        self, analysis: ScriptAnalysis
    ) -> Iterator[tuple[cst.If | cst.IfExp, str, list[cst.CSTNode], cst.Call | None, cst.Call]]:
        """Distributed switches a torchrun launch leaves off: the ``if`` that guards a DDP wrap (or a
        ``DistributedSampler``, :meth:`_switched_calls`), the
        switch's name, and where its value is set (assignments, or the ``parse_args()`` statement to add
        one after; an empty list when neither can be found), and the program's own process group setup where
        the switch is turned on with it (:func:`_set_up_with_the_group`: left to a human), and the call it keeps off."""
        if not analysis.is_training_script:
            return
        seen: set[str] = set()
        for switched in self._switched_calls(analysis):
            guarded = _switch_guard(analysis, switched)
            if guarded is None or guarded[1] in seen:
                continue
            guard, switch = guarded
            if rank_facts(analysis).mentions_rank(guard.test):
                continue
            seen.add(switch)
            assigns = _assignments_to(analysis, switch)
            if any(_follows_launch(analysis, a) for a in assigns):
                continue
            setup = _set_up_with_the_group(analysis, assigns)
            if setup is not None:
                # The program's own distributed mode (mmcv's ``--launcher``): turned on where the program also
                # sets up its process group, so the switch alone cannot be forced on (left to a human).
                yield guard, switch, [], setup, switched
                continue
            if assigns:
                yield guard, switch, list(assigns), None, switched
                continue
            # Set by a helper the switch's object is handed to (``init_distributed_mode(args)``): left to a
            # human unless the helper sets it from the launch (another module's code is not rewritten here).
            scope = analysis.enclosing_function(guard) or analysis.module
            helpers = analysis.assignments_in_callees(scope, switch)
            if helpers:
                if not any(_follows_launch(home, a) for home, a in helpers):
                    yield guard, switch, [], None, switched
                continue
            root = switch.split(".")[0]
            parsed = [
                a
                for a in _assignments_to(analysis, root)
                if isinstance(a.value, cst.Call) and call_method_name(a.value) in ("parse_args", "parse_known_args")
            ]
            yield guard, switch, [analysis.statement(parsed[0])] if root != switch and len(parsed) == 1 else [], None, switched

    def _switched_calls(self, analysis: ScriptAnalysis) -> list[cst.Call]:
        """The calls a distributed switch may keep off: the DDP wraps, and the ``DistributedSampler`` of a
        program whose model is wrapped whatever the switch says (``DistributedSampler(ds) if args.distributed
        else None`` beside an unconditional ``DataParallel``, which the migration makes DDP, or a model this
        rule wraps): left off, every process trains on the whole data set."""
        wraps = analysis.calls_to(names.DISTRIBUTED_DATA_PARALLEL)
        every_wrap = [*wraps, *analysis.calls_to(names.DATA_PARALLEL)]
        unswitched = any(_switch_guard(analysis, wrap) is None for wrap in every_wrap)
        if not unswitched and not any(anchor is not None for _, anchor, _ in self._cases(analysis)):
            return wraps
        samplers = [
            sampler
            for loader in analysis.loader_calls
            for sampler in analysis.sampler_origins(loader)
            if isinstance(sampler, cst.Call) and analysis.is_call_to(sampler, names.DISTRIBUTED_SAMPLER)
        ]
        return [*wraps, *samplers]

    def matches(self, analysis: ScriptAnalysis) -> Iterator[Match]:
        if analysis.is_training_script:
            wrapped = self._wrapped_names(analysis)
            for model, (call, method) in analysis.models_training_themselves.items():
                if model not in wrapped:
                    yield Match(call, _TRAINS_ITSELF.format(model=model, method=method.name.value), fixable=False)
        for model, anchor, kept in self._cases(analysis):
            if kept is not None and _frozen_at_the_wrap(analysis, model, kept) == "unfrozen":
                yield Match(kept, _FROZEN_THEN_UNFROZEN.format(model=model), fixable=False)
                continue
            node = anchor or analysis.model_training_sites[model][0]
            yield Match(node, f"{model} is trained but never wrapped in DistributedDataParallel", fixable=anchor is not None)
            if kept is not None:
                yield Match(kept, _kept_unwrapped(model), fixable=False)
            for alias in _aliases_left_unwrapped(analysis, model, anchor)[1] if anchor is not None else ():
                yield Match(anchor, _ALIAS_LEFT.format(alias=alias, model=model), fixable=False)
            for call, held in _forwards_past_the_wrap(analysis, model, anchor) if anchor is not None else ():
                yield Match(call, _FORWARD_PAST.format(held=held, model=model), fixable=False)
        for optimizer, receiver in self._trained_through_items(analysis):
            yield Match(
                optimizer,
                f"the optimizer trains {code_of(receiver)}, a model held in a container, which the migration cannot "
                "wrap: every process would train its own copy; wrap each trained model in DistributedDataParallel "
                f"where it is built (or hold it in a name: {code_of(receiver)} = DistributedDataParallel(...))",
                fixable=False,
            )
        if analysis.is_training_script and (analysis.program_wrap_calls or analysis.trained_models):
            for optimizer, tensor in analysis.free_parameters:
                name = _bound_name(analysis, tensor)
                yield Match(
                    optimizer,
                    f"the optimizer trains {name}, a parameter of no module that DistributedDataParallel wraps: its "
                    "gradient is never averaged across processes, so each process steps it with its own shard's "
                    "gradient and the copies drift apart; register it in the wrapped model (as an attribute of the "
                    "module, before the wrap) or average its gradient across processes (dist.all_reduce of its .grad, "
                    "divided by the world size) before each step",
                    fixable=False,
                )
        for guard, switch, sites, setup, switched in self._switches(analysis):
            if setup is not None:
                yield Match(guard, _own_distributed_mode(analysis, switch, setup), fixable=False)
                continue
            yield Match(guard, _switched_off(analysis, switched, switch), fixable=bool(sites))
        if analysis.is_training_script:
            wrapped = self._wrapped_names(analysis)
            trained = set(analysis.trained_models)
            for model, loop in analysis.hand_trained_models:
                if model not in wrapped and model not in trained:
                    yield Match(
                        loop,
                        f"{model} is trained by hand (its parameters updated from their gradients, no optimizer) and never "
                        "wrapped in DistributedDataParallel: every process trains its own copy; wrap it "
                        f"({model} = DistributedDataParallel({model}, device_ids=runtime.device_ids())) before its first "
                        "forward, and update the parameters of the wrapped model's .module",
                        fixable=False,
                    )
        if analysis.is_training_script:
            for built in analysis.models_built_in_calls:
                yield Match(
                    built,
                    f"`{code_of(built)}` is built in the call that hands it to the code that trains it, so it is never "
                    "wrapped in DistributedDataParallel: every process would train its own copy on its own shard; bind it "
                    "to a name and wrap it (model = DistributedDataParallel(model, device_ids=runtime.device_ids())) "
                    "before that call",
                    fixable=False,
                )
        for rebinding, model in _rebound_after_the_wrap(analysis):
            yield Match(
                rebinding,
                f"{model} is bound anew here, after its DistributedDataParallel wrap, and an optimizer trains it again: "
                "this model is not wrapped, so its gradients are never all-reduced and each process trains its own "
                f"copy on its own shard; wrap it again before it trains ({model} = DistributedDataParallel({model}, "
                "device_ids=runtime.device_ids()))",
                fixable=False,
            )
        backward = _trained_model_unfound(analysis)
        if backward is not None:
            yield Match(
                backward,
                f"`{code_of(backward)}` trains a model, but no optimizer the migration can read takes that model's "
                "parameters (one built where the migration cannot read it, from parameters it cannot trace), so nothing is "
                "wrapped in DistributedDataParallel: every process would train its own copy, each on the data its loader "
                "gives it; wrap the trained model (model = DistributedDataParallel(model, device_ids=runtime.device_ids())) "
                "before the training loop, and give its DataLoader a DistributedSampler where the migration added none",
                fixable=False,
            )
        for wrap, branch in _wrapped_on_one_branch(analysis):
            yield Match(
                wrap,
                f"DistributedDataParallel on one branch of an if only: {branch} sets the model up unwrapped, so a "
                "torchrun launch that takes it trains every process alone; wrap the model once after the "
                "if/elif/else (or on every branch)",
                fixable=False,
            )
        for wrap, model in _penalties_beside_unused_search(analysis):
            yield Match(wrap, _PENALTY_WITH_UNUSED.format(model=model), fixable=False)
        for wrap, test in _wrapped_only_with_cuda(analysis):
            yield Match(
                wrap,
                f"DistributedDataParallel only on a machine with CUDA (`{code_of(test)}` keeps a CPU run off this "
                "branch): the model goes to runtime.device(), so a torchrun launch on CPUs trains every process alone, "
                "unwrapped; wrap the model on the CPU path too (DistributedDataParallel(model) takes no device_ids there)",
                fixable=False,
            )

    def fix(self, analysis: ScriptAnalysis, options: Options) -> FixResult | None:
        edits = Edits(analysis)
        for model, anchor, _ in self._cases(analysis):
            if anchor is None:
                continue
            creations = _model_targets(analysis, model)
            skipped = skipped_in_some_steps(analysis, creations[0]) if creations else None
            call = ddp_call(analysis, edits, expression(model), [find_unused_parameters_argument()] if skipped else None)
            wrap: cst.BaseStatement = cst.SimpleStatementLine([cst.Assign([cst.AssignTarget(expression(model))], call)])
            sometimes_frozen = _frozen_at_the_wrap(analysis, model, anchor) == "sometimes"
            if sometimes_frozen:
                # DDP refuses a model none of whose parameters requires a gradient (frozen on some runs)
                wrap = cst.If(
                    test=expression(f"any(p.requires_grad for p in {model}.parameters())"),
                    body=cst.IndentedBlock([wrap]),
                )
            aliases, unsure = _aliases_left_unwrapped(analysis, model, anchor)
            edits.insert_after(anchor, wrap, *(statement(f"{alias} = {model}") for alias in aliases))
            for alias in unsure:
                edits.todo(anchor, _ALIAS_LEFT.format(alias=alias, model=model))
            for forward, held in _forwards_past_the_wrap(analysis, model, anchor):
                edits.todo(analysis.statement(forward), _FORWARD_PAST.format(held=held, model=model))
            message = f"{model} wrapped in DistributedDataParallel"
            if sometimes_frozen:
                message += " where any of its parameters trains (every one is frozen on some runs, and DDP refuses such a model)"
            if skipped is not None:
                message += f", with find_unused_parameters=True: {skipped.why}"
            if aliases:
                held = ", ".join(aliases)
                message += f"; {held}, bound to the same model before the wrap and used after it, now hold{'s' if len(aliases) == 1 else ''} the wrapped model too"
            edits.changes.append(Change(self.code, analysis.line(anchor) + 1, message))
        for guard, switch, sites, setup, _ in self._switches(analysis):
            if setup is not None:
                edits.todo(guard, _own_distributed_mode(analysis, switch, setup))
                continue
            if not sites:
                edits.todo(guard, f"make `{switch}` true under torchrun (runtime.world_size() > 1)")
                continue
            rt = runtime_name(analysis, edits)
            for site in sites:
                if isinstance(site, cst.Assign):
                    value = site.value
                    text = code_of(value).strip()
                    if isinstance(value, (cst.IfExp, cst.Lambda, cst.NamedExpr)):
                        text = f"({text})"
                    edits.replace(value, expression(f"{text} or {rt}.world_size() > 1"))
                else:
                    edits.insert_after(site, statement(f"{switch} = {switch} or {rt}.world_size() > 1"))
                edits.changes.append(Change(self.code, analysis.line(site), f"{switch} is also true under torchrun"))
        return edits.apply(analysis.module) if edits else None


#: The review line of a loss that reads the wrapped model's parameters beside DDP's search for unused ones.
_PENALTY_WITH_UNUSED = (
    "the loss reads {model}'s parameters outside its forward (a penalty over parameters(): EWC, an L2 anchor), and "
    "DDP looks for unused parameters: it marks the parameters the forward skipped as ready, the penalty's gradient "
    "marks them again, and the first such backward fails (RuntimeError: marked as ready twice); compute the penalty "
    "in forward(), or add its gradient to .grad after backward()"
)


def _penalties_beside_unused_search(analysis: ScriptAnalysis) -> Iterator[tuple[cst.Call, str]]:
    """DDP wraps with ``find_unused_parameters=True`` of a model whose ``parameters()`` / ``named_parameters()`` the
    program reads into a training loss (a regulariser over the weights, written beside the forward)."""
    read: list[cst.Call] | None = None
    for wrap in analysis.calls_to(names.DISTRIBUTED_DATA_PARALLEL):
        flag = keyword_argument(wrap, "find_unused_parameters")
        statement = analysis.parent(wrap)
        if flag is None or not is_true(flag.value) or not isinstance(statement, cst.Assign) or len(statement.targets) != 1:
            continue
        model = dotted_name(statement.targets[0].target)
        if model is None:
            continue
        if read is None:  # (the ``parameters()`` calls a loss is computed from, in any module)
            read = [c for c in calls_feeding_the_losses(analysis) if call_method_name(c) in ("parameters", "named_parameters") and type(c.func) is cst.Attribute]
        if any(wrap in (analysis.shared.analysis_of(call) or analysis).origins(call.func.value) for call in read):  # type: ignore[attr-defined]
            yield wrap, model


#: The review line of a model whose parameters are all frozen where it would be wrapped, and unfrozen later.
_FROZEN_THEN_UNFROZEN = (
    "every parameter of {model} is frozen here, where it would be wrapped in DistributedDataParallel, and "
    "unfrozen later: DDP refuses to wrap a model none of whose parameters requires a gradient (RuntimeError), and "
    "left unwrapped, once unfrozen it would train without averaged gradients, each process its own copy; wrap it "
    "(model = DistributedDataParallel(model, device_ids=runtime.device_ids())) after it is unfrozen, or keep it "
    "trainable and leave its parameters out of the optimizer until then"
)


#: Containers of parameters that run no forward (``log_vars = nn.ParameterList([...])``): DDP cannot wrap them usefully.
_PARAMETER_CONTAINERS = frozenset({"torch.nn.ParameterList", "torch.nn.ParameterDict"})


def _holds_parameters_only(analysis: ScriptAnalysis, model: str) -> bool:
    """Whether every value the name is bound to is an ``nn.ParameterList`` / ``nn.ParameterDict`` (no forward:
    a wrap would hide it behind ``.module`` and all-reduce nothing)."""
    values = [analysis.parent(analysis.parent(target)) for target in _model_targets(analysis, model)]
    built = [
        statement.value for statement in values
        if isinstance(statement, cst.Assign) and isinstance(statement.value, cst.Call)
    ]
    return bool(built) and len(built) == len(values) and all(analysis.is_call_to(call, _PARAMETER_CONTAINERS) for call in built)


def _frozen_at_the_wrap(analysis: ScriptAnalysis, model: str, anchor: cst.BaseStatement) -> str | None:
    """How the model's parameters stand where the migration would wrap it (after ``anchor``), when a statement
    from its creation up to the anchor freezes every one of them: ``"always"`` (on every path, and never
    unfrozen: the model trains nothing), ``"sometimes"`` (under a test, never unfrozen: wrapped where any
    parameter trains), ``"unfrozen"`` (unfrozen later: no place is right); ``None`` where none does."""
    statements = _statements_from_creation(analysis, model)
    if anchor not in statements:
        return None
    span = statements[: statements.index(anchor) + 1]
    freezes = [
        (stmt, change)
        for stmt in span
        for change in requires_grad_changes(analysis)
        if analysis.is_inside(change.node, stmt) and freezes_every_parameter(analysis, change, model)
    ]
    if not freezes:
        return None
    if unfrozen_after(analysis, freezes[0][1].node, model):
        return "unfrozen"
    always = any(_runs_whenever(analysis, change.statement, stmt) for stmt, change in freezes)
    return "always" if always else "sometimes"


def _statements_from_creation(analysis: ScriptAnalysis, model: str) -> list[cst.BaseStatement]:
    """The statements of the block that creates the model, from its first creation (outside the branches it sits
    in) on: where its wrap may go. Empty where the model is created in no block the migration can write in."""
    creations = [analysis.statement(target) for target in _model_targets(analysis, model)]
    if not creations:
        return []
    first = analysis.outside_its_branches(creations[0])
    block = analysis.parent(first)
    body = list(statements_of(block)) if isinstance(block, (cst.IndentedBlock, cst.Module)) else []
    return body[body.index(first) :] if first in body else []


def _runs_whenever(analysis: ScriptAnalysis, node: cst.CSTNode, statement: cst.BaseStatement) -> bool:
    """Whether the node runs whenever the statement around it does: nothing between them but the loop over
    the model's parameters (no test, no ``try``, no ``with``, no ``while``)."""
    if node is statement:
        return True
    for ancestor in analysis.ancestors(node):
        if not isinstance(ancestor, (cst.For, cst.IndentedBlock, cst.SimpleStatementLine)):
            return False
        if ancestor is statement:
            return True
    return False


#: The review line of a name that may still hold the unwrapped model after the wrap and is run or handed on.
_ALIAS_LEFT = (
    "{alias} holds the same model as {model} before the wrap, and is bound elsewhere too: where it still holds "
    "the unwrapped model after the wrap and runs its forward (called, or handed to a call), DDP never sees that "
    "step and each process trains alone; use {model} there, or bind {alias} after the wrap"
)


#: The review line of a training forward run through a holder of the model that the wrap does not reach.
_FORWARD_PAST = (
    "`{held}(...)` runs the model of `{model}` in a training step, but {held} holds it apart from {model} (taken "
    "before the wrap): its forward bypasses DDP and each process trains alone; run {model}(...) there, or give "
    "{held} the wrapped model"
)


def _forwards_past_the_wrap(analysis: ScriptAnalysis, model: str, anchor: cst.BaseStatement) -> list[tuple[cst.Call, str]]:
    """Calls in the training steps of the program's modules that run the model through another holder than
    the wrapped name: ``self.net(x)`` of ``self.net = self.model``, ``state["model"](x)`` of a dict filled before
    the wrap. (Names the fix binds to the wrapper after it are no such holders.)"""
    targets = _model_targets(analysis, model)
    if not targets:
        return []
    built = {o for o in analysis.origins(targets[0]) if type(o) is cst.Call}
    if not built:
        return []
    rebound = set(_aliases_left_unwrapped(analysis, model, anchor)[0])
    found: list[tuple[cst.Call, str]] = []
    for call in analysis.calls:  # (this module's: a holder in another module is handed the model where it is built)
        func = call.func
        held = dotted_name(func) or (item_name(func) if type(func) is cst.Subscript else None)
        if held is None or held == model or held in rebound or held.split(".")[0] == model.split(".")[0] and "." not in model:
            continue
        origins = analysis.origins(func)
        if not origins or not origins <= built:
            continue  # (a copy, another model, or a holder that may take other values too)
        base = dotted_name(func.value) if type(func) is cst.Subscript else held  # type: ignore[attr-defined]
        if base is None or not _took_before(analysis, base, model, anchor):
            continue  # (a holder filled after the wrap, or elsewhere: ``Trainer(model)`` gets the wrapper)
        loop = analysis.nearest_loop(call)
        if loop is not None and analysis.reaches_backward(loop):
            found.append((call, code_of(func)))
    return found


def _took_before(analysis: ScriptAnalysis, holder: str, model: str, anchor: cst.BaseStatement) -> bool:
    """Whether, in the wrap's scope and before it, a statement assigns ``holder`` a value that names the model
    (``self.net = self.model``, ``state = {"model": model}``)."""
    scope = analysis.scope_of(anchor)
    for stmt in analysis.nodes_below(scope):
        if type(stmt) is not cst.Assign or analysis.scope_of(stmt) is not scope or not analysis.comes_before(stmt, anchor):
            continue
        if not any(dotted_name(t.target) == holder for t in stmt.targets):  # type: ignore[attr-defined]
            continue
        if any(type(n) in (cst.Name, cst.Attribute) and dotted_name(n) == model for n in analysis.nodes_below(stmt.value)):  # type: ignore[attr-defined]
            return True
    return False


def _aliases_left_unwrapped(analysis: ScriptAnalysis, model: str, anchor: cst.BaseStatement) -> tuple[list[str], list[str]]:
    """Names bound to the model's object before the wrap (``net = model`` between its creation and the wrap,
    or ``model = net`` that creates it) and run after it (called, or handed to a call: ``train(net, ...)``):
    they would keep the unwrapped model, and a forward through one of them bypasses DDP, each process
    training alone. Those bound once, in the wrap's own block (rebound to the wrapper after it), and the
    others (bound again elsewhere, or under a condition: left to a human)."""
    if "." in model:
        return [], []
    scope = analysis.scope_of(anchor)
    candidates: list[str] = []
    for stmt in analysis.nodes_below(scope):
        if type(stmt) is not cst.Assign or analysis.scope_of(stmt) is not scope or analysis.comes_before(anchor, stmt):
            continue
        targets = [dotted_name(t.target) for t in stmt.targets]  # type: ignore[attr-defined]
        value = dotted_name(stmt.value) if type(stmt.value) is cst.Name else None  # type: ignore[attr-defined]
        if value == model:
            found = [t for t in targets if t and t != model and "." not in t]
        elif value is not None and model in targets:
            found = [value]
        else:
            continue
        candidates.extend(name for name in found if name not in candidates)
    clean: list[str] = []
    unsure: list[str] = []
    block = analysis.parent(anchor)
    for name in candidates:
        if not _run_after(analysis, scope, name, anchor):
            continue  # (``model_without_ddp = model`` read for its state only: the model itself, as meant)
        bindings = [node for node in analysis.nodes_below(scope) if type(node) is cst.Name and node.value == name and _binds(analysis, node)]  # type: ignore[attr-defined]
        statements = {analysis.statement(node) for node in bindings}
        only = next(iter(statements)) if len(statements) == 1 else None
        if only is not None and analysis.parent(only) is block and analysis.comes_before(only, anchor):
            clean.append(name)
        else:
            unsure.append(name)
    return clean, unsure


def _binds(analysis: ScriptAnalysis, name: cst.Name) -> bool:
    """Whether a name node is bound where it stands (an assignment's target, a loop's or a ``with``'s, a
    parameter), through tuple targets."""
    node: cst.CSTNode = name
    parent = analysis.parent(node)
    while type(parent) in (cst.Element, cst.StarredElement, cst.Tuple, cst.List):
        node, parent = parent, analysis.parent(parent)
    if type(parent) in (cst.AssignTarget, cst.AsName, cst.Param):
        return True
    if type(parent) in (cst.AugAssign, cst.AnnAssign):
        return parent.target is node  # type: ignore[attr-defined]
    if type(parent) in (cst.For, cst.CompFor):
        return parent.target is node  # type: ignore[attr-defined]
    return False


def _run_after(analysis: ScriptAnalysis, scope: cst.CSTNode, name: str, anchor: cst.BaseStatement) -> bool:
    """Whether the scope calls the name, or hands it to a call, after the statement."""
    for node in analysis.nodes_below(scope):
        if type(node) is not cst.Name or node.value != name or not analysis.comes_before(anchor, node) or analysis.is_inside(node, anchor):  # type: ignore[attr-defined]
            continue
        parent = analysis.parent(node)
        if (type(parent) is cst.Call and parent.func is node) or type(parent) is cst.Arg:  # type: ignore[attr-defined]
            return True
    return False


def _runs_forward(stmt: cst.BaseStatement, model: str) -> bool:
    """Whether a simple statement, or a ``with`` block (``with torch.no_grad(): model(dummy)``), calls the
    model (``model(torch.zeros(1, 7))``, ``out = model(x)``)."""
    if not isinstance(stmt, (cst.SimpleStatementLine, cst.With)):
        return False
    return any(type(node) is cst.Call and dotted_name(node.func) == model for node in walk(stmt))  # type: ignore[attr-defined]


def _trained_model_unfound(analysis: ScriptAnalysis) -> cst.Call | None:
    """The program's first ``loss.backward()`` (in this module) where the program trains a model the analysis
    cannot name: the program steps something it builds that is no ``torch.optim`` optimizer or scheduler, or an
    optimizer whose origin the analysis cannot trace (a hook built from a config steps ``runner.optimizer``), but
    nothing is wrapped, no optimizer of the program takes a model's parameters in a way it reads, no model is
    trained by hand, and no library that distributes models itself is used. ``None`` elsewhere."""
    if not analysis.is_training_script or analysis.program_wrap_calls:
        return None
    shared = analysis.shared
    homes = [(value, shared.analysis_of(value) or analysis) for value in shared.stepped_values() if type(value) is cst.Call and value.args]  # type: ignore[attr-defined]
    # (``runner.optimizer.step()`` in a hook that a registry builds from a config: an optimizer of no traced origin)
    untraced = any(
        not module.origins(call.func.value) and _called_in_the_program(module, call)  # type: ignore[attr-defined]
        for module in shared.analyses
        for call in module.optimizer_step_calls
    )
    if not untraced and not any(value not in home.torch_optimizer_calls and not home.is_scheduler_construction(value) for value, home in homes):  # type: ignore[arg-type]
        # Nothing stepped but what the program is handed (a library's ``fit(model, optimizer)``) or torch
        # optimizers of tensors that belong to no model (an image optimised by style transfer).
        return None
    if any(a.trained_models or a.hand_trained_models for a in shared.analyses):
        return None
    first: cst.Call | None = None
    for module in shared.analyses:
        for call in module.backward_calls:
            if call in module.backward_calls_out_of_sight or not any(arg.keyword is None for arg in call.args):  # (``accelerator.backward(loss)``: not a loss's own)
                first = call
                break
        if first is not None:
            break
    if first is None or not analysis.owns(first):
        return None
    if analysis.program_distributed_by_a_library:
        return None
    return first


def _rebound_after_the_wrap(analysis: ScriptAnalysis) -> Iterator[tuple[cst.BaseStatement, str]]:
    """Assignments that bind a wrapped model's name anew after its wrap to something that is no wrap (``model =
    torch.load("stage1.pt")`` of a second training stage, ``model = Net()``), followed in the same scope by an
    optimizer that trains it: the model that trains from there on is not wrapped (unless the program wraps it
    again after the new binding)."""
    if not analysis.is_training_script:
        return
    sites = analysis.model_training_sites
    reported: set[cst.CSTNode] = set()
    for wrap in analysis.wrap_calls:
        statement = analysis.statement(wrap)
        small = statement.body[0] if isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1 else None
        if not isinstance(small, cst.Assign) or len(small.targets) != 1:
            continue
        model = dotted_name(small.targets[0].target)
        if model is None or model not in sites:
            continue
        scope = analysis.scope_of(wrap)
        later_wraps = [w for w in analysis.wrap_calls if w is not wrap and analysis.comes_before(wrap, w)]
        for assign in analysis.assignments:
            if not isinstance(assign, cst.Assign) or analysis.scope_of(assign) is not scope or not analysis.comes_before(wrap, assign):
                continue
            if not any(dotted_name(t.target) == model for t in assign.targets) or any(type(n) is cst.Call and n in analysis.wrap_calls for n in walk(assign.value)):
                continue
            if any(type(n) in (cst.Name, cst.Attribute) and dotted_name(n) == model for n in walk(assign.value)):
                continue  # (``model = model.module``, ``model = model.to(device)``: the same object)
            if _on_other_branches(analysis, wrap, assign):
                continue  # (``if ...: ref = DDP(model) else: ref = ref_init_fn(model)``: one or the other)
            trained_again = any(analysis.comes_before(assign, site) for site in sites[model])
            rewrapped = any(analysis.comes_before(assign, w) for w in later_wraps)
            statement = analysis.statement(assign)
            if trained_again and not rewrapped and statement not in reported:
                reported.add(statement)
                yield statement, model


def _on_other_branches(analysis: ScriptAnalysis, first: cst.CSTNode, second: cst.CSTNode) -> bool:
    """Whether two nodes sit on different branches of one ``if``/``elif``/``else`` (only one of them runs)."""
    for ancestor in analysis.ancestors(first):
        if type(ancestor) is cst.If and analysis.is_inside(second, ancestor):
            first_in_body = analysis.is_inside(first, ancestor.body)  # type: ignore[attr-defined]
            second_in_body = analysis.is_inside(second, ancestor.body)  # type: ignore[attr-defined]
            if first_in_body != second_in_body and not analysis.is_inside(second, ancestor.test):  # type: ignore[attr-defined]
                return True
    return False


def _called_in_the_program(analysis: ScriptAnalysis, node: cst.CSTNode) -> bool:
    """Whether the function around a node runs in the program: the module's own code, a function the program
    calls, or a method called by its name somewhere in it (``hook.after_train_iter(self)`` on hooks a registry
    built); not a library's ``fit(model, optimizer, loader)`` linted on its own, which nothing calls."""
    function = analysis.enclosing_function(node)
    if function is None or analysis.callers_in_program(function):
        return True
    name = function.name.value
    return any(call_method_name(call) == name for module in analysis.shared.analyses for call in module.calls)


def _distributes_itself(analysis: ScriptAnalysis, node: cst.CSTNode) -> bool:
    """Whether a node is a call of a library that distributes a model itself (:data:`names.SELF_DISTRIBUTING`)."""
    if type(node) is not cst.Call:
        return False
    home = analysis.shared.analysis_of(node) or analysis
    return home.calls_a_self_distributing_library(node)  # type: ignore[arg-type]


def _wrapped_on_one_branch(analysis: ScriptAnalysis) -> Iterator[tuple[cst.Call, str]]:
    """The DDP wraps assigned to a model in one branch of an ``if``/``elif`` chain whose other branch assigns
    the same model without wrapping it (the ImageNet example's ``if args.gpu is not None: model =
    model.cuda(args.gpu) elif ...: model = DataParallel(model).cuda()``), with that other branch in words.
    A distributed switch (``if args.distributed:``) is the switches' to read, and a CUDA test the CPU path's."""
    for wrap in analysis.calls_to(names.DISTRIBUTED_DATA_PARALLEL):
        parent = analysis.parent(wrap)
        if not (isinstance(parent, cst.Assign) and len(parent.targets) == 1) or _switch_guard(analysis, wrap) is not None:
            continue
        target = dotted_name(parent.targets[0].target)
        child: cst.CSTNode = wrap
        for ancestor in analysis.ancestors(wrap):
            if isinstance(ancestor, (cst.FunctionDef, cst.ClassDef)):
                break
            if isinstance(ancestor, cst.If) and child is not ancestor.test:
                if _reads_the_launch(analysis, ancestor.test):
                    break  # ``if args.local_rank != -1:``: the launch decides, and torchrun takes the wrap
                others: list[tuple[cst.BaseExpression | None, cst.CSTNode]] = []
                if child is not ancestor.body:
                    others.append((ancestor.test, ancestor.body))
                other = ancestor.orelse if child is ancestor.body else None
                while other is not None:  # the rest of the chain: ``elif`` tests and the ``else``
                    if isinstance(other, cst.If):
                        others.append((other.test, other.body))
                        other = other.orelse
                    else:
                        others.append((None, other.body))  # type: ignore[attr-defined]
                        other = None
                inner = dotted_name(wrapped_argument(wrap))
                for test, body in others:
                    if _binds_unwrapped(analysis, body, {target, inner}) and (test is None or not _is_cuda_test(analysis, test)):
                        yield wrap, "the `else` branch" if test is None else f"the branch of `{code_of(test)}`"
                        break
                else:
                    child = ancestor
                    continue
                break
            child = ancestor


def _reads_the_launch(analysis: ScriptAnalysis, test: cst.BaseExpression) -> bool:
    """Whether a test reads what the launcher sets: the ``--local_rank`` option ``torch.distributed.launch``
    filled (``args.local_rank != -1``) or the launch's environment (``"WORLD_SIZE" in os.environ``)."""
    dests = legacy_facts(analysis).local_rank_dests
    for node in walk(test):
        name = dotted_name(node) if isinstance(node, (cst.Name, cst.Attribute)) else None
        if name is not None and (name.rsplit(".", 1)[-1] in dests or name.startswith("os.environ")):
            return True
    return False


def _binds_unwrapped(analysis: ScriptAnalysis, block: cst.CSTNode, models: set[str | None]) -> bool:
    """Whether a branch wraps nothing and assigns the model (the wrap's target or the model it wraps) the
    model itself, moved or cast (``model = model.cuda(args.gpu)``): a value of unknown make
    (``ref_model = ref_init_fn(model)``) may be a wrap."""
    target = next(iter(sorted(m for m in models if m)), None)
    if target is None or any(isinstance(n, cst.Call) and analysis.is_call_to(n, names.MODEL_WRAPPERS) for n in walk(block)):
        return False
    for node in walk(block):
        if isinstance(node, cst.Assign) and any(dotted_name(t.target) in models for t in node.targets):
            if dotted_name(under_self_returning_calls(node.value)) in models:
                return True
    return False


def _is_cuda_test(analysis: ScriptAnalysis, test: cst.BaseExpression) -> bool:
    """``torch.cuda.is_available()`` or its negation (``not torch.cuda.is_available()``): the test that keeps a
    CPU run off a branch (:func:`_wrapped_only_with_cuda`)."""
    negated = isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not)
    inner = test.expression if negated else test  # type: ignore[attr-defined]
    return isinstance(inner, cst.Call) and analysis.is_call_to(inner, names.CUDA_IS_AVAILABLE)


def _wrapped_only_with_cuda(analysis: ScriptAnalysis) -> Iterator[tuple[cst.Call, cst.BaseExpression]]:
    """The DDP wraps of a program that runs on ``runtime.device()`` (the CPU without CUDA) that run only where
    CUDA is available: in the body of ``if torch.cuda.is_available():``, or in the ``else``/``elif`` of ``if not
    torch.cuda.is_available():`` (the ImageNet example's order), with the test that keeps them off a CPU run."""
    if not analysis.calls_to(frozenset({names.runtime("device")})):
        return
    for wrap in analysis.calls_to(names.DISTRIBUTED_DATA_PARALLEL):
        child: cst.CSTNode = wrap
        for ancestor in analysis.ancestors(wrap):
            if isinstance(ancestor, (cst.FunctionDef, cst.ClassDef)):
                break
            if isinstance(ancestor, cst.If) and child is not ancestor.test:
                test = ancestor.test
                negated = isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not)
                if _is_cuda_test(analysis, test):
                    in_body = child is ancestor.body
                    cpu_path = ancestor.orelse if in_body else ancestor.body
                    wraps_there = cpu_path is not None and any(
                        isinstance(n, cst.Call) and analysis.is_call_to(n, names.DISTRIBUTED_DATA_PARALLEL) for n in walk(cpu_path)
                    )
                    # (a CPU path that stops, ``else: raise RuntimeError("needs a GPU")``, trains nothing alone)
                    stops = cpu_path is not None and leaves_early(cpu_path)
                    if in_body != negated and not wraps_there and not stops:
                        yield wrap, test
                        break
            child = ancestor


def _bound_name(analysis: ScriptAnalysis, call: cst.Call) -> str:
    """The name a call's value is assigned to (``log_temperature = nn.Parameter(...)``), else its code."""
    home = analysis.shared.analysis_of(call) or analysis
    assign = home.parent(call)
    if isinstance(assign, cst.Assign):
        name = dotted_name(assign.targets[0].target)
        if name is not None:
            return f"`{name}`"
    return f"`{code_of(call)}`"


def _switch_guard(analysis: ScriptAnalysis, call: cst.Call) -> tuple[cst.If | cst.IfExp, str] | None:
    """The innermost ``if`` (statement or expression) whose test needs a switch (:func:`_is_switch`) on for the
    call to run, with the switch's name: ``if args.distributed:``, the ``else`` of ``if not args.distributed:``
    (``None if not args.distributed else DistributedSampler(ds)``), ``if args.distributed and cuda:``."""
    for node in analysis.ancestors(call):
        if not isinstance(node, (cst.If, cst.IfExp)):
            continue
        if analysis.is_inside(call, node.body):
            switch = _switch_needed(node.test, True)
        elif node.orelse is not None and analysis.is_inside(call, node.orelse):
            switch = _switch_needed(node.test, False)
        else:
            continue
        if switch is not None:
            return node, switch
    return None


def _switch_needed(test: cst.BaseExpression, value: bool) -> str | None:
    """A switch that must be on for the test to have this value (``args.distributed`` for ``not
    args.distributed`` being false, or for ``args.distributed and x`` being true)."""
    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        return _switch_needed(test.expression, not value)
    if isinstance(test, cst.BooleanOperation) and isinstance(test.operator, cst.And if value else cst.Or):
        return _switch_needed(test.left, value) or _switch_needed(test.right, value)
    return dotted_name(test) if value and _is_switch(test) else None


def _switched_off(analysis: ScriptAnalysis, call: cst.Call, switch: str) -> str:
    """What a switch a torchrun launch leaves off keeps from running, and what follows."""
    if analysis.is_call_to(call, names.DISTRIBUTED_DATA_PARALLEL):
        return f"DistributedDataParallel only under `{switch}`, which a torchrun launch leaves off: every process would train alone"
    return (
        f"DistributedSampler only under `{switch}`, which a torchrun launch leaves off while the model is wrapped "
        "anyway: every process would train on the whole data set"
    )


def _is_switch(test: cst.BaseExpression) -> bool:
    """``args.distributed``, ``use_ddp``: a name that says it switches distributed training on."""
    name = dotted_name(test)
    last = name.rsplit(".", 1)[-1].lower() if name else ""
    return "dist" in last or "ddp" in last


def _follows_launch(analysis: ScriptAnalysis, assign: cst.Assign) -> bool:
    """Whether an assignment of a switch follows the launch: its value, or the test of an ``if`` around it,
    reads the launcher's environment or the process group (``"RANK" in os.environ``, ``world_size > 1``)."""
    branches = [a for a in analysis.ancestors(assign) if isinstance(a, cst.If)]
    tests = [a.test for a in branches]
    if any(any(word in code_of(node) for word in LAUNCH_AWARE) for node in (assign.value, *tests)):
        return True
    if counts_the_processes(analysis, assign.value):  # ``args.distributed = args.world_size > 1``
        return True
    # Set where the group is set up (``if is_distributed_env(): init_process_group(...); args.distributed =
    # True``), or under a test that calls a helper of the program reading the launch.
    if any(analysis.is_inside(setup, branch.body) for branch in branches for setup in analysis.process_group_setups):
        return True
    helpers = {analysis.call_target(n) for test in tests for n in walk(test) if isinstance(n, cst.Call)} - {None}
    return any(any(word in code_of(helper) for word in LAUNCH_AWARE) for helper in helpers)  # type: ignore[arg-type]


def _set_up_with_the_group(analysis: ScriptAnalysis, assigns: list[cst.Assign]) -> cst.Call | None:
    """The program's own process group setup (``init_process_group``, or a call of a helper that makes it:
    mmcv's ``init_dist(launcher)``) that runs in the same block as one of the switch's assignments, under a
    condition (``else: distributed = True; dist.init_process_group(...)``): the switch is the program's
    distributed mode, chosen by its own option."""
    for assign in assigns:
        block = analysis.parent(analysis.statement(assign))
        if not isinstance(block, cst.IndentedBlock) or not any(isinstance(a, cst.If) for a in analysis.ancestors(block)):
            continue
        for stmt in block.body:
            for call in (n for n in walk(stmt) if type(n) is cst.Call):
                if analysis.is_call_to(call, names.INIT_PROCESS_GROUP):  # type: ignore[arg-type]
                    return call  # type: ignore[return-value]
                # ``init_dist(args.launcher)`` of a helper module (mmcv), which sets up the group in its own calls
                target = analysis.call_target(call)  # type: ignore[arg-type]
                home = analysis.shared.analysis_of(target) if target is not None else None
                if target is not None and home is not None and home.reaches(target, home.calls_to(names.INIT_PROCESS_GROUP)):
                    return call  # type: ignore[return-value]
    return None


def _own_distributed_mode(analysis: ScriptAnalysis, switch: str, setup: cst.Call) -> str:
    """The review of a switch the program turns on together with its own process group setup."""
    test = next(a for a in analysis.ancestors(setup) if isinstance(a, cst.If))
    return (
        f"DistributedDataParallel only under `{switch}`, which the program turns on where it also sets up its process "
        f"group (line {analysis.line(setup)}, under `if {code_of(test.test).strip()}:`): a plain torchrun launch leaves both "
        "off and every process trains alone; launch torchrun with the program's own option that takes that branch (as "
        "it was launched before), or make that test true under torchrun (runtime.world_size() > 1)"
    )


def _assignments_to(analysis: ScriptAnalysis, name: str) -> list[cst.Assign]:
    found = []
    for stmt_node in analysis.assignments:
        if isinstance(stmt_node, cst.Assign) and any(dotted_name(t.target) == name for t in stmt_node.targets):
            found.append(stmt_node)
    return found


def _model_targets(analysis: ScriptAnalysis, name: str) -> list[cst.BaseExpression]:
    """Where a model's name is assigned: the target itself, or its element of a tuple target (``netG, netD =
    Generator(), Discriminator()``), in source order; not a placeholder (``model = None`` at the top of a
    module whose function builds the model under ``global model``). Only in the scopes the name is trained in
    (and the module's top level, for a global it reads): another function's local of the same name (minGPT's
    ``m = self.mlp`` in ``__init__`` beside ``for mn, m in self.named_modules()`` in ``configure_optimizers``) is
    another value."""
    scopes: set[cst.CSTNode] = set()
    for site in analysis.model_training_sites.get(name, ()):
        # the site's scope, and the functions around it a closure reads the name from (``def make_optimizer():
        # return SGD(model.parameters())`` inside ``main()``)
        scope: cst.CSTNode | None = analysis.scope_of(site)
        while scope is not None:
            scopes.add(scope)
            if not isinstance(scope, cst.FunctionDef) or analysis.binds_locally(scope, name):
                break
            scope = analysis.enclosing_function(scope) or analysis.module
    plain = "." not in name and not name.startswith("self")
    found: list[cst.BaseExpression] = []
    for stmt_node in analysis.assignments:
        if not isinstance(stmt_node, cst.Assign) or is_none(stmt_node.value):
            continue
        scope = analysis.scope_of(stmt_node)
        if plain and scopes and scope not in scopes and not (
            scope is analysis.module and all(isinstance(s, cst.Module) or not analysis.binds_locally(s, name) for s in scopes)  # type: ignore[arg-type]
        ):
            continue
        for target in stmt_node.targets:
            elements = [e.value for e in target.target.elements] if isinstance(target.target, (cst.Tuple, cst.List)) else [target.target]
            found.extend(element for element in elements if dotted_name(element) == name)
    return found


def _reassigns(stmt: cst.BaseStatement, model: str) -> bool:
    """Whether a compound statement may bind the model's name anew (``if resume: model =
    torch.load(path)``): a wrap before it would be replaced by an unwrapped model."""
    if isinstance(stmt, (cst.SimpleStatementLine, cst.FunctionDef, cst.ClassDef)):
        return False  # (a definition binds nothing of the model when it runs)
    return any(
        isinstance(node, cst.Assign) and any(dotted_name(t.target) == model for t in node.targets)
        for node in walk(stmt)
        if not isinstance(node, (cst.FunctionDef, cst.ClassDef))
    )


def _sets_up(analysis: ScriptAnalysis, stmt: cst.BaseStatement, model: str) -> bool:
    """Whether the statement (or one inside an ``if``, ``with`` or ``try`` of it) still builds the model:
    binds its name, moves or loads it (:data:`SETUP_METHODS`), assigns one of its parts (``model.decoder.weight
    = model.encoder.weight``, tying weights), or calls a method that changes what it holds
    (:data:`STRUCTURE_METHODS`, ``model.get_encoder().requires_grad_(False)``, or a method of the program that
    stores something on ``self``): DDP must wrap the model as it will train."""
    if isinstance(stmt, (cst.For, cst.While, cst.FunctionDef, cst.ClassDef)):
        return False
    if not isinstance(stmt, cst.SimpleStatementLine):
        return any(
            isinstance(inner, cst.SimpleStatementLine) and _sets_up(analysis, inner, model)
            for inner in walk(stmt)
            if not isinstance(inner, (cst.For, cst.While, cst.FunctionDef, cst.ClassDef))
        ) and not any(isinstance(n, (cst.For, cst.While)) for n in walk(stmt))
    if len(stmt.body) != 1:
        return False
    small = stmt.body[0]
    if isinstance(small, cst.Assign):
        return any((name := dotted_name(t.target)) == model or (name or "").startswith(model + ".") for t in small.targets)
    if isinstance(small, cst.Expr) and isinstance(small.value, cst.Call):
        call = small.value
        method = call_method_name(call)
        root = _chain_root(call.func.value if isinstance(call.func, cst.Attribute) else call.func) or ""
        if root != model and not root.startswith(model + "."):
            return False
        if method in SETUP_METHODS or method in STRUCTURE_METHODS or method == "requires_grad_":
            return True
        target = analysis.call_target(call)
        return target is not None and _stores_on_self(target)
    return False


def _chain_root(expr: cst.BaseExpression) -> str | None:
    """The dotted name a chain of attributes and calls starts with (``model.get_encoder`` of
    ``model.get_encoder().x``)."""
    while True:
        name = dotted_name(expr)
        if name is not None:
            return name
        if isinstance(expr, cst.Call):
            expr = expr.func
        elif isinstance(expr, (cst.Attribute, cst.Subscript)):
            expr = expr.value
        else:
            return None


def _stores_on_self(function: cst.FunctionDef) -> bool:
    """Whether a method assigns an attribute of ``self`` or registers a part on it (it changes the model)."""
    for node in walk(function.body):
        if isinstance(node, cst.AssignTarget) and (dotted_name(node.target) or "").startswith("self."):
            return True
        if isinstance(node, cst.Call) and call_method_name(node) in STRUCTURE_METHODS and dotted_name(node.func.value) == "self":  # type: ignore[union-attr]
            return True
    return False


#: Methods that name a model's parts: under DDP every name starts with ``module.``.
NAMING_METHODS = frozenset({"named_parameters", "named_modules", "named_children", "named_buffers"})


def _plain_aliases(stmt: cst.BaseStatement, names: list[str]) -> list[str]:
    """The names a statement binds to one of ``names`` itself (``model_without_ddp = model``)."""
    if type(stmt) is not cst.SimpleStatementLine:
        return []
    return [
        target.target.value  # type: ignore[attr-defined]
        for small in stmt.body  # type: ignore[attr-defined]
        if type(small) is cst.Assign and type(small.value) is cst.Name and small.value.value in names  # type: ignore[attr-defined]
        for target in small.targets  # type: ignore[attr-defined]
        if type(target.target) is cst.Name
    ]


def _reads_parameter_names(analysis: ScriptAnalysis, stmt: cst.BaseStatement, model: str) -> bool:
    """Whether the statement reads the names of the model's parts (``model.named_parameters()``, directly or in
    a function of the program it hands the model to: ``param_groups(model, cfg)``), as parameter groups by name
    do: the wrap must come after it, or the names no longer match (``"0.weight"`` is ``"module.0.weight"``)."""
    for node in walk(stmt):
        if type(node) is not cst.Call:
            continue
        if call_method_name(node) in NAMING_METHODS:  # type: ignore[arg-type]
            receiver = dotted_name(node.func.value)  # type: ignore[attr-defined]
            if receiver == model or (receiver or "").startswith(model + "."):
                return True
        elif any(dotted_name(arg.value) == model for arg in node.args):  # type: ignore[attr-defined]
            # (in the function, or in one it calls: ``build_optimizer(model)`` calling ``param_groups(model)``)
            naming = analysis.derived("naming calls", _naming_calls)
            for function in analysis.targets_of(node):  # type: ignore[arg-type]
                if any(type(n) is cst.Call and call_method_name(n) in NAMING_METHODS for n in walk(function)) or analysis.reaches(function, naming):  # type: ignore[arg-type]
                    return True
    return False


def _naming_calls(analysis: ScriptAnalysis) -> list[cst.Call]:
    """The program's calls that read the names of a model's parts (:data:`NAMING_METHODS`); one list per analysis."""
    return [call for module in analysis.shared.analyses for call in module.calls if call_method_name(call) in NAMING_METHODS]


def _hands_over(analysis: ScriptAnalysis, stmt: cst.BaseStatement, model: str) -> bool:
    """Whether the statement builds an object of the program's classes from the model itself (which it may
    keep: ``Distiller(student, teacher)``); a function it is passed to (``freeze(model)``) keeps nothing."""
    constructed = analysis.shared.constructed
    return any(
        type(node) is cst.Call and node in constructed and any(dotted_name(arg.value) == model for arg in node.args)  # type: ignore[attr-defined]
        for node in walk(stmt)
    )


_TRAINS_ITSELF = (
    "{model} trains itself in a method of its own class ({method}() builds its optimizer, backward() runs in the "
    "class): a DistributedDataParallel wrap around the object would never see the forward that runs there, so each "
    "process would train its own replica; move the training loop out of the class so that it runs the wrapped model "
    "(model(x)), or have the class wrap the module it trains"
)


def _kept_unwrapped(model: str) -> str:
    return (
        f"this hands {model} to an object and changes which of its parameters require gradients: DDP must wrap "
        f"{model} after that change, but the object keeps the unwrapped {model} and trains it without synchronising; "
        f"change requires_grad before handing {model} over, or wrap it inside the object"
    )
