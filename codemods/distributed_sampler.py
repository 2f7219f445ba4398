"""DDP005 missing-distributed-sampler."""

from __future__ import annotations

import dataclasses
import re

from typing import Iterator

import libcst as cst

from . import names
from .analysis import LOADER_PARAMETERS, ScriptAnalysis, given_loader_argument, is_none, keyword_argument, loader_argument, walk
from .analysis.legacy import legacy_facts, string_value
from .analysis.loaders import SAMPLING_KEYS, KwargsDict, loader_facts
from .analysis.per_rank import partial_random_pass
from .analysis.script import subscript_key
from .analysis.ranks import is_world_size, seeds_alike, steps_scaled_by_world_size, torch_seed_before, torch_seeds
from .base import BatchSizePolicy, Change, Example, FixResult, FixSafety, Match, Note, Options, Phase, Rule, Valid
from .edits import Edits, code_of, expression, statement, with_keyword
from .runtime_calls import imported_name, runtime_name

#: ``DataLoader``'s positional parameters, in order.
SAMPLER_MODULE, SAMPLER_CLASS = "torch.utils.data.distributed", "DistributedSampler"


_NO_SPACE_EQUAL = cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace(""))


ITERABLE_MESSAGE = (
    "training DataLoader over an IterableDataset: a sampler cannot shard it (DataLoader refuses one), so every "
    "process would stream the same samples; shard the stream itself (in the dataset's __iter__, or with its "
    "library's own split by node)"
)
ITERABLE_TODO = (
    "this IterableDataset streams the same samples to every process: in its __iter__, keep every "
    "runtime.world_size()-th sample starting at runtime.rank() (and split between loader workers with "
    "torch.utils.data.get_worker_info()), or use its library's own split by node "
    "(datasets.distributed.split_dataset_by_node); then each process's batch is its share of the original "
    "batch: runtime.per_process_batch_size(batch_size); every process must stream the same number of batches "
    "(drop an uneven stream's remainder), or the ranks' gradient all-reduces fall out of step and the job hangs"
)


def _stream_shared_with_evaluation(analysis: ScriptAnalysis, loader: cst.Call) -> str:
    """The TODO's warning where the training stream's class also feeds an evaluation loader: cutting the class's
    ``__iter__`` by the rank shards that evaluation too (its metrics are then each rank's share's)."""
    facts = loader_facts(analysis)
    classes = set(facts.stream_classes(loader))
    if not classes:
        return ""
    for module in analysis.shared.analyses:
        module_facts = loader_facts(module)
        for other in module_facts.evaluation_loaders:
            shared = classes & set(module_facts.stream_classes(other))
            if shared:
                cls = next(iter(shared))
                # (no line number: the TODO's text must not change while the fixes move lines, or they never settle)
                where = "" if module is analysis else f" of module {module.module_name}"
                return (
                    f"; {cls.name.value} also feeds an evaluation loader{where}: cut only the "
                    "training stream (a flag of its constructor), or that evaluation is sharded too and its metrics "
                    "must be combined across processes (runtime.weighted_mean(total, count))"
                )
    return ""


OWN_SAMPLER_TODO = (
    "this training loader's own sampler is not sharded: every process draws the same samples; make it draw "
    "each rank's share (rank runtime.rank() of runtime.world_size(), e.g. a distributed version of it), keeping "
    "what it samples for, and call its set_epoch if it shuffles; then give each process its share of the "
    "batch (batch_size=runtime.per_process_batch_size(batch_size)) to keep the original's global batch"
)
#: What :data:`OWN_SAMPLER_TODO` adds for a sampler of the program's own (an episodic or P x K sampler).
COMPOSED_BATCHES_TODO = (
    "; where the sampler composes its batches (an episode of N classes x K samples, P x K for a triplet loss), a "
    "share of each batch breaks them apart: have it compose each rank's own batches instead, and a loss that "
    "compares the samples of a batch with each other then sees N times fewer of them (gather the embeddings of "
    "every rank first, torch.distributed.nn.functional.all_gather, or accept the smaller comparison set)"
)
#: :data:`OWN_SAMPLER_TODO` for a loader given a ``batch_sampler=``: the batch size is the batch sampler's, and such
#: samplers (P classes x K samples) usually feed a loss that compares the samples of a batch with each other.
OWN_BATCH_SAMPLER_TODO = (
    "this training loader's own batch sampler is not sharded: every process draws the same batches; make it draw "
    "each rank's share of every batch (rank runtime.rank() of runtime.world_size()), keeping what it samples for, "
    "and call its set_epoch if it shuffles, so that the processes together take the original's batch; a loss "
    "that compares the samples of a batch with each other (in-batch negatives, hard-example mining) then sees N "
    "times fewer of them: gather the embeddings of every rank first (torch.distributed.nn.functional.all_gather "
    "keeps the gradient), or accept the smaller comparison set"
)

UNBATCHED_MESSAGE = (
    "training DataLoader without automatic batching (batch_size=None): each item it yields is a whole batch, so a "
    "DistributedSampler would hand each process whole items and every step would average N of them (N times fewer, "
    "larger steps); decide how to share the batches out"
)
UNBATCHED_TODO = (
    "this loader yields whole batches (batch_size=None): a DistributedSampler would give each process whole items and "
    "each step would average N of them (N times fewer, larger steps); share the batches out by hand or keep it whole"
)


