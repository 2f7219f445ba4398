"""Which values hold this process's share of the data: a fact of the analysis for the rules about metrics
and decisions that differ between ranks (computed once per program: :func:`per_rank_values`)."""

from __future__ import annotations

from typing import Callable, Union

import libcst as cst

from .. import names
from . import tree
from .loaders import loader_facts
from .legacy import string_value
from .ranks import Kind, draws_per_rank, per_rank_draws, rank_facts, rank_seeded_instances, seeds_alike, takes_a_rank_part
from .script import (
    COMPREHENSIONS,
    LoaderLoop,
    ScriptAnalysis,
    assignment_targets,
    backward_loss,
    call_method_name,
    callee_name,
    dotted_name,
    is_true,
    literal_dict_items,
    loader_argument,
    subscript_key,
    walk,
)

Owner = Union[cst.Module, cst.FunctionDef, cst.ClassDef]
#: Methods that put a value into a container, so the container holds per-rank values too.
COLLECTING_METHODS = frozenset({"append", "extend", "add", "update", "insert"})
#: Collectives that give every rank one rank's value, in place: the decision that follows is common.
BROADCASTS = names.distributed("broadcast") | names.distributed("broadcast_object_list")
#: What describes a batch rather than measuring the model (``len(x)``, ``x.shape``): the same on every rank.
SHAPE_QUERIES = frozenset({"shape", "size", "dim", "ndim", "numel", "dtype", "device", "requires_grad", "is_leaf"})


