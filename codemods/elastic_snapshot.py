"""DDP013 restartable-training (opt-in: ``Options.elastic``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterator

import libcst as cst

from . import names
from .analysis import ScriptAnalysis, call_method_name, dotted_name, statements_of, tree, walk
from .analysis.loaders import loader_facts
from .base import (
    BatchSizePolicy,
    Change,
    Example,
    FixResult,
    FixSafety,
    Match,
    Options,
    Phase,
    Rule,
    Valid,
)
from .edits import Edits, code_of, expression, statement
from .runtime_calls import runtime_name

#: ``runtime.Snapshot``: a file that already builds one is restartable already.
RUNTIME_SNAPSHOT = frozenset({names.runtime("Snapshot")})
#: Constructors of learning-rate schedulers (``torch.optim.lr_scheduler.StepLR`` ...).
#: Constructors of mixed-precision gradient scalers.
GRAD_SCALERS = frozenset(
    {"torch.amp.GradScaler", "torch.cuda.amp.GradScaler", "torch.GradScaler", "torch.amp.grad_scaler.GradScaler"}
)
#: Where migrated code keeps its snapshot (``$DDP_MIGRATE_SNAPSHOT`` overrides it at run time).
SNAPSHOT_PATH = "snapshot.pt"


@dataclass
class _Plan:
    """What the fix writes for one epoch loop, or why it cannot (``todo``)."""

    loop: cst.For | cst.While
    todo: str | None = None
    objects: dict[str, str] = field(default_factory=dict)
    epoch_var: str = ""
    step_loop: cst.For | None = None
    step_todo: str | None = None


class RestartableTraining(Rule):
    """Make training restartable (opt-in: ``--elastic``): snapshot the training state every epoch, resume at start.

    What it finds (only with ``--elastic``, i.e. ``Options(elastic=True)``): the epoch loop of a training
    script that keeps no snapshot. torchrun restarts every worker when one fails (``--max-restarts``) or
    when nodes join or leave (``--nnodes=1:2``); such a script then starts again from epoch 0.

    Why it is a problem: a restarted job repeats the epochs it had done, overwrites its outputs, and with
    ``--max-restarts`` may never get further than the first failure allowed it to.

    What the fix does, as in the PyTorch DDP tutorial's torchrun step: before the epoch loop,
    ``snapshot = runtime.Snapshot("snapshot.pt", model=..., optimizer=..., scheduler=..., scaler=...)``
    (the scheduler and the GradScaler where the script has one); the loop becomes
    ``for epoch in range(snapshot.resume(), epochs)``, which loads the snapshot on every rank onto its
    own device and starts at the epoch after the last one done; ``snapshot.save(epoch + 1)`` ends the
    epoch body (global rank 0 writes, atomically). With ``--snapshot-every N`` (and the global batch kept)
    the training loop inside the epoch loop also saves every N steps and skips, after a resume, the steps
    done before the snapshot. ``$DDP_MIGRATE_SNAPSHOT`` sets another path at run time; delete the file to
    train from scratch. Where the rule cannot tell what to keep or where an epoch ends (no epoch loop, a
    ``while`` loop, several optimizers or models, an epoch body that can ``continue``, ``break`` or
    ``return``) it leaves a TODO comment instead. Plain values the epochs hand on to each other (``best``
    of a best-model save, a patience counter, a global step) are no objects a snapshot keeps: a review asks
    to keep them in an object with ``state_dict()`` or to recompute them on resume.

    Fix safety: the snapshot holds no world size, so a job may resume with more or fewer processes. It
    holds no random number generator state: randomness other than ``DistributedSampler``'s shuffle (which
    is seeded by the epoch) differs after a restart. Values accumulated over an epoch (a running loss)
    cover only the steps after a mid-epoch resume.
    """

    code = "DDP013"
    name = "restartable-training"
    fix_safety = FixSafety.UNSAFE
    phase = Phase.CHECKPOINTS
    triggers = names.TRAINING_STEP_WORDS
    needs_names = (names.TRAINING_SCRIPT_NAMES,)
    manual_fix = "snapshot the training state each epoch with runtime.Snapshot and resume from it at start"
    examples = (
        Example(
            before="""\
