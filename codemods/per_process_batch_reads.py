"""DDP047 per-process-batch-reads."""

from __future__ import annotations

from typing import Callable, Iterator

import libcst as cst

from . import names
from .analysis import LoaderLoop, ScriptAnalysis, call_method_name, dotted_name, loader_argument, tree, walk
from .analysis.per_rank import PerRankValues, divides_a_shard_sum, rank_zero_outputs, training_batch_values
from .analysis.script import assignment_targets, backward_loss, is_parameter_group, own_method, own_methods, subscript_key
from .base import Change, Example, FixResult, FixSafety, Match, Note, Options, Phase, Rule, Valid
from .edits import Edits, code_of, expression
from .runtime_calls import runtime_name



#: What a count of this process's samples should be instead.
_COUNT_GLOBALLY = "count the global samples (multiply by runtime.world_size(), or runtime.reduce_sum the counts)"


class PerProcessBatchReads(Rule):
    """Compare a batch with the batch size of one process, once the loader's batch is split.

    What it finds, in a loop over a loader whose batch size the migration split
    (``batch_size=runtime.per_process_batch_size(B)``): a batch's size compared with ``B`` itself (``if
    x.size(0) < B: continue``, dropping an incomplete batch); a count of the samples or tokens the loop
    has seen that decides when training stops (``seen += x.size(0)``, then ``if seen >= budget: break``) or
    sets the learning rate (a warm-up over samples: ``group["lr"] = lr_at(seen)``); ``loader.batch_size``
    read anywhere (``steps = epochs * len(ds) // loader.batch_size``); tensors sized with ``B`` where the step
    meets them; and an object of the program's classes built with ``B`` whose class sizes tensors with it (a
    contrastive loss's ``(2B, 2B)`` mask made in ``__init__``: every rank failed at its first step).

    Why it is a problem: each process now loads ``B / N`` samples a step. Every batch looks incomplete
    next to ``B`` (a trial's loop skipped all of them: 0 steps, exit 0); a process counts only its own
    samples, so a budget of samples is reached after N times as many steps (60 against 30) and a warm-up
    over samples lasts N times as many steps (a trial's final learning rate 0.094 against 0.1); and
    ``loader.batch_size`` is the per-process size, so a step count computed from the whole data set comes
    out N times too large (a OneCycle schedule ended at 0.35 instead of 0.04).

    What the fix does: the comparison reads ``runtime.per_process_batch_size(B)``, the size a complete
    batch has on this process. The sample counts and ``loader.batch_size`` are left to a human: whether a
    number means this process's share or the global batch depends on what is done with it (the global
    batch is ``loader.batch_size * runtime.world_size()``; a global count is ``runtime.reduce_sum`` of the
    processes' counts).

    Fix safety: a complete batch of this process is compared with this process's batch size; on one
    process both are the original's.
    """

    code = "DDP047"
    name = "per-process-batch-reads"
    phase = Phase.OUTPUT
    fix_safety = FixSafety.SAFE
    triggers = ("per_process_batch_size",)
    manual_fix = "read the per-process batch size, or multiply by runtime.world_size() for the global one"
    examples = (
        Example(
            before="""\
from ddp_migrate import runtime
from torch.utils.data import DataLoader, DistributedSampler

loader = DataLoader(data, batch_size=runtime.per_process_batch_size(BATCH), sampler=DistributedSampler(data))
for x, y in loader:
    if x.size(0) < BATCH:
        continue
    loss_fn(model(x), y).backward()
""",
            after="""\
from ddp_migrate import runtime
from torch.utils.data import DataLoader, DistributedSampler

loader = DataLoader(data, batch_size=runtime.per_process_batch_size(BATCH), sampler=DistributedSampler(data))
for x, y in loader:
    if x.size(0) < runtime.per_process_batch_size(BATCH):
        continue
    loss_fn(model(x), y).backward()
""",
        ),
        Example(
            before="""\
from ddp_migrate import runtime
from torch.utils.data import DataLoader, DistributedSampler

loader = DataLoader(data, batch_size=runtime.per_process_batch_size(64), sampler=DistributedSampler(data))
seen = 0
for epoch in range(100):
    for x, y in loader:
        loss_fn(model(x), y).backward()
        seen += x.size(0)
    if seen >= budget:
        break
""",
        ),
        Valid(
            """\
from ddp_migrate import runtime
from torch.utils.data import DataLoader, DistributedSampler

loader = DataLoader(data, batch_size=runtime.per_process_batch_size(64), sampler=DistributedSampler(data))
total = 0.0
for x, y in loader:
    loss = loss_fn(model(x), y)
    loss.backward()
    total += loss.item() * x.size(0)
"""
        ),
    )

    def matches(self, analysis: ScriptAnalysis) -> Iterator[Match]:
        split = _split_loaders(analysis)
        if not split:
            return
        for loader, size in split.items():
            if size == "1" and analysis.owns(loader):
                yield Match(
                    loader,
                    "the original trained on batches of 1 sample, which cannot be split across processes "
                    "(runtime.per_process_batch_size(1) fails under torchrun with several processes): choose a global "
                    "batch that is a multiple of the number of processes (and adjust the learning rate), or keep "
                    "training on one process",
                    fixable=False,
                )
        for loop in analysis.loader_loops:
            sizes = [split[call] for call in loop.loader_calls if call in split]
            if not loop.trains or not sizes:
                continue
            batches = _batch_names(loop)
            canonical: set[str] | None = None
            for node in _own_nodes(loop.loop.body):
                if type(node) is cst.Slice:
                    if canonical is None:
                        canonical = _global_sizes(analysis, [call for call in loop.loader_calls if call in split])
                    for bound in (node.lower, node.upper):  # type: ignore[attr-defined]
                        if bound is not None and (code_of(bound) in sizes or _canonical(analysis, bound) in canonical):
                            # ``logits[:batch_size]`` of ``model(torch.cat([x, u]))``: the labelled part of a joined batch
                            yield Match(
                                bound,
                                f"a batch of this process is cut at {code_of(bound).strip()}, the global batch size: each "
                                f"process loads runtime.per_process_batch_size({code_of(bound).strip()}) samples a step, so the "
                                "cut falls inside another part of the batch; cut at the per-process size",
                            )
                if type(node) is cst.Comparison:
                    if canonical is None:
                        canonical = _global_sizes(analysis, [call for call in loop.loader_calls if call in split])
                    for side, first_axis in _compared_with_global_batch(analysis, node, batches, sizes, canonical):  # type: ignore[arg-type]
                        if not first_axis:
                            yield Match(
                                side,
                                f"a size of this process's batch on an axis other than the first is compared with "
                                f"{code_of(side)}, the global batch size: if that axis holds the samples (a "
                                f"sequence-first batch), each process now loads runtime.per_process_batch_size("
                                f"{code_of(side)}) of them a step and every batch looks incomplete; compare with the "
                                "per-process size there",
                                fixable=False,
                            )
                            continue
                        guarded = analysis.parent(node)
                        if type(guarded) is cst.If and guarded.test is node and _reads_code(guarded.body, code_of(side)):  # type: ignore[attr-defined]
                            # ``if x.size(0) < B: pad x up to B``: the body builds a global batch too
                            yield Match(
                                side,
                                f"a batch of this process is compared with {code_of(side)}, the global batch size, and "
                                f"the code it guards uses {code_of(side)} again (padding the batch up to it?): each process "
                                f"loads runtime.per_process_batch_size({code_of(side)}) samples a step; use the per-process "
                                "size in both",
                                fixable=False,
                            )
                            continue
                        yield Match(
                            side,
                            f"a batch of this process is compared with {code_of(side)}, the global batch size: each "
                            f"process loads runtime.per_process_batch_size({code_of(side)}) samples a step, so every "
                            "batch looks incomplete; compare with the per-process size",
                        )
            for counter, test in _budgets(analysis, loop, batches):
                yield Match(
                    counter,
                    f"`{code_of(counter).strip()}` counts this process's samples only, and `{code_of(test)}` decides "
                    f"when training stops: with N processes the budget is reached after N times as many steps; {_COUNT_GLOBALLY}",
                    fixable=False,
                )
            for accumulation, use in _steps_from_the_batch(loop, batches):
                yield Match(
                    accumulation,
                    f"`{code_of(accumulation).strip()}` derives a number of steps from this process's batch, and "
                    f"`{code_of(use).strip()}` counts steps with it: with N processes each batch is N times smaller, "
                    "so the number is N times larger (N times fewer optimizer steps); derive it from the global batch "
                    "(the batch's size * runtime.world_size())",
                    fixable=False,
                )
            for find, effect in _SCHEDULES:
                for counter, use in find(analysis, loop, batches):
                    yield Match(
                        counter,
                        f"`{code_of(counter).strip()}` counts this process's samples only, and `{code_of(use).strip()}` "
                        f"{effect}; {_COUNT_GLOBALLY}",
                        fixable=False,
                    )
        for call, size, global_size in _sized_with_the_global_batch(analysis, split):
            yield Match(
                call,
                f"`{code_of(call).strip()}` is sized with {size}, the global batch size: each process's batches now "
                f"have runtime.per_process_batch_size({global_size}) samples (a hidden state or a buffer per sample no longer "
                "fits them); size it with the per-process batch",
                fixable=False,
            )
        for call, size, cls, sized in _handed_to_a_sizing_class(analysis, split):
            yield Match(
                call,
                f"`{code_of(call.func)}(...)` is handed {size}, the global batch size, and {cls.name.value} sizes tensors "
                f"with it (`{code_of(sized).strip()}`): each process's batches now have runtime.per_process_batch_size("
                f"{size}) samples (a mask or labels of the global size no longer fit them); hand it the per-process batch",
                fixable=False,
            )
        for node in analysis.attributes:
            if node.attr.value == "sampler" and _length_taken(analysis, node) and any(origin in split for origin in analysis.origins(node.value)):
                if divides_a_shard_sum(analysis, analysis.parent(analysis.parent(node))):  # type: ignore[arg-type]
                    continue  # ``correct / len(loader.sampler)``: the mean over this process's share (DDP044's fix)
                yield Match(
                    node,
                    f"len({code_of(node)}) is now this process's share of the data set (the migration gave "
                    f"{code_of(node.value)} a DistributedSampler): the original's sampler went over the whole set, "
                    f"len({code_of(node.value)}.dataset)",
                )
                continue
            if node.attr.value == "batch_size" and any(origin in split for origin in analysis.origins(node.value)):
                yield Match(
                    node,
                    f"{code_of(node)} is now this process's batch size ({code_of(node.value)}'s batch was split across "
                    f"the processes): where the original's global batch is meant, read {code_of(node)} * "
                    "runtime.world_size()",
                    fixable=False,
                )

    def notes(self, analysis: ScriptAnalysis, options: Options) -> list[Note]:
        """A count of this process's samples that rank 0 alone shows (``runtime.print0(f"seen {seen}")``): the
        number is rank 0's share, 1/N of the original's."""
        split = _split_loaders(analysis)
        if not split:
            return []
        counters: set[tuple[object, str]] = set()
        for loop in analysis.loader_loops:
            if loop.trains and any(call in split for call in loop.loader_calls):
                scope = analysis.scope_of(loop.loop)
                counters |= {(scope, name) for name in _sample_counters(loop, _batch_names(loop))}
        if not counters:
            return []
        found = []
        for call, what in rank_zero_outputs(analysis):
            scope = analysis.scope_of(call)
            shown = next((n.value for n in walk(call) if type(n) is cst.Name and (scope, n.value) in counters), None)  # type: ignore[attr-defined]
            if shown is not None:
                found.append(
                    Note(
                        self.code,
                        analysis.line(call),
                        f"{what} shows {shown}, a count of rank 0's samples only (each process counts its share: the "
                        f"original counted N times as many); runtime.reduce_sum({shown}) first where the whole count is wanted",
                    )
                )
        return found

    def fix(self, analysis: ScriptAnalysis, options: Options) -> FixResult | None:
        edits = Edits(analysis)
        for match in self.matches_in(analysis):
            if not match.fixable:
                continue
            side = match.node
            assert isinstance(side, cst.BaseExpression)
            if type(side) is cst.Attribute and side.attr.value == "sampler":
                edits.replace(side.attr, cst.Name("dataset"))
                edits.changes.append(Change(self.code, analysis.line(side), "length of the whole data set read from the loader's dataset"))
                continue
            rt = runtime_name(analysis, edits)
            edits.replace(side, expression(f"{rt}.per_process_batch_size({code_of(side)})"))
            cut = type(analysis.parent(side)) is cst.Slice
            edits.changes.append(Change(self.code, analysis.line(side), "a batch cut at the per-process batch size" if cut else "a batch compared with the per-process batch size"))
        return edits.apply(analysis.module) if edits else None


