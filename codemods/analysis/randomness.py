"""Random picks and orders each process draws on its own, and the training data built from them: a fact of the
analysis for the rules about data that differs between ranks (:func:`training_data_draws`).

A process-wide random state (torch's, Python's ``random`` module's, numpy's) that the program does not seed
alike on every rank starts from the system's entropy in each process; so does a generator object built
without a seed (``np.random.default_rng()``, ``random.Random()``). One process never shows the
difference. Under torchrun, a data set built from such a draw (a shuffled list of files cut into a
training and a validation part, a random sample of the records) is another data set on every rank, and the
``DistributedSampler``s shard different sets: samples go missing, others are trained on twice, one rank's
validation samples are another's training data.
"""

from __future__ import annotations

import libcst as cst

from .. import names
from .loaders import loader_facts
from .ranks import seeds_alike
from .script import ScriptAnalysis, call_method_name, dotted_name, keyword_argument, loader_argument

#: The draws from each process-wide random state that pick or order items (see :data:`ranks.SEEDS` for
#: their seeding calls); torch's take a ``generator=`` that makes them the generator's draws instead. Draws
#: of values (``torch.randn(n, d)``, synthetic samples) are not among them: independent samples drawn on
#: each rank are samples of the same distribution, while a list of files shuffled differently on each rank
#: and cut in two is another split on every rank.
DRAWS: dict[str, frozenset[str]] = {
    "torch": frozenset({"torch.randperm"}),
    "random": frozenset({"random.shuffle", "random.sample", "random.choice", "random.choices"}),
    "numpy": frozenset({"numpy.random.permutation", "numpy.random.shuffle", "numpy.random.choice"}),
}
#: Every draw of :data:`DRAWS`, for a rule's gate on the names a file spells.
ALL_DRAWS = frozenset().union(*DRAWS.values())
#: Generator objects: unseeded (no argument, or ``None``) when built, each process draws its own sequence.
GENERATORS = names.RANDOM_GENERATORS
#: The methods of those objects that pick or order items.
GENERATOR_DRAWS = frozenset({"shuffle", "sample", "choice", "choices", "permutation", "permuted"})


def per_process_draws(analysis: ScriptAnalysis) -> list[tuple[cst.Call, str]]:
    """The calls of this module that draw from a random state each process seeds on its own, each with
    what it draws from (``"random"``, ``"numpy"``, ``"torch"`` or ``"an unseeded generator"``): a draw
    from a process-wide state the program does not seed alike on every rank (:func:`ranks.seeds_alike`),
    a torch draw without a ``generator=``, and a draw of a generator object built without a seed."""
    found: list[tuple[cst.Call, str]] = []
    seeded: dict[str, bool] = {}
    for state, draws in DRAWS.items():
        calls = analysis.calls_to(draws)
        if state == "torch":
            calls = [call for call in calls if keyword_argument(call, "generator") is None]
        if not calls:
            continue
        if state not in seeded:
            seeded[state] = seeds_alike(analysis, state)
        # seeded somewhere: still each rank's own draw where the seed runs only after it
        found.extend((call, state) for call in calls if not seeded[state] or not seeds_alike(analysis, state, before=call))
    if any(analysis.calls_to(GENERATORS)):
        for call in analysis.calls:
            if call_method_name(call) in GENERATOR_DRAWS and any(
                _unseeded_generator(analysis, origin) for origin in analysis.origins(call.func.value)  # type: ignore[attr-defined]
            ):
                found.append((call, "an unseeded generator"))
    return found


#: Calls that take a set's items in its iteration order.
ORDERING_BUILTINS = frozenset({"builtins.list", "builtins.tuple", "builtins.enumerate"})


def _set_orders(analysis: ScriptAnalysis) -> list[cst.Call]:
    """``list(set(words))``, ``tuple(set(...))``, ``enumerate(set(...))``: a set's items in its iteration
    order, which for strings follows their hashes, seeded anew in every process (``PYTHONHASHSEED``): each
    rank puts them in another order (a vocabulary's ids, a de-duplicated list of samples)."""
    sets = set(analysis.calls_to({"builtins.set"}))
    if not sets and not any(type(node) is cst.SetComp for node in analysis.preorder):
        return []
    return [
        call
        for call in analysis.calls_to(ORDERING_BUILTINS)
        if len(call.args) == 1 and _holds_a_set(analysis, call.args[0].value, sets) and not _order_dropped(analysis, call)
    ]


