"""DDP017 layer-added-after-wrap."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

import libcst as cst

from . import names
from .analysis import ScriptAnalysis, dotted_name, walk, wrapped_argument
from .base import Change, Example, FixResult, FixSafety, Match, Options, Phase, Rule, Valid
from .edits import Edits, code_of

TODO = "a layer is added to the model after the DDP wrap, which never sees it: build the whole model before wrapping it"


@dataclass(frozen=True)
class _Late:
    """A statement after the wrap that adds a layer, and whether it can move above the wrap."""

    wrap_statement: cst.SimpleStatementLine
    statement: cst.SimpleStatementLine
    target: cst.Attribute
    #: The wrapped model's name; ``None`` when the wrap builds it in place (``DataParallel(Net())``): the fix
    #: then builds it first under the wrapper's name.
    inner: str | None
    wrapped: cst.BaseExpression
    movable: bool


class LayerAddedAfterWrap(Rule):
    """Add or replace layers before wrapping the model, not after.

    What it finds: an assignment of a new layer (``nn.Linear(...)``, ``nn.Sequential(...)``, a model class
    of the file) to an attribute of a wrapped model after the wrap: ``model.module.fc = nn.Linear(512, 10)``
    or ``model.fc = ...`` after ``model = DistributedDataParallel(model)`` (or ``nn.DataParallel``, which
    DDP001 turns into DDP).

    Why it is a problem: DataParallel replicates the module on every forward pass, so a layer replaced after
    the wrap was used. DDP registers the parameters once, when it is built: a layer added later is trained
    by each process on its own shard, its gradients are never averaged, and the processes drift apart (or
    DDP fails on parameters it does not know).

    What the fix does: moves the statement right above the wrap, on the model itself
    (``model.fc = nn.Linear(512, 10)``), when nothing between the wrap and it uses the model (an optimizer
    built in between would otherwise see other parameters); a model the wrap builds in place
    (``model = nn.DataParallel(Net()).to(device)``) is built first, under the wrapper's name. Otherwise it
    leaves a TODO and a review line.

    Fix safety: the layer is created at the same point of the random number stream, so its initial weights
    are the original's.
    """

    code = "DDP017"
    name = "layer-added-after-wrap"
    fix_safety = FixSafety.SAFE
    #: Before DDP002 moves a device move above the wrap, so the layer is added first and moved with the model.
    phase = Phase.DEVICES
    triggers = ("DataParallel",)
    needs_names = (names.MODEL_WRAPPERS,)  # it acts only on model wraps
    manual_fix = "build the whole model (every layer replaced or added) before wrapping it in DDP"
    examples = (
        Example(
            before="""\
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

model = DDP(backbone, device_ids=None)
model.module.fc = nn.Linear(512, 10)
optimizer = SGD(model.parameters(), lr=0.1)
""",
            after="""\
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

backbone.fc = nn.Linear(512, 10)
model = DDP(backbone, device_ids=None)
optimizer = SGD(model.parameters(), lr=0.1)
""",
        ),
        # The wrap builds the model in place: the model is built first, under the wrapper's name.
        Example(
            before="""\
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

model = DDP(Backbone(), device_ids=None).to(device)
model.module.fc = nn.Linear(512, 10)
optimizer = SGD(model.parameters(), lr=0.1)
""",
            after="""\
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

model = Backbone()
model.fc = nn.Linear(512, 10)
model = DDP(model, device_ids=None).to(device)
optimizer = SGD(model.parameters(), lr=0.1)
""",
        ),
        Example(
            before="""\
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

model = DDP(model, device_ids=None)
optimizer = SGD(model.parameters(), lr=0.1)
model.module.fc = nn.Linear(512, 10)
""",
            after="""\
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

model = DDP(model, device_ids=None)
optimizer = SGD(model.parameters(), lr=0.1)
# TODO(ddp-migrate): a layer is added to the model after the DDP wrap, which never sees it: build the whole model before wrapping it
model.module.fc = nn.Linear(512, 10)
""",
        ),
        Valid(
            """\
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

