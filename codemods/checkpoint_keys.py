"""DDP016 data-parallel-checkpoint-keys."""

from __future__ import annotations

from typing import Iterator

import libcst as cst

from . import names
from .analysis import ScriptAnalysis, call_method_name
from .analysis.wrapped_keys import copy_of_a_wrap, prefixed_keys_wrap
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

    Fix safety: none; the checkpoint keeps its format.
    """

    code = "DDP016"
    name = "data-parallel-checkpoint-keys"
    fix_safety = FixSafety.SAFE
    phase = Phase.DEVICES
    severity = Severity.INFO
    triggers = ("DataParallel",)  # in DistributedDataParallel too
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
            wrap = prefixed_keys_wrap(analysis, call)
            if wrap is not None:
                wrapper = "DataParallel" if analysis.is_call_to(wrap, names.DATA_PARALLEL) else "DistributedDataParallel"
                yield Match(call, f"state_dict() of a {wrapper} model has module. keys: keep them through the migration")
        for call in analysis.method_calls("load_state_dict"):
            receiver = call.func.value  # type: ignore[union-attr]
            given = state_dict_argument(call)
            if given is not None and not accepts_both_key_formats(given.value) and copy_of_a_wrap(analysis, receiver) is not None:
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
