"""DDP046 buffer-written-from-batch."""

from __future__ import annotations

from typing import Iterator

import libcst as cst

from . import names
from .analysis import ScriptAnalysis, call_method_name, dotted_name, tree, walk
from .analysis.per_rank import SHAPE_QUERIES, per_rank_values
from .analysis.script import callee_name
from .base import Example, Match, Phase, Rule, Severity, Valid
from .edits import code_of

#: In-place tensor methods that write the slots their arguments select (``memory.index_copy_(0, idx, z)``).
INDEXED_WRITES = frozenset(
    {"index_copy_", "index_add_", "index_fill_", "index_put_", "scatter_", "scatter_add_", "scatter_reduce_", "masked_scatter_", "put_"}
)
#: Functions that join tensors into a new one: a buffer rebound to their result keeps the batch's values.
_JOINS = frozenset({"cat", "concat", "concatenate", "stack", "vstack", "hstack", "roll"})


class BufferWrittenFromBatch(Rule):
    """Gather the batch from every process before a model writes it into one of its buffers.

    What it finds, in a program that wraps its model in DDP: a module class of the program whose
    ``forward()`` (or a method ``forward()`` calls on ``self``) writes values or slots chosen by its inputs
    into a buffer it registered: a queue of keys (``self.queue[:, ptr:ptr + n] = keys.T``), a memory bank
    (``self.memory[idx] = z``, ``self.memory.index_copy_(0, idx, z)``), per-sample counts, where no
    collective (``all_gather``) runs on the way. Also a table over the whole data set that the training loop
    writes at its batch's sample indices and reads back (FlexMatch's ``selected_label[idx] = pseudo``, whose
    class counts set the thresholds of the next steps): each rank fills the entries of its shard only.

    Why it is a problem: each process sees only its shard of the batch, so it writes only its shard's
    values; and DDP's ``broadcast_buffers`` (on by default) copies rank 0's buffers over every other
    process's at the start of each forward, so what the other ranks wrote is lost. The queue or memory bank
    ends up holding rank 0's samples only (a trial: 27 of 32 memory rows updated, against 32 in the
    original). Nothing fails; the negatives or the nearest neighbours are quietly different. Buffers that
    keep a running statistic (``running_mean.mul_(m).add_(...)``, as BatchNorm's) are not reported: rank
    0's estimate stands for all, as for torch's own BatchNorm.

    What a human must do: gather the values from every process before writing them
    (``torch.distributed.all_gather`` into a list, then ``torch.cat``, as MoCo's ``concat_all_gather``
    does), so that every rank writes the same global batch; or keep the buffer out of the model DDP wraps.
    """

    code = "DDP046"
    name = "buffer-written-from-batch"
    phase = Phase.OUTPUT
    severity = Severity.WARNING
    triggers = ("register_buffer", "] =")  # (``table[idx] = value`` in the training loop)
    needs_names = (names.DISTRIBUTED_DATA_PARALLEL,)
    manual_fix = "all_gather the values across processes before writing them into the buffer"
    examples = (
        Example(
            before="""\
import torch
from torch.nn.parallel import DistributedDataParallel as DDP

class MemoryNet(torch.nn.Module):
    def __init__(self, n):
        super().__init__()
        self.encoder = torch.nn.Linear(8, 4)
        self.register_buffer("memory", torch.zeros(n, 4))

    def forward(self, x, idx):
        z = self.encoder(x)
        self.memory[idx] = z.detach()
        return z @ self.memory.t()

model = DDP(MemoryNet(100))
""",
        ),
        Valid(
            """\
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

def gather(t):
    parts = [torch.zeros_like(t) for _ in range(dist.get_world_size())]
    dist.all_gather(parts, t)
    return torch.cat(parts)

class Queue(torch.nn.Module):
    def __init__(self, k):
        super().__init__()
        self.encoder = torch.nn.Linear(8, 4)
        self.register_buffer("queue", torch.zeros(k, 4))
        self.register_buffer("running", torch.zeros(4))
        self.register_buffer("steps", torch.zeros(()))

    def forward(self, x):
        z = self.encoder(x)
        keys = gather(z.detach())
        self.queue[: keys.shape[0]] = keys
        self.running.mul_(0.9).add_(0.1 * z.detach().mean(0))
        self.steps += 1
        return z

model = DDP(Queue(64))
"""
        ),
    )

    def matches(self, analysis: ScriptAnalysis) -> Iterator[Match]:
        if not any(analysis.is_call_to(wrap, names.DISTRIBUTED_DATA_PARALLEL) for wrap in analysis.program_wrap_calls):
            return
        for statement, table in _tables_written_from_batch(analysis):
            yield Match(
                statement,
                f"`{code_of(statement).strip()}` writes this process's samples into `{table}`, a table over the whole data "
                "set made before the training loop and read in it: each rank fills only the entries of its own shard, "
                "so the tables (pseudo-labels, a memory bank) differ between ranks and from the original's, and so does "
                "what is computed from them; all_gather the indices and values across processes before writing them",
                fixable=False,
            )
        if not any(call_method_name(call) == "register_buffer" for module in analysis.shared.analyses for call in module.calls):
            return  # no buffer registered anywhere in the program (before walking the classes for them)
        for cls in analysis.classes:
            buffers = _registered_buffers(analysis, cls)
            if not buffers:
                continue
            methods = _reached_from_forward(analysis, cls)
            if not methods or _gathers(analysis, methods):
                continue
            for method, derived in methods.items():
                # ``forward(self, x, step)``: a forward's own argument may be a setting (stored as it is: no
                # slot of the batch); a helper's argument is the batch value its call site passes
                settings = _parameters(method) if method.name.value == "forward" else set()
                for statement, buffer in _writes_from_batch(method, buffers, derived, settings):
                    yield Match(
                        statement,
                        f"`{code_of(statement).strip()}` writes buffer `{buffer}` from this process's shard of the data "
                        "only: the other processes' values never reach it (and in a model DDP wraps, broadcast_buffers "
                        "copies rank 0's buffers over the others' at every forward); all_gather the values across "
                        "processes before writing them",
                        fixable=False,
                    )


