"""Facts about legacy distributed launch code, shared by the rules DDP020-DDP025.

Before torchrun, scripts started their own processes (``mp.spawn``, ``multiprocessing.Process`` loops),
set the rendezvous address by hand, passed rank and world size to ``init_process_group`` and took the local
rank from a ``--local_rank`` argument. This module finds those launches and argparse options, and tells
which expressions hold the global rank, the local rank or the world size. It follows values through plain
copies only: assignments, ``self`` attributes, function parameters (at every call site of the file) and
the arguments a launch hands to the function it starts. Arithmetic ends the trail, so
``rank = node_rank * ngpus + gpu`` is *computed from* ``gpu``, not a copy of it.

Everything is computed once per :class:`~ddp_migrate.codemods.analysis.ScriptAnalysis`
(:func:`legacy_facts`).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Iterable, Iterator, Optional, Union

import libcst as cst

from .. import names
from . import tree
from .script import ScriptAnalysis, argument, call_method_name, dotted_name, statements_of, walk

# ----------------------------------------------------------------------------------- qualified names

SPAWN = frozenset(
    {
        "torch.multiprocessing.spawn",
        "torch.multiprocessing.spawn.spawn",
        "torch.multiprocessing.start_processes",
        "torch.multiprocessing.spawn.start_processes",
    }
)
PROCESS = frozenset(
    {
        "multiprocessing.Process",
        "multiprocessing.context.Process",
        "torch.multiprocessing.Process",
    }
)
GET_CONTEXT = frozenset({"multiprocessing.get_context", "torch.multiprocessing.get_context"})
SET_START_METHOD = frozenset({"multiprocessing.set_start_method", "torch.multiprocessing.set_start_method"})
DEVICE_COUNT = frozenset({"torch.cuda.device_count"})
OS_ENVIRON = frozenset({"os.environ"})
ENV_GETTERS = frozenset({"os.environ.get", "os.getenv"})
RUNTIME_LOCAL_RANK = frozenset({names.runtime("local_rank")})

#: Variables torchrun sets for every process; a script must not set them itself.
RENDEZVOUS_VARIABLES = ("MASTER_ADDR", "MASTER_PORT")
LAUNCH_VARIABLES = (*RENDEZVOUS_VARIABLES, "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE")
#: The option ``torch.distributed.launch`` passed to every process.
LOCAL_RANK_OPTIONS = ("--local_rank", "--local-rank")
#: Words a file must hold for a process group to be set up or a model wrapped in DDP (what makes a launch's
#: target a distributed worker, :meth:`LegacyFacts.sets_up_process_group`): ``init_process_group``, the
#: runtime's ``setup`` (imported from ``ddp_migrate`` or ``ddp_runtime``) or ``DistributedDataParallel``.
DISTRIBUTED_SETUP_WORDS = ("init_process_group", "DistributedDataParallel", "ddp_migrate", "ddp_runtime")
#: Words a file must hold for any of its values to be known as a rank (:meth:`LegacyFacts.rank_kind`): a
#: launch of distributed workers, ``get_rank``, the runtime's ``rank``/``local_rank``, ``RANK`` or
#: ``LOCAL_RANK`` from the environment, a ``--local_rank`` option, a name ending in ``local_rank``, a
#: value handed to ``init_process_group(rank=...)``. A rule that acts only on known ranks requires them.
RANK_SOURCE_WORDS = (*DISTRIBUTED_SETUP_WORDS, "RANK", "get_rank", "local_rank", "localrank", "local-rank")
LOCAL_RANK_DEST = "local_rank"

#: Positional parameters, in order.
INIT_PARAMETERS = ("backend", "init_method", "timeout", "world_size", "rank", "store", "group_name", "pg_options", "device_id")
SPAWN_PARAMETERS = ("fn", "args", "nprocs", "join", "daemon", "start_method")
PROCESS_PARAMETERS = ("group", "target", "name", "args", "kwargs")
DDP_PARAMETERS = ("module", "device_ids", "output_device")

Key = tuple[Optional[cst.CSTNode], str]


def int_value(node: cst.CSTNode | None) -> int | None:
    """The value of an integer literal in any spelling Python allows (``-1``, ``0x04``, ``1_000`` included)."""
    if isinstance(node, cst.Integer):
        return node.evaluated_value
    if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Minus) and isinstance(node.expression, cst.Integer):
        return -node.expression.evaluated_value
    return None


def string_value(node: cst.CSTNode | None) -> str | None:
    """The value of a plain string literal."""
    if isinstance(node, cst.SimpleString):
        value = node.evaluated_value
        return value if isinstance(value, str) else None
    return None


# ------------------------------------------------------------------------------------------ facts


@dataclass(frozen=True, eq=False)
class Launch:
    """A hand-made launch of worker processes: ``mp.spawn(fn, args=..., nprocs=N)`` or a loop that starts
    ``Process(target=fn, args=(i, ...))`` objects.

    ``statement`` is what one call of the target replaces; ``extra`` are the statements that only served
    the launch (the join loop, the list of processes, ``set_start_method``). ``arguments`` are what each
    process receives after its index. ``problem`` says why the launch cannot be rewritten safely.
    """

    kind: str
    call: cst.Call
    statement: cst.BaseStatement
    target: cst.FunctionDef | None
    function: cst.BaseExpression | None
    arguments: tuple[cst.Arg, ...]
    nprocs: cst.BaseExpression | None
    extra: tuple[cst.BaseStatement, ...] = ()
    problem: str | None = None


@dataclass(frozen=True)
class LaunchIndex:
    """The process index a launch hands its target as first argument (0 .. nprocs-1 on this machine)."""

    launch: Launch


@dataclass(frozen=True, eq=False)
class Option:
    """An ``add_argument(...)`` call: its option strings and destination."""

    call: cst.Call
    flags: tuple[str, ...]
    dest: str


Source = Union[cst.BaseExpression, LaunchIndex]


class _Collector:
    """Names, attributes and the targets of assignments the base analysis does not index."""

    def __init__(self) -> None:
        self.names: list[cst.Name] = []
        self.stores: set[cst.CSTNode] = set()
        self.unknown_stores: list[cst.BaseExpression] = []
        self.strings: list[cst.SimpleString] = []

    def _store(self, target: cst.CSTNode, unknown: bool) -> None:
        for node in target_nodes(target):
            self.stores.add(node)
            if unknown:
                self.unknown_stores.append(node)  # type: ignore[arg-type]

    def visit_Name(self, node: cst.Name) -> None:
        self.names.append(node)

    def visit_SimpleString(self, node: cst.SimpleString) -> None:
        self.strings.append(node)

    def visit_AssignTarget(self, node: cst.AssignTarget) -> None:
        self._store(node.target, unknown=False)

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        self._store(node.target, unknown=node.value is None)

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        self.unknown_stores.append(node.target)
        self.stores.add(node.target)

    def visit_For(self, node: cst.For) -> None:
        self._store(node.target, unknown=True)

    def visit_CompFor(self, node: cst.CompFor) -> None:
        self._store(node.target, unknown=True)

    def visit_WithItem(self, node: cst.WithItem) -> None:
        if node.asname is not None:
            self._store(node.asname.name, unknown=True)


class LegacyFacts:
    """What the legacy rules need to know about one analysed file. Use :func:`legacy_facts`."""

    def __init__(self, analysis: ScriptAnalysis) -> None:
        self.analysis = analysis
        collector = _Collector()
        tree.dispatch(analysis.index.preorder, collector)
        self._names = collector.names
        self._stores = collector.stores
        self._strings = collector.strings
        self._assigned: dict[Key, list[cst.BaseExpression | None]] = {}
        self._assign_statements: dict[Key, list[cst.CSTNode]] = {}
        for assign in analysis.assignments:
            targets = [assign.target] if isinstance(assign, cst.AnnAssign) else [t.target for t in assign.targets]
            for target in targets:
                self._index(target, assign.value, assign)  # type: ignore[arg-type]
        for node in collector.unknown_stores:
            name = dotted_name(node) if isinstance(node, (cst.Name, cst.Attribute)) else None
            if name:
                self._assigned.setdefault(self.key(node, name), []).append(None)
        self._memo: dict[Key, tuple[Source, ...]] = {}

    # ------------------------------------------------------------------------------ where names live

    def key(self, node: cst.CSTNode, name: str) -> Key:
        """Where a dotted name used at a node lives: the shared binding model's key
        (:meth:`ScriptAnalysis._key`: ``self.x`` in the class, an attribute of anything else module-wide,
        a plain name in the innermost function that binds it)."""
        return self.analysis._key(node, name)

    def _index(self, target: cst.BaseExpression, value: cst.BaseExpression, statement: cst.CSTNode) -> None:
        if isinstance(target, (cst.Tuple, cst.List)):
            elements = [e.value for e in target.elements]
            values = [e.value for e in value.elements] if isinstance(value, (cst.Tuple, cst.List)) else None
            for i, element in enumerate(elements):
                self._index(element, values[i] if values is not None and len(values) == len(elements) else None, statement)  # type: ignore[arg-type]
            return
        name = dotted_name(target)
        if name:
            key = self.key(target, name)
            self._assigned.setdefault(key, []).append(value)
            self._assign_statements.setdefault(key, []).append(statement)

    def assignments_to(self, key: Key) -> list[cst.CSTNode]:
        """The ``Assign`` nodes that give the name a value."""
        return list(self._assign_statements.get(key, ()))

    def is_load(self, node: cst.CSTNode) -> bool:
        """Whether a name or attribute node reads its value (not a target, keyword, attribute member, ...)."""
        if node in self._stores:
            return False
        parent = self.analysis.parent(node)
        if isinstance(parent, cst.Attribute) and parent.attr is node:
            return False
        if isinstance(parent, cst.Arg) and parent.keyword is node:
            return False
        if isinstance(parent, (cst.Param, cst.FunctionDef, cst.ClassDef, cst.ImportAlias, cst.AsName)):
            return False
        return not isinstance(parent, (cst.Import, cst.ImportFrom))

    def reads(self, key: Key) -> list[cst.CSTNode]:
        """Every node that reads the name (loads of ``x``, ``self.x``, ``args.x``)."""
        scope, name = key
        found: list[cst.CSTNode] = []
        if "." in name:
            candidates: Iterable[cst.CSTNode] = (a for a in self.analysis.attributes if a.attr.value == name.rsplit(".", 1)[1])
        else:
            candidates = (n for n in self._names if n.value == name)
        for node in candidates:
            if dotted_name(node) == name and self.is_load(node) and self.key(node, name) == key:
                found.append(node)
        return found

    # ---------------------------------------------------------------------------------- launches

    @cached_property
    def top_functions(self) -> dict[str, cst.FunctionDef]:
        """The file's top-level functions by name."""
        return {f.name.value: f for f in self.analysis.functions if self.analysis.parent(f) is self.analysis.module}

    def sets_up_process_group(self, function: cst.FunctionDef) -> bool:
        """Whether running the function creates a process group or a DDP model (here or through calls)."""
        targets = [*self.analysis.process_group_setups, *self.analysis.calls_to(names.DISTRIBUTED_DATA_PARALLEL)]
        return self.analysis.reaches(function, targets)

    @cached_property
    def launches(self) -> list[Launch]:
        """Every hand-made launch of processes that run distributed training."""
        found = [launch for call in self.analysis.calls_to(SPAWN) if (launch := self._spawn(call)) is not None]
        for call in self.analysis.calls:
            if self._is_process(call):
                launch = self._process_loop(call)
                if launch is not None:
                    found.append(launch)
        return found

    def _target(self, function: cst.BaseExpression | None) -> cst.FunctionDef | None:
        return self.top_functions.get(function.value) if isinstance(function, cst.Name) else None

    def _is_distributed_target(self, target: cst.FunctionDef | None) -> bool:
        if target is not None:
            return self.sets_up_process_group(target)
        # A target from elsewhere: a launch in a file that trains with DDP is still the DDP launch.
        return bool(self.analysis.process_group_setups or self.analysis.calls_to(names.DISTRIBUTED_DATA_PARALLEL))

    def _spawn(self, call: cst.Call) -> Launch | None:
        fn = argument(call, SPAWN_PARAMETERS, "fn")
        function = fn.value if fn is not None else None
        target = self._target(function)
        if not self._is_distributed_target(target):
            return None
        args = argument(call, SPAWN_PARAMETERS, "args")
        nprocs = argument(call, SPAWN_PARAMETERS, "nprocs")
        join = argument(call, SPAWN_PARAMETERS, "join")
        statement = self.analysis.statement(call)
        problem = None
        if target is None:
            problem = "the spawned function is not a function of this file"
            enclosing = self.analysis.enclosing_function(call)
            if isinstance(function, cst.Name) and enclosing is not None and self.analysis.is_parameter(enclosing, function.value):
                problem = (
                    f"the spawned function comes in through the parameter `{function.value}` of "
                    f"`{enclosing.name.value}()`, which the migration does not follow"
                )
        elif not _is_expression_statement(statement, call):
            problem = "the value of the spawn call is used"
        elif join is not None and not (isinstance(join.value, cst.Name) and join.value.value == "True"):
            problem = "the spawn call does not wait for its processes (join=False)"
        elif any(a.star for a in call.args):
            problem = "the spawn call's arguments are unpacked from a sequence"
        return Launch(
            kind="spawn",
            call=call,
            statement=statement,
            target=target,
            function=function,
            arguments=_passed_arguments(args.value if args is not None else None),
            nprocs=nprocs.value if nprocs is not None else None,
            problem=problem,
        )

    def _is_process(self, call: cst.Call) -> bool:
        if self.analysis.is_call_to(call, PROCESS):
            return True
        if call_method_name(call) == "Process":
            receiver = call.func.value  # type: ignore[union-attr]
            return any(isinstance(o, cst.Call) and self.analysis.is_call_to(o, GET_CONTEXT) for o in self.analysis.origins(receiver))
        return False

    def _process_loop(self, call: cst.Call) -> Launch | None:
        target_arg = argument(call, PROCESS_PARAMETERS, "target")
        function = target_arg.value if target_arg is not None else None
        target = self._target(function)
        if not self._is_distributed_target(target):
            return None
        args_arg = argument(call, PROCESS_PARAMETERS, "args")
        statement = self.analysis.statement(call)
        unsupported = Launch("process", call, statement, target, function, (), None, problem="workers are started in a shape ddp-migrate does not rewrite")
        if target is None or argument(call, PROCESS_PARAMETERS, "kwargs") is not None:
            return unsupported
        # p = Process(target=fn, args=(i, ...)) directly in ``for i in range(N):``
        assign = statement.body[0] if isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1 else None
        if not (isinstance(assign, cst.Assign) and len(assign.targets) == 1 and isinstance(assign.targets[0].target, cst.Name)):
            return unsupported
        process = assign.targets[0].target.value
        block = self.analysis.parent(statement)
        loop = self.analysis.parent(block) if block is not None else None
        if not (isinstance(loop, cst.For) and loop.body is block and isinstance(loop.target, cst.Name) and loop.orelse is None):
            return unsupported
        index = loop.target.value
        nprocs = _range_bound(loop.iter)
        elements = _tuple_elements(args_arg.value) if args_arg is not None else None
        if nprocs is None or not elements or not (isinstance(elements[0], cst.Name) and elements[0].value == index):
            return unsupported
        rest = elements[1:]
        if any(isinstance(n, cst.Name) and n.value == index for e in rest for n in walk(e)):
            return unsupported
        collection = None
        for stmt in statements_of(block):
            if stmt is statement:
                continue
            small = stmt.body[0] if isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 else None
            if isinstance(small, cst.Expr) and isinstance(small.value, cst.Call):
                method = call_method_name(small.value)
                receiver = dotted_name(small.value.func.value) if method else None  # type: ignore[union-attr]
                if method == "start" and receiver == process:
                    continue
                if method == "append" and receiver and len(small.value.args) == 1 and dotted_name(small.value.args[0].value) == process:
                    collection = receiver
                    continue
            if isinstance(small, cst.Assign) and dotted_name(small.targets[0].target) == f"{process}.daemon":
                continue
            return unsupported
        context = dotted_name(call.func.value) if call_method_name(call) == "Process" else None  # type: ignore[union-attr]
        extra = list(self._launch_companions(loop, collection, context))
        if collection is not None and not self._only_used_by(collection, loop, extra):
            return unsupported
        if context is not None and not self._only_used_by(context, loop, extra):
            extra = [s for s in extra if not _assigns(s, context)]
        arguments = tuple(cst.Arg(e) for e in rest)
        return Launch("process", call, loop, target, function, arguments, nprocs, tuple(extra))

    def _launch_companions(self, loop: cst.For, collection: str | None, context: str | None) -> Iterator[cst.BaseStatement]:
        """Statements next to a start loop that only serve the launch: ``procs = []``, ``set_start_method``,
        ``ctx = mp.get_context("spawn")``, ``for p in procs: p.join()``."""
        block = self.analysis.parent(loop)
        for stmt in statements_of(block):  # type: ignore[arg-type]
            if stmt is loop:
                continue
            small = stmt.body[0] if isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 else None
            if collection and isinstance(small, cst.Assign) and dotted_name(small.targets[0].target) == collection:
                if isinstance(small.value, cst.List) and not small.value.elements:
                    yield stmt
            elif context and _assigns(stmt, context) and isinstance(small.value, cst.Call) and self.analysis.is_call_to(small.value, GET_CONTEXT):  # type: ignore[union-attr]
                if self.analysis.comes_before(stmt, loop):
                    yield stmt
            elif isinstance(small, cst.Expr) and isinstance(small.value, cst.Call) and self.analysis.is_call_to(small.value, SET_START_METHOD):
                if self.analysis.comes_before(stmt, loop):
                    yield stmt
            elif collection and isinstance(stmt, cst.For) and dotted_name(stmt.iter) == collection and isinstance(stmt.target, cst.Name):
                joined = stmt.target.value
                body = statements_of(stmt.body)
                if body and all(_is_method_call_on(s, "join", joined) for s in body):
                    yield stmt

    def _only_used_by(self, collection: str, loop: cst.For, extra: list[cst.BaseStatement]) -> bool:
        keep = [loop, *extra]
        for node in self._names:
            if node.value == collection and not any(self.analysis.is_inside(node, s) for s in keep):
                return False
        return True

    @cached_property
    def unmigrated_launch(self) -> Launch | None:
        """A launch DDP020 cannot rewrite. While it stays, its processes get no torchrun environment, so
        the other legacy fixes (which read rank and device from that environment) must wait."""
        return next((launch for launch in self.launches if launch.problem is not None), None)

    def blocked(self) -> str:
        """``""``, or the reason a legacy fix must only report (for its message)."""
        launch = self.unmigrated_launch
        return f" (fix by hand once the script no longer starts its own processes: {launch.problem})" if launch else ""

    def launches_of(self, function: cst.FunctionDef) -> list[Launch]:
        """Launches whose processes run the function."""
        return [launch for launch in self.launches if launch.target is function]

    # ----------------------------------------------------------------------------- value sources

    def sources(self, expr: cst.BaseExpression) -> tuple[Source, ...]:
        """What an expression's value is a plain copy of: assignment values, arguments at call sites,
        launch indices. An expression that is not a name (a call, arithmetic, a literal) is its own source;
        a name with nothing known about it is too."""
        return self._sources(expr, frozenset())

    def _sources(self, expr: cst.BaseExpression, seen: frozenset[Key]) -> tuple[Source, ...]:
        if isinstance(expr, cst.IfExp):
            return (*self._sources(expr.body, seen), *self._sources(expr.orelse, seen))
        name = dotted_name(expr) if isinstance(expr, (cst.Name, cst.Attribute)) else None
        if name is None:
            return (expr,)
        key = self.key(expr, name)
        if key in seen:
            return ()
        if not seen and key in self._memo:
            return self._memo[key] or (expr,)
        found = self._key_sources(key, seen | {key})
        if not seen:
            self._memo[key] = found
        return found or (expr,)  # a name nothing is known about (``True``, a library's constant) is a value of its own

    def _key_sources(self, key: Key, seen: frozenset[Key]) -> tuple[Source, ...]:
        scope, name = key
        found: list[Source] = []
        if isinstance(scope, cst.FunctionDef) and "." not in name and self.analysis.is_parameter(scope, name):
            param = _parameter(scope, name)
            for call in self.analysis.callers_of(scope):
                value = self.analysis.argument_for(call, scope, name)
                if value is None and param is not None and param.default is not None:
                    value = param.default
                if value is not None:
                    found.extend(self._sources(value, seen))
            for call in self._indirect_callers.get(scope, ()):
                value = self.analysis.argument_for(call, scope, name)
                if value is not None:
                    found.extend(self._sources(value, seen))
            for launch in self.launches_of(scope):
                found.extend(self._launch_binding(launch, scope, name, seen))
            if not found and param is not None and param.default is not None:
                found.extend(self._sources(param.default, seen))
        for value in self._assigned.get(key, ()):
            if value is not None:
                found.extend(self._sources(value, seen))
        return tuple(dict.fromkeys(found))

    @cached_property
    def _indirect_callers(self) -> dict[cst.FunctionDef, list[cst.Call]]:
        """Calls through a parameter that is handed a function of this file: ``fn(rank, size)`` inside
        ``init_process(rank, size, fn)`` when ``init_process`` is started with ``fn=run``."""
        found: dict[cst.FunctionDef, list[cst.Call]] = {}
        for call in self.analysis.calls:
            if not isinstance(call.func, cst.Name) or self.analysis.call_target(call) is not None:
                continue
            function = self.analysis.enclosing_function(call)
            parameter = call.func.value
            if function is None or not self.analysis.is_parameter(function, parameter):
                continue
            values = [self.analysis.argument_for(c, function, parameter) for c in self.analysis.callers_of(function)]
            positional = [p.name.value for p in (*function.params.posonly_params, *function.params.params)]
            if parameter in positional and positional.index(parameter) > 0:
                index = positional.index(parameter) - 1
                for launch in self.launches_of(function):
                    if index < len(launch.arguments) and not launch.arguments[index].star:
                        values.append(launch.arguments[index].value)
            for value in values:
                if isinstance(value, cst.Name) and value.value in self.top_functions:
                    found.setdefault(self.top_functions[value.value], []).append(call)
        return found

    def _launch_binding(self, launch: Launch, function: cst.FunctionDef, name: str, seen: frozenset[Key]) -> list[Source]:
        positional = [p.name.value for p in (*function.params.posonly_params, *function.params.params)]
        if name not in positional:
            return []
        index = positional.index(name)
        if index == 0:
            return [LaunchIndex(launch)]
        if index - 1 < len(launch.arguments) and not any(a.star for a in launch.arguments[:index]):
            return list(self._sources(launch.arguments[index - 1].value, seen))
        param = _parameter(function, name)
        return list(self._sources(param.default, seen)) if param is not None and param.default is not None else []

    # ------------------------------------------------------------------------------ what values are

    def env_read(self, expr: cst.BaseExpression) -> str | None:
        """The variable an expression reads from the environment: ``os.environ["RANK"]``,
        ``int(os.environ.get("LOCAL_RANK", 0))``, ``os.getenv("WORLD_SIZE")``."""
        if isinstance(expr, cst.Call) and isinstance(expr.func, cst.Name) and expr.func.value in ("int", "str") and len(expr.args) == 1:
            expr = expr.args[0].value
        if isinstance(expr, cst.Subscript) and self.analysis.qualified_names(expr.value) & OS_ENVIRON and len(expr.slice) == 1:
            index = expr.slice[0].slice
            return string_value(index.value) if isinstance(index, cst.Index) else None
        if isinstance(expr, cst.Call) and self.analysis.is_call_to(expr, ENV_GETTERS) and expr.args:
            return string_value(expr.args[0].value)
        return None

    def index_is_init_rank(self, launch: Launch) -> bool:
        """Whether the launch's process index reaches ``init_process_group(rank=...)`` unchanged (by plain
        copies): the script takes its processes on this machine for the whole job, so the process count
        is the world size."""
        index = LaunchIndex(launch)
        for call in self.analysis.calls_to(names.INIT_PROCESS_GROUP):
            rank = argument(call, INIT_PARAMETERS, "rank")
            if rank is not None and index in self.sources(rank.value):
                return True
        return False

    def index_is_global(self, launch: Launch) -> bool:
        """Whether a launch's process index stands for the global rank.

        It does when the target hands it, unchanged, to ``init_process_group(rank=...)`` (a one-machine
        script whose index is its rank), or when the parameter is called a rank. An index only used to
        compute the rank (``node_rank * ngpus + gpu``) or to pick a device is the local rank.
        """
        if self.index_is_init_rank(launch):
            return True
        if launch.target is None:
            return False
        positional = [*launch.target.params.posonly_params, *launch.target.params.params]
        first = positional[0].name.value.lower() if positional else ""
        return "rank" in first and "local" not in first

    def rank_kind(self, expr: cst.BaseExpression) -> str | None:
        """``"rank"`` when the expression holds the global rank, ``"local_rank"`` for the local rank."""
        parent = self.analysis.parent(expr)
        if isinstance(parent, cst.Attribute) and parent.attr is expr:
            return None
        direct = self._kind_of(expr)
        if direct is not None:
            return direct
        kinds = {self._kind_of(source) for source in self.sources(expr) if source is not expr}
        if "rank" in kinds and "local_rank" not in kinds:
            return "rank"
        if "local_rank" in kinds and "rank" not in kinds:
            return "local_rank"
        name = dotted_name(expr) if isinstance(expr, (cst.Name, cst.Attribute)) else None
        if name and not kinds - {None} and self.key(expr, name) in self._init_rank_keys:
            return "rank"
        if not kinds - {None} and name and name.split(".")[-1] in ("local_rank", "localrank"):
            return "local_rank"
        return None

    @cached_property
    def _init_rank_keys(self) -> frozenset[Key]:
        """Variables handed to ``init_process_group(rank=...)``: whatever else they are, they are the rank."""
        found = set()
        for call in self.analysis.calls_to(names.INIT_PROCESS_GROUP):
            rank = argument(call, INIT_PARAMETERS, "rank")
            name = dotted_name(rank.value) if rank is not None and isinstance(rank.value, (cst.Name, cst.Attribute)) else None
            if name:
                found.add(self.key(rank.value, name))
        return frozenset(found)

    def _kind_of(self, source: Source) -> str | None:
        if isinstance(source, LaunchIndex):
            return "rank" if self.index_is_global(source.launch) else "local_rank"
        if isinstance(source, cst.Call):
            if self.analysis.is_call_to(source, names.RUNTIME_RANK):
                return "rank"
            if self.analysis.is_call_to(source, RUNTIME_LOCAL_RANK):
                return "local_rank"
        variable = self.env_read(source)
        if variable == "RANK":
            return "rank"
        if variable == "LOCAL_RANK":
            return "local_rank"
        if isinstance(source, cst.Attribute) and source.attr.value in self.local_rank_dests:
            owner = dotted_name(source.value)
            if owner is not None and owner != "self" and owner.split(".")[0] not in self.imported_names and not self._library_object(source.value, owner):
                return "local_rank"
        return None

    def holds_global_rank(self, expr: cst.BaseExpression) -> bool:
        """Whether the expression holds this process's global rank."""
        return self.rank_kind(expr) == "rank"

    def holds_local_rank(self, expr: cst.BaseExpression) -> bool:
        """Whether the expression holds this process's local rank."""
        return self.rank_kind(expr) == "local_rank"

    def is_process_count(self, expr: cst.BaseExpression) -> bool:
        """Whether an expression counts processes the legacy way: a literal, or this machine's GPU count."""
        if isinstance(expr, cst.Integer):
            return True
        return any(isinstance(n, cst.Call) and self.analysis.is_call_to(n, DEVICE_COUNT) for n in walk(expr))

    # ------------------------------------------------------------------------- process group setup

    @cached_property
    def explicit_inits(self) -> list[cst.Call]:
        """``init_process_group`` calls that pass the rank or the world size themselves, from anywhere but
        torchrun's environment."""
        found = []
        for call in self.analysis.calls_to(names.INIT_PROCESS_GROUP):
            given = [a for a in (argument(call, INIT_PARAMETERS, "rank"), argument(call, INIT_PARAMETERS, "world_size")) if a is not None]
            if given and not all(self._from_environment(a.value) for a in given):
                found.append(call)
        return found

    @cached_property
    def environment_inits(self) -> list[cst.Call]:
        """``init_process_group`` calls of a ``torch.distributed.launch`` program (it takes ``--local_rank``)
        that read everything from the launcher's environment (``env://``, the default) on a path every run
        takes: run as plain ``python`` they fail for want of ``RANK``.

        A call the script already guards by the environment (``if "RANK" in os.environ:``, or an earlier
        ``return`` under such a test, as reference scripts' ``init_distributed_mode`` does) is the script's
        own single-process fallback and is left alone.
        """
        if not self.program_local_rank_options:
            # A torchrun-native script is correct as it is; only a torch.distributed.launch script (its
            # ``--local_rank`` option, in any module of the program: a helper module sets up the group of the
            # entry's parser) is being migrated off its launcher.
            return []
        explicit = set(self.explicit_inits)
        found = []
        for call in self.analysis.calls_to(names.INIT_PROCESS_GROUP):
            if call in explicit or any(arg.star for arg in call.args):
                continue
            method = argument(call, INIT_PARAMETERS, "init_method")
            if method is not None and string_value(method.value) != "env://":
                continue
            if argument(call, INIT_PARAMETERS, "store") is not None or self._guarded_by_environment(call):
                continue
            found.append(call)
        return found

    def _guarded_by_environment(self, call: cst.Call) -> bool:
        """Whether an ``if`` around the call, or one before it in its function that can leave the function,
        tests the launch environment."""
        analysis = self.analysis
        for ancestor in analysis.ancestors(call):
            if isinstance(ancestor, cst.If) and self._reads_environment(ancestor.test):
                return True
            if isinstance(ancestor, cst.FunctionDef):
                break
        function = analysis.enclosing_function(call)
        if function is None:
            return False
        statement = analysis.statement(call)
        for stmt in statements_of(function.body):
            if stmt is statement or analysis.is_inside(statement, stmt):
                break
            if isinstance(stmt, cst.If) and self._reads_environment(stmt.test):
                if any(isinstance(node, (cst.Return, cst.Raise)) for node in walk(stmt)):
                    return True
        return False

    def _reads_environment(self, test: cst.BaseExpression) -> bool:
        """Whether a test reads the launch: its environment, or the ``--local_rank`` option the launcher fills
        (``if args.local_rank != -1:``, the ``else`` of ``if args.local_rank == -1:``)."""
        dests = {option.dest for _, option in self.program_local_rank_options}
        for node in walk(test):
            if isinstance(node, cst.SimpleString) and string_value(node) in LAUNCH_VARIABLES:
                return True
            if isinstance(node, (cst.Name, cst.Attribute)) and self.analysis.qualified_names(node) & OS_ENVIRON:
                return True
            if isinstance(node, cst.Attribute) and node.attr.value in dests:
                return True
        return False

    def _from_environment(self, expr: cst.BaseExpression) -> bool:
        """Whether the value is the launch environment's ``RANK`` / ``WORLD_SIZE`` wherever it is set, but for
        the literal fallback of a run without the launch (:meth:`_launch_fallback`)."""
        sources = self.sources(expr)
        read = [s for s in sources if not isinstance(s, LaunchIndex) and self.env_read(s) in ("RANK", "WORLD_SIZE")]
        return bool(read) and all(s in read or self._launch_fallback(s) for s in sources)

    def _launch_fallback(self, source: object) -> bool:
        """Whether a source is a literal rank 0 or world size 1 set only where the launch's environment is
        absent: in the ``else`` of ``if "RANK" in os.environ ...:`` (or under ``if "RANK" not in os.environ:``),
        as reference scripts' ``init_distributed_mode`` falls back to one process."""
        if not isinstance(source, cst.Integer) or int_value(source) not in (0, 1):
            return False
        analysis = self.analysis
        child: cst.CSTNode = source
        for ancestor in analysis.ancestors(source):
            if isinstance(ancestor, cst.FunctionDef):
                return False
            if isinstance(ancestor, cst.If) and child is not ancestor.test:
                present = self._launch_present(ancestor.test)
                if present is not None:
                    return (child is ancestor.body) != present
            child = ancestor
        return False

    def _launch_present(self, test: cst.BaseExpression) -> bool | None:
        """``True`` for a test that the launch's environment is there (``"RANK" in os.environ``, several joined
        by ``and``), ``False`` for one that it is absent (``"RANK" not in os.environ``, joined by ``or``);
        ``None`` for any other test."""
        if isinstance(test, cst.BooleanOperation):
            left, right = self._launch_present(test.left), self._launch_present(test.right)
            wanted = isinstance(test.operator, cst.And)  # (``and`` of presences, ``or`` of absences)
            return left if left is not None and left == right == wanted else None
        if not (isinstance(test, cst.Comparison) and len(test.comparisons) == 1):
            return None
        operator, environ = test.comparisons[0].operator, test.comparisons[0].comparator
        if not (string_value(test.left) in LAUNCH_VARIABLES and isinstance(environ, (cst.Name, cst.Attribute))):
            return None
        if not self.analysis.qualified_names(environ) & OS_ENVIRON or not isinstance(operator, (cst.In, cst.NotIn)):
            return None
        return isinstance(operator, cst.In)

    @cached_property
    def world_size_sources(self) -> list[cst.BaseExpression]:
        """Process counts (a literal, ``torch.cuda.device_count()``) that reach ``init_process_group``'s
        world size by plain copies: the legacy world size that torchrun's ``WORLD_SIZE`` replaces."""
        found: list[cst.BaseExpression] = []
        for call in self.explicit_inits:
            size = argument(call, INIT_PARAMETERS, "world_size")
            if size is None:
                continue
            for source in self.sources(size.value):
                if isinstance(source, cst.BaseExpression) and self.is_process_count(source) and source not in found:
                    found.append(source)
        return found

    @cached_property
    def own_world_size_sources(self) -> list[cst.BaseExpression]:
        """The process counts written in this module that reach the world size of an ``init_process_group``
        in any module of the program (``mp.spawn(main, args=(2,))`` in the entry, the group made by a helper
        module's ``setup(rank, world_size)``): a fix rewrites and reports its own module only."""
        return [source for source in self.program_world_size_sources if self.analysis.owns(source)]

    @cached_property
    def program_world_size_sources(self) -> list[cst.BaseExpression]:
        """The :attr:`world_size_sources` of every module of the program, in module order."""
        found = dict.fromkeys(
            source for analysis in self.analysis.shared.analyses for source in legacy_facts(analysis).world_size_sources
        )
        return list(found)

    def process_count_sources(self, launch: Launch) -> list[cst.BaseExpression]:
        """Literal or GPU-count values that the launch's process count is a copy of."""
        if launch.nprocs is None or not isinstance(launch.nprocs, (cst.Name, cst.Attribute)):
            return []
        return [s for s in self.sources(launch.nprocs) if isinstance(s, cst.BaseExpression) and self.is_process_count(s) and s is not launch.nprocs]

    # ---------------------------------------------------------------------------------- argparse

    @cached_property
    def options(self) -> list[Option]:
        """Every ``parser.add_argument("--flag", ...)`` with its destination."""
        found = []
        for call in self.analysis.method_calls("add_argument"):
            flags = []
            for arg in call.args:
                if arg.keyword is not None or arg.star:
                    break
                value = string_value(arg.value)
                if value is None:
                    break
                flags.append(value)
            if not flags:
                continue
            dest_arg = next((a for a in call.args if a.keyword is not None and a.keyword.value == "dest"), None)
            dest = string_value(dest_arg.value) if dest_arg is not None else None
            if dest is None:
                long = [f for f in flags if f.startswith("--")]
                dest = (long[0] if long else flags[0]).lstrip("-").replace("-", "_")
            found.append(Option(call, tuple(flags), dest))
        return found

    @cached_property
    def local_rank_options(self) -> list[Option]:
        """The ``--local_rank`` / ``--local-rank`` options ``torch.distributed.launch`` used to fill."""
        return [o for o in self.options if o.dest == LOCAL_RANK_DEST or set(o.flags) & set(LOCAL_RANK_OPTIONS)]

    @cached_property
    def program_local_rank_options(self) -> list[tuple[LegacyFacts, Option]]:
        """The local-rank options of every module of the program, each with the facts of its own module
        (this module's first): a helper module reads ``args.local_rank`` of the entry's parser
        (``init_distributed_mode(args)`` in utils.py)."""
        found = [(self, option) for option in self.local_rank_options]
        for module in self.analysis.shared.analyses:
            if module is not self.analysis:
                facts = legacy_facts(module)
                found.extend((facts, option) for option in facts.local_rank_options)
        return found

    @cached_property
    def local_rank_dests(self) -> frozenset[str]:
        """Destinations of the local-rank options (``local_rank``)."""
        return frozenset(o.dest for o in self.local_rank_options)

    @cached_property
    def imported_names(self) -> frozenset[str]:
        """Names bound by an import anywhere in the file (``runtime``, ``os``, ``dist``): the index's import
        tables, of the module and of every function."""
        return frozenset(name for table in self.analysis.index.imports.values() for name in table)

    def option_attributes(self, dest: str) -> list[cst.Attribute]:
        """``args.<dest>`` attribute nodes (reads and writes) on a namespace: not ``self``, not a module."""
        found = []
        for a in self.analysis.attributes:
            owner = dotted_name(a.value)
            if a.attr.value == dest and owner is not None and owner != "self" and owner.split(".")[0] not in self.imported_names:
                if not self._library_object(a.value, owner):
                    found.append(a)
        return found

    def _library_object(self, expr: cst.BaseExpression, name: str) -> bool:
        """Whether a name holds an object a library built (``job_env = submitit.JobEnvironment()``: its
        ``local_rank`` is the job's, read from its scheduler), not a namespace of options (``parser.parse_args()``,
        a function of the program)."""
        for value in self.analysis.flows_into(expr, name):
            if type(value) is not cst.Call or call_method_name(value) in ("parse_args", "parse_known_args"):  # type: ignore[arg-type]
                continue
            qualified = self.analysis.qualified_names(value.func)  # type: ignore[attr-defined]
            if qualified and all(q.split(".")[0] in self.imported_names and not q.startswith("argparse.") for q in qualified):
                return True
        return False

    def mentions_string(self, value: str, outside: Iterable[cst.CSTNode] = ()) -> bool:
        """Whether a string literal with this value appears outside the given nodes."""
        skip = list(outside)
        return any(
            string_value(s) == value and not any(self.analysis.is_inside(s, o) for o in skip) for s in self._strings
        )

    # ------------------------------------------------------------------------------------ helpers

    def device_choice(self, node: cst.BaseExpression, fallback: str = "cpu") -> cst.BaseExpression:
        """See :meth:`ScriptAnalysis.device_choice`."""
        return self.analysis.device_choice(node, fallback)


