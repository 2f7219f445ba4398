"""DDP006 missing-set-epoch."""

from __future__ import annotations

from typing import Iterator

import libcst as cst

from . import names
from .analysis import EpochLoop, ScriptAnalysis, dotted_name, is_none, loader_argument, walk
from .analysis.loaders import loader_facts
from .analysis.script import COMPREHENSIONS
from .base import Change, Example, FixResult, FixSafety, Match, Options, Phase, Rule, Valid
from .edits import Edits, code_of, statement
from .runtime_calls import runtime_name


class MissingSetEpoch(Rule):
    """Call ``sampler.set_epoch(epoch)`` at the start of every epoch.

    What it finds: a training loader with a ``DistributedSampler`` whose epoch loop never calls
    ``set_epoch``. The epoch loop is the loop around the loader's training loop, found also when the
    inner loop lives in another function of the file that receives the loader.

    Why it is a problem: the sampler seeds its shuffle with the epoch number; without ``set_epoch`` every
    epoch replays the first epoch's order on every process.

    What the fix does: ``<loader>.sampler.set_epoch(<epoch>)`` as the first statement of the epoch loop,
    spelled with the loader as it is named there (a name bound before the loop, never a progress wrapper
    made inside it). An epoch loop inside another loop (``for stage in stages: for epoch in range(n):``)
    gets ``loader.sampler.set_epoch(loader.sampler.epoch + 1)``: its own counter starts again with each
    stage, and every stage would repeat the first one's orders. An epoch loop with no epoch number
    (``while step < max_steps: for x, y in loader:``) gets ``runtime.next_epoch(loader)``, which counts the
    passes for the sampler; a loader built anew in each epoch (a curriculum's ``loader = DataLoader(Subset(ds,
    range(n)), ...)``) is told its epoch right after it is built; one whose test counts up an integer (``while epoch < epochs: ... epoch += 1``) gets
    ``runtime.set_epoch(loader, epoch)`` (a resumed run then goes on with the orders it would have had). A name that may hold an object of the
    program wrapping the loader (``train_dl = DeviceDataLoader(train_dl, device)``) gets
    ``runtime.set_epoch(train_dl, epoch)``, which finds the sampler of the loader inside. A loop that draws batches with ``next(it)`` and starts a new pass with
    ``it = iter(loader)`` on ``StopIteration``, or that starts one with each step
    (``x, y = next(iter(loader))``: under the sampler every step would draw the same first batch) gets
    ``loader.sampler.set_epoch(loader.sampler.epoch + 1)`` right before each restart. An endless generator of
    the program that goes over the loader again and again (``while True: for batch in loader: yield batch``,
    or ``yield from loader``) gets ``runtime.next_epoch(loader)`` before each pass (the generator may be
    handed other loaders too: the runtime finds the sampler of each). Each loader needs its own calls: a
    ``set_epoch`` on another loader's sampler does not count. When no epoch loop
    can be found it leaves a TODO comment and a review item instead of guessing; none where every pass is
    ``itertools.cycle(loader)``, which replays its first pass (its order never changes, in the original either).

    Fix safety: each epoch is shuffled differently, as the single-process loader's shuffle did; without
    the call every epoch repeated the first one's order.
    """

    code = "DDP006"
    name = "missing-set-epoch"
    fix_safety = FixSafety.SAFE
    phase = Phase.SAMPLERS
    triggers = ("DistributedSampler",)
    manual_fix = "call <loader>.sampler.set_epoch(epoch) at the start of each epoch"
    examples = (
        Example(
            before="""\
from torch.utils.data import DataLoader, DistributedSampler

loader = DataLoader(ds, batch_size=8, sampler=DistributedSampler(ds))


def train_one_epoch(model, data):
    for x, y in data:
        loss_fn(model(x), y).backward()


for epoch in range(10):
    train_one_epoch(model, loader)
""",
            after="""\
from torch.utils.data import DataLoader, DistributedSampler

loader = DataLoader(ds, batch_size=8, sampler=DistributedSampler(ds))


def train_one_epoch(model, data):
    for x, y in data:
        loss_fn(model(x), y).backward()


for epoch in range(10):
    loader.sampler.set_epoch(epoch)
    train_one_epoch(model, loader)
""",
        ),
        Example(
            before="""\
from torch.utils.data import DataLoader, DistributedSampler

loader = DataLoader(ds, batch_size=8, sampler=DistributedSampler(ds))
done = False
while not done:
    for x, y in loader:
        loss = loss_fn(model(x), y)
        loss.backward()
        done = loss.item() < 0.01
""",
            after="""\
from ddp_migrate import runtime
from torch.utils.data import DataLoader, DistributedSampler

loader = DataLoader(ds, batch_size=8, sampler=DistributedSampler(ds))
done = False
while not done:
    runtime.next_epoch(loader)
    for x, y in loader:
        loss = loss_fn(model(x), y)
        loss.backward()
        done = loss.item() < 0.01
""",
        ),
        Example(
            before="""\
from torch.utils.data import DataLoader, DistributedSampler
from tqdm import tqdm

loader = DataLoader(ds, batch_size=8, sampler=DistributedSampler(ds))
for epoch in range(10):
    pbar = tqdm(loader, desc=f"epoch {epoch}")
    for x, y in pbar:
        loss_fn(model(x), y).backward()
""",
            after="""\
from torch.utils.data import DataLoader, DistributedSampler
from tqdm import tqdm

loader = DataLoader(ds, batch_size=8, sampler=DistributedSampler(ds))
for epoch in range(10):
    loader.sampler.set_epoch(epoch)
    pbar = tqdm(loader, desc=f"epoch {epoch}")
    for x, y in pbar:
        loss_fn(model(x), y).backward()
""",
        ),
        Example(
            before="""\
from torch.utils.data import DataLoader, DistributedSampler

loader = DataLoader(ds, batch_size=8, sampler=DistributedSampler(ds))
for epoch in range(10):
    batches = tqdm(loader) if tqdm else loader
    for x, y in batches:
        loss_fn(model(x), y).backward()
""",
            after="""\
from torch.utils.data import DataLoader, DistributedSampler

loader = DataLoader(ds, batch_size=8, sampler=DistributedSampler(ds))
for epoch in range(10):
    loader.sampler.set_epoch(epoch)
    batches = tqdm(loader) if tqdm else loader
    for x, y in batches:
        loss_fn(model(x), y).backward()
""",
        ),
        Example(
            before="""\
from torch.utils.data import DataLoader, DistributedSampler

def run_epoch(loader, optimizer=None):
    for x, y in loader:
        loss = loss_fn(model(x), y)
        if optimizer is not None:
            loss.backward()

train_loader = DataLoader(ds, batch_size=8, sampler=DistributedSampler(ds))
val_loader = DataLoader(val_ds, batch_size=8)
for epoch in range(10):
    run_epoch(val_loader)
    run_epoch(train_loader, optimizer)
""",
            after="""\
from torch.utils.data import DataLoader, DistributedSampler

def run_epoch(loader, optimizer=None):
    for x, y in loader:
        loss = loss_fn(model(x), y)
        if optimizer is not None:
            loss.backward()

train_loader = DataLoader(ds, batch_size=8, sampler=DistributedSampler(ds))
val_loader = DataLoader(val_ds, batch_size=8)
for epoch in range(10):
    train_loader.sampler.set_epoch(epoch)
    run_epoch(val_loader)
    run_epoch(train_loader, optimizer)
""",
        ),
        Example(
            before="""\
from torch.utils.data import DataLoader, DistributedSampler

loader = DataLoader(ds, batch_size=8, sampler=DistributedSampler(ds))
batches = iter(loader)
for step in range(100):
    try:
        x, y = next(batches)
    except StopIteration:
        batches = iter(loader)
        x, y = next(batches)
    loss_fn(model(x), y).backward()
""",
            after="""\
from torch.utils.data import DataLoader, DistributedSampler

loader = DataLoader(ds, batch_size=8, sampler=DistributedSampler(ds))
batches = iter(loader)
for step in range(100):
    try:
        x, y = next(batches)
    except StopIteration:
        loader.sampler.set_epoch(loader.sampler.epoch + 1)
        batches = iter(loader)
        x, y = next(batches)
    loss_fn(model(x), y).backward()
""",
        ),
        Example(
            before="""\
from torch.utils.data import DataLoader, DistributedSampler

loader = DataLoader(ds, batch_size=8, sampler=DistributedSampler(ds))


def forever(batches):
    while True:
        yield from batches


stream = forever(loader)
for step in range(100):
    x, y = next(stream)
    loss_fn(model(x), y).backward()
""",
            after="""\
from ddp_migrate import runtime
from torch.utils.data import DataLoader, DistributedSampler

loader = DataLoader(ds, batch_size=8, sampler=DistributedSampler(ds))


def forever(batches):
    while True:
        runtime.next_epoch(batches)
        yield from batches


stream = forever(loader)
for step in range(100):
    x, y = next(stream)
    loss_fn(model(x), y).backward()
""",
        ),
        Valid(
            """\
from torch.utils.data import DataLoader, DistributedSampler

sampler = DistributedSampler(ds)
loader = DataLoader(ds, batch_size=8, sampler=sampler)
for epoch in range(10):
    sampler.set_epoch(epoch)
    for x, y in loader:
        loss_fn(model(x), y).backward()
"""
        ),
        # A loader built in the epoch loop that never shuffles: no epoch to tell (a trial's needless review).
        Valid(
            """\
from torch.utils.data import DataLoader, DistributedSampler

for epoch in range(3):
    data = build(epoch)
    for x, y in DataLoader(data, batch_size=8, sampler=DistributedSampler(data, shuffle=False)):
        loss_fn(model(x), y).backward()
"""
        ),
        # One pass over the data, outside any loop (a fine-tuning pass): the sampler's epoch 0 orders it.
        Valid(
            """\
from torch.utils.data import DataLoader, DistributedSampler


def finetune(model, loader):
    for x, y in loader:
        loss_fn(model(x), y).backward()


finetune(model, DataLoader(ds, batch_size=8, sampler=DistributedSampler(ds)))
"""
        ),
    )

    def _cases(self, analysis: ScriptAnalysis) -> Iterator[tuple[cst.Call, EpochLoop | None, cst.BaseExpression | None]]:
        """Training loaders with a DistributedSampler whose epoch loop in THIS module never calls
        ``set_epoch`` (the loader may be built in another module of the program: ``utils.build_loaders``),
        and this module's loaders with no epoch loop anywhere; with how the loader can be named at the top of
        the epoch loop (a name bound before the loop, never a progress wrapper made inside it)."""
        facts = loader_facts(analysis)
        for loader in analysis.program_loader_calls:
            if loader not in facts.training_loaders and loader not in facts.shared_factories:
                continue
            # (a factory's loader split by a call site, through its ``**kwargs``: that call site's epoch loops)
            if not analysis.has_distributed_sampler(loader) and not facts.sharded_at_a_call_site(loader):
                continue
            loops = analysis.epoch_loops(loader)
            if not loops:
                if (
                    analysis.owns(loader)
                    and not facts.epoch_calls(loader)
                    and not facts.iterator_restarts(loader)
                    and not facts.generator_passes(loader)
                    and not facts.cycled(loader)
                    and not facts.is_iterator_driven(loader)  # (``it = iter(loader)`` once, never again: one pass)
                    and not _passed_over_once(analysis, loader)  # (the sampler's epoch 0 is all one pass needs)
                ):
                    yield loader, None, None
                continue
            for epoch in loops:
                # set_epoch may sit in a function the epoch loop calls (the DDP tutorial's ``_run_epoch``).
                if analysis.owns(epoch.loop) and not analysis.reaches(epoch.loop, facts.epoch_calls(loader)):
                    yield loader, epoch, facts.spelling_in(epoch.loop, loader, epoch.loader_expr)

    def _restarts(self, analysis: ScriptAnalysis) -> Iterator[tuple[cst.BaseStatement, cst.BaseExpression, bool]]:
        """Iterator-driven training loaders (``it = iter(loader)`` again on ``StopIteration``, or an endless
        generator's ``while True: for batch in loader: yield batch``) with a DistributedSampler whose epoch no
        ``set_epoch`` call tells: the places of this module where a new pass begins, with how the loader is
        spelled there and whether the place is a generator's pass (the loader a parameter: any loader)."""
        facts = loader_facts(analysis)
        for loader in analysis.program_loader_calls:
            if loader not in facts.iterator_training or not analysis.has_distributed_sampler(loader):
                continue
            epochs = [epoch.loop for epoch in analysis.epoch_loops(loader)]
            told = facts.epoch_calls(loader)
            places = [(stmt, spelled, False) for stmt, spelled in facts.iterator_restarts(loader)]
            places += [(stmt, param, True) for home, stmt, param in facts.generator_passes(loader) if home is analysis]
            for stmt, spelled, in_generator in places:
                if not analysis.owns(stmt) or any(analysis.is_inside(stmt, loop) for loop in epochs):
                    continue  # (an epoch loop of the loader's is told its epoch where it starts)
                if in_generator and any(not analysis.is_inside(call, analysis.enclosing_function(stmt)) for call in told):  # type: ignore[arg-type]
                    continue  # (the loop that draws from the generator tells the sampler: ``if step % n == 0: set_epoch``)
                # set_epoch is due between one pass and the next: in the loop that starts them again and again
                # (a pass started outside any loop of its function: anywhere in the program)
                again = analysis.nearest_loop(stmt)
                if not (analysis.reaches(again, told) if again is not None else told):
                    yield stmt, spelled, in_generator

    def matches(self, analysis: ScriptAnalysis) -> Iterator[Match]:
        seen: set[cst.CSTNode] = set()  # (two loaders handed to one generator: one finding)
        for stmt, _, _ in self._restarts(analysis):
            if stmt not in seen:
                seen.add(stmt)
                yield Match(stmt, "a new pass over the loader starts here without set_epoch: every pass repeats the same order")
        loops: set[cst.CSTNode] = set()
        for loader, epoch, spelling in self._cases(analysis):
            fixable = epoch is not None and (spelling is not None or _built_in_the_epoch(analysis, loader, epoch) is not None)
            if not fixable and _never_shuffles(analysis, loader):
                continue  # (``DistributedSampler(ds, shuffle=False)``: the same order every epoch, whatever it is told)
            if epoch is None:
                yield Match(loader, "DistributedSampler without set_epoch, and no epoch loop found: call set_epoch(epoch) each epoch", fixable=False)
            elif epoch.loop not in loops:  # (one finding per loop, whatever the number of loaders reaching it)
                loops.add(epoch.loop)
                yield Match(epoch.loop, "epoch loop never calls set_epoch: every epoch repeats the same order", fixable=fixable)

    def fix(self, analysis: ScriptAnalysis, options: Options) -> FixResult | None:
        edits = Edits(analysis)
        restarted: set[cst.CSTNode] = set()
        for stmt, spelled, in_generator in self._restarts(analysis):
            if stmt in restarted:
                continue
            restarted.add(stmt)
            if in_generator:  # the generator may be handed other loaders too: the runtime finds the sampler
                call = statement(f"{runtime_name(analysis, edits)}.next_epoch({code_of(spelled)})")
            else:
                sampler = f"{code_of(spelled)}.sampler"
                call = statement(f"{sampler}.set_epoch({sampler}.epoch + 1)")
            edits.insert_before(stmt, call)
            edits.changes.append(Change(self.code, analysis.line(stmt), "sampler.set_epoch called where each new pass over the loader starts"))
        written: set[tuple[cst.CSTNode, str]] = set()  # (several loaders reach one loop: a call each is one too many)
        for loader, epoch, spelling in self._cases(analysis):
            built = _built_in_the_epoch(analysis, loader, epoch) if epoch is not None and spelling is None else None
            if built is not None:
                # ``for epoch ...: loader = DataLoader(Subset(ds, range(n)), ...)``: a new loader each epoch, told
                # its epoch right after it is built
                stmt, name = built
                told = _set_epoch_call(analysis, edits, name, epoch.epoch_var, _sampler_may_be_another(analysis, loader))  # type: ignore[union-attr, arg-type]
                if (stmt, code_of(told)) not in written:
                    written.add((stmt, code_of(told)))
                    edits.insert_after(stmt, told)
                    edits.changes.append(Change(self.code, analysis.line(epoch.loop), "sampler.set_epoch(epoch) called where each epoch builds its loader"))  # type: ignore[union-attr]
                continue
            if epoch is None or spelling is None:
                if _never_shuffles(analysis, loader):
                    continue
                anchor = analysis.statement(loader if epoch is None else epoch.loop)
                if (anchor, "todo") not in written:
                    written.add((anchor, "todo"))
                    edits.todo(anchor, "call <loader>.sampler.set_epoch(epoch) at the start of every epoch")
                continue
            body = epoch.loop.body
            if not isinstance(body, cst.IndentedBlock) or not body.body:
                continue
            spelled = code_of(spelling)
            done = "sampler.set_epoch(epoch) called at the start of each epoch"
            counter = _while_counter(epoch.loop) if epoch.epoch_var is None else None
            if counter is not None:
                # ``while epoch < epochs: ... epoch += 1``: the counter numbers the passes, also where a resumed
                # run starts it from a checkpoint
                call = _set_epoch_call(analysis, edits, spelled, counter, through_runtime=True)
                done = f"sampler.set_epoch({counter}) called at the start of each pass (the counter the loop tests)"
            elif epoch.epoch_var is None:
                # ``while not done: for x, y in loader:``: no epoch number to pass; the runtime counts the passes
                # for the loader's sampler
                call = statement(f"{runtime_name(analysis, edits)}.next_epoch({spelled})")
                done = "runtime.next_epoch(loader) called at the start of each pass (the loop counts no epochs: the runtime counts them for the sampler)"
            elif analysis.nearest_loop(epoch.loop) is not None and not (_may_hold_a_wrapper(analysis, spelling) or _sampler_may_be_another(analysis, loader)):
                # ``for stage in stages: for epoch in range(n):``: the epoch number starts again with each
                # stage, and so would the order; the sampler counts its epochs on instead
                call = statement(f"{spelled}.sampler.set_epoch({spelled}.sampler.epoch + 1)")
            else:
                # ``train_dl = DeviceDataLoader(train_dl, device)``: the object iterated may not be the loader;
                # ``RandomSampler(ds) if local_rank == -1 else DistributedSampler(ds)``: nor the sampler one
                # that has set_epoch: the runtime finds the sampler
                through = _may_hold_a_wrapper(analysis, spelling) or _sampler_may_be_another(analysis, loader)
                call = _set_epoch_call(analysis, edits, spelled, epoch.epoch_var, through)
            key = (epoch.loop, code_of(call))
            if key in written:
                continue
            written.add(key)
            edits.insert_before(body.body[0], call)
            edits.changes.append(Change(self.code, analysis.line(epoch.loop), done))
        return edits.apply(analysis.module) if edits else None


