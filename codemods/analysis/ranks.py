"""Rank dependence: which values may differ between the processes of one job (design principle 4).

One data-flow fact, three answers for any expression (:class:`Kind`):

- ``RANK``: its value flows from a rank source (``RANK`` / ``LOCAL_RANK`` in the environment,
  ``dist.get_rank()``, ``runtime.rank()`` / ``local_rank()`` / ``is_main_process()``, the launcher's
  ``args.local_rank``, ``mp.spawn``'s first parameter, ...) through assignments (``master_process = rank ==
  0``), attributes, function parameters and return values of the file's helpers (``def get_rank(): return
  dist.get_rank()``);
- ``UNIFORM``: provably the same on every rank (literals, the command line, the world size, loop counters
  over such values, results of a reduction across ranks, ...);
- ``UNKNOWN``: the analysis cannot tell (calls of unknown functions, model outputs, data from a sharded
  loader, values of unknown attributes). Where a collective would sit under such a condition it counts
  as possibly rank-dependent.

On top of it: :meth:`RankFacts.collective_safe_at` (no possibly rank-dependent condition around a node,
within its function and at every call site of its function, transitively) and :meth:`RankFacts.guard`
(the rank-dependent condition that lets only some ranks run a node: what makes a write or a print
rank-0-only). Every walk over the call graph is bounded by visited sets, so recursive helpers are fine.

Computed once per :class:`~ddp_migrate.codemods.analysis.ScriptAnalysis` (:func:`rank_facts`).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator, Optional, Union

import libcst as cst

from .. import names
from . import tree
from .legacy import ENV_GETTERS, Key, LaunchIndex, LegacyFacts, int_value, legacy_facts, target_nodes
from .script import (
    SELF_RETURNING_METHODS,
    ScriptAnalysis,
    backward_loss,
    binding_name,
    call_method_name,
    callee_name,
    dotted_name,
    is_none,
    keyword_argument,
    leaves_early,
    leaves_function,
    loader_argument,
    name_root,
    walk,
)


#: Whether torch.distributed is there and its group up: on a rank other than 0 of a job, both are.
_GROUP_IS_UP = names.GROUP_IS_INITIALIZED | names.distributed("is_available")


#: Methods that walk a model's structure: every rank's model has the same names, modules and parameters.
MODEL_STRUCTURE_METHODS = frozenset(
    {"named_buffers", "named_parameters", "named_modules", "named_children", "modules", "children", "parameters", "buffers"}
)
#: Libraries' decorators that run the function they wrap on rank 0 only.
RANK_ZERO_DECORATORS = frozenset(
    {
        "mmcv.runner.master_only",
        "mmcv.runner.dist_utils.master_only",
        "mmengine.dist.master_only",
        "mmengine.dist.utils.master_only",
        "pytorch_lightning.utilities.rank_zero_only",
        "pytorch_lightning.utilities.rank_zero.rank_zero_only",
        "lightning.pytorch.utilities.rank_zero_only",
        "lightning.pytorch.utilities.rank_zero.rank_zero_only",
        "lightning.fabric.utilities.rank_zero.rank_zero_only",
        "lightning_utilities.core.rank_zero.rank_zero_only",
    }
)


class Kind(enum.IntEnum):
    """How a value relates to the ranks of a job, ordered so that ``max`` combines parts of an expression."""

    UNIFORM = 0
    UNKNOWN = 1
    RANK = 2


#: Environment variables that differ between the processes of one job (torchrun sets them per process).
RANK_VARIABLES = frozenset({"RANK", "LOCAL_RANK", "GROUP_RANK", "ROLE_RANK", "SLURM_PROCID", "SLURM_LOCALID", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK"})
#: Calls whose value is this process's rank (or derived from it).
RANK_CALLS = (
    names.RUNTIME_RANK
    | names.RUNTIME_MAIN_CHECK
    | {names.runtime("local_rank")}
    | names.distributed("get_rank")
    | names.distributed("get_node_local_rank")
    | names.distributed("get_global_rank")
    | names.distributed("get_group_rank")
    | {"torch.distributed.get_node_local_rank"}
)
#: Collectives that leave their first argument alike on every rank: the total, rank ``src``'s value, or every
#: rank's values (``reduce`` and ``gather`` leave it on one rank only).
IN_PLACE_COMMON = frozenset(
    q
    for name in ("all_reduce", "broadcast", "all_gather", "all_gather_into_tensor", "all_gather_object", "broadcast_object_list")
    for q in names.distributed(name)
)
#: Calls whose value is the same on every rank whatever their arguments. This process's device counts as the
#: same: data moved to it keeps its value, and a device is no evidence that a print "carries the rank".
UNIFORM_CALLS = (
    names.REDUCTIONS
    | names.distributed("get_world_size")
    | _GROUP_IS_UP
    | names.distributed("get_backend")
    | names.CUDA_QUERIES
    | {names.runtime(n) for n in ("world_size", "local_world_size", "per_process_batch_size", "device", "device_ids")}
    | {"torch.cuda.is_bf16_supported", "torch.backends.mps.is_available", "torch.accelerator.is_available", "torch.accelerator.device_count"}
)
#: Calls that compute their value from their arguments alone: uniform arguments give a uniform value.
PURE_CALLS = frozenset(
    {
        *(f"builtins.{n}" for n in (
            "int", "float", "str", "bool", "len", "range", "abs", "min", "max", "round", "sum", "isinstance",
            "issubclass", "hasattr", "getattr", "tuple", "list", "dict", "set", "frozenset", "sorted", "enumerate",
            "zip", "reversed", "any", "all", "type", "repr", "format", "divmod", "pow", "ord", "chr", "map", "filter",
        )),
        "argparse.ArgumentParser",
        "torch.device",
        "torch.load",
        "torch.serialization.load",
        names.runtime("load"),
        "json.load",
        "json.loads",
        "yaml.safe_load",
        "yaml.load",
        "pickle.load",
        "numpy.load",
    }
)
#: Modules whose functions (and constants) compute from their arguments alone.
PURE_MODULES = ("math.", "os.path.", "operator.", "pathlib.", "string.")
#: Questions to the file system: a file one rank writes appears to the others at any time, so the answer may
#: differ between ranks (``if not os.path.exists(path): save(...)`` run by a rank that starts late).
FILE_SYSTEM_QUERIES = frozenset(
    {f"os.path.{n}" for n in ("exists", "lexists", "isfile", "isdir", "islink", "getsize", "getmtime", "getctime")}
    | {"os.listdir", "os.scandir", "glob.glob", "glob.iglob"}
)
#: The same questions as methods (``Path(path).exists()``).
FILE_SYSTEM_METHODS = frozenset({"exists", "is_file", "is_dir", "iterdir", "glob", "rglob"})
#: Keyword arguments that do not change the value a pure call computes (the device a checkpoint lands on).
IGNORED_KEYWORDS = frozenset({"map_location", "weights_only"})
#: Names that, when the analysis cannot resolve them, almost surely hold the rank (a hint, never a proof of
#: uniformity: unresolved values count as possibly rank-dependent anyway).
RANK_NAMES = frozenset(
    {
        "rank", "local_rank", "global_rank", "world_rank", "node_rank", "gpu", "gpu_id", "device_id",
        "is_main", "is_master", "master_process", "main_process", "is_main_process", "is_master_process",
        "is_rank_zero", "is_rank0", "rank0", "is_chief",
    }
)
ALWAYS_UNIFORM_NAMES = frozenset({"True", "False", "None", "__name__", "__file__", "NotImplemented", "Ellipsis"})

Store = tuple[str, Optional[cst.BaseExpression]]  # ("iter" | "index" | "value" | "unknown", expression)
Conditional = Union[cst.If, cst.While, cst.IfExp, cst.BooleanOperation, cst.For, cst.ExceptHandler, cst.CompIf]


@dataclass(frozen=True)
class Condition:
    """A condition around a node: the statement or expression that decides whether the node runs, its
    test, how that test relates to the ranks, and whether the node is in the branch the test selects
    (``True``), in the other one (``False``) or neither applies (``None``: a loop, an ``except``)."""

    owner: cst.CSTNode
    test: cst.CSTNode
    kind: Kind
    in_body: bool | None
    #: An ``if`` before the node (not around it) whose branch leaves early: the paths it splits rejoin
    #: after the loop it leaves (``continue`` / ``break``), or only at the function's callers (``return``).
    early_exit: bool = False

    @property
    def splits_ranks(self) -> bool:
        """Whether the test may differ between the ranks of one job."""
        return self.kind is not Kind.UNIFORM


class _Stores:
    """Bindings the legacy facts record without a value: loop targets, ``with ... as``, ``+=``, walrus."""

    def __init__(self) -> None:
        self.found: list[tuple[cst.CSTNode, Store]] = []

    def _add(self, target: cst.CSTNode, store: Store) -> None:
        for node in target_nodes(target):
            self.found.append((node, store))

    def visit_For(self, node: cst.For) -> None:
        self._loop(node.target, node.iter)

    def visit_CompFor(self, node: cst.CompFor) -> None:
        self._loop(node.target, node.iter)

    def _loop(self, target: cst.BaseExpression, iterable: cst.BaseExpression) -> None:
        is_enumerate = isinstance(iterable, cst.Call) and isinstance(iterable.func, cst.Name) and iterable.func.value == "enumerate" and iterable.args
        if is_enumerate and isinstance(target, (cst.Tuple, cst.List)) and len(target.elements) == 2:
            self._add(target.elements[0].value, ("index", iterable.args[0].value))  # type: ignore[union-attr]
            self._add(target.elements[1].value, ("iter", iterable.args[0].value))  # type: ignore[union-attr]
        else:
            self._add(target, ("iter", iterable))

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        self._add(node.target, ("value", node.value))

    def visit_WithItem(self, node: cst.WithItem) -> None:
        if node.asname is not None:
            self._add(node.asname.name, ("value", node.item))

    def visit_NamedExpr(self, node: cst.NamedExpr) -> None:
        self._add(node.target, ("value", node.value))

    def visit_ExceptHandler(self, node: cst.ExceptHandler) -> None:
        if node.name is not None:
            self._add(node.name.name, ("unknown", None))

    def visit_Global(self, node: cst.Global) -> None:
        for item in node.names:
            self._add(item.name, ("unknown", None))


#: Values the same on every rank whatever they hold (an exact ``type() in`` test, see :meth:`RankFacts._compute`).
_CONSTANT_TYPES = frozenset({cst.Integer, cst.Float, cst.Imaginary, cst.SimpleString, cst.Ellipsis, cst.Lambda})


#: :attr:`RankFacts._lowest` of a walk no cycle cut.
_NO_CYCLE = 1 << 62


class _OverBudget(Exception):
    """An exhaustive rank query went past its budget (it is answered again in bounded mode)."""


class RankFacts:
    """Rank dependence of the values and positions of one analysed file. Use :func:`rank_facts`."""

    #: How deep a single query may follow values before it gives up (and answers ``UNKNOWN``).
    MAX_DEPTH = 60
    #: How many values a query may visit exhaustively. Results found inside a cycle of the data flow are
    #: not kept (they may be partial), so a query walks every path through such a cycle: exponential in a
    #: large module whose values feed each other (a test suite's table of cases). Past this budget the query
    #: is answered again in bounded mode (:meth:`kind`).
    MAX_EXHAUSTIVE_STEPS = 5_000

    def __init__(self, analysis: ScriptAnalysis) -> None:
        self.analysis = analysis
        self.legacy: LegacyFacts = legacy_facts(analysis)
        collector = _Stores()
        tree.dispatch(analysis.index.preorder, collector)
        self._stores: dict[Key, list[Store]] = {}
        for node, store in collector.found:
            name = dotted_name(node) if isinstance(node, (cst.Name, cst.Attribute)) else None
            if name:
                self._stores.setdefault(self.legacy.key(node, name), []).append(store)
        #: For each container name, the values stored into its items (``_STATE["rank"] = dist.get_rank()``).
        self._item_stores: dict[str, list[cst.BaseExpression]] = {}
        for assign in analysis.assignments:
            if type(assign) is cst.Assign:
                for target in assign.targets:  # type: ignore[union-attr]
                    container = dotted_name(target.target.value) if type(target.target) is cst.Subscript else None  # type: ignore[attr-defined]
                    if container:
                        self._item_stores.setdefault(container, []).append(assign.value)  # type: ignore[arg-type]
        #: For each name, the in-place collectives that make its value alike on every rank (``dist.all_reduce(t)``).
        self._made_common: dict[Key, list[cst.Call]] = {}
        for call in analysis.calls_to(IN_PLACE_COMMON):
            if any(a.keyword is not None and a.keyword.value in ("group", "async_op") for a in call.args):
                continue  # a sub-group's total, or one not waited for here: not the whole job's value
            first = call.args[0].value if call.args and call.args[0].keyword is None else None
            name = dotted_name(first) if first is not None else None
            if name:
                self._made_common.setdefault(self.legacy.key(first, name), []).append(call)  # type: ignore[arg-type]
        self._memo: dict[cst.CSTNode, Kind] = {}
        #: The answer of every query asked from outside (:meth:`kind`). An exhaustive query's answer is in
        #: :attr:`_memo` already (its root closes every cycle of its walk); this keeps the answers of queries
        #: answered in bounded mode, which :attr:`_memo` does not, so a test asked again for every statement
        #: under one ``if`` is not walked again.
        self._answers: dict[cst.CSTNode, Kind] = {}
        #: Per block: for each of its statements, the early exits before it (:meth:`_early_exits`).
        self._exits_of: dict[cst.CSTNode, dict[cst.CSTNode, tuple[Condition, ...]]] = {}
        #: The values being computed, each with its place on the walk's stack (:meth:`_enter`).
        self._active: dict[object, int] = {}
        #: The highest place on the stack a cycle cut the current value's walk at (:meth:`_cut`).
        self._lowest = _NO_CYCLE
        self._steps_left: int | None = None  # the exhaustive query's budget (``None`` between queries)
        #: In bounded mode: results the query found inside a cycle, reused within the query (never kept).
        self._query_memo: dict[cst.CSTNode, Kind] | None = None

    # ------------------------------------------------------------------------------------- queries

    def kind(self, expr: cst.CSTNode) -> Kind:
        """How the expression's value relates to the ranks (see :class:`Kind`).

        A query first follows every path of the data flow (the exact answer), within
        :data:`MAX_EXHAUSTIVE_STEPS`. Past that it is answered again in bounded mode: a result found inside
        a cycle is reused for the rest of the query, so each value is computed about once. Where the flow
        only joins values that is the same answer; behind a test that turns a rank into a uniform answer
        (``rank != -1``) it may differ (seen: ``UNKNOWN`` where the exact answer is ``UNIFORM``). Nothing
        derived from a reused partial result outlives the query.
        """
        if self._steps_left is not None or self._query_memo is not None:  # asked while answering another query
            return self._kind(expr, 0)
        answer = self._answers.get(expr)
        if answer is None:
            answer = self._answers[expr] = self._query(expr)
        return answer

    def _query(self, expr: cst.CSTNode) -> Kind:
        """One query's answer (:meth:`kind`): exhaustive within the budget, else bounded."""
        self._lowest = _NO_CYCLE
        self._steps_left = self.MAX_EXHAUSTIVE_STEPS
        try:
            return self._kind(expr, 0)
        except _OverBudget:
            pass
        finally:
            self._steps_left = None
        self._query_memo = {}
        try:
            return self._kind(expr, 0)
        finally:
            self._query_memo = None

    def is_rank_dependent(self, expr: cst.CSTNode) -> bool:
        """Whether the expression's value flows from a rank source (so it differs between ranks)."""
        return self.kind(expr) is Kind.RANK

    def mentions_rank(self, expr: cst.CSTNode) -> bool:
        """Whether any name, attribute or call inside the expression holds a rank (``args.local_rank !=
        -1`` mentions one, although all ranks agree on its value)."""
        return any(
            isinstance(node, (cst.Name, cst.Attribute, cst.Call)) and self.kind(node) is Kind.RANK for node in walk(expr)
        )

    def may_differ_between_ranks(self, test: cst.CSTNode) -> bool:
        """Whether a condition may take different values on different ranks: rank-dependent, or not
        provably the same everywhere."""
        return self.kind(test) is not Kind.UNIFORM

    def conditions(self, node: cst.CSTNode) -> Iterator[Condition]:
        """The conditions around a node within its function (or the module), nearest first: ``if`` and
        ``while`` tests, conditional expressions, the left side of ``and`` / ``or``, comprehension filters,
        loops over rank-dependent iterables and ``except`` handlers; and the early exits before it: an
        ``if`` earlier in an enclosing block whose branch returns, leaves the loop or ends the process
        (``if not is_main: return`` lets only the main process reach what follows)."""
        analysis = self.analysis
        child: cst.CSTNode = node
        for ancestor in analysis.ancestors(node):
            if isinstance(ancestor, (cst.FunctionDef, cst.Lambda)):
                return
            kind = type(ancestor)
            if kind is cst.IndentedBlock or kind is cst.Module:
                yield from self._early_exits(ancestor, child)  # type: ignore[arg-type]
            elif isinstance(ancestor, (cst.If, cst.While)) and child is not ancestor.test:
                yield Condition(ancestor, ancestor.test, self.kind(ancestor.test), child is ancestor.body)
            elif isinstance(ancestor, cst.IfExp) and child is not ancestor.test:
                yield Condition(ancestor, ancestor.test, self.kind(ancestor.test), child is ancestor.body)
            elif isinstance(ancestor, cst.BooleanOperation) and child is ancestor.right:
                yield Condition(ancestor, ancestor.left, self.kind(ancestor.left), isinstance(ancestor.operator, cst.And))
            elif isinstance(ancestor, cst.For) and child is not ancestor.iter and child is not ancestor.target:
                kind = self.kind(ancestor.iter)
                if kind is Kind.RANK:  # a loop runs a number of times that only unknown data decides: not a split
                    yield Condition(ancestor, ancestor.iter, kind, None)
            elif isinstance(ancestor, cst.ExceptHandler):
                yield Condition(ancestor, ancestor.type or ancestor, Kind.UNKNOWN, None)
            elif isinstance(ancestor, (cst.ListComp, cst.SetComp, cst.GeneratorExp, cst.DictComp)):
                comp: cst.CompFor | None = ancestor.for_in
                while comp is not None:
                    for test in comp.ifs:
                        if not analysis.is_inside(node, test):
                            yield Condition(test, test.test, self.kind(test.test), True)
                    comp = comp.inner_for_in
            child = ancestor

    def _early_exits(self, block: cst.IndentedBlock | cst.Module, statement: cst.CSTNode) -> Iterator[Condition]:
        """The ``if`` statements before ``statement`` in the block that may leave it early, nearest first,
        each a condition on the branch that goes on (``in_body``: whether that is the ``if``'s own body)."""
        exits = self._exits_of.get(block)
        if exits is None:
            exits = self._exits_of[block] = {}
            before: list[Condition] = []
            for item in block.body:
                exits[item] = tuple(before)
                if type(item) is cst.If:
                    # An error raised on some ranks ends the job (torchrun stops the others): no path that goes
                    # on. A clean sys.exit() leaves the others waiting at their next collective: it counts.
                    body_leaves = leaves_early(item.body, raises=False)  # type: ignore[attr-defined]
                    if body_leaves or (item.orelse is not None and leaves_early(item.orelse, raises=False)):  # type: ignore[attr-defined]
                        before.insert(0, Condition(item, item.test, self.kind(item.test), not body_leaves, early_exit=True))  # type: ignore[attr-defined]
        yield from exits.get(statement, ())

    def unsafe_condition(self, node: cst.CSTNode) -> Condition | None:
        """The nearest condition that may let only some ranks reach the node: around it in its function, or
        (bounded, through every call site) around a call of its function. ``None``: every rank gets there."""
        return self._unsafe(node, set())

    def _unsafe(self, node: cst.CSTNode, visited: set[cst.FunctionDef]) -> Condition | None:
        found = next((c for c in self.conditions(node) if c.splits_ranks), None)
        if found is not None:
            return found
        function = self.analysis.enclosing_function(node)
        if function is None or function in visited:
            return None
        visited.add(function)
        for call in self.analysis.callers_of(function):
            outer = self._unsafe(call, visited)
            if outer is not None:
                return outer
        return None

    def rejoin_point(self, node: cst.CSTNode) -> cst.BaseStatement | None:
        """The statement, in a block, of the outermost condition around the node (within its function)
        that may differ between ranks: after it, every rank that got to it is on a common path. ``None``:
        no such condition, or the paths rejoin only in the callers (an early ``return`` before it)."""
        analysis = self.analysis
        owners: list[cst.CSTNode] = []
        for condition in self.conditions(node):
            if not condition.splits_ranks:
                continue
            owner: cst.CSTNode | None = condition.owner
            # ``if skip: continue`` before the node, or an ``if`` around it whose other branch leaves (``if loss <
            # best: save() else: break``): the paths rejoin after the loop it leaves; after a ``return`` only in
            # the callers, where no statement of this function's can go.
            if condition.early_exit or (type(owner) is cst.If and leaves_early(owner, raises=False)):
                owner = None if leaves_function(condition.owner) else analysis.nearest_loop(condition.owner)
                if owner is None:
                    return None
            owners.append(owner)  # type: ignore[arg-type]
        if not owners:
            return None
        outer = min(owners, key=lambda found: sum(1 for _ in analysis.ancestors(found)))  # the outermost
        current: cst.CSTNode | None = outer
        while current is not None and not (
            isinstance(current, (cst.SimpleStatementLine, cst.BaseCompoundStatement))
            and isinstance(analysis.parent(current), (cst.IndentedBlock, cst.Module))
        ):
            current = analysis.parent(current)  # an ``elif`` or ``except``: the whole statement
        return current  # type: ignore[return-value]

    def collective_safe_at(self, node: cst.CSTNode) -> bool:
        """Whether a collective at the node is reached by every rank (see :meth:`unsafe_condition`)."""
        return self.unsafe_condition(node) is None

    def guard(self, node: cst.CSTNode) -> Condition | None:
        """The rank-dependent condition that lets only some ranks run the node (the nearest ``if`` around
        it, either branch, whose test flows from a rank source), or, when its function is only called from
        such places, the guard of its first call. ``None``: the node runs on every rank that gets there."""
        return self._guard(node, set())

    def _guard(self, node: cst.CSTNode, visited: set[cst.FunctionDef]) -> Condition | None:
        for condition in self.conditions(node):
            if (
                condition.kind is Kind.RANK
                and isinstance(condition.owner, (cst.If, cst.IfExp, cst.BooleanOperation, cst.CompIf))
                and not self.lets_every_rank_in(condition)
            ):
                return condition
        function = self.analysis.enclosing_function(node)
        if function is None or function in visited:
            return None
        visited = visited | {function}
        for decorator in function.decorators:  # ``@master_only``: the function runs on rank 0 alone
            found = self.decorator_guard(decorator.decorator, visited)
            if found is not None:
                return found
        # Calls from inside the function itself (recursion) only run once it runs: they decide nothing.
        callers = [c for c in self.analysis.callers_of(function) if not any(self.analysis.is_inside(c, f) for f in visited)]
        guards = [self._guard(c, visited) for c in callers]
        if callers and all(g is not None for g in guards):
            return guards[0]
        return None

    def decorator_guard(self, decorator: cst.BaseExpression, visited: frozenset[cst.FunctionDef] | set[cst.FunctionDef] = frozenset()) -> Condition | None:
        """The rank condition a decorator puts around the function it wraps: a library's rank-zero decorator
        (:data:`RANK_ZERO_DECORATORS`), or a decorator of the program whose wrapper calls the function only
        under a rank test (mmcv's ``master_only``: ``if rank == 0: return func(*args, **kwargs)``)."""
        analysis = self.analysis
        if analysis.qualified_names(decorator) & RANK_ZERO_DECORATORS:
            return Condition(decorator, decorator, Kind.RANK, True)
        for origin in analysis.origins(decorator):
            if type(origin) is not cst.FunctionDef or origin in visited or not origin.params.params:  # type: ignore[attr-defined]
                continue
            wrapped = origin.params.params[0].name.value  # type: ignore[attr-defined]
            home = analysis.shared.analysis_of(origin) or analysis
            facts = rank_facts(home)
            calls = [call for call in home.calls if dotted_name(call.func) == wrapped and home.is_inside(call, origin)]
            # Every call of the wrapped function in the wrapper under a rank test (one on every rank is none).
            guards = [facts._guard(call, set(visited) | {origin}) for call in calls]  # type: ignore[arg-type]
            if guards and all(g is not None for g in guards) and len({(g.owner, g.in_body, g.early_exit) for g in guards}) == 1:  # type: ignore[union-attr]
                return guards[0]
        return None

    def runs_on_every_rank(self, node: cst.CSTNode) -> bool:
        """Whether no rank-dependent condition keeps the node off some ranks (see :meth:`guard`)."""
        return self.guard(node) is None

    # ----------------------------------------------------------------------------- the data flow

    def _kind(self, expr: cst.CSTNode, depth: int) -> Kind:
        memo = self._memo.get(expr)
        if memo is not None:
            return memo
        if self._query_memo is not None:
            memo = self._query_memo.get(expr)
            if memo is not None:
                self._lowest = -1  # a partial result: nothing computed from it is kept beyond the query
                return memo
        if depth > self.MAX_DEPTH:
            return Kind.UNKNOWN
        if self._steps_left is not None:
            self._steps_left -= 1
            if self._steps_left < 0:
                raise _OverBudget
        if self._cut(expr):
            return Kind.UNIFORM  # a value that flows into itself adds nothing new
        position = self._enter(expr)
        outer = self._lowest
        self._lowest = _NO_CYCLE
        try:
            result = self._compute(expr, depth + 1)
        finally:
            del self._active[expr]
            inner = self._lowest
            self._lowest = min(outer, inner)
        # A result is final unless the walk below it was cut at a value still being computed above it (a
        # cycle through a caller): a cycle closed within its own walk leaves it whole (Tarjan's test of a
        # component's root), and those are kept.
        if inner >= position:
            self._memo[expr] = result
        elif self._query_memo is not None:
            self._query_memo[expr] = result
        return result

    def _cut(self, key: object) -> bool:
        """Whether the value (a node, or a function's returns, another module's value) is being computed
        already, further up this walk: the walk is cut there, and the values computed since are partial
        unless that value is their own or below them."""
        position = self._active.get(key)
        if position is None:
            return False
        if position < self._lowest:
            self._lowest = position
        return True

    def _enter(self, key: object) -> int:
        """Mark the value as being computed (its place on the walk's stack)."""
        position = self._active[key] = len(self._active)
        return position

    def _join(self, nodes: Iterable[cst.CSTNode], depth: int) -> Kind:
        result = Kind.UNIFORM
        for node in nodes:
            result = max(result, self._kind(node, depth))
            if result is Kind.RANK:
                break
        return result

    def _compute(self, expr: cst.CSTNode, depth: int) -> Kind:
        kind = type(expr)  # (exact classes: none of these has a subclass, and ``isinstance`` goes through ``abc``)
        if kind in _CONSTANT_TYPES:
            return Kind.UNIFORM
        if kind is cst.Arg:
            return self._kind(expr.value, depth)  # type: ignore[attr-defined]
        if kind is cst.Call:
            return self._call(expr, depth)  # type: ignore[arg-type]
        if kind is cst.Name or kind is cst.Attribute:
            return self._variable(expr, depth)  # type: ignore[arg-type]
        if kind is cst.Subscript:
            variable = self.legacy.env_read(expr)
            if variable is not None:
                return Kind.RANK if variable in RANK_VARIABLES else Kind.UNIFORM
            # An item read also reads what the program stores into the container's items anywhere.
            stored = self._item_stores.get(dotted_name(expr.value) or "", [])
            return self._join([expr.value, *(e.slice for e in expr.slice), *stored], depth)
        if kind is cst.Comparison:
            if all(_is_minus_one_or_none(c.comparator) for c in expr.comparisons) and self._holds_rank_number(expr.left):  # type: ignore[attr-defined]
                # ``local_rank != -1``, ``args.gpu is not None``: "is this run distributed", which all ranks agree on.
                return Kind.UNIFORM
            if self._never_none_tested(expr):  # type: ignore[arg-type]
                return Kind.UNIFORM  # ``if evaluator is not None:`` of ``evaluator = CocoEvaluator(...)``: true everywhere
            return self._join([expr.left, *(c.comparator for c in expr.comparisons)], depth)  # type: ignore[attr-defined]
        return self._join([child for child in tree.children(expr) if type(child) not in tree.TOKEN_NODES], depth)

    def _never_none_tested(self, test: cst.Comparison) -> bool:
        """``x is None`` / ``x is not None`` of a name that only ever holds an object the program builds (an
        instance of one of its classes) or a value written out that is not ``None``: the test has one answer."""
        if len(test.comparisons) != 1 or type(test.comparisons[0].operator) not in (cst.Is, cst.IsNot) or not is_none(test.comparisons[0].comparator):
            return False
        name = test.left
        if type(name) is not cst.Name:
            return False
        analysis = self.analysis.shared.analysis_of(name) or self.analysis  # (a test of another module, up the calls)
        function = analysis.enclosing_function(name)
        if function is not None and (analysis.is_parameter(function, name.value) or not analysis.binds_locally(function, name.value)):  # type: ignore[attr-defined]
            return False  # (a parameter, or a global this function reads: assigned elsewhere too)
        if any(
            type(n) in (cst.Global, cst.Nonlocal) and any(item.name.value == name.value for item in n.names)  # type: ignore[attr-defined]
            for n in analysis.preorder
        ):
            return False  # (``global evaluator``: a function may bind it, ``None`` at the top)
        values = analysis.assigned_values(function, name.value)  # type: ignore[attr-defined]
        constructed = analysis.shared.constructed
        return bool(values) and all(
            (type(v) is cst.Call and v in constructed)
            or type(v) in (cst.List, cst.Dict, cst.Tuple, cst.Set, cst.Integer, cst.Float, cst.SimpleString, cst.ListComp, cst.DictComp)
            for v in values
        )

    def _holds_rank_number(self, expr: cst.BaseExpression) -> bool:
        """Whether the expression is the rank itself (not an object that is ``None`` off rank 0)."""
        if isinstance(expr, (cst.Name, cst.Attribute)):
            return self.legacy.rank_kind(expr) is not None or (
                (dotted_name(expr) or "").split(".")[-1] in RANK_NAMES and self.kind(expr) is Kind.RANK
            )
        if isinstance(expr, cst.Call):
            return self.analysis.is_call_to(expr, RANK_CALLS) or self.legacy.env_read(expr) in RANK_VARIABLES
        return self.legacy.env_read(expr) in RANK_VARIABLES

    def _call(self, call: cst.Call, depth: int) -> Kind:
        analysis = self.analysis
        qualified = analysis.qualified_names(call.func)
        if qualified & RANK_CALLS:
            return Kind.RANK
        variable = self.legacy.env_read(call)
        if variable is not None:
            return Kind.RANK if variable in RANK_VARIABLES else Kind.UNIFORM
        if qualified & ENV_GETTERS:
            return Kind.UNKNOWN  # a variable the analysis cannot name
        if qualified & UNIFORM_CALLS:
            return Kind.UNIFORM
        if qualified & FILE_SYSTEM_QUERIES or (isinstance(call.func, cst.Attribute) and call.func.attr.value in FILE_SYSTEM_METHODS):
            return Kind.UNKNOWN
        args = [a for a in call.args if not (a.keyword is not None and a.keyword.value in IGNORED_KEYWORDS)]
        if qualified & {"builtins.len"} and call.args and analysis.loader_calls and set(analysis.loader_calls) & analysis.origins(call.args[0].value):
            return Kind.UNIFORM  # every rank's loader has the same length (DistributedSampler pads)
        if any(q in PURE_CALLS or q.startswith(PURE_MODULES) for q in qualified):
            return self._join(args, depth)
        target = analysis.call_target(call)
        if target is not None:
            if target.name.value == "__init__":
                return Kind.UNKNOWN  # an object of the file's own class: its attributes are followed one by one
            key = ("returns", target)
            if self._cut(key):
                return Kind.UNIFORM
            self._enter(key)
            try:
                returns = self.analysis.shared.returned_values(target)
                owner = analysis.shared.analysis_of(target)
                tests = self._return_tests(target, owner or analysis)
                if owner is not None and owner is not analysis:  # a helper of another module, read by its facts
                    found = max((self._other_module_kind(owner, value) for value in returns), default=Kind.UNIFORM)
                    decided = (self._other_module_kind(owner, test) for test in tests)
                else:
                    found = self._join(returns, depth)
                    decided = (self._kind(test, depth) for test in tests)
                # ``if rank != 0: return None`` then ``return logger``: which value comes back is the rank's choice
                return Kind.RANK if found is not Kind.RANK and any(kind is Kind.RANK for kind in decided) else found
            finally:
                del self._active[key]
        root = (dotted_name(call.func) or "").split(".")[0]
        if (root and root in self.legacy.imported_names) or (isinstance(call.func, cst.Name) and any(q.startswith("builtins.") for q in qualified)):
            return Kind.UNKNOWN  # an imported or built-in function the analysis knows nothing about
        if isinstance(call.func, cst.Attribute):
            # A method of a value: the same on every rank when the value and the arguments are. Moving a
            # value to a device or dtype (``x.to(device)``, ``.cuda(rank)``) keeps it what it is.
            if call.func.attr.value in SELF_RETURNING_METHODS:
                return self._kind(call.func.value, depth)
            return self._join([call.func.value, *args], depth)
        if isinstance(call.func, cst.Name) and call.func.value in RANK_NAMES:
            return Kind.RANK
        return Kind.UNKNOWN

    def _return_tests(self, function: cst.FunctionDef, home: ScriptAnalysis) -> list[cst.BaseExpression]:
        """The tests of the ``if`` statements, within the function, that decide which of its ``return``
        statements runs (read once per function)."""
        cache: dict[cst.FunctionDef, list[cst.BaseExpression]] = self.__dict__.setdefault("_return_tests_found", {})
        found = cache.get(function)
        if found is None:
            found = []
            for ret in self.analysis.shared.returns(function):
                child: cst.CSTNode = ret
                for ancestor in home.ancestors(ret):
                    if ancestor is function:
                        break
                    if type(ancestor) is cst.If and child is not ancestor.test and ancestor.test not in found:  # type: ignore[attr-defined]
                        found.append(ancestor.test)  # type: ignore[attr-defined]
                    child = ancestor
            cache[function] = found
        return found

    def _variable(self, expr: cst.Name | cst.Attribute, depth: int) -> Kind:
        analysis, legacy = self.analysis, self.legacy
        name = dotted_name(expr)
        if name is None:  # ``f(x).attr``: the attribute of a computed value
            return self._kind(expr.value, depth) if isinstance(expr, cst.Attribute) else Kind.UNKNOWN
        if name in ALWAYS_UNIFORM_NAMES:
            return Kind.UNIFORM
        if legacy.rank_kind(expr) is not None:  # type: ignore[arg-type]
            return Kind.RANK
        root = name.split(".")[0]
        qualified = analysis.qualified_names(expr)
        if root in legacy.imported_names and root != "self":
            if qualified & RANK_CALLS:
                return Kind.UNKNOWN
            if any(q.startswith(("torch.", "math.", "numpy.", "os.", "sys.", "string.", "pathlib.")) or q in ("torch", "os", "sys", "math") for q in qualified):
                return Kind.UNIFORM  # a library's constant or module (``torch.float32``, ``math.pi``)
        if name in legacy.top_functions or any(c.name.value == name for c in analysis.classes):
            return Kind.UNIFORM  # a function or class object
        key = legacy.key(expr, name)
        sources = [s for s in legacy.sources(expr) if s is not expr]  # type: ignore[arg-type]
        stores = self._stores.get(key, [])
        if key in self._made_common and self._made_common_before(expr, key, [*sources, *(value for _, value in stores)]):
            return Kind.UNIFORM
        parts: list[Kind] = []
        for source in sources:
            if isinstance(source, LaunchIndex):
                parts.append(Kind.RANK)
                continue
            owner = analysis.shared.analysis_of(source)
            if owner is not None and owner is not analysis:
                # An argument another module passes (``f(x, CFG["gather"])`` in ``train.py``): its names are that module's.
                parts.append(self._other_module_kind(owner, source))
            else:
                parts.append(self._kind(source, depth))
        for store in stores:
            parts.append(self._store_kind(store, depth))
        if isinstance(expr, cst.Attribute) and root != "self":
            # Set by a helper the namespace is handed to (``init_distributed_device(args)`` setting
            # ``args.distributed = True`` beside ``args.rank``): what the helper assigns, not all it holds.
            helpers = analysis.assignments_in_callees(analysis.enclosing_function(expr) or analysis.module, name) if not sources and not stores else []
            if helpers:
                parts.extend(self._other_module_kind(home, assign.value) for home, assign in helpers)
            else:
                parts.append(self._kind(expr.value, depth))  # ``args.epochs``: what the namespace holds
        if not parts:
            parts = self._unpacked_kinds(key, name, depth)
        if not parts:
            if name.split(".")[-1] in RANK_NAMES:
                return Kind.RANK
            if isinstance(expr, cst.Name) and root in legacy.imported_names:
                return Kind.UNKNOWN
            return Kind.UNKNOWN
        result = max(parts)
        if result is Kind.UNKNOWN and name.split(".")[-1] in RANK_NAMES and not sources and not stores:
            return Kind.RANK
        return result

    def _unpacked_kinds(self, key: Key, name: str, depth: int) -> list[Kind]:
        """The kinds of a name unpacked from what a helper of the program returns (``rank, world_size =
        get_dist_info()`` of ``def get_dist_info(): ... return rank, world_size``): the element at the name's
        place in every tuple the helper returns. Empty where some assignment of the name is not such an
        unpacking, or a return not such a tuple."""
        analysis = self.analysis
        kinds: list[Kind] = []
        for statement in self.legacy.assignments_to(key):
            value = statement.value if type(statement) is cst.Assign else None  # type: ignore[attr-defined]
            target = analysis.call_target(value) if type(value) is cst.Call else None  # type: ignore[arg-type]
            if target is None or target.name.value == "__init__" or ("returns", target) in self._active:
                return []
            place = next((p for t in statement.targets if (p := _place_in_tuple(t.target, name)) is not None), None)  # type: ignore[attr-defined]
            returns = self.analysis.shared.returned_values(target)
            if place is None or not returns:
                return []
            index, count = place
            elements: list[cst.BaseExpression] = []
            for returned in returns:
                if type(returned) is not cst.Tuple or len(returned.elements) != count or any(type(e) is cst.StarredElement for e in returned.elements):  # type: ignore[attr-defined]
                    return []
                elements.append(returned.elements[index].value)  # type: ignore[attr-defined]
            owner = analysis.shared.analysis_of(target)
            self._enter(("returns", target))
            try:
                if owner is not None and owner is not analysis:
                    kinds.extend(self._other_module_kind(owner, element) for element in elements)
                else:
                    kinds.append(self._join(elements, depth))
            finally:
                del self._active[("returns", target)]
        return kinds

    def _made_common_before(self, expr: cst.CSTNode, key: Key, values: list[object]) -> bool:
        """Whether the value read at ``expr`` is what an in-place collective of its function left alike on
        every rank (``dist.all_reduce(stats)`` and then ``stats[0] / stats[1]``): the last of the collectives
        and assignments of the name (``values``: the values assigned) before the read, in that function, is a
        collective."""
        analysis = self.analysis
        function = analysis.enclosing_function(expr)
        last: cst.CSTNode | None = None
        for call in self._made_common[key]:
            # On every path to the read: its statement sits in a block that holds the read (not under an ``if``
            # or in a loop the read is outside of).
            block = analysis.parent(analysis.statement(call))
            if (
                analysis.enclosing_function(call) is function
                and analysis.comes_before(call, expr)
                and not analysis.is_inside(expr, call)
                and block is not None
                and analysis.is_inside(expr, block)
            ):
                last = call if last is None or analysis.comes_before(last, call) else last
        if last is None:
            return False
        name = dotted_name(expr)
        for node in walk(function if function is not None else analysis.module):
            # Changed in place after the collective: ``acc.add_(local)``, ``acc[0] = local[0]``.
            if analysis.comes_before(last, node) and analysis.comes_before(node, expr):
                if type(node) is cst.Call and type(node.func) is cst.Attribute and node.func.attr.value.endswith("_") and dotted_name(node.func.value) == name:  # type: ignore[attr-defined]
                    return False
                if type(node) is cst.AssignTarget and type(node.target) is cst.Subscript and dotted_name(node.target.value) == name:  # type: ignore[attr-defined]
                    return False
        for value in values:
            if not isinstance(value, cst.CSTNode) or not analysis.owns(value):
                return False  # a value the analysis cannot place (a launch's index, another module's)
            if analysis.enclosing_function(value) is function and analysis.comes_before(last, value) and analysis.comes_before(value, expr):
                return False  # assigned again after the collective
        return True

    def _other_module_kind(self, owner: ScriptAnalysis, source: cst.CSTNode) -> Kind:
        """The kind of a value written in another module of the program, by that module's facts (a query of
        its own; a value that leads back here while it is asked counts as the same on every rank)."""
        key = ("module", source)
        if self._cut(key):
            return Kind.UNIFORM
        self._enter(key)
        try:
            return rank_facts(owner).kind(source)
        finally:
            del self._active[key]

    def _store_kind(self, store: Store, depth: int) -> Kind:
        how, value = store
        if value is None or how == "unknown":
            return Kind.UNKNOWN
        if how == "index":
            # ``for i, batch in enumerate(x)``: the index is uniform when every rank iterates as many items.
            if set(self.analysis.loader_calls) & self.analysis.origins(value):  # type: ignore[arg-type]
                return Kind.UNIFORM
            return self._kind(value, depth)
        if how == "iter" and set(self.analysis.loader_calls) & self.analysis.origins(value):  # type: ignore[arg-type]
            return Kind.UNKNOWN  # a batch of a (sharded) loader: different data on every rank
        if how == "iter" and isinstance(value, cst.Call) and call_method_name(value) in MODEL_STRUCTURE_METHODS:
            return Kind.UNIFORM  # ``for name, buf in model.named_buffers():``: the model's structure, alike on every rank
        return self._kind(value, depth)

    # ---------------------------------------------------------------------------- rank-0 tests

    def zero_side(self, test: cst.BaseExpression) -> bool | None:
        """Whether an ``if`` body runs on rank 0 only (``True``), on the other ranks only (``False``), or
        unknown: ``rank == 0``, ``rank != 0``, ``rank > 0``, ``rank in (-1, 0)``, ``is_main_process()``,
        ``not`` of these, and names holding one of them (``master_process = rank == 0``)."""
        return self._zero_side(test, set())

    def _zero_side(self, test: cst.BaseExpression, seen: set[cst.CSTNode]) -> bool | None:
        if test in seen:
            return None
        seen.add(test)
        if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
            inner = self._zero_side(test.expression, seen)
            return None if inner is None else not inner
        if isinstance(test, cst.Call):
            if self.analysis.is_call_to(test, names.RUNTIME_MAIN_CHECK):
                return True
            target = self.analysis.call_target(test)
            if target is not None and target not in seen:
                seen.add(target)
                # A helper of another module (``dist_helpers.is_master(cfg)``) is read with that module's facts.
                owner = self.analysis.shared.analysis_of(target)
                facts = self if owner is None or owner is self.analysis else rank_facts(owner)
                sides = {facts._zero_side(value, seen) for value in facts.analysis.shared.returned_values(target)}
                return sides.pop() if len(sides) == 1 else None
        if isinstance(test, (cst.Name, cst.Attribute)):
            sources = [s for s in self.legacy.sources(test) if s is not test and isinstance(s, cst.BaseExpression)]
            if len(sources) == 1:
                return self._zero_side(sources[0], seen)
            if (dotted_name(test) or "").split(".")[-1] in ("is_main", "is_master", "is_main_process", "main_process", "master_process", "is_master_process"):
                return True
            return None
        if isinstance(test, cst.Comparison) and len(test.comparisons) == 1 and self.kind(test.left) is Kind.RANK:
            operator, comparator = test.comparisons[0].operator, test.comparisons[0].comparator
            zero = int_value(comparator) == 0
            holds_zero = isinstance(comparator, (cst.List, cst.Tuple, cst.Set)) and any(int_value(e.value) == 0 for e in comparator.elements)
            if (zero and isinstance(operator, cst.Equal)) or (holds_zero and isinstance(operator, cst.In)):
                return True
            if (zero and isinstance(operator, (cst.NotEqual, cst.GreaterThan))) or (holds_zero and isinstance(operator, cst.NotIn)):
                return False
        return None

    def is_rank_zero_guard(self, condition: Condition) -> bool:
        """Whether the node under the condition runs on rank 0 only (``and`` of a rank-0 test and more counts)."""
        test = condition.test
        if condition.in_body is None or not isinstance(test, cst.BaseExpression):
            return False
        side = self._and_zero_side(test) if condition.in_body else self.zero_side(test)
        return side is (True if condition.in_body else False)

    def lets_every_rank_in(self, condition: Condition) -> bool:
        """Whether a rank test combined with other tests by ``or`` can still let every rank through:
        ``not args.multiprocessing_distributed or (args.multiprocessing_distributed and rank == 0)`` is
        true on every rank when the switch is off (as under torchrun without the flag).

        The test is evaluated as a boolean formula on a rank other than 0: a rank-0 test is false there,
        a test for the other ranks true, and every other test is free (the same code, the same value).
        When some values of the free tests select the node's branch there, the condition does not keep
        the other ranks out. Only formulas with ``or`` are evaluated (a plain rank test keeps its meaning)
        and at most 8 free tests (beyond that the condition is taken at its word)."""
        test, in_body = condition.test, condition.in_body
        if in_body is None or not isinstance(test, cst.BaseExpression) or not _has_or(test):
            return False
        atoms: dict[str, int] = {}
        formula = self._formula(test, atoms)
        if formula is None or len(atoms) > 8:
            return False
        return any(
            formula([bool(bits >> index & 1) for index in range(len(atoms))]) is in_body
            for bits in range(1 << len(atoms))
        )

    def _formula(self, test: cst.BaseExpression, atoms: dict[str, int]) -> Callable[[list[bool]], bool] | None:
        """The test as a function of its free tests' values, on a rank other than 0."""
        if isinstance(test, cst.BooleanOperation):
            left, right = self._formula(test.left, atoms), self._formula(test.right, atoms)
            if left is None or right is None:
                return None
            if isinstance(test.operator, cst.And):
                return lambda values: left(values) and right(values)
            return lambda values: left(values) or right(values)
        if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
            inner = self._formula(test.expression, atoms)
            return None if inner is None else (lambda values: not inner(values))
        side = self.zero_side(test)
        if side is not None:
            return lambda values: not side  # a rank-0 test is false on the other ranks
        if isinstance(test, cst.Call) and self.analysis.is_call_to(test, _GROUP_IS_UP):
            return lambda values: True  # a rank other than 0 runs in a job whose group is up
        if self._several_processes(test, 0):
            return lambda values: True  # ... and in a job of more than one process
        key = " ".join(cst.Module([]).code_for_node(test).split())
        index = atoms.setdefault(key, len(atoms))
        return lambda values: values[index]

    def _several_processes(self, test: cst.BaseExpression, depth: int) -> bool:
        """Whether a test is true exactly in a job of more than one process: ``world_size > 1`` (``!= 1``,
        ``>= 2``) of a value that is the number of processes, or a name assigned only such tests
        (``distributed = int(os.environ.get("WORLD_SIZE", 1)) > 1``)."""
        if depth > 4:
            return False
        if isinstance(test, cst.Comparison):
            counted = more_than_one(test)
            return counted is not None and is_world_size(self.analysis, counted)
        if isinstance(test, (cst.Name, cst.Attribute)):
            sources = [s for s in self.legacy.sources(test) if s is not test and isinstance(s, cst.BaseExpression)]
            return bool(sources) and all(self._several_processes(source, depth + 1) for source in sources)
        return False

    def _and_zero_side(self, test: cst.BaseExpression) -> bool | None:
        if isinstance(test, cst.BooleanOperation) and isinstance(test.operator, cst.And):
            left, right = self._and_zero_side(test.left), self._and_zero_side(test.right)
            return True if True in (left, right) else None
        return self.zero_side(test)