class MissingDistributedSampler(Rule):
    """Give every training ``DataLoader`` a ``DistributedSampler``.

    What it finds: a ``DataLoader`` whose batches reach ``backward()`` (directly, through a function of the
    program that receives the loader, or drawn with ``next(iter(loader))``) and that has no
    ``DistributedSampler``. A loop that trains only when an optional argument is given
    (``run_epoch(loader, optimizer=None)`` with ``if training: loss.backward()``) makes a loader a training
    loader only where a call site passes that argument; loaders passed only without it evaluate. Loaders whose loops
    never call ``backward()`` are evaluation loaders and are left alone: every process evaluates the whole
    set, so decisions such as ``if acc > best:`` agree on all ranks.

    Why it is a problem: without it every process iterates the whole data set in the same order; the
    world does N times the work and the gradient average is that of N identical batches.

    What the fix does: ``sampler=DistributedSampler(dataset, shuffle=<the loader's shuffle>)`` and
    ``shuffle`` removed from the loader (it is the sampler's job now). With the default ``global`` batch
    policy the batch size becomes ``runtime.per_process_batch_size(<original>)``, so N processes together
    still take the original batch per step (with ``shuffle=False``, the union of their batches is exactly
    the original batch); with ``--batch-size per-process`` it is kept and the report says the effective
    batch grows with the world size. Positional arguments after ``dataset`` become keywords. Arguments
    given through a dict (``DataLoader(ds, **train_kwargs)``, with every write to the dict visible) are
    overridden in the call, not in the dict, which other loaders may share. A shuffling loader of a program
    that seeds torch first (``torch.manual_seed(args.seed)`` in the function that builds the loader, the same
    on every rank, nothing set between) gets ``seed=<that seed>``: the sampler shuffles from its own seed, and
    without it every seed of a sweep would see the same orders (the report's change says so where the seed is
    out of the loader's reach, or set through a helper: ``set_seed(cfg)``).

    What it leaves to a human (a TODO comment and a review item): a training loader that already has its
    own sampler (``WeightedRandomSampler``, ``SubsetRandomSampler``: never dropped), a loader over an
    iterable-style dataset (a class of the program derived from ``IterableDataset`` or ``IterDataPipe``:
    ``DataLoader`` refuses any sampler for it, so the dataset's ``__iter__`` must yield each rank its own
    samples; one whose methods already cut the stream by the rank, ``range(rank, n, world_size)``, is left
    as it is, with a note), loaders built in a dict
    and iterated by phase (``loaders[phase]``), arguments too dynamic to read, and a loader iterated by a
    conditionally training loop whose call sites do not tell whether it trains.

    Fix safety: the batch is split: with the default ``global`` policy each process loads ``batch_size /
    world size`` (a batch that the world size does not divide stops the run with a message), the last
    partial batch of each process differs from the original's, and the sample order is the sampler's
    (seeded per epoch) instead of the loader's own shuffle. A batch size the program says is each device's own
    (``args.per_device_train_batch_size``, an option whose help says "per GPU") is split all the same, with a
    note that says so and how to keep it per process (``--batch-size per-process``).
    """

    code = "DDP005"
    name = "missing-distributed-sampler"
    fix_safety = FixSafety.UNSAFE
    phase = Phase.SAMPLERS
    triggers = ("DataLoader",)
    manual_fix = "shard the data with a DistributedSampler (or a distributed version of the custom sampler)"
    examples = (
        Example(
            before="""\
from torch.utils.data import DataLoader

loader = DataLoader(train_set, batch_size=64, shuffle=True)
for x, y in loader:
    loss_fn(model(x), y).backward()
""",
            after="""\
from ddp_migrate import runtime
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler

loader = DataLoader(
    train_set,
    batch_size=runtime.per_process_batch_size(64),
    sampler=DistributedSampler(train_set, shuffle=True),
)
for x, y in loader:
    loss_fn(model(x), y).backward()
""",
        ),
        Example(
            before="""\
import torch.utils.data as tud

loader = tud.DataLoader(train_set, 32, True)
for x, y in loader:
    loss_fn(model(x), y).backward()
""",
            after="""\
import torch.utils.data as tud
from torch.utils.data.distributed import DistributedSampler

loader = tud.DataLoader(
    train_set, 32, sampler=DistributedSampler(train_set, shuffle=True)
)
for x, y in loader:
    loss_fn(model(x), y).backward()
""",
            options=Options(batch_size=BatchSizePolicy.PER_PROCESS),
        ),
        Example(
            before="""\
from torch.utils.data import DataLoader

train_kwargs = {"batch_size": 64}
train_kwargs.update({"shuffle": True, "num_workers": 1})
loader = DataLoader(train_set, **train_kwargs)
for x, y in loader:
    loss_fn(model(x), y).backward()
""",
            after="""\
from ddp_migrate import runtime
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler

train_kwargs = {"batch_size": 64}
train_kwargs.update({"shuffle": True, "num_workers": 1})
loader = DataLoader(
    train_set,
    sampler=DistributedSampler(train_set, shuffle=train_kwargs.get("shuffle", False)),
    **{
        **train_kwargs,
        "batch_size": runtime.per_process_batch_size(train_kwargs["batch_size"]),
        "shuffle": False,
    },
)
for x, y in loader:
    loss_fn(model(x), y).backward()
""",
        ),
        # The call passes shuffle and the batch size itself, next to the dict (a trial: the batch size was
        # left global and the sampler told not to shuffle beside shuffle=True, a ValueError).
        Example(
            before="""\
from torch.utils.data import DataLoader

common = dict(num_workers=2, pin_memory=True)
loader = DataLoader(train_set, batch_size=args.batch_size, shuffle=True, **common)
for x, y in loader:
    loss_fn(model(x), y).backward()
""",
            after="""\
from ddp_migrate import runtime
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler

common = dict(num_workers=2, pin_memory=True)
loader = DataLoader(
    train_set,
    batch_size=runtime.per_process_batch_size(args.batch_size),
    sampler=DistributedSampler(train_set, shuffle=True),
    **common,
)
for x, y in loader:
    loss_fn(model(x), y).backward()
""",
        ),
        Example(
            before="""\
from torch.utils.data import DataLoader

def run_epoch(loader, optimizer=None):
    training = optimizer is not None
    for x, y in loader:
        loss = loss_fn(model(x), y)
        if training:
            loss.backward()

train_loader = DataLoader(train_set, batch_size=64)
val_loader = DataLoader(val_set, batch_size=64)
run_epoch(train_loader, optimizer)
run_epoch(val_loader)
""",
            after="""\
from ddp_migrate import runtime
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler

def run_epoch(loader, optimizer=None):
    training = optimizer is not None
    for x, y in loader:
        loss = loss_fn(model(x), y)
        if training:
            loss.backward()

train_loader = DataLoader(
    train_set,
    batch_size=runtime.per_process_batch_size(64),
    sampler=DistributedSampler(train_set, shuffle=False),
)
val_loader = DataLoader(val_set, batch_size=64)
run_epoch(train_loader, optimizer)
run_epoch(val_loader)
""",
        ),
        Example(
            before="""\
from torch.utils.data import DataLoader

loaders = {x: DataLoader(sets[x], batch_size=8, shuffle=x == "train") for x in ["train", "val"]}
for phase in ["train", "val"]:
    for x, y in loaders[phase]:
        loss = loss_fn(model(x), y)
        if phase == "train":
            loss.backward()
""",
            after="""\
from torch.utils.data import DataLoader

# TODO(ddp-migrate): shard this training loader across processes (DistributedSampler) and call set_epoch
loaders = {x: DataLoader(sets[x], batch_size=8, shuffle=x == "train") for x in ["train", "val"]}
for phase in ["train", "val"]:
    for x, y in loaders[phase]:
        loss = loss_fn(model(x), y)
        if phase == "train":
            loss.backward()
""",
        ),
        Example(
            before="""\
from torch.utils.data import DataLoader

loader = DataLoader(train_set, batch_size=8)
batches = iter(loader)
for step in range(100):
    x, y = next(batches)
    loss_fn(model(x), y).backward()
""",
            after="""\
from ddp_migrate import runtime
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler

loader = DataLoader(
    train_set,
    batch_size=runtime.per_process_batch_size(8),
    sampler=DistributedSampler(train_set, shuffle=False),
)
batches = iter(loader)
for step in range(100):
    x, y = next(batches)
    loss_fn(model(x), y).backward()
""",
        ),
        Example(
            before="""\
from torch.utils.data import DataLoader, WeightedRandomSampler

loader = DataLoader(train_set, batch_size=8, sampler=WeightedRandomSampler(weights, len(weights)))
for x, y in loader:
    loss_fn(model(x), y).backward()
""",
            after="""\
from torch.utils.data import DataLoader, WeightedRandomSampler

# TODO(ddp-migrate): this training loader's own sampler is not sharded: every process draws the same samples; make it draw each rank's share (rank runtime.rank() of runtime.world_size(), e.g. a distributed version of it), keeping what it samples for, and call its set_epoch if it shuffles; then give each process its share of the batch (batch_size=runtime.per_process_batch_size(batch_size)) to keep the original's global batch
loader = DataLoader(train_set, batch_size=8, sampler=WeightedRandomSampler(weights, len(weights)))
for x, y in loader:
    loss_fn(model(x), y).backward()
""",
        ),
        Example(
            before="""\
from torch.utils.data import DataLoader, IterableDataset


class Stream(IterableDataset):
    def __iter__(self):
        yield from read_records()


loader = DataLoader(Stream(), batch_size=8)
for x, y in loader:
    loss_fn(model(x), y).backward()
""",
            after="""\
from torch.utils.data import DataLoader, IterableDataset


class Stream(IterableDataset):
    def __iter__(self):
        yield from read_records()


# TODO(ddp-migrate): this IterableDataset streams the same samples to every process: in its __iter__, keep every runtime.world_size()-th sample starting at runtime.rank() (and split between loader workers with torch.utils.data.get_worker_info()), or use its library's own split by node (datasets.distributed.split_dataset_by_node); then each process's batch is its share of the original batch: runtime.per_process_batch_size(batch_size); every process must stream the same number of batches (drop an uneven stream's remainder), or the ranks' gradient all-reduces fall out of step and the job hangs
loader = DataLoader(Stream(), batch_size=8)
for x, y in loader:
    loss_fn(model(x), y).backward()
""",
        ),
        Valid(
            """\
from torch.utils.data import DataLoader

val_loader = DataLoader(val_set, batch_size=64)
with torch.no_grad():
    for x, y in val_loader:
        correct += (model(x).argmax(1) == y).sum()
"""
        ),
    )

    def matches(self, analysis: ScriptAnalysis) -> Iterator[Match]:
        facts = loader_facts(analysis)
        for loader in analysis.loader_calls:
            if loader in facts.dict_training:
                yield Match(
                    loader,
                    "training DataLoader built in a dict and iterated by phase: shard the training phase's loader by hand "
                    "(DistributedSampler) and leave the evaluation one whole",
                    fixable=False,
                )
                continue
            if loader in facts.undecided:
                yield Match(
                    loader,
                    "DataLoader iterated by a loop that trains only for some callers: cannot tell whether it trains; "
                    "left unsharded (if it trains, shard it by hand)",
                    fixable=False,
                )
                continue
            if loader in facts.unconnected and not analysis.has_distributed_sampler(loader):
                yield Match(
                    loader,
                    "DataLoader iterated by a loop that the analysis cannot connect to the program's backward() (the "
                    "step is called through something it cannot follow): cannot tell whether it trains; left "
                    "unsharded (if it trains, shard it by hand)",
                    fixable=False,
                )
                continue
            if facts.sharded_at_a_call_site(loader):
                continue  # (``build_dataloader(cfg, ds, sampler=DistributedSampler(ds))``: the user's own split)
            if loader in facts.shared_factories and not analysis.has_distributed_sampler(loader):
                yield Match(
                    loader,
                    "training DataLoader built by a function that several call sites use (training and evaluation "
                    "loaders alike?): one sampler here would shard them all; shard only the training loader",
                    fixable=False,
                )
                continue
            if loader in facts.evaluation_loaders and not analysis.has_distributed_sampler(loader):
                combining = combined_evaluation(analysis, loader)
                if combining is not None:
                    yield Match(
                        loader,
                        f"evaluation DataLoader left unsharded, but its evaluation combines values across processes "
                        f"(`{code_of(combining)}`): every process evaluates the whole set, so a combined sum or count is N "
                        "times the set's; shard it with DistributedSampler(shuffle=False) so each process evaluates its "
                        "share, or do not combine",
                        fixable=False,
                    )
                    continue
            if loader not in facts.training_loaders or analysis.has_distributed_sampler(loader):
                continue
            if facts.sharded_by_hand(loader):
                continue  # its data set is this rank's share already (a note says so)
            dataset = loader_argument(loader, "dataset")
            kwargs = facts.kwargs_dict(loader)
            if facts.streams(loader):
                yield Match(loader, ITERABLE_MESSAGE, fixable=False)
            elif _yields_batches(loader):
                yield Match(loader, UNBATCHED_MESSAGE, fixable=False)
            elif kwargs is None and dataset is not None and _whole_set_sampler(analysis, loader) is not None:
                yield Match(loader, "training DataLoader without a DistributedSampler (its sampler draws from the whole set on every process)")
            elif given_loader_argument(loader, "sampler") or given_loader_argument(loader, "batch_sampler"):
                own = "batch sampler" if given_loader_argument(loader, "batch_sampler") and not given_loader_argument(loader, "sampler") else "sampler"
                comparing = (
                    "; a loss that compares the samples of a batch with each other then sees N times fewer of them (gather "
                    "the embeddings of every rank first, or accept it)"
                    if own == "batch sampler" or _programs_own_sampler(analysis, loader)
                    else ""
                )
                yield Match(loader, f"training DataLoader with its own {own} is not sharded across processes: shard it by hand{comparing}", fixable=False)
            elif kwargs is not None and kwargs.keys is not None and kwargs.keys & SAMPLING_KEYS:
                if self._distributed_in(analysis, kwargs):
                    continue
                yield Match(loader, "training DataLoader with its own sampler (in its keyword dict) is not sharded across processes: shard it by hand", fixable=False)
            elif dataset is not None and kwargs is not None and kwargs.keys is not None and sum(1 for a in loader.args if a.star) == 1:
                yield Match(loader, "training DataLoader without a DistributedSampler: every process would see the whole data set")
            elif dataset is None or any(a.star for a in loader.args):
                yield Match(loader, "training DataLoader without a DistributedSampler (arguments too dynamic to rewrite)", fixable=False)
            else:
                yield Match(loader, "training DataLoader without a DistributedSampler: every process would see the whole data set")

    @staticmethod
    def _own_sampler(analysis: ScriptAnalysis, loader: cst.Call) -> bool:
        """Whether the loader brings its own sampler, in the call or in its keyword dict."""
        if given_loader_argument(loader, "sampler") or given_loader_argument(loader, "batch_sampler"):
            return True
        kwargs = loader_facts(analysis).kwargs_dict(loader)
        return kwargs is not None and kwargs.keys is not None and bool(kwargs.keys & SAMPLING_KEYS)

    @staticmethod
    def _distributed_in(analysis: ScriptAnalysis, kwargs: KwargsDict) -> bool:
        return any(
            isinstance(o, cst.Call) and analysis.is_call_to(o, names.DISTRIBUTED_SAMPLER)
            for value in kwargs.value_of("sampler")
            for o in analysis.origins(value)
        )

    def fix(self, analysis: ScriptAnalysis, options: Options) -> FixResult | None:
        edits = Edits(analysis)
        scaled = steps_scaled_by_world_size(analysis) if options.batch_size is BatchSizePolicy.GLOBAL else []
        kept = ""
        if scaled:
            # The program keeps its global batch itself: splitting the batch too would halve it again.
            home, node, name = scaled[0]
            verb = "multiplies" if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Multiply) else "divides"
            kept = f" (batch size kept per process: the program already {verb} {name} by the world size, line {home.line(node)})"
            options = dataclasses.replace(options, batch_size=BatchSizePolicy.PER_PROCESS)
        given_names: set[str] = set()  # (the data sets named in this pass: two loaders, two names)
        for match in self.matches_in(analysis):
            loader = match.node
            assert isinstance(loader, cst.Call)
            if not match.fixable:
                stmt = analysis.statement(loader)
                if loader in loader_facts(analysis).shared_factories:
                    edits.todo(
                        stmt,
                        "several call sites build their loaders here: give the training one a DistributedSampler "
                        "(and set_epoch), keep evaluation loaders whole",
                    )
                elif loader_facts(analysis).streams(loader):
                    edits.todo(stmt, ITERABLE_TODO + _stream_shared_with_evaluation(analysis, loader))
                elif loader in loader_facts(analysis).undecided or loader in loader_facts(analysis).unconnected:
                    edits.todo(
                        stmt,
                        "if this loader trains, shard it (DistributedSampler, set_epoch); if it evaluates, keep it whole",
                    )
                elif _yields_batches(loader):
                    edits.todo(stmt, UNBATCHED_TODO)
                elif self._own_sampler(analysis, loader):
                    batch_sampler = given_loader_argument(loader, "batch_sampler") and not given_loader_argument(loader, "sampler")
                    edits.todo(
                        stmt,
                        OWN_BATCH_SAMPLER_TODO if batch_sampler
                        else OWN_SAMPLER_TODO + (COMPOSED_BATCHES_TODO if _programs_own_sampler(analysis, loader) else ""),
                    )
                elif loader in loader_facts(analysis).evaluation_loaders:
                    edits.todo(stmt, match.message)
                else:
                    edits.todo(stmt, "shard this training loader across processes (DistributedSampler) and call set_epoch")
                continue
            dataset = loader_argument(loader, "dataset")
            assert dataset is not None
            dataset_expr = dataset.value
            if not isinstance(dataset_expr, (cst.Name, cst.Attribute)):
                # The sampler needs the same dataset object: evaluate the expression once, into a new name.
                name = analysis.free_name("train_dataset", "train_set", "dataset", taken=given_names)
                given_names.add(name)
                edits.insert_before(analysis.statement(loader), statement(f"{name} = {code_of(dataset_expr)}"))
                dataset_expr = cst.Name(name)
            kwargs = loader_facts(analysis).kwargs_dict(loader)
            if kwargs is not None:
                edits.replace(loader, self._rewrite_kwargs(analysis, edits, loader, dataset_expr, kwargs, options))
            else:
                edits.replace(loader, self._rewrite(analysis, edits, loader, dataset_expr, options))
            whole = _whole_set_sampler(analysis, loader) if kwargs is None else None
            if whole is not None:
                edits.drop_unused_imports()  # (``RandomSampler`` of the import line)
            replaced = f" in place of its {code_of(whole[2].func)}" if whole is not None else ""
            edits.changes.append(
                Change(self.code, analysis.line(loader), "DistributedSampler added to the training DataLoader" + replaced + kept + _unseeded(analysis, loader, kwargs))
            )
        return edits.apply(analysis.module) if edits else None

    @staticmethod
    def _replicas(analysis: ScriptAnalysis, edits: Edits) -> str:
        """``num_replicas=runtime.world_size(), rank=runtime.rank(), `` when the program sets up its own
        process group (perhaps only when launched distributed: ``if ddp: init_process_group()``), so the
        sampler also works as plain ``python`` without one; nothing when the migration adds
        ``runtime.setup()``, which always makes a group."""
        if any(module.calls_to(names.RUNTIME_SETUP) for module in analysis.shared.analyses) or not analysis.is_distributed:
            return ""
        rt = runtime_name(analysis, edits)
        return f"num_replicas={rt}.world_size(), rank={rt}.rank(), "

    def _rewrite(
        self, analysis: ScriptAnalysis, edits: Edits, loader: cst.Call, dataset: cst.BaseExpression, options: Options
    ) -> cst.Call:
        sampler_class = imported_name(analysis, edits, SAMPLER_MODULE, SAMPLER_CLASS)
        original_dataset = loader_argument(loader, "dataset")
        shuffle = loader_argument(loader, "shuffle")
        shuffle_code = code_of(shuffle.value) if shuffle is not None else "False"
        whole = _whole_set_sampler(analysis, loader)
        if whole is not None:  # ``sampler=RandomSampler(ds)``: ``shuffle=True`` spelled out; its place goes to the sampler
            shuffle, shuffle_code, _ = whole
        seed = _seed_argument(analysis, loader, shuffle_code)
        sampler = expression(f"{sampler_class}({code_of(dataset)}, {self._replicas(analysis, edits)}shuffle={shuffle_code}{seed})")
        args: list[cst.Arg] = []
        keyword_from = None
        unset_samplers = _unset_samplers(loader)
        # Arguments keep their commas and the whitespace after them (line breaks, comments): a call laid out
        # one argument per line stays so. The sampler takes the place of ``shuffle``, else comes last.
        for index, arg in enumerate(loader.args):
            parameter = LOADER_PARAMETERS[index] if arg.keyword is None and index < len(LOADER_PARAMETERS) else None
            if arg is original_dataset:
                arg = arg.with_changes(value=dataset)
            if arg in unset_samplers:  # ``sampler=None``: the DistributedSampler takes its place
                keyword_from = index if keyword_from is None and arg.keyword is None else keyword_from
                continue
            if arg is shuffle:
                keyword_from = index  # positional arguments after a replaced one must become keywords
                args.append(arg.with_changes(value=sampler, keyword=cst.Name("sampler"), equal=_NO_SPACE_EQUAL))
                continue
            if arg.keyword is None and keyword_from is not None and parameter is not None:
                arg = arg.with_changes(keyword=cst.Name(parameter), equal=_NO_SPACE_EQUAL)
            if arg is loader_argument(loader, "batch_size") and options.batch_size is BatchSizePolicy.GLOBAL:
                rt = runtime_name(analysis, edits)
                arg = arg.with_changes(value=expression(f"{rt}.per_process_batch_size({code_of(arg.value)})"))
            args.append(arg)
        call = loader.with_changes(args=_closed(args, loader, unset_samplers))
        if options.batch_size is BatchSizePolicy.GLOBAL and _batches_of_one(loader):
            # The default batch of one sample, written out to be kept: it cannot be split (a clear error under
            # torchrun, and DDP047's review), where batches of 1 per process would silently double it.
            call = with_keyword(call, "batch_size", expression(f"{runtime_name(analysis, edits)}.per_process_batch_size(1)"))
        return call if shuffle is not None else with_keyword(call, "sampler", sampler)

    def _rewrite_kwargs(
        self, analysis: ScriptAnalysis, edits: Edits, loader: cst.Call, dataset: cst.BaseExpression, kwargs: KwargsDict, options: Options
    ) -> cst.Call:
        """``DataLoader(ds, **kw)``: the dict is left as it is (other loaders may share it); the call
        overrides ``shuffle`` and ``batch_size`` and adds the sampler with the dict's shuffle. A
        ``shuffle`` or ``batch_size`` the call passes itself (``DataLoader(ds, 16, shuffle=True, **kw)``;
        then the dict cannot hold it) is handled as in a call without a dict."""
        sampler_class = imported_name(analysis, edits, SAMPLER_MODULE, SAMPLER_CLASS)
        keys = kwargs.keys or frozenset()
        own_shuffle = loader_argument(loader, "shuffle")
        own_batch_size = loader_argument(loader, "batch_size")
        divide = options.batch_size is BatchSizePolicy.GLOBAL
        overrides = []
        if "batch_size" in keys and own_batch_size is None and divide:
            rt = runtime_name(analysis, edits)
            overrides.append(f'"batch_size": {rt}.per_process_batch_size({kwargs.name}["batch_size"])')
        shuffle = "False"
        if own_shuffle is not None:
            shuffle = code_of(own_shuffle.value)
        elif "shuffle" in keys:
            overrides.append('"shuffle": False')
            shuffle = f'{kwargs.name}.get("shuffle", False)'
        sampler = f"{sampler_class}({code_of(dataset)}, {self._replicas(analysis, edits)}shuffle={shuffle}{_seed_argument(analysis, loader, shuffle)})"
        args: list[cst.Arg] = []
        original_dataset = loader_argument(loader, "dataset")
        sampler_arg = cst.Arg(expression(sampler), keyword=cst.Name("sampler"), equal=cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace("")))
        keyword_from = None
        unset_samplers = _unset_samplers(loader)
        for index, arg in enumerate(loader.args):
            parameter = LOADER_PARAMETERS[index] if arg.keyword is None and not arg.star and index < len(LOADER_PARAMETERS) else None
            if arg is original_dataset:
                arg = arg.with_changes(value=dataset)
            if arg in unset_samplers:  # ``sampler=None``: the DistributedSampler takes its place
                keyword_from = index if keyword_from is None and arg.keyword is None else keyword_from
                continue
            if arg is own_shuffle:
                keyword_from = index  # the sampler carries it; positional arguments after it become keywords
                continue
            if parameter is not None and keyword_from is not None:
                arg = arg.with_changes(keyword=cst.Name(parameter), equal=_NO_SPACE_EQUAL)
            if arg is own_batch_size and divide:
                rt = runtime_name(analysis, edits)
                arg = arg.with_changes(value=expression(f"{rt}.per_process_batch_size({code_of(arg.value)})"))
            if arg.star == "**":
                # The sampler goes before the unpacked dict: it is then an argument the analysis can read.
                args.append(sampler_arg)
                if overrides:
                    arg = arg.with_changes(value=expression("{**" + kwargs.name + ", " + ", ".join(overrides) + "}"))
            args.append(arg.with_changes(comma=cst.MaybeSentinel.DEFAULT))
        return loader.with_changes(args=args)

    def notes(self, analysis: ScriptAnalysis, options: Options) -> list[Note]:
        notes: list[Note] = []
        if analysis.program_only_infers:
            return notes  # (a prediction script: its loaders are not shared out between processes)
        facts = loader_facts(analysis)
        for loader in analysis.loader_calls:
            line = analysis.line(loader)
            if loader in facts.evaluated_by_call_site and not analysis.has_distributed_sampler(loader):
                notes.append(
                    Note(
                        self.code,
                        line,
                        "DataLoader passed only where the shared loop does not train (no optimizer given, or an evaluating step): treated as "
                        "an evaluation loader and left unsharded, so every process computes the same metrics",
                    )
                )
            elif loader in facts.training_loaders and not analysis.has_distributed_sampler(loader) and facts.sharded_by_hand(loader):
                notes.append(
                    Note(
                        self.code,
                        line,
                        "training DataLoader left without a DistributedSampler: "
                        + (
                            f"its own sampler, `{code_of(sampler.func)}(...)`, already draws this rank's share (it is built "
                            "with the rank, or cuts its indices by it)"
                            if (sampler := facts.sampler_drawn_by_rank(loader)) is not None
                            else f"its data set is already this rank's share (its IterableDataset {stream.name.value} cuts the "
                            "stream by the rank; every process must stream the same number of batches, or the ranks' "
                            "gradient all-reduces fall out of step and the job hangs: drop an uneven stream's remainder)"
                            if (stream := facts.stream_cut_by_rank(loader)) is not None
                            else "its data set is already this rank's share (indices computed from the rank)"
                        ),
                    )
                )
            elif loader in facts.evaluation_loaders and not analysis.has_distributed_sampler(loader) and any(
                partial_random_pass(analysis, loop) for loop in analysis.loader_loops if loader in loop.loader_calls
            ):
                notes.append(
                    Note(
                        self.code,
                        line,
                        "evaluation DataLoader left unsharded, but it shuffles and its loop stops after some batches: each "
                        "process evaluates another random part of the set (torch is not seeded alike on every rank), so the "
                        "ranks' metrics differ; seed torch alike on every rank, or evaluate without shuffling",
                    )
                )
            elif loader in facts.evaluation_loaders and not analysis.has_distributed_sampler(loader) and facts.sharded_by_hand(loader):
                notes.append(
                    Note(
                        self.code,
                        line,
                        "evaluation DataLoader over a data set the program cuts by the rank itself: each process evaluates "
                        "its share only, so its metrics are the share's; combine them across processes "
                        "(runtime.weighted_mean(total, count)) before showing them or deciding on them",
                    )
                )
            elif loader in facts.evaluation_loaders and not analysis.has_distributed_sampler(loader) and combined_evaluation(analysis, loader) is None:
                notes.append(
                    Note(
                        self.code,
                        line,
                        "evaluation DataLoader left unsharded: every process evaluates the whole set, which is correct "
                        "but slower; to shard it, add a DistributedSampler and combine the metrics with "
                        "runtime.weighted_mean(total, count)"
                        if _looped_over(analysis, loader)
                        else "DataLoader left unsharded: no loop over it is seen (its batches are drawn with next() or "
                        "handed on), and no training is seen to take them; if its batches train (a round robin over "
                        "tasks, a helper drawing them), give it a DistributedSampler and call set_epoch at each new pass, "
                        "or every process trains on the same data",
                    )
                )
            elif loader in facts.training_loaders and analysis.has_distributed_sampler(loader):
                if _batches_of_one(loader):
                    if options.batch_size is BatchSizePolicy.PER_PROCESS:  # (under the global policy: a TODO)
                        notes.append(Note(self.code, line, "no batch_size given: each process takes batches of 1"))
                elif options.batch_size is BatchSizePolicy.PER_PROCESS:
                    notes.append(
                        Note(self.code, line, "batch_size kept per process: the effective batch is batch_size × the number of processes")
                    )
                elif (said := _said_per_device(analysis, loader)) is not None:
                    notes.append(
                        Note(
                            self.code,
                            line,
                            f"the batch size comes from {said}, which says it is per device: the migration keeps the "
                            "original's global batch, so each process now takes 1/N of it; to keep it per process "
                            "(the global batch N times the original's), migrate with --batch-size per-process",
                        )
                    )
        return notes