def _split_loaders(analysis: ScriptAnalysis) -> dict[cst.CSTNode, str]:
    """The loaders of the program whose batch size is split (``per_process_batch_size(B)``), with ``B``'s code."""
    found: dict[cst.CSTNode, str] = {}
    for module in analysis.shared.analyses:
        for loader in module.loader_calls:
            size = loader_argument(loader, "batch_size")
            value = size.value if size is not None else None
            if type(value) is cst.Call and module.is_call_to(value, names.RUNTIME_PER_PROCESS_BATCH_SIZE) and value.args:  # type: ignore[arg-type]
                found[loader] = code_of(value.args[0].value)  # type: ignore[attr-defined]
    return found


def _global_sizes(analysis: ScriptAnalysis, loaders: list[cst.CSTNode]) -> set[str]:
    """What the split loaders' global batch sizes read, each spelled with the names it is read through replaced
    by what they hold (:func:`_canonical`: ``dcfg["batch_size"]`` of ``dcfg = cfg["data"]`` is
    ``cfg['data']['batch_size']``)."""
    found: set[str] = set()
    for loader in loaders:
        module = analysis.shared.analysis_of(loader) or analysis
        size = loader_argument(loader, "batch_size")  # type: ignore[arg-type]
        if size is not None and type(size.value) is cst.Call and size.value.args:  # type: ignore[attr-defined]
            found.add(_canonical(module, size.value.args[0].value))  # type: ignore[attr-defined]
    return found


