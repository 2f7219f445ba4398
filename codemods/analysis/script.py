"""The shared, once-per-file analysis of a training script that every rule reads.

It resolves libcst's metadata once (qualified names through any import alias, scopes, parents,
positions) and derives the facts the rules need: which calls go where, which names hold data loaders,
models and wrapped models (a small flow-insensitive data-flow over assignments, tuple returns, function
arguments and ``self`` attributes), which loops train and which loop is the epoch loop, where the entry
point is, and which statements sit under a rank guard.
"""

from __future__ import annotations

import builtins
import re
from dataclasses import dataclass
from functools import cached_property
from typing import (
    TYPE_CHECKING,
    Callable,
    Iterable,
    Iterator,
    Mapping,
    Sequence,
    TypeVar,
    Union,
)

import libcst as cst

from .. import names
from . import positions, tree
from .positions import Span

if TYPE_CHECKING:
    from ..base import Options

T = TypeVar("T")
Scope = Union[cst.Module, cst.FunctionDef, cst.ClassDef]
BindingKey = tuple[Scope, str]

#: Calls that hand back (a view of) their first argument: ``enumerate(loader)``, ``tqdm(loader)``.
ITERATION_WRAPPERS = frozenset({"enumerate", "iter", "tqdm", "trange", "zip", "reversed", "cycle"})
#: Methods that return the module they are called on, so ``model = model.to(device)`` keeps its identity.
SELF_RETURNING_METHODS = frozenset({"to", "cuda", "cpu", "float", "half", "double", "bfloat16", "train", "eval"})
#: Methods of a model that neither run nor train it: a wrap read only through them (on itself or its
#: ``.module``) is a copy kept to load or export weights (:attr:`ScriptAnalysis.untrained_wraps`).
_UNTRAINED_USES = frozenset(
    {"state_dict", "load_state_dict", "eval", "to", "cuda", "cpu", "float", "half", "double", "bfloat16", "requires_grad_"}
)
#: Functions that hand back the model inside a wrapper (``runtime.unwrap``, YOLO's ``de_parallel``).
UNWRAP_FUNCTIONS = frozenset({"unwrap", "de_parallel", "unwrap_model", "get_model"})
#: Attributes and methods that stay on the DDP wrapper (everything else goes through ``.module``).
WRAPPER_ATTRIBUTES = frozenset(
    {
        "forward",
        "__call__",
        "train",
        "eval",
        "parameters",
        "named_parameters",
        "buffers",
        "named_buffers",
        "children",
        "named_children",
        "modules",
        "named_modules",
        "to",
        "cuda",
        "cpu",
        "float",
        "half",
        "double",
        "bfloat16",
        "type",
        "zero_grad",
        "requires_grad_",
        "apply",
        "module",
        "no_sync",
        "join",
        "training",
        "register_comm_hook",
        "register_forward_hook",
        "register_forward_pre_hook",
        "register_full_backward_hook",
        "share_memory",
        "device_ids",
    }
)


@dataclass(frozen=True)
class LoaderLoop:
    """A ``for`` loop that iterates a data loader, and whether it trains (reaches ``backward()``)."""

    loop: cst.For
    loader_expr: cst.BaseExpression
    loader_calls: frozenset[cst.Call]
    trains: bool
    #: ``for a, b in zip(labeled, unlabeled)``: how each loader is spelled, where the loop iterates several.
    spellings: tuple[tuple[cst.Call, cst.BaseExpression], ...] = ()

    def expr_for(self, loader: cst.Call) -> cst.BaseExpression:
        """How the loop spells the loader it iterates (one of several zipped together, or the only one)."""
        return next((expr for call, expr in self.spellings if call is loader), self.loader_expr)


@dataclass(frozen=True)
class EpochLoop:
    """The loop around a training loop's iteration: where ``set_epoch`` belongs.

    ``loader_expr`` is how the loader is spelled where the epoch loop is (an argument at a call site when
    the inner loop is in another function).
    """

    loop: cst.For | cst.While
    loader_expr: cst.BaseExpression
    epoch_var: str | None


def dotted_name(node: cst.CSTNode | None) -> str | None:
    """``a.b.c`` for a chain of names and attributes; ``None`` for anything else."""
    # ``type() is``: libcst's classes are abstract base classes, for which a failed ``isinstance`` costs a
    # call into ``abc``; ``Name`` and ``Attribute`` have no subclasses. (The same on the other hot paths.)
    kind = type(node)
    if kind is cst.Name:
        return node.value  # type: ignore[union-attr]
    if kind is cst.Attribute:
        base = dotted_name(node.value)  # type: ignore[union-attr]
        return f"{base}.{node.attr.value}" if base else None  # type: ignore[union-attr]
    return None


def subscript_key(node: cst.CSTNode | None) -> str | None:
    """``"train"`` of ``loaders["train"]``: the key of a subscript by one string literal, else ``None``."""
    if type(node) is not cst.Subscript or len(node.slice) != 1:  # type: ignore[union-attr]
        return None
    index = node.slice[0].slice  # type: ignore[union-attr]
    key = index.value if type(index) is cst.Index else None
    if type(key) is cst.Integer:  # ``loaders[0]`` of a tuple or list written out
        return POSITION + str(key.evaluated_value)  # type: ignore[union-attr]
    if type(key) is not cst.SimpleString:
        return None
    text = key.evaluated_value  # type: ignore[union-attr]
    return text if isinstance(text, str) else None


def under_self_returning_calls(value: cst.BaseExpression) -> cst.BaseExpression:
    """The value under the self-returning methods called on it: ``net`` of ``net.to(device).train()``, the copying
    call of ``copy.deepcopy(model).eval().to(device)``."""
    while type(value) is cst.Call and call_method_name(value) in SELF_RETURNING_METHODS:  # type: ignore[arg-type]
        value = value.func.value  # type: ignore[attr-defined]
    return value


def _copied_names(value: cst.CSTNode) -> list[cst.CSTNode]:
    """The names and attributes a value copies: itself (``model``, ``model.module``), or either side of a
    conditional (``model.module if ddp else model``, ``ema or model``); none for anything computed."""
    kind = type(value)
    if kind is cst.Name or kind is cst.Attribute:
        return [value]
    if kind is cst.IfExp:
        return _copied_names(value.body) + _copied_names(value.orelse)  # type: ignore[attr-defined]
    if kind is cst.BooleanOperation:
        return _copied_names(value.left) + _copied_names(value.right)  # type: ignore[attr-defined]
    return []


def _class_parameter(function: cst.FunctionDef) -> str | None:
    """The name a classmethod takes its class by (``cls`` of ``@classmethod def from_config(cls, config)``);
    ``None`` for any other function."""
    if not function.params.params or not any(dotted_name(d.decorator) == "classmethod" for d in function.decorators):
        return None
    return function.params.params[0].name.value


def _names_stored_into_by_key(analysis: "ScriptAnalysis") -> frozenset[str]:
    """The plain names the module stores items into (``HOOKS[key] = ...``), read once per module."""
    return frozenset(
        target.value.value  # type: ignore[attr-defined]
        for assign in analysis.assignments
        for target in _assign_targets(assign)
        if type(target) is cst.Subscript and type(target.value) is cst.Name  # type: ignore[attr-defined]
    )


def _is_a_method(function: cst.FunctionDef) -> bool:
    """Whether a function takes its object as ``self`` (a method of a class)."""
    return bool(function.params.params) and function.params.params[0].name.value == "self"


def _builds_its_class(function: cst.FunctionDef) -> bool:
    """Whether a classmethod returns an instance of the class it is called on (``return cls(config)`` in
    ``@classmethod def from_config(cls, config)``)."""
    first = _class_parameter(function)
    return first is not None and any(
        type(node) is cst.Return and type(node.value) is cst.Call and dotted_name(node.value.func) == first  # type: ignore[attr-defined]
        for node in walk(function.body)
    )


def item_name(node: cst.CSTNode | None) -> str | None:
    """``loaders['train']`` for a subscript of a dotted name by one string literal (the name under which the
    analysis binds what a dict holds at that key); ``None`` for anything else."""
    key = subscript_key(node)
    base = dotted_name(node.value) if key is not None else None  # type: ignore[union-attr]
    return f"{base}[{key!r}]" if base else None


def binding_name(node: cst.CSTNode | None) -> str | None:
    """The name under which the analysis binds what an expression reads: a dotted name (``args.device``) or
    an item of one by a string literal (``cfg['device']``, :func:`item_name`); ``None`` for anything else."""
    return dotted_name(node) or item_name(node)  # type: ignore[arg-type]


def literal_dict_items(expr: cst.BaseExpression) -> list[tuple[str, cst.BaseExpression]] | None:
    """The (key, value) pairs of a dict written out with string keys (``{"train": a}``, ``dict(train=a)``);
    ``None`` for any other expression, or a dict with another kind of key or an unpacked one."""
    if type(expr) is cst.Dict:
        items = []
        for element in expr.elements:  # type: ignore[attr-defined]
            if type(element) is not cst.DictElement or type(element.key) is not cst.SimpleString:
                return None
            key = element.key.evaluated_value
            if not isinstance(key, str):
                return None
            items.append((key, element.value))
        return items
    if type(expr) is cst.Call and type(expr.func) is cst.Name and expr.func.value == "dict":  # type: ignore[attr-defined]
        items = []
        for arg in expr.args:  # type: ignore[attr-defined]
            if arg.keyword is None or arg.star:
                return None
            items.append((arg.keyword.value, arg.value))
        return items
    return None


#: The item key under which the analysis binds the elements of a list, tuple or set, and the prefix of the
#: keys of its positions (``"\x000"`` for ``x[0]``): no string key of a dict written in a program.
ELEMENTS = "\x00*"
POSITION = "\x00"
#: Methods that move a list's items to other positions.
REORDERING_METHODS = frozenset({"insert", "pop", "remove", "reverse", "sort", "clear"})
#: Builtins that hand back a new container with the items of the one they are given.
COPYING_BUILTINS = frozenset({"list", "tuple", "set", "sorted", "dict"})
#: Containers of layers built from a list of them.
MODULE_LISTS = frozenset({"torch.nn.ModuleList", "torch.nn.modules.container.ModuleList"})


def name_root(name: str) -> str:
    """``loaders`` of ``loaders.train``, ``loaders['train']``."""
    return name.split(".", 1)[0].split("[", 1)[0]


def call_method_name(call: cst.Call) -> str | None:
    """The method name of ``x.method(...)``; ``None`` if the call is not a method call."""
    func = call.func
    return func.attr.value if type(func) is cst.Attribute else None  # type: ignore[attr-defined]


def callee_name(call: cst.Call) -> str:
    """The last name of what a call calls: ``tqdm`` for ``tqdm.tqdm(...)`` and ``tqdm(...)``."""
    func = call.func
    return func.value if isinstance(func, cst.Name) else func.attr.value if isinstance(func, cst.Attribute) else ""


def wrapper_inside(expr: cst.BaseExpression, name: str) -> cst.Call | None:
    """The ``name(...)`` call (one of :data:`ITERATION_WRAPPERS`: ``zip``, ``cycle``) among the wrappers a loop's
    iterable is made of (``enumerate(zip(a, b))``), if any."""
    while isinstance(expr, cst.Call) and expr.args and callee_name(expr) in ITERATION_WRAPPERS:
        if callee_name(expr) == name:
            return expr
        expr = expr.args[0].value
    return None


def _zip_inside(expr: cst.BaseExpression) -> cst.Call | None:
    """The ``zip(...)`` of several iterables a loop iterates under ``enumerate``/``tqdm`` and the like, if any."""
    zipped = wrapper_inside(expr, "zip")
    return zipped if zipped is not None and len(zipped.args) > 1 and not any(arg.star for arg in zipped.args) else None


def unwrap_iterable(expr: cst.BaseExpression) -> cst.BaseExpression:
    """Strip ``enumerate(...)``, ``tqdm(...)``, ``iter(...)`` and the like off the iterated expression, and a
    generator expression that filters what it iterates (``(b for b in loader if len(b[0]) == 8)``)."""
    while True:
        if isinstance(expr, cst.Call) and expr.args and callee_name(expr) in ITERATION_WRAPPERS:
            expr = expr.args[0].value
        elif isinstance(expr, cst.GeneratorExp) and expr.for_in.inner_for_in is None and isinstance(expr.for_in.target, cst.Name) and isinstance(expr.elt, cst.Name) and expr.elt.value == expr.for_in.target.value:
            expr = expr.for_in.iter
        else:
            return expr


def _canonical_module(qualified: str) -> str:
    """The qualified name an import binds: the vendored runtime (``ddp_runtime``, written beside a program
    migrated with ``--runtime vendor``) is the runtime package itself."""
    if qualified == names.VENDORED_RUNTIME or qualified.startswith(names.VENDORED_RUNTIME + "."):
        return names.RUNTIME_MODULE + qualified[len(names.VENDORED_RUNTIME):]
    return qualified


def names_an_optimizer(name: str | None) -> bool:
    """Whether a (dotted) name says it holds an optimizer (``optimizer``, ``self.optim``, ``optimizerG``: its last part
    spells ``optim``): what the analysis takes for one where it sees no construction."""
    return name is not None and "optim" in name.split(".")[-1].lower()


def backward_loss(call: cst.Call) -> cst.BaseExpression:
    """The loss a backward call (:attr:`ScriptAnalysis.backward_calls`) runs the backward pass on: the receiver
    of ``loss.backward()``, the first argument of a call that runs it out of sight (``loss_scaler(loss,
    optimizer)``)."""
    if type(call.func) is cst.Attribute and call.func.attr.value == "backward":  # type: ignore[attr-defined]
        return call.func.value  # type: ignore[attr-defined]
    return call.args[0].value


def import_binding(module: str, asname: str | None) -> tuple[str, str]:
    """The local name ``import module [as asname]`` binds, and the qualified name it then holds (``import
    torch.distributed as dist``: ``dist``, ``torch.distributed``; ``import torch.distributed``: ``torch``, ``torch``)."""
    if asname is not None:
        return asname, _canonical_module(module)
    root = module.split(".")[0]
    return root, _canonical_module(root)


def from_import_binding(base: str, name: str, asname: str | None) -> tuple[str, str]:
    """The local name ``from base import name [as asname]`` binds, and the qualified name it then holds
    (``base``: the module, after the leading dots of a relative import)."""
    return asname or name, _canonical_module(f"{base}.{name}" if base and not base.endswith(".") else f"{base}{name}")


class _Indexer:
    """One walk over the module (:func:`tree.visit`) that collects the nodes the analysis works from, and
    the parent of every node."""

    def __init__(self) -> None:
        self.parents: dict[cst.CSTNode, cst.CSTNode] = {}
        self.calls: list[cst.Call] = []
        self.for_loops: list[cst.For] = []
        self.comp_fors: list[cst.CompFor] = []
        self.functions: list[cst.FunctionDef] = []
        self.classes: list[cst.ClassDef] = []
        self.assigns: list[cst.Assign | cst.AnnAssign] = []
        self.returns: list[cst.Return] = []
        self.yields: list[cst.Yield] = []
        #: ``global`` and ``nonlocal`` statements: the names they declare are not the function's own.
        self.declarations: list[cst.Global | cst.Nonlocal] = []
        self.ifs: list[cst.If] = []
        self.attributes: list[cst.Attribute] = []
        self.name_values: set[str] = set()
        #: ``{scope: {local name: {qualified names}}}`` for every import; the scope is the function the
        #: import sits in, or ``None`` for the module.
        self.imports: dict[cst.FunctionDef | None, dict[str, set[str]]] = {}
        self._functions: list[cst.FunctionDef] = []

    def visit_Attribute(self, node: cst.Attribute) -> None:
        self.attributes.append(node)

    def visit_Call(self, node: cst.Call) -> None:
        self.calls.append(node)

    def visit_For(self, node: cst.For) -> None:
        self.for_loops.append(node)

    def visit_CompFor(self, node: cst.CompFor) -> None:
        self.comp_fors.append(node)

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self.functions.append(node)
        self._functions.append(node)

    def leave_FunctionDef(self, original_node: cst.FunctionDef) -> None:
        self._functions.pop()

    def _bind_import(self, local: str, qualified: str) -> None:
        scope = self._functions[-1] if self._functions else None
        self.imports.setdefault(scope, {}).setdefault(local, set()).add(qualified)

    def visit_Import(self, node: cst.Import) -> None:
        for alias in node.names:
            asname = alias.asname.name.value if alias.asname is not None and isinstance(alias.asname.name, cst.Name) else None
            self._bind_import(*import_binding(dotted_name(alias.name) or "", asname))

    def visit_ImportFrom(self, node: cst.ImportFrom) -> None:
        if isinstance(node.names, cst.ImportStar):
            return
        base = "." * len(node.relative) + (dotted_name(node.module) or "" if node.module is not None else "")
        for alias in node.names:
            asname = alias.asname.name.value if alias.asname is not None and isinstance(alias.asname.name, cst.Name) else None
            self._bind_import(*from_import_binding(base, dotted_name(alias.name) or "", asname))

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        self.classes.append(node)

    def visit_Assign(self, node: cst.Assign) -> None:
        self.assigns.append(node)

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        if node.value is not None:
            self.assigns.append(node)

    def visit_Return(self, node: cst.Return) -> None:
        self.returns.append(node)

    def visit_Yield(self, node: cst.Yield) -> None:
        self.yields.append(node)

    def visit_Global(self, node: cst.Global) -> None:
        self.declarations.append(node)

    def visit_Nonlocal(self, node: cst.Nonlocal) -> None:
        self.declarations.append(node)

    def visit_If(self, node: cst.If) -> None:
        self.ifs.append(node)

    def visit_Name(self, node: cst.Name) -> None:
        self.name_values.add(node.value)


class SharedFlow:
    """The binding model of one program: parents, call targets and value origins of all its modules.

    Every module of a program is a :class:`ScriptAnalysis` that reads and writes these same tables, so a
    value follows calls, returns, attributes and imports from one module into another. A lone script is a
    program of one module.
    """

    def __init__(self) -> None:
        self.analyses: list[ScriptAnalysis] = []
        self.by_name: dict[str, ScriptAnalysis] = {}
        self.by_module: dict[cst.Module, ScriptAnalysis] = {}
        self.parents: dict[cst.CSTNode, cst.CSTNode] = {}
        self.call_targets: dict[cst.Call, cst.FunctionDef] = {}
        self.constructed: dict[cst.Call, cst.ClassDef] = {}
        #: The other classes a call may build (``HOOKS[name]()`` of a registry of several classes), beyond
        #: :attr:`constructed`'s.
        self.constructed_too: dict[cst.Call, list[cst.ClassDef]] = {}
        self.bindings: dict[BindingKey, set[cst.CSTNode]] = {}
        self.returned: dict[cst.FunctionDef, list[set[cst.CSTNode]]] = {}
        #: What the dicts a function returns hold at each string key (``return {"train": loader}``).
        self.returned_items: dict[cst.FunctionDef, dict[str, set[cst.CSTNode]]] = {}
        #: A method call's targets besides its first (:meth:`ScriptAnalysis.call_target`) where the receiver
        #: may hold instances of several classes of the program (a list of callbacks): their parameters
        #: take its arguments too.
        self.other_targets: dict[cst.Call, list[cst.FunctionDef]] = {}
        #: The string keys written into the dict a binding holds (``loaders["train"] = ...``, a literal); the
        #: key ``"*"`` stands for the elements of a list, tuple or set (``callbacks = [Saver()]``).
        self.item_keys: dict[BindingKey, set[str]] = {}
        #: The names (their roots) of those bindings: a quick test before a binding's key is looked for.
        self.item_roots: set[str] = set()
        #: The calls that construct each class of the program, and the attribute names its methods store on
        #: ``self`` (``self.model = ...``): read by :meth:`solve` once the call targets are known.
        self.instances: dict[cst.ClassDef, list[cst.Call]] = {}
        self.stored_on_self: frozenset[str] = frozenset()
        #: For each class of the program, the classes of the program derived from it (directly or not).
        self._subclasses: dict[cst.ClassDef, list[cst.ClassDef]] | None = None
        self._ancestors: dict[cst.ClassDef, list[cst.ClassDef]] | None = None
        self._stepped: frozenset[cst.CSTNode] | None = None
        self._called: frozenset[str] | None = None
        self._set_later: frozenset[str] | None = None
        self._returns_of: dict[cst.FunctionDef, list[cst.Return]] = {}
        self._returned_values: dict[cst.FunctionDef, list[cst.BaseExpression]] = {}

    def returns(self, function: cst.FunctionDef) -> list[cst.Return]:
        """The function's own ``return`` statements (:func:`returns_of`), read once per program: the
        analyses and rules ask for a helper's returns at every call of it."""
        found = self._returns_of.get(function)
        if found is None:
            found = self._returns_of[function] = returns_of(function)
        return found

    def returned_values(self, function: cst.FunctionDef) -> list[cst.BaseExpression]:
        """What the function's own ``return`` statements return (:meth:`returns`, a bare ``return`` left out)."""
        found = self._returned_values.get(function)
        if found is None:
            found = self._returned_values[function] = [r.value for r in self.returns(function) if r.value is not None]
        return found

    def add(self, analysis: ScriptAnalysis) -> None:
        """Register a module of the program."""
        self.analyses.append(analysis)
        self.by_name[analysis.module_name] = analysis
        for alias in analysis.aliases:
            self.by_name.setdefault(alias, analysis)
        self.by_module[analysis.module] = analysis
        self.parents.update(analysis.index.parents)

    def solve(self) -> None:
        """Resolve call targets and propagate origins through every module until nothing changes."""
        for analysis in self.analyses:
            analysis._keys.clear()  # keys found before every module of the program was added
            analysis._resolve_call_targets()
        for analysis in self.analyses:
            analysis._bind_definitions()
        self.instances = {}
        for call, built in self.constructed.items():
            self.instances.setdefault(built, []).append(call)
        self.stored_on_self = frozenset(
            node.attr.value  # type: ignore[attr-defined]
            for analysis in self.analyses
            for assign in analysis.assignments
            for target in _assign_targets(assign)
            for node in analysis.nodes_below(target)
            if type(node) is cst.Attribute and type(node.value) is cst.Name and node.value.value == "self"  # type: ignore[attr-defined]
        )
        for _ in range(12):
            changed = False
            for analysis in self.analyses:
                changed |= analysis._propagate()
            if not changed:
                break

    def attributes_set_after_construction(self) -> frozenset[str]:
        """The attribute names the program assigns (``=``, ``+=``) outside every ``__init__``: ``self.calls +=
        1`` in a ``forward()``, ``model.use_aux = epoch >= 1`` in a training loop. An attribute of a model that
        is only set where the model is built is one of its settings, the same on every step."""
        if self._set_later is None:
            found: set[str] = set()
            for analysis in self.analyses:
                for node in analysis.index.preorder:  # (every node but layout: no assignment is left out)
                    kind = type(node)
                    if kind is cst.AugAssign:
                        targets = [node.target]  # type: ignore[attr-defined]
                    elif kind is cst.Assign:
                        targets = [t.target for t in node.targets]  # type: ignore[attr-defined]
                    elif kind is cst.AnnAssign:
                        targets = [node.target]  # type: ignore[attr-defined]
                    else:
                        continue
                    attributes = [n.attr.value for t in targets for n in tree.walk(t) if type(n) is cst.Attribute]  # type: ignore[attr-defined]
                    if attributes:
                        function = analysis.enclosing_function(node)
                        if function is None or function.name.value != "__init__":
                            found.update(attributes)
            self._set_later = frozenset(found)
        return self._set_later

    def called_names(self) -> frozenset[str]:
        """The dotted names the program calls (``model`` of ``model(x)``, ``self.net``)."""
        if self._called is None:
            self._called = frozenset(
                name for analysis in self.analyses for call in analysis.calls if (name := dotted_name(call.func)) is not None
            )
        return self._called

    def stepped_values(self) -> frozenset[cst.CSTNode]:
        """What the program steps: the origins of every ``x.step()`` receiver and of the arguments of those
        calls (``scaler.step(optimizer)``): the optimizers, whatever builds them, and schedulers."""
        if self._stepped is None:
            found: set[cst.CSTNode] = set()
            for analysis in self.analyses:
                for call in analysis.method_calls("step"):
                    found |= analysis.origins(call.func.value)  # type: ignore[attr-defined]
                    for arg in call.args:
                        found |= analysis.origins(arg.value)
            self._stepped = frozenset(found)
        return self._stepped

    def subclasses_of(self, owner: cst.ClassDef) -> list[cst.ClassDef]:
        """The classes of the program derived from the class, directly or through others of the program."""
        if self._subclasses is None:
            direct: dict[cst.ClassDef, list[cst.ClassDef]] = {}
            for analysis in self.analyses:
                for cls in analysis.classes:
                    for base in analysis.base_classes(cls):
                        direct.setdefault(base, []).append(cls)
            table: dict[cst.ClassDef, list[cst.ClassDef]] = {}
            for base in direct:
                found: list[cst.ClassDef] = []
                pending = list(direct[base])
                while pending:
                    cls = pending.pop(0)
                    if cls not in found and cls is not base:
                        found.append(cls)
                        pending.extend(direct.get(cls, ()))
                table[base] = found
            self._subclasses = table
        return self._subclasses.get(owner, [])

    def instances_of(self, owner: cst.ClassDef) -> list[cst.Call]:
        """The calls of the program that construct the class or a class derived from it (what its methods'
        ``self`` may be)."""
        found = self.instances.get(owner, [])
        for derived in self.subclasses_of(owner):
            found = found + self.instances.get(derived, [])
        return found

    def ancestors_of(self, owner: cst.ClassDef) -> list[cst.ClassDef]:
        """The class and the classes of the program it derives from, directly or not (nearest first)."""
        if self._ancestors is None:
            self._ancestors = {}
        found = self._ancestors.get(owner)
        if found is None:
            found, pending = [owner], [owner]
            while pending:
                current = pending.pop(0)
                home = self.analysis_of(current)
                for base in home.base_classes(current) if home is not None else []:
                    if base not in found:
                        found.append(base)
                        pending.append(base)
            self._ancestors[owner] = found
        return found

    def hierarchy_line(self, owner: cst.ClassDef) -> list[cst.ClassDef]:
        """The classes whose methods may run on the same object as a method of this class: the class, those
        it derives from and those derived from it (not its siblings): what their methods store on ``self``
        a method of this class may read."""
        return self.ancestors_of(owner) + [c for c in self.subclasses_of(owner) if c is not owner]

    def module_of(self, node: cst.CSTNode) -> cst.Module:
        """The module a node belongs to."""
        current = node
        while type(current) is not cst.Module:
            parent = self.parents.get(current)
            if parent is None:
                break
            current = parent
        return current  # type: ignore[return-value]

    def analysis_of(self, node: cst.CSTNode) -> ScriptAnalysis | None:
        """The analysis of the module a node belongs to."""
        return self.by_module.get(self.module_of(node))


def _default_options() -> Options:
    from ..base import (
        Options,  # the rules' settings; imported here to keep the analysis free of import order
    )

    return Options()


class ModuleIndex:
    """What one walk gives for a module: its nodes by kind, the parent of every node, its import table
    and (on first use) positions. Built once per module object and reused while the module is unchanged.

    Qualified names come from the import table (a few dictionary look-ups per name), not from libcst's
    scope analysis, which costs more than the parse itself.
    """

    def __init__(self, module: cst.Module, source: str | None = None, earlier: ModuleIndex | None = None) -> None:
        self.module = module
        #: ``earlier``: the index of the module this one was rewritten from, whose generated statements the
        #: generation of this one reuses (:class:`positions.Generated`); dropped once used.
        self._earlier = earlier.__dict__.get("generated") if earlier is not None else None
        self.nodes = _Indexer()
        #: Every node of the module in pre-order (source order), for the walks that come after this one;
        #: layout nodes (whitespace, newlines, comments) and dots are not indexed (:data:`tree.UNINDEXED_NODES`).
        self.preorder: list[cst.CSTNode] = []
        tree.visit(module, self.nodes, self.nodes.parents, self.preorder, tree.UNINDEXED_NODES)
        #: Whether one node object sits at two places of the tree (a fix that copied a subtree and kept
        #: the original): it has one parent in the index, so the module must be cloned before analysis.
        self.shares_nodes = len(self.preorder) != len(self.nodes.parents) + 1
        self.parents = self.nodes.parents
        self.imports = self.nodes.imports
        self.defined = {
            stmt.name.value for stmt in module.body if isinstance(stmt, (cst.FunctionDef, cst.ClassDef))
        } | {name for target in _module_targets(module) for name in _target_names(target)}
        self._qualified: dict[cst.CSTNode, frozenset[str]] = {}
        #: ``source``: the text the module was parsed from, unchanged since (spans one statement at a time).
        self._statement_spans = (
            positions.StatementSpans(module, source, self.parents, self.preorder) if source is not None and not self.shares_nodes else None
        )

    def below(self, node: cst.CSTNode) -> list[cst.CSTNode] | None:
        """The node and every indexed node below it (layout and dots left out), in pre-order: a slice of
        :attr:`preorder`, whose subtrees are ranges (found on first use, in one pass); ``None`` for a node this
        index does not hold."""
        places, ends = self._subtree_ranges
        start = places.get(node)
        return None if start is None else self.preorder[start : ends[start]]

    @cached_property
    def _subtree_ranges(self) -> tuple[dict[cst.CSTNode, int], list[int]]:
        """Where each node is in :attr:`preorder`, and where its subtree ends there (by the node's place):
        a node's subtree closes where the next node whose parent is not inside it comes."""
        preorder, parents = self.preorder, self.parents
        places: dict[cst.CSTNode, int] = {}
        ends = [len(preorder)] * len(preorder)
        open_places: list[int] = []
        for place, node in enumerate(preorder):
            places[node] = place
            parent = parents.get(node)
            while open_places and preorder[open_places[-1]] is not parent:
                ends[open_places.pop()] = place
            open_places.append(place)
        return places, ends

    def qualified_names(self, node: cst.CSTNode) -> frozenset[str]:
        """The qualified names a name or attribute chain may refer to: its root resolved through the
        imports of its function(s) and module (``nn.DataParallel`` → ``torch.nn.DataParallel``),
        ``builtins.X`` for a builtin the module does not rebind, else the dotted name itself."""
        cached = self._qualified.get(node)
        if cached is not None:
            return cached
        dotted = dotted_name(node)
        result: frozenset[str] = frozenset()
        if dotted is not None:
            root, _, rest = dotted.partition(".")
            found: set[str] | None = None
            current = self.parents.get(node)
            while current is not None:
                if type(current) is cst.FunctionDef:
                    found = self.imports.get(current, {}).get(root)
                    if found:
                        break
                current = self.parents.get(current)
            if not found:
                found = self.imports.get(None, {}).get(root)
            if found:
                result = frozenset(f"{q}.{rest}" if rest else q for q in found)
            elif root in _BUILTINS and root not in self.defined:
                result = frozenset({f"builtins.{dotted}"})
            else:
                result = frozenset({dotted})
        self._qualified[node] = result
        return result

    @cached_property
    def positions(self) -> Mapping[cst.CSTNode, Span]:
        """Start and end of every node, from one code generation pass over the whole module that also gives
        its code (:func:`positions.generate`)."""
        code, spans, self.generated = positions.generate(self.module, self._earlier, self.parents)
        self._earlier = None
        self.__dict__.setdefault("code", code)
        return spans

    @cached_property
    def code(self) -> str:
        """The module's source code, generated once (together with the positions, which most uses of a
        rewritten module need next)."""
        self.positions
        return self.__dict__["code"]

    def span(self, node: cst.CSTNode) -> Span:
        """Start and end of a node (resolved on first use: only reports and ordering need them). A module
        parsed from a source at hand generates only the statements around the nodes asked about
        (:class:`positions.StatementSpans`); any other module, the whole module once."""
        if self._statement_spans is not None and "positions" not in self.__dict__:
            found = self._statement_spans.span(node)
            if found is not None:
                return found
        return self.positions[node]