def _set_epoch_call(analysis: ScriptAnalysis, edits: Edits, spelled: str, epoch: str, through_runtime: bool) -> cst.BaseStatement:
    """The statement that tells a loader's sampler its epoch: ``runtime.set_epoch(loader, epoch)`` where the
    object or its sampler may not be the one with ``set_epoch`` (the runtime finds it), else
    ``loader.sampler.set_epoch(epoch)``."""
    if through_runtime:
        return statement(f"{runtime_name(analysis, edits)}.set_epoch({spelled}, {epoch})")
    return statement(f"{spelled}.sampler.set_epoch({epoch})")


def _built_in_the_epoch(analysis: ScriptAnalysis, loader: cst.Call, epoch: EpochLoop) -> tuple[cst.BaseStatement, str] | None:
    """The statement that builds the loader anew in each pass of the epoch loop and the name it binds
    (``loader = DataLoader(Subset(ds, range(n)), ...)`` in ``for epoch in range(4):``), where the loop has an
    epoch number: the place to tell the new sampler its epoch. ``None`` elsewhere."""
    if epoch.epoch_var is None or not analysis.owns(loader) or not analysis.is_inside(loader, epoch.loop.body):
        return None
    stmt = analysis.statement(loader)
    if analysis.parent(stmt) is not epoch.loop.body:
        return None  # (built under a test, ``if epoch % 2 == 0:``: the epochs that reuse it would repeat its order)
    small = stmt.body[0] if isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 else None
    if type(small) is not cst.Assign or len(small.targets) != 1 or type(small.targets[0].target) is not cst.Name or small.value is not loader:  # type: ignore[union-attr]
        return None
    return stmt, small.targets[0].target.value  # type: ignore[union-attr, attr-defined]


