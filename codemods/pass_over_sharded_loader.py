"""DDP045 pass-over-sharded-loader."""

from __future__ import annotations

from typing import Iterator

import libcst as cst

from . import names
from .analysis import ScriptAnalysis, argument, walk
from .analysis.batchnorm import may_hold_batchnorm
from .analysis.loaders import loader_facts
from .analysis.script import COMPREHENSIONS
from .base import Example, Match, Phase, Rule, Severity, Valid


class PassOverShardedLoader(Rule):
    """Compute data statistics over the whole training set, not over this process's shard.

    What it finds: a loop (or comprehension) over a training loader that a ``DistributedSampler`` shards
    which does not train: a pass that computes the inputs' mean and standard deviation, class weights or
    counts before training, or the training set's accuracy; and torch's own such pass,
    ``torch.optim.swa_utils.update_bn(loader, swa_model)``.

    Why it is a problem: the original's pass saw the whole training set. Sharded, each process sees only
    its share, so every rank normalises with other statistics, weighs the classes differently, or reports
    its shard's accuracy (a trial: a class that sat at even positions only got the weight ``inf`` on one
    rank, and the final weights changed). Nothing fails: the numbers are quietly different.

    What a human must do: iterate the data set itself for such a pass (a loader without the
    ``DistributedSampler``), or combine what each rank computes (``runtime.reduce_sum`` of the sums and
    counts, ``runtime.weighted_mean``) before using it.
    """

    code = "DDP045"
    name = "pass-over-sharded-loader"
    phase = Phase.OUTPUT
    severity = Severity.WARNING
    triggers = ("DistributedSampler", "world_size")  # (``update_bn`` is checked where the loader is sharded; a sampler sharding by hand reads the world size)
    requires = names.TRAINING_STEP_WORDS
    manual_fix = "iterate the data set without the DistributedSampler for this pass, or reduce what it computes across ranks"
    examples = (
        Example(
            before="""\
from torch.utils.data import DataLoader, DistributedSampler

loader = DataLoader(train_set, batch_size=32, sampler=DistributedSampler(train_set))
counts = torch.zeros(10)
for x, y in loader:
    counts += torch.bincount(y, minlength=10)
criterion = nn.CrossEntropyLoss(weight=counts.sum() / counts)
for x, y in loader:
    criterion(model(x), y).backward()
""",
        ),
        # torch's own pass for an averaged model's BatchNorm statistics (a trial's SWA: the ranks' statistics differed).
        Example(
            before="""\
from torch.optim.swa_utils import AveragedModel, update_bn
from torch.utils.data import DataLoader, DistributedSampler

loader = DataLoader(train_set, batch_size=32, sampler=DistributedSampler(train_set))
swa = AveragedModel(model)
for x, y in loader:
    criterion(model(x), y).backward()
swa.update_parameters(model)
update_bn(loader, swa)
""",
        ),
        Valid(
            """\
from torch.utils.data import DataLoader, DistributedSampler

loader = DataLoader(train_set, batch_size=32, sampler=DistributedSampler(train_set))
val_loader = DataLoader(val_set, batch_size=64)
for x, y in loader:
    criterion(model(x), y).backward()
with torch.no_grad():
    for x, y in val_loader:
        print(criterion(model(x), y))
"""
        ),
    )

    def matches(self, analysis: ScriptAnalysis) -> Iterator[Match]:
        facts = loader_facts(analysis)
        # (a loader whose sampler draws this rank's share by hand is as sharded: a rank-aware batch sampler)
        sharded = {loader for loader in facts.training_loaders if analysis.has_distributed_sampler(loader) or facts.sharded_by_hand(loader)}
        if not sharded:
            return
        for loop in analysis.loader_loops:
            if loop.trains or not (loop.loader_calls & sharded) or _peeks(loop.loop) or _in_generator(analysis, loop.loop):
                continue
            yield Match(loop.loop.iter, MESSAGE)
        for node in analysis.preorder:
            if type(node) not in COMPREHENSIONS:
                continue
            element = node.elt if type(node) is not cst.DictComp else node.value  # type: ignore[attr-defined]
            iterated = node.for_in.iter  # type: ignore[attr-defined]
            outer = analysis.parent(node)
            if isinstance(outer, cst.For) and outer.iter is node and analysis.reaches_backward(outer):
                continue  # ``for x, y in (b for b in loader if ...)``: the loop around it trains
            if any(o in sharded for o in analysis.origins(iterated)) and not analysis.reaches_backward(element):
                yield Match(iterated, MESSAGE)
        for call in analysis.calls:
            # ``it = iter(loader)`` then ``next(it)`` in a ``while True`` loop that does not train; ``list(loader)``,
            # ``map(lambda b: b[1], loader)``: passes written without a ``for`` over the loader
            passed = _pass_without_a_for(analysis, call, sharded)
            if passed is not None:
                yield Match(passed, MESSAGE)
        for call in analysis.calls_to(LIBRARY_PASSES):
            # ``update_bn(train_loader, swa_model)``: torch's own pass over the loader, for BatchNorm statistics
            given = argument(call, UPDATE_BN_PARAMETERS, "loader")
            averaged = argument(call, UPDATE_BN_PARAMETERS, "model")
            if averaged is not None and not may_hold_batchnorm(analysis, averaged.value):
                continue  # (no BatchNorm layer to update: update_bn does nothing)
            if given is not None and any(o in sharded for o in analysis.origins(given.value)):
                yield Match(given.value, UPDATE_BN_MESSAGE)


