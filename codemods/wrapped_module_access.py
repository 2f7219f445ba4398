"""DDP008 wrapped-module-access."""

from __future__ import annotations

from typing import Iterator

import libcst as cst

from .analysis import WRAPPER_ATTRIBUTES, ScriptAnalysis, dotted_name
from .base import Change, Example, FixResult, Match, Options, Phase, Rule, Valid
from .edits import Edits, expression
from .runtime_calls import runtime_name


class WrappedModuleAccess(Rule):
    """Reach the model's own state and attributes through ``.module`` once it is wrapped.

    What it finds: ``state_dict()``, ``load_state_dict()`` and the model's own attributes and methods
    (``model.fc``, ``model.predict(...)``) used on a name that holds the DDP-wrapped model. Calls
    (``forward``), ``train()``, ``eval()``, ``parameters()``, ``to()``, ``zero_grad()`` and the like stay on
    the wrapper.

    Why it is a problem: the wrapper has no attribute ``fc`` (AttributeError), and its ``state_dict()``
    prefixes every key with ``module.``, so the checkpoint no longer loads into the plain model.

    What the fix does: inserts ``.module``: ``model.module.state_dict()``, ``model.module.fc``. Where the
    wrap happens only on some paths (``if args.distributed:``), it uses ``runtime.unwrap(model)`` instead,
    which returns the model itself when it was not wrapped.
    """

    code = "DDP008"
    name = "wrapped-module-access"
    phase = Phase.MODULE_ACCESS
    triggers = ("DistributedDataParallel", "DataParallel")
    examples = (
        Example(
            before="""\
from torch.nn.parallel import DistributedDataParallel

model = DistributedDataParallel(model, device_ids=None)
torch.save(model.state_dict(), "model.pt")
features = model.backbone(x)
model.train()
""",
            after="""\
from torch.nn.parallel import DistributedDataParallel

model = DistributedDataParallel(model, device_ids=None)
torch.save(model.module.state_dict(), "model.pt")
features = model.module.backbone(x)
model.train()
""",
        ),
        Example(
            before="""\
from torch.nn.parallel import DistributedDataParallel

if args.distributed:
    model = DistributedDataParallel(model, device_ids=None)
torch.save(model.state_dict(), "model.pt")
""",
            after="""\
from torch.nn.parallel import DistributedDataParallel
from ddp_migrate import runtime

if args.distributed:
    model = DistributedDataParallel(model, device_ids=None)
torch.save(runtime.unwrap(model).state_dict(), "model.pt")
""",
        ),
        Valid(
            """\
from torch.nn.parallel import DistributedDataParallel

net.load_state_dict(weights)
model = DistributedDataParallel(net, device_ids=None)
out = model(x)
torch.save(model.module.state_dict(), "model.pt")
"""
        ),
    )

    def matches(self, analysis: ScriptAnalysis) -> Iterator[Match]:
        if not analysis.wrap_calls:
            return
        for attribute in analysis.attributes:
            if attribute.attr.value in WRAPPER_ATTRIBUTES or dotted_name(attribute.value) is None:
                continue
            if isinstance(analysis.parent(attribute), cst.AssignTarget) and attribute.attr.value in ("module",):
                continue
            if analysis.wrapped_at(attribute.value) is not None:
                yield Match(attribute, f"{attribute.attr.value} is not on the DDP wrapper: use .module.{attribute.attr.value}")

    @staticmethod
    def _wrapped_only_sometimes(analysis: ScriptAnalysis, wrap: cst.Call, access: cst.CSTNode) -> bool:
        """Whether the wrap sits under a condition that does not also hold where the model is used."""
        function = analysis.enclosing_function(wrap)
        for ancestor in analysis.ancestors(wrap):
            if ancestor is function:
                break
            if isinstance(ancestor, cst.If) and not analysis.is_inside(access, ancestor):
                return True
        return False

    def fix(self, analysis: ScriptAnalysis, options: Options) -> FixResult | None:
        edits = Edits(analysis.module.code)
        for match in self.matches(analysis):
            attribute = match.node
            assert isinstance(attribute, cst.Attribute)
            wrap = analysis.wrapped_at(attribute.value)
            if wrap is not None and self._wrapped_only_sometimes(analysis, wrap, attribute):
                # ``if args.distributed: model = DDP(model)``: .module would fail on the other path.
                rt = runtime_name(analysis, edits)
                unwrapped = expression(f"{rt}.unwrap(MODEL)")
                assert isinstance(unwrapped, cst.Call)
                inner: cst.BaseExpression = unwrapped.with_changes(args=[cst.Arg(attribute.value)])
                how = "runtime.unwrap(...)"
            else:
                inner = cst.Attribute(value=attribute.value, attr=cst.Name("module"))
                how = ".module"
            edits.replace(attribute, lambda updated, inner=inner: updated.with_changes(value=inner))
            edits.changes.append(Change(self.code, analysis.line(attribute), f"{attribute.attr.value} reached through {how}"))
        return edits.apply(analysis.module) if edits else None