def _while_counter(loop: cst.For | cst.While) -> str | None:
    """The integer counter a ``while`` loop tests and its body counts up (``while epoch < epochs: ... epoch += 1``,
    ``while step < max_steps:`` with ``step += 1`` in the pass, an attribute: a runner's ``while self.epoch <
    self.max_epochs: ... self.epoch += 1``): each pass starts at a new value of it, also in a run resumed from a
    checkpoint. ``None``: no such counter."""
    if type(loop) is not cst.While or type(loop.test) is not cst.Comparison:
        return None
    left = dotted_name(loop.test.left)  # type: ignore[attr-defined]
    if left is None or not all(type(c.operator) in (cst.LessThan, cst.LessThanEqual) for c in loop.test.comparisons):  # type: ignore[attr-defined]
        return None
    counted = any(
        type(n) is cst.AugAssign and type(n.operator) is cst.AddAssign and dotted_name(n.target) == left  # type: ignore[attr-defined]
        and type(n.value) is cst.Integer  # type: ignore[attr-defined]
        for n in walk(loop.body)
    )
    return left if counted else None


def _may_hold_a_wrapper(analysis: ScriptAnalysis, spelling: cst.BaseExpression) -> bool:
    """Whether the expression naming the loader at the epoch loop may also hold an object of one of the
    program's classes (a name rebound to ``DeviceDataLoader(loader, device)``): not the loader itself."""
    constructed = analysis.shared.constructed
    return any(origin in constructed for origin in analysis.origins(spelling))