#: How a name or an option's help says a batch size is each device's (``per_device_train_batch_size``,
#: ``per_gpu_batch``, "batch size per GPU").
_PER_DEVICE = re.compile(r"per[_ -]?(device|gpu|process|rank|replica|core|worker)", re.IGNORECASE)


def _said_per_device(analysis: ScriptAnalysis, loader: cst.Call) -> str | None:
    """Where a loader's batch size, split by the migration (``runtime.per_process_batch_size(X)``), is said to be
    each device's own: ``X`` named so (``args.per_device_train_batch_size``), or a command-line option whose help
    says so. How to name it in a note; ``None`` otherwise."""
    size = loader_argument(loader, "batch_size")
    value = size.value if size is not None else None
    if type(value) is not cst.Call or not analysis.is_call_to(value, names.RUNTIME_PER_PROCESS_BATCH_SIZE) or not value.args:  # type: ignore[attr-defined]
        return None
    given = value.args[0].value  # type: ignore[attr-defined]
    leaf = given.attr.value if type(given) is cst.Attribute else given.value if type(given) is cst.Name else subscript_key(given)  # type: ignore[attr-defined]
    if leaf is None:
        return None
    if type(given) is cst.Name and any(type(v) not in (cst.Name, cst.Attribute) for v in analysis.flows_into(given, given.value)):
        return None  # (``batch_size = args.batch_size * n_gpu``: the program made the global batch of the per-device one)
    if _PER_DEVICE.search(leaf):
        return f"`{code_of(given)}`"
    for module in analysis.shared.analyses:
        for option in legacy_facts(module).options:
            help_text = keyword_argument(option.call, "help")
            if option.dest == leaf and help_text is not None and _PER_DEVICE.search(string_value(help_text.value) or ""):
                return f"the option {option.flags[-1]}"
    return None


