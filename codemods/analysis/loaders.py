"""Facts about data loaders beyond the ``for x in loader`` loops of :class:`ScriptAnalysis`.

Built only on the public queries of :class:`~.script.ScriptAnalysis` and computed once per analysis
(:func:`loader_facts`):

- loader arguments passed through a dict (``train_kwargs = {...}; train_kwargs.update({...});
  DataLoader(ds, **train_kwargs)``): the keys the dict can hold, when every write to it is visible;
- loaders stored in dicts (``{x: DataLoader(...) for x in phases}``) and iterated by subscript
  (``for x, y in loaders[phase]``);
- loaders driven by hand (``it = iter(loader)`` / ``next(it)``) in code that trains;
- which training loops are shared by training and evaluation (``run_epoch(loader, optimizer=None)`` with
  ``if training: loss.backward()``): a call site that leaves the optimizer ``None`` evaluates;
- the training and evaluation loaders that follow from all of the above;
- loaders whose data set already holds this rank's share (``Subset(data, range(rank, n, world_size))``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterator

import libcst as cst

from .. import names
from .ranks import Kind, calls_feeding_the_losses, rank_facts
from .values import UNKNOWN, evaluate, flip, literal_value, truth, value_at
from .script import (
    ScriptAnalysis,
    all_parameters,
    binding_name,
    callee_name,
    dotted_name,
    is_none,
    is_true,
    item_name,
    keyword_argument,
    literal_dict_items,
    loader_argument,
    passed_over,
    statements_of,
    unwrap_iterable,
    walk,
    wrapper_inside,
)

#: Torch's batch samplers, which wrap a sampler (``BatchSampler(sampler, batch_size, drop_last)``).
_BATCH_SAMPLERS = frozenset({"torch.utils.data.BatchSampler", "torch.utils.data.sampler.BatchSampler"})
#: ``DataLoader`` keywords that bring their own sampling: sharding must not replace them.
SAMPLING_KEYS = frozenset({"sampler", "batch_sampler"})


@dataclass(frozen=True)
class KwargsDict:
    """The dict a loader's ``**name`` unpacks: its name and every key it may hold (``None``: unknown)."""

    name: str
    keys: frozenset[str] | None
    values: tuple[tuple[str, cst.BaseExpression], ...] = ()

    def value_of(self, key: str) -> list[cst.BaseExpression]:
        return [v for k, v in self.values if k == key]