import torch
from torch.utils.data import DataLoader

loader = DataLoader(dataset, batch_size=32)
model = Net()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for epoch in range(10):
    for x, y in loader:
        optimizer.zero_grad()
        loss_fn(model(x), y).backward()
        optimizer.step()
""",
            after="""\
import torch
from ddp_migrate import runtime
from torch.utils.data import DataLoader

loader = DataLoader(dataset, batch_size=32)
model = Net()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
snapshot = runtime.Snapshot("snapshot.pt", model=model, optimizer=optimizer)
for epoch in range(snapshot.resume(), 10):
    for x, y in loader:
        optimizer.zero_grad()
        loss_fn(model(x), y).backward()
        optimizer.step()
    snapshot.save(epoch + 1)
""",
            options=Options(elastic=True),
        ),
        Example(
            before="""\
import torch
from torch.utils.data import DataLoader


def train(model, dataset, epochs):
    loader = DataLoader(dataset, batch_size=32)
    optimizer = torch.optim.AdamW(model.parameters())
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1)
    scaler = torch.amp.GradScaler("cuda")
    for epoch in range(1, epochs + 1):
        for x, y in loader:
            optimizer.zero_grad()
            scaler.scale(loss_fn(model(x), y)).backward()
            scaler.step(optimizer)
            scaler.update()
        scheduler.step()
""",
            after="""\
import torch
from ddp_migrate import runtime
from torch.utils.data import DataLoader


def train(model, dataset, epochs):
    loader = DataLoader(dataset, batch_size=32)
    optimizer = torch.optim.AdamW(model.parameters())
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1)
    scaler = torch.amp.GradScaler("cuda")
    snapshot = runtime.Snapshot(
        "snapshot.pt",
        model=model,
        optimizer=optimizer,
        scheduler=scheduler,
        scaler=scaler,
    )
    for epoch in range(snapshot.resume(1), epochs + 1):
        for x, y in loader:
            optimizer.zero_grad()
            scaler.scale(loss_fn(model(x), y)).backward()
            scaler.step(optimizer)
            scaler.update()
        scheduler.step()
        snapshot.save(epoch + 1)
""",
            options=Options(elastic=True),
        ),
        Example(
            before="""\
import torch
from torch.utils.data import DataLoader

loader = DataLoader(dataset, batch_size=32)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for epoch in range(10):
    for x, y in loader:
        optimizer.zero_grad()
        loss_fn(model(x), y).backward()
        optimizer.step()
""",
            after="""\
import torch
from ddp_migrate import runtime
from torch.utils.data import DataLoader

loader = DataLoader(dataset, batch_size=32)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
snapshot = runtime.Snapshot("snapshot.pt", model=model, optimizer=optimizer)
for epoch in range(snapshot.resume(), 10):
    for batch_index, (x, y) in enumerate(loader):
        if snapshot.done(epoch, batch_index):
            continue
        optimizer.zero_grad()
        loss_fn(model(x), y).backward()
        optimizer.step()
        if (batch_index + 1) % 100 == 0:
            snapshot.save(epoch, batch_index + 1)
    snapshot.save(epoch + 1)
""",
            options=Options(elastic=True, snapshot_every=100),
        ),
        Example(
            before="""\
import torch
from torch.utils.data import DataLoader

loader = DataLoader(dataset, batch_size=32)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
epoch = 0
while epoch < 10:
    for x, y in loader:
        loss_fn(model(x), y).backward()
        optimizer.step()
    epoch += 1
""",
            after="""\
import torch
from torch.utils.data import DataLoader

loader = DataLoader(dataset, batch_size=32)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
epoch = 0
# TODO(ddp-migrate): make training restartable by hand: the epoch loop is a while loop: resume the epoch counter from runtime.Snapshot(...).resume() and call snapshot.save(epoch + 1) at the end of each epoch
while epoch < 10:
    for x, y in loader:
        loss_fn(model(x), y).backward()
        optimizer.step()
    epoch += 1
""",
            options=Options(elastic=True),
        ),
        Valid(
            """\