class ScriptAnalysis:
    """Facts about one parsed module of a program, computed once and shared by all rules.

    ``module_name`` is the module's dotted name in its project (``__main__`` for a lone script);
    ``is_entry`` whether the program starts here (a lone script is its own entry). ``shared`` is the
    program's binding model; without it the module is a program of its own.
    """

    def __init__(
        self,
        module: cst.Module,
        shared: SharedFlow | None = None,
        *,
        module_name: str = "__main__",
        is_entry: bool = True,
        index: ModuleIndex | None = None,
        is_package: bool = False,
        options: Options | None = None,
        aliases: tuple[str, ...] = (),
        shared_with_other_scripts: bool = False,
        program_out_of_sight: bool = False,
    ) -> None:
        #: The run's settings (the engine passes them; the runtime module fixes import from, for one).
        self.options = options if options is not None else _default_options()
        self.index = index if index is not None else ModuleIndex(module)
        self.module = module
        self.module_name = module_name
        #: Other dotted names the program may import the module by (:class:`ModuleInfo`).
        self.aliases = aliases
        self.is_entry = is_entry
        self.is_package = is_package
        #: A script outside the program imports the module too (:class:`ModuleInfo`).
        self.shared_with_other_scripts = shared_with_other_scripts
        #: The module is read alone, its program too large to analyse whole (:class:`ModuleInfo`).
        self.program_out_of_sight = program_out_of_sight
        index_nodes = self.index.nodes
        standalone = shared is None
        self.shared = shared if shared is not None else SharedFlow()
        self.shared.add(self)
        self._parents = self.shared.parents
        self.calls = index_nodes.calls
        self.for_loops = index_nodes.for_loops
        self._comp_fors = index_nodes.comp_fors
        self.functions = index_nodes.functions
        self.classes = index_nodes.classes
        self.assignments = index_nodes.assigns
        self._returns = index_nodes.returns
        self._declarations = index_nodes.declarations
        self.ifs = index_nodes.ifs
        self.attributes = index_nodes.attributes
        self.used_names = index_nodes.name_values
        self._bindings = self.shared.bindings
        self._returned = self.shared.returned
        self._call_targets = self.shared.call_targets
        #: Binding keys found so far, by (node, name): :meth:`_key` (cleared when the program's solve starts).
        self._keys: dict[tuple[cst.CSTNode, str], BindingKey] = {}
        self._calls_to_found: dict[frozenset[str], tuple[cst.Call, ...]] = {}
        self._places_found: dict[cst.CSTNode, tuple[tuple[ScriptAnalysis, cst.CSTNode], ...]] = {}
        if standalone:
            self.shared.solve()

    def release(self) -> None:
        """Drop everything the analysis holds, and the program tables it shares, once nothing will ask it
        again. Its facts and the caches rules keep in it point back at it (reference cycles that would hold
        the whole syntax tree until the cyclic collector walked it, a tenth of a lint's time); dropped, the
        tree is freed as soon as the caller lets go. The analysis answers nothing afterwards."""
        shared = self.__dict__.get("shared")
        self.__dict__.clear()
        if shared is not None:
            for other in shared.analyses:
                other.__dict__.clear()
            shared.__dict__.clear()

    # ----------------------------------------------------------------- positions and structure

    @property
    def code(self) -> str:
        """The module's source code (generated at most once per analysed module)."""
        return self.index.code

    @property
    def preorder(self) -> list[cst.CSTNode]:
        """Every node of the module in source order (pre-order): the index's walk, kept, instead of another."""
        return self.index.preorder

    def nodes_below(self, node: cst.CSTNode) -> list[cst.CSTNode]:
        """The node and every node below it in pre-order, as :func:`walk` yields them but without layout
        (whitespace, comments) and dots: a slice of the index's walk for a node of this module (the nodes
        of another module's are walked)."""
        found = self.index.below(node)
        if found is None:
            found = [n for n in tree.walk(node) if type(n) not in tree.UNINDEXED_NODES]
        return found

    @cached_property
    def subscripts(self) -> list[cst.Subscript]:
        """Every subscript (``x[i]``) of the module, in source order."""
        return [node for node in self.index.preorder if type(node) is cst.Subscript]  # type: ignore[misc]

    def derived(self, key: str, build: Callable[[ScriptAnalysis], T]) -> T:
        """Facts derived from this analysis by a module above it (ranks, loaders, legacy launches), built on
        first use and stored on the analysis itself, so they live exactly as long as it does."""
        cache = self.__dict__.setdefault("_derived", {})
        if key not in cache:
            cache[key] = build(self)
        return cache[key]

    def owns(self, node: cst.CSTNode) -> bool:
        """Whether the node belongs to this module (not to another module of the program)."""
        return self.shared.module_of(node) is self.module

    def module_of(self, node: cst.CSTNode) -> cst.Module:
        """The module (of the program) a node belongs to."""
        return self.shared.module_of(node)

    def span(self, node: cst.CSTNode) -> tuple[tuple[int, int], tuple[int, int]]:
        """Start and end (line, column) of a node."""
        start_line, start_column, end_line, end_column = self.index.span(node)
        return (start_line, start_column), (end_line, end_column)

    def line(self, node: cst.CSTNode) -> int:
        """The 1-based line a node starts on."""
        return self.index.span(node)[0]

    def parent(self, node: cst.CSTNode) -> cst.CSTNode | None:
        """The node's parent, or ``None`` for the module (and for layout nodes and dots, which are not
        indexed: :data:`tree.UNINDEXED_NODES`)."""
        return self._parents.get(node)

    def ancestors(self, node: cst.CSTNode) -> Iterator[cst.CSTNode]:
        """The node's parents, nearest first."""
        current = self._parents.get(node)
        while current is not None:
            yield current
            current = self._parents.get(current)

    def statement(self, node: cst.CSTNode) -> cst.BaseStatement:
        """The statement (simple line or compound) that contains the node."""
        current: cst.CSTNode = node
        while not isinstance(current, (cst.SimpleStatementLine, cst.BaseCompoundStatement)):
            parent = self._parents.get(current)
            if parent is None:
                raise ValueError("node is not inside a statement")
            current = parent
        return current

    def nearest_loop(self, node: cst.CSTNode) -> cst.For | cst.While | None:
        """The innermost ``for`` or ``while`` loop that runs the node on each of its iterations, within the
        node's own function (or the module's top level); ``None`` when there is none."""
        for ancestor in self.ancestors(node):
            kind = type(ancestor)
            if kind is cst.For or kind is cst.While:
                return ancestor  # type: ignore[return-value]
            if kind is cst.FunctionDef or kind is cst.ClassDef or kind is cst.Lambda:
                return None
        return None

    def enclosing_function(self, node: cst.CSTNode) -> cst.FunctionDef | None:
        """The nearest function definition around the node."""
        parents = self._parents
        current = parents.get(node)
        while current is not None and type(current) is not cst.FunctionDef:
            current = parents.get(current)
        return current  # type: ignore[return-value]

    def enclosing_class(self, node: cst.CSTNode) -> cst.ClassDef | None:
        """The nearest class definition around the node."""
        return next((a for a in self.ancestors(node) if isinstance(a, cst.ClassDef)), None)

    def derives_from(self, cls: cst.ClassDef, bases: frozenset[str]) -> bool:
        """Whether a class of the program derives from one of the classes named (qualified names), through its
        bases: classes of the program are followed by their name, in any module of the program
        (``class ExponentialMovingAverage(AveragedModel)``, ``class Synthetic(Base)`` of a ``Base(IterableDataset)``)."""
        return self._derives(cls, lambda qualified: bool(qualified & bases), set())

    def copies_a_model(self, call: cst.Call) -> bool:
        """Whether the call makes a new model from the one it is given (:data:`names.MODEL_COPIES`:
        ``copy.deepcopy``, ``AveragedModel``), also through a class of the program derived from such a copy
        (torchvision's ``ExponentialMovingAverage(AveragedModel)``)."""
        if self.is_call_to(call, names.MODEL_COPIES):
            return True
        built = self.shared.constructed.get(call)
        return built is not None and self.derives_from(built, names.MODEL_COPIES)

    def _derives(self, cls: cst.ClassDef, named: Callable[[set[str]], bool], seen: set[cst.ClassDef]) -> bool:
        """Whether a base of the class, or of a class of the program it derives from, has qualified names ``named``
        accepts."""
        if cls in seen:
            return False
        seen.add(cls)
        home = self.shared.analysis_of(cls) or self
        for base in cls.bases:
            if named(home.qualified_names(base.value)):
                return True
            name = (dotted_name(base.value) or "").rsplit(".", 1)[-1]
            candidates = [c for module in self.shared.analyses for c in module.classes if c.name.value == name]
            if len(candidates) == 1 and self._derives(candidates[0], named, seen):
                return True
        return False

    def runs_in_a_data_set(self, node: cst.CSTNode, depth: int = 3) -> bool:
        """Whether the node runs in a method of a data set class (one that defines ``__getitem__`` or
        ``__iter__``, or derives from such a class of the program), or in a function only such methods call
        (``depth`` calls up): code a ``DataLoader``'s worker processes may run, where CUDA cannot be used."""
        function = self.enclosing_function(node)
        if function is None:
            return False
        cls = self.enclosing_class(function)
        if cls is not None and self._is_data_set_class(cls):
            return True
        callers = self.callers_in_program(function) if depth > 0 else []
        return bool(callers) and all((self.shared.analysis_of(c) or self).runs_in_a_data_set(c, depth - 1) for c in callers)

    def _is_data_set_class(self, cls: cst.ClassDef) -> bool:
        """Whether a class of the program is a data set: it, or a class of the program it derives from, defines
        ``__getitem__`` or ``__iter__``."""
        for ancestor in self.shared.ancestors_of(cls):
            for statement in ancestor.body.body:
                if type(statement) is cst.FunctionDef and statement.name.value in ("__getitem__", "__iter__"):
                    return True
        return False

    def scope_of(self, node: cst.CSTNode) -> Scope:
        """The function around the node, or its module."""
        return self.enclosing_function(node) or self.module_of(node)

    def is_inside(self, node: cst.CSTNode, container: cst.CSTNode) -> bool:
        """Whether ``container`` is the node or one of its ancestors."""
        return node is container or any(a is container for a in self.ancestors(node))

    def comes_before(self, first: cst.CSTNode, second: cst.CSTNode) -> bool:
        """Whether ``first`` starts before ``second`` in the file (``False`` for nodes of two modules)."""
        if not (self.owns(first) and self.owns(second)):
            return False
        return self.index.span(first)[:2] < self.index.span(second)[:2]

    # ------------------------------------------------------------------------ names

    def qualified_names(self, node: cst.CSTNode) -> frozenset[str]:
        """Qualified names of a name or attribute, through import aliases (``nn.DataParallel`` →
        ``torch.nn.DataParallel``)."""
        if len(self.shared.analyses) > 1 and not self.owns(node):
            owner = self.shared.analysis_of(node)
            return owner.qualified_names(node) if owner is not None else frozenset()
        return self.index.qualified_names(node)

    def is_call_to(self, call: cst.Call, targets: Iterable[str]) -> bool:
        """Whether the call's function resolves to one of the qualified names."""
        return not self.qualified_names(call.func).isdisjoint(targets)

    def calls_to(self, targets: Iterable[str]) -> list[cst.Call]:
        """Every call in the file to one of the qualified names, in source order."""
        wanted = frozenset(targets)
        found = self._calls_to_found.get(wanted)
        if found is None:  # (asked again and again by rules, each a walk over every call of the file)
            found = self._calls_to_found[wanted] = tuple(call for call in self.calls if self.is_call_to(call, wanted))
        return list(found)

    def method_calls(self, method: str) -> list[cst.Call]:
        """Every ``x.method(...)`` call in the file."""
        return [call for call in self.calls if call_method_name(call) == method]

    def program_method_calls(self, method: str) -> list[cst.Call]:
        """Every ``x.method(...)`` call in every module of the program."""
        return [call for analysis in self.shared.analyses for call in analysis.method_calls(method)]

    def _top_level_imports(self) -> Iterator[cst.Import | cst.ImportFrom]:
        for stmt in self.module.body:
            if isinstance(stmt, cst.SimpleStatementLine):
                yield from (s for s in stmt.body if isinstance(s, (cst.Import, cst.ImportFrom)))

    def local_name_for(self, qualified: str) -> str | None:
        """How the file spells an imported qualified name (``DDP`` for ``from ... import X as DDP``)."""
        module, _, attr = qualified.rpartition(".")
        for small in self._top_level_imports():
            if isinstance(small, cst.ImportFrom) and not isinstance(small.names, cst.ImportStar):
                if dotted_name(small.module) != module or small.relative:
                    continue
                for alias in small.names:
                    if dotted_name(alias.name) == attr:
                        return alias.asname.name.value if alias.asname else attr  # type: ignore[union-attr]
            elif isinstance(small, cst.Import):
                for alias in small.names:
                    if dotted_name(alias.name) == qualified and alias.asname:
                        return alias.asname.name.value  # type: ignore[union-attr]
        return None

    def free_name(self, preferred: str, *fallbacks: str, taken: Iterable[str] = ()) -> str:
        """A name not used anywhere in the file, so a new variable never shadows the script's own, nor one in
        ``taken`` (the names a fix has already given out: two loaders' data sets in one pass)."""
        used = self.used_names | set(taken)
        for candidate in (preferred, *fallbacks):
            if candidate not in used:
                return candidate
        suffix = 2
        while f"{preferred}_{suffix}" in used:
            suffix += 1
        return f"{preferred}_{suffix}"

    @cached_property
    def runtime_import(self) -> tuple[str, str] | None:
        """The module the file already imports the runtime from at top level (``ddp_migrate.runtime`` or
        the vendored ``ddp_runtime``) and the local name it binds, or ``None``."""
        existing = self.local_name_for(names.RUNTIME_MODULE)
        if existing:
            return names.RUNTIME_MODULE, existing
        for small in self._top_level_imports():
            if isinstance(small, cst.Import):
                for alias in small.names:
                    if dotted_name(alias.name) == names.VENDORED_RUNTIME:
                        local = alias.asname.name.value if alias.asname else names.VENDORED_RUNTIME  # type: ignore[union-attr]
                        return names.VENDORED_RUNTIME, local
        return None

    @cached_property
    def runtime_alias(self) -> str:
        """The name under which this file reaches the runtime (existing import of either spelling, or a free
        name)."""
        existing = self.runtime_import
        if existing:
            return existing[1]
        return self.free_name("runtime", "ddp_runtime", "dist_runtime")

    # -------------------------------------------------------------------- data flow

    def _key(self, scope_node: cst.CSTNode, name: str) -> BindingKey:
        """The binding key for a dotted name used at a node: ``self.x`` belongs to the class, a local to its
        function, a global to its module, and a name imported from a module of the program to that module
        (``from data import loader`` and ``data.loader`` are the same binding). Found once per node and name
        (every round of :meth:`SharedFlow.solve` asks again)."""
        found = self._keys.get((scope_node, name))
        if found is None:
            found = self._keys[(scope_node, name)] = self._find_key(scope_node, name)
        return found

    def _find_key(self, scope_node: cst.CSTNode, name: str) -> BindingKey:
        function = scope_node if isinstance(scope_node, cst.FunctionDef) else self.enclosing_function(scope_node)
        if name.startswith("self."):
            owner = self.enclosing_class(function) if function is not None else None
            if owner is not None:
                return (owner, name)
        if "." not in name.split("[", 1)[0]:
            # A plain name (or an item of one: ``cfg["a.b"]``) lives in the innermost function that binds it (a closure reads its enclosing
            # function's variable); an attribute of anything but ``self`` (``args.lr``, ``cfg.batch_size``)
            # is one object across the module, however it is handed from function to function.
            while function is not None:
                if self.binds_locally(function, name):
                    return (function, name)
                function = self.enclosing_function(function)
        module = self.module_of(scope_node) if not isinstance(scope_node, cst.Module) else scope_node
        home = self.shared.by_module.get(module, self)
        return home._global_key(name)

    def _global_key(self, name: str, depth: int = 0) -> BindingKey:
        """The key of a module-level name of this module, following imports of the program's modules."""
        root, _, rest = name.partition(".")
        target = self.local_imports.get(root)
        if target is not None and depth < 8:
            module_name, symbol = target
            other = self.shared.by_name.get(module_name)
            if other is not None:
                if symbol is None:
                    if rest:
                        return other._global_key(rest, depth + 1)
                else:
                    return other._global_key(f"{symbol}.{rest}" if rest else symbol, depth + 1)
        return (self.module, name)

    @cached_property
    def local_imports(self) -> dict[str, tuple[str, str | None]]:
        """Names this module binds by importing a module of its program: ``{local: (module, symbol)}``
        (``symbol`` is ``None`` when the name is the module itself). Relative imports are resolved
        against this module's package."""
        found: dict[str, tuple[str, str | None]] = {}
        known = self.shared.by_name
        if len(known) <= 1:
            return found
        for node in self.index.preorder:
            if isinstance(node, cst.Import):
                for alias in node.names:
                    full = dotted_name(alias.name) or ""
                    if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
                        if full in known:
                            found[alias.asname.name.value] = (full, None)
                    elif full.split(".")[0] in known:
                        found[full.split(".")[0]] = (full.split(".")[0], None)
            elif isinstance(node, cst.ImportFrom) and isinstance(node.names, cst.ImportStar):
                # ``from .trainer import *`` in a package's ``__init__.py``: each name the module exports
                base = self.imported_from(node)
                if base in known:
                    own = self._top_level_names
                    for name in known[base].exported_names():
                        if name not in own:  # (a name the module binds itself is its own: ``model = Net()``)
                            found[name] = (base, name)
            elif isinstance(node, cst.ImportFrom):
                base = self.imported_from(node)
                for alias in node.names:
                    symbol = dotted_name(alias.name) or ""
                    local = alias.asname.name.value if alias.asname is not None and isinstance(alias.asname.name, cst.Name) else symbol
                    submodule = f"{base}.{symbol}" if base else symbol
                    if submodule in known:
                        found[local] = (submodule, None)
                    elif base in known:
                        found[local] = (base, symbol)
        return found

    @cached_property
    def _top_level_names(self) -> frozenset[str]:
        """The names the module's own top-level statements bind (not its imports), ``if``/``for``/``with`` blocks
        there included."""
        bound: set[str] = set()
        for stmt in self.module.body:
            if isinstance(stmt, cst.SimpleStatementLine) and all(isinstance(s, (cst.Import, cst.ImportFrom)) for s in stmt.body):
                continue
            if isinstance(stmt, (cst.FunctionDef, cst.ClassDef)):
                bound.add(stmt.name.value)
                continue
            bound |= self.names_bound_in(stmt)
        return frozenset(bound)

    def exported_names(self, seen: frozenset[str] = frozenset()) -> frozenset[str]:
        """The names ``from <this module> import *`` binds: those of ``__all__`` where the module spells it as a
        list or tuple of strings, else its public top-level names (its functions, classes, assigned names and
        imports, and what its own star imports of program modules bind). Kept once computed."""
        cached = self.__dict__.get("_exported_names")
        if cached is not None:
            return cached
        names: set[str] = set()
        listed: set[str] | None = None
        for stmt in self.module.body:
            if isinstance(stmt, (cst.FunctionDef, cst.ClassDef)):
                names.add(stmt.name.value)
            elif isinstance(stmt, cst.SimpleStatementLine):
                for small in stmt.body:
                    if isinstance(small, (cst.Assign, cst.AnnAssign)):
                        targets = [t.target for t in small.targets] if isinstance(small, cst.Assign) else [small.target]
                        for target in targets:
                            names.update(_target_names(target))
                            if dotted_name(target) == "__all__" and small.value is not None:
                                listed = _listed_strings(small.value)
                    elif isinstance(small, cst.Import):
                        names.update(
                            a.asname.name.value if a.asname is not None and isinstance(a.asname.name, cst.Name) else (dotted_name(a.name) or "").split(".")[0]
                            for a in small.names
                        )
                    elif isinstance(small, cst.ImportFrom) and not isinstance(small.names, cst.ImportStar):
                        names.update(
                            a.asname.name.value if a.asname is not None and isinstance(a.asname.name, cst.Name) else dotted_name(a.name) or ""
                            for a in small.names
                        )
                    elif isinstance(small, cst.ImportFrom):
                        base = self.imported_from(small)
                        other = self.shared.by_name.get(base)
                        if other is not None and base not in seen:
                            names.update(other.exported_names(seen | {self.module_name}))
        found = frozenset(listed if listed is not None else {n for n in names if n and not n.startswith("_")})
        if not seen:
            self.__dict__["_exported_names"] = found
        return found

    def imported_from(self, node: cst.ImportFrom) -> str:
        """The full name of the module a ``from ... import`` reads, relative imports resolved against this
        module's package (``from .data import x`` in ``pkg/train.py``: ``pkg.data``)."""
        base = dotted_name(node.module) if node.module is not None else ""
        if not node.relative:
            return base or ""
        package = self.module_name if self.is_package else self.module_name.rpartition(".")[0]
        parts = package.split(".") if package else []
        up = len(node.relative) - 1
        parts = parts[: len(parts) - up] if up else parts
        return ".".join([*parts, base] if base else parts)

    def imported_definition(self, name: str) -> cst.FunctionDef | cst.ClassDef | None:
        """The function or class of another module of the program that a name of this module imports."""
        target = self.local_imports.get(name.split(".")[0])
        if target is None:
            return None
        module_name, symbol = target
        other = self.shared.by_name.get(module_name)
        if other is None:
            return None
        rest = name.split(".")[1:]
        path = ([symbol] if symbol else []) + rest
        if len(path) != 1:
            return None
        return other.top_definitions.get(path[0]) or (other.imported_definition(path[0]) if other is not self else None)

    @cached_property
    def top_definitions(self) -> dict[str, cst.FunctionDef | cst.ClassDef]:
        """The functions and classes defined at this module's top level, by name."""
        return {
            stmt.name.value: stmt for stmt in self.module.body if isinstance(stmt, (cst.FunctionDef, cst.ClassDef))
        }

    @cached_property
    def _local_names(self) -> dict[cst.FunctionDef, set[str]]:
        """Names each function assigns or takes as parameters."""
        local: dict[cst.FunctionDef, set[str]] = {f: {p.name.value for p in all_parameters(f)} for f in self.functions}
        for assign in self.assignments:
            function = self.enclosing_function(assign)
            if function is not None:
                for target in _assign_targets(assign):
                    for name in _target_names(target):
                        local[function].add(name)
        for loop in self.for_loops:
            function = self.enclosing_function(loop)
            if function is not None:
                local[function].update(_target_names(loop.target))
        for function, definition in self._definitions:  # ``def step(x):`` inside ``make_train_step``
            if function is not None:
                local[function].add(definition.name.value)
        # ``global rank`` / ``nonlocal total``: what the function assigns to such a name is the module's (or
        # the enclosing function's) variable, not one of its own.
        for declaration in self._declarations:
            function = self.enclosing_function(declaration)
            if function is not None:
                local[function].difference_update(item.name.value for item in declaration.names)
        return local

    @cached_property
    def _definitions(self) -> list[tuple[cst.FunctionDef | None, cst.FunctionDef]]:
        """The functions this module defines as values of a name (not methods), each with the function it is
        defined in (``None``: the module's top level)."""
        found: list[tuple[cst.FunctionDef | None, cst.FunctionDef]] = []
        for definition in self.functions:
            scope = next((a for a in self.ancestors(definition) if type(a) is cst.FunctionDef or type(a) is cst.ClassDef), None)
            if type(scope) is not cst.ClassDef:
                found.append((scope, definition))  # type: ignore[arg-type]
        return found

    def _bind_definitions(self) -> None:
        """Bind each function of the module to its name, where it is defined: a value the flow carries like
        any other (``step = make_train_step(model)`` of a factory returning its nested ``step``, a function
        handed to an engine and stored in ``self.process_fn``), so a call of the name runs it."""
        for _, definition in self._definitions:
            self._bind(self._key(self.parent(definition), definition.name.value), {definition})  # type: ignore[arg-type]

    def binds_locally(self, function: cst.FunctionDef, name: str) -> bool:
        """Whether the function binds the name (the root of a dotted one) itself: assigns it, loops over it,
        defines it or takes it as a parameter (not a ``global`` or ``nonlocal`` of it)."""
        home = self if function in self._local_names else self.shared.analysis_of(function) or self
        return name_root(name) in home._local_names.get(function, set())

    def returned_origins(self, function: cst.FunctionDef) -> set[cst.CSTNode]:
        """The calls the values a function of the program returns may come from (any module)."""
        return set().union(*self._returned.get(function, []))

    def origins(self, expr: cst.BaseExpression) -> set[cst.CSTNode]:
        """The calls an expression's value may come from (``DataLoader(...)``, ``Net()``, ``DDP(...)``)."""
        kind = type(expr)
        if kind is cst.Call:
            target = self._call_targets.get(expr)
            if target is not None and target in self._returned and expr not in self.shared.constructed:
                return self.returned_origins(target)
            if target is not None and (param := self.generator_parameter(target)) is not None:
                # ``cycle(loader)`` of ``def cycle(it): while True: for b in it: yield b``: its batches.
                argument = self.argument_for(expr, target, param)  # type: ignore[arg-type]
                return {expr} | (self.origins(argument) if argument is not None else set())
            if callee_name(expr) in ITERATION_WRAPPERS and expr.args:
                # ``pbar = tqdm(loader)`` still iterates the loader; ``zip(labeled, unlabeled)`` both.
                iterated = expr.args if callee_name(expr) == "zip" else expr.args[:1]
                return {expr}.union(*(self.origins(arg.value) for arg in iterated))
            if callee_name(expr) == "partial" and expr.args and "functools.partial" in self.qualified_names(expr.func):  # type: ignore[attr-defined]
                return {expr} | self.origins(expr.args[0].value)  # type: ignore[attr-defined]
            method = call_method_name(expr)
            if method in SELF_RETURNING_METHODS:
                return {expr} | self.origins(expr.func.value)  # type: ignore[union-attr]
            return {expr}
        if kind is cst.IfExp:
            return self.origins(expr.body) | self.origins(expr.orelse)  # type: ignore[attr-defined]
        if kind is cst.BooleanOperation:  # ``callbacks or []``: either side's value
            return self.origins(expr.left) | self.origins(expr.right)  # type: ignore[attr-defined]
        name = dotted_name(expr) if kind is not cst.Subscript else item_name(expr)
        if name is None:
            return set()
        found = self.name_origins(expr, name)
        if found:
            return found
        if kind is cst.Attribute:
            if expr.attr.value == "module":  # type: ignore[attr-defined]
                inside = self._inside_wraps(self.origins(expr.value))  # type: ignore[attr-defined]
                if inside:
                    return inside
                # (``ema.module`` of a program's own holder: timm's ``ModelEma`` keeps its copy there)
            return self._instance_attribute(expr)  # type: ignore[arg-type]
        if name == "self":
            owner = self.enclosing_class(expr)
            return set(self.shared.instances_of(owner)) if owner is not None else found
        return found

    def names_holding(self, origins: frozenset[cst.CSTNode]) -> frozenset[str]:
        """The dotted names (``model``, ``self.model``, a parameter) whose binding, anywhere in the program,
        may hold one of these values: a quick test before a name's own origins are looked up."""
        return frozenset(key[1] for key, values in self._bindings.items() if not values.isdisjoint(origins))

    def name_origins(self, node: cst.CSTNode, name: str) -> set[cst.CSTNode]:
        """The calls a (dotted) name used at ``node`` may hold the value of, by its binding there: for
        ``self.x`` in a method, what the methods of the class, of the classes it derives from and of those
        derived from it store in ``self.x`` (a subclass's ``__init__`` sets what the base's ``fit`` reads)."""
        key = self._key(node, name)
        owner = key[0]
        if type(owner) is not cst.ClassDef:
            bound = self._bindings.get(key, ())
            if len(bound) < 2:
                return set(bound)
            # ``ds = Stream()`` in the ``else`` of the ``if`` whose body builds the loader from ``ds``: not its value there
            around = {node, *self.ancestors(node)}
            return {origin for origin in bound if not self._in_exclusive_branches(origin, around)}
        found: set[cst.CSTNode] = set()
        for cls in self.shared.hierarchy_line(owner):  # type: ignore[arg-type]
            found |= self._bindings.get((cls, name), set())
        return found

    def in_exclusive_branches(self, first: cst.CSTNode, second: cst.CSTNode) -> bool:
        """Whether two nodes sit in different branches of one ``if`` that no loop of their function repeats:
        one run of the function passes through one of them only."""
        return self._in_exclusive_branches(first, {second, *self.ancestors(second)})

    def _in_exclusive_branches(self, first: cst.CSTNode, second: set[cst.CSTNode]) -> bool:
        """Whether two nodes sit in different branches of one ``if`` (its body, its ``else`` or ``elif``) that no loop
        of their function repeats: one run of the function passes through one of them only. ``second``: the
        other node and its ancestors (read once for all the bindings of a name)."""
        child: cst.CSTNode = first
        for ancestor in self.ancestors(first):
            if type(ancestor) in (cst.FunctionDef, cst.ClassDef, cst.Module):
                return False
            if type(ancestor) is cst.If and child is not ancestor.test:  # type: ignore[attr-defined]
                other = ancestor.orelse if child is ancestor.body else ancestor.body  # type: ignore[attr-defined]
                if other is not None and other in second:
                    return not self._repeated(ancestor)
            child = ancestor
        return False

    def _repeated(self, node: cst.CSTNode) -> bool:
        """Whether a loop of the node's function (or of the module, outside functions) runs the node again."""
        for ancestor in self.ancestors(node):
            if type(ancestor) in (cst.For, cst.While):
                return True
            if type(ancestor) in (cst.FunctionDef, cst.ClassDef):
                return False
        return False

    def generator_parameter(self, function: cst.FunctionDef) -> str | None:
        """The parameter a generator function of the program goes over (:func:`_iterated_parameter`: ``loader``
        of ``def cycle(loader): while True: yield from loader``), ``None`` for any other function; read once
        per function (in its module's analysis)."""
        home = self.shared.analysis_of(function) or self
        found = home.derived("generator parameters", lambda _: {})
        if function not in found:
            found[function] = _iterated_parameter(function) if home.is_generator(function) else None
        return found[function]

    def is_generator(self, function: cst.FunctionDef) -> bool:
        """Whether a function of the program yields (its calls hand back a generator): a ``yield`` in its body,
        nested functions' included, read from the index of its module."""
        home = self.shared.analysis_of(function) or self
        return function in home.derived("generator functions", _generator_functions)

    def _instance_attribute(self, expr: cst.Attribute) -> set[cst.CSTNode]:
        """``trainer.model`` where ``trainer`` holds an instance of a class of the program (a callback's
        argument, ``trainer = Trainer(...)``): what the class's methods store in ``self.model``."""
        found: set[cst.CSTNode] = set()
        if expr.attr.value not in self.shared.stored_on_self:
            return found
        for origin in self.origins(expr.value):
            owner = self.shared.constructed.get(origin) if type(origin) is cst.Call else None  # type: ignore[arg-type]
            if owner is not None:
                for cls in self.shared.ancestors_of(owner):
                    found |= self._bindings.get((cls, f"self.{expr.attr.value}"), set())
        return found

    def _inside_wraps(self, origins: set[cst.CSTNode]) -> set[cst.CSTNode]:
        """The origins of the models that the wrap calls among ``origins`` wrap (``model.module`` of ``model
        = DDP(Net())`` comes from ``Net()``)."""
        wraps = set(self.program_wrap_calls)
        inner: set[cst.CSTNode] = set()
        # (``model = DDP(model.module)``, a re-wrap of the model inside: what it wraps is read once, not again
        # from within its own reading)
        unwrapping: set[cst.CSTNode] = self.shared.__dict__.setdefault("_unwrapping", set())
        for origin in origins & wraps:
            wrapped = wrapped_argument(origin)  # type: ignore[arg-type]
            if wrapped is not None and origin not in unwrapping:
                owner = self.shared.analysis_of(origin) or self
                unwrapping.add(origin)
                try:
                    inner |= owner.origins(wrapped)
                finally:
                    unwrapping.discard(origin)
        return inner - wraps  # (``model = DDP(model)``: the name's own origins hold the wrap too)

    def _bind(self, key: BindingKey, values: set[cst.CSTNode]) -> bool:
        current = self._bindings.setdefault(key, set())
        before = len(current)
        current.update(values)
        return len(current) != before

    def _propagate(self) -> bool:
        """One round of propagating origins through this module's assignments, returns and call arguments
        (into the shared tables); whether anything changed. Method calls whose receiver's class became
        known in an earlier round are resolved here too."""
        changed = self._resolve_method_calls()
        for assign in self.assignments:
            for target in _assign_targets(assign):
                changed |= self._bind_target(target, assign.value)  # type: ignore[arg-type]
        for ret in self._returns:
            function = self.enclosing_function(ret)
            if function is None or ret.value is None:
                continue
            elements = _tuple_elements(ret.value) or [ret.value]
            slots = self._returned.setdefault(function, [set() for _ in elements])
            for i, element in enumerate(elements[: len(slots)]):
                new = self.origins(element)
                if not new <= slots[i]:
                    slots[i] |= new
                    changed = True
            items = self._items_of(ret.value)
            if items:
                returned = self.shared.returned_items.setdefault(function, {})
                for key, new in items.items():
                    slot = returned.setdefault(key, set())
                    if not new <= slot:
                        slot |= new
                        changed = True
        constructed = self.shared.constructed
        for loop in (*self.for_loops, *self._comp_fors):  # ``for callback in self.callbacks:`` takes the list's elements
            target = dotted_name(loop.target)
            items = self._items_of(loop.iter) if target else None
            elements = items.get(ELEMENTS) if items else None
            # Only a list of instances of the program's classes (callbacks, for their methods): the variable
            # holds each element in turn, and other values (``for net in (model, teacher)``, ``[model,
            # optimizer]``, a model converted to SyncBatchNorm) are no one thing a rule may rewrite as such
            # (``.module`` on the optimizer). A list of the program's functions too (``for hook in hooks:``).
            if elements and all(
                origin in constructed or type(origin) is cst.FunctionDef or origin in self.shared.call_targets  # (a factory's call)
                for origin in elements
            ) and any(origin in constructed or type(origin) is cst.FunctionDef for origin in elements):
                changed |= self._bind(self._key(loop.target, target), elements)  # type: ignore[arg-type]
            # ``for loader in (train_a, train_b):``, ``for name, loader in (("a", a), ("b", b)):``: a variable
            # that holds one data loader after another (each one trains or evaluates through it).
            for name, column in self._loaders_in_turn(loop) if type(loop) is cst.For else ():  # (a comprehension's own)
                changed |= self._bind(self._key(loop.target, name), set().union(*(self.origins(e) for e in column)))
        other_targets = self.shared.other_targets
        for call in self.calls:
            if call_method_name(call) == "append" and len(call.args) == 1:
                receiver = dotted_name(call.func.value)  # type: ignore[attr-defined]
                if receiver:
                    changed |= self._bind_items(call, receiver, {ELEMENTS: self.origins(call.args[0].value)})
            function = self._call_targets.get(call)
            if function is None:
                continue
            for function in (function, *other_targets.get(call, ())):
                for param, arg in self.bound_arguments(call, function):
                    home = self if self.owns(arg) else self.shared.analysis_of(arg) or self  # (passed on from another module)
                    changed |= self._bind(self._key(function, param), home.origins(arg))
                    items = home._items_of(arg)
                    if items:
                        changed |= self._bind_items(function, param, items)
        return changed

    def _loaders_in_turn(self, loop: cst.For) -> list[tuple[str, list[cst.BaseExpression]]]:
        """The loop's variables that hold data loaders only, one after another, with the expressions they
        take in turn: the loop iterates a list or tuple written out whose elements (or whose tuples' elements
        at the variable's position) are all ``DataLoader(...)`` calls, or names of them."""
        rows = _tuple_elements(loop.iter)
        if not rows:
            return []
        variables = _tuple_elements(loop.target)
        if _decides_on(loop, {n.value for n in walk(loop.target) if type(n) is cst.Name}):  # type: ignore[attr-defined]
            return []  # ``for phase, loader in (("train", a), ("val", b)): ... if phase == "train": step()``
        columns: list[list[cst.BaseExpression]]
        if variables is None:
            columns, variables = [rows], [loop.target]
        else:
            unpacked = [_tuple_elements(row) for row in rows]
            if any(row is None or len(row) != len(variables) for row in unpacked):
                return []
            columns = [[row[i] for row in unpacked] for i in range(len(variables))]  # type: ignore[index]
        found = []
        for target, column in zip(variables, columns):
            if type(target) is not cst.Name:
                continue
            if all(
                (origins := self.origins(element)) and all(type(o) is cst.Call and self.is_call_to(o, names.DATA_LOADER) for o in origins)  # type: ignore[arg-type]
                for element in column
            ):
                found.append((target.value, column))  # type: ignore[attr-defined]
        return found

    def _loader_taken_in_turn(self, loop: cst.For, expr: cst.BaseExpression, loader: cst.Call) -> cst.BaseExpression | None:
        """Where the loop's variable ``expr`` takes the loader in turn (``for loader in (a, b)``), how the
        loader is written in the loop's list (``a``)."""
        name = dotted_name(expr)
        for variable, column in self._loaders_in_turn(loop):
            if variable == name:
                return next((element for element in column if loader in self.origins(element)), None)
        return None

    def _bind_items(self, scope_node: cst.CSTNode, name: str, items: dict[str, set[cst.CSTNode]]) -> bool:
        """Bind what a dict holds at each key to ``name['key']``, the dict being bound to ``name``; a list
        that the program reorders (``insert``, ``pop``, ``sort``, ``del x[i]``) keeps no positions."""
        if name_root(name) in self._reordered_lists:
            items = {key: value for key, value in items.items() if not key.startswith(POSITION) or key == ELEMENTS}
        self._note_item_keys(scope_node, name, items)
        changed = False
        for item, origins in items.items():
            changed |= self._bind(self._key(scope_node, f"{name}[{item!r}]"), origins)
        return changed

    def _note_item_keys(self, scope_node: cst.CSTNode, name: str, keys: Iterable[str]) -> None:
        """Record that the dict (or list) bound to ``name`` holds items under these keys."""
        self.shared.item_keys.setdefault(self._key(scope_node, name), set()).update(keys)
        self.shared.item_roots.add(name_root(name))

    @cached_property
    def _assigned_roots(self) -> frozenset[str]:
        """The names this module assigns or takes as parameters, and those of the functions it defines inside
        functions (the variables, not its imports or top-level defs)."""
        found = {name for names_ in self._local_names.values() for name in names_}
        for assign in self.assignments:
            for target in _assign_targets(assign):
                found.update(_target_names(target))
        return frozenset(found)

    @cached_property
    def _reordered_lists(self) -> frozenset[str]:
        """Names (their roots) of lists whose items this module moves: a positional item is unknown there."""
        found = set()
        for call in self.calls:
            if call_method_name(call) in REORDERING_METHODS:
                name = dotted_name(call.func.value)  # type: ignore[attr-defined]
                if name:
                    found.add(name_root(name))
        for node in self.index.preorder:
            if type(node) is cst.Del:
                found.update(name_root(n) for n in (dotted_name(t.value) for t in walk(node) if type(t) is cst.Subscript) if n)  # type: ignore[attr-defined]
        return frozenset(found)

    def _items_of(self, value: cst.BaseExpression) -> dict[str, set[cst.CSTNode]] | None:
        """What a dict-valued expression holds at each string key, where the analysis can read it: a dict
        written out, a name whose dict got its keys so, or a call of a function returning such a dict."""
        kind = type(value)
        if kind is cst.BooleanOperation or kind is cst.IfExp:
            # ``self.callbacks = callbacks or []``, ``cbs if cbs is not None else []``: what either side holds
            sides = (value.left, value.right) if kind is cst.BooleanOperation else (value.body, value.orelse)  # type: ignore[attr-defined]
            merged: dict[str, set[cst.CSTNode]] = {}
            for side in sides:
                for key, found in (self._items_of(side) or {}).items():
                    merged.setdefault(key, set()).update(found)
            return merged or None
        if kind is cst.List or kind is cst.Tuple or kind is cst.Set:
            items: dict[str, set[cst.CSTNode]] = {}
            elements: set[cst.CSTNode] = set()
            for position, element in enumerate(value.elements):  # type: ignore[attr-defined]
                if type(element) is cst.StarredElement:
                    break
                found = self.origins(element.value)
                if kind is not cst.Set and found:
                    items[POSITION + str(position)] = found
                elements |= found
            if elements:
                items[ELEMENTS] = elements
            return items or None
        if kind is cst.ListComp and value.elt in self.shared.constructed:  # type: ignore[attr-defined]
            # ``[HOOKS[n]() for n in names]``: every element an instance the comprehension's call builds
            return {ELEMENTS: {value.elt}}  # type: ignore[attr-defined]
        if kind is cst.Call and type(value.func) is cst.Name and value.func.value in COPYING_BUILTINS:  # type: ignore[attr-defined]
            args = value.args  # type: ignore[attr-defined]
            if len(args) == 1 and args[0].keyword is None and not args[0].star:
                return self._items_of(args[0].value)
        if kind is cst.Call and len(value.args) == 1 and value.args[0].keyword is None and not value.args[0].star and self.is_call_to(value, MODULE_LISTS):  # type: ignore[attr-defined, arg-type]
            # ``nn.ModuleList([Router(), Router()])``: its layers are the list's (``for layer in self.layers:``)
            listed = self._items_of(value.args[0].value)  # type: ignore[attr-defined]
            return {ELEMENTS: listed[ELEMENTS]} if listed and ELEMENTS in listed else None
        if kind is cst.DictComp:
            # ``{split: DataLoader(sets[split], ...) for split in ["train", "val"]}``: one value at every key.
            keys = _literal_keys(value)  # type: ignore[arg-type]
            found = self.origins(value.value) if keys else set()  # type: ignore[attr-defined]
            return {key: set(found) for key in keys} if found else None
        if kind is cst.Dict or kind is cst.Call:
            items = literal_dict_items(value)
            if items is not None:
                return {key: self.origins(item) for key, item in items}
            target = self._call_targets.get(value) if kind is cst.Call else None  # type: ignore[arg-type]
            returned = self.shared.returned_items.get(target) if target is not None else None
            return dict(returned) if returned else None
        name = dotted_name(value)
        if name is None or name_root(name) not in self.shared.item_roots:
            return None
        keys = self.shared.item_keys.get(self._key(value, name))
        if not keys:
            return None
        return {key: set(self._bindings.get(self._key(value, f"{name}[{key!r}]"), ())) for key in keys}

    def _bind_target(self, target: cst.BaseExpression, value: cst.BaseExpression) -> bool:
        targets = _tuple_elements(target)
        if targets is None:
            name = dotted_name(target) if type(target) is not cst.Subscript else item_name(target)
            if not name:
                return False
            key = self._key(target, name)
            changed = self._bind(key, self.origins(value))
            items = self._items_of(value)
            if items:
                changed |= self._bind_items(target, name, items)
            if type(target) is cst.Subscript:  # ``loaders["train"] = ...``: the dict holds that key
                self._note_item_keys(target, dotted_name(target.value), [subscript_key(target)])  # type: ignore[arg-type, attr-defined, list-item]
            return changed
        values = _tuple_elements(value)
        changed = False
        if values is not None and len(values) == len(targets):
            for t, v in zip(targets, values):
                changed |= self._bind_target(t, v)
            return changed
        if isinstance(value, cst.Call) and value in self._call_targets:
            returned = self._returned.get(self._call_targets[value], [])
            if len(returned) == len(targets):
                for t, origins in zip(targets, returned):
                    name = dotted_name(t)
                    if name:
                        changed |= self._bind(self._key(t, name), origins)
        return changed

    def _resolve_call_targets(self) -> None:
        """Map calls to the functions of the program they run: functions and classes of this module or
        imported from another module of the program, methods through ``self`` or a class name."""
        top_functions = {f.name.value: f for f in self.functions if self.parent(f) is self.module}
        classes = {c.name.value: c for c in self.classes}
        for call in self.calls:
            target: cst.FunctionDef | None = None
            owner: cst.ClassDef | None = None
            if isinstance(call.func, cst.Name):
                name = call.func.value
                if (built := self._built_by_a_classmethod(call, name)) is not None:
                    owner = built  # ``return cls(config)`` of ``def from_args(cls, ...)``: an instance of its class
                    # ... or of the subclass it is called on (``Trainer.from_config(cfg)``, inherited): its ``__init__``.
                    inits = [init for sub in self.shared.subclasses_of(built) if (init := own_method(sub, "__init__")) is not None]
                    if inits:
                        self.shared.other_targets[call] = inits
                elif name in top_functions:
                    target = top_functions[name]
                elif name in classes:
                    owner = classes[name]
                else:
                    imported = self.imported_definition(name)
                    if isinstance(imported, cst.FunctionDef):
                        target = imported
                    elif isinstance(imported, cst.ClassDef):
                        owner = imported
            elif isinstance(call.func, cst.Attribute) and isinstance(call.func.value, cst.Name):
                receiver, method = call.func.value.value, call.func.attr.value
                if receiver == "self":
                    enclosing = self.enclosing_class(call)
                    target = self.method_of(enclosing, method) if enclosing else None
                    # ``self.training_step(batch)`` in a base class runs what a subclass overrides it with.
                    overrides = [
                        m for sub in (self.shared.subclasses_of(enclosing) if enclosing else ())
                        if (m := own_method(sub, method)) is not None and m is not target
                    ]
                    if overrides and target is None:
                        target = overrides.pop(0)
                    if overrides:
                        self.shared.other_targets[call] = overrides
                elif receiver in classes:
                    target = self.method_of(classes[receiver], method)
                    if target is not None and _builds_its_class(target):
                        self.shared.constructed[call] = classes[receiver]  # ``Trainer.from_config(cfg)``: a Trainer
                else:
                    imported = self.imported_definition(f"{receiver}.{method}")
                    if isinstance(imported, cst.FunctionDef):
                        target = imported
                    elif isinstance(imported, cst.ClassDef):
                        owner = imported
                    else:
                        imported_class = self.imported_definition(receiver)
                        if isinstance(imported_class, cst.ClassDef):
                            target = self.method_of(imported_class, method)
                            if target is not None and _builds_its_class(target):
                                self.shared.constructed[call] = imported_class
            elif type(call.func) is cst.Subscript and (registered := self.registered_classes(call.func)):
                # ``HOOKS[name]()``, ``MODELS[cfg["type"]](**cfg)``: an instance of one of the registry's classes
                owner = registered[0]
                if len(registered) > 1:
                    self.shared.constructed_too[call] = registered[1:]
            elif isinstance(call.func, cst.Attribute) and type(call.func.value) is cst.Call and callee_name(call.func.value) == "super":  # type: ignore[arg-type]
                # ``super().__init__(model, loader)``: the method of the first base of the program that has it.
                enclosing = self.enclosing_class(call)
                for base in self.base_classes(enclosing) if enclosing is not None else ():
                    target = self.method_of(base, call.func.attr.value)
                    if target is not None:
                        break
            if owner is not None:
                self.shared.constructed[call] = owner
                target = self.method_of(owner, "__init__")
            if target is not None:
                self._call_targets[call] = target

    def registered_classes(self, callee: cst.BaseExpression) -> list[cst.ClassDef]:
        """The classes of the program a registry called by key may build (``MODELS[name]``): those of a dict written
        out with class names as its values (``MODELS = {"resnet": ResNet, "mlp": MLP}``), in its function or at the
        module's top level, or stored into it by the program (``HOOKS[cls.__name__] = cls`` in a decorator
        ``register`` the classes are decorated with, ``HOOKS["ckpt"] = CheckpointHook``)."""
        if type(callee) is not cst.Subscript or type(callee.value) is not cst.Name:  # type: ignore[attr-defined]
            return []
        name = callee.value.value  # type: ignore[attr-defined]
        stored_into = self.derived("names stored into by key", _names_stored_into_by_key)
        values = self.flows_into(callee.value, name) or self.assigned_values(None, name)  # type: ignore[attr-defined]
        if name not in stored_into and not any(type(v) is cst.Dict for v in values):
            return []  # (no dict of classes written out, nothing stored into it by key: the common ``layers[i](x)``)
        classes = {cls.name.value: cls for cls in self.classes}
        found: list[cst.ClassDef] = []

        def add(held: cst.CSTNode | None) -> None:
            if type(held) is cst.Name:
                cls = classes.get(held.value) or self.imported_definition(held.value)  # type: ignore[attr-defined]
                if isinstance(cls, cst.ClassDef) and cls not in found:
                    found.append(cls)

        for value in values:
            for element in value.elements if type(value) is cst.Dict else ():  # type: ignore[attr-defined]
                add(element.value if type(element) is cst.DictElement else None)
        for assign in self.assignments:
            for target in _assign_targets(assign):
                if type(target) is cst.Subscript and dotted_name(target.value) == name:  # type: ignore[attr-defined]
                    stored = getattr(assign, "value", None)
                    function = self.enclosing_function(assign)
                    if type(stored) is cst.Name and function is not None and self.is_parameter(function, stored.value):  # type: ignore[attr-defined]
                        # a decorator storing what it decorates: the classes decorated with it
                        for cls in self.classes:
                            if any(dotted_name(d.decorator) == function.name.value for d in cls.decorators):
                                add(cst.Name(cls.name.value))
                    else:
                        add(stored)
        return found

    def _built_by_a_classmethod(self, call: cst.Call, name: str) -> cst.ClassDef | None:
        """The class whose classmethod calls its own first parameter (``cls(config)`` in ``@classmethod def
        from_args(cls, args)``): the call builds an instance of that class (or of the subclass it is called on)."""
        function = self.enclosing_function(call)
        if function is None or _class_parameter(function) != name:
            return None
        owner = self.parent(self.parent(function))  # (the class's body, then the class)
        return owner if isinstance(owner, cst.ClassDef) else None

    def _resolve_method_calls(self) -> bool:
        """Resolve ``obj.method(...)`` where ``obj`` holds an instance of a class of the program
        (``trainer = Trainer(...)``; ``trainer.fit(loader)``, ``Trainer(...).fit(loader)``), and calls of a
        variable holding a function of the program (``step(x, y)`` of ``step = make_train_step(model)``,
        ``self.process_fn(batch)``, ``functools.partial(train_step, model)``)."""
        changed = False
        # Instances whose calls run ``__call__``: only where the program builds one of a class that has it.
        callable_instances = any(self.method_of(owner, "__call__") is not None for owner in set(self.shared.constructed.values()))
        for call in self.calls:
            if call in self._call_targets:
                continue
            changed |= self._resolve_function_value(call)
            if call in self._call_targets:
                continue
            if callable_instances:
                changed |= self._resolve_instance_call(call)
                if call in self._call_targets:
                    continue
            name: str | None
            named: frozenset[str] | None = None
            if type(call.func) is cst.Attribute:
                receiver, name = call.func.value, call.func.attr.value  # type: ignore[attr-defined]
                if type(receiver) is cst.Name and receiver.value == "self":  # type: ignore[attr-defined]
                    continue
            elif type(call.func) is cst.Name and call.func.value in self._assigned_roots:  # type: ignore[attr-defined]
                receiver, name = call.func, "__call__"  # ``stopper(loss)``: an instance's ``__call__``
            elif (looked_up := self._getattr_lookup(call.func)) is not None:  # type: ignore[arg-type]
                receiver, named = looked_up  # ``getattr(hook, name)(self)``: an mmcv-style runner's hooks
                name = None
            else:
                continue
            found: dict[cst.FunctionDef, tuple[str, str, str]] = {}
            owners = [
                owner
                for origin in self.origins(receiver)
                if type(origin) is cst.Call
                for owner in [self.shared.constructed.get(origin), *self.shared.constructed_too.get(origin, ())]  # type: ignore[arg-type]
                if owner is not None
            ]
            if not owners and type(receiver) in (cst.Name, cst.Subscript):
                owners = self._factory_elements(receiver)
            for owner in owners:
                if name is not None:
                    methods = [self.method_of(owner, name)]
                elif named is not None:
                    methods = [self.method_of(owner, each) for each in sorted(named)]
                else:
                    methods = self._methods_taking(owner, call)
                for method in methods:
                    if method is not None and method not in found:
                        home = self.shared.analysis_of(owner) or self  # type: ignore[arg-type]
                        found[method] = (home.module_name, owner.name.value, method.name.value)
            if found:
                # The origins are a set: the first target must not vary from run to run.
                methods = sorted(found, key=found.__getitem__)
                self._call_targets[call] = methods[0]
                changed = True
                if len(methods) > 1:  # ``for cb in self.callbacks: cb.on_epoch_end(self)``
                    self.shared.other_targets[call] = methods[1:]
        return changed

    def _factory_elements(self, receiver: cst.BaseExpression) -> list[cst.ClassDef]:
        """The program's class whose instances a ``defaultdict`` of it makes, for a receiver that is one of its
        values: ``meters[k]`` of ``meters = defaultdict(Meter)``, or ``meter`` of ``for meter in meters.values():``
        (a torchvision-style MetricLogger: ``meter.synchronize_between_processes()`` runs ``Meter``'s all_reduce)."""
        if type(receiver) is cst.Subscript:
            held = receiver.value  # type: ignore[attr-defined]
        else:
            loop = next((a for a in self.ancestors(receiver) if type(a) is cst.For), None)
            while loop is not None and not (type(loop.target) is cst.Name and loop.target.value == receiver.value):  # type: ignore[attr-defined]
                loop = next((a for a in self.ancestors(loop) if type(a) is cst.For), None)
            iterated = loop.iter if loop is not None else None
            if type(iterated) is cst.Call and type(iterated.func) is cst.Name and iterated.func.value in COPYING_BUILTINS and len(iterated.args) == 1:  # type: ignore[attr-defined]
                iterated = iterated.args[0].value  # type: ignore[attr-defined]  (``list(meters.values())``)
            if type(iterated) is not cst.Call or call_method_name(iterated) != "values" or iterated.args:  # type: ignore[arg-type, attr-defined]
                return []
            held = iterated.func.value  # type: ignore[attr-defined]
        found: list[cst.ClassDef] = []
        for origin in self.origins(held):
            if type(origin) is cst.Call and origin.args and callee_name(origin) == "defaultdict" and "collections.defaultdict" in self.qualified_names(origin.func):  # type: ignore[attr-defined]
                factory = dotted_name(origin.args[0].value)  # type: ignore[attr-defined]
                cls = next((c for c in self.classes if c.name.value == factory), None) if factory else None
                cls = cls or (self.imported_definition(factory) if factory else None)
                if isinstance(cls, cst.ClassDef):
                    found.append(cls)
        return found

    def _resolve_instance_call(self, call: cst.Call) -> bool:
        """Resolve a call of an attribute that holds an instance of a class of the program to the class's
        ``__call__`` (``self.saver(model, path)`` of ``self.saver = Saver()``, an early-stopping object kept by
        a trainer)."""
        if type(call.func) is not cst.Attribute:
            return False
        found: dict[cst.FunctionDef, tuple[str, str]] = {}
        for origin in self.origins(call.func):
            owner = self.shared.constructed.get(origin) if type(origin) is cst.Call else None
            method = self.method_of(owner, "__call__") if owner is not None else None
            if method is not None:
                home = self.shared.analysis_of(owner) or self  # type: ignore[arg-type]
                found[method] = (home.module_name, owner.name.value)  # type: ignore[union-attr]
        if not found:
            return False
        methods = sorted(found, key=found.__getitem__)  # (the origins are a set)
        self._call_targets[call] = methods[0]
        if len(methods) > 1:
            self.shared.other_targets[call] = methods[1:]
        return True

    def _getattr_lookup(self, func: cst.BaseExpression) -> tuple[cst.BaseExpression, frozenset[str] | None] | None:
        """For ``getattr(obj, "name")`` or ``getattr(obj, name)`` called at once: the object, and the names of
        the methods it may run: the one written out, or the strings a parameter ``name`` is given at the
        function's call sites (``self.dispatch("validate", loader)``); ``None``: any method."""
        if type(func) is not cst.Call or len(func.args) != 2 or any(a.keyword or a.star for a in func.args):  # type: ignore[attr-defined]
            return None
        if "builtins.getattr" not in self.qualified_names(func.func):  # type: ignore[attr-defined]
            return None
        receiver, attribute = func.args[0].value, func.args[1].value  # type: ignore[attr-defined]
        if type(attribute) is cst.SimpleString:
            return receiver, frozenset({attribute.evaluated_value})  # type: ignore[attr-defined]
        if type(attribute) is cst.Name:
            given = self.flows_into(attribute, attribute.value)  # type: ignore[attr-defined]
            if given and all(type(value) is cst.SimpleString for value in given):
                return receiver, frozenset(value.evaluated_value for value in given)  # type: ignore[attr-defined]
        return receiver, None

    def _methods_taking(self, owner: cst.ClassDef, call: cst.Call) -> list[cst.FunctionDef]:
        """The methods of a class of the program (its own and those it inherits from classes of the program,
        not the special ``__x__`` ones) that the call's positional arguments fit."""
        if any(arg.star for arg in call.args):
            return []
        count = sum(1 for arg in call.args if arg.keyword is None)
        found: dict[str, cst.FunctionDef] = {}
        for cls in self.shared.ancestors_of(owner):
            body = cls.body.body if isinstance(cls.body, cst.IndentedBlock) else ()
            for stmt in body:
                special = stmt.name.value.startswith("__") and stmt.name.value.endswith("__") if isinstance(stmt, cst.FunctionDef) else True
                if isinstance(stmt, cst.FunctionDef) and not special and stmt.name.value not in found:
                    found[stmt.name.value] = stmt
        return [method for method in found.values() if _takes_positionals(method, count)]

    def _resolve_function_value(self, call: cst.Call) -> bool:
        """Resolve a call of a name or attribute that holds a function of the program (see
        :meth:`_bind_definitions`); whether a target was found. Through ``functools.partial`` the call's
        arguments are not the function's (the partial bound the first ones): it runs the function, and its
        arguments are bound to nothing."""
        func = call.func
        kind = type(func)
        if kind is cst.Name:
            if func.value not in self._assigned_roots:  # type: ignore[attr-defined]
                return False
        elif kind is cst.Subscript:  # ``steps["train"](batch)``: a table of steps
            name = item_name(func)
            if name is None or name_root(name) not in self.shared.item_roots:
                return False
        elif kind is not cst.Attribute or func.attr.value not in self.shared.stored_on_self:  # type: ignore[attr-defined]
            return False
        origins = self.origins(func)  # type: ignore[arg-type]
        functions = sorted(
            (o for o in origins if type(o) is cst.FunctionDef),
            key=lambda f: self._definition_order(f),  # type: ignore[arg-type]
        )
        known = self.shared.other_targets.get(call, [])
        if not functions or functions == known:
            return False
        if any(type(o) is cst.Call and callee_name(o) == "partial" for o in origins):  # type: ignore[arg-type]
            self.shared.other_targets[call] = functions  # type: ignore[assignment]
            return True
        self._call_targets[call] = functions[0]  # type: ignore[assignment]
        if len(functions) > 1:
            self.shared.other_targets[call] = functions[1:]  # type: ignore[assignment]
        return True

    def _definition_order(self, function: cst.FunctionDef) -> tuple[str, int]:
        """Where a function of the program is defined: its module's name and its rank among the module's
        functions (an order that does not vary from run to run)."""
        home = self.shared.analysis_of(function) or self
        return home.module_name, home.functions.index(function)

    def calls_a_self_distributing_library(self, call: cst.Call) -> bool:
        """Whether a call is one of a library that distributes a model itself (:data:`names.SELF_DISTRIBUTING`:
        ``fully_shard(model)``, ``init_device_mesh(...)``, ``deepspeed.initialize(...)``)."""
        return any(q == p or q.startswith(p + ".") for q in self.qualified_names(call.func) for p in names.SELF_DISTRIBUTING)

    @cached_property
    def program_distributed_by_a_library(self) -> bool:
        """Whether the program hands its distribution to such a library anywhere (:data:`names.DISTRIBUTING_CALLS`:
        FSDP, tensor parallelism over a device mesh, ``deepspeed.initialize``, an ``Accelerator``, ...): DDP's own
        rules (a process group to set up, data to shard, devices to pick) are that library's there."""
        return any(module.calls_to(names.DISTRIBUTING_CALLS) for module in self.shared.analyses)

    @cached_property
    def program_prints_on_its_terms(self) -> bool:
        """Whether a module of the program replaces the builtin ``print`` with a function of its own that decides
        whether to print (``builtins.print = print`` of ``def print(*args, **kwargs): if is_master or force: ...``
        in DETR's ``setup_for_distributed(is_master)``): which rank prints is the program's choice. A replacement
        that decides nothing (``functools.partial(print, flush=True)``) does not count."""
        for module in self.shared.analyses:
            for assign in module.assignments:
                value = getattr(assign, "value", None)
                if not any(
                    type(t) is cst.Attribute and t.attr.value == "print" and "builtins" in module.qualified_names(t.value)  # type: ignore[attr-defined]
                    for t in _assign_targets(assign)
                ) or type(value) is not cst.Name:
                    continue
                scope = module.enclosing_function(assign)
                defined = [
                    f for f in module.functions
                    if f.name.value == value.value and module.enclosing_function(f) is scope  # type: ignore[attr-defined]
                ]
                # (its test reads what the set-up was handed: ``is_master`` of ``setup_for_distributed(is_master)``)
                handed = {p.name.value for p in scope.params.params} if scope is not None else set()
                if any(
                    type(n) in (cst.If, cst.IfExp) and any(type(m) is cst.Name and m.value in handed for m in walk(n.test))  # type: ignore[attr-defined]
                    for f in defined
                    for n in walk(f.body)
                ):
                    return True
        return False

    @cached_property
    def program_data_parallel_classes(self) -> frozenset[cst.ClassDef]:
        """The classes of the program derived from ``nn.DataParallel`` (``class MyDP(nn.DataParallel)`` with its own
        ``scatter``), directly or through another such class."""
        found: set[cst.ClassDef] = set()
        for module in self.shared.analyses:
            for cls in module.classes:
                if any(base.keyword is None and module.qualified_names(base.value) & names.DATA_PARALLEL for base in cls.bases):
                    found.add(cls)
        while found:
            more = {cls for module in self.shared.analyses for cls in module.classes if cls not in found and set(module.base_classes(cls)) & found}
            if not more:
                break
            found |= more
        return frozenset(found)

    def builds_a_data_parallel_subclass(self, call: cst.Call) -> bool:
        """Whether a call builds an instance of a class of the program derived from ``nn.DataParallel``."""
        classes = self.program_data_parallel_classes
        return bool(classes) and self.shared.constructed.get(call) in classes

    def base_classes(self, cls: cst.ClassDef) -> list[cst.ClassDef]:
        """The classes of the program a class of this module derives from directly (``class Mine(Base)``,
        ``class Mine(engine.Base)`` of an imported module)."""
        found: list[cst.ClassDef] = []
        local = {c.name.value: c for c in self.classes if self.parent(c) is self.module}
        for base in cls.bases:
            name = dotted_name(base.value)
            if name is None or base.keyword is not None:
                continue
            definition = local.get(name) or self.imported_definition(name)
            if type(definition) is cst.ClassDef and definition is not cls:
                found.append(definition)  # type: ignore[arg-type]
        return found

    def method_of(self, owner: cst.ClassDef, name: str, depth: int = 0) -> cst.FunctionDef | None:
        """The method a class of the program has under a name: its own, or one it inherits from a class of
        the program."""
        own = own_method(owner, name)
        if own is not None or depth > 8:
            return own
        home = self.shared.analysis_of(owner) or self
        for base in home.base_classes(owner):
            found = home.method_of(base, name, depth + 1)
            if found is not None:
                return found
        return None

    def bound_arguments(self, call: cst.Call, function: cst.FunctionDef) -> Iterator[tuple[str, cst.BaseExpression]]:
        """Each parameter of the function a call runs, with the argument the call gives it (positional or
        by keyword; none past a ``*args`` the analysis cannot follow). A call that passes on its own function's
        ``*args`` / ``**kwargs`` (``super().__init__(*args, **kwargs)``) gives what each call of that function in
        the program hands them: a parameter may then come once per such call."""
        params = self._positional_names(function)
        kwonly = {p.name.value for p in function.params.kwonly_params}
        for args in self._passed_on(call, depth=2):
            for index, arg in enumerate(args):
                if arg.star:
                    break
                if arg.keyword is None:
                    if index < len(params):
                        yield params[index], arg.value
                elif arg.keyword.value in params or arg.keyword.value in kwonly:
                    yield arg.keyword.value, arg.value

    def _positional_names(self, function: cst.FunctionDef) -> list[str]:
        """The names of a function's positional parameters, a method's ``self`` / ``cls`` left out."""
        params = [p.name.value for p in (*function.params.posonly_params, *function.params.params)]
        if params and params[0] in ("self", "cls") and self.enclosing_class(function) is not None:
            params = params[1:]
        return params

    def _passed_on(self, call: cst.Call, depth: int) -> list[Sequence[cst.Arg]]:
        """The call's arguments, with its function's own ``*args`` / ``**kwargs`` passed on replaced by what each
        call of that function in the program gives them (one list per such call); the arguments as written where
        the call passes on nothing, or something else."""
        if not any(arg.star for arg in call.args):
            return [call.args]
        function = self.enclosing_function(call)
        star = function.params.star_arg if function is not None else None
        star_name = star.name.value if isinstance(star, cst.Param) else None
        double = function.params.star_kwarg if function is not None else None
        double_name = double.name.value if isinstance(double, cst.Param) else None
        passed = {arg.star: dotted_name(arg.value) for arg in call.args if arg.star}
        if function is None or depth <= 0 or any(name is None or name != (star_name if kind == "*" else double_name) for kind, name in passed.items()):
            return [call.args]
        own = [arg for arg in call.args if not arg.star]
        versions: list[Sequence[cst.Arg]] = []
        # (the calls as resolved so far: this runs while the bindings are solved, before the program's callers,
        # which are kept once asked for, are complete)
        shared = self.shared
        for outer in [c for c, target in self._program_call_targets() if target is function]:
            owner = shared.analysis_of(outer) or self
            for outer_args in owner._passed_on(outer, depth - 1):
                positional, keywords = owner._left_to_stars(outer_args, function)
                versions.append(
                    [*(a for a in own if a.keyword is None), *(positional if "*" in passed else []),
                     *(a for a in own if a.keyword is not None), *(keywords if "**" in passed else [])]
                )
        return versions or [call.args]

    def _left_to_stars(self, args: Sequence[cst.Arg], function: cst.FunctionDef) -> tuple[list[cst.Arg], list[cst.Arg]]:
        """The arguments of a call that the function's ``*args`` and ``**kwargs`` take (those its named parameters
        do not), in order; a ``*`` or ``**`` the call spreads of its own stays among them (a binding stops there)."""
        params = self._positional_names(function)
        named = {*params, *(p.name.value for p in function.params.kwonly_params)}
        count = len(params)
        positional = [arg for arg in args if arg.keyword is None and arg.star != "**"]
        if any(arg.star for arg in positional[:count]):
            positional = [next(arg for arg in positional if arg.star)]  # (where the spread lands is unknown)
        else:
            positional = positional[count:]
        keywords = [arg for arg in args if (arg.keyword is not None and arg.keyword.value not in named) or arg.star == "**"]
        return positional, keywords

    def call_target(self, call: cst.Call) -> cst.FunctionDef | None:
        """The function of this file a call runs, if the analysis can tell."""
        return self._call_targets.get(call)

    def model_forward(self, call: cst.Call) -> cst.FunctionDef | None:
        """The ``forward`` a call of a model runs (``model(x)`` where ``model`` holds an instance of a class of the
        program, itself or through a DistributedDataParallel / DataParallel wrap): the class's own ``forward`` or
        the nearest one it inherits; ``None`` when the callee is no such instance or may be of classes with
        different forwards. Found once per call."""
        cache = self.derived("model forwards", lambda _: {})
        if call not in cache:
            cache[call] = self._model_forward(call)
        return cache[call]

    def _model_forward(self, call: cst.Call) -> cst.FunctionDef | None:
        if type(call.func) not in (cst.Name, cst.Attribute) or call in self._call_targets:
            return None
        found: set[cst.FunctionDef] = set()
        pending, seen = list(self.origins(call.func)), set()  # type: ignore[arg-type]
        while pending:
            origin = pending.pop()
            if origin in seen:
                continue  # (``model = DDP(model)``: the name's bindings are read flow-insensitively)
            if len(seen) > 8:
                return None
            seen.add(origin)
            if type(origin) is cst.Call and self.is_call_to(origin, _MODEL_PASSING) and origin.args:  # type: ignore[arg-type, attr-defined]
                pending.extend(self.origins(origin.args[0].value))  # type: ignore[attr-defined]  # (``convert_sync_batchnorm(model)``)
                continue
            if type(origin) is cst.Call and type(origin.func) is cst.Attribute and call_method_name(origin) in SELF_RETURNING_METHODS:  # type: ignore[arg-type, attr-defined]
                pending.extend(self.origins(origin.func.value))  # type: ignore[attr-defined]  # (``NTXentLoss(t).to(device)``: the module itself)
                continue
            if origin in self.program_wrap_calls:
                model = wrapped_argument(origin)  # type: ignore[arg-type]
                home = self.shared.analysis_of(origin) or self
                if model is None:
                    return None
                pending.extend(home.origins(model))
                continue
            owner = self.shared.constructed.get(origin)  # type: ignore[call-overload]
            if owner is None:
                return None
            forward = next((m for cls in self.shared.ancestors_of(owner) if (m := own_method(cls, "forward")) is not None), None)
            if forward is None:
                return None
            found.add(forward)
        return found.pop() if len(found) == 1 else None

    def callers_of(self, function: cst.FunctionDef) -> list[cst.Call]:
        """Calls in this file that run the function."""
        return [call for call, target in self._call_targets.items() if target is function]

    def handed_unwrapped(self, expr: cst.BaseExpression) -> bool:
        """Whether a wrapped model read through a parameter (``model.fc`` in ``def evaluate(model):``) is,
        at some call of its function in the program, handed a value that is no wrapped model there (an EMA
        copy, the plain model before the wrap, no argument at all), or may be by a script outside the program
        that imports the module too: the parameter then holds the wrapper on some calls only, and only
        ``runtime.unwrap`` reaches the model on all of them."""
        name = dotted_name(expr)
        function = self.enclosing_function(expr)
        if name is None or function is None:
            return False
        root = name.split(".")[0]
        if not self.is_parameter(function, root) or (root in ("self", "cls") and self.enclosing_class(function) is not None):
            return False
        if self.shared_with_other_scripts:
            return True  # (an evaluation script the program does not hold may call it with its own model)
        for call in self.callers_in_program(function):
            owner = self.shared.analysis_of(call) or self
            argument = owner.argument_for(call, function, root)
            if argument is None or owner.wrapped_at(argument) is None:
                return True
        return False

    def argument_for(self, call: cst.Call, function: cst.FunctionDef, param: str) -> cst.BaseExpression | None:
        """The expression a call passes for a parameter of the function it runs."""
        return next((arg for name, arg in self.bound_arguments(call, function) if name == param), None)

    def assignments_in_callees(self, scope: cst.CSTNode, dotted: str, depth: int = 3) -> list[tuple[ScriptAnalysis, cst.Assign]]:
        """Assignments to ``dotted`` (``args.distributed``) made by functions, in any module of the program,
        that calls in ``scope`` hand its root object to: ``init_distributed_mode(args)`` whose body sets
        ``args.distributed = ...`` (through its own parameter's name), followed ``depth`` calls deep."""
        root, _, rest = dotted.partition(".")
        if not rest or depth <= 0:
            return []
        cache: dict[tuple[cst.CSTNode, str, int], list[tuple[ScriptAnalysis, cst.Assign]]] = self.__dict__.setdefault("_callee_assignments", {})
        key = (scope, dotted, depth)
        if key not in cache:
            cache[key] = self._assignments_in_callees(scope, root, rest, depth)
        return cache[key]

    def _calls_in(self, scope: cst.CSTNode) -> list[cst.Call]:
        """The calls inside a node, found once per node."""
        cache: dict[cst.CSTNode, list[cst.Call]] = self.__dict__.setdefault("_calls_in_cache", {})
        if scope not in cache:
            cache[scope] = [n for n in self.nodes_below(scope) if type(n) is cst.Call]  # type: ignore[misc]
        return cache[scope]

    def _assignments_in_callees(self, scope: cst.CSTNode, root: str, rest: str, depth: int) -> list[tuple[ScriptAnalysis, cst.Assign]]:
        found: list[tuple[ScriptAnalysis, cst.Assign]] = []
        for node in self._calls_in(scope):
            function = self._call_targets.get(node)
            home = self.shared.analysis_of(function) if function is not None else None
            if function is None or home is None:
                continue
            for param, value in self.bound_arguments(node, function):
                if not (isinstance(value, cst.Name) and value.value == root):
                    continue
                target = f"{param}.{rest}"
                found.extend(
                    (home, assign)
                    for assign in home.assignments
                    if isinstance(assign, cst.Assign)
                    and home.is_inside(assign, function)
                    and any(dotted_name(t.target) == target for t in assign.targets)
                )
                found.extend(home.assignments_in_callees(function.body, target, depth - 1))
        return found

    def assignments_in(self, function: cst.FunctionDef | None) -> list[cst.Assign | cst.AnnAssign]:
        """The module's assignments whose nearest enclosing function is ``function`` (``None``: outside every
        function), in source order; grouped once per analysis."""
        return self._assignments_by_function.get(function, [])

    @cached_property
    def _assignments_by_function(self) -> dict[cst.FunctionDef | None, list[cst.Assign | cst.AnnAssign]]:
        grouped: dict[cst.FunctionDef | None, list[cst.Assign | cst.AnnAssign]] = {}
        for assign in self.assignments:
            grouped.setdefault(self.enclosing_function(assign), []).append(assign)
        return grouped

    def is_parameter(self, function: cst.FunctionDef, name: str) -> bool:
        """Whether the name is one of the function's parameters."""
        return any(p.name.value == name for p in all_parameters(function))

    # ------------------------------------------------------------------ loaders and loops

    @cached_property
    def loader_calls(self) -> list[cst.Call]:
        """Every ``DataLoader(...)`` call."""
        return self.calls_to(names.DATA_LOADER)

    @cached_property
    def backward_calls(self) -> list[cst.Call]:
        """Every ``.backward()`` call (``loss.backward()``, ``scaler.scale(loss).backward()``), and every call
        that runs the backward pass out of sight (:attr:`backward_calls_out_of_sight`), in source order. The
        loss each one runs it on: :func:`backward_loss`."""
        hidden = self.backward_calls_out_of_sight
        if not hidden:
            return self.method_calls("backward")
        return [call for call in self.calls if call in hidden or call_method_name(call) == "backward"]

    @cached_property
    def backward_calls_out_of_sight(self) -> frozenset[cst.Call]:
        """Calls that run the backward pass and the optimizer's step in a library: in a loop that zeroes an
        optimizer's gradients (``optimizer.zero_grad()``) but neither calls ``backward()`` nor steps an optimizer,
        itself or through a function of the program it runs, a call out of the program's sight (no function of
        the program) handed the loss, then that optimizer (DeiT's and MAE's ``loss_scaler(loss, optimizer,
        parameters=model.parameters())``, timm's ``NativeScaler``; the optimizer second, or by keyword:
        ``loss_scaler(loss, optimizer=optimizer)``)."""
        # Read from the bindings and the text only: the values' origins go through the program's wraps, which
        # ask whether the program trains (this).
        found: set[cst.Call] = set()
        constructions = set(self.torch_optimizer_calls)
        in_sight: list[cst.Call] | None = None  # the program's own backward passes and optimizer steps (read once)
        for zeroing in self.method_calls("zero_grad"):
            receiver = zeroing.func.value  # type: ignore[attr-defined]
            optimizer = dotted_name(receiver)
            loop = self.nearest_loop(zeroing)
            if optimizer is None or loop is None:
                continue
            if not names_an_optimizer(optimizer) and not constructions & self.name_origins(receiver, optimizer):
                continue  # (``model.zero_grad()``: no optimizer)
            inside = [call for call in self.calls if self.is_inside(call, loop)]
            if any(
                call_method_name(call) == "step" and optimizer in (dotted_name(call.func.value), *(dotted_name(a.value) for a in call.args))  # type: ignore[attr-defined]
                for call in inside
            ):
                continue  # (the optimizer's step in sight)
            if in_sight is None:
                in_sight = [
                    call
                    for module in self.shared.analyses
                    for call in module.calls
                    if call_method_name(call) == "backward"
                    or (call_method_name(call) == "step" and any(names_an_optimizer(dotted_name(n)) for n in (call.func.value, *(a.value for a in call.args))))  # type: ignore[attr-defined]
                ]
            if self.reaches(loop, in_sight):
                continue  # (a backward pass or a step in the loop, or in a function of the program it runs)
            for call in inside:
                positional = [arg.value for arg in call.args if arg.keyword is None and not arg.star]
                handed = [*positional[1:2], *(arg.value for arg in call.args if arg.keyword is not None)]
                if (
                    positional
                    and not any(arg.star for arg in call.args)
                    and dotted_name(positional[0]) != optimizer
                    and any(dotted_name(value) == optimizer for value in handed)
                    and self.call_target(call) is None
                    and call not in self.shared.constructed
                ):
                    found.add(call)
        return frozenset(found)

    @cached_property
    def program_backward_calls(self) -> list[cst.Call]:
        """Every ``.backward()`` call in every module of the program that may run with this one: not in the
        ``if __name__ == "__main__":`` block of another module (``predict.py`` importing ``build`` from a
        ``train.py`` whose training sits in that block never trains)."""
        return [call for analysis in self.shared.analyses for call in analysis.backward_calls if self._may_run_here(analysis, call)]

    def _may_run_here(self, home: ScriptAnalysis, node: cst.CSTNode) -> bool:
        """Whether a node of a module of the program may run when this module runs: anywhere in this module,
        and, where this module is an entry, outside the ``__main__`` block of another (which runs only when
        that module is the one run). A helper module runs with every entry of its program, whose blocks run."""
        return home is self or not self.is_entry or home.main_guard is None or not home.is_inside(node, home.main_guard)

    @cached_property
    def is_training_script(self) -> bool:
        """Whether the module trains something: it calls ``backward()``, or it is a module of a program
        that does (a ``Trainer`` module, the entry that builds the model and loaders for it)."""
        if self.backward_calls:
            return True
        return len(self.shared.analyses) > 1 and bool(self.program_backward_calls)

    @cached_property
    def is_training_code(self) -> bool:
        """Whether the file takes part in training: it calls ``backward()`` or wraps a model.

        Rules that rewrite devices, checkpoints and output act only on such files, so a data-preparation
        script or a plain module that happens to use torch is left exactly as it is.
        """
        return self.is_training_script or bool(self.wrap_calls)

    def _functions_reaching(self, calls: frozenset[cst.CSTNode]) -> set[cst.FunctionDef]:
        """Functions that run one of the calls directly or through other functions of the file (cached)."""
        cache: dict[frozenset[cst.CSTNode], set[cst.FunctionDef]] = self.__dict__.setdefault("_reaching_cache", {})
        if calls not in cache:
            reaching = {f for f in (self.enclosing_function(c) for c in calls) if f is not None}
            changed = True
            while changed:
                changed = False
                for call, target in self._every_call_target():
                    caller = self.enclosing_function(call)
                    if target in reaching and caller is not None and caller not in reaching:
                        reaching.add(caller)
                        changed = True
            cache[calls] = reaching
        return cache[calls]

    def functions_reaching_backward(self) -> set[cst.FunctionDef]:
        """The functions of the program that call ``backward()``, directly or through other calls."""
        return self._functions_reaching(frozenset(self.program_backward_calls))

    def targets_of(self, call: cst.Call) -> list[cst.FunctionDef]:
        """Every function of the program a call may run (an override, each function a variable may hold)."""
        first = self._call_targets.get(call)
        return ([first] if first is not None else []) + list(self.shared.other_targets.get(call, ()))

    def reaches(self, node: cst.CSTNode, calls: Iterable[cst.CSTNode]) -> bool:
        """Whether running the node (a function, a loop, a statement) runs one of the calls: they sit
        inside it, or inside a function of this file that it calls, directly or through other calls."""
        wanted = frozenset(calls)
        if any(self.is_inside(call, node) for call in wanted):
            return True
        reaching = self._functions_reaching(wanted)
        return any(target in reaching and self.is_inside(call, node) for call, target in self._every_call_target())

    def first_call_running(self, node: cst.CSTNode) -> cst.CSTNode | None:
        """Where this module runs a node of the program: the node itself when it is this module's, else the first
        call here that runs it (``Trainer(model, get_batch).fit(20)`` for a ``backward()`` in the Trainer's module)
        and runs no other call here that does (the innermost). ``None``: no call here is seen to run it."""
        if self.owns(node):
            return node
        reaching = self.reaching_nodes([node])  # type: ignore[list-item]
        callers = [call for call in self.calls if call in reaching]
        return next((c for c in callers if not any(o is not c and self.is_inside(o, c) for o in callers)), None)

    def reaching_nodes(self, calls: list[cst.Call]) -> frozenset[cst.CSTNode]:
        """The nodes of this module whose running runs one of the calls (:meth:`reaches`, answered for every
        node at once): the calls and their ancestors, and the calls of the program's functions that reach them
        with their ancestors. Kept per list of calls (the analysis's own lists: ``program_backward_calls``)."""
        cache: dict[int, tuple[list[cst.Call], frozenset[cst.CSTNode]]] = self.__dict__.setdefault("_reaching_nodes", {})
        held = cache.get(id(calls))
        if held is not None and held[0] is calls:
            return held[1]
        reaching = self._functions_reaching(frozenset(calls))
        starts = [c for c in calls if self.owns(c)]
        starts += [call for call, target in self._every_call_target() if target in reaching and self.owns(call)]
        nodes: set[cst.CSTNode] = set()
        for start in starts:
            if start in nodes:
                continue
            nodes.add(start)
            for ancestor in self.ancestors(start):
                if ancestor in nodes:
                    break
                nodes.add(ancestor)
        found = frozenset(nodes)
        cache[id(calls)] = (calls, found)
        return found

    def _every_call_target(self) -> Iterator[tuple[cst.Call, cst.FunctionDef]]:
        """Each call of the program with each function it may run (a method call on a list of callbacks
        runs several)."""
        yield from self._call_targets.items()
        for call, others in self.shared.other_targets.items():
            for target in others:
                yield call, target

    def reaches_backward(self, node: cst.CSTNode) -> bool:
        """Whether running the node (a loop, a statement) calls ``backward()``, here or through a call
        into any module of the program."""
        return self.reaches(node, self.program_backward_calls)

    def reaches_a_step(self, node: cst.CSTNode) -> bool:
        """Whether running the node trains: it reaches ``backward()`` (:meth:`reaches_backward`), or zeroes an
        optimizer's gradients where a library runs the backward pass out of sight (DeiT's ``optimizer.zero_grad()``
        then ``loss_scaler(loss, optimizer)``, timm's ``NativeScaler``)."""
        return self.reaches_backward(node) or self.reaches(node, self.program_zero_grad_calls)

    @cached_property
    def program_zero_grad_calls(self) -> list[cst.Call]:
        """Every ``optimizer.zero_grad()`` in every module of the program that may run with this one."""
        return [
            call
            for analysis in self.shared.analyses
            for call in analysis.method_calls("zero_grad")
            if analysis.holds_optimizer(call.func.value) and self._may_run_here(analysis, call)  # type: ignore[attr-defined]
        ]

    @cached_property
    def program_loader_calls(self) -> list[cst.Call]:
        """Every ``DataLoader(...)`` call in every module of the program."""
        return [call for analysis in self.shared.analyses for call in analysis.loader_calls]

    @cached_property
    def program_loader_loops(self) -> list[LoaderLoop]:
        """Every ``for`` loop over a data loader in every module of the program (a loader built in one
        module is often iterated in another: ``engine.train_one_epoch(model, loader)``)."""
        return [loop for analysis in self.shared.analyses for loop in analysis.loader_loops]

    @cached_property
    def loader_loops(self) -> list[LoaderLoop]:
        """Every ``for`` loop of this module over a data loader (built here or in another module)."""
        loops = []
        loader_set = set(self.program_loader_calls)
        for loop in self.for_loops:
            zipped = _zip_inside(loop.iter) or self._zip_held_in(loop)
            if zipped is not None:  # ``zip(labeled, unlabeled)``: each loader, as the loop spells it
                spellings = []
                for arg in zipped.args:
                    spelled, found = self._iterated_loaders(arg.value, loop, loader_set)
                    spellings.extend((call, spelled) for call in found)
                if spellings:
                    calls = frozenset(call for call, _ in spellings)
                    loops.append(LoaderLoop(loop, spellings[0][1], calls, self.reaches_a_step(loop.body), tuple(spellings)))  # type: ignore[arg-type]
                continue
            expr, found = self._iterated_loaders(loop.iter, loop, loader_set)
            if found:
                loops.append(LoaderLoop(loop, expr, found, self.reaches_a_step(loop.body)))  # type: ignore[arg-type]
        return loops

    def _iterated_loaders(
        self, iterated: cst.BaseExpression, loop: cst.For, loader_set: set[cst.Call]
    ) -> tuple[cst.BaseExpression, frozenset[cst.Call]]:
        """The loaders an iterated expression draws from, and how it spells them: through ``enumerate``,
        ``tqdm`` and the like, variables holding such wrappers, and wrappers around wrappers
        (``log_every(tqdm(loader))``)."""
        expr = self._through_wrapper_variables(unwrap_iterable(iterated), loop)
        found: frozenset[cst.Call] = frozenset()
        for _ in range(4):
            found = frozenset(o for o in self.origins(expr) if o in loader_set)  # type: ignore[misc]
            # A generator's call holds what it iterates; the loop still spells the loader as its argument
            # (``log_every(loader, 10)``: ``loader``).
            target = self._call_targets.get(expr) if type(expr) is cst.Call else None  # type: ignore[arg-type]
            through = not found or (target is not None and self.generator_parameter(target) is not None)
            inner = self._iterated_argument(expr, loader_set) if through and isinstance(expr, cst.Call) else None
            if inner is None:
                break
            expr = unwrap_iterable(inner)
        return expr, found

    def _iterated_argument(self, call: cst.Call, loader_set: set[cst.Call]) -> cst.BaseExpression | None:
        """The argument a wrapper call iterates, when a loop iterates the call: a function of the program that
        loops over one of its parameters (``def log_every(iterable, freq): for obj in iterable: yield obj``),
        the argument bound to that parameter; a call the analysis cannot follow, the one argument that
        holds a data loader (what else would it iterate)."""
        function = self._call_targets.get(call)
        home = self.shared.analysis_of(function) if function is not None else None
        if function is not None and home is not None:
            for param, value in self.bound_arguments(call, function):
                for loop in home.for_loops:
                    iterated = unwrap_iterable(loop.iter)
                    if isinstance(iterated, cst.Name) and iterated.value == param and home.enclosing_function(loop) is function:
                        return value
            return None
        holding = [arg.value for arg in call.args if any(o in loader_set for o in self.origins(arg.value))]
        return holding[0] if len(holding) == 1 else None

    def _zip_held_in(self, loop: cst.For) -> cst.Call | None:
        """The ``zip(...)`` of several iterables a loop iterates through variables of its function (``batches =
        zip(la, itertools.cycle(lb))``, maybe ``batches = tqdm(batches)``, then ``for ... in batches:``), if any."""
        function = self.enclosing_function(loop)
        expr = unwrap_iterable(loop.iter)
        for _ in range(4):
            source = self._wrapper_source(function, expr)
            if source is None:
                return None
            zipped = _zip_inside(source)
            if zipped is not None:
                return zipped
            expr = unwrap_iterable(source)
        return None

    def _wrapper_source(self, function: cst.FunctionDef | None, expr: cst.BaseExpression) -> cst.Call | None:
        """The wrapper call (:data:`ITERATION_WRAPPERS`) a name of the function is first assigned (``pbar =
        tqdm(loader, ...)``, ``batches = zip(a, b)``), or ``None``."""
        name = expr.value if isinstance(expr, cst.Name) else None
        if name is None:
            return None
        return next(
            (
                a.value
                for a in self.assignments_in(function)
                if isinstance(a, cst.Assign)
                and len(a.targets) == 1
                and isinstance(a.targets[0].target, cst.Name)
                and a.targets[0].target.value == name
                and isinstance(a.value, cst.Call)
                and callee_name(a.value) in ITERATION_WRAPPERS
            ),
            None,
        )

    def _through_wrapper_variables(self, expr: cst.BaseExpression, loop: cst.For) -> cst.BaseExpression:
        """``loader`` for ``pbar`` when the same function did ``pbar = tqdm(loader, ...)``.

        The loader is then named by what it is, so ``set_epoch`` can be called on it before the wrapper
        variable exists (it is usually assigned inside the epoch loop).
        """
        function = self.enclosing_function(loop)
        for _ in range(4):
            source = self._wrapper_source(function, expr)
            if source is None:
                return expr
            expr = unwrap_iterable(source)
        return expr

    def sampler_origins(self, loader: cst.Call) -> set[cst.CSTNode]:
        """The calls the loader's ``sampler=`` argument comes from; with a ``batch_sampler=`` instead, the
        calls the sampler it batches comes from too (``BatchSampler(DistributedSampler(ds), 8, False)``, a
        ``GroupedBatchSampler(sampler, ...)``: its first argument or ``sampler=``)."""
        arg = loader_argument(loader, "sampler")
        if arg is not None:
            return self.origins(arg.value)
        unpacked = self._unpacked_origins(loader, "sampler")
        if unpacked:
            return unpacked
        batches = keyword_argument(loader, "batch_sampler")
        found = self.origins(batches.value) if batches is not None else self._unpacked_origins(loader, "batch_sampler")
        if not found:
            return set()
        for origin in list(found):
            if type(origin) is cst.Call and origin.args:  # type: ignore[attr-defined]
                inner = keyword_argument(origin, "sampler") or (origin.args[0] if origin.args[0].keyword is None else None)  # type: ignore[arg-type, attr-defined]
                if inner is not None:
                    found |= self.origins(inner.value)
        return found

    def _unpacked_origins(self, call: cst.Call, keyword: str) -> set[cst.CSTNode]:
        """What a call's ``**kwargs`` dicts hold at the key (``kw = {"sampler": DistributedSampler(ds)}``,
        ``DataLoader(ds, **kw)``), where the analysis reads the dicts' keys."""
        found: set[cst.CSTNode] = set()
        for arg in call.args:
            if arg.star == "**":
                items = self._items_of(arg.value)
                if items and keyword in items:
                    found |= items[keyword]
        return found

    def forwards_keywords(self, call: cst.Call) -> bool:
        """Whether the call takes the ``**kwargs`` of the function it is in: ``f(**kwargs)``, or ``f(**args)`` of a
        dict that gets them (``args.update(kwargs)``, ``args = dict(..., **kwargs)``, ``{..., **kwargs}``), so the
        keywords its callers pass reach it (``def build_dataloader(ds, bs, **kwargs)``)."""
        function = self.enclosing_function(call)
        star = function.params.star_kwarg if function is not None else None
        if star is None:
            return False
        forwarded = star.name.value  # type: ignore[union-attr]
        for arg in call.args:
            if arg.star != "**" or type(arg.value) is not cst.Name:
                continue
            name = arg.value.value  # type: ignore[attr-defined]
            if name == forwarded:
                return True
            for node in walk(function.body):  # type: ignore[union-attr]
                if type(node) is cst.Call and call_method_name(node) == "update" and dotted_name(node.func.value) == name:  # type: ignore[attr-defined]
                    if any(type(a.value) is cst.Name and a.value.value == forwarded for a in node.args):  # type: ignore[attr-defined]
                        return True
                if type(node) is cst.Assign and any(dotted_name(t.target) == name for t in node.targets):  # type: ignore[attr-defined]
                    value = node.value  # type: ignore[attr-defined]
                    starred = value.args if type(value) is cst.Call else value.elements if type(value) is cst.Dict else ()
                    if any(getattr(e, "star", None) == "**" and type(e.value) is cst.Name and e.value.value == forwarded for e in starred):
                        return True
        return False

    def has_distributed_sampler(self, loader: cst.Call) -> bool:
        """Whether the loader draws from a ``DistributedSampler``."""
        return any(
            isinstance(o, cst.Call) and self.is_call_to(o, names.DISTRIBUTED_SAMPLER) for o in self.sampler_origins(loader)
        )

    def epoch_loops(self, loader: cst.Call) -> list[EpochLoop]:
        """The loops around each training iteration of a loader, with the loader's spelling there: a ``for``
        loop over it, or a comprehension that trains over it (``[step(b) for b in loader]``)."""
        found: list[EpochLoop] = []
        passes = [(loop.loop, loop.expr_for(loader)) for loop in self.program_loader_loops if loop.trains and loader in loop.loader_calls]
        passes += [(node, spelled) for module in self.shared.analyses for node, spelled, loaders in module.training_comprehensions if loader in loaders]
        for node, spelled in passes:
            for epoch in self._outer_loops(node, spelled, depth=0, loader=loader):
                if all(e.loop is not epoch.loop for e in found):
                    found.append(epoch)
        return found

    @cached_property
    def training_comprehensions(self) -> list[tuple[cst.CSTNode, cst.BaseExpression, frozenset[cst.Call]]]:
        """This module's comprehensions that train over loaders of the program (``losses = [train_step(b) for b
        in loader]``, ``sum(step(b) for b in loader)``: the element runs ``backward()``), with how the
        comprehension spells the (first) loader and the loaders it goes over."""
        loader_set = set(self.program_loader_calls)
        found: list[tuple[cst.CSTNode, cst.BaseExpression, frozenset[cst.Call]]] = []
        for node in self.preorder:
            if type(node) not in COMPREHENSIONS:
                continue
            loaders: set[cst.Call] = set()
            spelled = None
            for_in = node.for_in  # type: ignore[attr-defined]
            while for_in is not None:
                iterated = unwrap_iterable(for_in.iter)
                here = {o for o in self.origins(iterated) if o in loader_set}
                if here and spelled is None:
                    spelled = iterated
                loaders |= here  # type: ignore[arg-type]
                for_in = for_in.inner_for_in
            element = node.elt if type(node) is not cst.DictComp else node.value  # type: ignore[attr-defined]
            if loaders and spelled is not None and self.reaches_backward(element):
                found.append((node, spelled, frozenset(loaders)))
        return found

    def _outer_loops(
        self, node: cst.CSTNode, expr: cst.BaseExpression, depth: int, loader: cst.Call | None = None
    ) -> list[EpochLoop]:
        """The loops around ``node`` (climbing to the call sites of its function, at most three calls up: one
        per call site, ``run_epoch(dl)`` in a pre-training loop and in a fine-tuning one), with the loader's
        spelling there; a call site that passes another loader is not followed."""
        function = self.enclosing_function(node)
        for ancestor in self.ancestors(node):
            if ancestor is function:
                break
            if isinstance(ancestor, (cst.For, cst.While)):
                taken = self._loader_taken_in_turn(ancestor, expr, loader) if loader is not None and type(ancestor) is cst.For else None
                if taken is not None:
                    expr = taken  # a loop over the loaders (``for loader in (a, b)``), not over epochs
                    continue
                counts = type(ancestor) is not cst.For or self._may_count(ancestor.iter, unpacked=type(ancestor.target) in (cst.Tuple, cst.List))  # type: ignore[attr-defined]
                return [EpochLoop(ancestor, expr, _loop_variable(ancestor) if counts else None)]
        if function is None or depth >= 3:
            return []
        found: list[EpochLoop] = []
        for call in self.callers_of(function):
            spelled = self._spell_at_call(call, function, expr)
            if spelled is not None and (loader is None or loader in self.origins(spelled)):
                found.extend(self._outer_loops(call, spelled, depth + 1, loader))
        return found

    def _may_count(self, iterated: cst.BaseExpression, depth: int = 0, unpacked: bool = False) -> bool:
        """Whether a loop over the value may hand out whole numbers first, an epoch number: ``range(n)``,
        ``enumerate(...)``, ``zip(range(n), lrs)``, a name of unknown value; not a written-out list with
        anything but integers in it (``for lr in (0.1, 0.01)``, ``LRS = [0.1, 0.05]``), nor a dict's values,
        nor its items or keys unless a written-out dict with integer keys (``{0: 0.1, 5: 0.01}.items()``)."""
        kind = type(iterated)
        if kind is cst.List or kind is cst.Tuple or kind is cst.Set:
            # integers, or (the loop unpacking each item) items whose first element is one: ``[(0, 0.1), (5, 0.01)]``
            return all(
                type(e.value) is cst.Integer
                or (unpacked and type(e.value) in (cst.Tuple, cst.List) and e.value.elements and type(e.value.elements[0].value) is cst.Integer)
                for e in iterated.elements  # type: ignore[attr-defined]
            )
        if kind is cst.Dict:
            return all(type(e) is cst.DictElement and type(e.key) is cst.Integer for e in iterated.elements)  # type: ignore[attr-defined]
        if depth > 3:
            return True
        if kind is cst.Call:
            callee = iterated.func  # type: ignore[attr-defined]
            name = callee.attr.value if type(callee) is cst.Attribute else callee.value if type(callee) is cst.Name else None
            if name in ("zip", "enumerate") and not unpacked:
                return False  # (``for pair in zip(a, b)``: the variable holds a tuple)
            if name == "zip":
                first = iterated.args[0].value if iterated.args else None  # type: ignore[attr-defined]
                return first is not None and self._may_count(first, depth + 1)
            if name in ("items", "keys"):
                return type(callee) is cst.Attribute and self._written_out(callee.value, depth) is True
            return name != "values"
        if kind is cst.Name:
            return self._written_out(iterated, depth, unpacked) is not False
        return True

    def _written_out(self, expr: cst.BaseExpression, depth: int, unpacked: bool = False) -> bool | None:
        """For a written-out container (or a name that only ever holds such containers): whether a loop over
        it counts (:meth:`_may_count`); ``None`` where the value is not written out."""
        if type(expr) in (cst.List, cst.Tuple, cst.Set, cst.Dict):
            return self._may_count(expr, depth + 1, unpacked)
        if type(expr) is not cst.Name:
            return None
        values = self.flows_into(expr, expr.value)  # type: ignore[attr-defined]
        function = self.enclosing_function(expr)
        if not values and (function is None or not self.binds_locally(function, expr.value)):  # type: ignore[attr-defined]
            values = self._module_constant(expr.value)  # type: ignore[attr-defined]
        if not values or any(type(v) not in (cst.List, cst.Tuple, cst.Set, cst.Dict) for v in values):
            return None
        return all(self._may_count(v, depth + 1, unpacked) for v in values)

    def _module_constant(self, name: str) -> list[cst.BaseExpression]:
        """The values the module's top level assigns to a name (``LRS = [0.1, 0.01]``)."""
        return [
            small.value
            for stmt in self.module.body
            if type(stmt) is cst.SimpleStatementLine
            for small in stmt.body
            if type(small) is cst.Assign and any(type(t.target) is cst.Name and t.target.value == name for t in small.targets)  # type: ignore[attr-defined]
        ]

    def _spell_at_call(
        self, call: cst.Call, function: cst.FunctionDef, expr: cst.BaseExpression
    ) -> cst.BaseExpression | None:
        """How an expression used inside ``function`` is written at one of its call sites."""
        name = binding_name(expr)
        if name is None:
            return None
        root = name_root(name)
        if root == "self":
            # ``self.run_epoch(epoch)`` in the method of a class whose object runs ``function``: its own class, one it
            # derives from, or one derived from it (a base class's ``fit`` running a subclass's ``run_epoch``).
            caller_class, own_class = self.enclosing_class(call), self.enclosing_class(function)
            same_object = caller_class is own_class or (
                caller_class is not None
                and own_class is not None
                and type(call.func) is cst.Attribute
                and dotted_name(call.func.value) == "self"  # type: ignore[attr-defined]
                and caller_class in self.shared.hierarchy_line(own_class)
                # (one method only: where the call runs several subclasses' overrides, each may keep its loader
                # under another attribute, and a set_epoch placed for one fails on the others)
                and not self.shared.other_targets.get(call)
            )
            return expr if same_object else self._spelled_for_the_receiver(call, function, expr, name)
        if self.is_parameter(function, root):
            argument = self.argument_for(call, function, root)
            if argument is None or root != name:
                return None
            return argument
        return expr if not self.binds_locally(function, root) else None

    def _spelled_for_the_receiver(
        self, call: cst.Call, function: cst.FunctionDef, expr: cst.BaseExpression, name: str
    ) -> cst.BaseExpression | None:
        """``self.loader`` read in a method run as ``trainer.fit_epoch(epoch)``, where ``trainer`` holds the one
        object built by ``Trainer(net, loader, opt)`` and ``__init__`` stores its parameter ``loader`` there and
        nothing else does: that argument of the construction (``loader``), a name that still holds the same value
        at the call. ``None`` otherwise."""
        own_class = self.enclosing_class(function)
        if own_class is None or name.count(".") != 1 or type(call.func) is not cst.Attribute:
            return None
        origins = self.origins(call.func.value)  # type: ignore[attr-defined]
        construction = next(iter(origins)) if len(origins) == 1 else None
        if type(construction) is not cst.Call or self.shared.constructed.get(construction) not in self.shared.hierarchy_line(own_class):  # type: ignore[arg-type]
            return None
        home = self.shared.analysis_of(function) or self
        values = home.attribute_flows(expr, name)
        stored = values[0] if len(values) == 1 else None
        init = home.enclosing_function(stored) if type(stored) is cst.Name else None
        if init is None or init.name.value != "__init__" or not home.is_parameter(init, stored.value):  # type: ignore[union-attr]
            return None
        builder = self.shared.analysis_of(construction) or self
        argument = builder.argument_for(construction, init, stored.value)  # type: ignore[arg-type, union-attr]
        if builder is not self or type(argument) is not cst.Name:
            return None
        # The name still holds that value at the call (``loader = DataLoader(eval_set)`` between them: not the
        # trainer's), and nothing outside the class stores another in the attribute (``trainer.loader = ...``).
        held = self.binding_in_effect(argument, argument.value)  # type: ignore[attr-defined]
        if held is None or held is not self.binding_in_effect(call, argument.value):  # type: ignore[attr-defined]
            return None
        attribute = name.split(".")[1]
        for module in self.shared.analyses:
            for assign in module.assignments:
                for target in _assign_targets(assign):
                    if type(target) is cst.Attribute and target.attr.value == attribute and dotted_name(target.value) != "self":  # type: ignore[attr-defined]
                        return None
        return argument

    # ------------------------------------------------------------------------ models

    @cached_property
    def wrap_calls(self) -> list[cst.Call]:
        """``DataParallel(...)`` and ``DistributedDataParallel(...)`` calls; in a program that only infers
        (:attr:`program_only_infers`), the DDP ones only: a DataParallel there is no wrap to migrate."""
        if self.program_only_infers:
            return self.calls_to(names.DISTRIBUTED_DATA_PARALLEL)
        untrained = set(self.untrained_wraps)
        return [call for call in self.calls_to(names.MODEL_WRAPPERS) if call not in untrained]

    @cached_property
    def untrained_wraps(self) -> list[cst.Call]:
        """DataParallel wraps of models a program that trains (a ``backward()``, an optimizer step) never trains: a
        copy kept to load or export weights (``export = nn.DataParallel(Net()); export.load_state_dict(
        model.state_dict()); torch.save(export.module.state_dict(), path)``). The wrap is stored in a plain name that no code calls, hands to an
        optimizer or gives away (an argument, a return value, another name, another module); every read of it
        goes through a method that neither runs nor trains the model (:data:`_UNTRAINED_USES`), directly or on
        its ``.module``. Such a wrap is no wrap to migrate: DataParallel keeps the original's behaviour, where
        DistributedDataParallel would need a process group, a model on this process's device and a gradient."""
        found: list[cst.Call] = []
        if not (self.program_backward_calls or self.program_optimizer_step_calls):
            return found  # (a program that trains nothing here: a fragment, or a library's loop trains)
        for call in self.calls_to(names.DATA_PARALLEL):
            target = self.assigned_to(call)
            if target is None:
                continue
            if self.enclosing_function(call) is None and not self.is_entry:
                continue  # (a global of an imported module: a script outside the program may train it)
            if type(target) is cst.Name and self._used_untrained(call, target):
                found.append(call)
        return found

    def assigned_to(self, call: cst.Call) -> cst.BaseExpression | None:
        """The one target a call's value is assigned to, through the module methods that return the module itself
        (``model = Net(0.1).to(device)``); ``None`` where the value is not assigned alone."""
        node: cst.CSTNode = call
        parent = self.parent(node)
        while type(parent) is cst.Attribute and parent.value is node and parent.attr.value in SELF_RETURNING_METHODS:  # type: ignore[attr-defined]
            grand = self.parent(parent)
            if not (type(grand) is cst.Call and grand.func is parent):  # type: ignore[attr-defined]
                break
            node, parent = grand, self.parent(grand)
        if type(parent) is cst.Assign and parent.value is node and len(parent.targets) == 1:  # type: ignore[attr-defined]
            return parent.targets[0].target  # type: ignore[attr-defined]
        return None

    def _used_untrained(self, wrap: cst.Call, target: cst.Name) -> bool:
        """Whether every use of the name a wrap is stored in, in the whole program, is a method of
        :data:`_UNTRAINED_USES` (on the wrap or its ``.module``), and no optimizer of the program takes it."""
        name = target.value
        if name in self.shared.called_names() or any(name in a.trained_models for a in self.shared.analyses):
            return False
        key = self._key(wrap, name)
        for other in self.shared.analyses:
            for node in other.preorder:
                if type(node) is not cst.Name or node.value != name or node is target:  # type: ignore[attr-defined]
                    continue
                if other is not self:
                    return False  # (``from train import export``: used where this module cannot follow)
                parent = self.parent(node)
                if type(parent) is not cst.Attribute or parent.value is not node:  # type: ignore[attr-defined]
                    if self._key(node, name) == key or type(parent) in (cst.Global, cst.Nonlocal):
                        return False  # given away, stored again or declared global
                    continue  # (another function's own name)
                if self._key(node, name) != key:
                    continue
                used, method = parent.attr.value, parent  # type: ignore[attr-defined]
                if used == "module":
                    method = self.parent(parent)
                    used = method.attr.value if type(method) is cst.Attribute and method.value is parent else ""  # type: ignore[attr-defined]
                if used not in _UNTRAINED_USES:
                    return False
                call = self.parent(method)
                if used != "state_dict" and not (type(call) is cst.Call and type(self.parent(call)) is cst.Expr):
                    return False  # ``return wrapped.to(device)``: the wrap itself handed on (a move returns it)
        return True

    @cached_property
    def program_only_infers(self) -> bool:
        """Whether the program runs its models for inference only: no ``backward()``, no ``torch.autograd.grad``,
        no optimizer stepped or handed to another function, and a model put in evaluation mode or run without
        gradients (``model.eval()``, ``torch.no_grad()``, ``torch.inference_mode()``): a prediction or export
        script (one may build an optimizer to load a checkpoint's state)."""
        if self.program_backward_calls or self.program_optimizer_step_calls:
            return False
        infers = False
        for module in self.shared.analyses:
            if module.calls_to(names.AUTOGRAD_GRADIENTS) or module._optimizer_handed_on():
                return False
            infers = infers or bool(module.method_calls("eval")) or any(
                call for call in module.calls if callee_name(call) in ("no_grad", "inference_mode")
            )
        return infers

    def _optimizer_handed_on(self) -> bool:
        """Whether an optimizer the module builds is given to a call (``train(model, optimizer, loader)`` of a
        library, which may step it), not only used through its own methods (``optimizer.load_state_dict(...)``)."""
        held = {
            name
            for call in self.optimizer_calls
            if type(statement := self.parent(call)) is cst.Assign
            for target in statement.targets  # type: ignore[attr-defined]
            if (name := dotted_name(target.target)) is not None
        }
        return bool(held) and any(dotted_name(arg.value) in held for call in self.calls for arg in call.args)

    @cached_property
    def program_wrap_calls(self) -> list[cst.Call]:
        """``DataParallel(...)`` and ``DistributedDataParallel(...)`` calls in every module of the program."""
        return [call for analysis in self.shared.analyses for call in analysis.wrap_calls]

    @cached_property
    def program_reducing_functions(self) -> frozenset[cst.FunctionDef]:
        """The functions of the program that return a value combined across ranks: a return value that holds a
        reduction (``return runtime.reduce_mean(x)``) or the tensor a collective reduced in place (``rt =
        t.clone(); dist.all_reduce(rt); return rt / n``). A call of one is a reduction too. (A function that
        reduces a count for its log but returns this rank's own loss is none.)"""
        found: set[cst.FunctionDef] = set()
        for module in self.shared.analyses:
            for call in module.calls_to(names.REDUCTIONS):
                function = module.enclosing_function(call)
                if function is None or function in found:
                    continue
                reduced = {dotted_name(c.args[0].value) for c in module.calls_to(names.REDUCTIONS) if c.args and module.is_inside(c, function)} - {None}
                for value in self.shared.returned_values(function):
                    if any(
                        (type(n) is cst.Call and module.is_call_to(n, names.REDUCTIONS))  # type: ignore[arg-type]
                        or (type(n) in (cst.Name, cst.Attribute) and dotted_name(n) in reduced)  # type: ignore[arg-type]
                        for n in tree.walk(value)
                    ):
                        found.add(function)
                        break
        return frozenset(found)

    @cached_property
    def program_reducing_methods(self) -> frozenset[cst.FunctionDef]:
        """The methods of the program's classes that reduce their object's values across ranks in place (an
        ``AverageMeter.all_reduce()`` calling ``dist.all_reduce``): the object holds every rank's totals after."""
        found: set[cst.FunctionDef] = set()
        for module in self.shared.analyses:
            for call in module.calls_to(names.REDUCTIONS):
                function = module.enclosing_function(call)
                if function is not None and _is_a_method(function):
                    found.add(function)
        # ``MetricLogger.synchronize_between_processes`` running ``meter.synchronize_between_processes()`` for each
        # meter it holds: a method that runs a reducing method on its own object's parts reduces its object too.
        # The part's class is rarely known (``defaultdict(SmoothedValue)``): a reducing method's name is enough.
        while found:
            reducing_names = {function.name.value for function in found}
            more = {
                function
                for module in self.shared.analyses
                for call in module.calls
                if type(call.func) is cst.Attribute and call.func.attr.value in reducing_names  # type: ignore[attr-defined]
                and (function := module.enclosing_function(call)) is not None and function not in found and _is_a_method(function)
                and module.held_by_self(call.func.value, function)  # type: ignore[attr-defined]
            }
            if not more:
                break
            found |= more
        return frozenset(found)

    def held_by_self(self, expr: cst.BaseExpression, method: cst.FunctionDef) -> bool:
        """Whether an expression in a method is its object or a part of it: rooted at ``self``
        (``self.meters["loss"]``), or a loop variable over such a part (``meter`` of ``for meter in
        self.meters.values()``, ``for name, meter in self.meters.items()``)."""
        while type(expr) in (cst.Attribute, cst.Subscript, cst.Call):
            expr = expr.func if type(expr) is cst.Call else expr.value  # type: ignore[attr-defined]
        if type(expr) is not cst.Name:
            return False
        if expr.value == "self":  # type: ignore[attr-defined]
            return True
        return any(
            expr.value in _target_names(loop.target) and self.held_by_self(loop.iter, method)  # type: ignore[attr-defined]
            for loop in (n for n in self.ancestors(expr) if type(n) is cst.For)
            if self.is_inside(loop, method)
        )

    def is_reduction(self, call: cst.Call) -> bool:
        """Whether a call's value is combined across ranks: a reduction of torch or the runtime, or a call of
        one of the program's functions that returns one (:attr:`program_reducing_functions`)."""
        if self.is_call_to(call, names.REDUCTIONS):
            return True
        reducing = self.program_reducing_functions
        return bool(reducing) and any(target in reducing for target in self.targets_of(call))

    def reduces_in_place(self, call: cst.Call) -> bool:
        """Whether a method call reduces its receiver's values across ranks (:attr:`program_reducing_methods`)."""
        methods = self.program_reducing_methods
        return bool(methods) and any(target in methods for target in self.targets_of(call))

    @cached_property
    def program_ddp_forward_calls(self) -> list[cst.Call]:
        """The calls, in every module of the program, that run a ``DistributedDataParallel`` model's
        forward (``model(x)`` where ``model`` holds the wrap): the steps whose backward pass all-reduces."""
        found = []
        for module in self.shared.analyses:
            for call in module.calls:
                if type(call.func) is cst.Name or type(call.func) is cst.Attribute:
                    wrap = module.wrapped_at(call.func)
                    if wrap is not None and module.is_call_to(wrap, names.DISTRIBUTED_DATA_PARALLEL):
                        found.append(call)
        return found

    def is_scheduler_construction(self, call: cst.Call) -> bool:
        """Whether the call builds a ``torch.optim.lr_scheduler`` scheduler (``StepLR(optimizer, ...)``)."""
        return any(q.startswith(SCHEDULER_PREFIX) and q.count(".") == 3 for q in self.qualified_names(call.func))

    @cached_property
    def torch_optimizer_calls(self) -> list[cst.Call]:
        """Constructor calls of ``torch.optim`` optimizers (``torch.optim.SGD(...)``)."""
        return [
            c
            for c in self.calls
            if any(q.startswith("torch.optim.") and q.count(".") == 2 for q in self.qualified_names(c.func))
        ]

    @cached_property
    def optimizer_calls(self) -> list[cst.Call]:
        """The optimizers the module builds: ``torch.optim`` constructors, and the calls that take a model's
        parameters and are used as an optimizer (:meth:`_builds_optimizer`): a class of the program derived
        from a ``torch.optim`` one (``class LARS(Optimizer)``), one of another library (``Lion(...)``), one
        looked up by name (``OPTIMIZERS[cfg["type"]](...)``, ``getattr(torch.optim, name)(...)``); source order."""
        known = set(self.torch_optimizer_calls)
        return [call for call in self.calls if call in known or self._builds_optimizer(call)]

    def _builds_optimizer(self, call: cst.Call) -> bool:
        """Whether a call that is not a ``torch.optim`` constructor builds an optimizer: its value is stepped
        (``opt.step()``, ``scaler.step(opt)``), its class derives from a ``torch.optim`` class, or the name it
        is stored in says it holds one (``optimizer = ...``); and model parameters reach its arguments, not
        through another optimizer (a learning-rate scheduler, an optimizer wrapper: they take the optimizer)."""
        if not call.args:
            return False
        shared = self.shared
        built = shared.constructed.get(call)
        if built is None and call in shared.call_targets:
            return False  # a function of the program: what it returns is built, and read, in it
        optimizer_class = built is not None and self._derives_from_torch_optimizer(built)
        if built is not None and not optimizer_class:
            return False  # a class of the program that is no Optimizer (an EMA teacher's ``step()``)
        if not optimizer_class and call not in shared.stepped_values() and not _stored_as_optimizer(self.parent(call)):
            return False
        if self.is_scheduler_construction(call):
            return False
        if not self._parameter_calls(call) and not self._models_in_arguments(call):
            return False
        return not any(self._may_hold_an_optimizer(arg.value, call) for arg in call.args)

    def _models_in_arguments(self, call: cst.Call) -> list[str]:
        """The models an optimizer's call is given whole or by their tensors, where no ``parameters()`` call
        says so: ``create_optimizer(model, "adamw")`` of a library, ``SGD([{"params": model.weight}, ...])``; a
        model is a name the program calls (``model(x)``) that holds a built object, not a function."""
        found: list[str] = []
        for arg in call.args:
            for node in tree.walk(arg.value):
                kind = type(node)
                if kind is cst.Attribute:
                    name = dotted_name(node.value)  # type: ignore[attr-defined]
                elif kind is cst.Name:
                    name = node.value  # type: ignore[attr-defined]
                else:
                    continue
                if name is None or name in found or name not in self.shared.called_names():
                    continue
                target = node.value if kind is cst.Attribute else node  # type: ignore[attr-defined]
                if any(type(origin) is cst.Call for origin in self.origins(target)):  # type: ignore[arg-type]
                    found.append(name)
        return found

    def _may_hold_an_optimizer(self, expr: cst.BaseExpression, user: cst.Call) -> bool:
        """Whether an argument of ``user`` may hold an optimizer: a ``torch.optim`` one, one of a class derived
        from those, or another value the program steps."""
        stepped = self.shared.stepped_values()
        for origin in self.origins(expr):
            if origin is user or type(origin) is not cst.Call:
                continue
            home = self.shared.analysis_of(origin) or self
            built = self.shared.constructed.get(origin)  # type: ignore[call-overload]
            if origin in stepped or origin in home.torch_optimizer_calls or (built is not None and home._derives_from_torch_optimizer(built)):
                return True
        return False

    def _steps_the_optimizer_it_makes(self, init: cst.FunctionDef, home: ScriptAnalysis, made: cst.Call) -> bool:
        """Whether the object a call makes (``model = Net(0.1)``) is a module (its class derives from a ``torch.nn``
        class) whose ``__init__`` (or a base class's) keeps an optimizer of its own (``self.optimizer = SGD(self.parameters())``) that
        the caller's module steps (``model.optimizer.step()``): a trained model. (Not an agent object that only
        forwards ``parameters()``, nor a copy that is never stepped: a DQN's target network.)"""
        cls = self.enclosing_class(init)
        if cls is None or not self._derives(cls, lambda qualified: any(q.startswith("torch.nn.") for q in qualified), set()):
            return False
        kept: set[str] = set()
        for ancestor in self.shared.ancestors_of(cls):  # (an ``__init__`` of a base class the subclass's calls)
            owner = self.shared.analysis_of(ancestor) or self
            optimizers = set(owner.optimizer_calls)
            for method in ancestor.body.body:
                if type(method) is cst.FunctionDef and method.name.value == "__init__":
                    kept |= {
                        name[len("self."):]
                        for assign in owner.assignments_in(method)
                        if assign.value in optimizers
                        for name in (dotted_name(target) for target in assignment_targets(assign))
                        if name is not None and name.startswith("self.") and name.count(".") == 1
                    }
        target = home.assigned_to(made)
        held = dotted_name(target) if target is not None else None
        if not kept or held is None:
            return False
        stepped = {f"{held}.{attribute}" for attribute in kept}
        return any(
            dotted_name(call.func.value) in stepped or any(dotted_name(arg.value) in stepped for arg in call.args)  # type: ignore[attr-defined]
            for call in home.method_calls("step")
        )

    def _derives_from_torch_optimizer(self, cls: cst.ClassDef) -> bool:
        """Whether a class of the program derives, through the program's classes, from a ``torch.optim`` class."""
        for ancestor in self.shared.ancestors_of(cls):
            home = self.shared.analysis_of(ancestor) or self
            for base in ancestor.bases:
                if any(q.startswith("torch.optim.") for q in home.qualified_names(base.value)):
                    return True
        return False

    def holds_optimizer(self, expr: cst.BaseExpression) -> bool:
        """Whether an expression holds a ``torch.optim`` optimizer: one of its origins is an optimizer's
        construction, or, where the analysis sees none (an optimizer built by a library's factory), its name
        says so (``optimizer``, ``self.optim``)."""
        if not self.program_optimizer_calls.isdisjoint(self.origins(expr)):
            return True  # (built in any module: a Trainer of its own module steps the optimizer the entry built)
        return names_an_optimizer(dotted_name(expr))

    @property
    def program_optimizer_calls(self) -> frozenset[cst.Call]:
        """The optimizers built in every module of the program, read once per program."""
        cache = self.shared.__dict__.setdefault("_program_optimizer_calls", {})
        if "calls" not in cache:
            cache["calls"] = frozenset(call for analysis in self.shared.analyses for call in analysis.optimizer_calls)
        return cache["calls"]

    def is_optimizer_step(self, call: cst.Call) -> bool:
        """``optimizer.step()``, or a step taking the optimizer (``scaler.step(optimizer)``)."""
        if call_method_name(call) != "step":
            return False
        receiver = call.func.value  # type: ignore[attr-defined]
        return self.holds_optimizer(receiver) or any(self.holds_optimizer(a.value) for a in call.args)

    @cached_property
    def optimizer_step_calls(self) -> list[cst.Call]:
        """Every optimizer step of the module (:meth:`is_optimizer_step`)."""
        return [call for call in self.method_calls("step") if self.is_optimizer_step(call)]

    @cached_property
    def program_optimizer_step_calls(self) -> list[cst.Call]:
        """Every optimizer step in every module of the program that may run with this one (see
        :attr:`program_backward_calls`)."""
        return [call for analysis in self.shared.analyses for call in analysis.optimizer_step_calls if self._may_run_here(analysis, call)]

    @cached_property
    def hand_trained_models(self) -> list[tuple[str, cst.For]]:
        """Models whose parameters the module updates by hand from their gradients, with the loop that does it:
        ``for p in model.parameters(): p.data.add_(p.grad, alpha=-lr)`` (the word-language-model example's
        SGD), ``p -= lr * p.grad`` under ``no_grad``; no optimizer takes them."""
        found: list[tuple[str, cst.For]] = []
        for loop in self.for_loops:
            if not (type(loop.iter) is cst.Call and call_method_name(loop.iter) == "parameters" and type(loop.target) is cst.Name):
                continue
            model = dotted_name(loop.iter.func.value)  # type: ignore[attr-defined]
            if model is None:
                continue
            param = loop.target.value  # type: ignore[attr-defined]
            reads_grad = updates = False
            for node in tree.walk(loop.body):
                if type(node) is cst.Attribute and node.attr.value == "grad" and dotted_name(node.value) == param:  # type: ignore[attr-defined]
                    reads_grad = True
                elif type(node) is cst.Call and (call_method_name(node) or "") in ("add_", "sub_", "copy_") and dotted_name(node.func.value) in (param, f"{param}.data"):  # type: ignore[arg-type, attr-defined]
                    updates = True
                elif type(node) is cst.AugAssign and dotted_name(node.target) in (param, f"{param}.data"):  # type: ignore[attr-defined]
                    updates = True
            if reads_grad and updates:
                found.append((model, loop))
        return found

    @cached_property
    def trained_models(self) -> list[str]:
        """Dotted names whose ``parameters()`` are handed to an optimizer (``model``, ``self.net``): in the
        optimizer's call, or through the values that flow into its arguments (``params =
        list(model.parameters())``, a weight-decay split that appends from ``model.named_parameters()``, a
        function parameter the callers fill with ``model.parameters()``; see :meth:`flows_into`). A model a
        function of the program builds its optimizer for (``build_optimizer(model, cfg)``,
        ``model.configure_optimizers(lr)``) is named where that function is called, with the caller's name."""
        return list(self.model_training_sites)

    @property
    def model_training_sites(self) -> dict[str, list[cst.Call]]:
        """Each model of :attr:`trained_models`, with the calls of this module that make it trained: the
        optimizer's construction, or the call of the program's function that builds the optimizer for it."""
        return self._training_sites[0]

    @cached_property
    def _training_sites(self) -> tuple[dict[str, list[cst.Call]], dict[str, tuple[cst.Call, cst.FunctionDef]]]:
        """:attr:`model_training_sites` and :attr:`models_training_themselves`, found in one walk up the calls."""
        found: dict[str, list[cst.Call]] = {}
        for optimizer, function, name in self._optimized_receivers:
            # (``self`` in a method no call of the program runs, ``configure_optimizers`` a library calls: no
            # object of this module to wrap)
            if not self._handed_in(function, name) and name != "self":
                # ``model_without_ddp = model`` then ``SGD(model_without_ddp.parameters())``, the forward run as
                # ``model(x)``: the model to wrap is the name its forward runs through.
                found.setdefault(self._model_named_behind(optimizer, name), []).append(optimizer)
        # A model handed in is trained where the function's callers hand it: followed up the calls, through
        # functions that are handed it in turn (``model.configure_optimizers()`` in a Trainer's ``__init__``
        # of another module, the Trainer built in ``train.py``), a few calls deep.
        themselves: dict[str, tuple[cst.Call, cst.FunctionDef]] = {}
        pending = [
            (analysis, function, name, 0, function if name == "self" and analysis._trains_itself(function) else None)
            for analysis in self.shared.analyses
            for _, function, name in analysis._optimized_receivers
            if function is not None and analysis._handed_in(function, name)
        ]
        seen: set[tuple[cst.FunctionDef, str]] = set()
        while pending:
            analysis, function, name, depth, method = pending.pop()
            if (function, name) in seen:
                continue
            seen.add((function, name))
            root, dot, rest = name.partition(".")
            for caller in analysis.callers_in_program(function):
                home = self.shared.analysis_of(caller) or self
                if root == "self":
                    passed = caller.func.value if type(caller.func) is cst.Attribute else None  # type: ignore[attr-defined]
                    outer = home.enclosing_function(caller)
                    if type(passed) is cst.Call and dotted_name(passed.func) == "super":  # type: ignore[attr-defined]
                        # ``super().__init__(lr)`` of a subclass: its objects are made where the subclass is
                        if depth < 3 and outer is not None and outer.name.value == function.name.value == "__init__":
                            pending.append((home, outer, "self", depth + 1, method))
                        continue
                    if passed is None and function.name.value == "__init__" and analysis._steps_the_optimizer_it_makes(function, home, caller):
                        # ``model = Net(lr)`` of a module whose ``__init__`` builds its optimizer: the object made
                        passed = home.assigned_to(caller)
                else:
                    passed = home.argument_for(caller, function, root)
                passed_name = home._model_behind(caller, passed) if passed is not None else None
                if passed_name is None:
                    continue
                parts = f"{passed_name}{dot}{rest}".split(".")
                held = ".".join(parts[:2] if parts[0] == "self" else parts[:1])
                outer = home.enclosing_function(caller)
                if depth < 3 and outer is not None and "." not in held and held != "self" and home._handed_in(outer, held):
                    pending.append((home, outer, held, depth + 1, method))  # (handed in here too: trained where it comes from)
                    continue
                if home is not self:
                    continue
                sites = found.setdefault(held, [])
                if caller not in sites:
                    sites.append(caller)
                if method is not None:
                    themselves.setdefault(held, (caller, method))
        return found, themselves

    @property
    def models_training_themselves(self) -> dict[str, tuple[cst.Call, cst.FunctionDef]]:
        """The trained models of this module whose training runs in a method of their own class, forward on
        ``self`` (``model.fit(loader)`` of ``def fit(self, loader): ... self(x) ... loss.backward()``), with the
        call here that starts it and the method: a DDP wrap around the object would never see that forward,
        so its gradients would not be averaged (``model.module.fit(...)`` trained each replica on its own)."""
        return self._training_sites[1]

    def runs_its_own_training_step(self, method: cst.FunctionDef) -> bool:
        """Whether a method of a class of the program runs a training step of its object: it reaches a ``backward()``
        of its class and a ``step()`` (an optimizer's, a scheduler's), in it or in what it calls, wherever the
        optimizer was built (``def fit(self, loader, optimizer)``). Called through a wrapper's ``.module``, its
        forward never passes the wrapper's, so DDP never all-reduces its gradients. (A backward that steps
        nothing, for the gradients of an input, trains nothing.)"""
        home = self.shared.analysis_of(method) or self
        steps = [step for step in home.method_calls("step") if not home._steps_an_input(step, method)]
        return home._trains_itself(method) and home.reaches(method, steps)

    def _steps_an_input(self, step: cst.Call, method: cst.FunctionDef) -> bool:
        """Whether a ``step()`` in the method steps an optimizer the method builds over values that are none of its
        object's (``opt = Adam([delta])`` of an adversarial attack, a feature visualisation): no training of the
        model."""
        if not self.is_inside(step, method) or type(step.func) is not cst.Attribute:
            return False
        origins = self.origins(step.func.value)  # type: ignore[attr-defined]
        optimizers = set(self.optimizer_calls) | set(self.torch_optimizer_calls)
        return bool(origins) and all(
            origin in optimizers
            and self.is_inside(origin, method)
            and not any(type(node) is cst.Name and node.value == "self" for node in walk(origin))  # type: ignore[attr-defined]
            for origin in origins
        )

    def _trains_itself(self, function: cst.FunctionDef) -> bool:
        """Whether the method runs a ``backward()`` of its own class (in it, or in a method it calls): the object runs
        its training step itself (its forward on ``self`` or on its own layers), never through whatever wraps it."""
        cls = self.enclosing_class(function)
        if cls is None:
            return False
        # (a backward the method runs: another method's, an input-saliency pass, trains nothing of this call)
        return self.reaches(function, [call for call in self.backward_calls if self.is_inside(call, cls)])

    @cached_property
    def models_built_in_calls(self) -> list[cst.BaseExpression]:
        """The models this module builds right in the call that hands them to a function of the program whose
        optimizer trains them (``Trainer(nn.Linear(4, 1), loader)``, ``fit(Net(), data)``), and that no wrap of
        the program takes (a trainer may wrap what it is given): trained models with no name to wrap."""
        found: list[cst.BaseExpression] = []
        for analysis in self.shared.analyses or [self]:
            for _, function, name in analysis._optimized_receivers:
                if function is None or "." in name or name == "self" or not analysis._handed_in(function, name):
                    continue
                for caller in analysis.callers_in_program(function):
                    if not self.owns(caller):
                        continue
                    passed = self.argument_for(caller, function, name)
                    if passed is not None and self.builds_layer(passed) and passed not in found:
                        found.append(passed)
        wrapped = [
            (self.shared.analysis_of(wrap) or self).origins(wrapped_argument(wrap) or wrap) for wrap in self.program_wrap_calls
        ]
        return [built for built in found if not any(built in origins for origins in wrapped)]

    def _model_behind(self, at: cst.CSTNode, passed: cst.BaseExpression) -> str | None:
        """The name of the model a value handed to an optimizer's builder is: the name itself where the program
        runs it (``model(x)``), else the one model name its value is computed from (``raw_model = model.module
        if hasattr(model, "module") else model``: the wrap belongs to ``model``, which runs the forward), else
        the name itself."""
        name = dotted_name(passed)
        return None if name is None else self._model_named_behind(at, name)

    def _model_named_behind(self, at: cst.CSTNode, name: str) -> str:
        """:meth:`_model_behind` of a name."""
        called = self.shared.called_names()
        if "." in name:
            return name
        # (what the optimizer's own function calls: ``enc = model.encoder`` trained through ``model(x)`` there,
        # whatever another function calls its own ``enc`` parameter)
        scope = self.enclosing_function(at)
        here = {dotted_name(c.func) for c in self.calls if self.enclosing_function(c) is scope}
        if name in here:
            return name
        behind: set[str] = set()
        for value in self.flows_into(at, name):
            for node in _copied_names(value):  # (``model_without_ddp = model.module if ddp else model``; not the
                parts = (dotted_name(node) or "").split(".")  # arguments of a call: ``net = fit(net, criterion)``)
                root = ".".join(parts[:2] if parts[0] == "self" else parts[:1])
                if root in called and (name not in called or root in here):
                    behind.add(root)
        return behind.pop() if len(behind) == 1 else name

    @cached_property
    def _optimized_receivers(self) -> list[tuple[cst.Call, cst.FunctionDef | None, str]]:
        """The models this module's optimizers train, as the optimizer's side names them (``self.net``,
        ``model``; ``self`` for the object whose method builds it), with the optimizer and the function that
        builds it."""
        found: list[tuple[cst.Call, cst.FunctionDef | None, str]] = []
        for optimizer in self.optimizer_calls:
            function = self.enclosing_function(optimizer)
            receivers = [r for call in self._parameter_calls(optimizer) for r in self._receivers_of(call, function)]
            if not receivers:
                receivers = self._models_in_arguments(optimizer)
            for receiver in receivers:
                parts = receiver.split(".")
                name = ".".join(parts[:2] if parts[0] == "self" else parts[:1])
                if (optimizer, function, name) not in found:
                    found.append((optimizer, function, name))
        return found

    def _handed_in(self, function: cst.FunctionDef | None, name: str) -> bool:
        """Whether a model an optimizer of ``function`` trains is handed to it by its callers: a parameter of
        the function, or the object a method of the model's own class is called on (``self``), where the
        program calls the function."""
        if function is None:
            return False
        if name == "self":
            if self.enclosing_class(function) is None:
                return False
        elif "." in name or not self.is_parameter(function, name):
            return False
        return bool(self.callers_in_program(function))

    @cached_property
    def free_parameters(self) -> list[tuple[cst.Call, cst.Call]]:
        """Trainable tensors of no module that reach an optimizer of this module, with the optimizer: an
        ``nn.Parameter(...)`` or a tensor made with ``requires_grad=True`` (:meth:`makes_trainable_tensor`),
        held in a name or a list (``opt = SGD(list(model.parameters()) +
        [log_temperature])``), not assigned to an attribute (``self.scale = nn.Parameter(...)`` registers it in
        the module: a module's parameters reach the optimizer through ``parameters()``). DDP averages the
        gradients of the module it wraps only: such a tensor is stepped with each process's own gradient."""
        found: list[tuple[cst.Call, cst.Call]] = []
        added = [call for call in self.calls if call_method_name(call) == "add_param_group" and call.args]
        for optimizer in self.optimizer_calls:
            given = [arg.value for arg in optimizer.args]
            for call in added:  # ``opt.add_param_group({"params": [log_vars]})``: trained by that optimizer too
                if optimizer in self.origins(call.func.value):  # type: ignore[attr-defined]
                    given += [arg.value for arg in call.args]
            for call in self.feeding_calls(given):
                home = self.shared.analysis_of(call) or self
                if not home.makes_trainable_tensor(call):
                    continue
                assign = home.parent(call)
                targets = [t.target for t in assign.targets] if type(assign) is cst.Assign else []  # type: ignore[attr-defined]
                if any(type(t) is cst.Attribute for t in targets):
                    continue
                if any(home._gradient_averaged(dotted_name(t)) for t in targets if type(t) is cst.Name):
                    continue  # ``dist.all_reduce(log_temperature.grad)``: averaged by hand
                if (optimizer, call) not in found:
                    found.append((optimizer, call))
        return found

    def _gradient_averaged(self, name: str | None) -> bool:
        """Whether a collective of the program reduces the gradient of the tensor a name holds
        (``dist.all_reduce(scale.grad)``)."""
        return name is not None and any(
            call.args and dotted_name(call.args[0].value) == f"{name}.grad"
            for analysis in self.shared.analyses
            for call in analysis.calls_to(names.TORCH_COLLECTIVES | names.REDUCTIONS)
        )

    def makes_trainable_tensor(self, call: cst.Call) -> bool:
        """``nn.Parameter(...)`` or ``torch.zeros(..., requires_grad=True)`` outside a class (a module's
        methods register what they make: ``self.register_parameter("w", w)``)."""
        if self.enclosing_class(call) is not None:
            return False
        if self.is_call_to(call, names.PARAMETER):
            return True
        flag = keyword_argument(call, "requires_grad")
        return flag is not None and type(flag.value) is cst.Name and flag.value.value == "True"  # type: ignore[attr-defined]

    def _receivers_of(self, call: cst.Call, home: cst.FunctionDef | None) -> list[str]:
        """The model a ``parameters()`` call is made on, as the optimizer's side names it: in a helper the
        optimizer's function calls, the helper's parameter (``def trainable(module): return [p for p in
        module.parameters() ...]``) stands for what its callers pass (``trainable(student)``)."""
        receiver = dotted_name(call.func.value)  # type: ignore[attr-defined]
        if receiver is None:
            receiver = self._model_indexed(call.func.value)  # type: ignore[attr-defined]
        if receiver is None:
            return []
        root, dot, rest = receiver.partition(".")
        function = self.enclosing_function(call)
        owner = self.shared.analysis_of(call) or self
        walked = owner._module_walked(function or owner.module_of(call), root)
        if walked is not None and not owner._runs_or_is_handed(walked[0], function):
            walked = None  # (``for m in backbone.modules()`` of a part that ``model = Sequential(backbone, head)`` runs)
        if walked is not None:
            # ``for m in model.modules(): m.named_parameters(recurse=False)``: the parameters are the model's
            receiver, at = walked
            root, dot, rest = receiver.partition(".")
        else:
            at = call.func.value if not dot else _root_of(call.func.value)  # type: ignore[attr-defined]
        if function is None or function is home or root in ("self", "cls") or not self.is_parameter(function, root):
            return [receiver]
        passed = [dotted_name(value) for value in owner.flows_into(at, root)]
        return [f"{name}{dot}{rest}" for name in passed if name is not None]

    def _runs_or_is_handed(self, name: str, function: cst.FunctionDef | None) -> bool:
        """Whether a model name is run by the program (``model(x)``, somewhere) or is a parameter of the
        function (its callers say which model)."""
        parts = name.split(".")
        root = ".".join(parts[:2] if parts[0] == "self" else parts[:1])
        return root in self.shared.called_names() or (function is not None and "." not in root and self.is_parameter(function, root))

    def _module_walked(self, scope: cst.CSTNode, name: str) -> tuple[str, cst.BaseExpression] | None:
        """The model whose submodules a loop of the scope binds the name to (``model`` of ``for m in
        model.modules()``, ``for _, m in model.named_children()``), with its expression; ``None`` where no such
        loop binds it."""
        return self._submodule_loops.get((scope, name))

    @cached_property
    def _submodule_loops(self) -> dict[tuple[cst.CSTNode, str], tuple[str, cst.BaseExpression]]:
        """:meth:`_module_walked` of every loop of the module, by scope and name bound (the first loop wins)."""
        found: dict[tuple[cst.CSTNode, str], tuple[str, cst.BaseExpression]] = {}
        for node in self.preorder:
            if type(node) is not cst.For:
                continue
            iterated = node.iter  # type: ignore[attr-defined]
            if type(iterated) is not cst.Call or call_method_name(iterated) not in SUBMODULE_WALKS:
                continue
            model = iterated.func.value  # type: ignore[attr-defined]
            owner = dotted_name(model)
            if owner is None:
                continue
            target = node.target  # type: ignore[attr-defined]
            bound = [e.value for e in target.elements] if type(target) is cst.Tuple else [target]
            scope = self.scope_of(node)
            for b in bound:
                if type(b) is cst.Name:
                    found.setdefault((scope, b.value), (owner, model))  # type: ignore[attr-defined]
        return found

    def _model_indexed(self, expr: cst.BaseExpression) -> str | None:
        """``model`` of ``model[0]`` where the container is itself run as a model (``model(x)``: an
        ``nn.Sequential``), so a parameter group per layer (``{"params": model[0].parameters()}``) trains it;
        not a list of models (``models[0]``, never called itself). So do ``getattr(model, name)`` and
        ``model.get_submodule(name)``."""
        if type(expr) is cst.Subscript:
            name = dotted_name(expr.value)  # type: ignore[attr-defined]
        elif type(expr) is cst.Call and dotted_name(expr.func) == "getattr" and expr.args:  # type: ignore[attr-defined]
            name = dotted_name(expr.args[0].value)  # ``getattr(model, "encoder")`` (per-part learning rates)  # type: ignore[attr-defined]
        elif type(expr) is cst.Call and call_method_name(expr) == "get_submodule":  # type: ignore[arg-type]
            name = dotted_name(expr.func.value)  # type: ignore[attr-defined]
        else:
            return None
        if name is None or not any(dotted_name(call.func) == name for analysis in self.shared.analyses for call in analysis.calls):
            return None
        return name

    def _parameter_calls(self, optimizer: cst.Call, depth: int = 4) -> list[cst.Call]:
        """The ``parameters()`` / ``named_parameters()`` calls whose values reach the optimizer's arguments
        (:meth:`feeding_calls`)."""
        return [
            call
            for call in self.feeding_calls([arg.value for arg in optimizer.args], depth)
            if call_method_name(call) in ("parameters", "named_parameters")
        ]

    def feeding_calls(self, roots: Iterable[cst.CSTNode], depth: int = 4, constructors: bool = False) -> list[cst.Call]:
        """The calls whose values may reach these expressions: the calls inside them, then, ``depth`` steps
        deep, those of the values their names may hold (:meth:`flows_into`, in the module the name is used
        in: an argument a caller passes, what is appended to a list, a list a ``shuffle`` reorders) and of
        what the program's functions they call return. With ``constructors``, a class of the program built
        on the way adds the calls its ``__init__`` makes (``Pairs(ids)`` whose ``__init__`` shuffles)."""
        found: list[cst.Call] = []
        # What was followed, with the most steps it had left then: reached again with more (a shorter path, taken
        # later), it is followed again, so the answer does not depend on the order of the walk.
        seen: dict[tuple[object, str], int] = {}
        seen_functions: dict[cst.FunctionDef, int] = {}
        pending: list[tuple[cst.CSTNode, int]] = [(root, depth) for root in roots]
        shared = self.shared
        while pending:
            node, left = pending.pop()
            home = shared.analysis_of(node) or self
            for part in tree.walk(node):
                kind = type(part)
                if kind is cst.Call:
                    found.append(part)  # type: ignore[arg-type]
                    function = shared.call_targets.get(part) if left > 0 else None  # type: ignore[arg-type]
                    if function is None or seen_functions.get(function, -1) >= left:
                        continue
                    seen_functions[function] = left
                    if part not in shared.constructed:
                        # A helper of the program: what it returns.
                        pending.extend((value, left - 1) for value in shared.returned_values(function))
                    elif constructors and function.name.value == "__init__":
                        pending.append((function.body, left - 1))
                elif (
                    left > 0
                    and (kind is cst.Name or kind is cst.Attribute)
                    and type(parent := home._parents.get(part)) is not cst.Attribute
                    and not home.bound_in_expression(part)
                ):
                    if kind is cst.Attribute and type(parent) is cst.Call and parent.func is part:  # type: ignore[attr-defined]
                        part = part.value  # type: ignore[attr-defined]  (``x.to(device)``: what ``x`` holds)
                        if type(part) not in (cst.Name, cst.Attribute) or home.bound_in_expression(part):
                            continue
                    name = dotted_name(part)
                    key = (home.scope_of(part), name or "")
                    if name is not None and seen.get(key, -1) < left:
                        seen[key] = left
                        pending.extend((value, left - 1) for value in home.flows_into(part, name))
        return list(dict.fromkeys(found))  # (a part followed again with more steps left is found again)

    def bound_in_expression(self, node: cst.CSTNode) -> bool:
        """Whether a name is bound by a comprehension or a lambda around it (``p`` in ``[p for p in
        student.parameters() if p.requires_grad]``): its values are that expression's own, not those of
        the same name elsewhere in the function."""
        name = node.value if type(node) is cst.Name else None  # type: ignore[attr-defined]
        if name is None:
            return False
        for ancestor in self.ancestors(node):
            kind = type(ancestor)
            if kind in COMPREHENSIONS:
                comp: cst.CompFor | None = ancestor.for_in  # type: ignore[attr-defined]
                while comp is not None:
                    if any(type(t) is cst.Name and t.value == name for t in tree.walk(comp.target)):  # type: ignore[attr-defined]
                        return True
                    comp = comp.inner_for_in
            elif kind is cst.Lambda:
                if any(p.name.value == name for p in all_parameters(ancestor)):  # type: ignore[arg-type]
                    return True
            elif isinstance(ancestor, (cst.BaseStatement, cst.BaseSmallStatement)):
                return False
        return False

    def flows_into(self, node: cst.CSTNode, name: str) -> list[cst.CSTNode]:
        """The expressions whose values a name may hold, in its scope (flow-insensitive): what is assigned
        to it (``=``, ``+=``), appended or added to it, the iterable of a loop over it, the ``shuffle`` call
        that reorders it in place (``random.shuffle(ids)``), and for a parameter
        of a function the arguments its callers pass."""
        scope = self.scope_of(node)
        flows = list(self._value_flows.get((scope, name), ()))
        if isinstance(scope, cst.FunctionDef) and "." not in name and self.is_parameter(scope, name):
            for call in self.callers_in_program(scope):
                owner = self.shared.analysis_of(call) or self
                argument = owner.argument_for(call, scope, name)
                if argument is not None:
                    flows.append(argument)
        elif not flows and isinstance(scope, cst.FunctionDef) and "." not in name and not self.binds_locally(scope, name):
            # A free variable of a nested function (``stoi`` read by ``def collate(batch)`` inside ``main``):
            # what the functions around it assign to the name.
            outer = self.enclosing_function(scope)
            while outer is not None and not flows:
                flows = list(self._value_flows.get((outer, name), ()))
                outer = self.enclosing_function(outer)
        return flows

    def attribute_flows(self, node: cst.CSTNode, name: str) -> list[cst.CSTNode]:
        """:meth:`flows_into` for ``self.x`` read in a method: what every method of the class, of the classes
        it derives from and of those derived from it assigns to ``self.x`` (``self.loaders = loaders`` in
        ``__init__``, read in ``run_epoch``); for any other name, :meth:`flows_into`."""
        key = self._key(node, name)
        owner = key[0]
        if type(owner) is not cst.ClassDef:
            return self.flows_into(node, name)
        flows: list[cst.CSTNode] = []
        for cls in self.shared.hierarchy_line(owner):  # type: ignore[arg-type]
            home = self.shared.analysis_of(cls) or self
            for method in own_methods(cls):
                flows.extend(home._value_flows.get((method, name), ()))
        return flows

    def copied_from(self, node: cst.BaseExpression, name: str) -> list[cst.BaseExpression]:
        """The names, attributes and items whose values the name used at ``node`` may be a copy of (``device =
        DEVICE``, either side of ``device = DEVICE if cuda else "cpu"``, a parameter given ``args.device`` by its
        callers), a global of the module's top level included."""
        values = self.flows_into(node, name)
        function = self.enclosing_function(node)
        if not values and function is not None and "." not in name and not self.binds_locally(function, name):
            values = self.assigned_values(None, name)
        sides = [side for value in values for side in ((value.body, value.orelse) if type(value) is cst.IfExp else (value,))]  # type: ignore[attr-defined]
        return [side for side in sides if binding_name(side) is not None]  # type: ignore[misc]

    def callers_in_program(self, function: cst.FunctionDef) -> list[cst.Call]:
        """The calls, in any module of the program, that run the function (:meth:`callers_of`: this file's)."""
        return self._program_callers.get(function, [])

    #: How many calls up :meth:`places_up_the_calls` follows a node.
    MAX_CALL_DEPTH = 6

    def places_up_the_calls(self, node: cst.CSTNode) -> list[tuple[ScriptAnalysis, cst.CSTNode]]:
        """Where the node runs, seen from each function up the calls that lead to it, with the analysis of
        the module each place is in: the node itself, then every call of its function (in any module of the
        program), then every call of that call's function, and so on (:attr:`MAX_CALL_DEPTH` levels)."""
        cached = self._places_found.get(node)
        if cached is not None:
            return list(cached)
        found: list[tuple[ScriptAnalysis, cst.CSTNode]] = []
        seen: set[cst.CSTNode] = set()
        level = [node]
        for _ in range(self.MAX_CALL_DEPTH + 1):
            above: list[cst.CSTNode] = []
            for current in level:
                if current in seen:
                    continue
                seen.add(current)
                home = self.shared.analysis_of(current) or self
                found.append((home, current))
                function = home.enclosing_function(current)
                if function is not None:
                    above.extend(home.callers_in_program(function))
            if not above:
                break
            level = above
        self._places_found[node] = tuple(found)
        return found

    def outside_its_branches(self, creation: cst.BaseStatement) -> cst.BaseStatement:
        """Where a model built in a branch is ready for everyone: the creation itself where the training follows it
        in its own block, else the ``if``/``try``/``with`` around it (``if resume: model = torch.load(path) else:
        model = Net()``, trained after the ``if``: a wrap in one branch leaves the other path unwrapped)."""
        stmt = creation
        while True:
            block = self.parent(stmt)
            if not isinstance(block, cst.IndentedBlock):
                return stmt
            body = list(statements_of(block))
            if stmt not in body or any(self.reaches_backward(later) for later in body[body.index(stmt) + 1 :]):
                return stmt
            outer = next(
                (a for a in self.ancestors(block) if isinstance(a, (cst.BaseCompoundStatement, cst.SimpleStatementLine))), None
            )
            if not isinstance(outer, (cst.If, cst.Try, cst.With)):
                return stmt  # (a loop, a function: the model is built there for what runs there)
            while isinstance(self.parent(outer), cst.If) and self.parent(outer).orelse is outer:  # type: ignore[union-attr]
                outer = self.parent(outer)  # an ``elif``: the whole chain
            stmt = outer

    def runs_before(self, first: cst.CSTNode, second: cst.CSTNode) -> bool:
        """Whether a run gets to ``first`` before ``second``, as far as the calls show: in one function (or
        module body) a place of the first (itself, or a call leading to it) is a statement that ends before
        a place of the second starts (``prepare_shards()`` then ``ds = load_all()`` in ``main``)."""
        seconds = self.places_up_the_calls(second)
        for home, place in self.places_up_the_calls(first):
            stmt = home.statement(place)
            function = home.enclosing_function(place)
            for other_home, other in seconds:
                if (
                    other_home is home
                    and home.enclosing_function(other) is function
                    and home.comes_before(stmt, other)
                    and not home.is_inside(other, stmt)
                    # (``if d: f() else: f()``; not in a function run again: ``stage(epoch)`` saves on the first pass, reads after)
                    and not (home.in_exclusive_branches(stmt, other) and home.runs_once(function))
                ):
                    return True
        return False

    def may_run_before(self, first: cst.CSTNode, second: cst.CSTNode) -> bool:
        """Whether a run may get to ``first`` before it gets to ``second`` (or again after it): ``False`` only
        where, up the calls (each function on the way called at one place), both run in one function (or module
        body), ``first``'s place comes after ``second``'s there with no loop of that function around both, and
        that function runs once (one call, in no loop, up to the module): the training loop's ``torch.save(ck,
        path)`` after the resume's ``torch.load(path)``, both in ``main``."""
        seconds = self._call_chain(second)
        firsts = self._call_chain(first)
        if any(home._repeats(place, lambdas_only=True) for home, place in (*firsts, *seconds)):
            return True  # (a lambda runs whenever it is called: no place in the text says when)
        levels = {(home, home.enclosing_function(place)): place for home, place in seconds}
        for home, place in firsts:
            function = home.enclosing_function(place)
            other = levels.get((home, function))
            if other is None:
                continue
            if home.is_inside(other, place) or home.is_inside(place, other) or home.comes_before(place, other):
                return True
            if any(type(a) in _REPEATING and home.is_inside(other, a) for a in home.ancestors(place) if function is None or home.is_inside(a, function)):
                return True  # (the loop's next round)
            return not home.runs_once(function)
        return True

    def _repeats(self, node: cst.CSTNode, lambdas_only: bool = False) -> bool:
        """Whether the node sits, within its function (or the module's body), in a lambda or (``lambdas_only``
        aside) in a loop or a comprehension: it may run more than once, or at another time than its place says."""
        for ancestor in self.ancestors(node):
            kind = type(ancestor)
            if kind is cst.FunctionDef or kind is cst.ClassDef:
                return False
            if kind is cst.Lambda or (not lambdas_only and kind in _REPEATING):
                return True
        return False

    def binding_in_effect(self, node: cst.CSTNode, name: str) -> cst.CSTNode | None:
        """The statement whose binding of a plain name is the one in effect at the node, where straight-line code
        shows it: the last assignment of the name (``cst.Assign``, ``cst.AnnAssign``) before the node's statement
        in its block or a block around it, within its function (or the module's body), or the ``for`` loop whose
        target binds it when the node is in that loop. ``None`` where a statement before it may rebind the name
        on some paths only (an ``if``, a loop, ``+=``), a loop around the node rebinds it later in its body (the
        next round reads that), or nothing binds it there (a parameter, a global). Kept per node and name."""
        cache = self.derived("bindings in effect", lambda _: {})
        key = (node, name)
        if key not in cache:
            cache[key] = self._find_binding_in_effect(node, name)
        return cache[key]

    def _find_binding_in_effect(self, node: cst.CSTNode, name: str) -> cst.CSTNode | None:
        current: cst.CSTNode = self.statement(node)
        for ancestor in self.ancestors(node):
            if ancestor is current:
                break
            if type(ancestor) is cst.Lambda or type(ancestor) in COMPREHENSIONS:
                return None  # (a lambda runs later; a comprehension binds names of its own)
        if isinstance(current, (cst.While, cst.For)) and name in self.names_bound_in(current):
            return None  # (a loop's test or iterable read again after its body)
        while True:
            parent = self.parent(current)
            if parent is None or isinstance(parent, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
                return None
            if isinstance(parent, (cst.IndentedBlock, cst.Module)):
                for earlier in reversed(parent.body[: parent.body.index(current)]):  # type: ignore[arg-type]
                    if isinstance(earlier, cst.SimpleStatementLine):
                        for small in reversed(earlier.body):
                            if isinstance(small, (cst.Assign, cst.AnnAssign)) and small.value is not None:
                                targets = [t.target for t in small.targets] if isinstance(small, cst.Assign) else [small.target]
                                if any(name in _target_names(t) for t in targets):
                                    return small
                            if name in self.names_bound_in(small):
                                return None  # (``x += 1``, ``x[0] = v``, ``del x``, an import, ``global x``)
                    elif name in self.names_bound_in(earlier):
                        return None
                if isinstance(parent, cst.Module):
                    return None
            elif isinstance(parent, (cst.For, cst.While)):
                if isinstance(parent, cst.For) and current is parent.body and name in _target_names(parent.target):
                    return parent
                if name in self.names_bound_in(parent):
                    return None  # (a binding later in the loop's body reaches the next round; its ``else`` follows it)
            elif isinstance(parent, cst.If):
                if name in self.names_bound_in(parent.test):
                    return None  # (``if (x := f()) > 0:``)
            elif isinstance(parent, (cst.Try, cst.TryStar)):
                if current is not parent.body and name in self.names_bound_in(parent):
                    return None  # (an ``except``, ``else`` or ``finally`` after a try body that may have bound it)
            elif isinstance(parent, cst.With):
                if any(name in self.names_bound_in(item) for item in parent.items):
                    return None
            elif not isinstance(parent, (cst.Else, cst.ExceptHandler, cst.ExceptStarHandler, cst.Finally)):
                return None  # (a ``match`` statement, anything else: not straight-line code this reads)
            current = parent

    def rebinds(self, stmt: cst.CSTNode, name: str) -> bool:
        """Whether a statement binds a plain name anew (:meth:`names_bound_in`), not only changes what it holds
        (``model.fc = ...``, ``model[2] = ...``)."""
        return name in self._names_bound_and_changed(stmt)[1]

    def names_bound_in(self, stmt: cst.CSTNode) -> frozenset[str]:
        """The plain names a statement binds anywhere inside it (assignments, loop and ``with`` targets,
        ``except ... as``, ``:=``, definitions, imports, ``global``/``nonlocal``, ``del``), or whose values it
        changes in place (``stats[0] = v``), read once per statement."""
        return self._names_bound_and_changed(stmt)[0]

    def _names_bound_and_changed(self, stmt: cst.CSTNode) -> tuple[frozenset[str], frozenset[str]]:
        """The plain names a statement binds or changes in place (:meth:`names_bound_in`), and of those the ones it
        binds anew (:meth:`rebinds`), read once per statement."""
        cache = self.derived("names bound in", lambda _: {})
        found = cache.get(stmt)
        if found is None:
            bound: set[str] = set()
            changed: set[str] = set()
            for part in walk(stmt):
                kind = type(part)
                if kind is cst.AssignTarget or kind is cst.AsName:
                    target = part.target if kind is cst.AssignTarget else part.name  # type: ignore[attr-defined]
                    bound.update(_target_names(target))
                    changed.update(_changed_roots(target))
                elif kind in (cst.AugAssign, cst.AnnAssign, cst.NamedExpr):
                    bound.update(_target_names(part.target))  # type: ignore[attr-defined]
                    changed.update(_changed_roots(part.target))  # type: ignore[attr-defined]
                elif kind is cst.For or kind is cst.CompFor:
                    bound.update(_target_names(part.target))  # type: ignore[attr-defined]
                elif kind is cst.FunctionDef or kind is cst.ClassDef:
                    bound.add(part.name.value)  # type: ignore[attr-defined]
                elif kind is cst.ImportAlias:
                    bound.add((dotted_name(part.name) or "").split(".")[0])  # type: ignore[attr-defined]
                elif kind is cst.Global or kind is cst.Nonlocal:
                    bound.update(item.name.value for item in part.names)  # type: ignore[attr-defined]
                elif kind is cst.Del:
                    bound.update(_target_names(part.target))  # type: ignore[attr-defined]
            found = cache[stmt] = (frozenset(bound | changed), frozenset(bound))
        return found

    def runs_once(self, function: cst.FunctionDef | None) -> bool:
        """Whether a run goes through the function at most once, as far as the calls show: one call of it in the
        program (or one in each branch of one ``if``), in no loop, in a function that runs once, up to the module's
        body (``None``: the body)."""
        home: ScriptAnalysis = self
        for _ in range(self.MAX_CALL_DEPTH + 1):
            if function is None:
                return True
            home = self.shared.analysis_of(function) or home
            callers = home.callers_in_program(function)
            if not callers:
                return False
            home = self.shared.analysis_of(callers[0]) or home
            function = home.enclosing_function(callers[0])
            if any(home._repeats(call) for call in callers):
                return False  # (``for``, ``while``, ``[main(s) for s in seeds]``, a lambda)
            # Several calls in one function, each in its own branch of one ``if`` (``mp.spawn(main_worker, ...)`` made
            # a call, and ``else: main_worker(...)``): a run takes one of them.
            if len(callers) > 1 and not all(
                (self.shared.analysis_of(other) or home) is home
                and home.enclosing_function(other) is function
                and home._in_exclusive_branches(other, {first, *home.ancestors(first)})
                for i, first in enumerate(callers)
                for other in callers[i + 1 :]
            ):
                return False
        return False

    def _call_chain(self, node: cst.CSTNode) -> list[tuple[ScriptAnalysis, cst.CSTNode]]:
        """Where the node runs, up the calls, while each function on the way has one call in the program: the
        node, its function's call, that call's function's call, ... (a few levels). Kept per node."""
        chains = self.shared.__dict__.setdefault("_call_chains", {})
        found = chains.get(node)
        if found is None:
            home: ScriptAnalysis = self.shared.analysis_of(node) or self
            found = chains[node] = [(home, node)]
            for _ in range(self.MAX_CALL_DEPTH):
                function = home.enclosing_function(node)
                callers = home.callers_in_program(function) if function is not None else ()
                if len(callers) != 1:
                    break
                node = callers[0]
                home = self.shared.analysis_of(node) or home
                found.append((home, node))
        return found

    @cached_property
    def _program_callers(self) -> dict[cst.FunctionDef, list[cst.Call]]:
        grouped: dict[cst.FunctionDef, list[cst.Call]] = {}
        for call, target in self._program_call_targets():
            grouped.setdefault(target, []).append(call)
        return grouped

    def _program_call_targets(self) -> Iterator[tuple[cst.Call, cst.FunctionDef]]:
        """Each call of the program with each function it may run, as resolved so far (``self.train_step(b)`` of a
        base class runs each override)."""
        yield from self.shared.call_targets.items()
        for call, others in self.shared.other_targets.items():
            for target in others:
                yield call, target

    def names_in_target(self, target: cst.CSTNode) -> list[tuple[cst.CSTNode, str]]:
        """The names and attribute chains a value stored into ``target`` lands in, with their nodes: the
        target itself (``decay`` of ``decay.append(p)``, ``self.best``) and the names inside a tuple of
        them, not the parts of an attribute chain (``self`` of ``self.best``)."""
        found = []
        for part in self.nodes_below(target):
            name = dotted_name(part) if type(part) in (cst.Name, cst.Attribute) else None
            if name is not None and (part is target or type(self._parents.get(part)) is not cst.Attribute):
                found.append((part, name))
        return found

    @cached_property
    def _value_flows(self) -> dict[tuple[Scope, str], list[cst.CSTNode]]:
        """For each name of each scope, the expressions whose values it may hold (see :meth:`flows_into`)."""
        flows: dict[tuple[Scope, str], list[cst.CSTNode]] = {}

        def add(target: cst.CSTNode, value: cst.CSTNode, unpacks: bool = True) -> None:
            # (a worklist, not recursion: a closure calling itself is a reference cycle holding the analysis,
            # which only the cyclic collector could free)
            pending = [(target, value, unpacks)]
            while pending:
                target, value, unpacks = pending.pop()
                pairs = _unpacked_pairs(target, value) if unpacks else None
                if pairs is not None:  # ``G, D = DP(G), DP(D)``: each name its own value
                    pending.extend((part_target, part_value, True) for part_target, part_value in reversed(pairs))
                    continue
                for part, name in self.names_in_target(target):
                    flows.setdefault((self.scope_of(part), name), []).append(value)

        for node in self.preorder:
            kind = type(node)
            if kind is cst.Assign:
                for target in node.targets:  # type: ignore[attr-defined]
                    add(target.target, node.value)  # type: ignore[attr-defined]
            elif (kind is cst.AnnAssign or kind is cst.AugAssign) and node.value is not None:  # type: ignore[attr-defined]
                add(node.target, node.value)  # type: ignore[attr-defined]
            elif kind is cst.For:  # (``for a, b in (x, y)`` unpacks each of x and y: no pairs)
                add(node.target, node.iter, unpacks=False)  # type: ignore[attr-defined]
            elif kind is cst.Call and call_method_name(node) in ("append", "extend", "insert", "add", "update"):  # type: ignore[arg-type]
                for arg in node.args:  # type: ignore[attr-defined]
                    add(node.func.value, arg.value)  # type: ignore[attr-defined]
            elif kind is cst.Call and call_method_name(node) == "shuffle" and node.args:  # type: ignore[arg-type, attr-defined]
                # ``random.shuffle(ids)`` reorders ``ids`` in place: what ``ids`` holds depends on the draw.
                add(node.args[0].value, node)  # type: ignore[attr-defined]
        return flows

    def builds_layer(self, value: cst.BaseExpression) -> bool:
        """Whether a value is a new layer: ``nn.Linear(...)``, ``nn.Linear(...).to(device)``, or an instance
        of a class of the program (``Head(...)``): a structural change of a model, not a setting."""
        while isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute) and value.func.attr.value in ("to", "cuda", "cpu"):
            value = value.func.value
        if not isinstance(value, cst.Call):
            return False
        for qualified in self.qualified_names(value.func):
            parts = qualified.split(".")
            if parts[:2] == ["torch", "nn"] and parts[-1][:1].isupper():
                return True
        target = self.call_target(value)
        return target is not None and target.name.value == "__init__"

    def wrapped_at(self, expr: cst.BaseExpression) -> cst.Call | None:
        """The DDP/DP wrap that a name refers to at this point, if it is a wrapped model there."""
        origins = self.origins(expr)
        for wrap in self.program_wrap_calls:
            if wrap not in origins:
                continue
            same_scope = self.scope_of(wrap) is self.scope_of(expr)
            if same_scope and not self.comes_before(wrap, expr):
                continue
            if same_scope and self._copied_unwrapped(expr, wrap):
                continue
            if same_scope and self._unwrapped_in_effect(expr, wrap):
                continue
            if not same_scope and self._read_before_the_wrap_in_init(expr, wrap):
                continue
            return wrap
        return None

    def _read_before_the_wrap_in_init(self, expr: cst.BaseExpression, wrap: cst.Call) -> bool:
        """Whether ``self.model`` is read in a method that only ``__init__`` runs, before it stores the wrap
        there (``self._load_snapshot(path)`` and then ``self.model = DDP(self.model)``, the DDP tutorial's
        Trainer): the object is new, and its attribute still holds the model itself."""
        name = dotted_name(expr)
        method = self.enclosing_function(expr)
        if name is None or not name.startswith("self.") or method is None or method.name.value == "__init__":
            return False
        home = self.shared.analysis_of(wrap) or self
        init = home.enclosing_function(wrap)
        statement = home.parent(wrap)
        if (
            init is None or init.name.value != "__init__" or home.enclosing_class(init) is not self.enclosing_class(method)
            or type(statement) is not cst.Assign or [dotted_name(t.target) for t in statement.targets] != [name]  # type: ignore[attr-defined]
        ):
            return False
        callers = self.callers_in_program(method)
        # (every call by the method's name, resolved or not: ``trainer._load_snapshot(p)`` on an object a factory
        # built is another caller the resolution may not see)
        by_name = [call for module in self.shared.analyses for call in module.calls if call_method_name(call) == method.name.value]
        return bool(callers) and all(
            (self.shared.analysis_of(call) or self).enclosing_function(call) is init and home.comes_before(call, wrap)
            for call in {*callers, *by_name}
        )

    def _unwrapped_in_effect(self, expr: cst.BaseExpression, wrap: cst.Call) -> bool:
        """Whether straight-line code shows a name holding another value than the wrap where it is read: the
        binding in effect there unwraps (``model = model.module``, then ``model.fc = ...`` before the model is
        wrapped again) or takes a value the wrap does not reach."""
        if type(expr) is not cst.Name:
            return False
        binding = self.binding_in_effect(expr, expr.value)  # type: ignore[attr-defined]
        if type(binding) is not cst.Assign or len(binding.targets) != 1 or type(binding.targets[0].target) is not cst.Name:  # type: ignore[attr-defined]
            return False
        value = binding.value  # type: ignore[attr-defined]
        if self.is_unwrapped(value):
            return True
        # A value made from the name itself (``nn.SyncBatchNorm.convert_sync_batchnorm(model)``, ``torch.compile(model)``)
        # may be the wrapper still, whatever the analysis sees of its origins.
        reads_itself = any(type(n) is cst.Name and n.value == expr.value for n in walk(value))  # type: ignore[attr-defined]
        return not reads_itself and wrap not in self.origins(value)

    def _copied_unwrapped(self, expr: cst.BaseExpression, wrap: cst.Call) -> bool:
        """Whether a local name takes its values only from names that did not hold the wrap yet where they
        were copied (``model_without_ddp = model`` before ``model = DDP(model)``, then ``model_without_ddp =
        model.module``): the wrap reaches it through the flow-insensitive copy only."""
        if type(expr) is not cst.Name:
            return False
        scope = self.scope_of(expr)
        if isinstance(scope, cst.FunctionDef) and self.is_parameter(scope, expr.value):  # type: ignore[attr-defined]
            return False
        values = self.flows_into(expr, expr.value)  # type: ignore[attr-defined]
        if not values:
            return False
        for value in values:
            if wrap in walk(value) or type(value) not in (cst.Name, cst.Attribute):
                if wrap in self.origins(value):  # type: ignore[arg-type]
                    return False
                continue
            if type(value) is cst.Attribute and value.attr.value == "module":  # type: ignore[attr-defined]
                continue  # ``model.module``: the model inside the wrapper
            if wrap in self.origins(value) and self.comes_before(wrap, value):  # type: ignore[arg-type]
                return False  # a copy made once the name holds the wrapper
        return True

    def holds_unwrapped(self, expr: cst.BaseExpression) -> bool:
        """Whether every assignment of the name in its scope stores an unwrapped model (see
        :meth:`is_unwrapped`): such a name holds the model itself, whatever wraps the model it comes from."""
        name = dotted_name(expr)
        if name is None:
            return False
        if "." not in name and self._unwrapped_by_a_test(expr, name):
            return True
        values = self.assigned_values(self.enclosing_function(expr), name)
        return bool(values) and all(v is not None and self.is_unwrapped(v) for v in values)

    def _unwrapped_by_a_test(self, expr: cst.BaseExpression, name: str) -> bool:
        """Whether the name is used where a test that it is a wrapper failed (``else: copy.deepcopy(module)`` of ``if
        isinstance(module, nn.DataParallel):``, the body of ``if not hasattr(model, "module"):``) and that branch
        does not bind it again: the model itself is there (the migration extends such a test to DDP)."""
        child: cst.CSTNode = expr
        for ancestor in self.ancestors(expr):
            kind = type(ancestor)
            if kind is cst.FunctionDef or kind is cst.ClassDef or kind is cst.Lambda:
                return False
            if (kind is cst.If or kind is cst.IfExp) and child is not ancestor.test:  # type: ignore[attr-defined]
                test, negated = ancestor.test, False  # type: ignore[attr-defined]
                if type(test) is cst.UnaryOperation and type(test.operator) is cst.Not:  # type: ignore[attr-defined]
                    test, negated = test.expression, True  # type: ignore[attr-defined]
                if self.wrapper_tested(test) == name and (child is ancestor.orelse) != negated:  # type: ignore[attr-defined]
                    return kind is cst.IfExp or name not in self.names_bound_in(child)
            child = ancestor
        return False

    def wrapper_tested(self, test: cst.BaseExpression, depth: int = 0) -> str | None:
        """The name a test asks whether it holds a wrapper: ``isinstance(name, nn.DataParallel)`` (any wrapper class
        among those tested), ``hasattr(name, "module")``, ``type(name) in (DataParallel, DistributedDataParallel)``,
        or a helper of the program that returns such a test of its parameter (YOLOv5's ``is_parallel(model)``);
        ``None`` for any other test."""
        if type(test) is cst.Comparison and len(test.comparisons) == 1:  # type: ignore[attr-defined]
            left, comparison = test.left, test.comparisons[0]  # type: ignore[attr-defined]
            if type(left) is cst.Call and dotted_name(left.func) == "type" and len(left.args) == 1 and type(comparison.operator) in (cst.In, cst.Is, cst.Equal):  # type: ignore[attr-defined]
                given = comparison.comparator
                classes = [e.value for e in given.elements] if type(given) in (cst.Tuple, cst.List, cst.Set) else [given]
                return dotted_name(left.args[0].value) if any(self.qualified_names(c) & names.MODEL_WRAPPERS for c in classes) else None  # type: ignore[attr-defined]
            return None
        if type(test) is cst.Call and len(test.args) == 1 and depth == 0:  # type: ignore[attr-defined]
            helper = self.call_target(test)  # type: ignore[arg-type]
            if helper is not None and helper.params.params:
                home = self.shared.analysis_of(helper) or self
                returned = self.shared.returned_values(helper)
                parameter = helper.params.params[0].name.value
                if returned and all(home.wrapper_tested(r, depth + 1) == parameter for r in returned):
                    return dotted_name(test.args[0].value)  # type: ignore[attr-defined]
            return None
        if type(test) is not cst.Call or len(test.args) != 2:  # type: ignore[attr-defined]
            return None
        name = dotted_name(test.args[0].value)  # type: ignore[attr-defined]
        callee = dotted_name(test.func)  # type: ignore[attr-defined]
        second = test.args[1].value  # type: ignore[attr-defined]
        if callee == "hasattr":
            return name if type(second) is cst.SimpleString and second.evaluated_value == "module" else None  # type: ignore[attr-defined]
        if callee != "isinstance":
            return None
        classes = [e.value for e in second.elements] if type(second) is cst.Tuple else [second]  # type: ignore[attr-defined]
        return name if any(self.qualified_names(c) & names.MODEL_WRAPPERS for c in classes) else None

    def assigned_values(self, function: cst.FunctionDef | None, name: str) -> list[cst.BaseExpression]:
        """The values the function (``None``: the module's top level) itself assigns to a dotted name."""
        return [
            assign.value  # type: ignore[misc]
            for assign in self.assignments_in(function)
            if any(dotted_name(t) == name for t in _assign_targets(assign))
        ]

    def is_unwrapped(self, value: cst.BaseExpression) -> bool:
        """Whether an expression is the model inside a wrapper: ``model.module``, ``runtime.unwrap(model)``
        (or another unwrapping helper), ``model.module if isinstance(model, DataParallel) else model``."""
        return self._unwrapped(value, frozenset())

    def _unwrapped(self, value: cst.BaseExpression, reading: frozenset[cst.FunctionDef]) -> bool:
        """:meth:`is_unwrapped`, with the helpers of the program whose returns are being read (``reading``)."""
        if isinstance(value, cst.Attribute) and value.attr.value == "module":
            return True
        if isinstance(value, cst.Call):
            if callee_name(value) not in UNWRAP_FUNCTIONS:
                return False
            # A helper of the program is read, not taken by its name: ``get_model(device)`` may build the model
            # (a factory that wraps it), ``get_model(model)`` hand back ``model.module``.
            target = self.call_target(value)
            if target is None or target in reading:
                return True  # (a library's helper; one that calls itself: ``return unwrap(m.module) if ... else m``)
            returned = self.shared.returned_values(target)
            home = self.shared.analysis_of(target) or self
            return bool(returned) and all(home._unwrapped(r, reading | {target}) or _returns_its_parameter(target, r) for r in returned)
        if isinstance(value, cst.IfExp):
            body = value.body
            if isinstance(body, cst.Attribute) and body.attr.value == "module" and dotted_name(body.value) is not None:
                if dotted_name(body.value) == dotted_name(value.orelse):
                    return True  # ``model.module if distributed else model``
            return self._unwrapped(value.body, reading) and any(
                isinstance(n, cst.Call) and isinstance(n.func, cst.Name) and n.func.value in ("isinstance", "hasattr")
                for n in walk(value.test)
            )
        return False

    # -------------------------------------------------------------------- entry point

    @cached_property
    def main_guard(self) -> cst.If | None:
        """The top-level ``if __name__ == "__main__":`` block."""
        for stmt in self.module.body:
            if isinstance(stmt, cst.If) and _is_main_test(stmt.test):
                return stmt
        return None

    @cached_property
    def entry_function(self) -> cst.FunctionDef | None:
        """The function the main block runs (``main()``), when that block only calls one function of the file."""
        guard = self.main_guard
        if guard is None:
            return None
        targets = [
            target
            for call in self.calls
            if self.is_inside(call, guard) and (target := self._call_targets.get(call)) is not None
        ]
        top_level = [t for t in targets if self.parent(t) is self.module]
        return top_level[0] if len(set(top_level)) == 1 else None

    # ---------------------------------------------------------------------- rank guards

    # ------------------------------------------------------------------------ output

    @cached_property
    def logging_calls(self) -> list[cst.Call]:
        """``logging.info(...)``-style calls and calls of a ``logging.getLogger`` logger's methods (a logger
        made in any module of the program: ``logger = utils.get_logger(path)``)."""
        loggers = {call for module in self.shared.analyses for call in module.calls_to(names.GET_LOGGER)}
        found = []
        for call in self.calls:
            if self.is_call_to(call, names.LOGGING_CALLS):
                found.append(call)
            elif call_method_name(call) in names.LOGGER_METHODS and dotted_name(call.func.value):  # type: ignore[union-attr]
                if loggers & self.origins(call.func.value):  # type: ignore[union-attr]
                    found.append(call)
        return found

    # ------------------------------------------------------------------ distributed setup

    @cached_property
    def process_group_setups(self) -> list[cst.Call]:
        """Calls that set up a process group (``init_process_group`` or the runtime's ``setup``)."""
        return self.calls_to(names.INIT_PROCESS_GROUP | names.RUNTIME_SETUP)

    @cached_property
    def is_distributed(self) -> bool:
        """Whether the program already sets up a process group, in this module or any other (a helper
        such as ``utils.init_distributed_mode(args)``). Another entry script of the program (a sibling
        ``eval.py`` that shares the modules) never runs with this one: its set-up does not count."""
        return bool(self.running_group_setups)

    @cached_property
    def running_group_setups(self) -> list[cst.Call]:
        """The program's process group set-ups (``init_process_group``, the runtime's ``setup``) that may run
        with this module: in it or in a module that runs with it (:meth:`may_run`, not another entry's)."""
        return [call for analysis in self._runs_with for call in analysis.process_group_setups if self.may_run(call)]

    def may_run(self, node: cst.CSTNode) -> bool:
        """Whether the node may run at all: not inside a module-level function of the program that nothing
        calls or names (an ``init_distributed_mode(args)`` a helper module defines and the entry never
        calls). A method, a nested or a decorated function always may (its calls are not all resolved, and
        a decorator may register it to be called by name)."""
        home = self.shared.analysis_of(node) or self
        function = home.enclosing_function(node)
        if function is None or function.decorators or self.callers_in_program(function) or home.parent(function) is not home.module:
            return True
        name = function.name.value
        for analysis in self.shared.analyses:
            if name not in analysis.used_names:
                continue
            for found in analysis.index.preorder:
                if type(found) is cst.Name and found.value == name and found is not function.name:  # type: ignore[attr-defined]
                    if not any(type(a) in (cst.Import, cst.ImportFrom) for a in analysis.ancestors(found)):
                        return True
        return False

    @cached_property
    def group_set_up_by_runtime(self) -> bool:
        """Whether the runtime's ``setup()`` makes the program's process group (in this module or in
        another that runs with it)."""
        return any(analysis.calls_to(names.RUNTIME_SETUP) for analysis in self._runs_with)

    @cached_property
    def tears_down_group(self) -> bool:
        """Whether any module of the program destroys the process group (``destroy_process_group()`` or
        the runtime's ``cleanup()``)."""
        teardown = names.DESTROY_PROCESS_GROUP | names.RUNTIME_CLEANUP
        return any(analysis.calls_to(teardown) for analysis in self._runs_with)

    @property
    def _runs_with(self) -> list[ScriptAnalysis]:
        """The modules of the program that may run along with this one: all of them but the other entry scripts."""
        return [analysis for analysis in self.shared.analyses if analysis is self or not analysis.is_entry]

    @cached_property
    def group_needing_calls(self) -> frozenset[cst.Call]:
        """Calls, anywhere in the program, that need the process group or this process's device: model
        wraps, data loaders, optimizers, ``backward()``, device moves and ``torch.distributed`` calls."""
        found: set[cst.Call] = set()
        for analysis in self.shared.analyses:
            found.update(analysis.wrap_calls, analysis.loader_calls, analysis.optimizer_calls, analysis.backward_calls)
            for call in analysis.calls:
                method = call_method_name(call)
                if method in ("cuda", "to"):
                    found.add(call)
                elif any(q.startswith(("torch.distributed.", names.RUNTIME_MODULE + ".", "torch.device")) for q in analysis.qualified_names(call.func)):
                    found.add(call)
        return frozenset(found)

    @cached_property
    def execution_order(self) -> list[cst.BaseStatement]:
        """The entry module's top-level statements in the order a run executes them: the module's own
        statements (definitions and imports aside), then the body of its ``__main__`` block."""
        guard = self.main_guard
        order = [
            stmt
            for stmt in self.module.body
            if stmt is not guard and not isinstance(stmt, (cst.FunctionDef, cst.ClassDef)) and not is_import_line(stmt)
        ]
        if guard is not None:
            order.extend(statements_of(guard.body))
        return order

    @cached_property
    def first_group_need(self) -> cst.BaseStatement | None:
        """The first statement, in execution order from the entry, that needs the process group."""
        needs = self.group_needing_calls
        return next((stmt for stmt in self.execution_order if self.reaches(stmt, needs)), None)

    @cached_property
    def setup_site(self) -> cst.FunctionDef | cst.If | cst.Module | None:
        """Where ``setup()`` belongs: the function the ``__main__`` block runs when all the work that needs
        the process group happens inside it (``main()``), else the ``__main__`` block, else the module
        (work at module level, such as a module-level model, needs the group before the block runs)."""
        first = self.first_group_need
        if first is None:
            return None
        guard = self.main_guard
        if guard is None or not self.is_inside(first, guard):
            return self.module
        body = list(statements_of(guard.body))
        later = body[body.index(first) + 1 :] if first in body else []
        if any(self.reaches(stmt, self.group_needing_calls) for stmt in later):
            return guard
        calls = [node for node in tree.walk(first) if type(node) is cst.Call]
        for call in calls:
            target = self._call_targets.get(call)  # type: ignore[arg-type]
            if (
                target is not None
                and self.owns(target)
                and self.parent(target) is self.module
                and self.reaches(target, self.group_needing_calls)
                and len(self.callers_of(target)) == 1
            ):
                # ``main(parse_args())``, ``sys.exit(main())``: the statement's other calls need no group
                # (``Trainer(model, build_loaders()).fit()`` trains after ``build_loaders()`` returns).
                others = [other for other in calls if other is not call]
                return target if all(self._needs_no_group(other) for other in others) else guard  # type: ignore[arg-type]
        return guard

    def _needs_no_group(self, call: cst.Call) -> bool:
        """Whether a call itself surely runs no work that needs the process group (``sys.exit`` of
        ``sys.exit(main())``; the calls in its arguments are the statement's other calls, asked one by one):
        it is none of those calls, its function in the program reaches none of them, and it is no call of
        unknown code (a method of an object the analysis cannot name)."""
        needing = self.group_needing_calls
        if call in needing:
            return False
        target = self._call_targets.get(call)
        if target is not None:
            return not self.reaches(target, needing)
        return bool(self.qualified_names(call.func))


    # ------------------------------------------------- reachability and rank values (appended for DDP020-DDP025)

    def device_choice(self, node: cst.BaseExpression, fallback: str = "cpu") -> cst.BaseExpression:
        """The node, or the ``<node> if torch.cuda.is_available() else <cpu>`` around it, which one
        device expression (``runtime.device()``) replaces as a whole. ``fallback="none"`` matches
        ``[rank] if torch.cuda.is_available() else None`` for ``device_ids``."""
        parent = self.parent(node)
        if not (isinstance(parent, cst.IfExp) and parent.body is node):
            return node
        if not (isinstance(parent.test, cst.Call) and self.is_call_to(parent.test, {"torch.cuda.is_available"})):
            return node
        other = parent.orelse
        if fallback == "none":
            return parent if isinstance(other, cst.Name) and other.value == "None" else node
        is_cpu = isinstance(other, cst.SimpleString) and other.evaluated_value == "cpu"
        if isinstance(other, cst.Call) and self.is_call_to(other, names.TORCH_DEVICE) and len(other.args) == 1:
            value = other.args[0].value
            is_cpu = isinstance(value, cst.SimpleString) and value.evaluated_value == "cpu"
        return parent if is_cpu else node