@dataclass
class LoaderFacts:
    """What the loader rules need to know, for one analysed module (see the module docstring)."""

    analysis: ScriptAnalysis
    #: Loader calls stored in a dict (literal or comprehension) -> the dict's name.
    dict_loaders: dict[cst.Call, str] = field(default_factory=dict)
    #: Of those, the ones a loop that trains iterates by subscript.
    dict_training: set[cst.Call] = field(default_factory=set)
    #: Answers kept per loader (:meth:`sharded_at_a_call_site`, :meth:`stream_cut_by_rank`).
    _sampled_at_call_sites: dict[cst.Call, bool] = field(default_factory=dict)
    _stream_cuts: dict[cst.Call, cst.ClassDef | None] = field(default_factory=dict)
    #: The loops, in any module, that train over a dict of loaders handed on (``loader = self.loaders[mode]``).
    dict_training_loops: set[cst.For] = field(default_factory=set)
    #: Loaders whose batches are drawn with ``next(...)`` in code that trains.
    iterator_training: set[cst.Call] = field(default_factory=set)
    #: The ``next(it)`` calls, in any module, that draw those loaders' training batches, with the loaders they draw from.
    training_draws: list[tuple[cst.Call, frozenset[cst.Call]]] = field(default_factory=list)
    #: Loaders a comprehension trains on (``[self.train_step(b) for b in self.loader]``).
    comprehension_training: set[cst.Call] = field(default_factory=set)
    #: Loaders iterated by a loop that trains only at some call sites, passed only at evaluating ones.
    evaluated_by_call_site: set[cst.Call] = field(default_factory=set)
    #: Loaders iterated by a conditionally training loop whose call sites do not tell whether they train.
    undecided: set[cst.Call] = field(default_factory=set)
    #: Loaders iterated by loops none of which is known to reach the program's ``backward()``: the step is
    #: called through something the analysis cannot follow (``getattr(self, name)(batch)``, a table of
    #: steps), so whether they train cannot be told.
    unconnected: set[cst.Call] = field(default_factory=set)
    #: Training loaders built by a function that several call sites use (``create_loader(ds, is_training)``
    #: for the training and the evaluation set): one sampler there would shard every one of them.
    shared_factories: set[cst.Call] = field(default_factory=set)
    training_loaders: set[cst.Call] = field(default_factory=set)
    evaluation_loaders: set[cst.Call] = field(default_factory=set)

    def __post_init__(self) -> None:
        self._hand_sharded: dict[cst.Call, bool] = {}
        self._rank_samplers: dict[cst.Call, cst.Call | None] = {}
        self._epoch_calls: dict[cst.Call, list[cst.Call]] = {}
        a = self.analysis
        self._loader_set = set(a.program_loader_calls)
        self._find_dict_loaders()
        self._find_iterator_loops()
        self._find_comprehension_steps()
        training: set[cst.Call] = set()
        for loop in a.program_loader_loops:
            if not loop.trains:
                continue
            home = a.shared.analysis_of(loop.loop) or a
            dispatch = _split_by_dispatch(home, loop.loop, loop.loader_expr, self._loader_set, loop.loader_calls)
            if dispatch is not None:
                trains, evaluates, unsure = dispatch
                training |= trains - unsure
                for call in loop.loader_calls - (trains - unsure):
                    (self.evaluated_by_call_site if call in evaluates and call not in unsure else self.undecided).add(call)
                continue
            split = _split_by_call_site(home, loop.loop, loop.loader_expr, self._loader_set)
            if split is None:
                training |= loop.loader_calls
                continue
            trains, evaluates = split
            training |= trains & loop.loader_calls
            for call in loop.loader_calls - trains:
                (self.evaluated_by_call_site if call in evaluates else self.undecided).add(call)
        self.evaluated_by_call_site -= training
        self.undecided -= training | self.evaluated_by_call_site
        training |= self.iterator_training | self.comprehension_training
        self.shared_factories = {call for call in training if _built_for_several_callers(a, call)}
        training -= self.shared_factories
        # ``{split: DataLoader(sets[split], ...) for split in splits}``: one call builds every phase's loader.
        by_phase = {call for call in training if isinstance(_dict_container(a.shared.analysis_of(call) or a, call), cst.DictComp)}
        self.dict_training |= by_phase
        training -= by_phase
        self.training_loaders = training
        iterated = {call for loop in a.program_loader_loops for call in loop.loader_calls}
        if (
            not (training or self.shared_factories or self.dict_training or self.undecided)
            and a.program_backward_calls
            and not any(_runs_in_a_loop(a, call) for call in a.program_backward_calls)
        ):
            self.unconnected = iterated - self.evaluated_by_call_site
        self.evaluation_loaders = (
            (iterated | set(self.dict_loaders))
            - training - self.undecided - self.dict_training - self.shared_factories - self.unconnected
        )

    # ------------------------------------------------------------------ data sharded by hand

    def sharded_by_hand(self, loader: cst.Call) -> bool:
        """Whether the loader's data set already holds this rank's share: it is built from indices or a
        slice computed from the rank (``Subset(data, range(rank, len(data), world_size))``,
        ``TensorDataset(x[rank::world_size])``), followed back through names and the program's functions, or
        it is a stream whose class cuts it by the rank (:meth:`stream_cut_by_rank`).
        A ``DistributedSampler`` there would shard the share again (half the data never trained on). Read
        once per loader (the rule's findings and its notes both ask)."""
        if loader not in self._hand_sharded:
            self._hand_sharded[loader] = (
                self._cut_by_rank(loader) or bool(self.stream_cut_by_rank(loader)) or self.sampler_drawn_by_rank(loader) is not None
            )
        return self._hand_sharded[loader]

    def sampler_drawn_by_rank(self, loader: cst.Call) -> cst.Call | None:
        """The call that builds the loader's own sampler or batch sampler so that it draws this rank's share: of a
        class of the program whose methods cut the indices by the rank (``indices[self.rank :: self.world]`` in
        ``__iter__``, ``if i % world != rank: continue``, the rank handed to its constructor), or of a library's
        class given the rank as torch's samplers take it (``rank=``); the sampler a ``BatchSampler`` wraps too.
        Only the sampler's own call counts, not those that build its data set (``DS(n, verbose=rank == 0)``), nor a
        seed or generator from the rank (each rank then orders the whole set its own way). ``None``: no such
        sampler."""
        if loader not in self._rank_samplers:
            self._rank_samplers[loader] = self._sampler_drawn_by_rank(loader)
        return self._rank_samplers[loader]

    def _sampler_drawn_by_rank(self, loader: cst.Call) -> cst.Call | None:
        a = self.analysis
        home = a.shared.analysis_of(loader) or a
        pending = [(home, arg.value, 0) for parameter in ("sampler", "batch_sampler") if (arg := loader_argument(loader, parameter)) is not None]
        while pending:
            owner, expr, depth = pending.pop()
            calls = [expr] if type(expr) is cst.Call else [o for o in owner.origins(expr) if type(o) is cst.Call] if type(expr) in (cst.Name, cst.Attribute) else []
            for call in calls:
                builder = a.shared.analysis_of(call) or owner
                built = builder.shared.constructed.get(call)  # type: ignore[arg-type]
                if built is not None:
                    if self._cuts_by_rank(built):
                        return call  # type: ignore[return-value]
                    continue
                # A library's sampler says so through torch's own keyword (``DistributedSampler``'s ``rank=``); a seed
                # or a generator from the rank only orders the whole set differently on each rank.
                rank = keyword_argument(call, "rank")  # type: ignore[arg-type]
                if rank is not None and rank_facts(builder).kind(rank.value) is Kind.RANK and not self._through_parameters(builder, rank.value):
                    return call  # type: ignore[return-value]
                if builder.is_call_to(call, _BATCH_SAMPLERS) and call.args:  # type: ignore[arg-type, attr-defined]
                    inner = keyword_argument(call, "sampler") or (call.args[0] if call.args[0].keyword is None else None)  # type: ignore[arg-type, attr-defined]
                    if inner is not None and depth < 2:
                        pending.append((builder, inner.value, depth + 1))  # ``BatchSampler(MySampler(ds, rank), 32, False)``
        return None

    def sharded_at_a_call_site(self, loader: cst.Call) -> bool:
        """Whether every call site whose loader trains hands the function that builds it a ``DistributedSampler``
        through the function's ``**kwargs`` (``build_dataloader(cfg, ds, sampler=DistributedSampler(ds))``: the
        training call of a factory that evaluation shares, sharded by hand). Each such ``sampler=`` must be a
        ``DistributedSampler`` on every path (not ``... if distributed else RandomSampler(ds)``)."""
        if loader not in self._sampled_at_call_sites:
            self._sampled_at_call_sites[loader] = self._every_training_call_sampled(loader)
        return self._sampled_at_call_sites[loader]

    def _every_training_call_sampled(self, loader: cst.Call) -> bool:
        a = self.analysis
        home = a.shared.analysis_of(loader) or a
        function = home.enclosing_function(loader)
        if function is None or not home.forwards_keywords(loader):
            return False
        sites = set(home.callers_in_program(function))
        training_sites = {
            origin
            for loop in a.program_loader_loops
            if loop.trains and loader in loop.loader_calls
            for origin in (a.shared.analysis_of(loop.loop) or a).origins(loop.loader_expr)
            if origin in sites
        }
        if not training_sites:
            return False
        for site in training_sites:
            owner = a.shared.analysis_of(site) or a
            given = keyword_argument(site, "sampler")  # type: ignore[arg-type]
            if given is None or not _always_a_distributed_sampler(owner, given.value):
                return False
        return True

    def stream_cut_by_rank(self, loader: cst.Call) -> cst.ClassDef | None:
        """The class (see :meth:`_stream_cut_by_rank`), read once per loader."""
        if loader not in self._stream_cuts:
            self._stream_cuts[loader] = self._stream_cut_by_rank(loader)
        return self._stream_cuts[loader]

    def _stream_cut_by_rank(self, loader: cst.Call) -> cst.ClassDef | None:
        """The iterable-style dataset class of the program behind the loader whose methods already cut the
        stream by rank: a ``range``/``islice`` or a slice bounded by the rank (``range(rank, n, world)``), or
        a test on it that skips samples (``if i % world != rank: continue``). Such a stream yields each
        process its own share: a second split would lose data. ``None``: no such class."""
        return next((cls for cls in self.stream_classes(loader) if self._cuts_by_rank(cls)), None)

    def _cuts_by_rank(self, cls: cst.ClassDef) -> bool:
        """Whether a class of the program cuts what it yields by the rank: a ``range``/``islice`` or a slice
        bounded by the rank (``range(rank, n, world)``), or a test on it that skips or yields
        (``if i % world != rank: continue``)."""
        home = self.analysis.shared.analysis_of(cls) or self.analysis
        facts = rank_facts(home)
        for node in walk(cls):
            kind = type(node)
            if kind is cst.Call and home.is_call_to(node, _STREAM_CUTS):  # type: ignore[arg-type]
                parts: list[cst.CSTNode] = [arg.value for arg in node.args]  # type: ignore[attr-defined]
            elif kind is cst.Slice:
                parts = [p for p in (node.lower, node.upper, node.step) if p is not None]  # type: ignore[attr-defined]
            elif kind is cst.CompIf or (kind is cst.If and _skips_or_yields(node.body)):  # type: ignore[attr-defined]
                # (``if i % world != rank: continue``, ``if i % world == rank: yield x``; not ``if rank == 0:
                # print(...)``, which every rank passes over to stream the same samples)
                parts = [node.test]  # type: ignore[attr-defined]
            else:
                continue
            if any(facts.kind(part) is Kind.RANK for part in parts):
                return True
        return False

    def _cut_by_rank(self, loader: cst.Call) -> bool:
        dataset = loader_argument(loader, "dataset")
        if dataset is None:
            return False
        a = self.analysis
        home = a.shared.analysis_of(loader) or a
        for call in home.feeding_calls([dataset], depth=6):
            owner = a.shared.analysis_of(call) or home
            cuts = [call.args[1].value] if owner.is_call_to(call, names.SUBSET) and len(call.args) > 1 else []
            cuts += [
                node.slice  # type: ignore[attr-defined]
                for arg in call.args
                for node in walk(arg.value)
                if type(node) is cst.SubscriptElement and type(node.slice) is cst.Slice  # type: ignore[attr-defined]
            ]
            for cut in cuts:
                # Computed from the rank here, not handed in by a caller (``pick(data, idx)`` called with a
                # rank's indices for validation and with every index for training).
                if rank_facts(owner).kind(cut) is Kind.RANK and not self._through_parameters(owner, cut):
                    return True
        return False

    @staticmethod
    def _through_parameters(analysis: ScriptAnalysis, expr: cst.CSTNode) -> bool:
        """Whether an expression takes its rank from a parameter some caller fills with a value that is not
        the rank (``pick(data, idx)`` called with every index for training and a rank's for validation)."""
        function = analysis.enclosing_function(expr)
        if function is None:
            return False
        facts = rank_facts(analysis)
        for node in walk(expr):
            if type(node) is not cst.Name or not analysis.is_parameter(function, node.value):  # type: ignore[attr-defined]
                continue
            if facts.kind(node) is not Kind.RANK:
                continue
            for call in analysis.callers_in_program(function):
                caller = analysis.shared.analysis_of(call) or analysis
                argument = caller.argument_for(call, function, node.value)  # type: ignore[attr-defined]
                if argument is None or rank_facts(caller).kind(argument) is not Kind.RANK:
                    return True
        return False

    # ------------------------------------------------------------------ iterable datasets

    def streams(self, loader: cst.Call) -> bool:
        """Whether the loader draws from an iterable-style dataset (a class of the program derived, directly
        or through other classes of the program, from ``IterableDataset`` or ``IterDataPipe``; torch's
        ``ChainDataset``, a ``WebDataset``, a streaming ``load_dataset``): such a dataset yields its samples
        itself, and ``DataLoader`` refuses a sampler for it."""
        dataset = loader_argument(loader, "dataset")
        if dataset is None:
            return False
        a = self.analysis
        for origin in {dataset.value, *a.origins(dataset.value)}:
            if type(origin) is cst.Call and _chain_calls(origin, names.TO_ITERABLE_METHODS):  # type: ignore[arg-type]
                return True  # ``Dataset.from_dict(d).to_iterable_dataset()``, then ``.map(f)`` maybe
        for origin in self._stream_candidates(dataset.value):
            if a.is_call_to(origin, names.ITERABLE_DATASETS):
                return True
            if a.is_call_to(origin, names.STREAMING_LOADS) and any(
                arg.keyword is not None and arg.keyword.value == "streaming" and is_true(arg.value) for arg in origin.args
            ):
                return True
        return bool(self.stream_classes(loader))

    def stream_classes(self, loader: cst.Call) -> list[cst.ClassDef]:
        """The program's iterable-style dataset classes whose objects the loader's data set may be."""
        dataset = loader_argument(loader, "dataset")
        if dataset is None:
            return []
        a = self.analysis
        found = []
        for origin in self._stream_candidates(dataset.value):
            built = a.shared.constructed.get(origin)
            if built is not None and a.derives_from(built, names.ITERABLE_DATASETS):
                found.append(built)
        return found

    def _stream_candidates(self, value: cst.BaseExpression, depth: int = 3) -> set[cst.Call]:
        """The calls a data set value may come from, each chain of method calls judged by the call it starts
        from: a method of a streaming dataset hands back a stream (``wds.WebDataset(urls).decode()``,
        ``load_dataset(..., streaming=True).with_format("torch")``, ``ds = ds.map(f)``)."""
        found: set[cst.Call] = set()
        for origin in {value, *self.analysis.origins(value)}:
            if type(origin) is not cst.Call:
                continue
            start = _chain_start(origin)  # type: ignore[arg-type]
            found.add(start)
            receiver = start.func.value if type(start.func) is cst.Attribute else None  # type: ignore[attr-defined]
            if receiver is not None and depth > 0 and type(receiver) in (cst.Name, cst.Attribute):
                found |= self._stream_candidates(receiver, depth - 1)
        return found

    # ------------------------------------------------------------------ loaders in dicts

    def _find_dict_loaders(self) -> None:
        for analysis in self.analysis.shared.analyses:
            for loader in analysis.loader_calls:
                container = _dict_container(analysis, loader)
                if container is None:
                    continue
                stmt = analysis.statement(loader)
                small = stmt.body[0] if isinstance(stmt, cst.SimpleStatementLine) and stmt.body else None
                if not isinstance(small, cst.Assign) or len(small.targets) != 1:
                    continue
                name = dotted_name(small.targets[0].target)
                if name is None:
                    continue
                self.dict_loaders[loader] = name
                for loop in analysis.for_loops:
                    if _subscript_of(loop.iter, name) and analysis.reaches_backward(loop.body):
                        self.dict_training.add(loader)
        self._find_dicts_handed_on()

    def _find_dicts_handed_on(self) -> None:
        """Dicts of loaders iterated by phase where the dict is handed on: to a trainer's constructor that
        keeps it (``Runner(model, loaders)``, ``self.loaders = loaders``), to a function, through a name
        (``loader = self.loaders[mode]``), in any module of the program. A loop that trains over a value of
        such a dict at a key the analysis cannot read trains on every loader of the dict, as far as it knows."""
        if not self.dict_loaders:
            return
        shared = self.analysis.shared
        by_dict: dict[cst.CSTNode, set[cst.Call]] = {}
        for loader in self.dict_loaders:
            home = shared.analysis_of(loader) or self.analysis
            container = _dict_container(home, loader)
            literal = home.parent(container) if type(container) is cst.DictElement else container
            if literal is not None:
                by_dict.setdefault(literal, set()).add(loader)
        for analysis in shared.analyses:
            for loop in analysis.for_loops:
                if not analysis.reaches_backward(loop.body):
                    continue
                for literal in _dicts_indexed(analysis, loop.iter):
                    if literal in by_dict:
                        self.dict_training |= by_dict[literal]
                        self.dict_training_loops.add(loop)

    # ------------------------------------------------------------------ comprehensions that train

    def _find_comprehension_steps(self) -> None:
        """``losses = [train_step(b) for b in loader]``, ``sum(step(b) for b in loader)``: a comprehension
        whose element runs ``backward()`` trains on the loader it iterates."""
        for analysis in self.analysis.shared.analyses:
            for _, _, loaders in analysis.training_comprehensions:
                self.comprehension_training |= loaders

    # ------------------------------------------------------------------ iterator-driven loops

    def _find_iterator_loops(self) -> None:
        for analysis in self.analysis.shared.analyses:
            for call in analysis.calls:
                if not (isinstance(call.func, cst.Name) and call.func.value == "next" and call.args):
                    continue
                found = {o for o in analysis.origins(call.args[0].value) if o in self._loader_set}
                if found and _draws_for_training(analysis, call, depth=0):
                    self.iterator_training |= found  # type: ignore[arg-type]
                    self.training_draws.append((call, frozenset(found)))  # type: ignore[arg-type]

    # ------------------------------------------------------------------ queries

    def iterates_a_loader_dict(self, iterated: cst.BaseExpression) -> bool:
        """Whether a loop's iterable is ``loaders[phase]`` of a dict of loaders (the transfer-learning
        tutorial's ``dataloaders[phase]``), whose key the analysis cannot read."""
        return any(_subscript_of(iterated, name) for name in set(self.dict_loaders.values()))

    def kwargs_dict(self, loader: cst.Call) -> KwargsDict | None:
        """The dict a loader unpacks with ``**name`` (its only starred argument), with its keys when every
        write to it in the scope is a literal dict, ``name.update(<literal or such a dict>)`` or
        ``name["key"] = ...``; ``None`` when the loader unpacks nothing (or ``*args``, or several dicts)."""
        starred = [a for a in loader.args if a.star]
        if len(starred) != 1 or starred[0].star != "**" or not isinstance(starred[0].value, cst.Name):
            return None
        analysis = self.analysis.shared.analysis_of(loader) or self.analysis
        name = starred[0].value.value
        scope = analysis.enclosing_function(loader)
        values = _dict_writes(analysis, scope, name, depth=0)
        if values is None:
            return KwargsDict(name, None)
        return KwargsDict(name, frozenset(k for k, _ in values), tuple(values))

    def is_iterator_driven(self, loader: cst.Call) -> bool:
        return loader in self.iterator_training

    def iterator_restarts(self, loader: cst.Call) -> list[tuple[cst.BaseStatement, cst.BaseExpression]]:
        """Where an iterator-driven loop starts a new pass over the loader, with how the loader is spelled
        there: ``it = iter(loader)`` inside an ``except StopIteration:`` handler, or an ``iter(loader)`` that
        runs again and again in a loop (``x, y = next(iter(loader))`` each step, ``it = iter(loader)`` at
        the top of each epoch), which starts a pass each time."""
        found = []
        trained_in_a_loop = any(loop.trains and loader in loop.loader_calls for loop in self.analysis.program_loader_loops)
        for analysis, call in self._passes_started(loader):
            spelled = call.args[0].value
            if dotted_name(spelled) is None:
                continue
            if trained_in_a_loop and call not in calls_feeding_the_losses(analysis):
                continue  # a look at a batch (``len(next(iter(loader))[0])`` for a log line): no pass the training takes
            handler = next((n for n in analysis.ancestors(call) if isinstance(n, cst.ExceptHandler)), None)
            if not (handler is not None and _catches_stop_iteration(handler)) and not _runs_in_a_loop(analysis, call):
                continue
            found.append((analysis.statement(call), spelled))
        return found

    def _passes_started(self, loader: cst.Call) -> Iterator[tuple[ScriptAnalysis, cst.Call]]:
        """The ``iter(...)`` calls of the program over the loader, each with its module's analysis."""
        for analysis in self.analysis.shared.analyses:
            for call in analysis.calls:
                if type(call.func) is cst.Name and call.func.value == "iter" and call.args:  # type: ignore[attr-defined]
                    if loader in analysis.origins(call.args[0].value):
                        yield analysis, call

    def generator_passes(self, loader: cst.Call) -> list[tuple[ScriptAnalysis, cst.BaseStatement, cst.Name]]:
        """Where a generator of the program that the loader is handed to starts a new pass over it again and
        again (``def forever(loader): while True: for batch in loader: yield batch``, or ``yield from
        loader``): the statement that makes each pass, inside a loop of the generator, with its module's
        analysis and the parameter that names the loader there."""
        found: list[tuple[ScriptAnalysis, cst.BaseStatement, cst.Name]] = []
        for analysis in self.analysis.shared.analyses:
            for function in analysis.functions:
                param = analysis.generator_parameter(function)
                if param is None or not self._handed_to(function, param, loader):
                    continue
                for node in walk(function.body):
                    over = passed_over(node)
                    if type(over) is not cst.Name or over.value != param:  # type: ignore[attr-defined]
                        continue
                    loop = analysis.nearest_loop(analysis.statement(node) if type(node) is cst.Yield else node)
                    if loop is not None and analysis.is_inside(loop, function):
                        found.append((analysis, analysis.statement(node), over))  # type: ignore[arg-type]
        return found

    def _handed_to(self, function: cst.FunctionDef, param: str, loader: cst.Call) -> bool:
        """Whether a call of the program passes the loader to the function's parameter."""
        for call in self.analysis.callers_in_program(function):
            owner = self.analysis.shared.analysis_of(call) or self.analysis
            argument = owner.argument_for(call, function, param)
            if argument is not None and loader in owner.origins(argument):
                return True
        return False

    def epoch_calls(self, loader: cst.Call) -> list[cst.Call]:
        """The ``set_epoch`` calls of the program that may tell this loader's sampler its epoch: a call on the
        sampler (``sampler.set_epoch(e)`` of the sampler the loader was given, ``loader.sampler.set_epoch(e)``),
        the runtime's ``set_epoch(loader, e)`` / ``next_epoch(loader)``, or a call on something the analysis
        cannot trace (a sampler handed in from outside may be this one). Another loader's do not count."""
        found = self._epoch_calls.get(loader)
        if found is not None:
            return found
        home = self.analysis.shared.analysis_of(loader) or self.analysis
        samplers = home.sampler_origins(loader)
        found = self._epoch_calls[loader] = []
        for analysis in self.analysis.shared.analyses:
            for call in analysis.calls_to(names.RUNTIME_EPOCH_CALLS):
                held = analysis.origins(call.args[0].value) if call.args else set()
                if not held or loader in held:
                    found.append(call)
            for call in analysis.method_calls("set_epoch"):
                if analysis.is_call_to(call, names.RUNTIME_EPOCH_CALLS):
                    continue
                receiver = call.func.value  # type: ignore[attr-defined]
                if type(receiver) is cst.Attribute and receiver.attr.value in SAMPLING_KEYS:  # type: ignore[attr-defined]
                    held = analysis.origins(receiver.value)  # type: ignore[attr-defined]
                else:
                    held = analysis.origins(receiver)
                if not held or loader in held or not held.isdisjoint(samplers):
                    found.append(call)
        return found

    def cycled(self, loader: cst.Call) -> bool:
        """Whether every pass over the loader is made by ``itertools.cycle(loader)`` (a ``for`` loop over it, or
        ``next`` on it): cycle goes over the loader once and then replays the batches it kept, so the order
        never changes, in the original as under the sampler: ``set_epoch`` would have nothing to act on."""
        cycled = any(
            call.args and loader in analysis.origins(call.args[0].value)
            for analysis in self.analysis.shared.analyses
            for call in analysis.calls_to(names.ITERTOOLS_CYCLE)
        )
        if not cycled or any(self._passes_started(loader)):
            return False
        return all(
            wrapper_inside(loop.loop.iter, "cycle") is not None for loop in self.analysis.program_loader_loops if loader in loop.loader_calls
        )

    def spelling_in(self, loop: cst.For | cst.While, loader: cst.Call, preferred: cst.BaseExpression) -> cst.BaseExpression | None:
        """How to name the loader at the top of an epoch loop: ``preferred`` when it holds the loader and is
        bound before the loop, else a name or attribute used inside the loop that is; ``None`` if none."""
        analysis = self.analysis.shared.analysis_of(loop) or self.analysis
        candidates = [preferred] + [n for n in walk(loop.body) if isinstance(n, (cst.Name, cst.Attribute, cst.Subscript))]
        for expr in candidates:
            name = binding_name(expr)
            if name is None or loader not in analysis.origins(expr):  # type: ignore[arg-type]
                continue
            if expr is not preferred and not analysis.is_inside(expr, loop):
                continue
            if _assigned_inside(analysis, loop, name):
                continue
            return expr  # type: ignore[return-value]
        return None