def _sampler_may_be_another(analysis: ScriptAnalysis, loader: cst.Call) -> bool:
    """Whether the loader's sampler may also be one without ``set_epoch`` (``RandomSampler(ds) if
    args.local_rank == -1 else DistributedSampler(ds)``, the legacy Hugging Face scripts' choice), or none at
    all (``DistributedSampler(ds) if distributed else None``, or ``sampler = None`` in the other branch of an
    ``if``: the loader then makes its own)."""
    home = analysis.shared.analysis_of(loader) or analysis
    if any(
        type(origin) is cst.Call and not home.is_call_to(origin, names.DISTRIBUTED_SAMPLER)  # type: ignore[arg-type]
        for origin in home.sampler_origins(loader)
    ):
        return True
    given = loader_argument(loader, "sampler")
    if given is None:
        return False
    values = [given.value]
    if (name := dotted_name(given.value)) is not None:
        values += home.flows_into(given.value, name)
    branches = [branch for value in values for branch in ((value.body, value.orelse) if type(value) is cst.IfExp else (value,))]  # type: ignore[attr-defined]
    return any(is_none(branch) for branch in branches)


def _never_shuffles(analysis: ScriptAnalysis, loader: cst.CSTNode) -> bool:
    """Whether every ``DistributedSampler`` the loader draws from is built with ``shuffle=False``: its order
    does not depend on the epoch."""
    samplers = [
        s for s in analysis.sampler_origins(loader)  # type: ignore[arg-type]
        if isinstance(s, cst.Call) and analysis.is_call_to(s, names.DISTRIBUTED_SAMPLER)
    ]
    return bool(samplers) and all(
        any(a.keyword is not None and a.keyword.value == "shuffle" and isinstance(a.value, cst.Name) and a.value.value == "False" for a in s.args)
        for s in samplers
    )


