"""DDP034 padded-eval-sampler."""

from __future__ import annotations

from typing import Iterator

import libcst as cst

from . import names
from .analysis import ScriptAnalysis, dotted_name, is_true, keyword_argument, walk
from .analysis.loaders import loader_facts
from .base import Example, Match, Phase, Rule, Severity, Valid
from .edits import code_of


def _reductions_in(analysis: ScriptAnalysis, node: cst.CSTNode) -> list[cst.Call]:
    return [n for n in walk(node) if isinstance(n, cst.Call) and (analysis.is_reduction(n) or analysis.reduces_in_place(n))]


class PaddedEvalSampler(Rule):
    """Reduce the metrics of a sharded evaluation across ranks, and mind the sampler's padding.

    What it finds: an evaluation ``DataLoader`` (iterated, but never by a loop that calls
    ``backward()``) that draws from a ``DistributedSampler``,
    - when the function that evaluates it reduces nothing across ranks (no ``dist.all_reduce`` /
      ``all_gather`` / ``reduce`` / ``gather``, no ``runtime.reduce_sum`` / ``reduce_mean`` /
      ``weighted_mean``, neither there nor where its result is used, nor on a meter it fills that its caller
      reduces in place: the ImageNet example's ``run_validate(loader)`` then ``top1.all_reduce()``), or
    - when it does, but the sampler pads (``drop_last`` is not ``True``) or drops the set's last samples
      (``drop_last=True``).

    Why it is a problem: each rank evaluates only its 1/N of the set. Unreduced, every rank reports the
    accuracy of its own shard: rank 0 prints a number computed on a fraction of the data, and choices
    made from it (``if acc > best: save``, early stopping, learning-rate schedules) differ between ranks,
    which can deadlock the job or desynchronise it. Reduced, the number is still off when the set size is
    not a multiple of N: ``DistributedSampler`` repeats up to N-1 samples so that every rank gets the same
    count, and they are counted twice; with ``drop_last=True`` it leaves up to N-1 samples out instead, and
    they are never evaluated (a trial's outlier at the end of the set: an error of 53 reported against 139,196).

    What a human must do: either evaluate the whole set on every rank (remove the ``DistributedSampler``
    from the evaluation loader: correct, but N times the work), or reduce the metric's sum and count
    across ranks (``runtime.weighted_mean(correct, seen)``) and make the shards cover the set exactly once:
    an evaluation set whose size divides by N, or the per-sample results gathered with their indices and
    the repeats dropped. The choice between speed and exactness is yours.
    """

    code = "DDP034"
    name = "padded-eval-sampler"
    phase = Phase.SAMPLERS
    severity = Severity.WARNING
    triggers = ("DistributedSampler",)
    manual_fix = "reduce the metrics across ranks (runtime.weighted_mean), or evaluate the whole set on every rank"
    examples = (
        Example(
            before="""\
import torch
from torch.utils.data import DataLoader, DistributedSampler


def evaluate(model, dataset):
    loader = DataLoader(dataset, batch_size=64, sampler=DistributedSampler(dataset, shuffle=False))
    correct = 0
    with torch.no_grad():
        for x, y in loader:
            correct += (model(x).argmax(1) == y).sum().item()
    return correct / len(dataset)
""",
        ),
        Example(
            before="""\
import torch
from ddp_migrate import runtime
from torch.utils.data import DataLoader, DistributedSampler


def evaluate(model, dataset):
    loader = DataLoader(dataset, batch_size=64, sampler=DistributedSampler(dataset, shuffle=False))
    correct = seen = 0
    with torch.no_grad():
        for x, y in loader:
            correct += (model(x).argmax(1) == y).sum().item()
            seen += len(y)
    return runtime.weighted_mean(correct, seen)
""",
        ),
        # Dropping the last samples instead of repeating them: they are never evaluated.
        Example(
            before="""\
import torch
from ddp_migrate import runtime
from torch.utils.data import DataLoader, DistributedSampler


def evaluate(model, dataset):
    sampler = DistributedSampler(dataset, shuffle=False, drop_last=True)
    loader = DataLoader(dataset, batch_size=64, sampler=sampler)
    correct = seen = 0
    with torch.no_grad():
        for x, y in loader:
            correct += (model(x).argmax(1) == y).sum().item()
            seen += len(y)
    return runtime.weighted_mean(correct, seen)
""",
        ),
        # The ImageNet example: the samples drop_last leaves out are evaluated by a loader of their own.
        Valid(
            """\
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, DistributedSampler, Subset


def evaluate(model, dataset):
    sampler = DistributedSampler(dataset, shuffle=False, drop_last=True)
    loader = DataLoader(dataset, batch_size=64, sampler=sampler)
    rest = Subset(dataset, range(len(sampler) * dist.get_world_size(), len(dataset)))
    correct = torch.zeros(2)
    with torch.no_grad():
        for batches in (loader, DataLoader(rest, batch_size=64)):
            for x, y in batches:
                correct += torch.tensor([(model(x).argmax(1) == y).sum().item(), len(y)])
    dist.all_reduce(correct)
    return correct[0] / correct[1]
"""
        ),
        Valid(
            """\
import torch
from torch.utils.data import DataLoader

val_loader = DataLoader(val_set, batch_size=64)
for x, y in val_loader:
    correct += (model(x).argmax(1) == y).sum().item()
"""
        ),
    )

    def _reduced(self, analysis: ScriptAnalysis, loop: cst.For) -> bool:
        """Whether the evaluating function reduces something across ranks, or its callers reduce its result."""
        function = analysis.enclosing_function(loop)
        if function is None:
            return any(analysis.enclosing_function(r) is None for r in _reductions_in(analysis, analysis.module))
        if _reductions_in(analysis, function):
            return True
        # What the function fills that its caller may reduce: a meter of the caller's it updates
        # (``top1.update(...)`` in the ImageNet example's nested ``run_validate``, then ``top1.all_reduce()``).
        filled = {name for n in walk(function.body) if isinstance(n, (cst.Name, cst.Attribute)) and (name := dotted_name(n)) is not None}
        for call in analysis.callers_of(function):
            statement = analysis.statement(call)
            if _reductions_in(analysis, statement):
                return True
            results = {
                dotted_name(t.target) for t in (statement.body[0].targets if _is_assign_line(statement) else ())  # type: ignore[union-attr]
            }
            scope = analysis.enclosing_function(call) or analysis.module
            for reduction in _reductions_in(analysis, scope):
                if any(dotted_name(n) in results for n in walk(reduction) if isinstance(n, (cst.Name, cst.Attribute))):
                    return True
                reduced = _reduced_in_place(analysis, reduction)
                if reduced is not None and dotted_name(reduced) in filled:
                    return True
        return False

    def matches(self, analysis: ScriptAnalysis) -> Iterator[Match]:
        for loader in analysis.loader_calls:
            if loader not in loader_facts(analysis).evaluation_loaders or not analysis.has_distributed_sampler(loader):
                continue
            loops = [loop.loop for loop in analysis.loader_loops if loader in loop.loader_calls]
            if not all(self._reduced(analysis, loop) for loop in loops):
                yield Match(
                    loader,
                    "evaluation DataLoader sharded with a DistributedSampler, but its metrics are not reduced across "
                    "ranks: each rank reports the metric of its own shard only",
                    fixable=False,
                )
                continue
            samplers = [o for o in analysis.sampler_origins(loader) if isinstance(o, cst.Call) and analysis.is_call_to(o, names.DISTRIBUTED_SAMPLER)]
            if any(not is_true(getattr(keyword_argument(s, "drop_last"), "value", None)) for s in samplers):
                yield Match(
                    loader,
                    "evaluation DistributedSampler pads the set to a multiple of the world size with repeated samples: "
                    "the reduced metric counts up to N-1 samples twice",
                    fixable=False,
                )
            elif samplers and not _evaluates_the_remainder(analysis):
                yield Match(
                    loader,
                    "evaluation DistributedSampler with drop_last=True leaves up to N-1 samples of the set out: the "
                    "reduced metric never counts them",
                    fixable=False,
                )