# ---------------------------------------------------------------------- module helpers


LOADER_PARAMETERS = (
    "dataset",
    "batch_size",
    "shuffle",
    "sampler",
    "batch_sampler",
    "num_workers",
    "collate_fn",
    "pin_memory",
    "drop_last",
    "timeout",
    "worker_init_fn",
    "multiprocessing_context",
    "generator",
)


def argument(call: cst.Call, parameters: tuple[str, ...], name: str) -> cst.Arg | None:
    """The argument a call passes for a parameter, by position or by keyword (positions are unknown
    past a ``*args``; keywords are still found after a ``**kwargs``)."""
    position = parameters.index(name)
    positions_known = True
    for index, arg in enumerate(call.args):
        if arg.star:
            positions_known = False
            continue
        if arg.keyword is None and index == position and positions_known:
            return arg
        if arg.keyword is not None and arg.keyword.value == name:
            return arg
    return None


def loader_argument(call: cst.Call, parameter: str) -> cst.Arg | None:
    """The argument a ``DataLoader(...)`` call passes for a parameter, positional or keyword."""
    return argument(call, LOADER_PARAMETERS, parameter)


def given_loader_argument(call: cst.Call, parameter: str) -> cst.Arg | None:
    """:func:`loader_argument`, but ``None`` for an argument that is the literal ``None`` (``sampler=None``
    is the ``DataLoader``'s own default: no sampler was given)."""
    found = loader_argument(call, parameter)
    return None if found is None or is_none(found.value) else found