#: Calls whose value is the number of processes.
#: (``runtime.local_world_size()``: what the migration writes for a spawned worker's count of its node's
#: processes, by which such a worker splits its batch; the world size on one machine)
WORLD_SIZE_CALLS = names.distributed("get_world_size") | {names.runtime("world_size"), names.runtime("local_world_size")}


def is_world_size(analysis: ScriptAnalysis, expr: cst.BaseExpression, depth: int = 0) -> bool:
    """Whether a value is the number of processes: ``WORLD_SIZE`` read from the environment,
    ``dist.get_world_size()``, the runtime's ``world_size()``, through ``int(...)`` and assignments
    (``ddp_world_size = int(os.environ["WORLD_SIZE"])``)."""
    if depth > 4:
        return False
    if isinstance(expr, cst.Call):
        if analysis.is_call_to(expr, WORLD_SIZE_CALLS):
            return True
        if isinstance(expr.func, cst.Name) and expr.func.value in ("int", "float") and len(expr.args) == 1:
            return is_world_size(analysis, expr.args[0].value, depth + 1)
        # The program's own helper (``def get_world_size(): ... return dist.get_world_size()``).
        target = analysis.shared.call_targets.get(expr)
        home = analysis.shared.analysis_of(target) if target is not None else None
        if target is not None and home is not None:
            return any(is_world_size(home, value, depth + 1) for value in analysis.shared.returned_values(target))
    if any(isinstance(n, cst.SimpleString) and n.evaluated_value == "WORLD_SIZE" for n in walk(expr)):
        return True
    if isinstance(expr, cst.IfExp):  # ``dist.get_world_size() if dist.is_initialized() else 1``
        sides = (expr.body, expr.orelse)
        return any(is_world_size(analysis, s, depth + 1) for s in sides) and all(
            int_value(s) == 1 or is_world_size(analysis, s, depth + 1) for s in sides
        )
    if isinstance(expr, (cst.Name, cst.Attribute)):
        sources = [s for s in legacy_facts(analysis).sources(expr) if s is not expr and isinstance(s, cst.BaseExpression)]
        return any(is_world_size(analysis, source, depth + 1) for source in sources)
    return False


