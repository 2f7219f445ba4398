"""DDP007 unguarded-save."""

from __future__ import annotations

from typing import Iterator

import libcst as cst

from . import names
from .analysis import ScriptAnalysis
from .base import Change, Example, FixResult, Match, Options, Phase, Rule, Valid
from .edits import Edits, expression
from .runtime_calls import runtime_name


class UnguardedSave(Rule):
    """Save checkpoints on rank 0 only, then wait for it on every rank.

    What it finds: ``torch.save(...)`` that every process executes (not under a rank-0 guard).

    Why it is a problem: N processes write the same file at once (torn or corrupt checkpoints on shared
    storage, N times the I/O), and a process that loads the file right after may read it half-written.

    What the fix does: ``runtime.save(obj, path)``: it unwraps DDP modules inside ``obj``, writes on global
    rank 0 only, then waits on a barrier on every rank. It is called by all ranks, so it must not sit in a
    rank-0-only branch (DDP033 reports that).
    """

    code = "DDP007"
    name = "unguarded-save"
    phase = Phase.CHECKPOINTS
    triggers = ("save",)
    examples = (
        Example(
            before="""\
import torch

state = {"net": net.state_dict(), "acc": acc}
torch.save(state, "checkpoint/best.pt")
loss.backward()
""",
            after="""\
import torch
from ddp_migrate import runtime

state = {"net": net.state_dict(), "acc": acc}
runtime.save(state, "checkpoint/best.pt")
loss.backward()
""",
        ),
        Valid(
            """\
import torch
import torch.distributed as dist

if dist.get_rank() == 0:
    torch.save(model.state_dict(), "model.pt")
"""
        ),
    )

    def matches(self, analysis: ScriptAnalysis) -> Iterator[Match]:
        if not analysis.is_training_code:
            return
        for call in analysis.calls_to(names.TORCH_SAVE):
            if analysis.rank_guard(call) is None:
                yield Match(call, "torch.save runs on every process: save on rank 0 only (runtime.save)")

    def fix(self, analysis: ScriptAnalysis, options: Options) -> FixResult | None:
        edits = Edits(analysis.module.code)
        for match in self.matches(analysis):
            rt = runtime_name(analysis, edits)
            assert isinstance(match.node, cst.Call)
            edits.replace(match.node.func, expression(f"{rt}.save"))
            edits.changes.append(Change(self.code, analysis.line(match.node), "torch.save replaced by runtime.save (rank 0 writes, all ranks wait)"))
        return edits.apply(analysis.module) if edits else None