def loader_facts(analysis: ScriptAnalysis) -> LoaderFacts:
    """The loader facts of an analysed module, computed once and kept with the analysis (so they are freed with it)."""
    return analysis.derived("loaders", LoaderFacts)


# ---------------------------------------------------------------------------- helpers


def _runs_in_a_loop(analysis: ScriptAnalysis, call: cst.Call) -> bool:
    """Whether a call runs in a loop the analysis sees: one around it in its function, or around a call of
    its function anywhere in the program (a ``backward()`` in such a loop trains on what that loop
    iterates, a DataLoader or not)."""
    home = analysis.shared.analysis_of(call) or analysis
    if home.nearest_loop(call) is not None:
        return True
    function = home.enclosing_function(call)
    return function is not None and any(
        (analysis.shared.analysis_of(caller) or home).nearest_loop(caller) is not None
        for caller in home.callers_in_program(function)
    )


def _skips_or_yields(block: cst.BaseSuite) -> bool:
    """Whether a branch skips the sample (``continue``) or yields it: a test that picks the samples a stream gives."""
    return any(type(n) in (cst.Continue, cst.Yield) for n in walk(block))


def _always_a_distributed_sampler(analysis: ScriptAnalysis, value: cst.BaseExpression) -> bool:
    """Whether a ``sampler=`` value is a ``DistributedSampler`` on every path: each call it may come from is one,
    and no branch of a conditional it is (or its name holds) is ``None`` (``DistributedSampler(ds) if
    distributed else None``: the loader then makes its own)."""
    values = [value]
    name = dotted_name(value)
    if name is not None:
        values += analysis.flows_into(value, name)
    branches = [b for v in values for b in ((v.body, v.orelse) if type(v) is cst.IfExp else (v,))]  # type: ignore[attr-defined]
    if any(is_none(b) for b in branches):
        return False
    origins = analysis.origins(value)
    return bool(origins) and all(type(o) is cst.Call and analysis.is_call_to(o, names.DISTRIBUTED_SAMPLER) for o in origins)  # type: ignore[arg-type]