def more_than_one(test: cst.Comparison) -> cst.BaseExpression | None:
    """``n`` of ``n > 1``, ``n != 1`` or ``n >= 2``: the value the test says is more than one; ``None`` for any
    other comparison."""
    if len(test.comparisons) != 1:
        return None
    operator, bound = test.comparisons[0].operator, int_value(test.comparisons[0].comparator)
    if (isinstance(operator, (cst.GreaterThan, cst.NotEqual)) and bound == 1) or (isinstance(operator, cst.GreaterThanEqual) and bound == 2):
        return test.left
    return None


def counts_the_processes(analysis: ScriptAnalysis, value: cst.BaseExpression | None) -> bool:
    """Whether a value is ``world_size > 1`` (``!= 1``, ``>= 2``) of a world size that is the launch's number of
    processes wherever it is set (``int(os.environ["WORLD_SIZE"])``), or 1 (the fallback of a run without
    torchrun): true exactly in a job of several processes. Not of a ``--world-size`` option, which a torchrun
    launch leaves at its default."""
    size = more_than_one(value) if isinstance(value, cst.Comparison) else None
    if size is None:
        return False
    function = analysis.enclosing_function(value)
    sources = [
        s
        for s in legacy_facts(analysis).sources(size)
        if s is not size
        and isinstance(s, cst.BaseExpression)
        # (one set later in the same function is not the value read here: ``args.world_size = runtime.world_size()``
        # after the group's setup, below a ``--world-size`` option's test)
        and not (analysis.enclosing_function(s) is function and analysis.comes_before(value, s))
    ]
    counted = [s for s in sources if int_value(s) != 1]
    return bool(counted) and all(is_world_size(analysis, s) for s in counted)