def _returns_its_parameter(function: cst.FunctionDef, value: cst.BaseExpression) -> bool:
    """``return model`` of ``def unwrap(model): if hasattr(model, "module"): return model.module; return model``."""
    params = {p.name.value for p in (*function.params.posonly_params, *function.params.params)}
    return type(value) is cst.Name and value.value in params  # type: ignore[attr-defined]


def is_none(value: cst.BaseExpression) -> bool:
    """Whether the expression is the literal ``None``."""
    return type(value) is cst.Name and value.value == "None"  # type: ignore[attr-defined]


def wrapped_argument(call: cst.Call) -> cst.BaseExpression | None:
    """The module a DataParallel/DDP call wraps (first positional or ``module=``)."""
    for index, arg in enumerate(call.args):
        if (arg.keyword is None and index == 0 and not arg.star) or (arg.keyword and arg.keyword.value == "module"):
            return arg.value
    return None



_BUILTINS = frozenset(dir(builtins))


def _module_targets(module: cst.Module) -> Iterator[cst.BaseExpression]:
    """The targets of the module's top-level assignments (names the module rebinds)."""
    for stmt in module.body:
        if isinstance(stmt, cst.SimpleStatementLine):
            for small in stmt.body:
                if isinstance(small, cst.Assign):
                    yield from (t.target for t in small.targets)
                elif isinstance(small, cst.AnnAssign):
                    yield small.target