class PerRankValues:
    """Which names hold values computed from this process's shard of the data (flow-insensitive).

    Seeds are the batches drawn from loaders with a ``DistributedSampler`` (not the ``enumerate`` index)
    and the losses ``backward()`` is called on; values computed from them are per-rank too, through
    assignments, ``for`` loops, ``list.append``, function arguments and return values. A name that is
    ever assigned from a reduction (``runtime.reduce_mean``, ...) or reduced in place
    (``dist.all_reduce(t)``) counts as reduced.

    What an expression could mention is read from the tree once (:meth:`_uses`); the fixed point then only
    looks names and functions up in the sets it grows.
    """

    def __init__(self, analysis: ScriptAnalysis, also_sharded: frozenset[cst.Call] = frozenset()) -> None:
        self.analysis = analysis
        #: Loaders counted as sharded though no ``DistributedSampler`` shards them yet (a sampler of their own
        #: left to a human): their passes are no whole passes.
        self.also_sharded = also_sharded
        self.names: set[tuple[Owner, str]] = set()
        self.reduced: set[tuple[Owner, str]] = set()
        self.functions: set[cst.FunctionDef] = set()
        #: Containers filled under a per-rank test: their length differs between ranks.
        self.sized: set[tuple[Owner, str]] = set()
        #: Names per-rank only because one rank alone assigns them (``if is_main: best = acc``), no data.
        self.one_rank: set[tuple[Owner, str]] = set()
        self._passes: dict[cst.For, bool] | None = None
        self._uses_of: dict[cst.CSTNode, list[_Use]] = {}
        self._whole_calls: dict[cst.Call, bool] = {}
        self._deciding: set[cst.Call] = set()
        self._solved = False
        self._program_loaders: set[cst.CSTNode] | None = None
        self._argument_only: dict[cst.FunctionDef, bool] = {}
        self._deciding_functions: set[cst.FunctionDef] = set()
        #: Where the seeds of the per-rank values are (a helper holding one is per-rank whatever its arguments).
        self._seed_nodes: set[cst.CSTNode] = set()
        #: For each per-rank name, the statements that made it so (``None``: a way with no place, a parameter
        #: given a per-rank argument): a use no such statement can run before reads another value of the name.
        self._marked_at: dict[tuple[Owner, str], set[cst.CSTNode] | None] = {}

    def key(self, node: cst.CSTNode, name: str) -> tuple[Owner, str]:
        if name.startswith("self."):
            owner = self.analysis.enclosing_class(node)
            if owner is not None:
                return (self._attribute_home(owner, name), name)
        elif "." in name:
            owner = self._instance_class(node, name.split(".", 1)[0])
            if owner is not None:  # ``trainer.train_loss`` in a callback: the Trainer's ``self.train_loss``
                attribute = "self." + name.split(".", 1)[1]
                return (self._attribute_home(owner, attribute), attribute)
        return (self.analysis.scope_of(node), name)

    def _attribute_home(self, owner: cst.ClassDef, name: str) -> cst.ClassDef:
        """The class an attribute of ``self`` is keyed by: the nearest of the class and those it derives from that
        stores it (``self.metrics`` of a ``BaseTrainer``, read through a ``ClassifierTrainer`` in a callback and
        written in the base's ``fit``: one key); the class itself where none does."""
        attribute = ".".join(name.split(".")[:2])
        bindings = self.analysis.shared.bindings
        return next((cls for cls in self.analysis.shared.ancestors_of(owner) if (cls, attribute) in bindings), owner)

    def _instance_class(self, node: cst.CSTNode, root: str) -> cst.ClassDef | None:
        """The class of the program whose one instance the name ``root`` holds where ``node`` is: one class,
        built at one place in the program (a Trainer). The keys are per class, so two instances of a class
        (``losses = Counter(); steps = Counter()``) would share theirs."""
        home = self.analysis.shared.analysis_of(node) or self.analysis
        constructed = home.shared.constructed
        found = {constructed[origin] for origin in home.name_origins(node, root) if origin in constructed}  # type: ignore[index]
        if len(found) != 1:
            return None
        owner = found.pop()
        return owner if len(home.shared.instances_of(owner)) == 1 else None

    def _keys_of_each_class(self, node: cst.CSTNode, name: str) -> list[tuple[Owner, str]]:
        """For ``cb.stop_training`` where ``cb`` holds objects of several classes of the program, each built once
        (``for cb in self.callbacks:`` over ``[EarlyStopping(), LossLogger()]``), the attribute's key in each of
        those classes: the value is per-rank where one of them stores a per-rank value. Empty otherwise (one
        class: :meth:`key` reads it)."""
        if name.startswith("self.") or "." not in name:
            return []
        home = self.analysis.shared.analysis_of(node) or self.analysis
        constructed = home.shared.constructed
        root = name.split(".", 1)[0]
        classes = {constructed[origin] for origin in home.name_origins(node, root) if origin in constructed}  # type: ignore[index]
        if len(classes) < 2 or any(len(home.shared.instances_of(cls)) != 1 for cls in classes):
            return []
        attribute = "self." + name.split(".", 1)[1]
        return [(self._attribute_home(cls, attribute), attribute) for cls in sorted(classes, key=lambda c: c.name.value)]

    def _holds(self, key: tuple[Owner, str], at_module: tuple[Owner, str]) -> bool:
        if key in self.reduced or at_module in self.reduced:
            return False
        if key in self.names:
            return True
        # A global a function reads (its module's name); not a local of the same spelling (``loss`` of an
        # evaluation function beside the training loop's module-level ``loss``).
        owner, name = key
        if type(owner) is cst.FunctionDef and "." not in name and (self.analysis.shared.analysis_of(owner) or self.analysis).binds_locally(owner, name):  # type: ignore[arg-type]
            return False
        return at_module in self.names

    def mention(self, expr: cst.CSTNode, data_only: bool = False, containers: bool = True) -> str | None:
        """The first per-rank value an expression uses outside reductions (its source text), or ``None``; with
        ``data_only``, none that is per-rank only because one rank alone assigns it (what that rank prints of
        it is its own, whole value); without ``containers``, none read as a container: subscripted
        (``logs["val_acc"]``) or iterated (``for h in history``), whose per-rank items may sit beside whole ones
        (the values are tracked per name, not per key)."""
        functions = self.functions
        if not (self.names or self.sized or functions):
            return None  # (nothing is per-rank yet: the expression's uses are not read)
        for use in self._uses(expr):
            if data_only and use.key in self.one_rank:
                continue
            if not containers and use.node is not None and self._read_as_a_container(use.node):
                continue
            if use.sized:
                if use.key in self.sized:
                    return use.shown
            elif use.function is not None:
                if (
                    use.function in functions
                    and not self._whole_pass_call(use.call, use.function)  # type: ignore[arg-type]
                    and not self._whole_by_its_arguments(use.call, use.function)  # type: ignore[arg-type]
                ):
                    return use.shown
            elif self._holds(use.key, use.at_module) and self._reached(use) and not self._whole_item_read(use):  # type: ignore[arg-type]
                return use.shown
        return None

    def _whole_item_read(self, use: _Use) -> bool:
        """Whether the name is subscripted here by keys known in advance (``logs["val_acc"]``; ``logs[self.monitor]``
        where every object of the class is given its key as a string literal) and every dict the name may hold
        is written out with those keys, each holding a value every rank computes alike: a callback's
        ``ModelCheckpoint(monitor="val_acc")`` reads the whole set's accuracy out of ``{"loss": train_loss,
        "val_acc": val_acc}`` beside an ``EarlyStopping(monitor="loss")`` reading the shard's loss."""
        node, name = use.node, use.shown
        if node is None or "." in name:
            return False
        home = self.analysis.shared.analysis_of(node) or self.analysis
        parent = home.parent(node)
        if type(parent) is not cst.Subscript or parent.value is not node:  # type: ignore[attr-defined]
            return False
        keys = _item_keys(home, parent)  # type: ignore[arg-type]
        return keys is not None and self._items_whole(home, node, name, keys, 0)

    def _items_whole(self, home: ScriptAnalysis, node: cst.CSTNode, name: str, keys: frozenset[str], depth: int) -> bool:
        """Whether every value the name may hold where ``node`` is (its callers' arguments for a parameter) is a
        dict written out whose items at ``keys`` are no per-rank values, and its scope writes no item into it."""
        values = home.flows_into(node, name)
        if not values or depth > 3 or _items_written(home, home.scope_of(node), name, keys, self.mention):
            return False
        for value in values:
            owner = self.analysis.shared.analysis_of(value) or home
            written = owner.parent(value)
            target = written.targets[0].target if type(written) is cst.Assign and len(written.targets) == 1 else getattr(written, "target", None)  # type: ignore[attr-defined]
            if type(written) in (cst.Assign, cst.AugAssign) and type(target) is cst.Subscript and dotted_name(target.value) == name:  # type: ignore[attr-defined]
                continue  # (an item written into the dict: :func:`_items_written` reads those)
            if type(value) is cst.Name:
                if value.value == name and owner.scope_of(value) is home.scope_of(node):  # type: ignore[attr-defined]
                    return False
                if not self._items_whole(owner, value, value.value, keys, depth + 1):  # type: ignore[attr-defined]
                    return False
                continue
            items = literal_dict_items(value) if isinstance(value, cst.BaseExpression) else None
            if items is None:
                return False
            # (``if loss < best: ck = {"iter_num": step}``: which dict the name holds is the rank's own decision)
            conditions = rank_facts(owner).conditions(value)
            if any(self.mention(c.test) for c in conditions if type(c.owner) is cst.If and not c.early_exit):  # type: ignore[attr-defined]
                return False
            held = dict(items)
            if not keys <= held.keys() or any(self.mention(held[key]) for key in keys):
                return False
        return True

    def _read_as_a_container(self, node: cst.CSTNode) -> bool:
        """Whether a name is subscripted where it is used, is what a loop or comprehension iterates, or is the
        variable of a loop or comprehension around the use (an item of what it iterates: a key of a dict of
        metrics, ``for k, v in running.items()``, is no value of the shard)."""
        home = self.analysis.shared.analysis_of(node) or self.analysis
        parent = home.parent(node)
        kind = type(parent)
        if kind is cst.Subscript and parent.value is node:  # type: ignore[attr-defined]
            return True
        if (kind is cst.CompFor or kind is cst.For) and parent.iter is node:  # type: ignore[attr-defined]
            return True
        name = dotted_name(node)
        return name is not None and _loop_binding(home, node, name.split(".")[0]) is not None

    def _reached(self, use: _Use) -> bool:
        """Whether a statement that made the used name per-rank may run before the use: not where every such
        statement of the use's own function (or module body) comes after it with no loop around both
        (``ck = torch.load(path); step = ck["step"]`` before the training loop that later rebinds ``ck`` to a
        dict built on a per-rank test: the resumed ``step`` is the same on every rank)."""
        key = use.key if use.key in self.names else use.at_module
        markers = self._marked_at.get(key)  # type: ignore[arg-type]
        if markers is None or use.node is None:
            return True
        home = self.analysis.shared.analysis_of(use.node) or self.analysis
        name = key[1]  # type: ignore[index]
        if "." not in name and all(type(marker) in _BINDINGS for marker in markers):
            # (no ``append`` changes the value in place: the binding in effect at the use says it all)
            binding = home.binding_in_effect(use.node, name)
            if binding is not None:
                return binding in markers
        return any(home.may_run_before(marker, use.node) for marker in markers)

    def _whole_by_its_arguments(self, call: cst.Call, function: cst.FunctionDef) -> bool:
        """Whether this call of a helper whose result may be per-rank computes from whole values: the helper's
        per-rank values come from its arguments alone (:meth:`_from_arguments_only`: ``def accuracy(output,
        target)``, called on the training batch and on a whole evaluation set) and no argument of this call
        is per-rank."""
        return self._from_arguments_only(function, depth=0) and not any(self.mention(arg.value) for arg in call.args)

    def _from_arguments_only(self, function: cst.FunctionDef, depth: int) -> bool:
        """Whether nothing per-rank reaches the function but through its parameters: no seed in it (a loop
        over a sharded loader, a ``next()`` draw, a ``backward()``), no per-rank value of its module or object
        read, and no per-rank helper called but such helpers (a few calls deep). Kept once solved (while the
        per-rank values grow, the answer may still change)."""
        found = self._argument_only.get(function)
        if found is not None:
            return found
        if depth > 3 or function in self._deciding_functions:
            return False
        self._deciding_functions.add(function)
        try:
            found = self._decide_from_arguments_only(function, depth)
        finally:
            self._deciding_functions.discard(function)
        if self._solved:
            self._argument_only[function] = found
        return found

    def _decide_from_arguments_only(self, function: cst.FunctionDef, depth: int) -> bool:
        home = self.analysis.shared.analysis_of(function) or self.analysis
        if any(home.is_inside(node, function) for node in self._seed_nodes if (self.analysis.shared.analysis_of(node) or self.analysis) is home):
            return False
        return not self._reads_per_rank_from_outside(home, function, lambda use: self._from_arguments_only(use.function, depth + 1))  # type: ignore[arg-type]

    def _reads_per_rank_from_outside(self, home: ScriptAnalysis, function: cst.FunctionDef, whole_call: Callable[[_Use], bool]) -> bool:
        """Whether the function reads a per-rank value from outside it: a global or an attribute (``self.x``) that
        is per-rank (not a name it binds itself), or the result of a per-rank helper whose call ``whole_call`` does
        not show to be whole."""
        for use in self._uses(function.body):
            if use.function is not None:
                if use.function in self.functions and not whole_call(use):
                    return True
            elif use.key is not None and not use.sized and home._key(function.body, use.key[1])[0] is not function:
                if self._holds(use.key, use.at_module):  # type: ignore[arg-type]
                    return True
        return False

    def _whole_pass_call(self, call: cst.Call, function: cst.FunctionDef) -> bool:
        """Whether this call of a function whose result may be per-rank goes over whole data sets only: every
        loop of the function over a loader iterates one of its parameters (``def run_epoch(model, loader,
        optimizer=None)``, shared by training and evaluation), this call passes loaders that no
        ``DistributedSampler`` shards there (``run_epoch(model, val_loader)``) and that the function goes over
        whole (not shuffled and left after some batches: :func:`partial_random_pass`), no other argument is
        per-rank, and the function reads no per-rank value of its module or object, nor calls a helper whose
        result is. Every rank then computes the same."""
        found = self._whole_calls.get(call)
        if found is not None:
            return found
        if call in self._deciding:
            return False  # (a recursive function: not whole while it is being decided)
        self._deciding.add(call)
        try:
            found = self._decide_whole_pass(call, function)
        finally:
            self._deciding.discard(call)
        if self._solved:  # (while the per-rank values still grow, the answer may still change)
            self._whole_calls[call] = found
        return found

    def _decide_whole_pass(self, call: cst.Call, function: cst.FunctionDef) -> bool:
        shared = self.analysis.shared
        home = shared.analysis_of(function) or self.analysis
        caller = shared.analysis_of(call) or self.analysis
        loops = [loop for loop in home.loader_loops if home.is_inside(loop.loop, function)]
        if not loops or any(partial_random_pass(home, loop) for loop in loops):
            return False  # (a shuffled loader left after some batches: each rank sees other samples)
        loader_arguments: set[cst.CSTNode] = set()
        for loop in loops:
            root = (dotted_name(loop.loader_expr) or "").split(".")[0]
            if not root or not home.is_parameter(function, root) or home.enclosing_function(loop.loop) is not function:
                return False
            argument = caller.argument_for(call, function, root)
            if argument is None:
                return False
            loaders = {o for o in caller.origins(argument) if o in self._loader_calls()}
            if not loaders or any(self._sharded(shared.analysis_of(o) or caller, o) for o in loaders):  # type: ignore[arg-type]
                return False
            loader_arguments.add(argument)
        if any(arg.value not in loader_arguments and self.mention(arg.value) is not None for arg in call.args):
            return False
        # What the function reads from outside it (a global, ``self.x``, a per-rank helper's result): per-rank
        # there, per-rank here (its own locals are per-rank over the training shard, not here).
        return not self._reads_per_rank_from_outside(home, function, lambda use: self._whole_pass_call(use.call, use.function))  # type: ignore[arg-type]

    def _loader_calls(self) -> set[cst.CSTNode]:
        if self._program_loaders is None:
            self._program_loaders = set(self.analysis.program_loader_calls)
        return self._program_loaders

    def _uses(self, expr: cst.CSTNode) -> list[_Use]:
        """The calls of this file's functions and the names an expression uses outside reductions and shape
        queries, in source order (each a candidate for :meth:`mention`), read once per expression."""
        found = self._uses_of.get(expr)
        if found is None:
            found = self._uses_of[expr] = []
            self._collect_uses(expr, found)
        return found

    def _collect_uses(self, expr: cst.CSTNode, found: list[_Use]) -> None:
        kind = type(expr)
        analysis = self.analysis
        if kind is cst.Call:
            if dotted_name(expr.func) == "len":  # type: ignore[attr-defined]
                # The length of a batch is the same on every rank; that of a list filled on a per-rank
                # decision (``if loss > hard: queue.append(x)``) is not.
                name = dotted_name(expr.args[0].value) if len(expr.args) == 1 else None  # type: ignore[attr-defined]
                if name is not None:
                    found.append(_Use(f"len({name})", key=self.key(expr, name), sized=True))
                return
            if analysis.is_reduction(expr) or call_method_name(expr) in SHAPE_QUERIES:  # type: ignore[arg-type]
                return
            target = analysis.call_target(expr)  # type: ignore[arg-type]
            if target is not None:
                # (each function the call may run: ``self.train_step(b)`` of a base class runs a subclass's override)
                for function in (target, *analysis.shared.other_targets.get(expr, ())):  # type: ignore[call-overload]
                    found.append(_Use(dotted_name(expr.func) or "a per-rank value", function=function, call=expr))  # type: ignore[attr-defined, arg-type]
        elif kind is cst.Attribute and expr.attr.value in SHAPE_QUERIES:  # type: ignore[attr-defined]
            return
        if kind is cst.Name or kind is cst.Attribute:
            name = dotted_name(expr)
            if name is not None:
                if self._bound_by_a_whole_pass(expr, name.split(".")[0]):
                    return  # ``for x, y in val_loader:`` binds x here: a batch every rank sees whole
                found.append(_Use(name, key=self.key(expr, name), at_module=(analysis.module_of(expr), name), node=expr))
                for key in self._keys_of_each_class(expr, name):
                    found.append(_Use(name, key=key, at_module=(analysis.module_of(expr), name), node=expr))
        for child in tree.children(expr):
            self._collect_uses(child, found)

    def _bound_by_a_whole_pass(self, node: cst.CSTNode, root: str) -> bool:
        """Whether the name used at the node is the variable of the innermost loop around it that binds it,
        and that loop goes over loaders no ``DistributedSampler`` shards (an evaluation on the whole set): the
        keys are per scope, so the training loop's ``x`` and the validation loop's ``x`` share one."""
        home = self.analysis.shared.analysis_of(node) or self.analysis
        loop = _loop_binding(home, node, root)
        if type(loop) is cst.For:
            return self._whole_passes().get(loop, False)  # type: ignore[arg-type]
        # ``sum(loss(model(x), y) for x, y in val_loader)``: the comprehension's own variables.
        return loop is not None and self._whole_loader(home, loop.iter)

    def _whole_loader(self, home: ScriptAnalysis, iterated: cst.BaseExpression) -> bool:
        """Whether a comprehension goes over loaders of the program that no ``DistributedSampler`` shards."""
        loaders = [o for o in home.origins(iterated) if o in self._loader_calls()]
        return bool(loaders) and not any(self._sharded(home, loader) for loader in loaders)  # type: ignore[arg-type]

    def _sharded(self, home: ScriptAnalysis, loader: cst.Call) -> bool:
        """Whether a loader of the program is sharded: a ``DistributedSampler``, or one of :attr:`also_sharded`."""
        return loader in self.also_sharded or shards(home, loader)

    def _whole_passes(self) -> dict[cst.For, bool]:
        """For each loop over loaders in the program: whether none of its loaders is sharded."""
        if self._passes is None:
            self._passes = {}
            for module in self.analysis.shared.analyses:
                for loop in module.loader_loops:
                    if isinstance(loop.loop, cst.For) and loop.loader_calls:
                        self._passes[loop.loop] = not any(self._sharded(module, c) for c in loop.loader_calls) and not partial_random_pass(module, loop)
        return self._passes

    def _targets(self, node: cst.CSTNode, target: cst.BaseExpression) -> list[tuple[Owner, str]]:
        """The keys an assignment to ``target`` marks (the names in it, not the attributes' parts)."""
        return [self.key(node, name) for _, name in self.analysis.names_in_target(target)]

    def _mark(self, keys: list[tuple[Owner, str]], at: cst.CSTNode | None = None) -> bool:
        """Mark names per-rank, made so by the statement ``at`` (``None``: by no one place)."""
        changed = False
        for key in keys:
            self.one_rank.discard(key)  # (computed from per-rank data too)
            if key not in self.names:
                self.names.add(key)
                changed = True
            changed |= self._marked_by(key, at)
        return changed

    def _marked_by(self, key: tuple[Owner, str], at: cst.CSTNode | None) -> bool:
        """Record the statement that made a name per-rank; whether that is news."""
        markers = self._marked_at.get(key, set())
        if markers is None or (at is not None and at in markers):
            return False
        if at is None:
            self._marked_at[key] = None
        else:
            markers.add(at)
            self._marked_at[key] = markers
        return True

    def _mark_on_one_rank(self, keys: list[tuple[Owner, str]], at: cst.CSTNode) -> bool:
        """Mark names one rank alone assigns (:attr:`one_rank`), unless the data already made them per-rank."""
        changed = False
        for key in keys:
            if key not in self.names:
                self.names.add(key)
                self.one_rank.add(key)
                changed = True
            if key in self.one_rank:
                changed |= self._marked_by(key, at)
        return changed

    def solve(self, seeds: list[tuple[cst.CSTNode, cst.BaseExpression]]) -> None:
        analysis = self.analysis
        for node, target in seeds:
            self._seed_nodes.add(node)
            marker = node
            if type(node) is cst.Call and type(target) is cst.Name:  # ``loss.backward()``: the ``loss`` bound there
                marker = (analysis.shared.analysis_of(node) or analysis).binding_in_effect(node, target.value) or node  # type: ignore[attr-defined]
            self._mark(self._targets(node, target), marker)
        modules = analysis.shared.analyses
        for module, assign in ((module, assign) for module in modules for assign in module.assignments):
            if any(type(n) is cst.Call and analysis.is_call_to(n, names.REDUCTIONS) for n in module.nodes_below(assign.value)):  # type: ignore[arg-type]
                targets = [t.target for t in assign.targets] if isinstance(assign, cst.Assign) else [assign.target]
                for target in targets:
                    name = dotted_name(target)
                    if name:
                        self.reduced.add(self.key(assign, name))
        for call in (call for module in modules for call in module.calls_to(names.REDUCTIONS | BROADCASTS)):
            name = dotted_name(call.args[0].value) if call.args else None
            # In place: the tensor now holds the total, or rank 0's value (``dist.broadcast(stop, 0)``).
            if name and self.analysis.is_call_to(call, names.TORCH_COLLECTIVES | BROADCASTS):
                self.reduced.add(self.key(call, name))
        if analysis.program_reducing_methods:
            for module in modules:
                for call in module.calls:
                    # ``top1.all_reduce()``: a method of the program that reduces its object's values in place
                    receiver = dotted_name(call.func.value) if type(call.func) is cst.Attribute else None  # type: ignore[attr-defined]
                    if receiver and module.reduces_in_place(call):
                        self.reduced.add(self.key(call, receiver))
        steps = [step for module in modules for node in module.preorder if (step := self._step_of(node)) is not None]
        for _ in range(10):
            changed = False
            for step in steps:
                changed |= step()
            if not changed:
                break
        self._solved = True

    def _step_of(self, node: cst.CSTNode) -> Callable[[], bool] | None:
        """What one round of the fixed point does at the node (``None``: nothing), with what it reads of
        the tree read now."""
        analysis = self.analysis
        mention = self.mention
        kind = type(node)
        if kind is cst.Assign or ((kind is cst.AugAssign or kind is cst.AnnAssign) and node.value is not None):  # type: ignore[attr-defined]
            # A value assigned under a per-rank test is per-rank too: ``if loss < best: patience = 0``,
            # ``if trainer.train_loss < target: trainer.should_stop = True``.
            targets = [t.target for t in node.targets] if kind is cst.Assign else [node.target]  # type: ignore[attr-defined]
            keys = [key for target in targets for key in self._targets(node, target)]
            conditions = list(rank_facts(analysis.shared.analysis_of(node) or analysis).conditions(node))
            if any(c.kind is Kind.RANK and c.in_body is not None for c in conditions):
                return lambda: self._mark_on_one_rank(keys, node)  # ``if is_main: ... stop = bad >= patience``: rank 0's value alone
            # The tests of the ``if`` statements around it (not the early exits before it).
            read = [node.value, *(c.test for c in conditions if type(c.owner) is cst.If and not c.early_exit)]  # type: ignore[attr-defined]
            return lambda: any(mention(value) for value in read) and self._mark(keys, node)
        if kind is cst.For:
            # ``for step, batch in enumerate(...)``: inside the loop the index counts the passes, the same on
            # every rank at the same pass. After the loop it is how many passes this rank made (a per-rank list, a
            # per-rank break): read there, it stays per-rank.
            value, target = node.iter, node.target  # type: ignore[attr-defined]
            if (
                _enumerates(analysis, value)
                and type(target) in (cst.Tuple, cst.List)
                and len(target.elements) == 2  # type: ignore[attr-defined]
                and type(index := target.elements[0].value) is cst.Name  # type: ignore[attr-defined]
                and not self._used_outside(node, index.value)  # type: ignore[attr-defined]
            ):
                target = target.elements[1].value  # type: ignore[attr-defined]
            keys = self._targets(node, target)
            return lambda: bool(mention(value)) and self._mark(keys, node)
        if kind is cst.Return and node.value is not None:  # type: ignore[attr-defined]
            value, function = node.value, analysis.enclosing_function(node)  # type: ignore[attr-defined]
            if function is None:
                return None
            return lambda: bool(mention(value)) and self._add_function(function)
        if kind is not cst.Call:
            return None
        collected = None
        tests: list[cst.BaseExpression] = []
        if call_method_name(node) in COLLECTING_METHODS and node.args:  # type: ignore[arg-type, attr-defined]
            receiver = node.func.value  # type: ignore[attr-defined]
            # ``self.logged.setdefault(name, []).append(v)``: the list lives in the dict, which collects it
            while type(receiver) is cst.Call and call_method_name(receiver) in ("setdefault", "get") and type(receiver.func) is cst.Attribute:  # type: ignore[arg-type]
                receiver = receiver.func.value  # type: ignore[attr-defined]
            collected = ([a.value for a in node.args], self._targets(node, receiver))
            conditions = rank_facts(analysis.shared.analysis_of(node) or analysis).conditions(node)
            tests = [c.test for c in conditions if type(c.owner) is cst.If and not c.early_exit]  # type: ignore[misc]
        passed: list[tuple[tuple[Owner, str], cst.BaseExpression]] = []
        # ``model(x)`` runs the model's ``forward(self, x)``: its inputs are the step's batch. A method called on
        # objects of several classes (``for cb in self.callbacks: cb.on_epoch_end(self, epoch, logs)``) hands
        # its arguments to each class's method.
        # (Only methods the call names: ``getattr(runner, args.action)(batch)`` may run any method of the class.)
        first = analysis.call_target(node) or analysis.model_forward(node)  # type: ignore[arg-type]
        named = node.func.attr.value if type(node.func) is cst.Attribute else None  # type: ignore[attr-defined]
        others = [f for f in analysis.shared.other_targets.get(node, ()) if f.name.value == named]  # type: ignore[call-overload]
        functions = [first, *others] if first is not None else []
        # ``clip_loss(*model(x, y))``: what the unpacked value holds fills the parameters no argument names
        # (those without a default: a default is more often left alone).
        unpacked = [a.value for a in node.args if a.star]  # type: ignore[attr-defined]
        for function in functions:
            for param in function.params.params:
                argument = analysis.argument_for(node, function, param.name.value)  # type: ignore[arg-type]
                if argument is not None:
                    passed.append(((function, param.name.value), argument))
                elif param.default is None:
                    passed.extend(((function, param.name.value), value) for value in unpacked)
        # ``update_confusion(conf, pred, y)`` whose body does ``conf += torch.bincount(...)``: the caller's ``conf``
        # now holds what the function added to it in place.
        updated = [
            (self._targets(node, argument), values)
            for function in functions
            for param, values in _updated_in_place(analysis.shared.analysis_of(function) or analysis, function).items()
            if (argument := analysis.argument_for(node, function, param)) is not None and dotted_name(argument) is not None  # type: ignore[arg-type]
        ]
        if collected is None and not functions:
            return None

        def step() -> bool:
            if collected is not None and tests and not set(collected[1]) <= self.sized and any(mention(t) for t in tests):
                self.sized.update(collected[1])
                self._mark(collected[1], node)
                return True
            if collected is not None and any(mention(value) for value in collected[0]):
                return self._mark(collected[1], node)
            changed = False
            for key, argument in passed:
                if mention(argument):
                    changed |= self._mark([key])
            for keys, values in updated:
                if any(mention(value) for value in values):
                    changed |= self._mark(keys, node)
            return changed

        return step

    def _used_outside(self, loop: cst.For, name: str) -> bool:
        """Whether the loop's scope uses the name outside the loop."""
        home = self.analysis.shared.analysis_of(loop) or self.analysis
        scope = home.scope_of(loop)
        return any(
            type(node) is cst.Name and node.value == name and not home.is_inside(node, loop) and home.scope_of(node) is scope  # type: ignore[attr-defined]
            for node in home.nodes_below(scope)
        )

    def _add_function(self, function: cst.FunctionDef) -> bool:
        if function in self.functions:
            return False
        self.functions.add(function)
        return True


