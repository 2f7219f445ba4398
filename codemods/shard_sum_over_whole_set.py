"""DDP044 shard-sum-over-whole-set."""

from __future__ import annotations

from typing import Iterator

import libcst as cst

from .analysis import ScriptAnalysis, dotted_name, loader_argument
from .analysis.script import unwrap_iterable
from .analysis.per_rank import per_rank_values
from .base import Change, Example, FixResult, FixSafety, Match, Options, Phase, Rule, Valid
from .edits import Edits, code_of, expression


class ShardSumOverWholeSet(Rule):
    """Average a sum over this process's shard by the shard's size, not by the whole data set's.

    What it finds: a value summed over the batches of a loader a ``DistributedSampler`` shards (the epoch's
    loss, a count of correct predictions), divided by ``len(loader.dataset)``, or by ``len(ds)`` of the data
    set a sharded loader of the same function draws from, written at the division or kept in a name
    (``n_train = len(ds)``).

    Why it is a problem: the original summed over the whole data set and divided by its size. Once the
    data is sharded, each process sums over its own share, about 1/N of the set, and the quotient comes out
    N times too small: the logged training loss halves on two processes (a trial: 5.75 against 11.31), and
    a learning-rate schedule or a decision on it goes wrong.

    What the fix does: divides by ``len(loader.sampler)``, the number of samples this process draws, so
    the value is the mean over its shard (reduce it across ranks for the mean over the whole set:
    ``runtime.weighted_mean``).

    Fix safety: the value is the shard's mean, which is what it measures on every rank; on one process the
    sampler draws the whole set, and the value is the original's.
    """

    code = "DDP044"
    name = "shard-sum-over-whole-set"
    phase = Phase.OUTPUT
    fix_safety = FixSafety.SAFE
    triggers = ("DistributedSampler",)
    requires = ("dataset", "len(")
    examples = (
        Example(
            before="""\
from torch.utils.data import DataLoader, DistributedSampler

loader = DataLoader(train_set, batch_size=32, sampler=DistributedSampler(train_set))
total = 0.0
for x, y in loader:
    loss = criterion(model(x), y)
    loss.backward()
    total += loss.item() * x.size(0)
print(total / len(loader.dataset))
""",
            after="""\
from torch.utils.data import DataLoader, DistributedSampler

loader = DataLoader(train_set, batch_size=32, sampler=DistributedSampler(train_set))
total = 0.0
for x, y in loader:
    loss = criterion(model(x), y)
    loss.backward()
    total += loss.item() * x.size(0)
print(total / len(loader.sampler))
""",
        ),
        # The data set's own length, where the sharded loader draws from it.
        Example(
            before="""\
from torch.utils.data import DataLoader, DistributedSampler

loader = DataLoader(train_set, batch_size=32, sampler=DistributedSampler(train_set))
correct = 0
for x, y in loader:
    out = model(x)
    criterion(out, y).backward()
    correct += (out.argmax(1) == y).sum().item()
print(correct / len(train_set))
""",
            after="""\
from torch.utils.data import DataLoader, DistributedSampler

loader = DataLoader(train_set, batch_size=32, sampler=DistributedSampler(train_set))
correct = 0
for x, y in loader:
    out = model(x)
    criterion(out, y).backward()
    correct += (out.argmax(1) == y).sum().item()
print(correct / len(loader.sampler))
""",
        ),
        # The length kept in a name (a trial: the shard's sum over the whole set's size, saved to a history file).
        Example(
            before="""\
from torch.utils.data import DataLoader, DistributedSampler

n_train = len(train_set)
loader = DataLoader(train_set, batch_size=32, sampler=DistributedSampler(train_set))
total = 0.0
for x, y in loader:
    loss = criterion(model(x), y)
    loss.backward()
    total += loss.item() * len(x)
history.append(total / n_train)
""",
            after="""\
from torch.utils.data import DataLoader, DistributedSampler

n_train = len(train_set)
loader = DataLoader(train_set, batch_size=32, sampler=DistributedSampler(train_set))
total = 0.0
for x, y in loader:
    loss = criterion(model(x), y)
    loss.backward()
    total += loss.item() * len(x)
history.append(total / len(loader.sampler))
""",
        ),
        # The size as a factor of the divisor (a trial's sequence loss: elements per sample times samples).
        Example(
            before="""\
from torch.utils.data import DataLoader, DistributedSampler

loader = DataLoader(train_set, batch_size=32, sampler=DistributedSampler(train_set))
total = 0.0
for x, y in loader:
    loss = criterion(model(x), y)
    loss.backward()
    total += loss.item() * y.numel()
print(total / (len(loader.dataset) * SEQ))
""",
            after="""\
from torch.utils.data import DataLoader, DistributedSampler

loader = DataLoader(train_set, batch_size=32, sampler=DistributedSampler(train_set))
total = 0.0
for x, y in loader:
    loss = criterion(model(x), y)
    loss.backward()
    total += loss.item() * y.numel()
print(total / (len(loader.sampler) * SEQ))
""",
        ),
        Valid(
            """\
from torch.utils.data import DataLoader, DistributedSampler

loader = DataLoader(train_set, batch_size=32, sampler=DistributedSampler(train_set))
val_loader = DataLoader(val_set, batch_size=64)
for x, y in loader:
    criterion(model(x), y).backward()
correct = sum((model(x).argmax(1) == y).sum().item() for x, y in val_loader)
print(correct / len(val_loader.dataset))
"""
        ),
    )

    def matches(self, analysis: ScriptAnalysis) -> Iterator[Match]:
        values = per_rank_values(analysis)
        if values is None:
            return
        for node in analysis.preorder:
            if type(node) is cst.BinaryOperation and isinstance(node.operator, (cst.Divide, cst.FloorDivide)):  # type: ignore[attr-defined]
                summed, right = node.left, node.right  # type: ignore[attr-defined]
            elif type(node) is cst.AugAssign and isinstance(node.operator, (cst.DivideAssign, cst.FloorDivideAssign)):  # type: ignore[attr-defined]
                summed, right = node.target, node.value  # type: ignore[attr-defined]  (``total /= len(train_set)``)
            else:
                continue
            for divisor in _factors(right):
                held = _length_held(analysis, divisor)
                length = held if held is not None else divisor
                loader = _sharded_loader_of_length(analysis, length)
                if loader is not None:
                    break
            if loader is None or (shown := values.mention(summed)) is None:
                continue
            # ``len(loader.dataset)`` written at the division has its attribute replaced; ``len(ds)``, or a name
            # holding either (``n_train = len(ds)``), is replaced whole there (the name keeps its value).
            dataset = _dataset_length_of(length)
            spelled = f" ({code_of(divisor)})" if held is not None else ""
            yield Match(
                dataset if dataset is not None and held is None else divisor,
                f"{shown} is summed over this rank's shard of {loader} but divided by the whole data set's "
                f"size{spelled}: the value comes out N times too small; divide by the shard's size (len({loader}.sampler))",
            )

    def fix(self, analysis: ScriptAnalysis, options: Options) -> FixResult | None:
        edits = Edits(analysis)
        for match in self.matches_in(analysis):
            node = match.node
            if isinstance(node, cst.Attribute):  # ``loader.dataset`` of ``len(loader.dataset)``
                edits.replace(node.attr, cst.Name("sampler"))
                edits.changes.append(Change(self.code, analysis.line(node), "the shard's sum divided by the shard's size (len(loader.sampler))"))
                continue
            held = _length_held(analysis, node) if isinstance(node, cst.Name) else None
            loader = _sharded_loader_of_length(analysis, held if held is not None else node)  # type: ignore[arg-type]
            edits.replace(node, expression(f"len({loader}.sampler)"))
            edits.changes.append(Change(self.code, analysis.line(node), f"the shard's sum divided by the shard's size (len({loader}.sampler))"))
        return edits.apply(analysis.module) if edits else None