def _calls_within(node: cst.CSTNode) -> Iterator[cst.Call]:
    return (n for n in tree.walk(node) if type(n) is cst.Call)


def _decides_on(loop: cst.For | cst.CompFor, names_: set[str]) -> bool:
    """Whether the loop's body tests one of the names (an ``if``, a conditional expression, a ``while`` or a
    ``with`` item reads it): what the loop does then depends on which item it holds (training on one loader,
    evaluating on the other)."""
    body = loop.body if type(loop) is cst.For else loop  # a comprehension: its own ``if`` clauses
    for node in walk(body):  # type: ignore[arg-type]
        kind = type(node)
        tested = None
        if kind is cst.If or kind is cst.IfExp or kind is cst.While:
            tested = node.test  # type: ignore[attr-defined]
        elif kind is cst.CompIf:
            tested = node.test  # type: ignore[attr-defined]
        elif kind is cst.WithItem:
            tested = node.item  # type: ignore[attr-defined]
        if tested is not None and any(type(n) is cst.Name and n.value in names_ for n in walk(tested)):  # type: ignore[attr-defined]
            return True
    return False


def _takes_positionals(function: cst.FunctionDef, count: int) -> bool:
    """Whether a method can be called on an instance with ``count`` positional arguments (``self`` first,
    but for a ``staticmethod``)."""
    params = function.params
    static = any(dotted_name(d.decorator) == "staticmethod" for d in function.decorators)
    bound = 0 if static else 1
    positional = len(params.posonly_params) + len(params.params) - bound
    required = sum(1 for p in (*params.posonly_params, *params.params) if p.default is None) - bound
    return required <= count and (count <= positional or isinstance(params.star_arg, cst.Param))


