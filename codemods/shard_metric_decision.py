"""DDP041 shard-metric-decision."""

from __future__ import annotations

from typing import Callable, Iterator

import libcst as cst

from . import names
from .analysis import ScriptAnalysis, call_method_name, dotted_name, keyword_argument, leaves_early, walk
from .analysis.script import (
    PROCESS_EXITS,
    backward_loss,
    exits_with_success,
    is_parameter_group,
    may_set_a_learning_rate,
    sets_learning_rate,
    subscript_key,
    unwrap_iterable,
)
from .analysis.per_rank import PerRankValues, per_rank_values
from .analysis.ranks import Kind, calls_feeding_the_losses, rank_facts, seeds_alike
from .base import Example, Match, Phase, Rule, Severity, Valid
from .edits import code_of


class ShardMetricDecision(Rule):
    """Take the decisions of a training loop on values every rank agrees on, not on this rank's share of the data.

    What it finds, in a program whose training data is sharded with a ``DistributedSampler``: a value
    computed from this process's shard (the loss, a running sum of it, an accuracy counted on the training
    batches) that
    - decides whether a training loop goes on: an ``if`` whose branch breaks out, continues, returns or
      exits with success (early stopping on the training loss, skipping a step on a large loss; a ``raise``
      or a failing exit stops the whole job, as it stopped the original), or
    - ends the process with success (``if acc >= target: sys.exit(0)`` in a helper the training loop
      calls), or keeps a
      ``while`` loop around the training going (``while train_loss > target:``),
    - decides, where the other branch does not do the same, whether a step runs ``backward()`` or the
      optimizer's ``step()`` (``if loss.item() < limit: loss.backward()``, a step taken once the tokens
      counted on the batches pass a threshold, hard examples replayed once ``len(hard)`` of them are kept),
      here or through the program's functions; whether the learning rate changes (a plateau rule written
      out, a learning-rate scheduler stepped) or which ``DataLoader`` the training goes on with (a
      curriculum), or
    - is handed to a scheduler's ``step()`` (``ReduceLROnPlateau.step(train_loss)``).
    A branch only some ranks take (``if rank == 0:``) is reported too, whatever the value it then decides
    on, where it leaves the training loop (``... break``), runs ``backward()``, steps the optimizer or the
    learning-rate scheduler, sets a learning rate, or loads weights into the model after the wrap. A training loop left on this process's clock (``if time.time() - start > budget: break``) is reported
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
    # A sharded loader, or draws a program seeds from the rank (``torch.manual_seed(1337 + rank)``).
    triggers = ("DistributedSampler", "manual_seed")
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
        # A reduced loss, but the loop is left inside rank 0's branch: rank 1 waits in the next all-reduce.
        Example(
            before="""\
import torch.distributed as dist
from torch.utils.data import DataLoader, DistributedSampler

loader = DataLoader(train_set, batch_size=32, sampler=DistributedSampler(train_set))
for epoch in range(100):
    for x, y in loader:
        loss = criterion(model(x), y)
        loss.backward()
        optimizer.step()
    dist.all_reduce(loss)
    if dist.get_rank() == 0:
        print(f"loss {loss.item():.4f}")
        if loss.item() < 0.01:
            break
""",
        ),
        # Rank 0 alone loads the weights after the wrap, and steps the scheduler: the ranks train apart.
        Example(
            before="""\
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler

loader = DataLoader(train_set, batch_size=32, sampler=DistributedSampler(train_set))
model = DDP(net)
if dist.get_rank() == 0:
    model.module.load_state_dict(torch.load("last.pt"))
scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1)
for epoch in range(10):
    for x, y in loader:
        criterion(model(x), y).backward()
        optimizer.step()
    if dist.get_rank() == 0:
        print(scheduler.get_last_lr())
        scheduler.step()
""",
        ),
        # A step taken on a count of this rank's batches: the ranks step apart and their weights drift.
        Example(
            before="""\
from torch.utils.data import DataLoader, DistributedSampler