def _order_dropped(analysis: ScriptAnalysis, call: cst.Call) -> bool:
    """Whether the items a call takes in a set's order are the whole first argument of a call their order does not
    matter to (``sorted(list(decay))``, minGPT's parameter groups; ``len(list(s))``; not ``sorted(list(s)[:4])``)."""
    argument = analysis.parent(call)
    outer = analysis.parent(argument) if type(argument) is cst.Arg else None
    return (
        type(outer) is cst.Call
        and outer.args[0] is argument  # type: ignore[attr-defined]
        and analysis.is_call_to(outer, names.ORDER_FREE_BUILTINS)  # type: ignore[arg-type]
    )


def _holds_a_set(analysis: ScriptAnalysis, value: cst.BaseExpression, sets: set[cst.Call]) -> bool:
    """Whether the value is a set: ``set(...)``, ``{w for w in ...}``, or a name holding one."""
    if type(value) is cst.SetComp or value in sets:
        return True
    name = dotted_name(value)
    if name is None:
        return False
    return not sets.isdisjoint(analysis.origins(value)) or any(type(v) is cst.SetComp for v in analysis.flows_into(value, name))


def _unseeded_generator(analysis: ScriptAnalysis, origin: cst.CSTNode) -> bool:
    """Whether a value comes from a generator object built without a seed (``np.random.default_rng()``)."""
    if type(origin) is not cst.Call:
        return False
    home = analysis.shared.analysis_of(origin) or analysis
    if not home.is_call_to(origin, GENERATORS):  # type: ignore[arg-type]
        return False
    args = origin.args  # type: ignore[attr-defined]
    return not args or (type(args[0].value) is cst.Name and args[0].value.value == "None")  # type: ignore[attr-defined]


def training_data_draws(analysis: ScriptAnalysis) -> list[tuple[cst.Call, str]]:
    """The draws of this module (:func:`per_process_draws`) that a training data set is built from: calls
    whose values reach the arguments of a training ``DataLoader`` anywhere in the program, through names,
    arguments, returns, lists a ``shuffle`` reorders and the ``__init__`` of a data set class of the
    program (:meth:`ScriptAnalysis.feeding_calls`). Augmentations drawn per sample (in ``__getitem__``) are
    not: each rank draws them for its own samples."""
    draws = per_process_draws(analysis)
    if not draws:
        return []
    feeding = _training_data_calls(analysis)
    return [(call, state) for call, state in draws if call in feeding]


def training_set_orders(analysis: ScriptAnalysis) -> list[cst.Call]:
    """The calls of this module that take a set's items in its order (:func:`_set_orders`) and that a
    training data set is built from (as :func:`training_data_draws`)."""
    orders = _set_orders(analysis)
    if not orders:
        return []
    feeding = _training_data_calls(analysis)
    return [call for call in orders if call in feeding]


def _training_data_calls(analysis: ScriptAnalysis) -> frozenset[cst.CSTNode]:
    """Every call whose value may reach a training loader's arguments, in the program (read once per module)."""

    def build(a: ScriptAnalysis) -> frozenset[cst.CSTNode]:
        facts = loader_facts(a)
        loaders = facts.training_loaders | facts.dict_training | facts.shared_factories
        roots = [arg.value for loader in loaders for arg in loader.args]
        # A ``collate_fn`` of the program makes the batches from what it returns (``stoi[w]`` of a vocabulary)
        for loader in loaders:
            collate = loader_argument(loader, "collate_fn")
            if collate is not None and type(collate.value) is cst.Name:
                home = a.shared.analysis_of(loader) or a
                for function in home.functions:
                    if function.name.value == collate.value.value and home.enclosing_function(function) is home.enclosing_function(loader):  # type: ignore[attr-defined]
                        roots += [r.value for r in a.shared.returns(function) if r.value is not None]
        return frozenset(a.feeding_calls(roots, depth=8, constructors=True))

    return analysis.derived("training data calls", build)


#: What makes a draw from each random state the same on every rank (:func:`per_process_draws`'s states).
REMEDIES = {
    "torch": "seed torch alike on every rank (torch.manual_seed(0) at the start) or pass a seeded generator=",
    "random": "seed Python's random alike on every rank (random.seed(0) at the start)",
    "numpy": "seed numpy alike on every rank (np.random.seed(0) at the start)",
    "an unseeded generator": "build its generator with a seed (np.random.default_rng(0), random.Random(0))",
}


__all__ = ["ALL_DRAWS", "DRAWS", "GENERATORS", "REMEDIES", "per_process_draws", "training_data_draws", "training_set_orders"]