def all_parameters(function: cst.FunctionDef) -> list[cst.Param]:
    """Every parameter of a function: positional-only, positional, ``*args``, keyword-only, ``**kwargs``."""
    p = function.params
    extra = [x for x in (p.star_arg, p.star_kwarg) if isinstance(x, cst.Param)]
    return [*p.posonly_params, *p.params, *p.kwonly_params, *extra]


def _generator_functions(analysis: ScriptAnalysis) -> frozenset[cst.FunctionDef]:
    """The functions of the module with a ``yield`` in their body, nested functions' included, from the
    yields the module's index holds."""
    found: set[cst.FunctionDef] = set()
    parents = analysis.index.parents
    for node in analysis.index.nodes.yields:
        child, current = node, parents.get(node)
        while current is not None:
            if type(current) is cst.FunctionDef and current.body is child:  # type: ignore[attr-defined]
                found.add(current)  # type: ignore[arg-type]
            child, current = current, parents.get(current)
    return frozenset(found)


def _iterated_parameter(function: cst.FunctionDef) -> str | None:
    """The parameter a (generator) function iterates (``def cycle(loader): while True: for batch in loader:
    yield batch``, or ``yield from loader``), or ``None``."""
    params = {p.name.value for p in (*function.params.posonly_params, *function.params.params)}
    for node in tree.walk(function.body):
        iterated = passed_over(node)
        if iterated is not None and type(iterated) is cst.Name and iterated.value in params:  # type: ignore[attr-defined]
            return iterated.value  # type: ignore[attr-defined]
    return None