def _looped_over(analysis: ScriptAnalysis, loader: cst.Call) -> bool:
    """Whether a loop or comprehension of the program goes over the loader (an evaluation is seen as such)."""
    return any(loader in loop.loader_calls for loop in analysis.program_loader_loops) or any(
        loader in loaders for module in analysis.shared.analyses for _, _, loaders in module.training_comprehensions
    )


def combined_evaluation(analysis: ScriptAnalysis, loader: cst.Call) -> cst.Call | None:
    """In a distributed program, the first call that combines values across processes (``dist.all_reduce(t)``, a
    helper returning a reduction, ``meter.all_reduce()``) in a function of the program that loops over the
    evaluation loader: the evaluation was written for shards (torchvision's ``reduce_across_processes`` of
    the number of samples seen), so a whole set on every process is counted N times. ``None`` otherwise. Found
    once per loader (the rule's findings and its notes both ask)."""
    found = analysis.derived("combined evaluations", lambda _: {})
    if loader not in found:
        found[loader] = _combined_evaluation(analysis, loader)
    return found[loader]


def _combined_evaluation(analysis: ScriptAnalysis, loader: cst.Call) -> cst.Call | None:
    if not analysis.program_wrap_calls:
        return None
    for loop in analysis.program_loader_loops:
        if loader not in loop.loader_calls:
            continue
        home = analysis.shared.analysis_of(loop.loop) or analysis
        function = home.enclosing_function(loop.loop)
        if function is None:
            continue
        filled = _names_filled_in(loop.loop)
        for node in home.nodes_below(function):
            if type(node) is cst.Call and (home.is_reduction(node) or (type(node.func) is cst.Attribute and home.reduces_in_place(node))):  # type: ignore[arg-type, attr-defined]
                # (a reduction of what the evaluation loop computes: not ``all_reduce_mean(train_sum / n)`` of the
                # training loop beside it in the same function)
                if (home.is_inside(node, loop.loop) or _names_read(node) & filled) and not _averages(home, node):  # type: ignore[arg-type]
                    return node  # type: ignore[return-value]
    return None