model.fc = nn.Linear(512, 10)
model = DDP(model, device_ids=None)
model.module.hyp = {"lr": 0.1}
"""
        ),
    )

    def _late(self, analysis: ScriptAnalysis) -> Iterator[_Late]:
        for wrap in analysis.wrap_calls:
            inner = wrapped_argument(wrap)
            if inner is None:
                continue
            inner_name = dotted_name(inner)
            stmt = analysis.statement(wrap)
            if not isinstance(stmt, cst.SimpleStatementLine) or not isinstance(stmt.body[0], cst.Assign):
                continue
            assign = stmt.body[0]
            if len(assign.targets) != 1 or _under_device_moves(assign.value) is not wrap:
                continue
            wrapper = dotted_name(assign.targets[0].target)
            block = analysis.parent(stmt)
            siblings = list(getattr(block, "body", ()))
            if wrapper is None or stmt not in siblings:
                continue
            between: list[cst.BaseStatement] = []
            uses = {wrapper.split(".")[0]} | ({inner_name.split(".")[0]} if inner_name else set())
            holding: list[str] = [name for name in (wrapper, inner_name) if name is not None]
            for later in siblings[siblings.index(stmt) + 1 :]:
                # ``model = model.module`` (then ``model.fc = ...`` and a new wrap): the name no longer holds this wrap.
                holding = [name for name in holding if "." in name or not analysis.rebinds(later, name)]
                if not holding:
                    break
                target = _layer_target(analysis, later, holding)
                if target is not None:
                    movable = not any(
                        isinstance(n, cst.Name) and n.value in uses for s in between for n in walk(s)
                    )
                    yield _Late(stmt, later, target, inner_name, inner, movable)  # type: ignore[arg-type]
                between.append(later)

    def matches(self, analysis: ScriptAnalysis) -> Iterator[Match]:
        for late in self._late(analysis):
            yield Match(
                late.statement,
                f"`{code_of(late.target)}` gets a new layer after the model is wrapped: DDP never sees its parameters; build the model first",
                fixable=late.movable,
            )

    def fix(self, analysis: ScriptAnalysis, options: Options) -> FixResult | None:
        edits = Edits(analysis)
        for late in self._late(analysis):
            if not late.movable:
                edits.todo(late.statement, TODO)
                continue
            path = code_of(late.target).split(".")
            wrapper = dotted_name(late.wrap_statement.body[0].targets[0].target)  # type: ignore[union-attr, attr-defined]
            wrapper_parts = wrapper.split(".")  # type: ignore[union-attr]
            rest = path[len(wrapper_parts) :]
            if rest and rest[0] == "module":
                rest = rest[1:]
            inner = late.inner
            if inner is None:
                # ``model = DataParallel(Net())``: build the model under the wrapper's name, then wrap that name.
                inner = wrapper
                edits.insert_before(late.wrap_statement, cst.SimpleStatementLine([cst.Assign([cst.AssignTarget(cst.parse_expression(inner))], late.wrapped)]))  # type: ignore[arg-type]
                edits.replace(late.wrapped, cst.parse_expression(inner))  # type: ignore[arg-type]
            new_target = cst.parse_expression(".".join([inner, *rest]))  # type: ignore[list-item]
            small = late.statement.body[0]
            assert isinstance(small, cst.Assign)
            moved = late.statement.with_changes(
                body=[small.with_changes(targets=[cst.AssignTarget(new_target)])], leading_lines=[]
            )
            edits.remove(late.statement)
            edits.insert_before(late.wrap_statement, moved)
            edits.changes.append(Change(self.code, analysis.line(late.statement), "layer added before the model is wrapped"))
        return edits.apply(analysis.module) if edits else None


def _under_device_moves(value: cst.BaseExpression) -> cst.BaseExpression:
    """The expression a chain of device moves starts from (``DataParallel(net)`` of ``DataParallel(net).to(device)``)."""
    while isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute) and value.func.attr.value in ("to", "cuda"):
        value = value.func.value
    return value


def _layer_target(analysis: ScriptAnalysis, stmt: cst.BaseStatement, holding: list[str]) -> cst.Attribute | None:
    """The attribute ``stmt`` assigns a new layer to, when it is an attribute of a name still holding the wrapper
    (``model.fc``, ``model.module.fc``) or the wrapped model (``net.fc``): ``holding``."""
    if not isinstance(stmt, cst.SimpleStatementLine) or len(stmt.body) != 1 or not isinstance(stmt.body[0], cst.Assign):
        return None
    assign = stmt.body[0]
    if len(assign.targets) != 1 or not isinstance(assign.targets[0].target, cst.Attribute):
        return None
    target = assign.targets[0].target
    name = dotted_name(target)
    if name is None or not any(name.startswith(prefix + ".") for prefix in holding):
        return None
    if name.split(".")[-1] == "module" or not analysis.builds_layer(assign.value):
        return None
    return target