def _tables_written_from_batch(analysis: ScriptAnalysis) -> Iterator[tuple[cst.CSTNode, str]]:
    """``table[idx] = value`` in a training loop over a sharded loader, where ``idx`` is a value of this process's
    batch (its samples' indices) and ``table`` a name of the loop's function made before the loop and read in
    the loop besides (FlexMatch's ``selected_label[idx[sel]] = pseudo[sel]``, whose class counts set the next
    steps' thresholds): each rank writes its shard's entries only."""
    values = per_rank_values(analysis)
    if values is None:
        return
    for loop in analysis.loader_loops:
        if not loop.trains or not isinstance(loop.loop, cst.For):
            continue
        function = analysis.enclosing_function(loop.loop)
        made_before = {
            name
            for assign in analysis.assignments_in(function)
            if isinstance(assign, cst.Assign) and not analysis.is_inside(assign, loop.loop) and analysis.comes_before(assign, loop.loop)
            for t in assign.targets
            if (name := dotted_name(t.target)) is not None and "." not in name
        }
        for node in walk(loop.loop.body):
            if type(node) is not cst.Assign or len(node.targets) != 1:  # type: ignore[attr-defined]
                continue
            target = node.targets[0].target  # type: ignore[attr-defined]
            table = dotted_name(target.value) if type(target) is cst.Subscript else None  # type: ignore[attr-defined]
            if table is None or table not in made_before:
                continue
            index = [e.slice.value for e in target.slice if type(e.slice) is cst.Index]  # type: ignore[attr-defined]
            if not index or values.mention(index[0]) is None or _a_key_of_a_dict(analysis, index[0]):
                continue
            read = any(
                type(n) is cst.Name and n.value == table and not analysis.is_inside(n, target)  # type: ignore[attr-defined]
                for n in walk(loop.loop.body)
            )
            if read:
                yield node, table


def _a_key_of_a_dict(analysis: ScriptAnalysis, index: cst.BaseExpression) -> bool:
    """Whether the index is the key of a loop over a dict's items or keys (``for k, v in loss_dict.items():
    running[k] = ...``, a loss's name): no sample's index."""
    if type(index) is not cst.Name:
        return False
    for loop in analysis.ancestors(index):
        if type(loop) is not cst.For:
            continue
        names = {n.value for n in walk(loop.target) if type(n) is cst.Name}  # type: ignore[attr-defined]
        if index.value in names:  # type: ignore[attr-defined]
            return type(loop.iter) is cst.Call and call_method_name(loop.iter) in ("items", "keys")  # type: ignore[attr-defined, arg-type]
    return False


def _registered_buffers(analysis: ScriptAnalysis, cls: cst.ClassDef) -> frozenset[str]:
    """The names the class registers buffers under (``self.register_buffer("queue", ...)``), in any of its
    methods or those of the classes of the program it derives from."""
    cache = analysis.shared.__dict__.setdefault("_buffers_by_class", [])  # (once per program: it reads every module)
    if not cache:
        cache.append(_buffers_by_class(analysis))
    registered = cache[0]
    return frozenset(name for owner in analysis.shared.ancestors_of(cls) for name in registered.get(owner, ()))