def _averages(analysis: ScriptAnalysis, call: cst.Call) -> bool:
    """Whether a reduction averages across processes (``runtime.reduce_mean``, ``runtime.weighted_mean``, a
    helper of the program that all-reduces and divides by the world size): of a value every process computes
    alike over the whole set, the mean is that value, and nothing is counted N times."""
    if analysis.is_call_to(call, _AVERAGING_REDUCTIONS):
        return True
    target = analysis.call_target(call)
    if target is None:
        return False
    home = analysis.shared.analysis_of(target) or analysis
    for node in home.nodes_below(target):
        if type(node) is cst.AugAssign and type(node.operator) is cst.DivideAssign and is_world_size(home, node.value):  # type: ignore[attr-defined]
            return True
        if type(node) is cst.BinaryOperation and type(node.operator) is cst.Divide and is_world_size(home, node.right):  # type: ignore[attr-defined]
            return True
    return False


_AVERAGING_REDUCTIONS = frozenset({names.runtime("reduce_mean"), names.runtime("weighted_mean")})


def _names_filled_in(loop: cst.For) -> set[str]:
    """The plain names a loop's body assigns, adds to or calls a method of (``correct += ...``, ``meter.update(...)``)."""
    found: set[str] = set()
    for node in walk(loop.body):
        if type(node) in (cst.AugAssign, cst.AssignTarget, cst.AnnAssign):
            found.update(n.value for n in walk(node.target) if type(n) is cst.Name)  # type: ignore[attr-defined]
        elif type(node) is cst.Call and type(node.func) is cst.Attribute and type(node.func.value) is cst.Name:  # type: ignore[attr-defined]
            found.add(node.func.value.value)  # type: ignore[attr-defined]
    return found


