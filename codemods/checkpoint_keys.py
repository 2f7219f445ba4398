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
    """Keep the ``module.`` keys of a DataParallel model's ``state_dict()`` through the migration.

    What it finds: ``model.state_dict()`` on a model that an unconditional ``nn.DataParallel(...)`` wraps.
    Its keys start with ``module.`` (``module.fc.weight``), and that is the format of every checkpoint the
    script ever wrote.

    Why it is a problem: the migration replaces DataParallel by DistributedDataParallel and reaches the
    model's state through ``.module``, which drops the prefix: checkpoints the original wrote no longer
    resume in the new code, and downstream code that reads ``module.``-keyed checkpoints breaks.

    What the fix does: ``runtime.unwrap(model).state_dict(prefix="module.")``: the same keys, whether the
    model is wrapped or not. It runs before DataParallel is replaced (loading is DDP008's: it accepts keys
    with and without the prefix). A DataParallel wrap under a condition (``if torch.cuda.device_count() >
    1:``) wrote either format depending on the machine; it is left to DDP008, which saves the plain keys.

    Fix safety: none; the checkpoint keeps its format.
    """

    code = "DDP016"
    name = "data-parallel-checkpoint-keys"
    fix_safety = FixSafety.SAFE
    phase = Phase.DEVICES
    severity = Severity.INFO
    triggers = ("DataParallel",)
    needs_names = (names.DATA_PARALLEL,)  # it acts only on model wraps
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
        Valid(
            """\
import torch.nn as nn

model = nn.DataParallel(Net())
torch.save(model.module.state_dict(), "plain.pt")
if torch.cuda.device_count() > 1:
    net = nn.DataParallel(net)
torch.save(net.state_dict(), "either.pt")
"""
        ),
    )

    def matches(self, analysis: ScriptAnalysis) -> Iterator[Match]:
        for call in analysis.method_calls("state_dict"):
            receiver = call.func.value  # type: ignore[union-attr]
            if call.args or dotted_name(receiver) is None:
                continue
            wrap = analysis.wrapped_at(receiver)
            if wrap is None or not analysis.is_call_to(wrap, names.DATA_PARALLEL) or _conditional(analysis, wrap):
                continue
            yield Match(call, "state_dict() of a DataParallel model has module. keys: keep them when DDP replaces it")

    def fix(self, analysis: ScriptAnalysis, options: Options) -> FixResult | None:
        edits = Edits(analysis)
        for match in self.matches(analysis):
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
            edits.changes.append(Change(self.code, analysis.line(call), "state_dict keeps the module. keys of the DataParallel checkpoint"))
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