import torch
from torch.utils.data import DataLoader

loader = DataLoader(dataset, batch_size=32)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for epoch in range(10):
    for x, y in loader:
        loss_fn(model(x), y).backward()
        optimizer.step()
"""
        ),
        Valid(
            """\
import torch
from torch.utils.data import DataLoader
from ddp_migrate import runtime

loader = DataLoader(dataset, batch_size=32)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
snapshot = runtime.Snapshot("snapshot.pt", model=model, optimizer=optimizer)
for epoch in range(snapshot.resume(), 10):
    for x, y in loader:
        loss_fn(model(x), y).backward()
        optimizer.step()
    snapshot.save(epoch + 1)
"""
        ),
    )

    def __init__(self, options: Options | None = None) -> None:
        #: The options of the run: the rule reports and fixes only with ``elastic``. The engine builds the
        #: rule with them (``RestartableTraining(options)``) and hands them to :meth:`fix` too.
        self.options = options or Options()

    # ------------------------------------------------------------------------------------- planning

    def _plans(self, analysis: ScriptAnalysis) -> Iterator[_Plan]:
        if not self.options.elastic or not analysis.is_training_script or analysis.calls_to(RUNTIME_SNAPSHOT):
            return
        loops: list[cst.For | cst.While] = []
        for loader in loader_facts(analysis).training_loaders:
            for epoch in analysis.epoch_loops(loader):
                if (analysis.shared.analysis_of(epoch.loop) or analysis) is not analysis:
                    continue  # another module's loop: that module's own pass plans it
                if all(epoch.loop is not seen for seen in loops):
                    loops.append(epoch.loop)
        if not loops:
            for loop in analysis.loader_loops:
                if loop.trains and (analysis.shared.analysis_of(loop.loop) or analysis) is analysis:
                    yield _Plan(loop.loop, todo="no epoch loop around the training loop: keep a runtime.Snapshot by hand")
                    return
            return
        loops.sort(key=analysis.line)
        if len(loops) > 1:
            for loop in loops:
                yield _Plan(loop, todo="several epoch loops: keep one runtime.Snapshot per training")
            return
        yield self._plan(analysis, loops[0])

    def _plan(self, analysis: ScriptAnalysis, loop: cst.For | cst.While) -> _Plan:
        if isinstance(loop, cst.While):
            return _Plan(loop, todo="the epoch loop is a while loop: resume the epoch counter from runtime.Snapshot(...).resume()")
        epoch_var = loop.target.value if isinstance(loop.target, cst.Name) else None
        if epoch_var is None or _range_bounds(analysis, loop.iter) is None:
            return _Plan(loop, todo="the epoch loop is not `for <epoch> in range([start,] stop)`: start it at runtime.Snapshot(...).resume()")
        exit_statement = _epoch_exit(loop)
        if exit_statement is not None:
            return _Plan(loop, todo=f"the epoch body can `{exit_statement}` before its end: save the snapshot wherever an epoch is done")
        objects, todo = _kept_objects(analysis, loop)
        if todo is not None:
            return _Plan(loop, todo=todo)
        plan = _Plan(loop, objects=objects, epoch_var=epoch_var)
        if self.options.snapshot_every:
            plan.step_loop, plan.step_todo = _step_loop(analysis, loop, objects["optimizer"], self.options)
        return plan

    # ------------------------------------------------------------------------------------- reporting

    def matches(self, analysis: ScriptAnalysis) -> Iterator[Match]:
        if self.options.elastic:
            yield from self._carried_past_snapshots(analysis)
        for plan in self._plans(analysis):
            if plan.todo is not None:
                yield Match(plan.loop, f"training is not restartable and cannot be made so automatically: {plan.todo}", fixable=False)
            else:
                yield Match(plan.loop, "training restarts from epoch 0 when torchrun restarts the job: snapshot each epoch and resume at start")

    def _carried_past_snapshots(self, analysis: ScriptAnalysis) -> Iterator[Match]:
        """An epoch loop resumed from a ``runtime.Snapshot`` (``range(snapshot.resume(), n)``) whose epochs hand
        on plain values the snapshot does not keep (:func:`_carried_values`)."""
        for snapshot in analysis.calls_to(RUNTIME_SNAPSHOT):
            kept = {code_of(arg.value) for arg in snapshot.args if arg.keyword is not None}
            for loop in analysis.for_loops:
                resumes = [n for n in walk(loop.iter) if isinstance(n, cst.Call) and call_method_name(n) == "resume"]
                if not resumes or snapshot not in analysis.origins(resumes[0].func.value):  # type: ignore[attr-defined]
                    continue
                epoch_var = loop.target.value if isinstance(loop.target, cst.Name) else ""
                carried = _carried_values(analysis, loop, kept | {epoch_var})
                if carried:
                    yield Match(loop, _carried_message(carried), fixable=False)

    # ------------------------------------------------------------------------------------- fixing

    def fix(self, analysis: ScriptAnalysis, options: Options) -> FixResult | None:
        self.options = options
        edits = Edits(analysis)
        for plan in self._plans(analysis):
            if plan.todo is not None:
                edits.todo(plan.loop, f"make training restartable by hand: {plan.todo} and call snapshot.save(epoch + 1) at the end of each epoch")
                continue
            self._write(analysis, edits, plan)
        return edits.apply(analysis.module) if edits else None

    def _write(self, analysis: ScriptAnalysis, edits: Edits, plan: _Plan) -> None:
        loop = plan.loop
        assert isinstance(loop, cst.For)
        runtime = runtime_name(analysis, edits)
        snapshot = analysis.free_name("snapshot", "training_snapshot")
        kept = ", ".join(f"{role}={name}" for role, name in plan.objects.items())
        edits.insert_before(loop, statement(f'{snapshot} = {runtime}.Snapshot("{SNAPSHOT_PATH}", {kept})'))
        start, stop = _range_bounds(analysis, loop.iter) or ("", "")
        edits.replace(loop.iter, lambda updated: _resumed_range(updated, snapshot, start))
        body = statements_of(loop.body)
        edits.insert_after(body[-1], statement(f"{snapshot}.save({plan.epoch_var} + 1)"))
        edits.changes.append(Change(self.code, analysis.line(loop), f"training resumes from {SNAPSHOT_PATH} and saves it at the end of every epoch"))
        if plan.step_todo is not None:
            edits.todo(plan.step_loop or loop, f"snapshot every {self.options.snapshot_every} steps by hand: {plan.step_todo}")
        elif plan.step_loop is not None:
            self._write_steps(analysis, edits, plan, snapshot)

    def _write_steps(self, analysis: ScriptAnalysis, edits: Edits, plan: _Plan, snapshot: str) -> None:
        inner = plan.step_loop
        assert inner is not None
        every = self.options.snapshot_every
        index = _enumerate_index(inner)
        if index is None:
            index = analysis.free_name("batch_index", "step_index")
            header = f"for {index}, {_target_code(inner.target)} in enumerate({code_of(inner.iter)}): pass"
            new_loop = cst.parse_statement(header)
            assert isinstance(new_loop, cst.For)
            edits.replace(inner, lambda updated: updated.with_changes(target=new_loop.target, iter=new_loop.iter))
        body = statements_of(inner.body)
        edits.insert_before(body[0], statement(f"if {snapshot}.done({plan.epoch_var}, {index}):\n    continue\n"))
        edits.insert_after(body[-1], statement(f"if ({index} + 1) % {every} == 0:\n    {snapshot}.save({plan.epoch_var}, {index} + 1)\n"))
        edits.changes.append(Change(self.code, analysis.line(inner), f"a snapshot every {every} steps; steps done before a restart are skipped"))


# --------------------------------------------------------------------------------------------- helpers
# Facts computed here that belong in the shared analysis: which name a constructor call is bound to
# (``_bound_name``), the schedulers and GradScalers of a scope, and the statements that leave a loop body.


def _carried_message(names: list[str]) -> str:
    listed = ", ".join(f"`{name}`" for name in names)
    one = len(names) == 1
    return (
        f"{listed} {'carries' if one else 'carry'} over from one epoch to the next but the snapshot does not keep "
        f"{'it' if one else 'them'}: after a restart {'it starts' if one else 'they start'} again from the first value "
        "(a best-model file overwritten by a worse model, a step count restarted); keep "
        f"{'it' if one else 'them'} in an object with state_dict()/load_state_dict() given to the Snapshot, or "
        "recompute on resume"
    )


def _carried_values(analysis: ScriptAnalysis, loop: cst.For, kept: set[str]) -> list[str]:
    """The names set before the epoch loop, in its scope, that the loop's body reads before it sets them, and
    sets (``if val < best: best = val``, ``global_step += 1``; not ``total = 0.0`` at the top of the body, nor
    ``loss`` assigned in the inner loop before any read), other than the names in ``kept`` (the epoch
    variable, the objects the snapshot keeps). Attributes set on an object the same way count too
    (``model.scale = 1.0`` before the loop, ``model.scale *= 0.5`` in it): no ``state_dict()`` holds them."""
    scope = analysis.enclosing_function(loop)
    before: set[str] = set()
    for assign in analysis.assignments:
        if analysis.enclosing_function(assign) is scope and analysis.comes_before(assign, loop) and not analysis.is_inside(assign, loop):
            for target in _targets_of(assign):
                name = _plain_or_attribute(target)
                if name is not None:
                    before.add(name)
    stores: set[cst.CSTNode] = set()
    updated: list[str] = []
    first_read: dict[str, bool] = {}  # name -> whether its first use in the body (source order) reads it
    for node in walk(loop.body):  # (an assignment comes before the names of its value in the walk)
        if isinstance(node, (cst.Assign, cst.AugAssign, cst.AnnAssign)):
            for target in _targets_of(node):
                name = _plain_or_attribute(target)
                if name is not None:
                    stores.update(n for n in walk(target) if type(n) in (cst.Name, cst.Attribute))
                    # ``x += 1`` and ``best = min(best, v)`` read x before they set it; ``x = ...`` sets it first
                    reads_itself = node.value is not None and any(
                        type(n) in (cst.Name, cst.Attribute) and _unwrapped(dotted_name(n)) == name for n in walk(node.value)  # type: ignore[attr-defined, arg-type]
                    )
                    first_read.setdefault(name, isinstance(node, cst.AugAssign) or reads_itself)
                    if name not in updated:
                        updated.append(name)
        elif type(node) is cst.Call and call_method_name(node) in _MUTATORS and type(node.func.value) is cst.Name:  # type: ignore[attr-defined, arg-type]
            # ``history.append(acc)``: the list made before the loop grows epoch after epoch
            name = node.func.value.value  # type: ignore[attr-defined]
            if name in before and name not in updated:
                first_read.setdefault(name, True)
                updated.append(name)
        elif type(node) in (cst.Name, cst.Attribute) and node not in stores and _unwrapped(dotted_name(node)) in before:  # type: ignore[arg-type]
            first_read.setdefault(_unwrapped(dotted_name(node)), True)  # type: ignore[arg-type]
    return [name for name in updated if name in before and name not in kept and first_read.get(name, False)]


def _plain_or_attribute(target: cst.BaseExpression) -> str | None:
    """``x`` of ``x = ...``, ``model.scale`` of ``model.scale = ...`` (an attribute of a name); ``None`` otherwise."""
    if type(target) is cst.Name:
        return target.value  # type: ignore[attr-defined]
    name = dotted_name(target) if type(target) is cst.Attribute else None
    if name is None or name.startswith("self."):
        return None
    return _unwrapped(name)


def _unwrapped(name: str | None) -> str | None:
    """The dotted name without the ``.module`` of a wrapper (``model.module.scale`` is ``model.scale``)."""
    return ".".join(part for part in name.split(".") if part != "module") if name is not None else None


#: Methods that change a container in place (what it held before the epoch is kept and added to).
_MUTATORS = frozenset({"append", "extend", "insert", "update", "add", "setdefault"})


def _targets_of(node: cst.CSTNode) -> list[cst.BaseExpression]:
    """The targets of an assignment, with the names inside tuple targets."""
    if isinstance(node, cst.Assign):
        found = [t.target for t in node.targets]
    elif isinstance(node, (cst.AugAssign, cst.AnnAssign)):
        found = [node.target]
    else:
        return []
    flat: list[cst.BaseExpression] = []
    while found:
        target = found.pop(0)
        if isinstance(target, (cst.Tuple, cst.List)):
            found.extend(e.value for e in target.elements)
        else:
            flat.append(target)
    return flat


def _range_bounds(analysis: ScriptAnalysis, iterable: cst.BaseExpression) -> tuple[str, str] | None:
    """``(start, stop)`` source of ``range(stop)`` / ``range(start, stop)``; ``None`` for anything else."""
    if not (isinstance(iterable, cst.Call) and isinstance(iterable.func, cst.Name) and iterable.func.value == "range"):
        return None
    if analysis.qualified_names(iterable.func) - {"builtins.range"}:
        return None  # a ``range`` of the script's own
    args = iterable.args
    if not 1 <= len(args) <= 2 or any(a.keyword is not None or a.star for a in args):
        return None
    if len(args) == 1:
        return "", code_of(args[0].value)
    return code_of(args[0].value), code_of(args[1].value)


def _resumed_range(updated: cst.CSTNode, snapshot: str, start: str) -> cst.CSTNode:
    """``range(stop)`` → ``range(snapshot.resume(), stop)``; ``range(a, b)`` → ``range(snapshot.resume(a), b)``."""
    assert isinstance(updated, cst.Call)
    resume = expression(f"{snapshot}.resume({start})")
    if len(updated.args) == 1:
        first = cst.Arg(resume, comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
        return updated.with_changes(args=[first, *updated.args])
    return updated.with_changes(args=[updated.args[0].with_changes(value=resume), *updated.args[1:]])


def _epoch_exit(loop: cst.For) -> str | None:
    """``continue`` / ``break`` / ``return`` / ``yield`` that leaves the epoch body before its end
    (those inside nested loops and functions do not count)."""
    def search(node: cst.CSTNode, in_loop: bool) -> str | None:
        for child in tree.children(node):
            if isinstance(child, (cst.FunctionDef, cst.Lambda, cst.ClassDef)):
                continue
            if isinstance(child, (cst.Return, cst.Yield)):
                return "return" if isinstance(child, cst.Return) else "yield"
            if not in_loop and isinstance(child, (cst.Continue, cst.Break)):
                return "continue" if isinstance(child, cst.Continue) else "break"
            nested = in_loop or isinstance(child, (cst.For, cst.While))
            if isinstance(child, (cst.For, cst.While)):
                found = search(child.body, True) or (search(child.orelse, in_loop) if child.orelse else None)
            else:
                found = search(child, nested)
            if found:
                return found
        return None

    return search(loop.body, False)


def _bound_name(analysis: ScriptAnalysis, call: cst.Call) -> str | None:
    """The name a constructor call is assigned to: ``optimizer`` for ``optimizer = SGD(...)``."""
    parent = analysis.parent(call)
    if isinstance(parent, cst.Assign) and len(parent.targets) == 1:
        return dotted_name(parent.targets[0].target)
    if isinstance(parent, cst.AnnAssign):
        return dotted_name(parent.target)
    return None


def _visible_at(analysis: ScriptAnalysis, call: cst.Call, name: str, loop: cst.For) -> bool:
    """Whether ``name``, bound by ``call``, still names that object at the start of ``loop``: bound before the
    loop, outside it, in the same function (``self.x`` also in another method of the same class)."""
    if analysis.is_inside(call, loop) or not (analysis.comes_before(call, loop) or name.startswith("self.")):
        return False
    if name.startswith("self."):
        return analysis.enclosing_class(call) is not None and analysis.enclosing_class(call) is analysis.enclosing_class(loop)
    return analysis.enclosing_function(call) is analysis.enclosing_function(loop)


def _kept_objects(analysis: ScriptAnalysis, loop: cst.For) -> tuple[dict[str, str], str | None]:
    """``role -> name`` of what the snapshot keeps (model, optimizer, scheduler, scaler), or a TODO reason."""
    optimizers = analysis.optimizer_calls
    if len(optimizers) != 1:
        return {}, f"{len(optimizers) or 'no'} optimizer constructor{'s' if len(optimizers) != 1 else ''} found: give runtime.Snapshot each optimizer by name"
    optimizer = _bound_name(analysis, optimizers[0])
    if optimizer is None or not _visible_at(analysis, optimizers[0], optimizer, loop):
        return {}, "the optimizer is not a variable set before the epoch loop"
    models = analysis.trained_models
    if len(models) != 1:
        return {}, "cannot tell which model the optimizer trains: give runtime.Snapshot the model"
    objects = {"model": models[0], "optimizer": optimizer}
    extras = (("scheduler", _schedulers(analysis)), ("scaler", analysis.calls_to(GRAD_SCALERS)))
    for role, calls in extras:
        visible = [name for call in calls if (name := _bound_name(analysis, call)) and _visible_at(analysis, call, name, loop)]
        if len(calls) > 1 or len(visible) != len(calls):
            return {}, f"cannot tell which {role} to keep: give runtime.Snapshot the {role}"
        if visible:
            objects[role] = visible[0]
    return objects, None


def _schedulers(analysis: ScriptAnalysis) -> list[cst.Call]:
    """Constructor calls of ``torch.optim.lr_scheduler`` schedulers."""
    return [c for c in analysis.calls if analysis.is_scheduler_construction(c)]


def _step_loop(analysis: ScriptAnalysis, epoch: cst.For, optimizer: str, options: Options) -> tuple[cst.For | None, str | None]:
    """The training loop directly in the epoch body that can snapshot every N steps, or why not."""
    if options.batch_size is not BatchSizePolicy.GLOBAL:
        return None, "a step is one global batch only when the global batch is kept (--batch-size global)"
    inner = [
        loop.loop
        for loop in analysis.loader_loops
        if loop.trains and analysis.parent(analysis.parent(loop.loop)) is epoch  # type: ignore[arg-type]
    ]
    if len(inner) != 1:
        return None, "the training loop is not a single loop directly in the epoch loop"
    loop = inner[0]
    steps = [
        s
        for s in statements_of(loop.body)
        if isinstance(s, cst.SimpleStatementLine)
        and any(_steps_optimizer(small, optimizer) for small in s.body)
    ]
    if not steps:
        return None, "the optimizer does not step on every batch (gradient accumulation?)"
    if _enumerate_index(loop) is None and isinstance(loop.iter, cst.Call) and _callee(loop.iter) == "enumerate":
        return None, "the batch index is not a plain name"
    return loop, None


def _steps_optimizer(small: cst.BaseSmallStatement, optimizer: str) -> bool:
    """``optimizer.step()`` or ``scaler.step(optimizer)`` as a statement."""
    if not (isinstance(small, cst.Expr) and isinstance(small.value, cst.Call)):
        return False
    call = small.value
    if not (isinstance(call.func, cst.Attribute) and call.func.attr.value == "step"):
        return False
    receiver = code_of(call.func.value)
    return receiver == optimizer or any(code_of(arg.value) == optimizer for arg in call.args)


def _callee(call: cst.Call) -> str:
    return call.func.value if isinstance(call.func, cst.Name) else call.func.attr.value if isinstance(call.func, cst.Attribute) else ""


def _enumerate_index(loop: cst.For) -> str | None:
    """``i`` of ``for i, batch in enumerate(loader)`` (without a start), else ``None``."""
    if not (isinstance(loop.iter, cst.Call) and _callee(loop.iter) == "enumerate" and len(loop.iter.args) == 1):
        return None
    target = loop.target
    if isinstance(target, cst.Tuple) and len(target.elements) == 2 and isinstance(target.elements[0].value, cst.Name):
        return target.elements[0].value.value
    return None


def _target_code(target: cst.BaseAssignTargetExpression) -> str:
    """A loop target written so that it can follow ``index, ``: a bare tuple gets parentheses."""
    text = code_of(target).strip()
    if isinstance(target, cst.Tuple) and not target.lpar:
        return f"({text})"
    return text


__all__ = ["RestartableTraining"]