#: Calls that take a stretch of a sequence or a stream: bounded by the rank, they keep one rank's share.
_STREAM_CUTS = frozenset({"builtins.range", "itertools.islice"})


def _built_for_several_callers(analysis: ScriptAnalysis, loader: cst.Call) -> bool:
    """Whether a loader is the value a function returns and more than one call site (in any module)
    runs that function: each call site gets its own loader from the same ``DataLoader(...)``."""
    home = analysis.shared.analysis_of(loader) or analysis
    function = home.enclosing_function(loader)
    return function is not None and loader in home.returned_origins(function) and len(home.callers_of(function)) > 1


def _dict_container(analysis: ScriptAnalysis, loader: cst.Call) -> cst.CSTNode | None:
    """The dict literal or comprehension the loader call is a value of (before reaching its statement)."""
    child: cst.CSTNode = loader
    for node in analysis.ancestors(loader):
        if isinstance(node, cst.DictComp) and child is node.value:
            return node
        if isinstance(node, cst.DictElement) and child is node.value:
            return node
        if isinstance(node, cst.BaseStatement):
            return None
        child = node
    return None


def _draws_for_training(analysis: ScriptAnalysis, node: cst.CSTNode, depth: int) -> bool:
    """Whether a batch drawn at ``node`` feeds training: the loop around it reaches ``backward()``, or, in a
    function outside any loop of its own (``def next_batch(self): return next(self.it)``), the loop around
    one of its calls in the program does (at most three calls up)."""
    if _used_without_gradients_only(analysis, node):
        return False  # ``with torch.no_grad(): xv, yv = next(iter(val_loader))`` in the epoch loop: evaluation
    scope = next((n for n in analysis.ancestors(node) if isinstance(n, (cst.For, cst.While, cst.FunctionDef))), None)
    if not isinstance(scope, cst.FunctionDef):
        return analysis.reaches_backward(scope.body if scope is not None else analysis.module)
    if analysis.reaches_backward(scope.body):
        return True
    if depth >= 3 or without_gradients(analysis, scope):
        return False
    return any(
        _draws_for_training(home, caller, depth + 1)
        for caller in analysis.callers_in_program(scope)
        # The batch is taken (``x, y = self.next_batch()``), not only shown (``print(self.val_loss())``).
        if _result_kept(home := analysis.shared.analysis_of(caller) or analysis, caller)
        and not without_gradients(home, caller)
    )


