"""DDP047 per-process-batch-reads."""

from __future__ import annotations

from typing import Iterator

import libcst as cst

from . import names
from .analysis import LoaderLoop, ScriptAnalysis, call_method_name, dotted_name, loader_argument, walk
from .analysis.script import is_parameter_group, subscript_key
from .base import Change, Example, FixResult, FixSafety, Match, Options, Phase, Rule, Valid
from .edits import Edits, code_of, expression
from .runtime_calls import runtime_name

_SPLIT = frozenset({f"{names.RUNTIME_MODULE}.per_process_batch_size", f"{names.VENDORED_RUNTIME}.per_process_batch_size"})


#: What a count of this process's samples should be instead.
_COUNT_GLOBALLY = "count the global samples (multiply by runtime.world_size(), or runtime.reduce_sum the counts)"


class PerProcessBatchReads(Rule):
    """Compare a batch with the batch size of one process, once the loader's batch is split.

    What it finds, in a loop over a loader whose batch size the migration split
    (``batch_size=runtime.per_process_batch_size(B)``): a batch's size compared with ``B`` itself (``if
    x.size(0) < B: continue``, dropping an incomplete batch); a count of the samples or tokens the loop
    has seen that decides when training stops (``seen += x.size(0)``, then ``if seen >= budget: break``) or
    sets the learning rate (a warm-up over samples: ``group["lr"] = lr_at(seen)``); and ``loader.batch_size``
    read anywhere (``steps = epochs * len(ds) // loader.batch_size``).

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
        for loop in analysis.loader_loops:
            sizes = [split[call] for call in loop.loader_calls if call in split]
            if not loop.trains or not sizes:
                continue
            batches = _batch_names(loop)
            for node in _own_nodes(loop.loop.body):
                if type(node) is cst.Comparison:
                    for side in _compared_with_global_batch(node, batches, sizes):  # type: ignore[arg-type]
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
            for counter, setting in _rates(analysis, loop, batches):
                yield Match(
                    counter,
                    f"`{code_of(counter).strip()}` counts this process's samples only, and `{code_of(setting).strip()}` "
                    f"sets the learning rate from it: with N processes the schedule (a warm-up) runs N times slower; {_COUNT_GLOBALLY}",
                    fixable=False,
                )
        for node in analysis.attributes:
            if node.attr.value == "batch_size" and any(origin in split for origin in analysis.origins(node.value)):
                yield Match(
                    node,
                    f"{code_of(node)} is now this process's batch size ({code_of(node.value)}'s batch was split across "
                    f"the processes): where the original's global batch is meant, read {code_of(node)} * "
                    "runtime.world_size()",
                    fixable=False,
                )

    def fix(self, analysis: ScriptAnalysis, options: Options) -> FixResult | None:
        edits = Edits(analysis)
        for match in self.matches_in(analysis):
            if not match.fixable:
                continue
            side = match.node
            assert isinstance(side, cst.BaseExpression)
            rt = runtime_name(analysis, edits)
            edits.replace(side, expression(f"{rt}.per_process_batch_size({code_of(side)})"))
            edits.changes.append(Change(self.code, analysis.line(side), "a batch compared with the per-process batch size"))
        return edits.apply(analysis.module) if edits else None


def _split_loaders(analysis: ScriptAnalysis) -> dict[cst.CSTNode, str]:
    """The loaders of the program whose batch size is split (``per_process_batch_size(B)``), with ``B``'s code."""
    found: dict[cst.CSTNode, str] = {}
    for module in analysis.shared.analyses:
        for loader in module.loader_calls:
            size = loader_argument(loader, "batch_size")
            value = size.value if size is not None else None
            if type(value) is cst.Call and module.is_call_to(value, _SPLIT) and value.args:  # type: ignore[arg-type]
                found[loader] = code_of(value.args[0].value)  # type: ignore[attr-defined]
    return found


def _batch_names(loop: LoaderLoop) -> set[str]:
    """The names the loop binds to its batch (``x, y``, ``batch``; not ``enumerate``'s index)."""
    target = loop.loop.target
    if type(loop.loop.iter) is cst.Call and dotted_name(loop.loop.iter.func) == "enumerate" and type(target) in (cst.Tuple, cst.List):  # type: ignore[attr-defined]
        elements = target.elements  # type: ignore[attr-defined]
        target = elements[1].value if len(elements) == 2 else target
    return {node.value for node in walk(target) if type(node) is cst.Name}  # type: ignore[attr-defined]


