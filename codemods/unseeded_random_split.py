"""DDP043 unseeded-random-split."""

from __future__ import annotations

from typing import Iterator

import libcst as cst

from .analysis import ScriptAnalysis, keyword_argument
from .analysis.ranks import seeds_alike
from .base import Change, Example, FixResult, FixSafety, Match, Options, Phase, Rule, Valid
from .edits import Edits, expression, with_keyword

#: ``torch.utils.data.random_split`` under the names torch exports it by.
RANDOM_SPLIT = frozenset({"torch.utils.data.random_split", "torch.utils.data.dataset.random_split"})


class UnseededRandomSplit(Rule):
    """Split a data set the same way on every process: give ``random_split`` a seeded generator.

    What it finds: ``random_split(dataset, lengths)`` without a ``generator=`` in a training program that
    does not seed torch's global random state alike on every rank (no ``torch.manual_seed(42)``, or a seed
    that flows from the rank).

    Why it is a problem: without a generator the split draws from the global random state, which each
    process seeds on its own at start. Every rank then splits differently: the ``DistributedSampler``s shard
    different training sets, samples one rank validates on are another rank's training data, and the
    validation metrics are contaminated (a trial: 95 of rank 0's 120 validation samples were in rank 1's
    training set). One process alone never showed it.

    What the fix does: passes ``generator=torch.Generator().manual_seed(0)``, the same split on every rank
    and in every run.

    Fix safety: unsafe. The split differs from the one the original drew, and the global random state is
    no longer advanced by the split, so whatever draws from it next (the model's initial weights) differs
    too: a program seeded with ``torch.manual_seed(seed + rank)``, deterministic as one process, computes
    other numbers even as plain ``python`` (a trial). ``lint --fix`` applies it only with
    ``--unsafe-fixes``; the migration applies it.
    """

    code = "DDP043"
    name = "unseeded-random-split"
    phase = Phase.SAMPLERS
    fix_safety = FixSafety.UNSAFE
    triggers = ("random_split",)
    requires = (".backward(",)
    examples = (
        Example(
            before="""\
import torch
from torch.utils.data import random_split

parts = random_split(data, [0.8, 0.2])
loss.backward()
""",
            after="""\
import torch
from torch.utils.data import random_split

parts = random_split(data, [0.8, 0.2], generator=torch.Generator().manual_seed(0))
loss.backward()
""",
        ),
        # A generator of its own seeds the data, not the split (the trial's script).
        Example(
            before="""\
import torch
from torch.utils.data import TensorDataset, random_split

g = torch.Generator().manual_seed(0)
data = TensorDataset(torch.randn(600, 10, generator=g))
parts = random_split(data, [480, 120])
loss.backward()
""",
            after="""\
import torch
from torch.utils.data import TensorDataset, random_split

g = torch.Generator().manual_seed(0)
data = TensorDataset(torch.randn(600, 10, generator=g))
parts = random_split(data, [480, 120], generator=torch.Generator().manual_seed(0))
loss.backward()
""",
        ),
        Valid(
            """\
import torch
from torch.utils.data import random_split

torch.manual_seed(42)
parts = random_split(data, [0.8, 0.2])
loss.backward()
"""
        ),
    )

    def matches(self, analysis: ScriptAnalysis) -> Iterator[Match]:
        if not analysis.is_training_code:
            return
        splits = [call for call in analysis.calls_to(RANDOM_SPLIT) if keyword_argument(call, "generator") is None and len(call.args) < 3]
        if splits and not seeds_alike(analysis):
            for call in splits:
                yield Match(
                    call,
                    "random_split draws from each process's own random state: every rank splits differently (one "
                    "rank's validation samples are another's training data); give it a seeded generator",
                )

    def fix(self, analysis: ScriptAnalysis, options: Options) -> FixResult | None:
        edits = Edits(analysis)
        for match in self.matches_in(analysis):
            call = match.node
            assert isinstance(call, cst.Call)
            torch = analysis.local_name_for("torch")
            if torch is None:
                edits.add_import("torch")
                torch = "torch"
            edits.replace(call, with_keyword(call, "generator", expression(f"{torch}.Generator().manual_seed(0)")))
            edits.changes.append(Change(self.code, analysis.line(call), "random_split given a seeded generator (the same split on every rank)"))
        return edits.apply(analysis.module) if edits else None