def _updated_in_place(home: ScriptAnalysis, function: cst.FunctionDef) -> dict[str, list[cst.BaseExpression]]:
    """The parameters a function updates in place, with the values it adds in: ``conf += v``, ``conf[i] += v``,
    ``conf.add_(v)`` (read once per function)."""
    cache = home.shared.__dict__.setdefault("_updated_in_place", {})
    if function in cache:
        return cache[function]
    params = {p.name.value for p in function.params.params}
    found: dict[str, list[cst.BaseExpression]] = {}
    for node in home.nodes_below(function.body):
        kind = type(node)
        if kind is cst.AugAssign:
            target = node.target  # type: ignore[attr-defined]
            root = dotted_name(target.value if type(target) is cst.Subscript else target)  # type: ignore[attr-defined]
            if root in params:
                found.setdefault(root, []).append(node.value)  # type: ignore[attr-defined, arg-type]
        elif kind is cst.Call and call_method_name(node) in _IN_PLACE_ADDS and node.args and type(node.func) is cst.Attribute:  # type: ignore[arg-type, attr-defined]
            root = dotted_name(node.func.value)  # type: ignore[attr-defined]
            if root in params:
                found.setdefault(root, []).extend(a.value for a in node.args)  # type: ignore[attr-defined, arg-type]
    cache[function] = found
    return found