def _names_read(call: cst.Call) -> set[str]:
    """The plain names a call reads: in its arguments, and its receiver (``top1`` of ``top1.all_reduce()``)."""
    found = {n.value for arg in call.args for n in walk(arg.value) if type(n) is cst.Name}  # type: ignore[attr-defined]
    if type(call.func) is cst.Attribute:
        found.update(n.value for n in walk(call.func.value) if type(n) is cst.Name)  # type: ignore[attr-defined]
    return found


#: Samplers of torch that, given the loader's data set alone, draw every sample once per pass: ``shuffle=True``
#: and ``shuffle=False`` spelled out.
_WHOLE_SET_SAMPLERS = {"torch.utils.data.RandomSampler": "True", "torch.utils.data.sampler.RandomSampler": "True",
                       "torch.utils.data.SequentialSampler": "False", "torch.utils.data.sampler.SequentialSampler": "False"}


def _whole_set_sampler(analysis: ScriptAnalysis, loader: cst.Call) -> tuple[cst.Arg, str, cst.Call] | None:
    """The loader's ``sampler=`` argument when it is ``RandomSampler(dataset)`` or ``SequentialSampler(dataset)`` of
    the loader's own data set and nothing else (no ``replacement``, ``num_samples`` nor ``generator``), written there
    or held in a name, with the ``shuffle`` it stands for and the sampler's call; ``None`` for any other sampler."""
    given = loader_argument(loader, "sampler")
    dataset = loader_argument(loader, "dataset")
    if given is None or dataset is None or loader_argument(loader, "batch_sampler") is not None:
        return None
    value = given.value
    origins = [value] if isinstance(value, cst.Call) else list(analysis.origins(value)) if isinstance(value, cst.Name) else []
    if len(origins) != 1 or not isinstance(origins[0], cst.Call):
        return None
    sampler = origins[0]
    shuffles = next((_WHOLE_SET_SAMPLERS[q] for q in analysis.qualified_names(sampler.func) if q in _WHOLE_SET_SAMPLERS), None)
    if shuffles is None or len(sampler.args) != 1 or sampler.args[0].star:
        return None
    keyword = sampler.args[0].keyword
    if keyword is not None and keyword.value != "data_source":
        return None
    return (given, shuffles, sampler) if _same_data_set(analysis, sampler.args[0].value, dataset.value) else None