def passed_over(node: cst.CSTNode) -> cst.BaseExpression | None:
    """What a node goes over once, from its first item to its last: the iterable of a ``for`` loop (through
    a progress or ``enumerate`` wrapper), the operand of ``yield from``; ``None`` for any other node."""
    kind = type(node)
    if kind is cst.For:
        return unwrap_iterable(node.iter)  # type: ignore[attr-defined]
    if kind is cst.Yield and type(node.value) is cst.From:  # type: ignore[attr-defined]
        return node.value.item  # type: ignore[attr-defined]
    return None


def own_methods(owner: cst.ClassDef | None) -> list[cst.FunctionDef]:
    """The methods a class defines itself, in its body's order (not those it inherits)."""
    if owner is None or not isinstance(owner.body, cst.IndentedBlock):
        return []
    return [s for s in owner.body.body if isinstance(s, cst.FunctionDef)]


def own_method(owner: cst.ClassDef | None, name: str) -> cst.FunctionDef | None:
    """The method a class defines itself under a name (not one it inherits: :meth:`ScriptAnalysis.method_of`)."""
    return next((s for s in own_methods(owner) if s.name.value == name), None)


def _assign_targets(assign: cst.Assign | cst.AnnAssign) -> list[cst.BaseExpression]:
    if type(assign) is cst.AnnAssign:
        return [assign.target]  # type: ignore[union-attr]
    return [t.target for t in assign.targets]