def steps_scaled_by_world_size(analysis: ScriptAnalysis) -> list[tuple[ScriptAnalysis, cst.CSTNode, str]]:
    """Where the program itself divides its steps by the number of processes so that all of them together
    keep the original global batch (nanoGPT's ``gradient_accumulation_steps //= ddp_world_size``): a name
    divided by the world size that then counts steps (in ``range(...)``, after ``%``) or is a loader's batch
    size. The module, the division, the name. A division of a metric (``loss / world_size``) is not one. Also where it multiplies by the world size
    what grows with the global batch (``lr = base_lr * batch_size * world_size``, the learning rate an optimizer
    takes: ``SGD(params, lr=0.1 * get_world_size())``, the linear scaling rule): its batch is per process by
    design."""
    return analysis.derived("steps_scaled_by_world_size", _steps_scaled)


def _steps_scaled(analysis: ScriptAnalysis) -> list[tuple[ScriptAnalysis, cst.CSTNode, str]]:
    found: list[tuple[ScriptAnalysis, cst.CSTNode, str]] = []
    for module in analysis.shared.analyses:
        divided: list[tuple[cst.CSTNode, str]] = []
        for node in module.preorder:
            if isinstance(node, cst.AugAssign) and isinstance(node.operator, (cst.DivideAssign, cst.FloorDivideAssign)):
                name = dotted_name(node.target)
                if name and is_world_size(module, node.value):
                    divided.append((node, name))
            elif isinstance(node, cst.Assign) and len(node.targets) == 1 and isinstance(node.value, cst.BinaryOperation):
                value, name = node.value, dotted_name(node.targets[0].target)
                if name and isinstance(value.operator, (cst.Divide, cst.FloorDivide)) and is_world_size(module, value.right):
                    divided.append((node, name))
        if divided:
            counted = _step_counts(module)
            found.extend((module, node, name) for node, name in divided if name in counted)
        batches: set[str] = set()
        for loader in module.loader_calls:  # ``DataLoader(ds, batch_size=args.batch_size // args.ngpus)``
            batch = loader_argument(loader, "batch_size")
            value = batch.value if batch is not None else None
            if (
                isinstance(value, cst.BinaryOperation)
                and isinstance(value.operator, (cst.Divide, cst.FloorDivide))
                and is_world_size(module, value.right)
            ):
                found.append((module, value, dotted_name(value.left) or "the batch size"))
            elif value is not None and dotted_name(value):
                batches.add(dotted_name(value))  # type: ignore[arg-type]
        if batches:
            found.extend(_batch_times_world_size(module, batches))
        found.extend(_learning_rate_times_world_size(module))
    return found