def _canonical(analysis: ScriptAnalysis, expr: cst.BaseExpression, depth: int = 0) -> str:
    """An expression's code with each name read through replaced by the one value it is assigned in its scope
    (``bs`` of ``bs = dcfg["batch_size"]``, ``dcfg`` of ``dcfg = cfg["data"]``), and string keys in one quote:
    two spellings of one configured number read alike."""
    kind = type(expr)
    if kind is cst.Name and depth < 4:
        values = [v for v in analysis.flows_into(expr, expr.value) if isinstance(v, cst.BaseExpression)]  # type: ignore[attr-defined]
        if len(values) == 1 and values[0] is not expr:
            owner = analysis.shared.analysis_of(values[0]) or analysis
            return _canonical(owner, values[0], depth + 1)
        return expr.value  # type: ignore[attr-defined]
    if kind is cst.Subscript and len(expr.slice) == 1 and type(expr.slice[0].slice) is cst.Index:  # type: ignore[attr-defined]
        index = expr.slice[0].slice.value  # type: ignore[attr-defined]
        key = repr(index.evaluated_value) if type(index) is cst.SimpleString else code_of(index).strip()
        return f"{_canonical(analysis, expr.value, depth)}[{key}]"  # type: ignore[attr-defined]
    if kind is cst.Attribute:
        name = dotted_name(expr)
        if name is not None and name.startswith("self.") and name.count(".") == 1 and depth < 4:
            # ``self.bs`` of ``self.bs = cfg["batch_size"]`` in the class's ``__init__``
            values = [v for v in analysis.attribute_flows(expr, name) if isinstance(v, cst.BaseExpression)]
            if len(values) == 1 and values[0] is not expr:
                owner = analysis.shared.analysis_of(values[0]) or analysis
                return _canonical(owner, values[0], depth + 1)
        return f"{_canonical(analysis, expr.value, depth)}.{expr.attr.value}"  # type: ignore[attr-defined]
    return code_of(expr).strip()