#: Methods whose loop walks a model's submodules (``for m in model.modules()``): their parameters are the model's.
SUBMODULE_WALKS = frozenset({"modules", "children", "named_modules", "named_children"})


def _root_of(expr: cst.BaseExpression) -> cst.BaseExpression:
    """``model`` of ``model.backbone.head``."""
    while type(expr) is cst.Attribute:
        expr = expr.value  # type: ignore[attr-defined]
    return expr


def assignment_targets(node: cst.CSTNode) -> list[cst.BaseExpression]:
    """What a node assigns, when it is an assignment: every target of a plain one, the target of an augmented
    or annotated one, or of ``:=``; nothing for any other node."""
    if isinstance(node, cst.Assign):
        return [t.target for t in node.targets]
    if isinstance(node, (cst.AugAssign, cst.AnnAssign, cst.NamedExpr)):
        return [node.target]
    return []


#: In-memory files: a write into one touches no disk.
MEMORY_FILES = frozenset({"io.BytesIO", "io.StringIO"})


def into_memory(analysis: ScriptAnalysis, call: cst.Call) -> bool:
    """Whether one of the call's arguments is an in-memory file (``io.BytesIO()``), directly or by name: a
    ``torch.save(state, buffer)`` writes no file."""
    return any(
        type(origin) is cst.Call and analysis.is_call_to(origin, MEMORY_FILES)  # type: ignore[arg-type]
        for arg in call.args
        for origin in (arg.value, *analysis.origins(arg.value), *_with_items_binding(analysis, call, arg.value))
    )


def _with_items_binding(analysis: ScriptAnalysis, node: cst.CSTNode, name: cst.BaseExpression) -> list[cst.BaseExpression]:
    """What the ``with`` statements around a node bind a plain name to (``io.BytesIO()`` of ``with io.BytesIO() as
    out:``)."""
    if type(name) is not cst.Name:
        return []
    return [
        item.item
        for ancestor in analysis.ancestors(node)
        if type(ancestor) is cst.With
        for item in ancestor.items  # type: ignore[attr-defined]
        if item.asname is not None and type(item.asname.name) is cst.Name and item.asname.name.value == name.value  # type: ignore[attr-defined]
    ]


def returns_of(function: cst.FunctionDef) -> list[cst.Return]:
    """The function's own ``return`` statements (not those of functions or classes nested in it)."""
    found: list[cst.Return] = []
    stack: list[cst.CSTNode] = [function.body]
    while stack:
        node = stack.pop()
        kind = type(node)
        if kind is cst.Return:
            found.append(node)  # type: ignore[arg-type]
        elif kind is not cst.FunctionDef and kind is not cst.ClassDef and kind is not cst.Lambda:
            stack.extend(tree.children(node))
    return found


_SEQUENCE_DISPLAYS = (cst.Tuple, cst.List)
#: The comprehension nodes (each binds the variables of its ``for`` clauses in a scope of its own).
COMPREHENSIONS = frozenset({cst.ListComp, cst.SetComp, cst.GeneratorExp, cst.DictComp})
#: What runs its body again and again: loops and comprehensions.
_REPEATING = frozenset({cst.For, cst.While}) | COMPREHENSIONS


def _tuple_elements(expr: cst.BaseExpression) -> list[cst.BaseExpression] | None:
    if type(expr) in _SEQUENCE_DISPLAYS:
        return [e.value for e in expr.elements if type(e) is not cst.StarredElement]  # type: ignore[attr-defined]
    return None


def _changed_roots(target: cst.BaseExpression) -> list[str]:
    """The names whose values an assignment target changes in place: ``stats`` of ``stats[0] = v``, ``logs`` of
    ``logs["loss"] += v`` (and of such targets in a tuple)."""
    elements = _tuple_elements(target)
    if elements is not None:
        return [name for element in elements for name in _changed_roots(element)]
    if isinstance(target, (cst.Subscript, cst.Attribute)):
        root = target
        while isinstance(root, (cst.Subscript, cst.Attribute)):
            root = root.value
        return [root.value] if isinstance(root, cst.Name) else []
    return []


def _listed_strings(value: cst.BaseExpression) -> set[str] | None:
    """The strings of a list or tuple literal of strings (``__all__ = ["Trainer", "build"]``), ``None`` for any
    other value."""
    if not isinstance(value, (cst.List, cst.Tuple)):
        return None
    found: set[str] = set()
    for element in value.elements:
        if not isinstance(element.value, cst.SimpleString):
            return None
        found.add(element.value.evaluated_value)  # type: ignore[arg-type]
    return found


def _unpacked_pairs(target: cst.CSTNode, value: cst.CSTNode) -> list[tuple[cst.BaseExpression, cst.BaseExpression]] | None:
    """The element-wise pairs of a tuple (or list) target and a display of as many values, no ``*`` on either
    side (``a, b = x, y``); ``None`` for any other assignment."""
    if type(target) not in _SEQUENCE_DISPLAYS or type(value) not in _SEQUENCE_DISPLAYS:
        return None
    targets, values = target.elements, value.elements  # type: ignore[attr-defined]
    if len(targets) != len(values) or any(type(e) is cst.StarredElement for e in (*targets, *values)):
        return None
    return [(t.value, v.value) for t, v in zip(targets, values)]


def _target_names(target: cst.BaseExpression) -> list[str]:
    elements = _tuple_elements(target)
    if elements is None:
        return [target.value] if isinstance(target, cst.Name) else []
    return [name for element in elements for name in _target_names(element)]


def _loop_variable(loop: cst.For | cst.While) -> str | None:
    """The epoch loop's counter: its (first) variable, or an attribute it counts in (``for self.epoch in
    range(n)``)."""
    if isinstance(loop, cst.For):
        names_ = _target_names(loop.target)
        if names_:
            return names_[0]
        return dotted_name(loop.target) if type(loop.target) is cst.Attribute else None
    return None


def is_import_line(stmt: cst.BaseStatement) -> bool:
    """Whether a statement is a line of imports only."""
    return isinstance(stmt, cst.SimpleStatementLine) and all(isinstance(s, (cst.Import, cst.ImportFrom)) for s in stmt.body)


def is_docstring_line(stmt: cst.BaseStatement) -> bool:
    """Whether a statement is a bare string (a docstring where it opens a module, class or function)."""
    return (
        isinstance(stmt, cst.SimpleStatementLine)
        and isinstance(stmt.body[0], cst.Expr)
        and isinstance(stmt.body[0].value, (cst.SimpleString, cst.ConcatenatedString))
    )


def _is_main_test(test: cst.BaseExpression) -> bool:
    if not isinstance(test, cst.Comparison) or len(test.comparisons) != 1:
        return False
    sides = [test.left, test.comparisons[0].comparator]
    has_name = any(isinstance(s, cst.Name) and s.value == "__name__" for s in sides)
    has_main = any(isinstance(s, cst.SimpleString) and s.evaluated_value == "__main__" for s in sides)
    return has_name and has_main and isinstance(test.comparisons[0].operator, cst.Equal)


def statements_of(block: cst.BaseSuite | cst.Module) -> Sequence[cst.BaseStatement]:
    """The statements of a module or an indented block."""
    if isinstance(block, cst.Module):
        return block.body
    if isinstance(block, cst.IndentedBlock):
        return block.body
    return ()


#: Calls that end the process (``sys.exit()``): after them nothing of the program runs on this rank.
PROCESS_EXITS = frozenset({"sys.exit", "exit", "quit", "os._exit"})
#: The module of torch's learning-rate schedulers.
SCHEDULER_PREFIX = "torch.optim.lr_scheduler."


#: A name that says it holds an optimizer: ``optimizer``, ``optim``, ``opt``, ``g_optimizer``, ``optimizer_d``
#: (not ``optimized_model``).
_OPTIMIZER_NAME = re.compile(r"(^|_)(optimi[sz]ers?|optims?|opts?)(_|$)")


def _stored_as_optimizer(statement: cst.CSTNode | None) -> bool:
    """Whether an assignment stores its value in a name that says it holds an optimizer (``optimizer = ...``,
    ``self.optim = ...``)."""
    if type(statement) is not cst.Assign:
        return False
    for target in statement.targets:  # type: ignore[attr-defined]
        name = dotted_name(target.target)
        if name is not None and _OPTIMIZER_NAME.search(name.split(".")[-1].lower()):
            return True
    return False


def sets_learning_rate(code: cst.CSTNode | None) -> bool:
    """Whether a function of the program (or a branch) writes a learning rate into an optimizer's parameter
    group: ``group["lr"] = ...``, ``*= 0.5``, ``group.update(lr=0.01)`` (not a ``logs["lr"]`` it logs)."""
    if code is None:
        return False
    for node in tree.walk(code):
        kind = type(node)
        if kind is cst.AugAssign or kind is cst.Assign:
            targets = [node.target] if kind is cst.AugAssign else [t.target for t in node.targets]  # type: ignore[attr-defined]
            for target in targets:
                if type(target) is cst.Subscript and subscript_key(target) == "lr" and is_parameter_group(code, target.value):  # type: ignore[arg-type, attr-defined]
                    return True
        elif (
            kind is cst.Call
            and call_method_name(node) == "update"  # type: ignore[arg-type]
            and any(a.keyword is not None and a.keyword.value == "lr" for a in node.args)  # type: ignore[attr-defined]
            and is_parameter_group(code, node.func.value)  # type: ignore[attr-defined]
        ):
            return True
    return False


def may_set_a_learning_rate(analysis: ScriptAnalysis) -> bool:
    """Whether any module of the program writes an ``["lr"]`` item or calls ``update(lr=...)``: where none does,
    :func:`sets_learning_rate` is ``False`` for all of the program's code (one pass per program, instead of a walk
    of every function a rule asks about)."""
    cache = analysis.shared.__dict__.setdefault("_may_set_a_learning_rate", [])
    if not cache:
        cache.append(any(_writes_an_lr_item(node) for module in analysis.shared.analyses for node in module.preorder))
    return cache[0]


def _writes_an_lr_item(node: cst.CSTNode) -> bool:
    kind = type(node)
    if kind is cst.AugAssign or kind is cst.Assign:
        targets = [node.target] if kind is cst.AugAssign else [t.target for t in node.targets]  # type: ignore[attr-defined]
        return any(type(target) is cst.Subscript and subscript_key(target) == "lr" for target in targets)  # type: ignore[arg-type]
    return (
        kind is cst.Call
        and call_method_name(node) == "update"  # type: ignore[arg-type]
        and any(a.keyword is not None and a.keyword.value == "lr" for a in node.args)  # type: ignore[attr-defined]
    )


def is_parameter_group(code: cst.CSTNode, group: cst.BaseExpression) -> bool:
    """Whether a dict that an ``["lr"]`` is written into is an optimizer's parameter group: ``opt.param_groups[0]``,
    or the variable of a loop over ``....param_groups`` in the code (not a dict of logged values)."""
    if _reads_param_groups(group):
        return True
    name = dotted_name(group)
    return name is not None and any(
        type(node) is cst.For and dotted_name(node.target) == name and _reads_param_groups(node.iter)  # type: ignore[attr-defined]
        for node in tree.walk(code)
    )


def _reads_param_groups(expr: cst.CSTNode) -> bool:
    return any(type(n) is cst.Attribute and n.attr.value == "param_groups" for n in tree.walk(expr))  # type: ignore[attr-defined]


def exits_with_success(call: cst.Call) -> bool:
    """Whether a process exit (:data:`PROCESS_EXITS`) reports success (``sys.exit()``, ``sys.exit(0)``): torchrun
    then waits for the other processes, which may wait for this one; a failing exit makes it stop them all."""
    if not call.args:
        return True
    value = call.args[0].value
    return (type(value) is cst.Integer and value.value == "0") or (type(value) is cst.Name and value.value == "None")  # type: ignore[attr-defined]


def leaves_early(branch: cst.CSTNode, raises: bool = True) -> bool:
    """Whether a branch may leave the code that follows it: a ``return`` or ``sys.exit()`` anywhere in
    it, a ``break`` / ``continue`` of the loop around the branch (not of a loop inside it), and with
    ``raises`` a ``raise`` (without: a branch that fails is no path on which the program goes on); what
    nested functions and classes would do does not count."""
    stack: list[tuple[cst.CSTNode, bool]] = [(branch, False)]
    while stack:
        node, in_inner_loop = stack.pop()
        kind = type(node)
        if kind is cst.Return or (raises and kind is cst.Raise):
            return True
        if (kind is cst.Break or kind is cst.Continue) and not in_inner_loop:
            return True
        if kind is cst.Call and dotted_name(node.func) in PROCESS_EXITS:  # type: ignore[attr-defined]
            return True
        if kind is cst.FunctionDef or kind is cst.ClassDef or kind is cst.Lambda:
            continue
        if kind is cst.For or kind is cst.While:
            # A break or continue in the loop's body is the inner loop's; its else runs in the branch.
            if node.orelse is not None:  # type: ignore[attr-defined]
                stack.append((node.orelse, in_inner_loop))  # type: ignore[attr-defined]
            stack.append((node.body, True))  # type: ignore[attr-defined]
            continue
        stack.extend((child, in_inner_loop) for child in tree.children(node))
    return False


def leaves_function(branch: cst.CSTNode) -> bool:
    """Whether a branch may leave its function or the process (``return``, ``sys.exit()``), not only a loop."""
    return any(
        type(node) is cst.Return or (type(node) is cst.Call and dotted_name(node.func) in PROCESS_EXITS)  # type: ignore[attr-defined]
        for node in tree.walk(branch)
    )


#: Calls that hand back the model they are given, converted in place or wrapped to run the same ``forward``.
_MODEL_PASSING = names.CONVERT_SYNC_BATCHNORM | names.MODEL_COMPILERS


def walk(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    """The node and every node below it, in source order."""
    return tree.walk(node)


def keyword_argument(call: cst.Call, keyword: str) -> cst.Arg | None:
    """The ``keyword=`` argument of a call, or ``None``."""
    return next((arg for arg in call.args if arg.keyword is not None and arg.keyword.value == keyword), None)


def is_true(expr: cst.BaseExpression | None) -> bool:
    """Whether an expression is the literal ``True``."""
    return isinstance(expr, cst.Name) and expr.value == "True"


def _literal_keys(comprehension: cst.DictComp) -> list[str]:
    """The keys a dict comprehension over a written-out list of strings makes (``{k: ... for k in ["train",
    "val"]}``); none for any other comprehension."""
    loop = comprehension.for_in
    if loop.inner_for_in is not None or loop.ifs or type(loop.target) is not cst.Name:
        return []
    if not (type(comprehension.key) is cst.Name and comprehension.key.value == loop.target.value):  # type: ignore[attr-defined]
        return []
    if type(loop.iter) not in (cst.List, cst.Tuple):
        return []
    keys = []
    for element in loop.iter.elements:  # type: ignore[attr-defined]
        if type(element.value) is not cst.SimpleString:
            return []
        keys.append(element.value.evaluated_value)
    return keys
