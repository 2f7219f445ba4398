"""DDP032 find-unused-parameters."""

from __future__ import annotations

from typing import Iterator

from . import names
from .analysis import ScriptAnalysis, is_true, keyword_argument
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
    and silence this finding, when the graph is dynamic. The tool cannot tell which case applies.
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
            if flag is not None and is_true(flag.value):
                yield Match(
                    flag,
                    "find_unused_parameters=True makes DDP search the graph on every step: "
                    "remove it unless some parameters go unused in some forward passes",
                    fixable=False,
                )