def _used_without_gradients_only(analysis: ScriptAnalysis, node: cst.CSTNode) -> bool:
    """Whether a batch is drawn (``xv, yv = next(...)``) inside a ``with torch.no_grad():`` block and, outside
    that block, its names occur only where they are shown (``print(len(xv))``, a logger's call): nothing made
    of it can train (``buffer.append(xv)`` could, later)."""
    block = next((a for a in analysis.ancestors(node) if isinstance(a, cst.With) and _turns_gradients_off(a)), None)
    assign = analysis.parent(node)
    if block is None or not isinstance(assign, cst.Assign) or assign.value is not node:
        return False
    drawn = {target.value for t in assign.targets for target in walk(t.target) if isinstance(target, cst.Name)}
    scope = analysis.enclosing_function(block) or analysis.module
    for name in walk(scope):
        if isinstance(name, cst.Name) and name.value in drawn and not analysis.is_inside(name, block):
            stmt = analysis.statement(name)
            if not isinstance(stmt, cst.SimpleStatementLine) or not all(_shows_only(s) for s in stmt.body):
                return False
    return bool(drawn)


#: Calls that show a value and keep nothing of it: ``print`` (and the runtime's ``print0`` a migration makes
#: of it), a logger's methods.
SHOWING_CALLS = frozenset({"print", "print0", *names.LOGGER_METHODS})


