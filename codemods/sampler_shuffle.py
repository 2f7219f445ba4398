"""DDP036 sampler-with-shuffle."""

from __future__ import annotations

from typing import Iterator

import libcst as cst

from . import names
from .analysis import ScriptAnalysis, given_loader_argument, is_true, keyword_argument, loader_argument
from .base import Change, Example, FixResult, FixSafety, Match, Options, Phase, Rule, Severity, Valid
from .edits import Edits, with_keyword, without_argument

#: ``DistributedSampler``'s parameters before ``shuffle``, so a positional ``shuffle`` is recognised.
SAMPLER_SHUFFLE_POSITION = 3


def _sampler_shuffle(call: cst.Call) -> cst.Arg | None:
    """The ``shuffle`` argument of a ``DistributedSampler(...)`` call, keyword or positional."""
    found = keyword_argument(call, "shuffle")
    if found is None and len(call.args) > SAMPLER_SHUFFLE_POSITION and call.args[SAMPLER_SHUFFLE_POSITION].keyword is None:
        return call.args[SAMPLER_SHUFFLE_POSITION]
    return found


class SamplerWithShuffle(Rule):
    """Let the sampler shuffle: a ``DataLoader`` takes ``sampler=`` or ``shuffle=True``, never both.

    What it finds: ``DataLoader(..., sampler=..., shuffle=True)`` (or ``batch_sampler=`` with
    ``shuffle=True``).

    Why it is a problem: ``DataLoader`` raises ``ValueError: sampler option is mutually exclusive with
    shuffle`` when it is built, so the script dies before the first step. It is a common slip when a
    ``DistributedSampler`` is added to a loader that used to shuffle.

    What the fix does: removes ``shuffle=True`` from the loader, so the sampler alone decides the order.
    When the sampler is a ``DistributedSampler(...)`` call (in place, or the one call a variable comes
    from) that does not say whether to shuffle, it gets ``shuffle=True``, which keeps the intent visible
    (it is also its default). When that sampler says ``shuffle=False``, or ``shuffle`` is passed
    positionally, the intent is unclear and the finding is only reported: decide whether the data should
    be shuffled and keep exactly one of the two settings.

    Fix safety: the original stops with ``ValueError`` (a sampler and ``shuffle=True`` are exclusive);
    the fixed loader shuffles through its sampler, as asked.
    """

    code = "DDP036"
    name = "sampler-with-shuffle"
    fix_safety = FixSafety.SAFE
    phase = Phase.SAMPLERS
    severity = Severity.ERROR
    triggers = ("shuffle",)
    requires = ("DataLoader",)
    manual_fix = "keep one of the two: the sampler decides the order, so drop the loader's shuffle=True"
    examples = (
        Example(
            before="""\
from torch.utils.data import DataLoader, DistributedSampler

sampler = DistributedSampler(train_set)
loader = DataLoader(train_set, batch_size=32, sampler=sampler, shuffle=True)
""",
            after="""\
from torch.utils.data import DataLoader, DistributedSampler

sampler = DistributedSampler(train_set, shuffle=True)
loader = DataLoader(train_set, batch_size=32, sampler=sampler)
""",
        ),
        Example(
            before="""\
import torch.utils.data as tud

loader = tud.DataLoader(
    train_set,
    shuffle=True,
    sampler=tud.WeightedRandomSampler(weights, num_samples=len(weights)),
)
""",
            after="""\
import torch.utils.data as tud

loader = tud.DataLoader(
    train_set,
    sampler=tud.WeightedRandomSampler(weights, num_samples=len(weights)),
)
""",
        ),
        Example(
            before="""\
from torch.utils.data import DataLoader, DistributedSampler

loader = DataLoader(train_set, sampler=DistributedSampler(train_set, shuffle=False), shuffle=True)
""",
        ),
        Valid(
            """\
from torch.utils.data import DataLoader, DistributedSampler

loader = DataLoader(train_set, batch_size=32, sampler=DistributedSampler(train_set, shuffle=True), shuffle=False)
"""
        ),
    )

    def _targets(self, analysis: ScriptAnalysis, loader: cst.Call) -> tuple[cst.Arg, cst.Call | None] | None:
        """The loader's ``shuffle=True`` argument and the ``DistributedSampler`` call it feeds, if one."""
        shuffle = loader_argument(loader, "shuffle")
        sampler = given_loader_argument(loader, "sampler") or given_loader_argument(loader, "batch_sampler")
        if shuffle is None or sampler is None or not is_true(shuffle.value):
            return None
        origins = analysis.origins(sampler.value)
        distributed = [o for o in origins if isinstance(o, cst.Call) and analysis.is_call_to(o, names.DISTRIBUTED_SAMPLER)]
        return shuffle, distributed[0] if len(origins) == 1 and distributed else None

    def matches(self, analysis: ScriptAnalysis) -> Iterator[Match]:
        for loader in analysis.loader_calls:
            found = self._targets(analysis, loader)
            if found is None:
                continue
            shuffle, sampler = found
            sampler_shuffle = _sampler_shuffle(sampler) if sampler is not None else None
            if shuffle.keyword is None:
                yield Match(loader, "DataLoader given both a sampler and shuffle=True (ValueError when it is built): pass shuffle to the sampler only", fixable=False)
            elif sampler_shuffle is not None and not is_true(sampler_shuffle.value):
                yield Match(
                    loader,
                    "DataLoader given both a sampler and shuffle=True (ValueError when it is built), and the sampler "
                    "is told not to shuffle: decide which one you meant",
                    fixable=False,
                )
            else:
                yield Match(loader, "DataLoader given both a sampler and shuffle=True (ValueError when it is built): the sampler decides the order")

    def fix(self, analysis: ScriptAnalysis, options: Options) -> FixResult | None:
        edits = Edits(analysis)
        for match in self.matches_in(analysis):
            loader = match.node
            assert isinstance(loader, cst.Call)
            found = self._targets(analysis, loader)
            if not match.fixable or found is None:
                continue
            _, sampler = found
            edits.replace(loader, lambda updated: without_argument(updated, keyword_argument(updated, "shuffle")))  # type: ignore[arg-type]
            message = "shuffle=True removed from a DataLoader that has a sampler"
            if sampler is not None and _sampler_shuffle(sampler) is None:
                edits.replace(sampler, lambda updated: with_keyword(updated, "shuffle", cst.Name("True")))  # type: ignore[arg-type]
                message += " (the DistributedSampler shuffles: shuffle=True)"
            edits.changes.append(Change(self.code, analysis.line(loader), message))
        return edits.apply(analysis.module) if edits else None
