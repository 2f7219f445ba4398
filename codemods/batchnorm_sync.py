"""DDP030 batchnorm-without-sync."""

from __future__ import annotations

from typing import Iterator

import libcst as cst

from . import names
from .analysis import ScriptAnalysis, dotted_name
from .analysis.batchnorm import batchnorm_builders, batchnorm_source
from .analysis.devices import trains_on_the_cpu_only
from .base import Change, Example, FixResult, FixSafety, Match, Note, Options, Phase, Rule, Severity, Valid
from .edits import Edits, code_of, expression, statement
from .runtime_calls import runtime_name


def wrapped_module(wrap: cst.Call) -> cst.Arg | None:
    """The model argument of a ``DistributedDataParallel(...)`` call (first positional, or ``module=``)."""
    for index, arg in enumerate(wrap.args):
        if arg.star:
            return None
        if (arg.keyword is None and index == 0) or (arg.keyword is not None and arg.keyword.value == "module"):
            return arg
    return None


class BatchNormWithoutSync(Rule):
    """Convert BatchNorm layers to SyncBatchNorm before wrapping the model in DDP.

    What it finds: a ``DistributedDataParallel(model)`` wrap of a model that has BatchNorm layers
    (``nn.BatchNorm1d`` / ``2d`` / ``3d`` under any import alias, in a model class of the program, in a
    class or helper function that class calls, such as ``conv_bn()`` returning ``nn.Sequential(conv,
    BatchNorm2d, ReLU)``, or in an ``nn.Sequential(...)`` built in place) when the model is not
    passed through ``SyncBatchNorm.convert_sync_batchnorm`` (or ``runtime.convert_sync_batchnorm``).

    Why it is a problem: each process normalises its activations with the mean and variance of its own
    shard of the batch, and the running statistics are those of rank 0's shards (DDP broadcasts buffers
    from rank 0). With the global batch split over N processes, each shard is N times smaller than the
    batch the model was tuned for, so statistics get noisier; with small per-process batches training
    degrades or diverges. (With large per-process batches, plain BatchNorm is often fine and faster.)

    What the fix does: ``model = runtime.convert_sync_batchnorm(model)`` right before the wrap, so
    BatchNorm computes its statistics over the whole global batch, as the original single-process script
    did. The runtime converts only when the model is on (or headed for) CUDA: SyncBatchNorm does not run
    on CPU, where the layers stay plain and only their running statistics are averaged across processes after
    each training forward of the DDP model (so evaluations and EMA copies agree between ranks). The finding is
    informational: drop the line if per-process statistics are what you want.

    Fix safety: on CUDA, BatchNorm's statistics (and running averages) are computed over the global
    batch with a collective per layer, not per process: the original single-process numbers, but slower,
    and a choice some scripts do not want; on CPU each process normalises with its share's statistics, and the
    running averages are the processes' mean (one collective per training forward).
    """

    code = "DDP030"
    name = "batchnorm-without-sync"
    fix_safety = FixSafety.UNSAFE
    phase = Phase.WRAPPING
    severity = Severity.INFO
    triggers = ("BatchNorm",)
    #: Every finding is a ``DistributedDataParallel(...)`` call (a DataParallel script is converted first).
    requires = ("DistributedDataParallel",)
    manual_fix = "convert the model with runtime.convert_sync_batchnorm(model) before wrapping it"
    examples = (
        Example(
            before="""\
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 16, 3)
        self.bn = nn.BatchNorm2d(16)

    def forward(self, x):
        return self.bn(self.conv(x))


model = Net().to(device)
model = DDP(model, device_ids=[local_rank])
""",
            after="""\
import torch.nn as nn
from ddp_migrate import runtime
from torch.nn.parallel import DistributedDataParallel as DDP


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 16, 3)
        self.bn = nn.BatchNorm2d(16)

    def forward(self, x):
        return self.bn(self.conv(x))


model = Net().to(device)
model = runtime.convert_sync_batchnorm(model)
model = DDP(model, device_ids=[local_rank])
""",
        ),
        Example(
            before="""\
from torch import nn
from torch.nn.parallel import DistributedDataParallel

ddp_model = DistributedDataParallel(nn.Sequential(nn.Linear(8, 8), nn.BatchNorm1d(8)).to(device))
""",
            after="""\
from ddp_migrate import runtime
from torch import nn
from torch.nn.parallel import DistributedDataParallel

ddp_model = DistributedDataParallel(
    runtime.convert_sync_batchnorm(
        nn.Sequential(nn.Linear(8, 8), nn.BatchNorm1d(8)).to(device)
    )
)
""",
        ),
        Example(
            before="""\
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


def conv_bn(channels_in, channels_out):
    return nn.Sequential(nn.Conv2d(channels_in, channels_out, 3), nn.BatchNorm2d(channels_out), nn.ReLU())


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = conv_bn(3, 16)


model = Net().to(device)
model = DDP(model, device_ids=[local_rank])
""",
            after="""\
import torch.nn as nn
from ddp_migrate import runtime
from torch.nn.parallel import DistributedDataParallel as DDP


def conv_bn(channels_in, channels_out):
    return nn.Sequential(nn.Conv2d(channels_in, channels_out, 3), nn.BatchNorm2d(channels_out), nn.ReLU())


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = conv_bn(3, 16)


model = Net().to(device)
model = runtime.convert_sync_batchnorm(model)
model = DDP(model, device_ids=[local_rank])
""",
        ),
        Valid(
            """\
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.bn = nn.BatchNorm1d(16)


model = nn.SyncBatchNorm.convert_sync_batchnorm(Net()).to(device)
model = DDP(model, device_ids=[local_rank])
plain = DDP(nn.Linear(4, 4))
"""
        ),
    )

    def matches(self, analysis: ScriptAnalysis) -> Iterator[Match]:
        wraps = analysis.calls_to(names.DISTRIBUTED_DATA_PARALLEL)
        if not wraps:
            return  # (before the builders: most modules wrap nothing, and finding them walks every class)
        builders = batchnorm_builders(analysis)
        if not builders and not analysis.calls_to(names.BATCH_NORM):
            return  # nothing in the program builds a BatchNorm layer
        for wrap in wraps:
            arg = wrapped_module(wrap)
            if arg is None:
                continue
            origins = analysis.origins(arg.value)
            if any(isinstance(o, cst.Call) and analysis.is_call_to(o, names.CONVERT_SYNC_BATCHNORM) for o in origins):
                continue
            sources = [s for s in (batchnorm_source(analysis, o, builders) for o in origins if o is not wrap) if s]
            if sources:
                yield Match(
                    wrap,
                    f"model with BatchNorm layers ({sorted(set(sources))[0]}) wrapped in DDP without SyncBatchNorm: "
                    "each process normalises with the statistics of its own shard of the batch",
                )

    def notes(self, analysis: ScriptAnalysis, options: Options) -> list[Note]:
        """Where the migration converted BatchNorm through the runtime: what a run on CPUs keeps (SyncBatchNorm
        does not run there), said once per conversion."""
        notes = []
        for call in analysis.calls_to(frozenset({names.runtime("convert_sync_batchnorm")})):
            where = "the program trains on the CPU, where" if trains_on_the_cpu_only(analysis) else "on a CPU run"
            notes.append(
                Note(
                    self.code,
                    analysis.line(call),
                    f"{where} SyncBatchNorm does not run: each process normalises with the statistics of its own share of "
                    "the batch (the numbers differ from the original's), and a share whose last batch holds one sample "
                    "fails in training (\"Expected more than 1 value per channel\"); pass drop_last=True to the training "
                    "DataLoader if it does; the running statistics are averaged across processes after each training "
                    "forward of the DDP model (the runtime does it where SyncBatchNorm does not run), so evaluations and "
                    "EMA copies agree between ranks",
                )
            )
        return notes

    def fix(self, analysis: ScriptAnalysis, options: Options) -> FixResult | None:
        edits = Edits(analysis)
        for match in self.matches_in(analysis):
            wrap = match.node
            assert isinstance(wrap, cst.Call)
            arg = wrapped_module(wrap)
            assert arg is not None
            rt = runtime_name(analysis, edits)
            target = dotted_name(arg.value)
            if target is not None:
                edits.insert_before(analysis.statement(wrap), statement(f"{target} = {rt}.convert_sync_batchnorm({target})"))
            else:
                edits.replace(arg.value, expression(f"{rt}.convert_sync_batchnorm({code_of(arg.value)})"))
            edits.changes.append(
                Change(self.code, analysis.line(wrap), "BatchNorm converted to SyncBatchNorm before the DDP wrap (on CUDA only)")
            )
        return edits.apply(analysis.module) if edits else None