def _batch_names(loop: LoaderLoop) -> set[str]:
    """The names the loop binds to its batch (``x, y``, ``batch``; not ``enumerate``'s index)."""
    target = loop.loop.target
    if type(loop.loop.iter) is cst.Call and dotted_name(loop.loop.iter.func) == "enumerate" and type(target) in (cst.Tuple, cst.List):  # type: ignore[attr-defined]
        elements = target.elements  # type: ignore[attr-defined]
        target = elements[1].value if len(elements) == 2 else target
    return {node.value for node in walk(target) if type(node) is cst.Name}  # type: ignore[attr-defined]


def _batch_size_read(expr: cst.BaseExpression, batches: set[str], tokens: bool = False, any_axis: bool = False) -> bool:
    """``x.size(0)``, ``x.shape[0]``, ``len(x)`` of a batch (or of a part of one: ``batch["ids"]``); with
    ``tokens``, ``x.numel()`` too (a count of tokens). Another dimension (``x.size(-1)``) is no batch size, but
    with ``any_axis`` (the size is compared with the batch size itself: ``src.size(1) != batch_size`` of a
    sequence-first batch) any one axis is."""
    is_axis = _is_axis if any_axis else _is_zero
    if type(expr) is cst.Call:
        method = call_method_name(expr)  # type: ignore[arg-type]
        if method == "size" and len(expr.args) == 1 and is_axis(expr.args[0].value):  # type: ignore[attr-defined]
            return _reads_batch(expr.func.value, batches)  # type: ignore[attr-defined]
        if method == "numel" and tokens:
            return _reads_batch(expr.func.value, batches)  # type: ignore[attr-defined]
        if dotted_name(expr.func) == "len" and len(expr.args) == 1:  # type: ignore[attr-defined]
            return _reads_batch(expr.args[0].value, batches)  # type: ignore[attr-defined]
    if type(expr) is cst.Subscript and type(expr.value) is cst.Attribute and expr.value.attr.value == "shape":  # type: ignore[attr-defined]
        elements = expr.slice  # type: ignore[attr-defined]
        if len(elements) == 1 and type(elements[0].slice) is cst.Index and is_axis(elements[0].slice.value):
            return _reads_batch(expr.value.value, batches)  # type: ignore[attr-defined]
    return False


def _is_axis(expr: cst.BaseExpression) -> bool:
    """Whether an expression is one axis written out (``0``, ``1``, ``-1``)."""
    if type(expr) is cst.UnaryOperation and type(expr.operator) is cst.Minus:  # type: ignore[attr-defined]
        expr = expr.expression  # type: ignore[attr-defined]
    return type(expr) is cst.Integer


def _length_taken(analysis: ScriptAnalysis, node: cst.CSTNode) -> bool:
    """Whether the node is the argument of ``len(...)``."""
    arg = analysis.parent(node)
    call = analysis.parent(arg) if type(arg) is cst.Arg else None
    return type(call) is cst.Call and dotted_name(call.func) == "len" and len(call.args) == 1  # type: ignore[attr-defined]


#: Calls that make a tensor of a given shape (``torch.zeros(1, batch_size, hidden)``).
_SHAPED = frozenset({f"torch.{n}" for n in ("zeros", "ones", "empty", "full", "randn", "rand", "randint", "arange", "eye")})


def _training_scopes(analysis: ScriptAnalysis, split: dict[cst.CSTNode, str]) -> Iterator[tuple[LoaderLoop, cst.CSTNode, set[str]]]:
    """Each loop that trains on split loaders whose global sizes are names (``args.bsz``, ``cfg.train.batch_size``),
    with the function around it (or the module) and those sizes; once per function and sizes (two loops of one
    function: its calls are read once)."""
    scanned: set[tuple[cst.CSTNode, frozenset[str]]] = set()
    for loop in analysis.loader_loops:
        sizes = {split[call] for call in loop.loader_calls if call in split}
        sizes = {size for size in sizes if all(part.isidentifier() for part in size.split("."))}
        if not loop.trains or not sizes:
            continue
        scope = analysis.enclosing_function(loop.loop) or analysis.module
        if (scope, frozenset(sizes)) not in scanned:
            scanned.add((scope, frozenset(sizes)))
            yield loop, scope, sizes


def _sized_with_the_global_batch(analysis: ScriptAnalysis, split: dict[cst.CSTNode, str]) -> Iterator[tuple[cst.Call, str, str]]:
    """Tensors made with a split loader's global batch size in their shape (``torch.zeros(1, batch_size, 4)``),
    and calls of ``init_hidden(batch_size)``-like methods, in the functions that iterate that loader: each with how
    to name the size read and the global size it holds."""
    for loop, scope, sizes in _training_scopes(analysis, split):
        # (and the functions of this module a step calls: SimCLR's ``self.info_nce_loss(features)`` builds its labels
        # with the batch size, anew at each step)
        callees = {
            t for c in walk(loop.loop.body) if type(c) is cst.Call for t in analysis.targets_of(c) if analysis.owns(t) and t is not scope  # type: ignore[arg-type]
        }
        for call in (n for body in (scope, *callees) for n in walk(body) if type(n) is cst.Call):
            shaped = analysis.is_call_to(call, _SHAPED) or "hidden" in (call_method_name(call) or dotted_name(call.func) or "")  # type: ignore[arg-type]
            if not shaped:
                continue
            for arg in call.args:  # type: ignore[attr-defined]
                parts = arg.value.elements if type(arg.value) in (cst.Tuple, cst.List) else [arg]
                named = sorted(
                    (size if size == code_of(part.value) else f"{code_of(part.value)} (a copy of {size})", size)
                    for part in parts
                    if (size := _copy_of_a_size(analysis, part.value, sizes)) is not None
                )
                if arg.keyword is None and named:
                    if not analysis.is_inside(call, scope) or _meets_the_batch(analysis, call, scope):
                        yield call, named[0][0], named[0][1]
                    break


