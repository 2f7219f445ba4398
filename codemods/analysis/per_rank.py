"""Which values hold this process's share of the data: a fact of the analysis for the rules about metrics
and decisions that differ between ranks (computed once per analysis: :func:`per_rank_values`)."""

from __future__ import annotations

from typing import Union

import libcst as cst

from .. import names
from .loaders import loader_facts
from .script import ScriptAnalysis, call_method_name, dotted_name, walk

Owner = Union[cst.Module, cst.FunctionDef, cst.ClassDef]
#: Methods that put a value into a container, so the container holds per-rank values too.
COLLECTING_METHODS = frozenset({"append", "extend", "add", "update", "insert"})
#: What describes a batch rather than measuring the model (``len(x)``, ``x.shape``): the same on every rank.
SHAPE_QUERIES = frozenset({"shape", "size", "dim", "ndim", "numel", "dtype", "device"})


class PerRankValues:
    """Which names hold values computed from this process's shard of the data (flow-insensitive).

    Seeds are the batches drawn from loaders with a ``DistributedSampler`` (not the ``enumerate`` index)
    and the losses ``backward()`` is called on; values computed from them are per-rank too, through
    assignments, ``for`` loops, ``list.append``, function arguments and return values. A name that is
    ever assigned from a reduction (``runtime.reduce_mean``, ...) or reduced in place
    (``dist.all_reduce(t)``) counts as reduced.
    """

    def __init__(self, analysis: ScriptAnalysis) -> None:
        self.analysis = analysis
        self.names: set[tuple[Owner, str]] = set()
        self.reduced: set[tuple[Owner, str]] = set()
        self.functions: set[cst.FunctionDef] = set()

    def key(self, node: cst.CSTNode, name: str) -> tuple[Owner, str]:
        if name.startswith("self."):
            owner = self.analysis.enclosing_class(node)
            if owner is not None:
                return (owner, name)
        return (self.analysis.scope_of(node), name)

    def holds(self, node: cst.CSTNode, name: str) -> bool:
        key = self.key(node, name)
        if key in self.reduced or (self.analysis.module, name) in self.reduced:
            return False
        return key in self.names or (self.analysis.module, name) in self.names

    def mention(self, expr: cst.CSTNode) -> str | None:
        """The first per-rank value an expression uses outside reductions (its source text), or ``None``."""
        if isinstance(expr, cst.Call):
            if self.analysis.is_call_to(expr, names.REDUCTIONS) or dotted_name(expr.func) == "len" or call_method_name(expr) in SHAPE_QUERIES:
                return None
            if self.analysis.call_target(expr) in self.functions:
                return dotted_name(expr.func) or "a per-rank value"
        if isinstance(expr, cst.Attribute) and expr.attr.value in SHAPE_QUERIES:
            return None
        if isinstance(expr, (cst.Name, cst.Attribute)):
            name = dotted_name(expr)
            if name is not None and self.holds(expr, name):
                return name
        for child in expr.children:
            found = self.mention(child)
            if found:
                return found
        return None

    def _mark(self, node: cst.CSTNode, target: cst.BaseExpression) -> bool:
        changed = False
        for part in walk(target):
            name = dotted_name(part) if isinstance(part, (cst.Name, cst.Attribute)) else None
            if name is None or isinstance(self.analysis.parent(part), cst.Attribute):
                continue
            key = self.key(node, name)
            if key not in self.names:
                self.names.add(key)
                changed = True
        return changed

    def solve(self, seeds: list[tuple[cst.CSTNode, cst.BaseExpression]]) -> None:
        analysis = self.analysis
        for node, target in seeds:
            self._mark(node, target)
        for assign in analysis.assignments:
            if any(isinstance(n, cst.Call) and analysis.is_call_to(n, names.REDUCTIONS) for n in walk(assign.value)):  # type: ignore[arg-type]
                targets = [t.target for t in assign.targets] if isinstance(assign, cst.Assign) else [assign.target]
                for target in targets:
                    name = dotted_name(target)
                    if name:
                        self.reduced.add(self.key(assign, name))
        for call in analysis.calls_to(names.REDUCTIONS):
            name = dotted_name(call.args[0].value) if call.args else None
            if name and self.analysis.is_call_to(call, names.TORCH_COLLECTIVES):  # in place: the tensor now holds the total
                self.reduced.add(self.key(call, name))
        for _ in range(10):
            changed = False
            for node in analysis.preorder:
                changed |= self._step(node)
            if not changed:
                break

    def _step(self, node: cst.CSTNode) -> bool:
        analysis = self.analysis
        if isinstance(node, cst.Assign) and self.mention(node.value):
            return any([self._mark(node, t.target) for t in node.targets])
        if isinstance(node, (cst.AugAssign, cst.AnnAssign)) and node.value is not None and self.mention(node.value):
            return self._mark(node, node.target)
        if isinstance(node, cst.For) and self.mention(node.iter):
            return self._mark(node, node.target)
        if isinstance(node, cst.Call) and call_method_name(node) in COLLECTING_METHODS and any(self.mention(a.value) for a in node.args):
            return self._mark(node, node.func.value)  # type: ignore[union-attr]
        if isinstance(node, cst.Return) and node.value is not None and self.mention(node.value):
            function = analysis.enclosing_function(node)
            if function is not None and function not in self.functions:
                self.functions.add(function)
                return True
        if isinstance(node, cst.Call):
            function = analysis.call_target(node)
            if function is not None:
                changed = False
                for param in (p.name.value for p in function.params.params):
                    argument = analysis.argument_for(node, function, param)
                    if argument is not None and self.mention(argument) and (function, param) not in self.names:
                        self.names.add((function, param))
                        changed = True
                return changed
        return False


def _seeds(analysis: ScriptAnalysis) -> list[tuple[cst.CSTNode, cst.BaseExpression]]:
    """The batches of the loaders a ``DistributedSampler`` shards, and the losses ``backward()`` is called on."""
    seeds: list[tuple[cst.CSTNode, cst.BaseExpression]] = []
    for loop in analysis.loader_loops:
        if not any(analysis.has_distributed_sampler(loader) for loader in loop.loader_calls):
            continue
        target = loop.loop.target
        is_enumerate = isinstance(loop.loop.iter, cst.Call) and dotted_name(loop.loop.iter.func) == "enumerate"
        if is_enumerate and isinstance(target, (cst.Tuple, cst.List)) and len(target.elements) == 2:
            target = target.elements[1].value  # the batch, not the index (the same on every rank)
        seeds.append((loop.loop, target))
    for call in analysis.backward_calls:
        receiver = call.func.value  # type: ignore[union-attr]
        if isinstance(receiver, (cst.Name, cst.Attribute)) and any(
            analysis.has_distributed_sampler(loader) for loader in loader_facts(analysis).training_loaders
        ):
            seeds.append((call, receiver))
    return seeds


def per_rank_values(analysis: ScriptAnalysis) -> PerRankValues | None:
    """The per-rank values of an analysed module (``None`` where no data is sharded: every rank sees the
    same), solved once and kept with the analysis."""
    return analysis.derived("per_rank_values", _solve)


def _solve(analysis: ScriptAnalysis) -> PerRankValues | None:
    seeds = _seeds(analysis)
    if not seeds:
        return None
    values = PerRankValues(analysis)
    values.solve(seeds)
    return values
