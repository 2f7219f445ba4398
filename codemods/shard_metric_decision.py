"""DDP041 shard-metric-decision."""

from __future__ import annotations

from typing import Iterator

import libcst as cst

from . import names
from .analysis import ScriptAnalysis, call_method_name, dotted_name, leaves_early, walk
from .analysis.script import subscript_key
from .analysis.per_rank import per_rank_values
from .base import Example, Match, Phase, Rule, Severity, Valid
from .edits import code_of


class ShardMetricDecision(Rule):
    """Take the decisions of a training loop on values every rank agrees on, not on this rank's share of the data.

    What it finds, in a program whose training data is sharded with a ``DistributedSampler``: a value
    computed from this process's shard (the loss, a running sum of it, an accuracy counted on the training
    batches) that
    - decides whether a training loop goes on: an ``if`` whose branch breaks out, continues, returns,
      raises or exits (early stopping on the training loss, skipping a step on a large loss), or
    - is handed to a scheduler's ``step()`` (``ReduceLROnPlateau.step(train_loss)``).
    A training loop left on this process's clock (``if time.time() - start > budget: break``) is reported
    too: each process reaches the limit at its own step.

    Why it is a problem: the original computed the value on all the data; after the migration each rank
    computes it on its own shard, and the ranks disagree. One rank leaves the loop while the others wait in
    DDP's next gradient all-reduce: the job hangs (NCCL) or fails with a closed connection (gloo). A
    scheduler stepped on different numbers gives the ranks different learning rates, and their weights
    drift apart without an error. A value from an evaluation loader that is left whole is the same on
    every rank and is not reported.

    What a human must do: reduce the value across ranks before deciding on it, on every rank (it is a
    collective): ``train_loss = runtime.reduce_mean(train_loss)`` (or ``runtime.weighted_mean(total,
    count)``), then step the scheduler or test for early stopping. The tool does not insert the reduction:
    where it must go (after the epoch's sum, before the test) and whether a mean is the right reduction
    are the program's choice.
    """

    code = "DDP041"
    name = "shard-metric-decision"
    phase = Phase.OUTPUT
    severity = Severity.ERROR
    triggers = ("DistributedSampler",)
    manual_fix = "reduce the value across ranks (runtime.reduce_mean) on every rank before deciding on it"
    examples = (
        Example(
            before="""\
from torch.utils.data import DataLoader, DistributedSampler

loader = DataLoader(train_set, batch_size=32, sampler=DistributedSampler(train_set))
best, bad = float("inf"), 0
for epoch in range(100):
    train_loss = 0.0
    for x, y in loader:
        loss = criterion(model(x), y)
        loss.backward()
        optimizer.step()
        train_loss += loss.item()
    scheduler.step(train_loss)
    if train_loss > best - 1e-4:
        bad += 1
        if bad >= 3:
            break
    best = min(best, train_loss)
""",
        ),
        Valid(
            """\
from ddp_migrate import runtime
from torch.utils.data import DataLoader, DistributedSampler

loader = DataLoader(train_set, batch_size=32, sampler=DistributedSampler(train_set))
for epoch in range(100):
    train_loss = 0.0
    for x, y in loader:
        loss = criterion(model(x), y)
        loss.backward()
        optimizer.step()
        train_loss += loss.item()
    train_loss = runtime.reduce_mean(train_loss)
    scheduler.step(train_loss)
    if train_loss < 0.01:
        break
    if evaluate(model, val_loader) > 10:  # the whole validation set on every rank
        break
"""
        ),
    )

    def matches(self, analysis: ScriptAnalysis) -> Iterator[Match]:
        # The decisions first: most programs take none, and then the per-rank values are not solved at all.
        exits = [
            branch
            for branch in analysis.ifs
            if analysis.nearest_loop(branch) is not None
            and (leaves_early(branch.body) or (branch.orelse is not None and leaves_early(branch.orelse)))
        ]
        # ``scheduler.step(val_loss)``: a library's step (a program's own ``step`` method is no scheduler);
        # and a function of the program that sets a learning rate (``adjust_lr(loss)``, ``__call__`` of a
        # hand-written plateau rule: ``group["lr"] *= 0.5``).
        setters: dict[cst.FunctionDef | None, bool] = {None: False}
        steps = []
        for call in analysis.calls:
            if not call.args:
                continue
            target = analysis.call_target(call)
            if target not in setters:
                setters[target] = _sets_learning_rate(target)
            if (call_method_name(call) == "step" and target is None) or setters[target]:
                steps.append(call)
        reported: set[cst.If] = set()
        for branch in exits:
            if not _leaves_the_loop(branch):
                continue  # ``if time.time() - last_log < 5: continue``: a skipped log line, no step
            clock = _clock_in(analysis, branch.test)
            loop = analysis.nearest_loop(branch)
            if clock is not None and loop is not None and analysis.reaches_backward(loop):
                reported.add(branch)
                yield Match(
                    branch.test,
                    f"`{code_of(branch.test)}` decides on {clock}, this process's own clock: the ranks reach the limit "
                    "at different steps and leave the loop apart (the others then wait in DDP's next all-reduce and "
                    "the job hangs); decide on rank 0's clock and share the decision (runtime.reduce_sum of a flag, "
                    "or dist.broadcast_object_list)",
                    fixable=False,
                )
        values = per_rank_values(analysis) if exits or steps else None
        if values is None:
            return
        for branch in exits:  # (in source order: an outer decision comes before the ones inside it)
            if branch in reported:
                continue
            shown = values.mention(branch.test)
            # A decision inside a reported one on what that one sets (``if loss > best: bad += 1; if bad >= 2:
            # break``) follows from it: once the outer test reads a reduced value, so does the inner one.
            if shown is not None and not any(a in reported and _assigns(a, shown) for a in analysis.ancestors(branch)):
                reported.add(branch)
                yield Match(
                    branch.test,
                    f"`{code_of(branch.test)}` decides on {shown}, computed on this rank's shard of the data only: the "
                    "ranks may decide differently and leave the loop apart (the others then wait in DDP's next "
                    "all-reduce and the job hangs); reduce it across ranks first (runtime.reduce_mean)",
                    fixable=False,
                )
        for call in steps:
            shown = next((found for arg in call.args if (found := values.mention(arg.value))), None)
            if shown is not None:
                yield Match(
                    call,
                    f"{code_of(call.func)}() steps on {shown}, computed on this rank's shard of the data only: the "
                    "ranks' learning rates drift apart; reduce it across ranks first (runtime.reduce_mean)",
                    fixable=False,
                )