#: Tensor methods that add values into the tensor itself.
_IN_PLACE_ADDS = frozenset({"add_", "copy_", "index_add_", "scatter_add_", "put_"})


#: The statements that bind a name (what :meth:`PerRankValues._reached` compares with the binding in effect).
_BINDINGS = (cst.Assign, cst.AnnAssign, cst.AugAssign, cst.For)


def _item_keys(home: ScriptAnalysis, subscript: cst.Subscript) -> frozenset[str] | None:
    """The string keys a subscript may read: its literal (``logs["val_acc"]``), or the string literals every
    object of the class is given for an attribute of ``self`` set from its ``__init__``'s parameter
    (``logs[self.monitor]`` of ``ModelCheckpoint(path, monitor="val_acc")``, the parameter's default where
    a construction passes none); ``None`` where they cannot be told."""
    key = subscript_key(subscript)
    if key is not None:
        return frozenset({key})
    index = subscript.slice[0].slice if len(subscript.slice) == 1 else None
    attribute = dotted_name(index.value) if type(index) is cst.Index else None  # type: ignore[attr-defined]
    owner = home.enclosing_class(subscript)
    if attribute is None or not attribute.startswith("self.") or attribute.count(".") != 1 or owner is None:
        return None
    if home.shared.subclasses_of(owner):
        return None
    sets = [
        assign
        for assign in home.assignments
        if isinstance(assign, cst.Assign)
        and home.enclosing_class(assign) is owner
        and any(dotted_name(t.target) == attribute for t in assign.targets)
    ]
    if len(sets) != 1 or type(sets[0].value) is not cst.Name:
        return None
    init = home.enclosing_function(sets[0])
    parameter = sets[0].value.value  # type: ignore[attr-defined]
    if init is None or init.name.value != "__init__" or not home.is_parameter(init, parameter):
        return None
    default = next((p.default for p in init.params.params + init.params.kwonly_params if p.name.value == parameter), None)
    found: set[str] = set()
    constructions = home.shared.instances_of(owner)
    if not constructions:
        return None
    for call in constructions:
        caller = home.shared.analysis_of(call) or home
        given = caller.argument_for(call, init, parameter)
        value = string_value(given if given is not None else default)
        if value is None:
            return None
        found.add(value)
    return frozenset(found)


