"""DDP040 unsharded-training-data."""

from __future__ import annotations

from typing import Iterator

import libcst as cst

from . import names
from .analysis import ScriptAnalysis, dotted_name, walk
from .analysis.loaders import loader_facts, without_gradients
from .analysis.ranks import draws_per_rank
from .base import Example, Match, Phase, Rule, Severity, Valid
from .edits import code_of


def _in_a_loop(analysis: ScriptAnalysis, node: cst.CSTNode) -> bool:
    """Whether the node runs once per iteration of a loop: a loop around it in its function, or around
    a call of its function (one level of calls: ``train_step(batch)`` in the epoch loop), or around a call
    its function is handed to (LBFGS's ``optimizer.step(closure)``)."""
    if analysis.nearest_loop(node) is not None:
        return True
    function = analysis.enclosing_function(node)
    if function is None:
        return False
    if any((analysis.shared.analysis_of(call) or analysis).nearest_loop(call) is not None for call in analysis.callers_in_program(function)):
        return True  # (in any module: a base class's ``fit`` runs the subclass's ``train_step``)
    return any(
        type(arg.value) is cst.Name and arg.value.value == function.name.value and analysis.nearest_loop(call) is not None  # type: ignore[attr-defined]
        and analysis.scope_of(call) is analysis.scope_of(function)
        for call in analysis.calls
        for arg in call.args
    )


