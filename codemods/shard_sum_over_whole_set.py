"""DDP044 shard-sum-over-whole-set."""

from __future__ import annotations

from typing import Iterator

import libcst as cst

from .analysis import ScriptAnalysis, dotted_name
from .analysis.per_rank import per_rank_values
from .base import Change, Example, FixResult, FixSafety, Match, Options, Phase, Rule, Valid
from .edits import Edits, code_of


class ShardSumOverWholeSet(Rule):
    """Average a sum over this process's shard by the shard's size, not by the whole data set's.

    What it finds: a value summed over the batches of a loader a ``DistributedSampler`` shards (the epoch's
    loss, a count of correct predictions), divided by ``len(loader.dataset)``.

    Why it is a problem: the original summed over the whole data set and divided by its size. Once the
    data is sharded, each process sums over its own share, about 1/N of the set, and the quotient comes out
    N times too small: the logged training loss halves on two processes (a trial: 5.75 against 11.31), and
    a learning-rate schedule or a decision on it goes wrong.

    What the fix does: divides by ``len(loader.sampler)``, the number of samples this process draws, so
    the value is the mean over its shard (reduce it across ranks for the mean over the whole set:
    ``runtime.weighted_mean``).

    Fix safety: the value is the shard's mean, which is what it measures on every rank; on one process the
    sampler draws the whole set, and the value is the original's.
    """

    code = "DDP044"
    name = "shard-sum-over-whole-set"
    phase = Phase.OUTPUT
    fix_safety = FixSafety.SAFE
    triggers = ("DistributedSampler",)
    requires = ("dataset",)
    examples = (
        Example(
            before="""\
from torch.utils.data import DataLoader, DistributedSampler

loader = DataLoader(train_set, batch_size=32, sampler=DistributedSampler(train_set))
total = 0.0
for x, y in loader:
    loss = criterion(model(x), y)
    loss.backward()
    total += loss.item() * x.size(0)
print(total / len(loader.dataset))
""",
            after="""\
from torch.utils.data import DataLoader, DistributedSampler

loader = DataLoader(train_set, batch_size=32, sampler=DistributedSampler(train_set))
total = 0.0
for x, y in loader:
    loss = criterion(model(x), y)
    loss.backward()
    total += loss.item() * x.size(0)
print(total / len(loader.sampler))
""",
        ),
        Valid(
            """\
from torch.utils.data import DataLoader, DistributedSampler

loader = DataLoader(train_set, batch_size=32, sampler=DistributedSampler(train_set))
val_loader = DataLoader(val_set, batch_size=64)
for x, y in loader:
    criterion(model(x), y).backward()
correct = sum((model(x).argmax(1) == y).sum().item() for x, y in val_loader)
print(correct / len(val_loader.dataset))
"""
        ),
    )

    def matches(self, analysis: ScriptAnalysis) -> Iterator[Match]:
        values = per_rank_values(analysis)
        if values is None:
            return
        for node in analysis.preorder:
            if type(node) is not cst.BinaryOperation or not isinstance(node.operator, (cst.Divide, cst.FloorDivide)):  # type: ignore[attr-defined]
                continue
            dataset = _dataset_length_of(node.right)  # type: ignore[attr-defined]
            if dataset is None or not _sharded(analysis, dataset.value):
                continue
            shown = values.mention(node.left)  # type: ignore[attr-defined]
            if shown is not None:
                yield Match(
                    dataset,
                    f"{shown} is summed over this rank's shard of {code_of(dataset.value)} but divided by the whole "
                    "data set's size: the value comes out N times too small; divide by the shard's size "
                    f"(len({code_of(dataset.value)}.sampler))",
                )

    def fix(self, analysis: ScriptAnalysis, options: Options) -> FixResult | None:
        edits = Edits(analysis)
        for match in self.matches_in(analysis):
            dataset = match.node
            assert isinstance(dataset, cst.Attribute)
            edits.replace(dataset.attr, cst.Name("sampler"))
            edits.changes.append(Change(self.code, analysis.line(dataset), "the shard's sum divided by the shard's size (len(loader.sampler))"))
        return edits.apply(analysis.module) if edits else None


def _dataset_length_of(expr: cst.BaseExpression) -> cst.Attribute | None:
    """``loader.dataset`` in ``len(loader.dataset)``."""
    if type(expr) is not cst.Call or dotted_name(expr.func) != "len" or len(expr.args) != 1:  # type: ignore[attr-defined]
        return None
    argument = expr.args[0].value  # type: ignore[attr-defined]
    return argument if type(argument) is cst.Attribute and argument.attr.value == "dataset" else None  # type: ignore[return-value]


def _sharded(analysis: ScriptAnalysis, loader: cst.BaseExpression) -> bool:
    """Whether the expression holds a loader that a ``DistributedSampler`` shards (a loader of any module)."""
    for origin in analysis.origins(loader):
        owner = analysis.shared.analysis_of(origin)
        if type(origin) is cst.Call and owner is not None and origin in owner.loader_calls and owner.has_distributed_sampler(origin):  # type: ignore[arg-type]
            return True
    return False