def _shows_only(small: cst.BaseSmallStatement) -> bool:
    """Whether a statement is a bare ``print(...)`` or logger call."""
    return isinstance(small, cst.Expr) and isinstance(small.value, cst.Call) and callee_name(small.value) in SHOWING_CALLS


def _result_kept(analysis: ScriptAnalysis, call: cst.Call) -> bool:
    """Whether the value of a call is stored: the whole value of an assignment or a ``return``."""
    parent = analysis.parent(call)
    return isinstance(parent, (cst.Assign, cst.AnnAssign, cst.Return)) and parent.value is call


def without_gradients(analysis: ScriptAnalysis, node: cst.CSTNode) -> bool:
    """Whether the node runs under ``torch.no_grad()`` / ``inference_mode()`` (a ``with`` around it, or a
    decorator of its function): nothing computed there trains."""
    for ancestor in [node, *analysis.ancestors(node)]:
        if isinstance(ancestor, cst.With):
            if _turns_gradients_off(ancestor):
                return True
        elif isinstance(ancestor, cst.FunctionDef):
            for decorator in ancestor.decorators:
                found = decorator.decorator
                name = callee_name(found) if isinstance(found, cst.Call) else (dotted_name(found) or "").rsplit(".", 1)[-1]
                if name in NO_GRAD:
                    return True
    return False


def _turns_gradients_off(block: cst.With) -> bool:
    """Whether a ``with`` enters ``torch.no_grad()`` or ``inference_mode()``."""
    return any(isinstance(item.item, cst.Call) and callee_name(item.item) in NO_GRAD for item in block.items)


#: ``torch.no_grad`` and its kin, by their last name.
NO_GRAD = frozenset({"no_grad", "inference_mode"})


def _catches_stop_iteration(handler: cst.ExceptHandler) -> bool:
    caught = handler.type
    names_caught = [e.value for e in caught.elements] if isinstance(caught, cst.Tuple) else [caught]
    return any(dotted_name(n) in ("StopIteration", "builtins.StopIteration") for n in names_caught if n is not None)


#: How many assignments and calls :func:`_dicts_indexed` follows a value back through.
_DICT_FLOW_DEPTH = 4


def _dicts_indexed(analysis: ScriptAnalysis, iterated: cst.BaseExpression) -> set[cst.CSTNode]:
    """The dict literals and comprehensions whose value at a key the analysis cannot read a loop's iterable
    may be: ``self.loaders[mode]`` (through ``enumerate``/``tqdm``/``iter``, and through names: ``loader =
    self.loaders[mode]``) where ``self.loaders`` holds, through assignments and call arguments, a dict made
    in any module of the program."""
    found: set[cst.CSTNode] = set()
    pending: list[tuple[ScriptAnalysis, cst.CSTNode, int, bool]] = [(analysis, iterated, _DICT_FLOW_DEPTH, False)]
    seen: set[tuple[cst.CSTNode, bool]] = set()
    shared = analysis.shared
    while pending:
        home, node, left, indexed = pending.pop()
        node = unwrap_iterable(node)  # type: ignore[arg-type]
        if (node, indexed) in seen:
            continue
        seen.add((node, indexed))
        kind = type(node)
        if kind in (cst.Dict, cst.DictComp):
            if indexed:
                found.add(node)
            continue
        if kind is cst.Subscript:
            if not indexed and item_name(node) is None:  # type: ignore[arg-type]
                pending.append((home, node.value, left, True))  # type: ignore[attr-defined]
            continue
        name = dotted_name(node) if kind in (cst.Name, cst.Attribute) else None
        if name is None or left == 0:
            continue
        for value in home.attribute_flows(node, name):
            pending.append((shared.analysis_of(value) or home, value, left - 1, indexed))
    return found


def _subscript_of(expr: cst.BaseExpression, name: str) -> bool:
    """``loaders[phase]`` (through ``enumerate``/``tqdm``/``iter``) for the dict ``loaders``: a key the
    analysis cannot read. (``loaders["train"]`` is the loader at that key, which the data flow follows.)"""
    while isinstance(expr, cst.Call) and expr.args:
        expr = expr.args[0].value
    return isinstance(expr, cst.Subscript) and dotted_name(expr.value) == name and item_name(expr) is None


