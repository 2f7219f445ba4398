"""DDP005 missing-distributed-sampler."""

from __future__ import annotations

from typing import Iterator

import libcst as cst

from .analysis import LOADER_PARAMETERS, ScriptAnalysis, loader_argument
from .base import BatchSizePolicy, Change, Example, FixResult, Match, Note, Options, Phase, Rule, Valid
from .edits import Edits, code_of, expression, statement
from .runtime_calls import imported_name, runtime_name

#: ``DataLoader``'s positional parameters, in order.
SAMPLER_MODULE, SAMPLER_CLASS = "torch.utils.data.distributed", "DistributedSampler"


class MissingDistributedSampler(Rule):
    """Give every training ``DataLoader`` a ``DistributedSampler``.

    What it finds: a ``DataLoader`` whose batches reach ``backward()`` (directly, or through a function of
    the same file that receives the loader) and that has no ``DistributedSampler``. Loaders whose loops
    never call ``backward()`` are evaluation loaders and are left alone: every process evaluates the whole
    set, so decisions such as ``if acc > best:`` agree on all ranks.

    Why it is a problem: without it every process iterates the whole data set in the same order; the
    world does N times the work and the gradient average is that of N identical batches.

    What the fix does: ``sampler=DistributedSampler(dataset, shuffle=<the loader's shuffle>)`` and
    ``shuffle`` removed from the loader (it is the sampler's job now). With the default ``global`` batch
    policy the batch size becomes ``runtime.per_process_batch_size(<original>)``, so N processes together
    still take the original batch per step (with ``shuffle=False``, the union of their batches is exactly
    the original batch); with ``--batch-size per-process`` it is kept and the report says the effective
    batch grows with the world size. Positional arguments after ``dataset`` become keywords.
    """

    code = "DDP005"
    name = "missing-distributed-sampler"
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
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler
from ddp_migrate import runtime

loader = DataLoader(train_set, batch_size=runtime.per_process_batch_size(64), sampler=DistributedSampler(train_set, shuffle=True))
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

loader = tud.DataLoader(train_set, 32, sampler=DistributedSampler(train_set, shuffle=True))
for x, y in loader:
    loss_fn(model(x), y).backward()
""",
            options=Options(batch_size=BatchSizePolicy.PER_PROCESS),
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
        for loader in analysis.loader_calls:
            if loader not in analysis.training_loaders or analysis.has_distributed_sampler(loader):
                continue
            dataset = loader_argument(loader, "dataset")
            if loader_argument(loader, "sampler") or loader_argument(loader, "batch_sampler"):
                yield Match(loader, "training DataLoader with its own sampler is not sharded across processes: shard it by hand", fixable=False)
            elif dataset is None or any(a.star for a in loader.args):
                yield Match(loader, "training DataLoader without a DistributedSampler (arguments too dynamic to rewrite)", fixable=False)
            else:
                yield Match(loader, "training DataLoader without a DistributedSampler: every process would see the whole data set")

    def fix(self, analysis: ScriptAnalysis, options: Options) -> FixResult | None:
        edits = Edits(analysis.module.code)
        for match in self.matches(analysis):
            loader = match.node
            assert isinstance(loader, cst.Call)
            if not match.fixable:
                stmt = analysis.statement(loader)
                edits.todo(stmt, "shard this training loader across processes (DistributedSampler) and call set_epoch")
                continue
            dataset = loader_argument(loader, "dataset")
            assert dataset is not None
            dataset_expr = dataset.value
            if not isinstance(dataset_expr, (cst.Name, cst.Attribute)):
                # The sampler needs the same dataset object: evaluate the expression once, into a new name.
                name = analysis.free_name("train_dataset", "train_set", "dataset")
                edits.insert_before(analysis.statement(loader), statement(f"{name} = {code_of(dataset_expr)}"))
                dataset_expr = cst.Name(name)
            edits.replace(loader, self._rewrite(analysis, edits, loader, dataset_expr, options))
            edits.changes.append(Change(self.code, analysis.line(loader), "DistributedSampler added to the training DataLoader"))
        return edits.apply(analysis.module) if edits else None

    def _rewrite(
        self, analysis: ScriptAnalysis, edits: Edits, loader: cst.Call, dataset: cst.BaseExpression, options: Options
    ) -> cst.Call:
        sampler_class = imported_name(analysis, edits, SAMPLER_MODULE, SAMPLER_CLASS)
        original_dataset = loader_argument(loader, "dataset")
        shuffle = loader_argument(loader, "shuffle")
        shuffle_code = code_of(shuffle.value) if shuffle is not None else "False"
        args: list[cst.Arg] = []
        keyword_from = None
        for index, arg in enumerate(loader.args):
            parameter = LOADER_PARAMETERS[index] if arg.keyword is None and index < len(LOADER_PARAMETERS) else None
            if arg is original_dataset:
                arg = arg.with_changes(value=dataset)
            if arg is shuffle:
                keyword_from = index  # positional arguments after a removed one must become keywords
                continue
            if arg.keyword is None and keyword_from is not None and parameter is not None:
                arg = arg.with_changes(keyword=cst.Name(parameter), equal=cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace("")))
            if arg is loader_argument(loader, "batch_size") and options.batch_size is BatchSizePolicy.GLOBAL:
                rt = runtime_name(analysis, edits)
                arg = arg.with_changes(value=expression(f"{rt}.per_process_batch_size({code_of(arg.value)})"))
            args.append(arg.with_changes(comma=cst.MaybeSentinel.DEFAULT))
        sampler = expression(f"{sampler_class}({code_of(dataset)}, shuffle={shuffle_code})")
        args.append(cst.Arg(sampler, keyword=cst.Name("sampler"), equal=cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace(""))))
        return loader.with_changes(args=args)

    def notes(self, analysis: ScriptAnalysis, options: Options) -> list[Note]:
        notes = []
        for loader in analysis.loader_calls:
            line = analysis.line(loader)
            if loader in analysis.evaluation_loaders and not analysis.has_distributed_sampler(loader):
                notes.append(
                    Note(
                        self.code,
                        line,
                        "evaluation DataLoader left unsharded: every process evaluates the whole set, which is correct "
                        "but slower; to shard it, add a DistributedSampler and combine the metrics with "
                        "runtime.weighted_mean(total, count)",
                    )
                )
            elif loader in analysis.training_loaders and analysis.has_distributed_sampler(loader):
                if loader_argument(loader, "batch_size") is None:
                    notes.append(Note(self.code, line, "no batch_size given: each process takes batches of 1"))
                elif options.batch_size is BatchSizePolicy.PER_PROCESS:
                    notes.append(
                        Note(self.code, line, "batch_size kept per process: the effective batch is batch_size × the number of processes")
                    )
        return notes