def _batch_size_read(expr: cst.BaseExpression, batches: set[str], tokens: bool = False) -> bool:
    """``x.size(0)``, ``x.shape[0]``, ``len(x)`` of a batch (or of a part of one: ``batch["ids"]``); with
    ``tokens``, ``x.numel()`` too (a count of tokens). Another dimension (``x.size(-1)``) is no batch size."""
    if type(expr) is cst.Call:
        method = call_method_name(expr)  # type: ignore[arg-type]
        if method == "size" and len(expr.args) == 1 and _is_zero(expr.args[0].value):  # type: ignore[attr-defined]
            return _reads_batch(expr.func.value, batches)  # type: ignore[attr-defined]
        if method == "numel" and tokens:
            return _reads_batch(expr.func.value, batches)  # type: ignore[attr-defined]
        if dotted_name(expr.func) == "len" and len(expr.args) == 1:  # type: ignore[attr-defined]
            return _reads_batch(expr.args[0].value, batches)  # type: ignore[attr-defined]
    if type(expr) is cst.Subscript and type(expr.value) is cst.Attribute and expr.value.attr.value == "shape":  # type: ignore[attr-defined]
        elements = expr.slice  # type: ignore[attr-defined]
        if len(elements) == 1 and type(elements[0].slice) is cst.Index and _is_zero(elements[0].slice.value):
            return _reads_batch(expr.value.value, batches)  # type: ignore[attr-defined]
    return False


def _is_zero(expr: cst.BaseExpression) -> bool:
    return type(expr) is cst.Integer and expr.value == "0"  # type: ignore[attr-defined]


def _reads_batch(expr: cst.BaseExpression, batches: set[str]) -> bool:
    while type(expr) in (cst.Subscript, cst.Attribute):
        expr = expr.value  # type: ignore[attr-defined]
    return type(expr) is cst.Name and expr.value in batches  # type: ignore[attr-defined]


def _compared_with_global_batch(node: cst.Comparison, batches: set[str], sizes: list[str]) -> Iterator[cst.BaseExpression]:
    """The sides of ``x.size(0) < B`` that spell the global batch size ``B`` opposite a batch's size."""
    sides = [node.left, *(c.comparator for c in node.comparisons)]
    if not any(_batch_size_read(side, batches) for side in sides):
        return
    for side in sides:
        if not _batch_size_read(side, batches) and code_of(side) in sizes:
            yield side


def _sample_counters(loop: LoaderLoop, batches: set[str]) -> dict[str, cst.AugAssign]:
    """The names the loop adds its batches' sizes to (``seen += x.size(0)``), with the first such statement."""
    counters: dict[str, cst.AugAssign] = {}
    for node in _own_nodes(loop.loop.body):
        if type(node) is cst.AugAssign and isinstance(node.operator, cst.AddAssign) and _batch_size_read(node.value, batches, tokens=True):  # type: ignore[attr-defined]
            name = dotted_name(node.target)  # type: ignore[attr-defined]
            if name is not None:
                counters.setdefault(name, node)  # type: ignore[arg-type]
    return counters


def _rates(analysis: ScriptAnalysis, loop: LoaderLoop, batches: set[str]) -> Iterator[tuple[cst.AugAssign, cst.CSTNode]]:
    """``seen += x.size(0)`` in the loop, with the statement in it that sets a learning rate from ``seen``
    (``group["lr"] = lr_at(seen)``, directly or through a name assigned from it)."""
    counters = _sample_counters(loop, batches)
    if not counters:
        return
    derived: dict[str, str] = {}  # a name assigned from a counter -> the counter
    for node in walk(loop.loop.body):
        if type(node) is cst.Assign:
            read = {dotted_name(n) for n in walk(node.value) if type(n) in (cst.Name, cst.Attribute)}  # type: ignore[attr-defined]
            source = next((c for c in counters if c in read), None) or next((derived[r] for r in read if r in derived), None)
            if source is None:
                continue
            for target in node.targets:  # type: ignore[attr-defined]
                if type(target.target) is cst.Subscript and subscript_key(target.target) == "lr" and is_parameter_group(loop.loop, target.target.value):
                    yield counters[source], node
                    return
                name = dotted_name(target.target)
                if name is not None:
                    derived[name] = source


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
        for child in node.children:
            if type(child) not in _NESTED:
                stack.append(child)
    return found


_NESTED = (cst.For, cst.While, cst.FunctionDef, cst.Lambda, cst.ClassDef, cst.ListComp, cst.SetComp, cst.DictComp, cst.GeneratorExp)


def _reads_code(node: cst.CSTNode, code: str) -> bool:
    """Whether an expression spelled ``code`` occurs in the node."""
    return any(type(n) in (cst.Name, cst.Attribute, cst.Subscript) and code_of(n) == code for n in walk(node))
