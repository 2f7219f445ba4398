"""DDP040 unsharded-training-data."""

from __future__ import annotations

from typing import Iterator

import libcst as cst

from . import names
from .analysis import ScriptAnalysis, walk
from .analysis.ranks import Kind, rank_facts
from .base import Example, Match, Phase, Rule, Severity, Valid


def _loop_around(analysis: ScriptAnalysis, node: cst.CSTNode) -> bool:
    """Whether a loop of the node's own function (or of the module's top level) runs it."""
    for ancestor in analysis.ancestors(node):
        kind = type(ancestor)
        if kind is cst.For or kind is cst.While:
            return True
        if kind is cst.FunctionDef or kind is cst.ClassDef or kind is cst.Lambda:
            return False
    return False


def _in_a_loop(analysis: ScriptAnalysis, node: cst.CSTNode) -> bool:
    """Whether the node runs once per iteration of a loop: a loop around it in its function, or around
    a call of its function (one level of calls: ``train_step(batch)`` in the epoch loop)."""
    if _loop_around(analysis, node):
        return True
    function = analysis.enclosing_function(node)
    return function is not None and any(_loop_around(analysis, call) for call in analysis.callers_of(function))


def _draws_per_rank(analysis: ScriptAnalysis) -> bool:
    """Whether the program already makes each rank's data its own: a random seed that flows from the rank
    (``torch.manual_seed(1337 + rank)``, ``torch.Generator().manual_seed(rank)``) in any of its modules, or
    an index or slice computed from it (``data[rank::world_size]``) in the module that trains. (Only seed
    calls are looked at in the other modules: a program may hold a hundred of them.)"""
    for module in analysis.shared.analyses:
        seeds = [call for call in module.calls if "seed" in _callee(call) and call.args]
        if seeds:
            facts = rank_facts(module)
            if any(facts.kind(arg.value) is Kind.RANK for call in seeds for arg in call.args):
                return True
    facts = rank_facts(analysis)
    return any(
        type(node) is cst.SubscriptElement and facts.kind(node.slice) is Kind.RANK
        for node in walk(analysis.module)
        if type(node) is cst.SubscriptElement and not isinstance(getattr(node.slice, "value", None), (cst.Integer, cst.SimpleString))
    )


def _callee(call: cst.Call) -> str:
    """The last name of what a call calls (``manual_seed`` for ``torch.Generator().manual_seed(...)``)."""
    func = call.func
    return func.attr.value if type(func) is cst.Attribute else func.value if type(func) is cst.Name else ""


class UnshardedTrainingData(Rule):
    """Give every process its own share of the training data when batches do not come from a ``DataLoader``.

    What it finds: a training loop (``backward()`` called once per iteration of a loop) in a program that
    builds no ``DataLoader`` at all: its batches come from something else (``get_batch()`` drawing random
    offsets into a tensor or a memory-mapped file, slices of a tensor, a data set's own iterator), and
    nothing in the program draws or indexes them by rank (a seed or an index computed from the rank).

    Why it is a problem: the migration shards training data by giving each ``DataLoader`` a
    ``DistributedSampler``; batches made any other way are left as they are. Every process then trains on
    the same batches (random draws seeded alike on every rank are the same draws): the job runs N times the
    work of one process for the progress of one, and a learning rate or a step count tuned for N times the
    data is wrong.

    What a human must do: give each rank its own batches: draw from a generator seeded with the rank
    (``torch.manual_seed(seed + runtime.rank())``, as nanoGPT's ``seed_offset`` does), take every N-th
    sample starting at ``runtime.rank()``, or build a ``DataLoader`` over the data so that the migration
    can shard it.
    """

    code = "DDP040"
    name = "unsharded-training-data"
    phase = Phase.SAMPLERS
    severity = Severity.WARNING
    triggers = (".backward(",)
    needs_names = (names.TRAINING_SCRIPT_NAMES,)  # a backward() call, not the word in a docstring
    manual_fix = "give each rank its own batches: seed the draws with runtime.rank(), or build a DataLoader the migration can shard"
    examples = (
        Example(
            before="""\
import torch

data = torch.randint(0, 50, (10_000,))
torch.manual_seed(1337)


def get_batch(block, batch_size):
    starts = torch.randint(len(data) - block, (batch_size,))
    x = torch.stack([data[i : i + block] for i in starts])
    y = torch.stack([data[i + 1 : i + 1 + block] for i in starts])
    return x, y


for step in range(100):
    x, y = get_batch(8, 12)
    loss = model(x, y)
    loss.backward()
    optimizer.step()
""",
        ),
        Valid(
            """\
import torch
from torch.utils.data import DataLoader

loader = DataLoader(dataset, batch_size=32, shuffle=True)
for x, y in loader:
    loss = model(x, y)
    loss.backward()
    optimizer.step()
"""
        ),
        Valid(
            """\
import torch
from ddp_migrate import runtime

torch.manual_seed(1337 + runtime.rank())  # each rank draws its own batches
for step in range(100):
    x = torch.randn(32, 4)
    loss = model(x).sum()
    loss.backward()
    optimizer.step()
"""
        ),
        Valid(
            """\
import torch

# one step, no loop: a test of the model, not a training loop
loss = model(torch.randn(2, 4)).sum()
loss.backward()
"""
        ),
    )

    def matches(self, analysis: ScriptAnalysis) -> Iterator[Match]:
        if not analysis.is_entry or analysis.program_loader_calls:
            return
        for call in analysis.backward_calls:
            if _in_a_loop(analysis, call) and not _draws_per_rank(analysis):
                yield Match(
                    call,
                    "training batches here come from no DataLoader, which the migration cannot shard: every process "
                    "trains on the same data unless each rank draws its own (seed with runtime.rank(), or take every "
                    "N-th sample)",
                    fixable=False,
                )
                return