def _factors(divisor: cst.BaseExpression) -> list[cst.BaseExpression]:
    """The divisor, then each factor of it where it is a product (``len(loader.dataset) * SEQ``: a size per
    sample times the samples)."""
    found = [divisor]
    if type(divisor) is cst.BinaryOperation and isinstance(divisor.operator, cst.Multiply):  # type: ignore[attr-defined]
        found += [*_factors(divisor.left), *_factors(divisor.right)]  # type: ignore[attr-defined]
    return found


def _sharded_loader_of_length(analysis: ScriptAnalysis, length: cst.BaseExpression) -> str | None:
    """The sharded loader whose whole data set a length measures, as the code names it: ``loader`` of
    ``len(loader.dataset)``, or of ``len(ds)`` where ``loader`` draws from ``ds`` (``None``: no such loader)."""
    dataset = _dataset_length_of(length)
    if dataset is None:
        return _sharded_loader_of_dataset(analysis, length)
    return code_of(dataset.value) if _sharded(analysis, dataset.value) else None


def _length_held(analysis: ScriptAnalysis, expr: cst.BaseExpression) -> cst.Call | None:
    """The ``len(...)`` a name holds where it is its only value (``n_train = len(ds)``), else ``None``."""
    if type(expr) is not cst.Name:
        return None
    values = analysis.flows_into(expr, expr.value)  # type: ignore[attr-defined]
    if len(values) != 1 or type(values[0]) is not cst.Call or dotted_name(values[0].func) != "len":  # type: ignore[attr-defined]
        return None
    return values[0]  # type: ignore[return-value]


