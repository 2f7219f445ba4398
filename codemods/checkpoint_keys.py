"""DDP016 data-parallel-checkpoint-keys."""

from __future__ import annotations

from typing import Iterator

import libcst as cst

from . import names
from .analysis import ScriptAnalysis, dotted_name
from .base import Change, Example, FixResult, FixSafety, Match, Options, Phase, Rule, Severity, Valid
from .edits import Edits, expression
from .runtime_calls import runtime_name


class DataParallelCheckpointKeys(Rule):
    """Keep the ``module.`` keys of a wrapped model's ``state_dict()`` through the migration.

    What it finds: ``model.state_dict()`` on a model that an unconditional ``nn.DataParallel(...)`` or
    ``DistributedDataParallel(...)`` of the original program wraps. Its keys start with ``module.``
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
torch.save({"model": model.state_dict()}, "ckpt.pt")
""",
            after="""\
import torch.nn as nn
from ddp_migrate import runtime

model = nn.DataParallel(Net())
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
            if call.args or dotted_name(receiver) is None or analysis.holds_unwrapped(receiver):
                continue  # (``raw = model.module if hasattr(model, "module") else model``: plain keys already)
            wrap = analysis.wrapped_at(receiver)
            if wrap is None or not analysis.is_call_to(wrap, names.MODEL_WRAPPERS) or _conditional(analysis, wrap):
                continue
            wrapper = "DataParallel" if analysis.is_call_to(wrap, names.DATA_PARALLEL) else "DistributedDataParallel"
            yield Match(call, f"state_dict() of a {wrapper} model has module. keys: keep them through the migration")

    def fix(self, analysis: ScriptAnalysis, options: Options) -> FixResult | None:
        edits = Edits(analysis)
        for match in self.matches_in(analysis):
            call = match.node
            assert isinstance(call, cst.Call)
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


def _conditional(analysis: ScriptAnalysis, wrap: cst.Call) -> bool:
    """Whether the wrap runs only on some paths (under an ``if`` or in a conditional expression)."""
    function = analysis.enclosing_function(wrap)
    for ancestor in analysis.ancestors(wrap):
        if ancestor is function:
            return False
        if isinstance(ancestor, (cst.If, cst.IfExp)):
            return True
    return False