def _items_written(
    home: ScriptAnalysis, scope: cst.CSTNode, name: str, keys: frozenset[str], mention: Callable[[cst.CSTNode], str | None]
) -> bool:
    """Whether the scope writes a per-rank value at one of ``keys`` of the name's dict, or an item it cannot
    tell (``logs[k] = v``, ``logs.update(...)``): what those keys hold is then not only what the dict written out
    held. Items at other keys (``state["last_loss"] = loss.item()`` beside a ``state["global_step"] += 1``
    that is read) are no matter."""
    for node in home.nodes_below(scope):
        kind = type(node)
        if kind is cst.AssignTarget or kind is cst.AugAssign:
            target = node.target  # type: ignore[attr-defined]
            if type(target) is cst.Subscript and dotted_name(target.value) == name:
                key = subscript_key(target)
                value = node.value if kind is cst.AugAssign else home.parent(node).value  # type: ignore[attr-defined]
                if key is None or (key in keys and mention(value) is not None):
                    return True
        elif kind is cst.Call and call_method_name(node) in _ITEM_WRITES:  # type: ignore[arg-type]
            if dotted_name(node.func.value) == name:  # type: ignore[attr-defined]
                return True
    return False


#: Methods that write items into a dict.
_ITEM_WRITES = frozenset({"update", "setdefault", "__setitem__"})