def _evaluates_the_remainder(analysis: ScriptAnalysis) -> bool:
    """Whether the program evaluates the samples a ``drop_last=True`` sampler leaves out on their own (the
    ImageNet example's ``Subset(dataset, range(len(sampler) * world_size, len(dataset)))``)."""
    return any(
        "sampler" in code_of(call) for module in analysis.shared.analyses for call in module.calls_to(names.SUBSET)
    )


def _reduced_in_place(analysis: ScriptAnalysis, reduction: cst.Call) -> cst.BaseExpression | None:
    """The value a reduction leaves reduced in place: the receiver of a method of the program that reduces
    its object (``top1.all_reduce()``), or the tensor a collective reduces (``dist.all_reduce(t)``); ``None``
    for a reduction that hands back its result (``runtime.reduce_mean(x)``, a helper that evaluates and reduces)."""
    if type(reduction.func) is cst.Attribute and analysis.reduces_in_place(reduction):
        return reduction.func.value  # type: ignore[attr-defined]
    if reduction.args and analysis.is_call_to(reduction, names.TORCH_COLLECTIVES):
        return reduction.args[0].value
    return None


def _is_assign_line(statement: cst.BaseStatement) -> bool:
    return isinstance(statement, cst.SimpleStatementLine) and isinstance(statement.body[0], cst.Assign)
