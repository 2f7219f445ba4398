"""DDP038 unsynced-metric-logging."""

from __future__ import annotations

from typing import Iterator

from .analysis import ScriptAnalysis
from .analysis.per_rank import shard_values_shown
from .base import Example, Match, Phase, Rule, Severity, Valid


class UnsyncedMetricLogging(Rule):
    """Reduce a training metric across ranks before rank 0 prints or logs it.

    What it finds, in a script whose data is sharded with a ``DistributedSampler``: a value computed from
    this process's shard (the loss, ``loss.item()``, a running sum of them, an accuracy counted on the
    batches) shown by ``runtime.print0``, or by ``print`` / ``logging`` / ``wandb.log`` / a
    ``SummaryWriter`` under a rank-0 guard, without a reduction across ranks (``runtime.reduce_mean``,
    ``runtime.weighted_mean``, ``dist.all_reduce``) on the way.

    Why it is a problem: the number shown is rank 0's alone, computed on 1/N of the data. It is noisier
    than the original single-process number and differs from what the other ranks saw; comparing curves
    before and after the migration, or across world sizes, misleads. Training itself is not affected (the
    gradients are averaged by DDP) as long as the value decides nothing: a scheduler stepped on it, or an
    early stop tested on it, makes the ranks decide apart (DDP041, on by default).

    What a human must do: reduce the value on every rank before printing it, e.g.
    ``epoch_loss = runtime.reduce_mean(epoch_loss)`` (or ``runtime.weighted_mean(total, count)`` for an
    exact mean over uneven shards), called outside the rank-0 branch because it is a collective. For
    per-step logging where the extra collective is not worth it, keep rank 0's number and label it as such.

    The rule is off by default (``--select DDP038`` turns it on): printing rank 0's loss is what the PyTorch
    DDP tutorial does and what every migration writes, so it would fire on nearly every migrated script.
    """

    code = "DDP038"
    name = "unsynced-metric-logging"
    phase = Phase.OUTPUT
    severity = Severity.INFO
    # A sharded loader, or draws a program seeds from the rank (``torch.manual_seed(1337 + rank)``).
    triggers = ("DistributedSampler", "manual_seed")
    manual_fix = "reduce the value across ranks (runtime.reduce_mean) on every rank before printing it on rank 0"
    enabled_by_default = False
    examples = (
        Example(
            before="""\
import torch.distributed as dist
from torch.utils.data import DataLoader, DistributedSampler

loader = DataLoader(train_set, batch_size=32, sampler=DistributedSampler(train_set))
for epoch in range(epochs):
    epoch_loss = 0.0
    for x, y in loader:
        loss = criterion(model(x), y)
        loss.backward()
        epoch_loss += loss.item()
    if dist.get_rank() == 0:
        print(f"epoch {epoch}: loss {epoch_loss / len(loader):.4f}")
""",
        ),
        Example(
            before="""\
from ddp_migrate import runtime
from torch.utils.data import DataLoader, DistributedSampler

loader = DataLoader(train_set, batch_size=32, sampler=DistributedSampler(train_set))
for step, (x, y) in enumerate(loader):
    loss = criterion(model(x), y)
    loss.backward()
    runtime.print0(f"step {step}: loss {loss.item():.4f}")
""",
        ),
        Valid(
            """\
from ddp_migrate import runtime
from torch.utils.data import DataLoader, DistributedSampler

loader = DataLoader(train_set, batch_size=32, sampler=DistributedSampler(train_set))
for epoch in range(epochs):
    epoch_loss = 0.0
    for step, (x, y) in enumerate(loader):
        loss = criterion(model(x), y)
        loss.backward()
        epoch_loss += loss.item()
        runtime.print0(f"epoch {epoch} step {step}")
    epoch_loss = runtime.reduce_mean(epoch_loss)
    runtime.print0(f"epoch {epoch}: loss {epoch_loss / len(loader):.4f}")
"""
        ),
    )

    def matches(self, analysis: ScriptAnalysis) -> Iterator[Match]:
        for call, what, shown in shard_values_shown(analysis):
            yield Match(
                call,
                f"{what} shows {shown}, computed on this rank's shard of the data only: "
                "reduce it across ranks first (runtime.reduce_mean / weighted_mean)",
                fixable=False,
            )