#: Library functions that go over a loader they are given, computing something from the data (not training).
LIBRARY_PASSES = frozenset({"torch.optim.swa_utils.update_bn"})
UPDATE_BN_PARAMETERS = ("loader", "model", "device")
UPDATE_BN_MESSAGE = (
    "update_bn() recomputes the BatchNorm statistics over this loader, sharded: each rank's averaged model "
    "gets the statistics of its own share, and rank 0 saves those of half the data; pass a loader of the whole "
    "training set (without the DistributedSampler)"
)


MESSAGE = (
    "this pass over the training loader does not train: once the loader is sharded it sees only this "
    "process's share, so what it computes (statistics, class weights, a training-set metric) differs between "
    "ranks and from the original's; iterate the data set itself or reduce the result across ranks"
)


#: Builtins that go over every batch of a loader they are given.
_WHOLE_PASSES = frozenset({"builtins.list", "builtins.tuple", "builtins.map", "builtins.sorted"})


def _pass_without_a_for(analysis: ScriptAnalysis, call: cst.Call, sharded: set[cst.Call]) -> cst.BaseExpression | None:
    """The loader a call goes over where no training runs: ``next(it)`` of ``it = iter(loader)`` in a loop that
    does not reach ``backward()`` (a single ``next(iter(loader))`` outside a loop peeks at one batch), or
    ``list(loader)``, ``map(f, loader)`` outside a loop that trains over their result."""
    if analysis.is_call_to(call, {"builtins.next"}) and call.args:
        loop = analysis.nearest_loop(call)
        if loop is None or analysis.reaches_backward(loop):
            return None
        drawn = call.args[0].value
        iterators = [o for o in analysis.origins(drawn) if type(o) is cst.Call and analysis.is_call_to(o, {"builtins.iter"})]  # type: ignore[arg-type]
        for iterator in iterators:
            if iterator.args and any(o in sharded for o in analysis.origins(iterator.args[0].value)):  # type: ignore[attr-defined]
                return iterator.args[0].value  # type: ignore[attr-defined]
        return None
    if not analysis.is_call_to(call, _WHOLE_PASSES):
        return None
    given = [a.value for a in call.args if a.keyword is None]
    loaders = [g for g in given if any(o in sharded for o in analysis.origins(g))]
    if not loaders:
        return None
    outer = analysis.parent(call)
    if isinstance(outer, cst.For) and outer.iter is call and analysis.reaches_backward(outer):
        return None  # ``for x, y in list(loader):`` trains
    return loaders[0]


def _peeks(loop: cst.For) -> bool:
    """``for batch in loader: ...; break`` at the loop's own level: a look at one batch (its shape)."""
    body = loop.body
    return isinstance(body, cst.IndentedBlock) and any(
        isinstance(stmt, cst.SimpleStatementLine) and any(isinstance(small, cst.Break) for small in stmt.body)
        for stmt in body.body
    ) and not any(isinstance(n, (cst.For, cst.While)) for n in walk(body))


def _in_generator(analysis: ScriptAnalysis, loop: cst.For) -> bool:
    """Whether the loop is in a generator (``def log_every(iterable): for obj in iterable: yield obj``): it
    hands the batches on to the loop that consumes it, which trains."""
    function = analysis.enclosing_function(loop)
    return function is not None and analysis.is_generator(function)
