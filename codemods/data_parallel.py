"""DDP001 data-parallel."""

from __future__ import annotations

from typing import Iterator

import libcst as cst

from . import names
from .analysis import ScriptAnalysis, wrapped_argument
from .base import Change, Example, FixResult, Match, Options, Phase, Rule, Valid
from .edits import Edits, code_of
from .runtime_calls import ddp_call



class DataParallel(Rule):
    """Replace ``nn.DataParallel`` with ``DistributedDataParallel``, one process per device.

    What it finds: ``nn.DataParallel(model)`` under any import alias (``torch.nn.DataParallel``,
    ``from torch.nn import DataParallel as DP``).

    Why it is a problem: DataParallel is one process driving several GPUs from threads: the GIL serialises
    it, GPU 0 gathers every output and scatters every gradient, and it cannot span machines. Under
    ``torchrun`` every process would wrap the model in its own DataParallel and no gradient would ever be
    averaged across processes.

    What the fix does: ``DistributedDataParallel(model, device_ids=runtime.device_ids())``, where the
    original wrapped. A wrap that sat under a condition (``if torch.cuda.device_count() > 1:``) moves out of
    it: every process must wrap, CPU included, or the processes stop agreeing on the weights. DataParallel's
    ``device_ids`` and ``output_device`` are dropped (each process uses its own device); ``dim`` is kept.
    """

    code = "DDP001"
    name = "data-parallel"
    phase = Phase.WRAPPING
    triggers = ("DataParallel",)
    examples = (
        Example(
            before="""\
import torch.nn as nn

model = Net().to(device)
model = nn.DataParallel(model)
""",
            after="""\
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel
from ddp_migrate import runtime

model = Net().to(device)
model = DistributedDataParallel(model, device_ids=runtime.device_ids())
""",
        ),
        Example(
            before="""\
import torch
from torch.nn import DataParallel as DP

model = Net().to(device)
if torch.cuda.device_count() > 1:
    print("using", torch.cuda.device_count(), "GPUs")
    model = DP(model, device_ids=[0, 1])
""",
            after="""\
import torch
from torch.nn.parallel import DistributedDataParallel
from ddp_migrate import runtime

model = Net().to(device)
if torch.cuda.device_count() > 1:
    print("using", torch.cuda.device_count(), "GPUs")
model = DistributedDataParallel(model, device_ids=runtime.device_ids())
""",
        ),
        Example(
            before="""\
import torch

model = torch.nn.DataParallel(net) if torch.cuda.device_count() > 1 else net
""",
            after="""\
import torch
from torch.nn.parallel import DistributedDataParallel
from ddp_migrate import runtime

model = DistributedDataParallel(net, device_ids=runtime.device_ids())
""",
        ),
        Valid(
            """\
from torch.nn.parallel import DistributedDataParallel as DDP

model = DDP(model, device_ids=[local_rank])
"""
        ),
    )

    def matches(self, analysis: ScriptAnalysis) -> Iterator[Match]:
        for call in analysis.calls_to(names.DATA_PARALLEL):
            yield Match(
                call,
                "nn.DataParallel: use DistributedDataParallel with one process per device (launched by torchrun)",
                fixable=wrapped_argument(call) is not None,
            )

    def fix(self, analysis: ScriptAnalysis, options: Options) -> FixResult | None:
        edits = Edits(analysis.module.code)
        for match in self.matches(analysis):
            call = match.node
            assert isinstance(call, cst.Call)
            model = wrapped_argument(call)
            if model is None:
                continue
            kept = [a for a in call.args if a.keyword is not None and a.keyword.value == "dim"]
            new_call = ddp_call(analysis, edits, model, kept)
            parent = analysis.parent(call)
            if isinstance(parent, cst.IfExp) and code_of(model).strip() in (
                code_of(parent.orelse).strip(),
                code_of(parent.body).strip(),
            ):
                # ``DP(model) if many_gpus else model``: every process wraps.
                edits.replace(parent, new_call)
            elif not self._hoist_out_of_condition(analysis, edits, call, new_call):
                edits.replace(call, new_call)
            edits.changes.append(Change(self.code, analysis.line(call), "nn.DataParallel replaced by DistributedDataParallel"))
        for qualified in names.DATA_PARALLEL:
            local = analysis.local_name_for(qualified)
            if local:
                module, _, attr = qualified.rpartition(".")
                edits.drop_unused_imports()
        return edits.apply(analysis.module) if edits else None

    def _hoist_out_of_condition(self, analysis: ScriptAnalysis, edits: Edits, call: cst.Call, new_call: cst.Call) -> bool:
        """Move ``if <cond>: model = DP(model)`` out of its condition, so every process wraps."""
        stmt = analysis.statement(call)
        block = analysis.parent(stmt)
        condition = analysis.parent(block) if block is not None else None
        if not isinstance(condition, cst.If) or condition.orelse is not None or analysis.is_rank_test(condition.test):
            return False
        if not isinstance(block, cst.IndentedBlock):
            return False
        moved = stmt.deep_replace(call, new_call)
        assert isinstance(moved, cst.BaseStatement)
        moved = moved.with_changes(leading_lines=[])
        rest = [s for s in block.body if s is not stmt]
        if rest:
            edits.remove(stmt)
            edits.insert_after(condition, moved)
        else:
            edits.replace(condition, moved.with_changes(leading_lines=condition.leading_lines))
        return True