def _passed_over_once(analysis: ScriptAnalysis, loader: cst.Call) -> bool:
    """Whether the program goes over the loader once: one loop goes over it, outside any loop, itself and up
    every call that leads to it, and every function on the way is called once by the program (a function
    nobody calls here may be run again and again by a library's loop). A single pass needs no ``set_epoch``: the
    sampler's epoch 0 orders it. A program that loads a checkpoint may be run once per epoch, resuming: its
    pass is an epoch whose number the sampler must be told."""
    loops = [found.loop for home in analysis.shared.analyses for found in home.loader_loops if loader in found.loader_calls]
    if len(loops) != 1 or any(home.calls_to(names.TORCH_LOAD) for home in analysis.shared.analyses):
        return False  # (two loops over it, one after the other, are two epochs)
    for home, place in analysis.places_up_the_calls(loops[0]):
        if home.nearest_loop(place) is not None or _in_a_comprehension(home, place):
            return False
        function = home.enclosing_function(place)
        if function is not None and len(home.callers_in_program(function)) != 1:
            return False
    return True


def _in_a_comprehension(analysis: ScriptAnalysis, node: cst.CSTNode) -> bool:
    """Whether the node runs in a comprehension or a lambda of its function (``[train_epoch(m) for epoch in
    range(3)]``, ``map(lambda e: run(e), epochs)``): as many times as it has items."""
    for ancestor in analysis.ancestors(node):
        if type(ancestor) is cst.FunctionDef:
            return False
        if type(ancestor) in COMPREHENSIONS or type(ancestor) is cst.Lambda:
            return True
    return False