def _learning_rate_times_world_size(analysis: ScriptAnalysis) -> list[tuple[ScriptAnalysis, cst.CSTNode, str]]:
    """Learning rates an optimizer of the module takes that are a product with the world size (``lr=0.1 *
    get_world_size()``, or a name assigned one: ``lr = args.lr * dist.get_world_size()``)."""
    found = []
    for optimizer in analysis.torch_optimizer_calls:
        given = keyword_argument(optimizer, "lr") or (optimizer.args[1] if len(optimizer.args) > 1 and optimizer.args[1].keyword is None else None)
        if given is None:
            continue
        values = [given.value]
        if isinstance(given.value, (cst.Name, cst.Attribute)) and (name := dotted_name(given.value)) is not None:
            values += [v for v in analysis.flows_into(given.value, name) if isinstance(v, cst.BaseExpression)]
        for value in values:
            # The rate itself a product with the world size (not a branch of a test: ``args.lr * ws if
            # args.scale_lr else args.lr`` leaves it to an option; not a divisor: ``lr / (2 * ws)``).
            if isinstance(value, cst.BinaryOperation) and any(is_world_size(analysis, f) for f in _factors(value)):
                found.append((analysis, value, "the learning rate"))
                break
    return found


def _batch_times_world_size(analysis: ScriptAnalysis, batches: set[str]) -> list[tuple[ScriptAnalysis, cst.CSTNode, str]]:
    """Products of a loader's batch size and the world size (``eff_batch = args.batch_size *
    get_world_size()``, ``lr = base_lr * batch_size * world_size / 256``): the program's batch size is per
    process, and what it scales by the total batch (the learning rate) grows with the processes by design."""
    found = []
    for node in analysis.preorder:
        if not (isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Multiply)):
            continue
        if isinstance(analysis.parent(node), cst.BinaryOperation) and isinstance(analysis.parent(node).operator, cst.Multiply):  # type: ignore[union-attr]
            continue  # the outermost product of a chain
        factors = _factors(node)
        named = [name for factor in factors if (name := dotted_name(factor)) in batches]
        if named and any(is_world_size(analysis, factor) for factor in factors):
            found.append((analysis, node, named[0]))
    return found


def _factors(product: cst.BaseExpression) -> list[cst.BaseExpression]:
    """The operands of a chain of multiplications (and divisions, whose left side is a factor too)."""
    if isinstance(product, cst.BinaryOperation) and isinstance(product.operator, (cst.Multiply, cst.Divide, cst.FloorDivide)):
        right = [product.right] if isinstance(product.operator, cst.Multiply) else []
        return _factors(product.left) + right
    return [product]


def _step_counts(analysis: ScriptAnalysis) -> set[str]:
    """Names that count steps or batches in a module: in ``range(...)``, on the right of ``%``, or a loader's
    ``batch_size``."""
    counted: set[str] = set()
    for node in analysis.preorder:
        if isinstance(node, cst.Call) and isinstance(node.func, cst.Name) and node.func.value == "range":
            counted.update(n for arg in node.args for n in [dotted_name(arg.value)] if n)
        elif isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Modulo):
            name = dotted_name(node.right)
            if name:
                counted.add(name)
    for loader in analysis.loader_calls:
        for arg in loader.args:
            if arg.keyword is not None and arg.keyword.value == "batch_size":
                name = dotted_name(arg.value)
                if name:
                    counted.add(name)
    return counted


