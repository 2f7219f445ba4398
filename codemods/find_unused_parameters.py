"""DDP032 find-unused-parameters."""

from __future__ import annotations

from typing import Iterator

from . import names
from .analysis import ScriptAnalysis, is_true, keyword_argument, wrapped_argument
from .analysis.trainable import changed_after_a_wrap, skipped_in_some_steps
from .base import Example, Match, Phase, Rule, Severity, Valid


class FindUnusedParameters(Rule):
    """Turn on ``find_unused_parameters`` only for models whose graph changes between steps.

    What it finds: ``DistributedDataParallel(..., find_unused_parameters=True)``.

    Why it is a problem: with the flag on, DDP walks the autograd graph after every forward pass to find
    parameters that took no part in it, which costs time on every step (often 10-20%), and it makes some
    bugs (a parameter that is never used) silent. It is needed only when some parameters really go unused in
    some forward passes: conditional branches, multi-task heads, layers skipped at random. A model whose
    every parameter gets a gradient in every step gains nothing from it.

    What a human must do: when every parameter is used in every forward pass, remove the argument (the
    default is ``False``; DDP raises a clear error at the next step if a parameter did go unused). Keep it,
    and silence this finding, when the graph is dynamic. Where the model's class (in the program) calls a
    layer only on some steps, by a test of its input or of chance (LayerDrop: ``if self.training and
    torch.rand(()) < p: continue``), or keeps a layer with parameters that nothing uses (``self.old_head =
    nn.Linear(...)``, left from an earlier experiment), the flag is needed and nothing is reported; the
    migration's own wraps pass it there.
    """

    code = "DDP032"
    name = "find-unused-parameters"
    phase = Phase.WRAPPING
    severity = Severity.WARNING
    triggers = ("find_unused_parameters",)
    manual_fix = "drop find_unused_parameters=True unless some parameters go unused in some forward passes"
    examples = (
        Example(
            before="""\
from torch.nn.parallel import DistributedDataParallel as DDP

model = DDP(model, device_ids=[local_rank], find_unused_parameters=True)
""",
        ),
        # The model's forward() skips a layer at random: the flag is needed.
        Valid(
            """\
import torch
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


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


model = DDP(Net(), device_ids=[local_rank], find_unused_parameters=True)
"""
        ),
        Valid(
            """\
from torch.nn.parallel import DistributedDataParallel as DDP

model = DDP(model, device_ids=[local_rank], find_unused_parameters=False)
"""
        ),
    )

    def matches(self, analysis: ScriptAnalysis) -> Iterator[Match]:
        for wrap in analysis.calls_to(names.DISTRIBUTED_DATA_PARALLEL):
            flag = keyword_argument(wrap, "find_unused_parameters")
            model = wrapped_argument(wrap)
            if model is not None and skipped_in_some_steps(analysis, model) is not None:
                continue  # its forward() skips a layer on some steps: the flag is needed
            if changed_after_a_wrap(analysis):
                continue  # parameters frozen after the wrap go unused while frozen: the flag is needed
            if flag is not None and is_true(flag.value):
                yield Match(
                    flag,
                    "find_unused_parameters=True makes DDP search the graph on every step: "
                    "remove it unless some parameters go unused in some forward passes",
                    fixable=False,
                )