def _same_data_set(analysis: ScriptAnalysis, sampled: cst.BaseExpression, loaded: cst.BaseExpression) -> bool:
    """Whether a sampler's data set is the loader's: the same name bound by the same statement at both places
    (``ds`` not rebound between ``RandomSampler(ds)`` and ``DataLoader(ds, ...)``), a parameter neither rebinds,
    or the same expression written within the loader's own call."""
    if code_of(sampled).strip() != code_of(loaded).strip():
        return False
    if analysis.is_inside(sampled, analysis.statement(loaded)):
        return True
    if type(sampled) is not cst.Name:
        return False
    name = sampled.value  # type: ignore[attr-defined]
    binding = analysis.binding_in_effect(sampled, name)
    if binding is not None:
        return binding is analysis.binding_in_effect(loaded, name)
    function = analysis.enclosing_function(sampled)
    return (
        function is not None
        and function is analysis.enclosing_function(loaded)
        and analysis.is_parameter(function, name)
        and name not in analysis.names_bound_in(function.body)
    )


def _batches_of_one(loader: cst.Call) -> bool:
    """Whether a loader takes the default batch of one sample (no ``batch_size``, no batch sampler, no ``**``)."""
    return (
        loader_argument(loader, "batch_size") is None
        and loader_argument(loader, "batch_sampler") is None
        and not any(a.star for a in loader.args)
    )