def _assigned_inside(analysis: ScriptAnalysis, loop: cst.CSTNode, name: str) -> bool:
    root = name.split(".")[0].split("[")[0]
    for assign in analysis.assignments:
        if not analysis.is_inside(assign, loop):
            continue
        targets = [t.target for t in assign.targets] if isinstance(assign, cst.Assign) else [assign.target]
        for target in targets:
            for element in _target_elements(target):
                bound = binding_name(element)
                if bound is not None and (bound == name or name.startswith((bound + ".", bound + "["))):
                    return True
    for node in walk(loop):
        if isinstance(node, cst.For) and node is not loop:
            if any(isinstance(n, cst.Name) and n.value == root for n in walk(node.target)):
                return True
    return False


def _target_elements(target: cst.BaseExpression) -> list[cst.BaseExpression]:
    if isinstance(target, (cst.Tuple, cst.List)):
        return [e for element in target.elements for e in _target_elements(element.value)]
    if isinstance(target, cst.StarredElement):
        return _target_elements(target.value)
    return [target]


#: The keys of a loader's keyword dict the loader rules read and rewrite.
_READ_KEYS = frozenset({"batch_size", "shuffle", "sampler", "batch_sampler", "drop_last"})


def _dict_writes(
    analysis: ScriptAnalysis, scope: cst.FunctionDef | None, name: str, depth: int
) -> list[tuple[str, cst.BaseExpression]] | None:
    """Every (key, value) written into the dict ``name`` of ``scope``; ``None`` if one write is unknown."""
    if depth > 3 or (scope is not None and analysis.is_parameter(scope, name)):
        return None
    items: list[tuple[str, cst.BaseExpression]] = []
    seen = False
    for assign in analysis.assignments_in(scope):
        if not isinstance(assign, cst.Assign):
            continue
        for target in assign.targets:
            if isinstance(target.target, cst.Name) and target.target.value == name:
                literal = literal_dict_items(assign.value)
                if literal is None and isinstance(assign.value, cst.IfExp):
                    # ``{"num_workers": 1, "pin_memory": True} if use_cuda else {}``: either side, where no key the
                    # loader rules read (a batch size, a sampler, shuffle) is on one side only
                    sides = [literal_dict_items(assign.value.body), literal_dict_items(assign.value.orelse)]
                    if None not in sides:
                        keys = [{k for k, _ in side} & _READ_KEYS for side in sides]  # type: ignore[union-attr]
                        literal = [item for side in sides for item in side] if keys[0] == keys[1] else None  # type: ignore[union-attr]
                if literal is None:
                    other = assign.value.value if isinstance(assign.value, cst.Name) else None
                    literal = _dict_writes(analysis, scope, other, depth + 1) if other else None
                if literal is None:
                    return None
                items += literal
                seen = True
            elif isinstance(target.target, cst.Subscript) and dotted_name(target.target.value) == name:
                index = target.target.slice[0].slice if len(target.target.slice) == 1 else None
                key = getattr(index, "value", None)
                if not isinstance(key, cst.SimpleString):
                    return None
                items.append((key.evaluated_value, assign.value))  # type: ignore[arg-type]
    if not seen:
        return None
    for call in analysis.calls:
        func = call.func
        if analysis.enclosing_function(call) is not scope or not isinstance(func, cst.Attribute):
            continue
        if dotted_name(func.value) != name:
            continue
        method = func.attr.value
        if method in ("get", "items", "keys", "values", "copy"):
            continue
        if method != "update" or len(call.args) != 1 or call.args[0].keyword is not None or call.args[0].star:
            return None
        value = call.args[0].value
        literal = literal_dict_items(value)
        if literal is None and isinstance(value, cst.Name):
            literal = _dict_writes(analysis, scope, value.value, depth + 1)
        if literal is None:
            return None
        items += literal
    return items


def _gating_tests(analysis: ScriptAnalysis, function: cst.FunctionDef, loop: cst.CSTNode) -> list[list[tuple[cst.BaseExpression, bool]]] | None:
    """For each ``backward()`` under the loop, the tests of the ``if`` statements around it (inside the loop)
    that read a flag of the function, with whether the ``backward()`` runs when the test fails (it sits in the
    ``else``). A flag is a parameter with a literal default (``train=True``, ``optimizer=None``) or one some
    call site passes a literal (``run_epoch(..., False)``), or a local name computed from those (``training =
    mode == "train"``). ``None`` where some ``backward()`` runs whatever the flags say (the loop always trains)."""
    flags = _flag_parameters(analysis, function)
    if not flags:
        return None
    derived: set[str] = set()
    for assign in analysis.assignments_in(function):
        if not isinstance(assign, cst.Assign):
            continue
        if {n.value for n in walk(assign.value) if isinstance(n, cst.Name)} & flags:
            derived.update(t.target.value for t in assign.targets if isinstance(t.target, cst.Name))
    gates = flags | (derived - {p.name.value for p in all_parameters(function)})
    backward = [c for c in analysis.backward_calls if analysis.is_inside(c, loop)]
    if not backward:
        return None
    found: list[list[tuple[cst.BaseExpression, bool]]] = []
    for call in backward:
        tests: list[tuple[cst.BaseExpression, bool]] = []
        for node in analysis.ancestors(call):
            if node is loop:
                break
            if isinstance(node, cst.If) and any(isinstance(m, cst.Name) and m.value in gates for m in walk(node.test)):
                if node.orelse is not None and all(any(analysis.is_inside(b, branch) for b in backward) for branch in (node.body, node.orelse)):
                    continue  # (``if use_amp: scaler.scale(loss).backward() else: loss.backward()``: trains either way)
                tests.append((node.test, node.orelse is not None and analysis.is_inside(call, node.orelse) and not analysis.is_inside(call, node.body)))
        if not tests:
            return None  # one backward() runs whatever the call site passes
        found.append(tests)
    return found


def _flag_parameters(analysis: ScriptAnalysis, function: cst.FunctionDef) -> set[str]:
    """The parameters of a function that act as flags: a literal default, or a literal at some call site."""
    flags = {p.name.value for p in all_parameters(function) if p.default is not None and literal_value(p.default) is not UNKNOWN}
    for call in analysis.callers_in_program(function):
        caller = analysis.shared.analysis_of(call) or analysis
        for name, value in caller.bound_arguments(call, function):
            if literal_value(value) is not UNKNOWN:
                flags.add(name)
    return flags