def _loop_binding(home: ScriptAnalysis, node: cst.CSTNode, root: str) -> cst.For | cst.CompFor | None:
    """The innermost ``for`` loop, or ``for`` of a comprehension, around a node (within its function) whose
    target binds the name ``root``; ``None`` where none does."""
    for ancestor in home.ancestors(node):
        kind = type(ancestor)
        if kind is cst.FunctionDef or kind is cst.ClassDef or kind is cst.Lambda:
            return None
        if kind is cst.For and any(name.split(".")[0] == root for _, name in home.names_in_target(ancestor.target)):  # type: ignore[attr-defined]
            return ancestor  # type: ignore[return-value]
        if kind in COMPREHENSIONS:
            loop = ancestor.for_in  # type: ignore[attr-defined]
            while loop is not None:
                if any(name.split(".")[0] == root for _, name in home.names_in_target(loop.target)):
                    return loop
                loop = loop.inner_for_in
    return None


class _Use:
    """One thing an expression uses that may hold a per-rank value: a name (with its keys) or a call of one
    of this file's functions."""

    __slots__ = ("shown", "function", "call", "key", "at_module", "sized", "node")

    def __init__(
        self,
        shown: str,
        function: cst.FunctionDef | None = None,
        key: tuple[Owner, str] | None = None,
        at_module: tuple[Owner, str] | None = None,
        sized: bool = False,
        call: cst.Call | None = None,
        node: cst.CSTNode | None = None,
    ) -> None:
        self.shown = shown
        self.node = node
        self.sized = sized
        self.function = function
        self.call = call
        self.key = key
        self.at_module = at_module


def _seeds(analysis: ScriptAnalysis) -> list[tuple[cst.CSTNode, cst.BaseExpression]]:
    """The batches of the loaders a ``DistributedSampler`` shards, the values of draws the program seeds from
    the rank, and the losses ``backward()`` is called on, in every module of the program (a training step in ``engine.py`` returns its metrics to
    ``main.py``)."""
    seeds: list[tuple[cst.CSTNode, cst.BaseExpression]] = []
    modules = analysis.shared.analyses
    for module in modules:
        for loop in module.loader_loops:
            if not any(shards(module, loader) for loader in loop.loader_calls) and not partial_random_pass(module, loop):
                continue
            seeds.append(_batch_seed(module, loop))
    for draw, loaders in loader_facts(analysis).training_draws:  # ``(x,) = next(it)`` of ``it = iter(loader)``
        home = analysis.shared.analysis_of(draw) or analysis
        if any(shards(analysis.shared.analysis_of(loader) or home, loader) for loader in loaders):
            seeds.extend(_assigned_from(home, draw))
    draws = per_rank_draws(analysis)
    for draw in draws:  # ``ix = torch.randint(...)`` seeded from the rank: each rank's own batch
        seeds.extend(_draw_seeds(analysis, draw))
    if draws_per_rank(analysis):
        for module in modules:
            seeds.extend(seed for node in module.preorder if type(node) is cst.Subscript for seed in _rank_part_seeds(module, node))  # type: ignore[arg-type]
    sharded = shards_training_data(analysis)
    for module in modules:
        for call in module.backward_calls:
            receiver = backward_loss(call)
            if isinstance(receiver, (cst.Name, cst.Attribute)) and sharded:
                seeds.append((call, receiver))
    return seeds