class UnshardedTrainingData(Rule):
    """Give every process its own share of the training data when batches do not come from a ``DataLoader``.

    What it finds: a training loop (``backward()`` called once per iteration of a loop) in a program with no
    training ``DataLoader`` (none at all, or only loaders that evaluate): its batches come from something else (``get_batch()`` drawing random
    offsets into a tensor or a memory-mapped file, slices of a tensor, a data set's own iterator), and
    nothing in the program draws or indexes them by rank (a seed or an index computed from the rank). Also a
    ``DataLoader`` the entry builds and hands to code the analysis cannot follow (a Trainer class picked by
    name: ``getattr(trainers, cfg["type"])(model, train_loader, ...)``) while the program trains where no call
    of the entry is seen to run it: it may be the loader that trains, left unsharded.

    Why it is a problem: the migration shards training data by giving each ``DataLoader`` a
    ``DistributedSampler``; batches made any other way are left as they are. Every process then trains on
    the same batches (random draws seeded alike on every rank are the same draws): the job runs N times the
    work of one process for the progress of one, and a learning rate or a step count tuned for N times the
    data is wrong.

    What a human must do: give each rank its own batches: draw from a generator seeded with the rank
    (``torch.manual_seed(seed + runtime.rank())``, as nanoGPT's ``seed_offset`` does), take every N-th
    sample starting at ``runtime.rank()``, or build a ``DataLoader`` over the data so that the migration
    can shard it. With each rank drawing its own, each draws ``runtime.per_process_batch_size(batch_size)``
    samples a step to keep the original's global batch (or divides its gradient accumulation steps by the
    world size, as nanoGPT does).
    """

    code = "DDP040"
    name = "unsharded-training-data"
    phase = Phase.SAMPLERS
    severity = Severity.WARNING
    triggers = names.TRAINING_STEP_WORDS
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
        Example(
            before="""\
import torch
from torch.utils.data import DataLoader

val_loader = DataLoader(val_set, batch_size=64)
for step in range(100):
    x, y = get_batch("train")
    model(x, y).backward()
    optimizer.step()
    with torch.no_grad():
        val_loss = sum(model(a, b).item() for a, b in val_loader)
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
        if analysis.program_distributed_by_a_library:
            return  # (tensor parallelism wants the same data on every rank; FSDP's data is the program's own choice)
        untraced = _untraced_training_loops(analysis)
        if untraced:
            # (reported at the program's first backward(), in the module that holds it: the file of the loop may
            # hold no training word at all, a runner whose hooks backpropagate)
            first = next((call for module in analysis.shared.analyses for call in module.backward_calls), None)
            if first is not None and analysis.owns(first):
                home, loop = untraced[0]
                # (no line number: a TODO's text must not change as the migration moves the other module's lines)
                where = "" if home is analysis else f" (in module {home.module_name})"
                yield Match(
                    first,
                    f"the training batches come from `{code_of(loop.iter).strip()}`{where}, which the analysis cannot "
                    "trace to a DataLoader (one built where it cannot read: a registry, a config), while that loop runs "
                    "the DDP model's forward for training: if it is a DataLoader, give it a DistributedSampler by hand (and "
                    "set_epoch at each epoch), or every process trains on the same data",
                    fixable=False,
                )
        if not analysis.is_entry:
            return
        # The training steps of the whole program: a step in a Trainer of another module
        # (``Trainer(model, get_batch).fit()``) is this entry's training as much as one of its own.
        steps = [call for call in analysis.program_backward_calls if _in_a_loop(analysis.shared.analysis_of(call) or analysis, call)]
        if analysis.program_loader_calls:
            loaders = loader_facts(analysis)
            if loaders.training_loaders or loaders.dict_training or loaders.undecided or loaders.shared_factories or loaders.unconnected:
                # The migration shards (or asks a human to shard) a loader that trains: what is left are the
                # steps no loader feeds (a fine-tuning pass over tensors indexed by hand after a loader's
                # pre-training, unlabelled draws beside a labelled loader).
                steps = [call for call in steps if not _fed_by_a_loader(analysis, call)]
        # A step of another module is reported at the call of this module that runs it; each training loop once
        # (a second loop of the same ``main()``, a fine-tuning pass after pre-training, is as unsharded as the first).
        reported_at: set[cst.CSTNode] = set()
        loops: set[cst.CSTNode] = set()
        unfollowed: list[tuple[ScriptAnalysis, cst.Call]] | None = None  # (the loaders no loop is seen to iterate: looked for once, when a step is reported)
        unseen: list[cst.Call] = []  # steps no call of this module is seen to run (an object of a class built by name)
        for backward in steps:
            reported = analysis.first_call_running(backward)
            home = analysis.shared.analysis_of(backward) or analysis
            loop = home.nearest_loop(backward)
            if reported is None:
                unseen.append(backward)
                continue
            if reported in reported_at or loop in loops:
                continue
            if draws_per_rank(analysis) or (home is not analysis and draws_per_rank(home)):
                return
            reported_at.add(reported)
            loops.add(loop)  # type: ignore[arg-type]
            unfollowed = _loaders_not_followed(analysis) if unfollowed is None else unfollowed
            if unfollowed:
                owner, loader = unfollowed[0]
                where = f"line {owner.line(loader)}" + ("" if owner is analysis else f" of module {owner.module_name}")
                yield Match(
                    reported,
                    "training batches here come from no DataLoader the analysis can follow, while the program builds "
                    f"one it never sees iterated ({where}, handed to something it "
                    "cannot see through, such as a wrapper class with __next__): if the batches come from it, shard it "
                    "by hand (DistributedSampler, and set_epoch at each new pass); otherwise every process trains on "
                    "the same data unless each rank draws its own (seed with runtime.rank())",
                    fixable=False,
                )
                continue
            what = (
                "training batches here come from"
                if home is analysis
                else f"this call trains (backward() at line {home.line(backward)} of module {home.module_name}) on batches from"
            )
            yield Match(reported, f"{what} {_NO_LOADER}", fixable=False)
        if unseen and not reported_at and not draws_per_rank(analysis):
            # The program trains where the analysis cannot see this script run it (``cls = getattr(trainers, name)``;
            # ``cls(model, train_loader, ...).fit()``): the loaders it builds and never sees drawn from may be what trains.
            home = analysis.shared.analysis_of(unseen[0]) or analysis
            for owner, loader in _loaders_not_followed(analysis) if unfollowed is None else unfollowed:
                if owner is analysis:
                    yield Match(
                        loader,
                        "this DataLoader is handed to code the analysis cannot follow, while the program trains "
                        f"(backward() at line {home.line(unseen[0])} of module {home.module_name}) where no call of this "
                        "script is seen to run it (an object of a class picked by name, say): if its batches train, shard "
                        "it by hand (sampler=DistributedSampler(dataset), set_epoch(epoch) each epoch, "
                        "batch_size=runtime.per_process_batch_size(batch_size))",
                        fixable=False,
                    )


#: What DDP040 says of batches that no DataLoader gives, and what a human does about it.
_NO_LOADER = (
    "no DataLoader, which the migration cannot shard: every process trains on the same data unless each rank draws "
    "its own (seed with runtime.rank(), or take every N-th sample) and N times fewer samples a step "
    "(runtime.per_process_batch_size(batch_size), to keep the global batch); then every value computed from the data "
    "differs between ranks, so reduce it across ranks (runtime.reduce_mean) before the loop decides on it (an exit "
    "test, a learning rate)"
)


def _loaders_not_followed(analysis: ScriptAnalysis) -> list[tuple[ScriptAnalysis, cst.Call]]:
    """The program's loaders that no loop, ``next()``, comprehension or dict the analysis follows ever draws
    from, without a ``DistributedSampler`` (``IterLoader(DataLoader(...))`` drawn by the wrapper's ``__next__``)."""
    facts = loader_facts(analysis)
    drawn = {call for loop in analysis.program_loader_loops for call in loop.loader_calls}
    drawn |= facts.iterator_training | facts.comprehension_training | set(facts.dict_loaders)
    found = []
    for call in analysis.program_loader_calls:
        home = analysis.shared.analysis_of(call) or analysis
        if call not in drawn and not home.has_distributed_sampler(call):
            found.append((home, call))
    return found


def _fed_by_a_loader(analysis: ScriptAnalysis, backward: cst.Call) -> bool:
    """Whether the ``backward()`` runs in a loop or a comprehension over a data loader of the program (here, or
    in a function such a loop calls), or its own loop reads a value that comes from a loader (``batch = next(it)`` of
    ``it = iter(loader)``, ``cycle(loader)``): its batches then come from a loader the migration handles."""
    for loop in analysis.program_loader_loops:
        owner = analysis.shared.analysis_of(loop.loop) or analysis
        if loop.trains and owner.reaches(loop.loop, [backward]):
            return True
    if any(home.reaches(node, [backward]) for home in analysis.shared.analyses for node, _, _ in home.training_comprehensions):
        return True  # ``losses = [step(model, opt, x) for (x,) in loader]``
    home = analysis.shared.analysis_of(backward) or analysis
    facts = loader_facts(analysis)
    if any(
        type(loop) is cst.For and (loop in facts.dict_training_loops or facts.iterates_a_loader_dict(loop.iter))  # type: ignore[attr-defined]
        for loop in home.ancestors(backward)
    ):
        return True  # ``for x, y in dataloaders[phase]:`` (DDP005 asks a human to shard the dict's loaders)
    around = home.nearest_loop(backward)
    if around is None:
        return False
    # ``x, y = self.next_batch()`` of ``def next_batch(self): return next(self.it)``: a draw from a training
    # loader in a helper the loop runs
    draws = [draw for draw, _ in facts.training_draws if (analysis.shared.analysis_of(draw) or analysis) is home]
    if draws and home.reaches(around, draws):
        return True
    loaders = set(analysis.program_loader_calls)
    return any(
        type(node) in (cst.Name, cst.Attribute, cst.Call) and not loaders.isdisjoint(home.origins(node))  # type: ignore[arg-type]
        for node in walk(around)
    )


def _untraced_training_loops(analysis: ScriptAnalysis) -> list[tuple[ScriptAnalysis, cst.For]]:
    """:func:`_untraced_loops` of every module of the program, found once per program."""
    cache = analysis.shared.__dict__.setdefault("_untraced_training_loops", {})
    if "loops" not in cache:
        cache["loops"] = [(module, loop) for module in analysis.shared.analyses for loop in _untraced_loops(module)]
    return cache["loops"]


def _untraced_loops(analysis: ScriptAnalysis) -> Iterator[cst.For]:
    """The module's loops that run a DDP model's forward where gradients are taken (``self.outputs =
    runtime.call_through_ddp(self.model, "train_step", batch)`` of an mmcv-style runner, whose hooks
    backpropagate out of the analysis's sight) over batches of no traced origin, in a program where no loader
    is seen to train and nothing shards the data by hand: the loader the batches come from was built where the
    analysis cannot read, and nothing shards it."""
    if not analysis.program_wrap_calls or draws_per_rank(analysis):
        return
    if any(
        facts.training_loaders or facts.dict_training or facts.shared_factories or facts.undecided
        for facts in (loader_facts(module) for module in analysis.shared.analyses)
    ):
        return
    forwards = [c for c in analysis.program_ddp_forward_calls if analysis.owns(c)] + list(analysis.calls_to({names.runtime("call_through_ddp")}))
    loaders = set(analysis.program_loader_calls)
    for call in forwards:
        loop = analysis.nearest_loop(call)
        if not isinstance(loop, cst.For) or without_gradients(analysis, call) or analysis.reaches_backward(loop):
            continue
        iterated = loop.iter
        while type(iterated) is cst.Call and dotted_name(iterated.func) in ("enumerate", "tqdm", "iter") and iterated.args:  # type: ignore[attr-defined]
            iterated = iterated.args[0].value  # type: ignore[attr-defined]
        if type(iterated) not in (cst.Name, cst.Attribute) or any(o in loaders for o in analysis.origins(iterated)):
            continue  # (``range(...)``, a loader the analysis knows: the other cases)
        yield loop