def _split_by_call_site(
    analysis: ScriptAnalysis, loop: cst.For, loader_expr: cst.BaseExpression, loader_set: set[cst.Call]
) -> tuple[set[cst.Call], set[cst.Call]] | None:
    """For a loop that trains only under tests of its function's parameters (``if optimizer is not None:``, ``if
    train:``, ``if mode == "train":``), the loaders passed at call sites where those tests hold and those passed
    where they do not, read from what each call site passes (literals, or an object for a parameter that
    defaults to ``None``); a call site whose values cannot be told is in neither. ``None`` when the loop always
    trains."""
    function = analysis.enclosing_function(loop)
    if function is None or not isinstance(loader_expr, cst.Name) or not analysis.is_parameter(function, loader_expr.value):
        return None
    tests = _gating_tests(analysis, function, loop)
    if tests is None:
        return None
    derived: dict[str, cst.BaseExpression] = {}
    for assign in analysis.assignments_in(function):
        if isinstance(assign, cst.Assign) and len(assign.targets) == 1 and isinstance(assign.targets[0].target, cst.Name):
            name = assign.targets[0].target.value
            derived[name] = assign.value if name not in derived else cst.Name("__several__")
    trains: set[cst.Call] = set()
    evaluates: set[cst.Call] = set()
    for call in analysis.callers_in_program(function):
        caller = analysis.shared.analysis_of(call) or analysis
        argument = caller.argument_for(call, function, loader_expr.value)
        if argument is None:
            continue
        loaders = {o for o in caller.origins(argument) if o in loader_set}
        bindings = {p.name.value: value_at(caller, call, function, p.name.value) for p in all_parameters(function)}
        for name, value in derived.items():
            if name not in bindings:
                bindings[name] = evaluate(value, bindings)
        verdicts = [[flip(truth(test, bindings)) if in_else else truth(test, bindings) for test, in_else in around] for around in tests]
        if any(all(v is True for v in around) for around in verdicts):
            trains |= loaders  # type: ignore[arg-type]
        elif all(any(v is False for v in around) for around in verdicts):
            evaluates |= loaders  # type: ignore[arg-type]
    return trains, evaluates


def _split_by_dispatch(
    analysis: ScriptAnalysis,
    loop: cst.For,
    loader_expr: cst.BaseExpression,
    loader_set: set[cst.Call],
    loop_loaders: frozenset[cst.Call],
) -> tuple[set[cst.Call], set[cst.Call], set[cst.Call]] | None:
    """For a loop that reaches ``backward()`` only through a call whose function depends on the caller (a
    ``self.step(batch)`` that one subclass overrides to train and another to evaluate; a ``step_fn(batch)``
    parameter given ``train_step`` at one call site and ``eval_step`` at another): the loaders passed where
    it trains, where it evaluates, and where that cannot be told. ``None`` for a loop that trains whoever
    calls it (or through calls the analysis resolves alike)."""
    function = analysis.enclosing_function(loop)
    if function is None:
        return None
    backward = analysis.program_backward_calls
    if any(analysis.is_inside(call, loop) for call in backward):
        return None
    reaching = analysis.functions_reaching_backward()
    self_methods: list[str] = []
    step_parameters: list[str] = []
    for node in walk(loop.body):
        if type(node) is not cst.Call:
            continue
        targets = analysis.targets_of(node)  # type: ignore[arg-type]
        reach = [target in reaching for target in targets]
        if not any(reach):
            continue
        if all(reach):
            return None  # a call that trains whoever calls the loop
        func = node.func  # type: ignore[attr-defined]
        if type(func) is cst.Attribute and type(func.value) is cst.Name and func.value.value == "self":
            self_methods.append(func.attr.value)
        elif type(func) is cst.Name and analysis.is_parameter(function, func.value):
            step_parameters.append(func.value)
        else:
            return None  # ``for w in workers: w.step(...)``: each object in turn, one of which trains
    if not (self_methods or step_parameters):
        return None
    by_parameter = isinstance(loader_expr, cst.Name) and analysis.is_parameter(function, loader_expr.value)
    trains: set[cst.Call] = set()
    evaluates: set[cst.Call] = set()
    unsure: set[cst.Call] = set()
    callers = analysis.callers_in_program(function)
    for call in callers:
        caller = analysis.shared.analysis_of(call) or analysis
        if by_parameter:
            argument = caller.argument_for(call, function, loader_expr.value)  # type: ignore[attr-defined]
            loaders = {o for o in caller.origins(argument) if o in loader_set} if argument is not None else set()
        else:
            loaders = set(loop_loaders)
        verdicts: list[bool | None] = []  # per function the call may run: whether it trains (None: unknown)
        for name in self_methods:
            receiver = call.func.value if type(call.func) is cst.Attribute else None  # type: ignore[attr-defined]
            classes = {caller.shared.constructed[o] for o in caller.origins(receiver) if o in caller.shared.constructed} if receiver is not None else set()
            if not classes:
                verdicts.append(None)
            verdicts += [caller.method_of(cls, name) in reaching for cls in classes]
        for name in step_parameters:
            argument = caller.argument_for(call, function, name)
            passed = [o for o in caller.origins(argument) if type(o) is cst.FunctionDef] if argument is not None else []
            if not passed:
                verdicts.append(None)
            verdicts += [f in reaching for f in passed]
        if verdicts and all(v is True for v in verdicts):
            trains |= loaders  # type: ignore[arg-type]
        elif verdicts and all(v is False for v in verdicts):
            evaluates |= loaders  # type: ignore[arg-type]
        else:
            unsure |= loaders  # type: ignore[arg-type]
    if not callers:
        unsure |= set(loop_loaders)
    unsure |= trains & evaluates  # one loader held by a training and an evaluating object
    return trains, evaluates, unsure


def is_loader_call(analysis: ScriptAnalysis, node: cst.CSTNode) -> bool:
    return isinstance(node, cst.Call) and analysis.is_call_to(node, names.DATA_LOADER)


__all__ = ["KwargsDict", "LoaderFacts", "SAMPLING_KEYS", "loader_facts", "statements_of", "loader_argument"]


def _chain_start(call: cst.Call) -> cst.Call:
    """The first call of a chain of method calls (``f(x)`` of ``f(x).a().b()``), or the call itself."""
    current = call
    while type(current.func) is cst.Attribute and type(current.func.value) is cst.Call:  # type: ignore[attr-defined]
        current = current.func.value  # type: ignore[attr-defined]
    return current


def _chain_calls(call: cst.Call, methods: frozenset[str]) -> bool:
    """Whether a chain of method calls (``a.b(...).c(...)``) calls one of the methods."""
    current: cst.BaseExpression = call
    while type(current) is cst.Call and type(current.func) is cst.Attribute:  # type: ignore[attr-defined]
        if current.func.attr.value in methods:  # type: ignore[attr-defined]
            return True
        current = current.func.value  # type: ignore[attr-defined]
    return False
