"""DDP052 reentrant-checkpoint-reused."""

from __future__ import annotations

from typing import Iterator

import libcst as cst

from . import names
from .analysis import ScriptAnalysis, is_true, keyword_argument, wrapped_argument
from .analysis.script import call_method_name
from .analysis.trainable import reentered_in_one_step
from .base import Change, Example, FixResult, FixSafety, Match, Options, Phase, Rule, Severity, Valid
from .edits import Edits, with_keyword


class ReentrantCheckpointReused(Rule):
    """Pass ``static_graph=True`` where a reentrant activation checkpoint reaches the same parameters twice.

    What it finds: ``DistributedDataParallel(model, ...)`` (the migration's own wraps too) where the model's
    ``forward()``, or that of a class whose instances it builds, checkpoints a part of itself the reentrant way
    (``torch.utils.checkpoint.checkpoint(self.block, h)`` without ``use_reentrant=False``) more than once per
    step: on each pass of a loop that runs the same block again (weights shared across depth, a recurrent
    cell), twice, or once beside a plain call of the same layer.

    Why it is a problem: a reentrant checkpoint runs a backward pass of its own for its part of the model, so
    DDP's hooks mark those parameters ready once per checkpoint, and DDP stops at the first ``backward()``:
    "Expected to mark a variable ready only once". A single process never noticed.

    What the fix does: adds ``static_graph=True`` to the wrap, which lets DDP reduce a parameter used by
    several reentrant passes. It is done only where the model's graph is the same on every step (no layer
    called under a test of the input or of chance, one forward per step); elsewhere the finding is left for
    a human: pass ``use_reentrant=False`` to the checkpoint (the gradients are the same wherever an input of
    the checkpointed part requires grad) or make the graph static.

    Fix safety: DDP records the graph of the first step and reuses it; a plain run is unchanged.
    """

    code = "DDP052"
    name = "reentrant-checkpoint-reused"
    phase = Phase.WRAPPING
    severity = Severity.ERROR
    fix_safety = FixSafety.SAFE
    triggers = ("DistributedDataParallel",)
    needs_names = (names.DISTRIBUTED_DATA_PARALLEL,)
    manual_fix = "pass use_reentrant=False to the checkpoint, or static_graph=True to DistributedDataParallel where the graph is the same on every step"
    examples = (
        Example(
            before="""\
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.checkpoint import checkpoint


class Shared(nn.Module):
    def __init__(self):
        super().__init__()
        self.block = nn.Linear(8, 8)

    def forward(self, x):
        for _ in range(4):
            x = checkpoint(self.block, x, use_reentrant=True)
        return x


model = DDP(Shared().to(device), device_ids=[local_rank])
""",
            after="""\
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.checkpoint import checkpoint


class Shared(nn.Module):
    def __init__(self):
        super().__init__()
        self.block = nn.Linear(8, 8)

    def forward(self, x):
        for _ in range(4):
            x = checkpoint(self.block, x, use_reentrant=True)
        return x


model = DDP(Shared().to(device), device_ids=[local_rank], static_graph=True)
""",
        ),
        # Each block of the list is checkpointed once per step.
        Valid(
            """\
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.checkpoint import checkpoint


class Deep(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList(nn.Linear(8, 8) for _ in range(4))

    def forward(self, x):
        for block in self.blocks:
            x = checkpoint(block, x, use_reentrant=True)
        return x


model = DDP(Deep().to(device), device_ids=[local_rank])
"""
        ),
        # The non-reentrant way records one graph: DDP marks each parameter once.
        Valid(
            """\
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.checkpoint import checkpoint


class Shared(nn.Module):
    def __init__(self):
        super().__init__()
        self.block = nn.Linear(8, 8)

    def forward(self, x):
        for _ in range(4):
            x = checkpoint(self.block, x, use_reentrant=False)
        return x


model = DDP(Shared().to(device), device_ids=[local_rank])
"""
        ),
    )

    def matches(self, analysis: ScriptAnalysis) -> Iterator[Match]:
        for wrap in analysis.calls_to(names.DISTRIBUTED_DATA_PARALLEL):
            model = wrapped_argument(wrap)
            if model is None or _graph_declared_static(analysis, wrap):
                continue
            reentered = reentered_in_one_step(analysis, model)
            if reentered is None:
                continue
            if reentered.static:
                yield Match(wrap, f"{reentered.why}: DDP stops at the first backward(); pass static_graph=True (the model's graph is the same on every step)")
            else:
                yield Match(
                    wrap,
                    f"{reentered.why}: DDP stops at the first backward(), and static_graph=True does not fit a graph that changes "
                    "between steps; pass use_reentrant=False to the checkpoint (the same gradients wherever an input of the "
                    "checkpointed part requires grad)",
                    fixable=False,
                )

    def fix(self, analysis: ScriptAnalysis, options: Options) -> FixResult | None:
        edits = Edits(analysis)
        for match in self.matches_in(analysis):
            wrap = match.node
            if not match.fixable or not isinstance(wrap, cst.Call):
                continue
            flag = keyword_argument(wrap, "static_graph")  # (``static_graph=False``)
            if flag is not None:
                edits.replace(flag.value, cst.Name("True"))
            else:
                edits.replace(wrap, with_keyword(wrap, "static_graph", cst.Name("True")))
            why = reentered_in_one_step(analysis, wrapped_argument(wrap))  # type: ignore[arg-type]
            reason = f": {why.why}" if why is not None else ""
            edits.changes.append(Change(self.code, analysis.line(wrap), f"static_graph=True passed to DistributedDataParallel{reason}"))
        return edits.apply(analysis.module) if edits else None


def _graph_declared_static(analysis: ScriptAnalysis, wrap: cst.Call) -> bool:
    """Whether the wrap says its graph is static: ``static_graph=True``, keyword arguments spread from a dict
    (which may say so), or a ``_set_static_graph()`` call anywhere in the module."""
    flag = keyword_argument(wrap, "static_graph")
    if flag is not None:
        return is_true(flag.value) or not isinstance(flag.value, cst.Name)
    if any(arg.star == "**" for arg in wrap.args):
        return True
    return any(call_method_name(call) == "_set_static_graph" for call in analysis.calls)