def _handed_to_a_sizing_class(
    analysis: ScriptAnalysis, split: dict[cst.CSTNode, str]
) -> Iterator[tuple[cst.Call, str, cst.ClassDef, cst.Call]]:
    """Objects of the program's classes built, in a function that trains on a split loader, with its global batch
    size (``NTXentLoss(cfg.batch_size, t)``) where the class makes tensors of a shape read from it (``n = 2 *
    batch_size; mask = torch.ones((n, n))`` in ``__init__``, or with ``self.batch_size`` in a method): each with
    the size's spelling, the class and the call that makes such a tensor."""
    done: set[cst.Call] = set()
    for _, scope, sizes in _training_scopes(analysis, split):
        for call in analysis.nodes_below(scope):
            if type(call) is not cst.Call or call in done:
                continue
            cls = analysis.shared.constructed.get(call)  # type: ignore[call-overload]
            init = own_method(cls, "__init__") if cls is not None else None
            if cls is None or init is None:
                continue
            home = analysis.shared.analysis_of(cls) or analysis
            for param, argument in analysis.bound_arguments(call, init):  # type: ignore[arg-type]
                size = _copy_of_a_size(analysis, argument, sizes)
                sized = _tensor_sized_by(home, cls, init, param) if size is not None else None
                if sized is not None:
                    done.add(call)  # type: ignore[arg-type]
                    yield call, size, cls, sized  # type: ignore[misc]
                    break


def _tensor_sized_by(home: ScriptAnalysis, cls: cst.ClassDef, init: cst.FunctionDef, param: str) -> cst.Call | None:
    """A tensor-making call of the class (:data:`_SHAPED`) whose shape reads the ``__init__`` parameter: in
    ``__init__`` through local names computed from it (``n = 2 * batch_size``), in any method through an attribute
    it is kept in (``self.batch_size = batch_size``)."""
    kept: set[str] = set()
    local = {init: _sizes_within(home, init, {param}, kept)}
    methods = {method.name.value: method for method in own_methods(cls)}
    # A helper method handed the size (SimCLR's ``self.mask = self.mask_correlated_samples(batch_size)``): its
    # parameter holds the size there.
    for method in list(methods.values()):
        for call in home.nodes_below(method.body):
            callee = methods.get(dotted_name(call.func)[5:] or "") if type(call) is cst.Call and (dotted_name(call.func) or "").startswith("self.") else None  # type: ignore[attr-defined]
            if callee is None or callee is init:
                continue
            params = [p.name.value for p in callee.params.params][1:]
            handed = {
                params[i] for i, arg in enumerate(call.args)  # type: ignore[attr-defined]
                if arg.keyword is None and not arg.star and i < len(params) and _reads_any(home, arg.value, local.get(method, set()), kept)
            }
            if handed:
                local[callee] = local.get(callee, set()) | _sizes_within(home, callee, handed, kept)
    for method in methods.values():
        names = local.get(method, set())
        for call in home.nodes_below(method.body):
            if type(call) is cst.Call and home.is_call_to(call, _SHAPED) and any(_reads_any(home, arg.value, names, kept) for arg in call.args):  # type: ignore[arg-type, attr-defined]
                return call  # type: ignore[return-value]
    return None


def _sizes_within(home: ScriptAnalysis, method: cst.FunctionDef, local: set[str], kept: set[str]) -> set[str]:
    """The local names of a method computed from the names that hold the size (``n = 2 * batch_size``, a few steps
    deep), and the attributes of ``self`` it keeps them in (added to ``kept``)."""
    local = set(local)
    assignments = [node for node in home.nodes_below(method.body) if type(node) is cst.Assign]
    for _ in range(3):  # (a few steps: ``b = batch_size; n = 2 * b``)
        for node in assignments:
            if _reads_any(home, node.value, local, kept):  # type: ignore[attr-defined]
                for target in node.targets:  # type: ignore[attr-defined]
                    name = dotted_name(target.target)
                    if name is not None and name.startswith("self.") and name.count(".") == 1:
                        kept.add(name[5:])
                    elif name is not None and "." not in name:
                        local.add(name)
    return local


def _reads_any(home: ScriptAnalysis, expr: cst.CSTNode, names: set[str], kept: set[str]) -> bool:
    """Whether an expression reads one of the local names, or ``self.<attribute>`` of the kept attributes."""
    for node in home.nodes_below(expr):
        if type(node) is cst.Name and node.value in names:  # type: ignore[attr-defined]
            return True
        if type(node) is cst.Attribute and type(node.value) is cst.Name and node.value.value == "self" and node.attr.value in kept:  # type: ignore[attr-defined]
            return True
    return False