def _assigns(branch: cst.CSTNode, name: str) -> bool:
    """Whether a statement assigns the (dotted) name somewhere inside it."""
    for node in walk(branch):
        if isinstance(node, (cst.AugAssign, cst.AnnAssign)) and dotted_name(node.target) == name:
            return True
        if isinstance(node, cst.Assign) and any(dotted_name(t.target) == name for t in node.targets):
            return True
    return False


def _sets_learning_rate(function: cst.FunctionDef | None) -> bool:
    """Whether a function of the program writes a learning rate (``group["lr"] = ...``, ``*= 0.5``)."""
    if function is None:
        return False
    for node in walk(function.body):
        targets = (
            [node.target] if isinstance(node, cst.AugAssign) else [t.target for t in node.targets] if isinstance(node, cst.Assign) else []
        )
        for target in targets:
            if isinstance(target, cst.Subscript) and subscript_key(target) == "lr":
                return True
    return False


def _clock_in(analysis: ScriptAnalysis, test: cst.BaseExpression, depth: int = 2) -> str | None:
    """How a test reads a clock (:data:`names.CLOCKS`): the call itself, or a name assigned from one (``elapsed =
    time.time() - start``), a couple of assignments deep; ``None`` where it reads none."""
    for node in walk(test):
        if type(node) is cst.Call and analysis.is_call_to(node, names.CLOCKS):  # type: ignore[arg-type]
            return f"{code_of(node)}"
        if depth > 0 and type(node) is cst.Name and not _shared(analysis, node.value):  # type: ignore[attr-defined]
            for value in analysis.flows_into(node, node.value):  # type: ignore[attr-defined]
                if isinstance(value, cst.BaseExpression) and _clock_in(analysis, value, depth - 1) is not None:
                    return f"`{node.value}`"  # type: ignore[attr-defined]
    return None


def _leaves_the_loop(branch: cst.If) -> bool:
    """Whether the ``if`` (either branch) breaks out of its loop, returns or raises (a ``continue`` only skips
    the rest of one iteration)."""
    for body in (branch.body, branch.orelse):
        if body is not None and any(type(n) in (cst.Break, cst.Return, cst.Raise) for n in walk(body)):
            return True
    return False


def _shared(analysis: ScriptAnalysis, name: str) -> bool:
    """Whether a collective of the program takes the name (``dist.all_reduce(stop)``): its value is then
    every rank's."""
    return any(
        analysis.is_call_to(call, names.COLLECTIVES) and any(n.value == name for arg in call.args for n in walk(arg.value) if type(n) is cst.Name)  # type: ignore[attr-defined]
        for call in analysis.calls
    )