def _has_or(test: cst.BaseExpression) -> bool:
    """Whether a test combines tests with ``or`` (looking through ``and`` and ``not``)."""
    if isinstance(test, cst.BooleanOperation):
        return isinstance(test.operator, cst.Or) or _has_or(test.left) or _has_or(test.right)
    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        return _has_or(test.expression)
    return False


def _place_in_tuple(target: cst.BaseExpression, name: str) -> tuple[int, int] | None:
    """Where a name stands in a tuple target of plain names (``rank, world_size``): its index and the count."""
    if type(target) not in (cst.Tuple, cst.List):
        return None
    elements = target.elements  # type: ignore[attr-defined]
    if any(type(element) is cst.StarredElement for element in elements):
        return None
    for index, element in enumerate(elements):
        if dotted_name(element.value) == name:
            return index, len(elements)
    return None


def _is_minus_one_or_none(expr: cst.BaseExpression) -> bool:
    return (isinstance(expr, cst.Name) and expr.value == "None") or int_value(expr) == -1


def draws_per_rank(analysis: ScriptAnalysis) -> bool:
    """Whether the program already makes each rank's data its own (see :func:`_draws_per_rank`), read once
    per module."""
    return analysis.derived("draws per rank", _draws_per_rank)


def _draws_per_rank(analysis: ScriptAnalysis) -> bool:
    """Whether the program already makes each rank's data its own: a random seed that flows from the rank
    (``torch.manual_seed(1337 + rank)``, ``torch.Generator().manual_seed(rank)``) or a generator object seeded
    from it and drawn from (``np.random.default_rng(100 + rank)``) in any of its modules, or an index or slice computed from it (``data[rank::world_size]``) in the module asked about. (Only seed
    calls are looked at in the other modules: a program may hold a hundred of them.)"""
    if _torch_seeded_per_rank(analysis) or any(_rank_generator_draws(module) for module in analysis.shared.analyses):
        return True
    return any(type(node) is cst.Subscript and takes_a_rank_part(analysis, node) for node in analysis.preorder)  # type: ignore[arg-type]


#: Calls that cut data into parts, one of which a rank takes (``torch.chunk(data, world_size)[rank]``).
_SPLITS = frozenset({"chunk", "split", "tensor_split", "array_split"})


def takes_a_rank_part(analysis: ScriptAnalysis, subscript: cst.Subscript) -> bool:
    """Whether a subscript takes the part of the data a rank takes by hand: a slice from the rank (``data[rank::
    world_size]``, ``data[rank * n:(rank + 1) * n]``) or the rank's item of a split (``torch.chunk(data, ws)[rank]``,
    also held in a name first: ``shards = torch.chunk(data, ws)``; ``shards[rank]``); not any item picked by the rank
    (``devices[local_rank]`` is no data)."""
    if len(subscript.slice) != 1:
        return False
    element = subscript.slice[0].slice
    facts = rank_facts(analysis)
    if type(element) is cst.Slice:
        parts = [p for p in (element.lower, element.upper, element.step) if p is not None and type(p) not in _CONSTANT_TYPES]  # type: ignore[attr-defined]
        return any(facts.kind(p) is Kind.RANK for p in parts)
    value = subscript.value
    splits = [value] if type(value) is cst.Call else analysis.flows_into(value, value.value) if type(value) is cst.Name else []  # type: ignore[attr-defined]
    return any(
        type(split) is cst.Call and (dotted_name(split.func) or "").rpartition(".")[2] in _SPLITS for split in splits  # type: ignore[attr-defined]
    ) and facts.kind(element.value) is Kind.RANK  # type: ignore[attr-defined]


def _torch_seeded_per_rank(analysis: ScriptAnalysis) -> bool:
    """Whether a random seed that flows from the rank reaches draws, in any module of the program (see
    :func:`_seeds_draws`), read once per module."""
    return analysis.derived("torch seeded per rank", _find_torch_seeded_per_rank)


def _find_torch_seeded_per_rank(analysis: ScriptAnalysis) -> bool:
    for module in analysis.shared.analyses:
        seeds = [call for call in module.calls if "seed" in callee_name(call) and call.args]
        if seeds:
            facts = rank_facts(module)
            if any(
                any(facts.kind(arg.value) is Kind.RANK for arg in call.args) and _seeds_draws(module, call, seeds)
                for call in seeds
            ):
                return True
    return False


def _rank_seeded_generators(analysis: ScriptAnalysis) -> list[cst.Call]:
    """The module's numpy or Python generator objects seeded from the rank (``np.random.default_rng(100 +
    rank)``, ``random.Random(rank)``): each rank draws its own sequence from them."""
    facts = rank_facts(analysis)
    return [
        call
        for call in analysis.calls_to(names.RANDOM_GENERATORS)
        if any(facts.kind(arg.value) is Kind.RANK for arg in call.args)
    ]


def _rank_generator_draws(analysis: ScriptAnalysis) -> list[cst.Call]:
    """The module's draws from generator objects seeded from the rank (``rng.integers(0, n, bs)`` of ``rng =
    np.random.default_rng(100 + rank)``) that make or pick a batch's samples: each rank's own. A generator never
    drawn from shards nothing. Found once per module."""
    return analysis.derived("rank generator draws", _find_rank_generator_draws)


def _find_rank_generator_draws(analysis: ScriptAnalysis) -> list[cst.Call]:
    generators = _rank_seeded_generators(analysis)
    if not generators:
        return []
    return [
        call
        for call in analysis.calls
        if type(call.func) is cst.Attribute
        and any(g in analysis.origins(call.func.value) for g in generators)  # type: ignore[attr-defined]
        and _picks_samples(analysis, call)
    ]


#: Generator methods whose draws are samples or their order (``rng.choice(n, bs)``, ``random.sample(pool, k)``).
SAMPLE_PICKS = frozenset({"choice", "choices", "sample", "permutation", "shuffle"})


def _picks_samples(analysis: ScriptAnalysis, draw: cst.Call) -> bool:
    """Whether a draw makes the batch or decides which samples it takes: a picking method (:data:`SAMPLE_PICKS`),
    an index (``data[rng.integers(0, n, bs)]``, ``ix = rng.integers(...)``), or the batch itself
    (``torch.from_numpy(rng.standard_normal((bs, 4)))``); not noise or a mask combined with a batch that every
    rank takes alike (``data[ix] + rng.normal(0, 0.01, shape)``: an operand of arithmetic)."""
    if call_method_name(draw) in SAMPLE_PICKS:
        return True
    stmt = analysis.statement(draw)
    for ancestor in analysis.ancestors(draw):
        if ancestor is stmt or type(ancestor) is cst.SubscriptElement:
            return True
        if type(ancestor) is cst.BinaryOperation:
            return False
    return True


#: torch's draws from its process-wide random state, unless given a ``generator=`` of their own.
TORCH_DRAWS = frozenset(
    f"torch.{name}"
    for name in ("rand", "randn", "randint", "randperm", "multinomial", "bernoulli", "normal", "poisson", "rand_like", "randn_like", "randint_like")
)


#: Tensor methods that fill a tensor with draws from torch's process-wide state (``torch.empty(n).random_(0, k)``).
IN_PLACE_DRAWS = frozenset({"random_", "uniform_", "normal_", "bernoulli_", "exponential_", "geometric_", "cauchy_", "log_normal_"})
#: Methods of ``torch.distributions`` objects that draw from torch's process-wide state (``Categorical(probs).sample()``).
DISTRIBUTION_DRAWS = frozenset({"sample", "rsample", "sample_n"})


def is_distribution_draw(analysis: ScriptAnalysis, call: cst.Call) -> bool:
    """Whether a call samples a ``torch.distributions`` object (``m = Categorical(probs); action = m.sample()``,
    ``Normal(mu, std).rsample()``): a draw from torch's process-wide state, like ``torch.multinomial``."""
    if call_method_name(call) not in DISTRIBUTION_DRAWS or type(call.func) is not cst.Attribute:
        return False
    return any(
        type(origin) is cst.Call and any(q.startswith("torch.distributions.") for q in analysis.qualified_names(origin.func))  # type: ignore[attr-defined]
        for origin in analysis.origins(call.func.value)  # type: ignore[attr-defined]
    )


def _torch_draws(analysis: ScriptAnalysis) -> list[cst.Call]:
    """The module's draws from torch's own random state or from a generator not seeded alike on every rank: the
    functions of :data:`TORCH_DRAWS`, the in-place methods of :data:`IN_PLACE_DRAWS` and the samples of
    ``torch.distributions`` objects (:func:`is_distribution_draw`), but none given a
    ``generator=`` every rank seeds alike. (Dropout draws too, but changes no batch: it is not among them.)"""
    return analysis.derived("torch_draws", _find_torch_draws)


def _find_torch_draws(analysis: ScriptAnalysis) -> list[cst.Call]:
    found = []
    for call in analysis.calls:
        if not (analysis.is_call_to(call, TORCH_DRAWS) or call_method_name(call) in IN_PLACE_DRAWS or is_distribution_draw(analysis, call)):
            continue
        generator = keyword_argument(call, "generator")
        if generator is None or not generator_seeded_alike(analysis, generator.value):
            found.append(call)
    return found


def process_state_draw_in(analysis: ScriptAnalysis, node: cst.CSTNode) -> cst.Call | None:
    """The first draw under the node from a process-wide random state (torch's, Python's ``random``, numpy's;
    not one from a generator every rank seeds alike): guarded to rank 0, it moves rank 0's stream ahead of the
    others', and every later draw (a dropout mask, a stochastic-depth decision, an augmentation) differs
    between the ranks where the original drew one sequence."""
    draws = [*_torch_draws(analysis), *(call for names in STATE_DRAWS.values() for call in analysis.calls_to(names))]
    inside = [draw for draw in draws if analysis.is_inside(draw, node)]
    return min(inside, key=analysis.line) if inside else None


def _seeds_draws(analysis: ScriptAnalysis, seed: cst.Call, seeds: list[cst.Call]) -> bool:
    """Whether a seed from the rank reaches draws: a generator's own seed (``g.manual_seed(rank)``) or another
    state's does; torch's process-wide seed only where no later seed of it in the same block, alike on every
    rank, replaces it (``torch.manual_seed(1337 + rank)`` for dropout, then ``torch.manual_seed(1337)``), and
    where the program draws from it (a ``torch.randint`` without a ``generator=`` of its own: batches drawn
    with ``generator=g`` seeded alike are the same on every rank)."""
    if _states_seeded(analysis, seed) != frozenset({"torch"}):
        return True
    facts = rank_facts(analysis)
    block = analysis.parent(analysis.statement(seed))
    for later in seeds:
        if (
            later is not seed
            and analysis.parent(analysis.statement(later)) is block
            and analysis.comes_before(seed, later)
            and _states_seeded(analysis, later) == frozenset({"torch"})
            and not any(facts.kind(arg.value) is Kind.RANK for arg in later.args)
        ):
            return False
    feeding = calls_feeding_the_losses(analysis)
    return any(draw in feeding for module in analysis.shared.analyses for draw in _torch_draws(module))


def calls_feeding_the_losses(analysis: ScriptAnalysis) -> frozenset[cst.Call]:
    """The calls of the program whose values may reach a loss ``backward()`` is called on (see
    :meth:`ScriptAnalysis.feeding_calls`): a draw among them makes the training data, or picks it (``ix =
    torch.randint(...)`` then ``model(data[ix])``); one that does not (noise for a plot, a random tensor of a
    test) changes no batch, whatever seeds it. Found once per program."""
    cache = analysis.shared.__dict__.setdefault("_feeding_the_training", {})
    if "calls" not in cache:
        losses: list[cst.CSTNode] = []
        for module in analysis.shared.analyses:
            for call in module.backward_calls:
                loss = backward_loss(call)
                name = dotted_name(loss)
                # (``loss.backward()``: what the name holds; ``model(x).sum().backward()``: the expression)
                losses.extend(module.flows_into(call, name) if name is not None else [loss])
        cache["calls"] = frozenset(analysis.feeding_calls(losses)) if losses else frozenset()
    return cache["calls"]