def _copy_of_a_size(analysis: ScriptAnalysis, expr: cst.BaseExpression, sizes: set[str]) -> str | None:
    """The split batch size (one of ``sizes``, as the loader's call spells it) an expression holds: spelled the
    same, or an attribute of the object it was handed to (``self.batch_size`` of ``Trainer(batch_size, model)``,
    ``self.args.batch_size`` of ``Trainer(args)``), followed through assignments and parameters a few steps."""
    text = code_of(expr)
    if text in sizes:
        return text
    name = dotted_name(expr)
    return _named_size(analysis, expr, name, sizes, 4) if name is not None else None


def _named_size(analysis: ScriptAnalysis, at: cst.CSTNode, name: str, sizes: set[str], depth: int) -> str | None:
    """:func:`_copy_of_a_size` of the dotted name read at the node ``at``, ``depth`` steps of value flow at most."""
    if name in sizes:
        return name
    if depth == 0:
        return None
    parts = name.split(".")
    held, rest = (".".join(parts[:2]), parts[2:]) if parts[0] == "self" and len(parts) > 1 else (parts[0], parts[1:])
    flows = analysis.attribute_flows(at, held) if held.startswith("self.") else analysis.flows_into(at, held)
    for value in flows:
        spelled = dotted_name(value)  # type: ignore[arg-type]
        if spelled is None:
            continue
        home = analysis.shared.analysis_of(value) or analysis
        found = _named_size(home, value, ".".join([spelled, *rest]), sizes, depth - 1)
        if found is not None:
            return found
    return None


def _meets_the_batch(analysis: ScriptAnalysis, call: cst.Call, scope: cst.CSTNode) -> bool:
    """Whether the tensor a call makes is step data: made in a training loop, or used together with a value of a
    training batch, in its own statement or, assigned to a name, in a statement of the scope that reads both
    (``output, hidden = model(x, hidden)``). A tensor made outside the loop that meets no batch (``fixed_noise =
    torch.randn(B, nz)`` for sample images only) keeps its size.
    Where the analysis cannot follow it (an attribute, no training batch seen), it counts as meeting one."""
    values = training_batch_values(analysis)
    if values is None:
        return True
    if any(loop.trains and analysis.is_inside(call, loop.loop.body) for loop in analysis.loader_loops):
        return True  # made anew for each step: the step's data (a GAN's ``z = torch.randn(B, nz)``, then ``G(z)``)
    statement = analysis.statement(call)
    target = analysis.assigned_to(call)  # (``hidden = model.init_hidden(B).to(device)`` too)
    if target is None:
        return _mentions_a_batch(values, statement, set())
    if type(target) is not cst.Name:
        return True
    names = {target.value}  # type: ignore[attr-defined]
    uses = {
        analysis.statement(node)
        for node in walk(scope)
        if type(node) is cst.Name and node.value in names and analysis.statement(node) is not statement  # type: ignore[attr-defined]
    }
    return any(_mentions_a_batch(values, use, names) for use in uses)


def _mentions_a_batch(values: PerRankValues, statement: cst.CSTNode, besides: set[str]) -> bool:
    """Whether a statement reads a value of a training batch (other than the names ``besides``)."""
    return any(
        type(node) is cst.Name and node.value not in besides and values.mention(node) is not None  # type: ignore[attr-defined]
        for node in walk(statement)
    )


def _is_zero(expr: cst.BaseExpression) -> bool:
    return type(expr) is cst.Integer and expr.value == "0"  # type: ignore[attr-defined]


def _reads_batch(expr: cst.BaseExpression, batches: set[str]) -> bool:
    while type(expr) in (cst.Subscript, cst.Attribute):
        expr = expr.value  # type: ignore[attr-defined]
    return type(expr) is cst.Name and expr.value in batches  # type: ignore[attr-defined]


def _compared_with_global_batch(
    analysis: ScriptAnalysis, node: cst.Comparison, batches: set[str], sizes: list[str], canonical: set[str]
) -> Iterator[tuple[cst.BaseExpression, bool]]:
    """The sides of ``x.size(0) < B`` that read the global batch size ``B`` opposite a batch's size (spelled as
    the loader spells it, or read through names and dicts that hold it: ``cfg["data"]["batch_size"]`` beside
    ``dcfg["batch_size"]``), each with whether that size is of the batch's first axis (another axis:
    ``src.size(1) != B`` of a sequence-first batch, or a feature axis the analysis cannot tell from it)."""
    sides = [node.left, *(c.comparator for c in node.comparisons)]
    if not any(_batch_size_read(side, batches, any_axis=True) for side in sides):
        return
    first_axis = any(_batch_size_read(side, batches) for side in sides)
    for side in sides:
        if not _batch_size_read(side, batches, any_axis=True) and (code_of(side) in sizes or _canonical(analysis, side) in canonical):
            yield side, first_axis