loader = DataLoader(train_set, batch_size=32, sampler=DistributedSampler(train_set))
tokens = 0
for x, y in loader:
    criterion(model(x), y).backward()
    tokens += int((y != PAD).sum())
    if tokens >= 4096:
        optimizer.step()
        optimizer.zero_grad()
        tokens = 0
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
        exiting_ifs = _ifs_ending_the_process(analysis)
        exits = [
            branch
            for branch in analysis.ifs
            if (analysis.nearest_loop(branch) is not None and (_goes_on_without(branch.body) or _goes_on_without(branch.orelse)))
            or branch in exiting_ifs  # (in a helper the training loop calls: ``if acc >= target: sys.exit(0)``)
        ]
        # ``scheduler.step(val_loss)``: a library's step (a program's own ``step`` method is no scheduler);
        # and a function of the program that sets a learning rate (``adjust_lr(loss)``, ``__call__`` of a
        # hand-written plateau rule: ``group["lr"] *= 0.5``).
        setters: dict[cst.FunctionDef | None, bool] = {None: False}
        sets_lr = may_set_a_learning_rate(analysis)
        steps = []
        for call in analysis.calls:
            if not call.args:
                continue
            target = analysis.call_target(call)
            if target not in setters:
                setters[target] = sets_lr and sets_learning_rate(target)
            if (call_method_name(call) == "step" and target is None and _built_as_lr_scheduler(analysis, call) is not False) or setters[target]:
                steps.append(call)
        reported: set[cst.If] = set()
        facts = rank_facts(analysis)  # (kept with the analysis: asked for once per file)
        for branch in exits:
            if not _leaves_the_loop(branch):
                continue  # ``if time.time() - last_log < 5: continue``: a skipped log line, no step
            loop = analysis.nearest_loop(branch)
            if (
                loop is not None
                and _leaves_the_loop(branch, raises=False)  # (a raise on one rank stops the job: no hang)
                and analysis.reaches_backward(loop)  # (before the ranks: solving a test costs more than the walk)
                and facts.kind(branch.test) is Kind.RANK
            ):
                reported.add(branch)
                yield Match(
                    branch.test,
                    f"`{code_of(branch.test)}` holds on some ranks only, and inside it the training loop is left: the "
                    "other ranks go on into DDP's next all-reduce and the job hangs; take the decision on every rank "
                    "(a value reduced across ranks is the same everywhere: test it outside the rank's branch)",
                    fixable=False,
                )
                continue
            clock = _clock_in(analysis, branch.test) if _reads_a_clock(analysis) else None
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
        exiting = set(exits)
        gates = {branch: gated for branch in analysis.ifs if branch not in exiting and (gated := _gated_training(analysis, branch, setters))}
        rank_gates = {
            branch: gated
            for branch in analysis.ifs
            if branch not in exiting
            and (gated := _gated_training(analysis, branch, setters, on_rank=True))
            and facts.mentions_rank(branch.test)  # (after: solving the ranks of every test costs more than the walks)
        }
        # ``while train_loss > target:`` around the training: the loop goes on as long as this rank's value says.
        whiles = [node for node in analysis.preorder if type(node) is cst.While and analysis.reaches_backward(node.body)]  # type: ignore[attr-defined]
        for branch, gated in gates.items():  # ``if random.random() < p: extra_step()``, unseeded
            drawn = _drawn_apart(analysis, branch.test)
            if drawn is not None:
                reported.add(branch)
                yield Match(
                    branch.test,
                    f"`{code_of(branch.test)}` decides on {code_of(drawn)}, which each process draws from a random state "
                    f"the ranks do not seed alike, {gated}; seed it alike on every rank, or draw on rank 0 and share the draw",
                    fixable=False,
                )
        for branch, gated in rank_gates.items():  # ``if rank == 0: scheduler.step()``
            if facts.kind(branch.test) is Kind.RANK:
                reported.add(branch)
                yield Match(
                    branch.test,
                    f"`{code_of(branch.test)}` holds on some ranks only, and it decides {gated}; do it on every rank"
                    + (", or before the wrap" if gated is _LOAD else ""),
                    fixable=False,
                )
        # The per-rank values are solved on first need: most decisions are ruled out by cheaper tests first.
        solved: list[PerRankValues | None] = []

        def per_rank() -> PerRankValues | None:
            if not solved:
                solved.append(per_rank_values(analysis))
            return solved[0]

        for branch in analysis.ifs:  # (in source order: an outer decision comes before the ones inside it)
            if branch in reported or (branch not in exiting and branch not in gates):
                continue
            if branch in exiting and branch not in exiting_ifs and not _loop_syncs(analysis, branch):
                continue  # ``x = block(x); if x.abs().mean() < eps: break`` in forward: a loop of no step, no collective
            values = per_rank()
            if values is None:
                return  # (no data is sharded: every rank sees the same)
            shown = values.mention(branch.test)
            # A decision inside a reported one on what that one sets (``if loss > best: bad += 1; if bad >= 2:
            # break``) follows from it: once the outer test reads a reduced value, so does the inner one.
            if shown is None or any(a in reported and _assigns(a, shown) for a in analysis.ancestors(branch)):
                continue
            reported.add(branch)
            if branch in exiting:
                yield Match(
                    branch.test,
                    f"`{code_of(branch.test)}` decides on {shown}, computed on this rank's shard of the data only: the "
                    "ranks may decide differently and leave the loop apart (the others then wait in DDP's next "
                    "all-reduce and the job hangs); reduce it across ranks first (runtime.reduce_mean)",
                    fixable=False,
                )
            else:
                yield Match(
                    branch.test,
                    f"`{code_of(branch.test)}` decides on {shown}, computed on this rank's shard of the data only, "
                    f"{gates[branch]}; decide on a value reduced across ranks (runtime.reduce_sum, runtime.reduce_mean)",
                    fixable=False,
                )
        yield from _state_decisions(analysis, reported, exiting, per_rank)
        values = per_rank() if whiles or steps else None
        if values is None:
            return
        for loop in whiles:
            shown = values.mention(loop.test)  # type: ignore[attr-defined]
            if shown is not None:
                yield Match(
                    loop.test,  # type: ignore[attr-defined]
                    f"`{code_of(loop.test)}` decides on {shown}, computed on this rank's shard of the data only, whether "  # type: ignore[attr-defined]
                    "the training goes on: the ranks may decide differently and leave the loop apart (the others then "
                    "wait in DDP's next all-reduce and the job hangs); reduce it across ranks first (runtime.reduce_mean)",
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


def _state_decisions(
    analysis: ScriptAnalysis, reported: set[cst.If], exiting: set[cst.If], per_rank: Callable[[], PerRankValues | None]
) -> Iterator[Match]:
    """Decisions on a rank's shard that set a value the training reads next (a curriculum's ``use_big = True`` or
    ``stage += 1``, ``lr = 0.05 if loss < t else 0.1``): which loader it iterates or builds, a factor of its loss,
    a learning rate. Ranks that decide differently train differently, and on different numbers of batches the
    job hangs."""
    candidates: list[tuple[cst.CSTNode, cst.BaseExpression, set[str]]] = []
    for branch in analysis.ifs:
        if branch in reported or branch in exiting:
            continue
        loop = analysis.nearest_loop(branch)
        if loop is None or not analysis.reaches_backward(loop):
            continue
        sides = [branch.body] if branch.orelse is None else [branch.body, branch.orelse]
        assigned = {name for side in sides for name in _names_assigned(analysis, side)}
        if assigned:
            candidates.append((branch, branch.test, assigned))
    for node in analysis.preorder:
        if type(node) is cst.Assign and type(node.value) is cst.IfExp:  # type: ignore[attr-defined]
            loop = analysis.nearest_loop(node)
            targets = {name for t in node.targets if (name := dotted_name(t.target)) is not None}  # type: ignore[attr-defined]
            if loop is not None and targets and analysis.reaches_backward(loop):
                candidates.append((node, node.value.test, targets))  # type: ignore[attr-defined]
    if not candidates:
        return
    for decision, test, assigned in candidates:
        read = _read_by_the_training(analysis, decision, assigned)
        if read is None:
            continue
        values = per_rank()
        if values is None:
            return
        shown = values.mention(test)
        if shown is None:
            continue
        name, how = read
        yield Match(
            test,
            f"`{code_of(test).strip()}` decides on {shown}, computed on this rank's shard of the data only, the value of "
            f"{name}, which {how}: ranks that decide differently train differently (on different numbers of batches "
            "the job hangs); decide on a value reduced across ranks (runtime.reduce_sum, runtime.reduce_mean)",
            fixable=False,
        )


def _names_assigned(analysis: ScriptAnalysis, side: cst.CSTNode) -> set[str]:
    """The dotted names a branch assigns (``use_big = True``, ``stage += 1``, ``self.stage = 2``)."""
    found: set[str] = set()
    for node in analysis.nodes_below(side):
        if type(node) is cst.Assign:
            found.update(name for t in node.targets if (name := dotted_name(t.target)) is not None)  # type: ignore[attr-defined]
        elif type(node) is cst.AugAssign and (name := dotted_name(node.target)) is not None:  # type: ignore[attr-defined]
            found.add(name)
    return found


def _read_by_the_training(analysis: ScriptAnalysis, decision: cst.CSTNode, names_: set[str]) -> tuple[str, str] | None:
    """Where the training reads one of the names the decision sets, in the function around it: in a loader it
    builds or the loader a training loop iterates, in what feeds its loss, or in a learning rate it writes; the
    name and what it decides."""
    function = analysis.enclosing_function(decision)
    scope = function if function is not None else analysis.module
    training_loops = [loop for loop in analysis.for_loops if analysis.is_inside(loop, scope) and analysis.reaches_backward(loop)]
    iterated = {name for loop in training_loops if (name := dotted_name(unwrap_iterable(loop.iter))) is not None}
    feeding: frozenset[cst.Call] | None = None
    for node in analysis.nodes_below(scope):
        if type(node) not in (cst.Name, cst.Attribute) or dotted_name(node) not in names_ or analysis.is_inside(node, decision):  # type: ignore[arg-type]
            continue
        name = dotted_name(node)  # type: ignore[arg-type]
        if isinstance(analysis.parent(node), (cst.AssignTarget, cst.Attribute)) or type(analysis.parent(node)) is cst.AugAssign:
            continue
        for ancestor in analysis.ancestors(node):
            if ancestor is scope:
                break
            kind = type(ancestor)
            if kind is cst.Call and ancestor in analysis.loader_calls:
                return name, "the training's DataLoader is built from"  # type: ignore[return-value]
            if kind is cst.For and analysis.is_inside(node, ancestor.iter) and ancestor in training_loops:  # type: ignore[attr-defined]
                return name, "chooses the data the training loop iterates"  # type: ignore[return-value]
            if kind is cst.Assign:
                if any(dotted_name(t.target) in iterated for t in ancestor.targets):  # type: ignore[attr-defined]
                    return name, "chooses the loader the training loop iterates"  # type: ignore[return-value]
                if any(
                    type(t.target) is cst.Subscript and subscript_key(t.target) == "lr" and is_parameter_group(scope, t.target.value)  # type: ignore[attr-defined]
                    for t in ancestor.targets  # type: ignore[attr-defined]
                ):
                    return name, "sets the learning rate"  # type: ignore[return-value]
            if kind is cst.Call:
                if feeding is None:
                    feeding = calls_feeding_the_losses(analysis)
                if ancestor in feeding and any(analysis.is_inside(node, loop) for loop in training_loops):
                    return name, "the training loss is computed with"  # type: ignore[return-value]
    return None


def _loop_syncs(analysis: ScriptAnalysis, branch: cst.If) -> bool:
    """Whether the loop a decision leaves runs something every rank must run alike: a training step, a
    collective, or a forward of a DDP model (which broadcasts its buffers); leaving a loop of none of them apart
    (a model's adaptive depth over its layers) keeps the ranks together."""
    loop = analysis.nearest_loop(branch)
    if loop is None or analysis.reaches_backward(loop):
        return True
    synced = analysis.derived(
        "calls every rank runs alike",
        lambda module: [c for m in module.shared.analyses for c in m.calls_to(names.COLLECTIVES)] + list(module.program_ddp_forward_calls),
    )
    return analysis.reaches(loop, synced)


#: What a branch of a training program may do on one side of a decision only, and what follows when the
#: ranks decide differently (:func:`_gated_training`).
_BACKWARD = "whether this step runs backward(): ranks that decide differently run DDP's gradient all-reduce a different number of times (the job hangs)"
_STEP = "whether the optimizer steps: ranks that decide differently step at different times and their weights drift apart without an error"
_LEARNING_RATE = "whether the learning rate changes: ranks that decide differently train with different learning rates and their weights drift apart without an error"
_LOADER = "which data the training goes on with: ranks that decide differently shard different data (the job hangs when the numbers of batches differ)"
#: Collectives that hand rank 0's values to every rank.
_BROADCASTS = names.distributed("broadcast") | names.distributed("broadcast_object_list") | frozenset({"torch.nn.parallel.distributed._sync_module_states"})
_SCHEDULER = "whether the learning-rate scheduler steps: the ranks train with different learning rates and their weights drift apart without an error"
_SAVE = "whether a checkpoint is saved (a best model kept): rank 0, which writes it, now decides on its own shard, where the original decided on the whole data"
_SAVE_AT_A_BARRIER = (
    "whether a checkpoint is saved with runtime.save, which every rank must reach (it ends at a barrier): ranks "
    "that decide differently wait there for each other and the job hangs; rank 0 also decides on its own shard, "
    "where the original decided on the whole data"
)
_SAVES = names.TORCH_SAVE | names.RUNTIME_SAVE
_LOAD = "whether the model's weights are loaded, after the wrap: DDP copied rank 0's weights to every rank when it wrapped the model, so the ranks that skip this keep theirs and train apart"


def _gated_training(
    analysis: ScriptAnalysis, branch: cst.If, setters: dict[cst.FunctionDef | None, bool], on_rank: bool = False
) -> str | None:
    """What of the training the ``if`` does on one side only (``None``: both sides alike, or nothing of it):
    run ``backward()`` or an optimizer step (here or through the program's functions), set a learning rate
    or step a scheduler, or build a ``DataLoader`` (of the training, or one it trains on next). ``on_rank``: the test is the rank, and rank 0's own work (building
    its loaders, evaluating a copy) is what such a branch is for; a scheduler's step and weights loaded into
    the wrapped model are not, nor a backward pass through the wrapped model (written in the branch, or in
    a function the branch hands the wrapped model to)."""
    sides = [branch.body, branch.orelse] if branch.orelse is not None else [branch.body]

    def differs(does: Callable[[cst.CSTNode], bool]) -> bool:
        found = [does(side) for side in sides]
        return found[0] != (found[1] if len(found) > 1 else False)

    backward = analysis.reaching_nodes(analysis.program_backward_calls)
    steps = analysis.reaching_nodes(analysis.program_optimizer_step_calls)
    if not (branch in backward or branch in steps or _may_change_training(analysis, branch)):
        return None  # (the common case, answered without walking the branch)
    if branch in backward and differs(lambda side: side in backward):
        # On a rank's branch, only a backward pass through the wrapped model is DDP's (``if rank == 0:`` over
        # ``model.module`` or a local copy is this rank's own business).
        if not on_rank or differs(lambda side: _runs_the_wrapped_model(analysis, side)):
            return _BACKWARD
    if branch in steps and differs(lambda side: side in steps):
        # On a rank's branch: a step written there, or one of a function the branch hands an optimizer to.
        if not on_rank or differs(lambda side: _steps_an_optimizer(analysis, side)):
            return _STEP
    if not analysis.is_training_script:
        return None

    def writes_learning_rate(side: cst.CSTNode) -> bool:
        if sets_learning_rate(side):  # type: ignore[arg-type]
            return True
        for node in analysis.nodes_below(side):
            if type(node) is cst.Call:
                target = analysis.call_target(node)  # type: ignore[arg-type]
                if target is not None:
                    if target not in setters:
                        setters[target] = sets_learning_rate(target)
                    if setters[target]:
                        return True
        return False

    if may_set_a_learning_rate(analysis) and differs(writes_learning_rate):
        return _LEARNING_RATE
    if differs(lambda side: any(_steps_scheduler(analysis, n) for n in analysis.nodes_below(side))):
        return _SCHEDULER
    if on_rank:
        if differs(lambda side: any(_loads_into_wrapped(analysis, n) for n in analysis.nodes_below(side))) and not any(
            analysis.comes_before(branch, call) for call in analysis.calls_to(_BROADCASTS)
        ):  # (loaded on rank 0, then broadcast to the others: every rank has the weights)
            return _LOAD
        return None
    if analysis.loader_calls and differs(lambda side: any(analysis.is_inside(call, side) for call in analysis.loader_calls)):
        return _LOADER
    saving = analysis.reaching_nodes(analysis.derived("checkpoint_saves", _checkpoint_saves))
    if branch in saving and differs(lambda side: side in saving):
        # Under a test of the rank, or one that reads it (``if rank == 0 and acc > best:``, rank 0 evaluating
        # a copy), the value is that rank's own on purpose, and only it saves.
        facts = rank_facts(analysis)
        # ``if step % save_every == 0:``: a schedule (a test that also reads a metric is still a decision on it)
        periodic = type(branch.test) is cst.Comparison and any(type(n) is cst.Modulo for n in analysis.nodes_below(branch.test))
        if not periodic and not facts.mentions_rank(branch.test) and not any(c.kind is Kind.RANK for c in facts.conditions(branch)):
            at_a_barrier = analysis.reaching_nodes(analysis.derived("saves at a barrier", _saves_at_a_barrier))
            return _SAVE_AT_A_BARRIER if differs(lambda side: side in at_a_barrier) else _SAVE
    return None


def _checkpoint_saves(analysis: ScriptAnalysis) -> list[cst.Call]:
    """The program's ``torch.save`` / ``runtime.save`` calls, and its file copies (``if is_best:
    shutil.copyfile(last, best)``, the ImageNet example's best checkpoint); one list per analysis: the
    reaching nodes are kept per list."""
    return [call for module in analysis.shared.analyses for call in module.calls_to(_SAVES | _FILE_COPIES)]


_FILE_COPIES = frozenset({"shutil.copyfile", "shutil.copy", "shutil.copy2"})


def _saves_at_a_barrier(analysis: ScriptAnalysis) -> list[cst.Call]:
    """The program's ``runtime.save`` calls (a write by rank 0, then a barrier every rank must reach); one list
    per analysis, as :func:`_checkpoint_saves`."""
    return [call for module in analysis.shared.analyses for call in module.calls_to(names.RUNTIME_SAVE)]


#: Draws of torch's process-wide random state (without a ``generator=``, they draw from it).
_TORCH_DRAWS = frozenset({"torch.rand", "torch.randn", "torch.randint", "torch.bernoulli", "torch.multinomial", "torch.normal", "torch.randperm"})


def _drawn_apart(analysis: ScriptAnalysis, test: cst.BaseExpression) -> cst.Call | None:
    """A draw in the test from a process-wide random state (``random``, ``numpy.random``, torch's) that the
    ranks do not seed alike before it (:func:`seeds_alike`): each rank draws its own value."""
    for node in analysis.nodes_below(test):
        if type(node) is not cst.Call:
            continue
        for qualified in analysis.qualified_names(node.func):  # type: ignore[attr-defined]
            state = (
                "random" if qualified.startswith("random.") and qualified.count(".") == 1
                else "numpy" if qualified.startswith("numpy.random.") and qualified.count(".") == 2
                else "torch" if qualified in _TORCH_DRAWS and keyword_argument(node, "generator") is None  # type: ignore[arg-type]
                else None
            )
            if state is not None and "seed" not in qualified and not seeds_alike(analysis, state, before=node):
                return node  # type: ignore[return-value]
    return None


def _may_change_training(analysis: ScriptAnalysis, branch: cst.If) -> bool:
    """A cheap test before the walks of :func:`_gated_training`: whether the ``if`` writes anything, steps or
    loads anything, or calls a function (which may set a learning rate)."""
    return any(
        type(node) in (cst.Assign, cst.AugAssign, cst.Call)
        for node in analysis.nodes_below(branch.body if branch.orelse is None else branch)
    )


def _steps_an_optimizer(analysis: ScriptAnalysis, side: cst.CSTNode) -> bool:
    """Whether a branch steps an optimizer itself, or hands one to a call (``train_step(batch, optimizer)``)."""
    if any(analysis.is_inside(call, side) for call in analysis.optimizer_step_calls):
        return True
    return any(
        type(node) is cst.Call and any(analysis.holds_optimizer(arg.value) for arg in node.args)  # type: ignore[attr-defined]
        for node in analysis.nodes_below(side)
    )


def _runs_the_wrapped_model(analysis: ScriptAnalysis, side: cst.CSTNode) -> bool:
    """Whether a branch runs the DDP-wrapped model's backward pass: it runs the wrapped model's forward
    itself, calls ``backward()`` on a loss the wrapped model's forward computed before the branch (``loss =
    crit(model(x), y)`` then ``if rank != 1: loss.backward()``), or hands the wrapped model to a call
    (``train_step(model, batch)``; a function shared with evaluation, handed ``model.module``, is not)."""
    forwards = analysis.program_ddp_forward_calls
    if any(analysis.is_inside(call, side) for call in forwards):
        return True
    for call in analysis.backward_calls:
        loss = backward_loss(call)
        if analysis.is_inside(call, side) and type(loss) is cst.Name:
            if any(n in forwards for value in analysis.flows_into(loss, loss.value) for n in walk(value)):
                return True
    for node in analysis.nodes_below(side):
        if type(node) is cst.Call:
            for arg in node.args:  # type: ignore[attr-defined]
                if type(arg.value) in (cst.Name, cst.Attribute):
                    wrap = analysis.wrapped_at(arg.value)
                    if wrap is not None and analysis.is_call_to(wrap, names.DISTRIBUTED_DATA_PARALLEL):
                        return True
    return False


def _steps_scheduler(analysis: ScriptAnalysis, node: cst.CSTNode) -> bool:
    """``scheduler.step()``: a ``step`` of a ``torch.optim.lr_scheduler`` scheduler (or of a name that says so)."""
    if type(node) is not cst.Call or call_method_name(node) != "step":  # type: ignore[arg-type]
        return False
    built = _built_as_lr_scheduler(analysis, node)  # type: ignore[arg-type]
    if built is not None:
        return built
    name = dotted_name(node.func.value)  # type: ignore[attr-defined]
    return name is not None and "lr_sched" in name.split(".")[-1].lower()


def _built_as_lr_scheduler(analysis: ScriptAnalysis, call: cst.Call) -> bool | None:
    """Whether the receiver of a ``step()`` call is built as a ``torch.optim.lr_scheduler`` scheduler (``None``:
    the analysis sees no construction of it). A diffusion model's noise scheduler steps too, and sets no
    learning rate."""
    built = [o for o in analysis.origins(call.func.value) if type(o) is cst.Call]  # type: ignore[attr-defined]
    if not built:
        return None
    return any(analysis.is_scheduler_construction(o) for o in built)  # type: ignore[arg-type]


def _loads_into_wrapped(analysis: ScriptAnalysis, node: cst.CSTNode) -> bool:
    """``model.load_state_dict(...)`` (or ``model.module.load_state_dict``) where ``model`` holds the DDP wrap
    already: the wrap has broadcast rank 0's weights, and a later load reaches only the ranks that run it."""
    if type(node) is not cst.Call or call_method_name(node) != "load_state_dict":  # type: ignore[arg-type]
        return False
    receiver = node.func.value  # type: ignore[attr-defined]
    if type(receiver) is cst.Attribute and receiver.attr.value == "module":  # type: ignore[attr-defined]
        receiver = receiver.value  # type: ignore[attr-defined]
    wrap = analysis.wrapped_at(receiver)
    return wrap is not None and analysis.is_call_to(wrap, names.DISTRIBUTED_DATA_PARALLEL)


def _goes_on_without(side: cst.CSTNode | None) -> bool:
    """Whether a branch leaves the rest of the loop body while this process goes on: a ``break``, ``continue``,
    ``return`` or successful exit. (A ``raise`` or a failing exit ends this process, and torchrun then stops the
    others: the job fails, as the original did, and nothing hangs.)"""
    if side is None or not leaves_early(side, raises=False):
        return False
    return any(type(n) in (cst.Break, cst.Continue, cst.Return) or _successful_exit(n) for n in walk(side))


def _ifs_ending_the_process(analysis: ScriptAnalysis) -> set[cst.If]:
    """The ``if`` statements of the module one of whose sides ends the process with success (``sys.exit()``,
    ``sys.exit(0)``, ``raise SystemExit(0)``): the others then wait for it. (A failing exit makes torchrun stop
    them all.) Read up from each exit, once per module: walking down every ``if`` walks nested ones again."""
    found: set[cst.If] = set()
    for node in analysis.preorder:
        if (type(node) is cst.Call or type(node) is cst.Raise) and _successful_exit(node):
            child = node
            for ancestor in analysis.ancestors(node):
                if type(ancestor) is cst.If and child is not ancestor.test:  # type: ignore[attr-defined]
                    found.add(ancestor)  # type: ignore[arg-type]
                child = ancestor
    return found


def _successful_exit(node: cst.CSTNode) -> bool:
    """``sys.exit()`` / ``sys.exit(0)`` (:func:`exits_with_success`), or ``raise SystemExit`` / ``SystemExit(0)``."""
    if type(node) is cst.Call:
        return dotted_name(node.func) in PROCESS_EXITS and exits_with_success(node)  # type: ignore[attr-defined, arg-type]
    if type(node) is cst.Raise and node.exc is not None:  # type: ignore[attr-defined]
        exc = node.exc  # type: ignore[attr-defined]
        if dotted_name(exc) == "SystemExit":
            return True
        return type(exc) is cst.Call and dotted_name(exc.func) == "SystemExit" and exits_with_success(exc)
    return False


def _assigns(branch: cst.CSTNode, name: str) -> bool:
    """Whether a statement assigns the (dotted) name somewhere inside it."""
    for node in walk(branch):
        if isinstance(node, (cst.AugAssign, cst.AnnAssign)) and dotted_name(node.target) == name:
            return True
        if isinstance(node, cst.Assign) and any(dotted_name(t.target) == name for t in node.targets):
            return True
    return False


def _clock_in(analysis: ScriptAnalysis, test: cst.BaseExpression, depth: int = 2) -> str | None:
    """How a test reads a clock (:data:`names.CLOCKS`): the call itself, or a name assigned from one (``elapsed =
    time.time() - start``), a couple of assignments deep; ``None`` where it reads none."""
    for node in analysis.nodes_below(test):
        if type(node) is cst.Call and analysis.is_call_to(node, names.CLOCKS):  # type: ignore[arg-type]
            return f"{code_of(node)}"
        if depth > 0 and type(node) is cst.Name and node.value not in _shared_names(analysis):  # type: ignore[attr-defined]
            for value in analysis.flows_into(node, node.value):  # type: ignore[attr-defined]
                if isinstance(value, cst.BaseExpression) and _clock_in(analysis, value, depth - 1) is not None:
                    return f"`{node.value}`"  # type: ignore[attr-defined]
    return None


def _leaves_the_loop(branch: cst.If, raises: bool = True) -> bool:
    """Whether the ``if`` (either branch) breaks out of its loop, returns or, with ``raises``, raises (a
    ``continue`` only skips the rest of one iteration)."""
    kinds = (cst.Break, cst.Return, cst.Raise) if raises else (cst.Break, cst.Return)
    for body in (branch.body, branch.orelse):
        if body is not None and any(type(n) in kinds for n in walk(body)):
            return True
    return False


def _reads_a_clock(analysis: ScriptAnalysis) -> bool:
    """Whether some module of the program calls a clock (:func:`_clock_in` finds nothing elsewhere)."""
    return any(module.calls_to(names.CLOCKS) for module in analysis.shared.analyses)


def _shared_names(analysis: ScriptAnalysis) -> frozenset[str]:
    """The names a collective of the module takes (``dist.all_reduce(stop)``): their values are then every
    rank's. Read once per module."""
    return analysis.derived("names a collective takes", _find_shared_names)


def _find_shared_names(analysis: ScriptAnalysis) -> frozenset[str]:
    return frozenset(
        n.value  # type: ignore[attr-defined]
        for call in analysis.calls_to(names.COLLECTIVES)
        for arg in call.args
        for n in walk(arg.value)
        if type(n) is cst.Name
    )