def per_rank_draws(analysis: ScriptAnalysis) -> list[cst.Call]:
    """torch's draws in the program that differ between ranks because the program seeds them from the rank
    (see :func:`draws_per_rank`): each draw from torch's own state or from a generator not seeded alike
    (``ix = torch.randint(n, (bs,))`` after ``torch.manual_seed(1337 + rank)``: each rank's own batches)."""
    if not draws_per_rank(analysis):
        return []
    generators = [draw for module in analysis.shared.analyses for draw in _rank_generator_draws(module)]
    if generators and not _torch_seeded_per_rank(analysis):
        return generators
    # (a draw from a process-wide state that every rank seeds alike is the same on every rank: torch's where
    # only a generator of the program, or Python's or numpy's state, is seeded from the rank)
    return [
        draw
        for module in analysis.shared.analyses
        for draw in _torch_draws(module)
        if keyword_argument(draw, "generator") is not None or not seeds_alike(module, "torch", before=draw)
    ] + [
        draw
        for module in analysis.shared.analyses
        for state, draws in STATE_DRAWS.items()
        for draw in module.calls_to(draws)
        if not seeds_alike(module, state, before=draw)
    ] + generators


#: Draws from Python's and numpy's process-wide random states (``random.sample(range(n), bs)``,
#: ``np.random.choice(n, bs)``): each rank's own where the program seeds that state from the rank.
STATE_DRAWS: dict[str, frozenset[str]] = {
    "random": frozenset(f"random.{n}" for n in ("random", "randint", "randrange", "choice", "choices", "sample", "shuffle", "uniform", "gauss")),
    "numpy": frozenset(
        f"numpy.random.{n}"
        for n in ("rand", "randn", "randint", "random", "random_sample", "choice", "permutation", "shuffle", "normal", "uniform", "standard_normal")
    ),
}


def rank_seeded_instances(analysis: ScriptAnalysis, draw: cst.Call) -> tuple[cst.FunctionDef, frozenset[cst.Call], int] | None:
    """For a draw (of :func:`per_rank_draws`) through a generator an object keeps, seeded from a parameter of its
    class's ``__init__`` (``self.gen = torch.Generator().manual_seed(seed)``, ``self.rng =
    np.random.default_rng(seed)``): the method the draw is in, the constructions of the class that pass a seed
    from the rank (``Windows(data, seed=rank)``, not ``Windows(data, seed=123)``) and how many constructions there
    are: the draws are each rank's own through those objects only. ``None`` for any other draw (per rank
    wherever it runs)."""
    home = analysis.shared.analysis_of(draw) or analysis
    method = home.enclosing_function(draw)
    if method is None or home.enclosing_class(draw) is None:
        return None
    if home.is_call_to(draw, TORCH_DRAWS) or call_method_name(draw) in IN_PLACE_DRAWS:
        given = keyword_argument(draw, "generator")
        generator = given.value if given is not None else None
    else:
        generator = draw.func.value if type(draw.func) is cst.Attribute else None  # type: ignore[attr-defined]
    if generator is None or not (dotted_name(generator) or "").startswith("self."):
        return None
    init: cst.FunctionDef | None = None
    parameter: str | None = None
    for origin in home.origins(generator):
        seed = origin.args[0].value if type(origin) is cst.Call and origin.args else None  # type: ignore[attr-defined]
        where = home.enclosing_function(origin)
        if (
            type(seed) is not cst.Name
            or where is None
            or where.name.value != "__init__"
            or not home.is_parameter(where, seed.value)  # type: ignore[attr-defined]
            or (init is not None and (where, seed.value) != (init, parameter))  # type: ignore[attr-defined]
        ):
            return None
        init, parameter = where, seed.value  # type: ignore[attr-defined]
    owner = home.enclosing_class(init) if init is not None else None
    if owner is None or parameter is None:
        return None
    built = home.shared.instances_of(owner)
    from_rank = set()
    for construction in built:
        builder = analysis.shared.analysis_of(construction) or home
        argument = builder.argument_for(construction, init, parameter)  # type: ignore[arg-type]
        if argument is not None and rank_facts(builder).kind(argument) is Kind.RANK:
            from_rank.add(construction)
    return method, frozenset(from_rank), len(built)


#: The seeding calls of each process-wide random state: torch's, Python's ``random`` module's and numpy's
#: (a helper of the program whose name says ``seed`` counts too, see :func:`seeds_alike`).
SEEDS: dict[str, frozenset[str]] = {
    "torch": frozenset({"torch.manual_seed", "torch.random.manual_seed"}),
    "random": frozenset({"random.seed"}),
    "numpy": frozenset({"numpy.random.seed"}),
}


def seeds_alike(analysis: ScriptAnalysis, state: str = "torch", before: cst.CSTNode | None = None, *, when_given: bool = False) -> bool:
    """Whether every rank seeds a process-wide random state (``torch``, ``random`` or ``numpy``, see
    :data:`SEEDS`) with the same value before drawing: a seeding call (or a seeding helper:
    ``seed_everything(42)``, ``set_seed(args.seed)``) with an argument the same on every rank, and no seed
    call in the program whose argument flows from the rank. Unseeded, each process starts from its own
    random state (each seeds it from the system at start). ``before``: a draw of the module asked about; a
    seed that runs only after it (later in the same function, or in a function called after it) does not
    count for it (``random_split(...)`` then ``torch.manual_seed(0)``: the split is each rank's own).
    ``when_given``: a seed setting the program fills with a draw only where it is unset (``if opt.manualSeed is
    None: opt.manualSeed = random.randint(...)``) counts as alike: it is, in every run given the seed (the
    question of the rules that report draws alike, where the other rules ask whether every run is alike)."""
    uniform = False
    chain: list[list[tuple[cst.FunctionDef | None, cst.CSTNode]]] = []

    def draw_chain() -> list[tuple[cst.FunctionDef | None, cst.CSTNode]]:
        """The draw's chain of callers, read on first need: only a seed of another module asks."""
        if not chain:
            chain.append(_call_path(analysis, before))  # type: ignore[arg-type]
        return chain[0]

    for module in analysis.shared.analyses:
        kinds = _seed_kinds(module, state)
        if not kinds:
            continue
        if any(kind is Kind.RANK for _, kind in kinds):
            return False
        uniform = uniform or any(
            _same_on_every_rank(module, kind, call, when_given)
            and (
                before is None
                or (module is analysis and analysis.may_run_before(call, before))
                or (module is not analysis and _seed_may_come_first(module, call, analysis, draw_chain()))
            )
            for call, kind in kinds
        )
    return uniform


def _seed_may_come_first(module: ScriptAnalysis, seed: cst.Call, analysis: ScriptAnalysis, path: list[tuple[cst.FunctionDef | None, cst.CSTNode]]) -> bool:
    """Whether a seed of ``module`` may run before a draw of another module (``path``: the draw's chain of single
    callers, :func:`_call_path`). Where the chain passes through the seed's module, the seed may run before the
    chain's call there (``main()`` seeding, then calling ``build_datasets()`` of ``data.py``: seeded; the call first,
    then the seed: not). Where the chain starts at the top level of a module other than the entry, the draw runs
    when that module is imported (``train_set, val_set = random_split(...)`` at the top of ``data.py``, or a helper
    called there): the seed must run before that import. Otherwise (a chain of several callers) it counts."""
    for _, node in path[1:]:
        if (analysis.shared.analysis_of(node) or analysis) is module:
            return module.may_run_before(seed, node)
    function, site = path[-1]
    home = analysis.shared.analysis_of(site) or analysis
    if function is None and not home.is_entry:
        return _seeds_before_importing(module, seed, home)
    return True


def _seed_calls(analysis: ScriptAnalysis, state: str) -> list[cst.Call]:
    """The module's calls with arguments that seed a process-wide random state (:func:`_states_seeded`), found
    once per module and state (every draw asks)."""
    return analysis.derived(
        f"seed calls of {state}", lambda _: [call for call in analysis.calls if call.args and state in _states_seeded(analysis, call)]
    )


def _seed_kinds(analysis: ScriptAnalysis, state: str) -> list[tuple[cst.Call, Kind]]:
    """Each argument of the module's seeding calls of a state, as the call and the argument's rank kind."""

    def find(_: ScriptAnalysis) -> list[tuple[cst.Call, Kind]]:
        facts = rank_facts(analysis)
        return [(call, facts.kind(arg.value)) for call in _seed_calls(analysis, state) for arg in call.args]

    return analysis.derived(f"seed kinds of {state}", find)


def torch_seeds(analysis: ScriptAnalysis) -> list[cst.BaseExpression]:
    """The values the program seeds torch with: the first argument of each seeding call of any of its modules
    (``torch.manual_seed(args.seed)``, a seeding helper: ``set_seed(cfg.seed)``); not a helper's own
    parameter (``def set_seed(seed): torch.manual_seed(seed)``: its callers say the value)."""
    found = []
    for module in analysis.shared.analyses:
        for call in _seed_calls(module, "torch"):
            value, function = call.args[0].value, module.enclosing_function(call)
            if not (type(value) is cst.Name and function is not None and module.is_parameter(function, value.value)):  # type: ignore[attr-defined]
                found.append(value)
    return found


def torch_seed_before(analysis: ScriptAnalysis, node: cst.CSTNode) -> cst.BaseExpression | None:
    """The value the program seeds torch with before ``node`` runs, as it can be spelled at ``node``: the
    argument of ``torch.manual_seed`` (an integer wherever the original runs: ``None`` fails there) in the
    same function as the node (or both at the module's top level), earlier, in a block the node is in (it
    runs whenever the node does), the same on every rank, and a literal or a name, attribute or item no call
    computes and nothing sets between the call and the node (it reads the same at the node). The last such
    call; ``None`` where there is none, or a seed of the program flows from the rank. (A seeding helper of
    the program or a library is not read: which of its arguments is the seed, and whether it lets ``None``
    through, is its own.)"""
    scope = analysis.enclosing_function(node)
    found: cst.BaseExpression | None = None
    facts = rank_facts(analysis)
    for call in analysis.calls_to(SEEDS["torch"]):
        if not call.args or analysis.enclosing_function(call) is not scope or not analysis.comes_before(call, node):
            continue
        if not analysis.is_inside(node, analysis.parent(analysis.statement(call))):
            continue
        value = call.args[0].value
        kind = facts.kind(value)
        if kind is Kind.RANK or not _same_on_every_rank(analysis, kind, call):
            return None
        name = binding_name(value)
        readable = type(value) is cst.Integer or (
            name is not None and not any(type(n) is cst.Call for n in walk(value)) and not _set_between(analysis, name, call, node)
        )
        found = value if readable else None
    return found


def _set_between(analysis: ScriptAnalysis, name: str, first: cst.CSTNode, second: cst.CSTNode) -> bool:
    """Whether the function around ``first`` (or the module's top level) stores into the name (or the
    object it is part of: ``cfg`` of ``cfg["seed"]``) between the two nodes."""
    root = name_root(name)
    function = analysis.enclosing_function(first)
    augmented = [n for n in walk(function.body if function is not None else analysis.module) if type(n) is cst.AugAssign]
    for assign in [*analysis.assignments_in(function), *augmented]:
        targets = [t.target for t in assign.targets] if isinstance(assign, cst.Assign) else [assign.target]  # type: ignore[attr-defined]
        stored = {binding_name(t) for t in targets} - {None}
        if any(s == name or name_root(s) == root for s in stored):  # type: ignore[arg-type]
            if analysis.comes_before(first, assign) and analysis.comes_before(assign, second):
                return True
    return False


#: A generator object of torch: each new one starts from the same fixed seed, in every process.
GENERATOR = frozenset({"torch.Generator", "torch._C.Generator"})