def _shape_names(loop: LoaderLoop, batches: set[str]) -> tuple[set[str], set[str]]:
    """The names the loop assigns a batch's size to (``bs = x.size(0)``, the first name of ``B, T = x.shape`` or
    ``x.size()``), and those it assigns the other dimensions of a batch's shape to (``T``)."""
    found: set[str] = set()
    dims: set[str] = set()
    for node in _own_nodes(loop.loop.body):
        if type(node) is not cst.Assign or len(node.targets) != 1:  # type: ignore[attr-defined]
            continue
        target, value = node.targets[0].target, node.value  # type: ignore[attr-defined]
        if type(target) is cst.Name and _batch_size_read(value, batches):
            found.add(target.value)  # type: ignore[attr-defined]
        elif type(target) in (cst.Tuple, cst.List) and target.elements and type(target.elements[0].value) is cst.Name:  # type: ignore[attr-defined]
            whole = (type(value) is cst.Attribute and value.attr.value == "shape") or (  # type: ignore[attr-defined]
                type(value) is cst.Call and call_method_name(value) == "size" and not value.args  # type: ignore[arg-type, attr-defined]
            )
            if whole and _reads_batch(value.value if type(value) is cst.Attribute else value.func.value, batches):  # type: ignore[attr-defined]
                found.add(target.elements[0].value.value)  # type: ignore[attr-defined]
                dims.update(e.value.value for e in target.elements[1:] if type(e.value) is cst.Name)  # type: ignore[attr-defined]
    return found, dims


def _bound_in(body: cst.CSTNode) -> set[str]:
    """The plain names a loop's body assigns (its per-step values, such as a loss)."""
    found: set[str] = set()
    for node in walk(body):
        for target in assignment_targets(node):
            found.update(n.value for n in walk(target) if type(n) is cst.Name)  # type: ignore[attr-defined]
    return found


def _counts_samples(expr: cst.BaseExpression, batches: set[str], sizes: set[str], others: set[str]) -> bool:
    """Whether an expression is a count of this batch's samples or tokens: a batch size (a read of one, or a
    name holding one), alone or multiplied by other sizes of the batch or by names and numbers
    (``B * T``, ``x.size(0) * x.size(1)``); a product with a computed value (``loss.item() * x.size(0)``) is not."""
    if _batch_size_read(expr, batches, tokens=True) or (type(expr) is cst.Name and expr.value in sizes):  # type: ignore[attr-defined]
        return True
    if type(expr) is not cst.BinaryOperation or not isinstance(expr.operator, cst.Multiply):  # type: ignore[attr-defined]
        return False
    factors = [expr.left, expr.right]  # type: ignore[attr-defined]
    if not any(_counts_samples(f, batches, sizes, others) for f in factors):
        return False
    return all(_counts_samples(f, batches, sizes, others) or _a_size(f, batches, others) for f in factors)


def _a_size(expr: cst.BaseExpression, batches: set[str], others: set[str]) -> bool:
    """A number, a name the loop does not compute (a sequence length set before it) or holding another
    dimension of a batch (``T`` of ``B, T = x.shape``), or such a dimension read (``x.size(1)``, ``x.shape[1]``)."""
    if type(expr) is cst.Integer:
        return True
    if type(expr) is cst.Name:
        return expr.value not in others  # type: ignore[attr-defined]
    if type(expr) is cst.Call and call_method_name(expr) == "size":  # type: ignore[arg-type]
        return _reads_batch(expr.func.value, batches)  # type: ignore[attr-defined]
    if type(expr) is cst.Subscript and type(expr.value) is cst.Attribute and expr.value.attr.value == "shape":  # type: ignore[attr-defined]
        return _reads_batch(expr.value.value, batches)  # type: ignore[attr-defined]
    return False


def _steps_from_the_batch(loop: LoaderLoop, batches: set[str]) -> Iterator[tuple[cst.Assign, cst.CSTNode]]:
    """``accum = target // len(xb)`` in the loop (a number divided by a batch's size), with the first use of
    ``accum`` that counts steps: ``i % accum``, ``range(accum)``."""
    sizes = _shape_names(loop, batches)[0]
    computed = _bound_in(loop.loop.body)
    nodes = _own_nodes(loop.loop.body)
    for node in nodes:
        if type(node) is not cst.Assign or len(node.targets) != 1 or type(node.targets[0].target) is not cst.Name:  # type: ignore[attr-defined]
            continue
        value = node.value  # type: ignore[attr-defined]
        if not (type(value) is cst.BinaryOperation and isinstance(value.operator, (cst.FloorDivide, cst.Divide))):  # type: ignore[attr-defined]
            continue
        if not _counts_samples(value.right, batches, sizes, computed):  # type: ignore[attr-defined]
            continue
        name = node.targets[0].target.value  # type: ignore[attr-defined]
        for use in nodes:
            if type(use) is cst.BinaryOperation and isinstance(use.operator, cst.Modulo) and code_of(use.right).strip() == name:  # type: ignore[attr-defined]
                yield node, use  # type: ignore[misc]
                break
            if type(use) is cst.Call and dotted_name(use.func) == "range" and any(code_of(a.value).strip() == name for a in use.args):  # type: ignore[attr-defined]
                yield node, use  # type: ignore[misc]
                break


def _sample_counters(loop: LoaderLoop, batches: set[str]) -> dict[str, cst.AugAssign]:
    """The names the loop adds its batches' sizes to (``seen += x.size(0)``, ``tokens += B * T`` after ``B, T =
    x.shape``), with the first such statement."""
    counters: dict[str, cst.AugAssign] = {}
    sizes, dims = _shape_names(loop, batches)
    computed = _bound_in(loop.loop.body) - dims  # (``loss_value * B`` is a sum of losses)
    for node in _own_nodes(loop.loop.body):
        if type(node) is cst.AugAssign and isinstance(node.operator, cst.AddAssign) and _counts_samples(node.value, batches, sizes, computed):  # type: ignore[attr-defined]
            name = dotted_name(node.target)  # type: ignore[attr-defined]
            if name is not None:
                counters.setdefault(name, node)  # type: ignore[arg-type]
    return counters