def _unset_samplers(loader: cst.Call) -> list[cst.Arg]:
    """The loader's ``sampler=None`` / ``batch_sampler=None`` arguments (the defaults, spelled out)."""
    return [arg for parameter in ("sampler", "batch_sampler") if (arg := loader_argument(loader, parameter)) is not None and is_none(arg.value)]


def _yields_batches(loader: cst.Call) -> bool:
    """``DataLoader(ds, batch_size=None)``: no automatic batching, each item of the data set is a batch."""
    size = loader_argument(loader, "batch_size")
    return size is not None and is_none(size.value)


def _closed(args: list[cst.Arg], loader: cst.Call, dropped: list[cst.Arg]) -> list[cst.Arg]:
    """The new arguments, the last one ending as the call's last one did where that one was dropped (its
    comma, or none, and the line break before the parenthesis)."""
    if args and loader.args and loader.args[-1] in dropped:
        last = loader.args[-1]
        args[-1] = args[-1].with_changes(comma=last.comma, whitespace_after_arg=last.whitespace_after_arg)
    return args


def _unseeded(analysis: ScriptAnalysis, loader: cst.Call, kwargs: KwargsDict | None) -> str:
    """What the report adds to the change of a loader that shuffles: that the sampler's order is its own (two
    trials compared a one-process run with the original and found other numbers), and, where the program
    seeds torch alike on every rank and :func:`torch_seed_before` could not spell that seed, that the sampler
    shuffles from its own seed."""
    shuffle = loader_argument(loader, "shuffle")
    shuffles = shuffle is not None and code_of(shuffle.value) != "False" or (kwargs is not None and "shuffle" in (kwargs.keys or ()))
    whole = _whole_set_sampler(analysis, loader) if kwargs is None else None
    if whole is not None:
        shuffles = whole[1] == "True"
    if not shuffles:
        return ""
    own_order = "; it shuffles in an order of its own, so even one process sees other batches than the original did"
    if torch_seed_before(analysis, loader) is not None or not seeds_alike(analysis):
        return own_order
    if all(type(seed) is cst.Integer and seed.evaluated_value == 0 for seed in torch_seeds(analysis)):  # type: ignore[attr-defined]
        return own_order  # (the sampler's own seed)
    return (
        "; it shuffles from its own seed (0 unless given seed=), not from the program's torch seed: pass that "
        "seed as seed= (the same on every rank), or every seed of a sweep sees the same orders"
    )


def _seed_argument(analysis: ScriptAnalysis, loader: cst.Call, shuffle: str) -> str:
    """``, seed=<the program's torch seed>`` for a sampler that may shuffle, where the program seeds torch
    before the loader in reach of it (:func:`torch_seed_before`): the single-process loader drew its order
    from that seed, a DistributedSampler draws it from its own (0 unless given one). Empty otherwise."""
    if shuffle == "False":
        return ""
    seed = torch_seed_before(analysis, loader)
    if seed is None or (type(seed) is cst.Integer and seed.evaluated_value == 0):  # (0: the sampler's own default)
        return ""
    return f", seed={code_of(seed)}"


def _programs_own_sampler(analysis: ScriptAnalysis, loader: cst.Call) -> bool:
    """Whether the loader's ``sampler=`` holds an instance of a class of the program (an episodic sampler that
    composes each batch), not one of the library's (``WeightedRandomSampler`` draws samples one by one)."""
    sampler = given_loader_argument(loader, "sampler")
    if sampler is None:
        return False
    constructed = analysis.shared.constructed
    return any(origin in constructed for origin in analysis.origins(sampler.value))