def _draw_seeds(analysis: ScriptAnalysis, draw: cst.Call) -> list[tuple[cst.CSTNode, cst.BaseExpression]]:
    """What a draw seeded from the rank makes per-rank: what it is assigned to; for a draw through a generator an
    object keeps, seeded alike in some of the objects of its class (``Windows(data, seed=rank)`` for training,
    ``Windows(data, seed=123)`` for validation), what the calls of its method on the rank-seeded objects are
    assigned to (``x, y = train.batch(8)``), where every call of the method names its object."""
    home = analysis.shared.analysis_of(draw) or analysis
    split = rank_seeded_instances(analysis, draw)
    if split is None or len(split[1]) == split[2]:
        return _assigned_from(home, draw)
    method, from_rank, _ = split
    seeds: list[tuple[cst.CSTNode, cst.BaseExpression]] = []
    for call in home.callers_in_program(method):
        caller = analysis.shared.analysis_of(call) or home
        receiver = call.func.value if type(call.func) is cst.Attribute else None  # type: ignore[attr-defined]
        objects = caller.origins(receiver) if receiver is not None else set()
        if not objects or not objects <= caller.shared.constructed.keys():
            return _assigned_from(home, draw)  # (``self.batch()``, an object of unknown origin: any of them)
        if objects & from_rank:
            seeds.extend(_assigned_from(caller, call))
    return seeds


def _rank_part_seeds(module: ScriptAnalysis, subscript: cst.Subscript) -> list[tuple[cst.CSTNode, cst.BaseExpression]]:
    """What is assigned the part of the data a rank takes by hand (:func:`takes_a_rank_part`). A part of a function's
    parameter (``data = source[i:i + 8]`` in ``get_batch(source, i)``) is no seed: it is per-rank where a caller
    hands the function a rank's data, which the parameter's flow says call by call (the same helper reads a whole
    validation set elsewhere)."""
    function = module.enclosing_function(subscript)
    if function is not None and type(subscript.value) is cst.Name and module.is_parameter(function, subscript.value.value):  # type: ignore[attr-defined]
        return []
    return _assigned_from(module, subscript) if takes_a_rank_part(module, subscript) else []


def _enumerates(analysis: ScriptAnalysis, iterated: cst.BaseExpression, depth: int = 0) -> bool:
    """Whether a loop's items are ``enumerate``'s (index, item) pairs: ``enumerate(loader)``, also under a progress
    bar (``tqdm(enumerate(loader), total=nb)``) or through a name that only ever holds such pairs (YOLOv5's ``pbar =
    enumerate(train_loader)``, then ``pbar = tqdm(pbar, total=nb)`` on rank 0)."""
    iterated = _inside_item_keeping_wrappers(iterated)
    if type(iterated) is cst.Name and depth < 3:
        name = iterated.value  # type: ignore[attr-defined]
        values = [v for v in analysis.flows_into(iterated, name) if not (type(v) is cst.Name and v.value == name)]  # type: ignore[attr-defined]
        # (``tqdm(pbar, total=nb)`` assigned back to ``pbar`` keeps the name's own pairs: its other values decide)
        return bool(values) and all(
            isinstance(v, cst.BaseExpression) and _enumerates(analysis, v, depth + 1) for v in values if not _wraps_the_name(v, name)
        )
    return type(iterated) is cst.Call and dotted_name(iterated.func) == "enumerate"  # type: ignore[attr-defined]


def _wraps_the_name(value: cst.CSTNode, name: str) -> bool:
    """Whether a value is the name under wrappers that keep its items (``tqdm(pbar, total=nb)`` of ``pbar``)."""
    inner = _inside_item_keeping_wrappers(value) if isinstance(value, cst.BaseExpression) else value
    return type(inner) is cst.Name and inner.value == name  # type: ignore[attr-defined]


def _inside_item_keeping_wrappers(iterated: cst.BaseExpression) -> cst.BaseExpression:
    """What a loop iterates under the wrappers that hand its items back as they are (``enumerate(loader)`` of
    ``tqdm(enumerate(loader), total=nb)``)."""
    while type(iterated) is cst.Call and iterated.args and callee_name(iterated) in names.ITEM_KEEPING_WRAPPERS:  # type: ignore[attr-defined]
        iterated = iterated.args[0].value  # type: ignore[attr-defined]
    return iterated


def _batch_seed(analysis: ScriptAnalysis, loop: LoaderLoop) -> tuple[cst.CSTNode, cst.BaseExpression]:
    """A loop over loaders with what holds its batch: the loop's target, the batch of ``enumerate`` (not the index,
    the same on every rank)."""
    target = loop.loop.target
    if _enumerates(analysis, loop.loop.iter) and isinstance(target, (cst.Tuple, cst.List)) and len(target.elements) == 2:
        target = target.elements[1].value
    return loop.loop, target


def training_batch_values(analysis: ScriptAnalysis) -> PerRankValues | None:
    """The values computed from the batches of the program's training loaders, sharded or not yet (a loader with a
    sampler of its own, left to a human): each process's own once its data is sharded. ``None`` where no training
    loader is seen. Solved once per program."""
    cache = analysis.shared.__dict__.setdefault("_per_rank_values", {})
    if "training batches" not in cache:
        seeds: list[tuple[cst.CSTNode, cst.BaseExpression]] = []
        training: set[cst.Call] = set()
        for module in analysis.shared.analyses:
            training |= loader_facts(module).training_loaders
        for module in analysis.shared.analyses:
            seeds += [_batch_seed(module, loop) for loop in module.loader_loops if any(call in training for call in loop.loader_calls)]
        for draw, _ in loader_facts(analysis).training_draws:
            seeds.extend(_assigned_from(analysis.shared.analysis_of(draw) or analysis, draw))
        values = None
        if seeds:
            values = PerRankValues(analysis, frozenset(training))
            values.solve(seeds)
        cache["training batches"] = values
    return cache["training batches"]


def _assigned_from(home: ScriptAnalysis, value: cst.CSTNode) -> list[tuple[cst.CSTNode, cst.BaseExpression]]:
    """The targets of the one-statement line the value is assigned in, each with its statement (``(x,) =
    next(it)``, ``ix = torch.randint(...)``): per-rank seeds."""
    stmt = home.statement(value)
    small = stmt.body[0] if isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 else None
    return [(small, target) for target in assignment_targets(small)] if small is not None else []


def shards(module: ScriptAnalysis, loader: cst.Call) -> bool:
    """Whether a loader of the program hands each rank its own share: a ``DistributedSampler``, or a data set or
    sampler the program cuts by the rank itself (:meth:`LoaderFacts.sharded_by_hand`: its own sampler drawing
    ``indices[rank::world_size]``, a ``Subset`` of the rank's indices)."""
    return module.has_distributed_sampler(loader) or loader_facts(module).sharded_by_hand(loader)


def shards_training_data(analysis: ScriptAnalysis) -> bool:
    """Whether a ``DistributedSampler`` shards a training loader of the program: each process then trains on its
    share of every batch the original took whole (draws each rank makes its own are the program's own doing)."""
    return any(
        shards(module, loader) for module in analysis.shared.analyses for loader in loader_facts(module).training_loaders
    )