def legacy_facts(analysis: ScriptAnalysis) -> LegacyFacts:
    """The legacy facts of an analysed file, computed once and kept with the analysis (so they are freed with it)."""
    return analysis.derived("legacy", LegacyFacts)


def target_nodes(target: cst.CSTNode) -> Iterator[cst.CSTNode]:
    """The names, attributes and subscripts an assignment target binds (through tuples and ``*rest``)."""
    if isinstance(target, (cst.Tuple, cst.List)):
        for element in target.elements:
            yield from target_nodes(element.value)
    elif isinstance(target, cst.StarredElement):
        yield from target_nodes(target.value)
    elif isinstance(target, (cst.Name, cst.Attribute, cst.Subscript)):
        yield target


def _is_expression_statement(statement: cst.BaseStatement, call: cst.Call) -> bool:
    return (
        isinstance(statement, cst.SimpleStatementLine)
        and len(statement.body) == 1
        and isinstance(statement.body[0], cst.Expr)
        and statement.body[0].value is call
    )


def _assigns(stmt: cst.BaseStatement, name: str) -> bool:
    """Whether the statement is ``name = ...``."""
    small = stmt.body[0] if isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 else None
    return isinstance(small, cst.Assign) and len(small.targets) == 1 and dotted_name(small.targets[0].target) == name