def _dataset_length_of(expr: cst.BaseExpression) -> cst.Attribute | None:
    """``loader.dataset`` in ``len(loader.dataset)``."""
    if type(expr) is not cst.Call or dotted_name(expr.func) != "len" or len(expr.args) != 1:  # type: ignore[attr-defined]
        return None
    argument = expr.args[0].value  # type: ignore[attr-defined]
    return argument if type(argument) is cst.Attribute and argument.attr.value == "dataset" else None  # type: ignore[return-value]


def _sharded_loader_of_dataset(analysis: ScriptAnalysis, expr: cst.BaseExpression) -> str | None:
    """For ``len(ds)``, the name of a loader in the same function that draws from ``ds`` through a
    ``DistributedSampler`` (``loader = DataLoader(ds, sampler=DistributedSampler(ds))``)."""
    if type(expr) is not cst.Call or dotted_name(expr.func) != "len" or len(expr.args) != 1:  # type: ignore[attr-defined]
        return None
    name = dotted_name(expr.args[0].value)  # type: ignore[attr-defined]
    if name is None:
        return None
    function = analysis.enclosing_function(expr)
    for loader in analysis.loader_calls:
        dataset = loader_argument(loader, "dataset")
        if dataset is None or dotted_name(dataset.value) != name or analysis.enclosing_function(loader) is not function:
            continue
        if not analysis.has_distributed_sampler(loader):
            continue
        assign = analysis.parent(loader)
        if isinstance(assign, cst.Assign) and len(assign.targets) == 1 and (target := dotted_name(assign.targets[0].target)):
            return target
    return _loader_iterated_over(analysis, expr.args[0].value, function)  # type: ignore[attr-defined]


def _loader_iterated_over(analysis: ScriptAnalysis, dataset: cst.BaseExpression, function: cst.FunctionDef | None) -> str | None:
    """The name of a sharded loader the function iterates over (``for x, y in train_loader:``, a global or a
    parameter of it) whose data set holds the same value as ``dataset`` (the loader built elsewhere: at the top
    of the module, or in the caller that hands both in)."""
    if function is None:
        return None
    held = analysis.origins(dataset)
    if not held:
        return None
    for loop in analysis.nodes_below(function):
        if type(loop) is not cst.For:
            continue
        iterated = unwrap_iterable(loop.iter)  # type: ignore[attr-defined]  (``enumerate(loader)``)
        name = dotted_name(iterated)
        if name is None:
            continue
        for origin in analysis.origins(iterated):
            owner = analysis.shared.analysis_of(origin) or analysis
            if type(origin) is not cst.Call or origin not in owner.loader_calls or not owner.has_distributed_sampler(origin):  # type: ignore[arg-type]
                continue
            drawn = loader_argument(origin, "dataset")  # type: ignore[arg-type]
            if drawn is not None and not owner.origins(drawn.value).isdisjoint(held):
                return name
    return None


def _sharded(analysis: ScriptAnalysis, loader: cst.BaseExpression) -> bool:
    """Whether the expression holds a loader that a ``DistributedSampler`` shards (a loader of any module)."""
    for origin in analysis.origins(loader):
        owner = analysis.shared.analysis_of(origin)
        if type(origin) is cst.Call and owner is not None and origin in owner.loader_calls and owner.has_distributed_sampler(origin):  # type: ignore[arg-type]
            return True
    return False