def generator_seeded_alike(analysis: ScriptAnalysis, generator: cst.BaseExpression) -> bool:
    """Whether a ``generator=`` argument is a ``torch.Generator`` every rank seeds alike: made in this program
    (``g = torch.Generator()``, ``torch.Generator().manual_seed(0)``), never seeded from the system
    (``g.seed()``) and seeded, if at all, only with values the same on every rank (a new generator's own
    seed is a constant). A generator of unknown origin, or one seeded from the rank, is taken as each rank's own."""
    origins = analysis.origins(generator)
    made: list[cst.CSTNode] = []
    seeded: list[cst.Call] = []
    for origin in origins:
        if type(origin) is cst.Call and analysis.is_call_to(origin, GENERATOR):  # type: ignore[arg-type]
            made.append(origin)
            continue
        # ``torch.Generator().manual_seed(0)``: the generator is the receiver
        receivers = analysis.origins(origin.func.value) if type(origin) is cst.Call and call_method_name(origin) == "manual_seed" else set()  # type: ignore[arg-type, attr-defined]
        generators = [o for o in receivers if type(o) is cst.Call and analysis.is_call_to(o, GENERATOR)]  # type: ignore[arg-type]
        if not generators:
            return False  # a generator of unknown origin: taken as each rank's own
        made.extend(generators)
        seeded.append(origin)  # type: ignore[arg-type]
    if not made:
        return False
    seeds = list(seeded)
    for call in analysis.calls:
        method = call_method_name(call)
        if method in ("manual_seed", "seed") and call not in seeds and set(made) & analysis.origins(call.func.value):  # type: ignore[attr-defined]
            seeds.append(call)
    facts = rank_facts(analysis)
    for call in seeds:
        if call_method_name(call) == "seed" or not call.args:
            return False
        kind = facts.kind(call.args[0].value)
        if kind is Kind.RANK or not _same_on_every_rank(analysis, kind, call):
            return False
    return True


def _seeds_before_importing(module: ScriptAnalysis, seed: cst.Call, imported: ScriptAnalysis) -> bool:
    """Whether a seed of another module runs before ``imported`` is first imported by it: the seed runs when
    its own module is imported (at its top level, or in a function called there) and comes before every
    statement of that module that imports ``imported``; or the seed and every such import are in one
    function, the seed first (``torch.manual_seed(0)`` then a lazy ``from data import train_set`` in
    ``main()``). A module imported with nothing of the program between them: ``True``."""
    imports = _imports_of(module, imported.module_name)
    function = module.enclosing_function(seed)
    if function is not None and imports and all(
        module.enclosing_function(node) is function and module.comes_before(seed, node) for node in imports
    ):
        return True
    path = _call_path(module, seed)
    if path[-1][0] is not None:
        return False  # in a function called later than the module's imports run
    at = path[-1][1]
    return all(module.comes_before(at, node) for node in imports)


def _imports_of(module: ScriptAnalysis, name: str) -> list[cst.CSTNode]:
    """The import statements of a module that import the module named ``name`` (``import data``, ``from data
    import x``, ``from pkg import data``, relative ``from . import data`` / ``from .data import x``, resolved
    by :meth:`ScriptAnalysis.imported_from`; not ``torch.utils.data``)."""
    found: list[cst.CSTNode] = []
    for node in module.preorder:
        if type(node) is cst.ImportFrom:
            base = module.imported_from(node)  # type: ignore[arg-type]
            spelled = {base} if base else set()
            if not isinstance(node.names, cst.ImportStar):  # type: ignore[attr-defined]
                spelled.update(f"{base}.{dotted_name(alias.name)}" if base else dotted_name(alias.name) or "" for alias in node.names)  # type: ignore[attr-defined]
        elif type(node) is cst.Import:
            spelled = {dotted_name(alias.name) or "" for alias in node.names}  # type: ignore[attr-defined]
        else:
            continue
        if name in spelled:
            found.append(node)
    return found


def _same_on_every_rank(analysis: ScriptAnalysis, kind: Kind, call: cst.Call, when_given: bool = False) -> bool:
    """Whether a seeding call's argument is the same on every rank: known to be, or a value read from the
    program's settings (``cfg.seed``, ``config["seed"]``: an attribute or item no call computes, none of
    whose parts is the rank), which every rank reads alike; not a value a call makes on each process
    (``int(time.time())``) nor a setting the program may fill with one (``args.seed = random.randint(...)``),
    unless ``when_given`` and it fills it only where it is unset (:func:`seeds_alike`)."""
    if kind is Kind.UNIFORM:
        return True
    return kind is Kind.UNKNOWN and all(
        type(arg.value) in (cst.Attribute, cst.Subscript)
        and not any(type(node) is cst.Call for node in walk(arg.value))
        and not _drawn_per_process(analysis, arg.value, when_given)
        for arg in call.args
    )


#: Where a value drawn on each process comes from: a random state, a clock, the process itself.
PER_PROCESS_SOURCES = ("random.", "numpy.random.", "time.", "datetime.", "uuid.", "secrets.", "os.getpid", "os.urandom", "torch.rand", "torch.seed")


def _drawn_per_process(analysis: ScriptAnalysis, expr: cst.BaseExpression, when_given: bool = False) -> bool:
    """Whether a value (an attribute of the settings) may be assigned from a call that draws on each
    process (:data:`PER_PROCESS_SOURCES`), where the seeding call reads it (``args.seed =
    random.randint(...)`` before ``torch.manual_seed(args.seed)``); ``when_given``: a draw that fills the
    setting only where it is unset does not count (:func:`_fills_an_unset_setting`)."""
    name = binding_name(expr)
    if name is None:
        return False
    return any(
        type(node) is cst.Call
        and any(q.startswith(PER_PROCESS_SOURCES) for q in analysis.qualified_names(node.func))  # type: ignore[attr-defined]
        and not (when_given and _fills_an_unset_setting(analysis, node, name))
        for value in analysis.flows_into(expr, name)
        for node in walk(value)
    )


def seeded_alike_only_when_given(analysis: ScriptAnalysis, state: str = "torch") -> str | None:
    """The seed setting (``opt.manualSeed``) that makes the ranks seed a state alike only in the runs given it:
    they seed alike when it is given (:func:`seeds_alike` ``when_given``), each its own draw when not; ``None``
    where the answer is the same in every run."""
    if seeds_alike(analysis, state) or not seeds_alike(analysis, state, when_given=True):
        return None
    for module in analysis.shared.analyses:
        for call, kind in _seed_kinds(module, state):
            for arg in call.args:
                if kind is Kind.UNKNOWN and _drawn_per_process(module, arg.value) and not _drawn_per_process(module, arg.value, True):
                    return binding_name(arg.value)
    return None


def _fills_an_unset_setting(analysis: ScriptAnalysis, draw: cst.CSTNode, name: str) -> bool:
    """Whether a draw assigned to a setting runs only where the setting is unset: under ``if name is None:``
    (``if not name:``, ``if name < 0:``, ``== -1``, ``== 0``), or in the branch of a conditional expression that
    such a test selects (``args.seed if args.seed is not None else random.randint(...)``)."""
    child: cst.CSTNode = draw
    for ancestor in analysis.ancestors(draw):
        kind = type(ancestor)
        if kind is cst.If and child is ancestor.body:  # type: ignore[attr-defined]
            return _tests_unset(ancestor.test, name)  # type: ignore[attr-defined]
        if kind is cst.IfExp and child is not ancestor.test:  # type: ignore[attr-defined]
            unset = _tests_unset(ancestor.test, name)  # type: ignore[attr-defined]
            given = _tests_unset(ancestor.test, name, negated=True)  # type: ignore[attr-defined]
            return (unset and child is ancestor.body) or (given and child is ancestor.orelse)  # type: ignore[attr-defined]
        if kind in (cst.FunctionDef, cst.ClassDef, cst.Module):
            return False
        child = ancestor
    return False


def _tests_unset(test: cst.BaseExpression, name: str, negated: bool = False) -> bool:
    """Whether a test holds where the setting ``name`` is unset (``negated``: where it is given): ``name is
    None``, ``not name``, ``name < 0``, ``name == -1`` or ``== 0`` (``is not None``, a bare ``name``, ``>= 0``, ...)."""
    if type(test) is cst.UnaryOperation and type(test.operator) is cst.Not:  # type: ignore[attr-defined]
        return (binding_name(test.expression) == name) != negated  # type: ignore[attr-defined]
    if binding_name(test) == name:
        return negated  # (a bare ``name``: true where it is given)
    if type(test) is not cst.Comparison or len(test.comparisons) != 1 or binding_name(test.left) != name:  # type: ignore[attr-defined]
        return False
    operator = type(test.comparisons[0].operator)  # type: ignore[attr-defined]
    value = test.comparisons[0].comparator  # type: ignore[attr-defined]
    number = int_value(value)
    if is_none(value):
        return operator in ((cst.IsNot, cst.NotEqual) if negated else (cst.Is, cst.Equal))
    if number is None:
        return False
    if negated:
        return (operator is cst.GreaterThanEqual and number == 0) or (operator in (cst.NotEqual, cst.GreaterThan) and number in (-1, 0))
    return (operator is cst.LessThan and number == 0) or (operator is cst.Equal and number in (-1, 0)) or (operator is cst.LessThanEqual and number == 0)


def _call_path(analysis: ScriptAnalysis, node: cst.CSTNode, depth: int = 4) -> list[tuple[cst.FunctionDef | None, cst.CSTNode]]:
    """The node in its function, then the call of that function in the function calling it, and so on up to
    the module (as long as the function has one call site)."""
    path: list[tuple[cst.FunctionDef | None, cst.CSTNode]] = []
    current = node
    for _ in range(depth):
        function = analysis.enclosing_function(current)
        path.append((function, current))
        if function is None:
            break
        callers = analysis.callers_of(function)
        if len(callers) != 1:
            break
        current = callers[0]
    return path


def _states_seeded(analysis: ScriptAnalysis, call: cst.Call, depth: int = 2) -> frozenset[str]:
    """The process-wide random states a call seeds (:data:`SEEDS`): ``torch.manual_seed`` torch's,
    ``random.seed`` Python's; a seeding helper of a library (``seed_everything``, ``set_seed``) all three; a
    function of the program whose name says ``seed``, those its own calls seed (all three where they seed
    none that can be told: its body is not the program's to read). Not a generator's own ``manual_seed``."""
    for state, seeds in SEEDS.items():
        if analysis.is_call_to(call, seeds):
            return frozenset({state})
    qualified = analysis.qualified_names(call.func)
    if any(q.endswith((".seed_everything", ".set_seed")) for q in qualified):
        return frozenset(SEEDS)
    target = analysis.call_target(call)
    if target is None:
        named = type(call.func) is cst.Name and "seed" in call.func.value  # type: ignore[attr-defined]
        return frozenset(SEEDS) if named else frozenset()
    if "seed" not in target.name.value:
        return frozenset()
    home = analysis.shared.analysis_of(target) or analysis
    inner = [node for node in walk(target.body) if type(node) is cst.Call]
    seeded = frozenset().union(*(_states_seeded(home, c, depth - 1) for c in inner)) if depth > 0 else frozenset()
    return seeded or frozenset(SEEDS)


def rank_facts(analysis: ScriptAnalysis) -> RankFacts:
    """The rank facts of an analysed file, computed once and kept with the analysis (so they are freed with it)."""
    return analysis.derived("ranks", RankFacts)


__all__ = ["GENERATOR", "calls_feeding_the_losses", "counts_the_processes", "SEEDS", "Condition", "Kind", "RankFacts", "draws_per_rank", "generator_seeded_alike", "more_than_one", "rank_facts", "seeds_alike", "torch_seed_before", "torch_seeds"]