def _buffers_by_class(analysis: ScriptAnalysis) -> dict[cst.ClassDef, set[str]]:
    """For each class of the program, the names ``self.register_buffer("name", ...)`` calls inside it register
    (a call in a class nested in another counts for both, as it is inside both), read once from the calls."""
    found: dict[cst.ClassDef, set[str]] = {}
    for module in analysis.shared.analyses:
        for call in module.calls:
            if call_method_name(call) != "register_buffer" or not call.args:
                continue
            receiver = call.func.value  # type: ignore[attr-defined]
            first = call.args[0].value
            if type(receiver) is cst.Name and receiver.value == "self" and type(first) is cst.SimpleString:
                below: cst.CSTNode = call
                for owner in module.ancestors(call):
                    if type(owner) is cst.ClassDef and below is owner.body:  # (in its body: not its bases or decorators)
                        found.setdefault(owner, set()).add(first.evaluated_value)  # type: ignore[arg-type]
                    below = owner
    return found


def _reached_from_forward(analysis: ScriptAnalysis, cls: cst.ClassDef) -> dict[cst.FunctionDef, set[str]]:
    """The class's ``forward`` and the methods it calls on ``self``, directly or through one another, each with
    the names in it that hold values of the batch: ``forward``'s parameters (but ``self``), a method's
    parameters given such a value at a call (``self._enqueue(keys)``; not ``self._advance(x.shape[0])``), and
    the local names assigned from them."""
    forward = analysis.method_of(cls, "forward")
    if forward is None:
        return {}
    reached = {forward: _derived_names(forward, _parameters(forward))}
    pending = [forward]
    while pending:
        method = pending.pop(0)
        derived = reached[method]
        for node in walk(method.body):
            if type(node) is not cst.Call or type(node.func) is not cst.Attribute:
                continue
            receiver = node.func.value  # type: ignore[attr-defined]
            if type(receiver) is not cst.Name or receiver.value != "self":
                continue
            callee = analysis.method_of(cls, node.func.attr.value)  # type: ignore[attr-defined]
            if callee is None:
                continue
            home = analysis.shared.analysis_of(callee) or analysis
            seeds = {param for param, argument in home.bound_arguments(node, callee) if _reads(argument, derived)}  # type: ignore[arg-type]
            known = reached.get(callee)
            if known is None or not seeds <= known:
                reached[callee] = _derived_names(callee, seeds | (known or set()))
                pending.append(callee)
    return reached


def _gathers(analysis: ScriptAnalysis, methods: dict[cst.FunctionDef, set[str]]) -> bool:
    """Whether one of the methods runs a collective, itself or in functions of the program it calls,
    directly or through others."""
    collectives = [call for module in analysis.shared.analyses for call in module.calls_to(names.COLLECTIVES)]
    if not collectives:
        return False
    return any((analysis.shared.analysis_of(method) or analysis).reaches(method, collectives) for method in methods)


def _writes_from_batch(method: cst.FunctionDef, buffers: frozenset[str], derived: set[str], settings: set[str]) -> Iterator[tuple[cst.CSTNode, str]]:
    """The statements of the method that write a buffer from values of the batch (``derived``), with the
    buffer's name: a subscript assignment whose index reads the batch (slots the data chooses:
    ``self.memory[idx] = z``), or whose value does without reading the buffer itself (a queue's slots:
    ``self.queue[:, ptr:ptr + n] = keys.T``; not a running statistic, ``self.mean[:] = 0.9 * self.mean +
    ...``, nor an argument stored as it is, ``self.step[0] = step``); an indexed in-place write
    (``index_copy_``) with such an argument; a buffer rebuilt by joining the batch to it (``torch.cat``)."""
    for node in walk(method.body):
        if type(node) in (cst.Assign, cst.AugAssign):
            targets = [t.target for t in node.targets] if type(node) is cst.Assign else [node.target]  # type: ignore[attr-defined]
            value = node.value  # type: ignore[attr-defined]
            for target in targets:
                buffer = _buffer_slot(target, buffers)
                if buffer is not None:
                    chosen = _reads(_slot_of(target), derived)
                    stored = (
                        _reads(value, derived)
                        and not _reads_buffer(value, buffer)
                        and not (type(value) is cst.Name and value.value in settings)  # type: ignore[attr-defined]
                    )
                    if chosen or stored:
                        yield node, buffer
                        break
                buffer = _self_attribute(target, buffers)
                if buffer is not None and _concatenates(value) and _reads(value, derived):
                    yield node, buffer  # ``self.queue = torch.cat([keys, self.queue])[:K]``
                    break
        elif type(node) is cst.Expr and type(node.value) is cst.Call:
            call = node.value
            method_name = call_method_name(call)  # type: ignore[arg-type]
            if method_name in INDEXED_WRITES:
                buffer = _self_attribute(call.func.value, buffers)  # type: ignore[attr-defined]
                if buffer is not None and any(_reads(arg.value, derived) for arg in call.args):  # type: ignore[attr-defined]
                    yield node, buffer