def partial_random_pass(analysis: ScriptAnalysis, loop: LoaderLoop) -> bool:
    """Whether a loop over an unsharded loader sees a random part of its set that differs between processes:
    the loader shuffles, torch's random state is not seeded alike on every rank, and the loop leaves after some
    batches (``if i >= eval_batches: break``): each rank evaluates other samples."""
    if not isinstance(loop.loop, cst.For) or not any(
        (shuffle := loader_argument(call, "shuffle")) is not None and is_true(shuffle.value) for call in loop.loader_calls
    ):
        return False
    if not any(type(node) is cst.Break and analysis.nearest_loop(node) is loop.loop for node in walk(loop.loop.body)):
        return False
    return not seeds_alike(analysis, "torch", before=loop.loop)


def divides_a_shard_sum(analysis: ScriptAnalysis, divisor: cst.CSTNode) -> bool:
    """Whether an expression is what a value summed over this process's shard is divided by (``correct /
    len(loader.sampler)``: the shard's mean, which a count of this process's samples is right for), or a factor
    of it (``total / (len(loader.sampler) * SEQ)``)."""
    parent = analysis.parent(divisor)
    while type(parent) is cst.BinaryOperation and type(parent.operator) is cst.Multiply:  # type: ignore[attr-defined]
        divisor, parent = parent, analysis.parent(parent)
    if type(parent) is cst.AugAssign and parent.value is divisor and type(parent.operator) in (cst.DivideAssign, cst.FloorDivideAssign):  # type: ignore[attr-defined]
        summed = parent.target  # type: ignore[attr-defined]  (``total /= len(loader.sampler)``)
    elif type(parent) is cst.BinaryOperation and parent.right is divisor and type(parent.operator) in (cst.Divide, cst.FloorDivide):  # type: ignore[attr-defined]
        summed = parent.left  # type: ignore[attr-defined]
    else:
        return False
    values = per_rank_values(analysis)
    return values is not None and values.mention(summed) is not None


def per_rank_values(analysis: ScriptAnalysis) -> PerRankValues | None:
    """The per-rank values of the program an analysed module belongs to (``None`` where no data is sharded:
    every rank sees the same), solved once per program and kept with its shared flow (each module asks)."""
    cache = analysis.shared.__dict__.setdefault("_per_rank_values", {})
    if "values" not in cache:
        cache["values"] = _solve(analysis)
    return cache["values"]


def _solve(analysis: ScriptAnalysis) -> PerRankValues | None:
    seeds = _seeds(analysis)
    if not seeds:
        return None
    values = PerRankValues(analysis)
    values.solve(seeds)
    return values


#: The logging calls ``runtime.silence_non_main_logging()`` quiets off rank 0: records below ERROR (an error, an
#: exception or a critical record still comes from every rank; ``log(level, ...)`` may be either).
SILENCED_LOG_METHODS = frozenset({"debug", "info", "warning", "warn"})
#: ``SummaryWriter`` methods that record a metric.
SCALAR_WRITER_METHODS = frozenset({"add_scalar", "add_scalars", "add_histogram"})


def rank_zero_outputs(analysis: ScriptAnalysis) -> list[tuple[cst.Call, str]]:
    """The module's calls that show values on one rank only, each with how a message names it:
    ``runtime.print0``, ``logging`` in a program that silences it off rank 0
    (``runtime.silence_non_main_logging()``), and under a rank guard ``print``, ``logging``, a metric logger
    (``wandb.log``) or a ``SummaryWriter``'s ``add_scalar``."""
    found: list[tuple[cst.Call, str]] = []
    writers = set(analysis.calls_to(names.SUMMARY_WRITER))
    logging_calls = set(analysis.logging_calls)
    silenced = bool(logging_calls) and any(module.calls_to(names.RUNTIME_SILENCE_LOGGING) for module in analysis.shared.analyses)
    facts = rank_facts(analysis)
    for call in analysis.calls:
        if analysis.is_call_to(call, names.RUNTIME_PRINT):
            found.append((call, "runtime.print0"))
        elif silenced and call in logging_calls and call_method_name(call) in SILENCED_LOG_METHODS:
            found.append((call, "logging on rank 0"))
        elif facts.guard(call) is None:
            continue
        elif analysis.is_call_to(call, {"builtins.print"}):
            found.append((call, "print on rank 0"))
        elif call in logging_calls:
            found.append((call, "logging on rank 0"))
        elif analysis.is_call_to(call, names.METRIC_LOGGING_CALLS):
            found.append((call, f"{dotted_name(call.func)} on rank 0"))
        elif call_method_name(call) in SCALAR_WRITER_METHODS and writers & analysis.origins(call.func.value):  # type: ignore[attr-defined]
            found.append((call, "SummaryWriter on rank 0"))
    return found


def shard_values_shown(analysis: ScriptAnalysis, containers: bool = True) -> list[tuple[cst.Call, str, str]]:
    """The rank-0 outputs of the module (:func:`rank_zero_outputs`) that show a value computed on this process's
    shard of the data, not reduced across ranks on the way (one per call: the call, how a message names it, and
    the first such value's text); none where no data is sharded. Without ``containers``, only values shown
    directly, not read out of a container (:meth:`PerRankValues.mention`)."""
    values = per_rank_values(analysis)
    if values is None:
        return []
    shown: list[tuple[cst.Call, str, str]] = []
    for call, what in rank_zero_outputs(analysis):
        found: list[str] = []
        for arg in call.args:
            # each value an f-string shows (``f"loss {loss:.3f} acc {acc:.3f}"``: both named, not the first alone)
            parts = [p.expression for p in arg.value.parts if type(p) is cst.FormattedStringExpression] if type(arg.value) is cst.FormattedString else [arg.value]  # type: ignore[attr-defined]
            for part in parts:
                value = values.mention(part, data_only=True, containers=containers)
                if value is not None and value not in found:
                    found.append(value)
        if found:
            shown.append((call, what, found[0] if len(found) == 1 else ", ".join(found[:-1]) + " and " + found[-1]))
    return shown


def shard_values_saved(analysis: ScriptAnalysis) -> list[tuple[cst.Call, str]]:
    """The module's checkpoint saves (``torch.save``, ``runtime.save``: rank 0 writes) whose object holds a value
    computed on this process's shard of the data, not reduced across ranks on the way (``{"threshold": thr}`` of
    a quantile over the shard's errors), each with the first such value's text; none where no data is sharded."""
    values = per_rank_values(analysis)
    if values is None:
        return []
    saved: list[tuple[cst.Call, str]] = []
    for call in analysis.calls_to(names.TORCH_SAVE | names.RUNTIME_SAVE):
        held = values.mention(call.args[0].value, data_only=True, containers=False) if call.args else None
        if held is not None:
            saved.append((call, held))
    return saved