def _rates(analysis: ScriptAnalysis, loop: LoaderLoop, batches: set[str]) -> Iterator[tuple[cst.AugAssign, cst.CSTNode]]:
    """``seen += x.size(0)`` in the loop, with the statement in it that sets a learning rate from ``seen``
    (``group["lr"] = lr_at(seen)``, directly or through a name assigned from it)."""

    def sets_a_rate(target: cst.BaseExpression) -> bool:
        return type(target) is cst.Subscript and subscript_key(target) == "lr" and is_parameter_group(loop.loop, target.value)  # type: ignore[attr-defined]

    return _counted_into(loop, batches, sets_a_rate)


def _loss_weights(analysis: ScriptAnalysis, loop: LoaderLoop, batches: set[str]) -> Iterator[tuple[cst.AugAssign, cst.CSTNode]]:
    """``seen += x.size(0)`` in the loop, with the statement in it that computes the loss ``backward()`` is
    called on from ``seen`` (``beta = min(1.0, seen / warmup)`` then ``loss = rec + beta * kl``: a KL weight
    annealed over samples), directly or through names assigned from it."""
    losses = {name for call in analysis.backward_calls if analysis.is_inside(call, loop.loop) and (name := dotted_name(backward_loss(call)))}
    return _counted_into(loop, batches, lambda target: dotted_name(target) in losses)


def _counted_into(loop: LoaderLoop, batches: set[str], wanted: Callable[[cst.BaseExpression], bool]) -> Iterator[tuple[cst.AugAssign, cst.CSTNode]]:
    """The loop's first sample counter (:func:`_sample_counters`) whose value an assignment of the loop stores into
    a ``wanted`` target, read directly or through names assigned from it, with that assignment."""
    counters = _sample_counters(loop, batches)
    if not counters:
        return
    derived: dict[str, str] = dict(zip(counters, counters))  # a name read from a counter -> the counter
    for node in walk(loop.loop.body):
        if type(node) is not cst.Assign:
            continue
        read = {dotted_name(n) for n in walk(node.value) if type(n) in (cst.Name, cst.Attribute)}  # type: ignore[attr-defined]
        source = next((derived[r] for r in read if r in derived), None)
        if source is None:
            continue
        if any(wanted(t.target) for t in node.targets):  # type: ignore[attr-defined]
            yield counters[source], node
            return
        derived.update((name, source) for t in node.targets if (name := dotted_name(t.target)) is not None)  # type: ignore[attr-defined]


#: Schedules a count of this process's samples drives, and what N processes do to each.
_SCHEDULES = (
    (_rates, "sets the learning rate from it: with N processes the schedule (a warm-up) runs N times slower"),
    (_loss_weights, "weighs the loss with it: with N processes the schedule (an annealed weight) runs N times slower"),
)


def _budgets(analysis: ScriptAnalysis, loop: LoaderLoop, batches: set[str]) -> Iterator[tuple[cst.AugAssign, cst.BaseExpression]]:
    """``seen += x.size(0)`` in the loop, with the test of a ``break`` / ``while`` that reads ``seen``."""
    counters = _sample_counters(loop, batches)
    if not counters:
        return
    for node in analysis.preorder:
        test = None
        if type(node) is cst.While and analysis.is_inside(loop.loop, node):
            test = node.test  # type: ignore[attr-defined]
        elif type(node) is cst.If and any(_leaves(analysis, s, loop.loop) for s in walk(node.body) if type(s) is cst.Break):  # type: ignore[attr-defined]
            test = node.test  # type: ignore[attr-defined]
        if test is None:
            continue
        read = {dotted_name(n) for n in walk(test) if type(n) in (cst.Name, cst.Attribute)}
        for name, counter in counters.items():
            if name in read:
                yield counter, test
                counters = {k: v for k, v in counters.items() if k != name}
                break


def _leaves(analysis: ScriptAnalysis, stop: cst.CSTNode, loop: cst.For) -> bool:
    """Whether a ``break`` leaves the training loop: it breaks out of the loop itself or of one around it."""
    exited = analysis.nearest_loop(stop)
    return exited is not None and (exited is loop or analysis.is_inside(loop, exited))


def _own_nodes(body: cst.CSTNode) -> list[cst.CSTNode]:
    """The nodes of a loop's body outside the loops, functions and comprehensions nested in it (their
    variables are not this loop's batch)."""
    found: list[cst.CSTNode] = []
    stack = [body]
    while stack:
        node = stack.pop()
        found.append(node)
        for child in tree.children(node):
            if type(child) not in _NESTED:
                stack.append(child)
    return found


_NESTED = (cst.For, cst.While, cst.FunctionDef, cst.Lambda, cst.ClassDef, cst.ListComp, cst.SetComp, cst.DictComp, cst.GeneratorExp)


def _reads_code(node: cst.CSTNode, code: str) -> bool:
    """Whether an expression spelled ``code`` occurs in the node."""
    return any(type(n) in (cst.Name, cst.Attribute, cst.Subscript) and code_of(n) == code for n in walk(node))