def _parameters(function: cst.FunctionDef) -> set[str]:
    """The function's parameter names, but ``self``/``cls``."""
    params = function.params
    found = {p.name.value for p in (*params.posonly_params, *params.params, *params.kwonly_params)}
    found.update(extra.name.value for extra in (params.star_arg, params.star_kwarg) if isinstance(extra, cst.Param))
    return found - {"self", "cls"}


def _slot_of(target: cst.BaseExpression) -> list[cst.CSTNode]:
    """The index expressions of a subscript target (``idx`` of ``self.memory[idx]``), of every level."""
    found: list[cst.CSTNode] = []
    while type(target) is cst.Subscript:
        found.extend(target.slice)  # type: ignore[attr-defined]
        target = target.value  # type: ignore[attr-defined]
    return found


def _reads_buffer(value: cst.BaseExpression, buffer: str) -> bool:
    """Whether the value reads the buffer itself (a running statistic: ``0.9 * self.mean + ...``)."""
    return any(type(node) is cst.Attribute and dotted_name(node) == f"self.{buffer}" for node in walk(value))


def _concatenates(value: cst.BaseExpression) -> bool:
    """Whether the value is built by joining tensors (``torch.cat([keys, self.queue])[:K]``): a queue, not
    a running statistic."""
    while type(value) is cst.Subscript:
        value = value.value  # type: ignore[attr-defined]
    return type(value) is cst.Call and callee_name(value) in _JOINS  # type: ignore[arg-type]


def _buffer_slot(target: cst.BaseExpression, buffers: frozenset[str]) -> str | None:
    """The buffer ``self.queue[...]`` writes into (the subscript of a buffer, or of a view of one)."""
    if type(target) is not cst.Subscript:
        return None
    value = target.value  # type: ignore[attr-defined]
    while type(value) is cst.Subscript:
        value = value.value  # type: ignore[attr-defined]
    return _self_attribute(value, buffers)


def _self_attribute(expr: cst.BaseExpression, buffers: frozenset[str]) -> str | None:
    name = dotted_name(expr)
    if name is not None and name.startswith("self.") and name[5:] in buffers:
        return name[5:]
    return None


def _derived_names(method: cst.FunctionDef, seeds: set[str]) -> set[str]:
    """The seeds and the local names of the method assigned from them, directly or not."""
    derived = set(seeds)
    assignments = [node for node in walk(method.body) if type(node) in (cst.Assign, cst.AugAssign, cst.AnnAssign, cst.For)]
    changed = True
    while changed:
        changed = False
        for node in assignments:
            if type(node) is cst.For:
                value, targets = node.iter, [node.target]  # type: ignore[attr-defined]
            elif type(node) is cst.Assign:
                value, targets = node.value, [t.target for t in node.targets]  # type: ignore[attr-defined]
            else:
                value, targets = node.value, [node.target]  # type: ignore[attr-defined]
            if value is None or not _reads(value, derived):
                continue
            for target in targets:
                for name in _bound_names(target):
                    if name not in derived:
                        derived.add(name)
                        changed = True
    return derived


def _bound_names(target: cst.BaseExpression) -> list[str]:
    """The local names an assignment target binds (``a``, ``a, (b, *c)``; not an attribute or an item)."""
    if type(target) is cst.Name:
        return [target.value]  # type: ignore[attr-defined]
    if type(target) in (cst.Tuple, cst.List):
        return [name for element in target.elements for name in _bound_names(element.value)]  # type: ignore[attr-defined]
    if type(target) is cst.StarredElement:
        return _bound_names(target.value)  # type: ignore[attr-defined]
    return []


def _reads(expr: cst.CSTNode | list[cst.CSTNode], derived: set[str]) -> bool:
    """Whether the expression (or one of the nodes) reads the value of one of the names; a shape read from
    it does not count (``keys.shape[0]`` is the same on every rank for batches of one size)."""
    stack: list[cst.CSTNode] = list(expr) if isinstance(expr, list) else [expr]
    while stack:
        node = stack.pop()
        kind = type(node)
        if kind is cst.Name:
            if node.value in derived:  # type: ignore[attr-defined]
                return True
            continue
        if kind is cst.Arg:
            stack.append(node.value)  # type: ignore[attr-defined]  (not the keyword's name)
            continue
        if kind is cst.Attribute:
            if node.attr.value not in SHAPE_QUERIES:  # type: ignore[attr-defined]
                stack.append(node.value)  # type: ignore[attr-defined]  (``x.attr``: the attribute's name reads nothing)
            continue
        if kind is cst.Call and (call_method_name(node) in SHAPE_QUERIES or (type(node.func) is cst.Name and node.func.value == "len")):  # type: ignore[arg-type,attr-defined]
            continue
        stack.extend(tree.children(node))
    return False