def _is_method_call_on(stmt: cst.BaseStatement, method: str, receiver: str) -> bool:
    if not (isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 and isinstance(stmt.body[0], cst.Expr)):
        return False
    call = stmt.body[0].value
    return isinstance(call, cst.Call) and call_method_name(call) == method and dotted_name(call.func.value) == receiver  # type: ignore[union-attr]


def _passed_arguments(args: cst.BaseExpression | None) -> tuple[cst.Arg, ...]:
    """The arguments a launch's ``args=`` hands each process: the tuple's items, or ``*args``."""
    if args is None:
        return ()
    if isinstance(args, (cst.Tuple, cst.List)):
        return tuple(
            cst.Arg(e.value, star="*") if isinstance(e, cst.StarredElement) else cst.Arg(e.value) for e in args.elements
        )
    return (cst.Arg(args, star="*"),)


def _tuple_elements(expr: cst.BaseExpression) -> list[cst.BaseExpression] | None:
    if isinstance(expr, (cst.Tuple, cst.List)) and not any(isinstance(e, cst.StarredElement) for e in expr.elements):
        return [e.value for e in expr.elements]
    return None


def _range_bound(expr: cst.BaseExpression) -> cst.BaseExpression | None:
    """``N`` in ``range(N)`` or ``range(0, N)``."""
    if not (isinstance(expr, cst.Call) and isinstance(expr.func, cst.Name) and expr.func.value == "range"):
        return None
    if len(expr.args) == 1:
        return expr.args[0].value
    if len(expr.args) == 2 and int_value(expr.args[0].value) == 0:
        return expr.args[1].value
    return None


def _parameter(function: cst.FunctionDef, name: str) -> cst.Param | None:
    p = function.params
    return next((param for param in (*p.posonly_params, *p.params, *p.kwonly_params) if param.name.value == name), None)


__all__ = [
    "LAUNCH_VARIABLES",
    "RENDEZVOUS_VARIABLES",
    "Launch",
    "LaunchIndex",
    "LegacyFacts",
    "Option",
    "argument",
    "int_value",
    "legacy_facts",
    "string_value",
    "target_nodes",
]
