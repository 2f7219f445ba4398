"""DDP042 requires-grad-after-wrap."""

from __future__ import annotations

from typing import Iterator

from . import names
from .analysis import ScriptAnalysis
from .analysis.trainable import after_a_wrap, requires_grad_changes
from .base import Example, Match, Phase, Rule, Severity, Valid
from .edits import code_of


class RequiresGradAfterWrap(Rule):
    """Freeze or unfreeze a model's parameters before DDP wraps it, not after.

    What it finds, in a program that wraps its model: ``p.requires_grad = ...`` or ``requires_grad_(...)`` on
    the model's parameters or submodules (``for p in model.backbone.parameters()``, a ``freeze_backbone``
    helper, ``model.head.requires_grad_(True)`` at some epoch) where it may run after the wrap.

    Why it is a problem: DDP decides, when it wraps the model, which parameters it synchronises: those that
    require gradients then. A parameter frozen after the wrap gets no gradient, and DDP fails at the next
    step ("Expected to have finished reduction in the prior iteration ..."). A parameter unfrozen after a
    wrap that saw it frozen trains on every rank, but its gradients are never averaged: the ranks' copies
    drift apart without an error. DataParallel copies the model at every step and never noticed.

    What a human must do: freeze before the wrap and leave it frozen; for a schedule that changes what
    trains (unfreeze at epoch N), wrap while every parameter that will ever train requires gradients and
    pass ``find_unused_parameters=True`` (frozen parameters then count as unused), or wrap the model again
    after each change (and build the optimizer on the new wrapper).
    """

    code = "DDP042"
    name = "requires-grad-after-wrap"
    phase = Phase.OUTPUT
    severity = Severity.ERROR
    #: Writes, not reads: ``x.requires_grad`` alone is in hundreds of torch's own files.
    triggers = (".requires_grad =", ".requires_grad=", "requires_grad_(")
    needs_names = (names.TRAINING_CODE_NAMES,)
    manual_fix = "change requires_grad before the wrap, or wrap with find_unused_parameters=True while every parameter trains"
    examples = (
        Example(
            before="""\
from torch.nn.parallel import DistributedDataParallel as DDP

model = DDP(Net().to(device), device_ids=[local_rank])
for epoch in range(10):
    if epoch == 3:
        for p in model.module.backbone.parameters():
            p.requires_grad = True
    train_one_epoch(model, loader)
    loss.backward()
""",
        ),
        Valid(
            """\
from torch.nn.parallel import DistributedDataParallel as DDP

net = Net().to(device)
for p in net.backbone.parameters():
    p.requires_grad = False
model = DDP(net, device_ids=[local_rank])
for x, y in loader:
    x.requires_grad_(True)
    loss_fn(model(x), y).backward()
"""
        ),
    )

    def matches(self, analysis: ScriptAnalysis) -> Iterator[Match]:
        if not analysis.program_wrap_calls:
            return
        for change in requires_grad_changes(analysis):
            found = after_a_wrap(analysis, change.node)
            if found is not None:
                owner, node = found
                # (another module's line numbers may be those of a version the migration has rewritten since)
                where = f"line {owner.line(node)}" if owner is analysis else f"in {owner.module_name}"
                through = "" if node is change.node else f" (through `{code_of(node)}`, {where})"
                yield Match(
                    change.statement,
                    f"requires_grad of {code_of(change.receiver)} changes where the model may already be wrapped{through}: DDP "
                    "synchronises only the parameters that required gradients when it wrapped the model (freezing "
                    "after it fails at the next step, unfreezing leaves those gradients unaveraged); change it before "
                    "the wrap, or wrap with find_unused_parameters=True while every parameter trains",
                    fixable=False,
                )
