"""DDP001 data-parallel."""

from __future__ import annotations

import re

from typing import Iterator

import libcst as cst

from . import names
from .analysis import ScriptAnalysis, call_method_name, dotted_name, walk, wrapped_argument
from .analysis.ranks import rank_facts
from .analysis.script import SELF_RETURNING_METHODS
from .analysis.trainable import SkippedLayer, skipped_in_some_steps
from .base import (
    Change,
    Example,
    FixResult,
    FixSafety,
    Match,
    Note,
    Options,
    Phase,
    Rule,
    Valid,
)
from .edits import Edits, code_of, statement
from .runtime_calls import ddp_call, find_unused_parameters_argument


class DataParallel(Rule):
    """Replace ``nn.DataParallel`` with ``DistributedDataParallel``, one process per device.

    What it finds: ``nn.DataParallel(model)`` under any import alias (``torch.nn.DataParallel``,
    ``from torch.nn import DataParallel as DP``); its functional form ``nn.parallel.data_parallel(module,
    input, device_ids)`` (DCGAN's ``forward``) is reported for review, and so is a DataParallel of the program's own
    (``class ListDataParallel(nn.DataParallel)`` with its own ``scatter``), whose overrides no rewrite can carry
    over (nothing else wraps it again).

    Why it is a problem: DataParallel is one process driving several GPUs from threads: the GIL serialises
    it, GPU 0 gathers every output and scatters every gradient, and it cannot span machines. Under
    ``torchrun`` every process would wrap the model in its own DataParallel and no gradient would ever be
    averaged across processes.

    What the fix does: ``DistributedDataParallel(model, device_ids=runtime.device_ids())``, where the
    original wrapped. A wrap that sat under a condition (``if torch.cuda.device_count() > 1:``) moves out of
    it: every process must wrap, CPU included, or the processes stop agreeing on the weights. DataParallel's
    ``device_ids`` and ``output_device`` are dropped (each process uses its own device); ``dim`` is kept.
    A condition with other branches (``if torch.cuda.device_count() > 1: ... elif use_cuda: ...``) keeps
    them, and the wrap goes after the whole chain, so the model is wrapped on every path.

    A DataParallel in the non-distributed branch of a script that already has a distributed path
    (``if args.distributed: ... DistributedDataParallel ... else: nn.DataParallel(model)``, as in
    PyTorch's ImageNet example) is left alone: that branch runs without a process group, where DDP would
    fail, and DDP011 makes a torchrun launch take the distributed branch.

    Fix safety: a wrap under a condition (``if torch.cuda.device_count() > 1:``) moves out of it, so the
    model is wrapped on every path, CPU and one GPU included; DataParallel's ``device_ids`` and
    ``output_device`` are dropped.
    """

    code = "DDP001"
    name = "data-parallel"
    fix_safety = FixSafety.UNSAFE
    phase = Phase.WRAPPING
    triggers = ("DataParallel", "data_parallel")
    needs_names = (names.DATA_PARALLEL | names.FUNCTIONAL_DATA_PARALLEL,)  # it acts only on model wraps
    examples = (
        Example(
            before="""\
import torch.nn as nn

model = Net().to(device)
model = nn.DataParallel(model)
""",
            after="""\
import torch.nn as nn
from ddp_migrate import runtime
from torch.nn.parallel import DistributedDataParallel

model = Net().to(device)
model = DistributedDataParallel(model, device_ids=runtime.device_ids())
""",
        ),
        Example(
            before="""\
import torch
from torch.nn import DataParallel as DP

model = Net().to(device)
if torch.cuda.device_count() > 1:
    print("using", torch.cuda.device_count(), "GPUs")
    model = DP(model, device_ids=[0, 1])
""",
            after="""\
import torch
from ddp_migrate import runtime
from torch.nn.parallel import DistributedDataParallel

model = Net().to(device)
if torch.cuda.device_count() > 1:
    print("using", torch.cuda.device_count(), "GPUs")
model = DistributedDataParallel(model, device_ids=runtime.device_ids())
""",
        ),
        Example(
            before="""\
import torch

model = torch.nn.DataParallel(net) if torch.cuda.device_count() > 1 else net
""",
            after="""\
import torch
from ddp_migrate import runtime
from torch.nn.parallel import DistributedDataParallel

model = DistributedDataParallel(net, device_ids=runtime.device_ids())
""",
        ),
        Example(
            before="""\
import torch

model = torch.nn.DataParallel(net).cuda() if torch.cuda.is_available() else net
""",
            after="""\
import torch
from ddp_migrate import runtime
from torch.nn.parallel import DistributedDataParallel

model = DistributedDataParallel(net, device_ids=runtime.device_ids()).cuda()
""",
        ),
        Example(
            before="""\
import torch

model = torch.nn.DataParallel(net).to(device) if args.multi_gpu else net.to(device)
""",
            after="""\
import torch
from ddp_migrate import runtime
from torch.nn.parallel import DistributedDataParallel

model = DistributedDataParallel(net, device_ids=runtime.device_ids()).to(device)
""",
        ),
        Example(
            before="""\
import torch
import torch.nn as nn

if torch.cuda.device_count() > 1:
    model = nn.DataParallel(model)
elif use_cuda:
    model = model.cuda()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
""",
            after="""\
import torch
import torch.nn as nn
from ddp_migrate import runtime
from torch.nn.parallel import DistributedDataParallel

if torch.cuda.device_count() > 1:
    pass
elif use_cuda:
    model = model.cuda()
model = DistributedDataParallel(model, device_ids=runtime.device_ids())
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
""",
        ),
        # A wrap inside a lambda: the models it wraps are the program's to wrap where they train (reviewed).
        Example(
            before="""\
import torch.nn as nn

parallel = lambda m: nn.DataParallel(m).to(device) if many_gpus else m
model = parallel(Net())
""",
            after=None,
        ),
        Valid(
            """\
from torch.nn.parallel import DistributedDataParallel as DDP

model = DDP(model, device_ids=[local_rank])
"""
        ),
        Valid(
            """\
import torch

if args.distributed:
    model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[args.gpu])
else:
    model = torch.nn.DataParallel(model).cuda()
"""
        ),
    )

    def matches(self, analysis: ScriptAnalysis) -> Iterator[Match]:
        for call in analysis.calls_to(names.FUNCTIONAL_DATA_PARALLEL):
            yield Match(
                call,
                "nn.parallel.data_parallel(...) spreads one forward over several GPUs from one process: under torchrun "
                "each process has a GPU of its own, and this call would make each process use several; call the "
                "module itself (DistributedDataParallel wraps the model)",
                fixable=False,
            )
        for call in (c for c in analysis.calls if analysis.builds_a_data_parallel_subclass(c)) if analysis.program_data_parallel_classes else ():
            if analysis.program_only_infers:
                continue
            built = analysis.shared.constructed[call]
            yield Match(
                call,
                f"{built.name.value} is a DataParallel of the program's own (derived from nn.DataParallel): under torchrun "
                "each process would run it over every GPU of its node; wrap the model in DistributedDataParallel "
                f"instead, and move what {built.name.value} overrides (scatter, gather, forward) into the model or the "
                "loop (the migration cannot carry a subclass's methods over)",
                fixable=False,
            )
        for call in analysis.calls_to(names.DATA_PARALLEL):
            if self._non_distributed_branch(analysis, call) or analysis.program_only_infers or call in analysis.untrained_wraps:
                continue  # (a prediction script, a copy never trained: DataParallel serves it, see notes)
            if _in_a_lambda(analysis, call):
                yield Match(
                    call,
                    "nn.DataParallel inside a lambda: the migration cannot follow the models it wraps (a DDP wrap here "
                    "would be wrapped again where the model trains, and a model only evaluated needs none); wrap each "
                    "trained model in DistributedDataParallel where it is built, and keep the module. keys of its "
                    "checkpoints (runtime.unwrap(model).state_dict(prefix=\"module.\"))",
                    fixable=False,
                )
                continue
            frozen = _frozen_before(analysis, call)
            if frozen is not None:
                yield Match(
                    call,
                    f"nn.DataParallel of `{frozen}`, whose parameters are all frozen before it (a teacher, a "
                    "feature extractor): DistributedDataParallel refuses a model with nothing to train; do not "
                    "wrap it (move it to runtime.device()) and read it without .module",
                    fixable=False,
                )
                continue
            yield Match(
                call,
                "nn.DataParallel: use DistributedDataParallel with one process per device (launched by torchrun)",
                fixable=wrapped_argument(call) is not None,
            )

    def fix(self, analysis: ScriptAnalysis, options: Options) -> FixResult | None:
        edits = Edits(analysis)
        hoisted: dict[cst.If, set[str]] = {}  # per if/elif/else chain, the wraps moved after it
        plans: list[tuple[cst.Call, cst.BaseExpression, cst.Call, SkippedLayer | None]] = []
        for match in self.matches_in(analysis):
            call = match.node
            assert isinstance(call, cst.Call)
            model = wrapped_argument(call)
            if model is None or not match.fixable:
                continue
            kept = [a for a in call.args if a.keyword is not None and a.keyword.value == "dim"]
            skipped = skipped_in_some_steps(analysis, model)
            if skipped is not None:
                kept.append(find_unused_parameters_argument())  # DataParallel never minded a skipped layer
            plans.append((call, model, ddp_call(analysis, edits, model, kept), skipped))
        # Every wrap of a statement moves with it at once (``G, D = DP(G), DP(D)`` under a condition).
        replacements = {call: new_call for call, _, new_call, _ in plans}
        for call, model, new_call, skipped in plans:
            parent = analysis.parent(call)
            asking = _wrapper_conjuncts(analysis, parent.test) if isinstance(parent, cst.IfExp) else []
            if asking and _may_hold_a_wrap_already(analysis, call, model):
                # ``DP(model) if not isinstance(model, DP) else model`` after a wrap of the same model (``if many_gpus:
                # model = DP(model)``, which every process now takes): the test keeps asking, of the new wrapper, and
                # only that (``device_count() > 1 and not isinstance(...)`` would leave one GPU unwrapped).
                test = asking[0]
                for tested_class in _wrapper_classes_tested(analysis, test):
                    test = test.deep_replace(tested_class, new_call.func)  # type: ignore[assignment]
                edits.replace(call, new_call)
                edits.replace(parent.test, test)  # type: ignore[union-attr]
            elif isinstance(parent, cst.IfExp) and code_of(model).strip() in (
                code_of(parent.orelse).strip(),
                code_of(parent.body).strip(),
            ):
                # ``DP(model) if many_gpus else model``: every process wraps.
                edits.replace(parent, new_call)
            elif (chained := _conditional_wrap(analysis, call, model)) is not None:
                # ``DP(net).cuda() if torch.cuda.is_available() else net``: every process wraps (on a CPU
                # machine the other side left the model unwrapped while the loader was sharded).
                ifexp, side = chained
                edits.replace(call, new_call)
                edits.replace(ifexp, lambda updated, side=side: getattr(updated, side))
            elif not self._hoist_out_of_condition(analysis, edits, call, new_call, hoisted, replacements):
                edits.replace(call, new_call)
            message = "nn.DataParallel replaced by DistributedDataParallel"
            if skipped is not None:
                message += f", with find_unused_parameters=True: {skipped.why}"
            edits.changes.append(Change(self.code, analysis.line(call), message))
        for qualified in names.DATA_PARALLEL:
            local = analysis.local_name_for(qualified)
            if local:
                module, _, attr = qualified.rpartition(".")
                edits.drop_unused_imports()
        return edits.apply(analysis.module) if edits else None

    def notes(self, analysis: ScriptAnalysis, options: Options) -> list[Note]:
        return [
            Note(
                self.code,
                analysis.line(call),
                "nn.DataParallel kept in the script's non-distributed branch (one process, no process group); "
                "torchrun launches take the DistributedDataParallel branch",
            )
            for call in analysis.calls_to(names.DATA_PARALLEL)
            if self._non_distributed_branch(analysis, call) and not analysis.program_only_infers
        ] + [
            Note(
                self.code,
                analysis.line(call),
                "nn.DataParallel kept: the program only infers (no backward(), no optimizer; eval() or no_grad()), "
                "so it needs no process per GPU; run it with python, not torchrun (DistributedDataParallel would "
                "need a process group and a gradient to average)",
            )
            for call in analysis.calls_to(names.DATA_PARALLEL)
            if analysis.program_only_infers
        ] + [
            Note(
                self.code,
                analysis.line(call),
                "nn.DataParallel kept: the program never trains the model it wraps (no forward, no optimizer; it only "
                "loads or hands out weights), so it needs no DistributedDataParallel, which would want a model on this "
                "process's device",
            )
            for call in analysis.untrained_wraps
            if not analysis.program_only_infers
        ]

    @staticmethod
    def _chain(analysis: ScriptAnalysis, stmt: cst.CSTNode) -> tuple[cst.If | None, cst.If | None]:
        """The ``if`` whose branch holds the statement directly, and the first ``if`` of its elif chain."""
        block = analysis.parent(stmt)
        owner = analysis.parent(block) if block is not None else None
        if isinstance(owner, cst.Else):
            owner = analysis.parent(owner)
        if not isinstance(owner, cst.If) or owner is analysis.main_guard:
            return None, None  # (``if __name__ == "__main__":`` runs every time: no condition on the wrap)
        top = owner
        while isinstance(analysis.parent(top), cst.If) and analysis.parent(top).orelse is top:  # type: ignore[union-attr]
            top = analysis.parent(top)  # type: ignore[assignment]
        return owner, top

    def _non_distributed_branch(self, analysis: ScriptAnalysis, call: cst.Call) -> bool:
        """Whether the DataParallel is the program's non-distributed path: it sits in one branch of a
        condition whose other branch wraps in DDP, or sits under a condition and the model it wraps is
        wrapped in DDP after it in the same function (``if n_gpu > 1: model = DP(model)`` then ``if
        args.local_rank != -1: model = DDP(model)``, the shape of many research scripts)."""
        stmt = analysis.statement(call)
        owner, top = self._chain(analysis, stmt)
        if top is None:
            return False
        wraps = analysis.calls_to(names.DISTRIBUTED_DATA_PARALLEL)
        if any(analysis.is_inside(wrap, top) and not analysis.is_inside(call, analysis.statement(wrap)) for wrap in wraps):
            return True
        targets = {dotted_name(t.target) for t in stmt.body[0].targets} if self._assigns(stmt) else set()  # type: ignore[attr-defined]
        scope = analysis.scope_of(call)
        return any(
            analysis.scope_of(wrap) is scope
            and not analysis.is_inside(wrap, top)
            and analysis.comes_before(top, wrap)
            and (argument := wrapped_argument(wrap)) is not None
            and dotted_name(_moved(argument)) in targets - {None}  # ``DDP(model.to(device))`` too
            for wrap in wraps
        )

    @staticmethod
    def _assigns(stmt: cst.CSTNode) -> bool:
        """Whether a statement is one plain assignment (``model = DP(model)``)."""
        return isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 and isinstance(stmt.body[0], cst.Assign)

    def _hoist_out_of_condition(
        self,
        analysis: ScriptAnalysis,
        edits: Edits,
        call: cst.Call,
        new_call: cst.Call,
        hoisted: dict[cst.If, set[str]],
        replacements: dict[cst.Call, cst.Call],
    ) -> bool:
        """Move ``if <cond>: model = DP(model)`` out of its condition (after its whole elif/else chain), so
        every process wraps. Where several branches wrap alike (``if many_gpus: DP(model, device_ids=...)
        else: DP(model)``), one wrap follows the chain (``hoisted``: the wraps already moved after each
        chain); a chain whose every branch was such a wrap is replaced by it. A statement moves once, with
        every wrap in it (``replacements``: each wrap's DDP call)."""
        stmt = analysis.statement(call)
        block = analysis.parent(stmt)
        owner, top = self._chain(analysis, stmt)
        if owner is None or top is None or not isinstance(block, cst.IndentedBlock):
            return False
        tests = []
        node: cst.CSTNode | None = top
        while isinstance(node, cst.If):
            tests.append(node.test)
            node = node.orelse
        if any(rank_facts(analysis).mentions_rank(test) for test in tests):
            return False
        if any(analysis.wrapper_tested(test) is not None for test in tests):
            return False  # (``if isinstance(module, nn.DataParallel): copy = DP(copy)``: the other branch has no wrapper)
        model = wrapped_argument(call)
        target = stmt.body[0].targets[0].target if self._assigns(stmt) and len(stmt.body[0].targets) == 1 else None  # type: ignore[attr-defined]
        if (
            target is not None
            and model is not None
            and _chained_on(analysis, call, stmt.body[0].value)  # type: ignore[attr-defined]
            and dotted_name(target) is not None
            and code_of(model).strip() != code_of(target).strip()
        ):
            # ``if wide: model = DP(Sequential(...)) else: model = DP(Linear(...)).to(device)``: each branch still
            # builds its own model (``model = Sequential(...)``, ``model = Linear(...).to(device)``); one wrap of
            # ``model`` follows the chain.
            edits.replace(call, model)
            wrap = cst.SimpleStatementLine([cst.Assign([cst.AssignTarget(target)], new_call.with_changes(args=[new_call.args[0].with_changes(value=target), *new_call.args[1:]]))])
            if not _already_hoisted(hoisted, top, wrap):
                edits.insert_after(top, wrap)
            return True
        moved = stmt.visit(_Swapped(replacements))
        assert isinstance(moved, cst.BaseStatement)
        moved = moved.with_changes(leading_lines=[])
        again = _already_hoisted(hoisted, top, moved)
        rest = [s for s in block.body if s is not stmt and not _assigns_wraps_only(s, replacements)]
        if rest:
            edits.remove(stmt)
        elif top is owner and owner.orelse is None:
            # Every statement under the test is a wrap that moves out: the test goes with them.
            if block.body[0] is stmt:
                moved = moved.with_changes(leading_lines=owner.leading_lines)
            if len(block.body) == 1:
                edits.replace(owner, moved)
            else:
                edits.remove(owner)
                if not again:
                    edits.insert_after(top, moved)
            return True
        elif self._only_wraps(analysis, top):
            if not again:
                edits.replace(top, moved.with_changes(leading_lines=top.leading_lines))
            return True
        elif block.body[0] is stmt:
            edits.replace(stmt, statement("pass"))  # (the branch's other wraps go too: one ``pass`` is left)
        else:
            edits.remove(stmt)
        if not again:
            edits.insert_after(top, moved)
        return True

    @staticmethod
    def _only_wraps(analysis: ScriptAnalysis, top: cst.If) -> bool:
        """Whether every branch of an if/elif/else chain, ``else`` included, is one statement that wraps in
        ``DataParallel`` (the chain only chooses how: every process wraps the same way in DDP)."""
        branches: list[cst.BaseSuite] = []
        node: cst.If | cst.Else | None = top
        while isinstance(node, cst.If):
            branches.append(node.body)
            node = node.orelse  # type: ignore[assignment]
        if node is None:
            return False
        branches.append(node.body)
        shapes = set()
        for body in branches:
            if not isinstance(body, cst.IndentedBlock) or len(body.body) != 1:
                return False
            wraps = [c for c in walk(body.body[0]) if isinstance(c, cst.Call) and analysis.is_call_to(c, names.DATA_PARALLEL)]
            if len(wraps) != 1 or wrapped_argument(wraps[0]) is None:
                return False
            # The same model into the same place (``DP(Sequential(...))`` in one branch and ``DP(Linear(...))``
            # in the other choose different models: not one wrap).
            outside = body.body[0].deep_replace(wraps[0], cst.Name("WRAP"))
            # (``DP(model).cuda()`` beside ``DP(model)``: the move to the device is the wrap's business under DDP)
            shape = _DEVICE_CHAIN.sub("WRAP", code_of(outside).strip())
            shapes.add((shape, code_of(wrapped_argument(wraps[0])).strip()))  # type: ignore[arg-type]
        return len(shapes) == 1


#: A wrap with device moves chained on it (``WRAP.cuda()``, ``WRAP.to(device)``), in the code of a branch.
_DEVICE_CHAIN = re.compile(r"WRAP(?:\.(?:cuda|to)\((?:[^()]|\([^()]*\))*\))+")


def _chained_on(analysis: ScriptAnalysis, call: cst.Call, value: cst.BaseExpression) -> bool:
    """Whether an assigned value is the call, or method calls chained on it (``DP(net).to(device)``,
    ``DP(net).cuda().half()``): what the statement binds is the wrap."""
    node: cst.CSTNode = call
    while node is not value:
        parent = analysis.parent(node)
        if type(parent) is cst.Attribute and parent.value is node:  # type: ignore[attr-defined]
            node = parent
            continue
        if type(parent) is cst.Call and parent.func is node and type(node) is cst.Attribute:  # type: ignore[attr-defined]
            node = parent
            continue
        return False
    return True


def _assigns_wraps_only(stmt: cst.BaseStatement, replacements: dict[cst.Call, cst.Call]) -> bool:
    """Whether a statement only wraps what its targets already hold, so it moves out of its ``if`` whole
    (``model = DP(model)``, ``G, D = DP(G), DP(D)``); ``netG = DP(Generator())`` and ``model = DP(model.cuda())``
    leave the model's own set-up in the branch."""
    if not isinstance(stmt, cst.SimpleStatementLine) or len(stmt.body) != 1 or not isinstance(stmt.body[0], cst.Assign):
        return False
    assign = stmt.body[0]
    if isinstance(assign.value, (cst.Tuple, cst.List)):
        return all(e.value in replacements for e in assign.value.elements)
    if assign.value not in replacements or len(assign.targets) != 1:
        return False
    inner = wrapped_argument(assign.value)  # type: ignore[arg-type]
    return inner is not None and code_of(inner).strip() == code_of(assign.targets[0].target).strip()


class _Swapped(cst.CSTTransformer):
    """Puts each node of ``replacements`` in place of the original node, in one pass."""

    def __init__(self, replacements: dict[cst.Call, cst.Call]) -> None:
        super().__init__()
        self.replacements = replacements

    def on_leave(self, original_node: cst.CSTNode, updated_node: cst.CSTNode) -> cst.CSTNode:  # type: ignore[override]
        """The replacement of the original node, else the node as updated below it."""
        return self.replacements.get(original_node, updated_node)  # type: ignore[call-overload]


def _already_hoisted(hoisted: dict[cst.If, set[str]], top: cst.If, wrap: cst.BaseStatement) -> bool:
    """Whether a wrap of the same model already follows the chain (recording it if not): one wrap per chain and
    model, however each branch spelled it (``model = DP(model).cuda()`` beside ``else: model = DP(model)``: two
    wraps, one stacked on the other, crashed at the first ``model.module`` of the program)."""
    done = hoisted.setdefault(top, set())
    assigns = isinstance(wrap, cst.SimpleStatementLine) and len(wrap.body) == 1 and isinstance(wrap.body[0], cst.Assign)
    text = code_of(wrap.body[0].targets[0].target).strip() if assigns and len(wrap.body[0].targets) == 1 else code_of(wrap).strip()  # type: ignore[attr-defined]
    if text in done:
        return True
    done.add(text)
    return False


def _conditional_wrap(analysis: ScriptAnalysis, call: cst.Call, model: cst.BaseExpression) -> tuple[cst.IfExp, str] | None:
    """``DP(net).cuda() if cond else net`` (either way round): the conditional expression and the side that
    holds the wrap, when that side is the wrap with method calls chained on it (``.cuda()``, ``.to(dev)``) and
    the other side is the model itself."""
    node: cst.CSTNode = call
    while True:
        parent = analysis.parent(node)
        if isinstance(parent, cst.Attribute) and parent.value is node:
            grand = analysis.parent(parent)
            if not (isinstance(grand, cst.Call) and grand.func is parent):
                return None
            node = grand
            continue
        break
    if node is call and isinstance(parent, cst.IfExp):
        pass  # ``DP(net) if cond else net.to(device)``: the other side moves the model only
    elif node is call or not isinstance(parent, cst.IfExp):
        return None
    if any(isinstance(a, cst.Lambda) for a in analysis.ancestors(parent)):
        return None  # (``wrap = lambda m: DP(m).cuda() if ... else m``: the wrap happens where it is called)
    side, other = ("body", parent.orelse) if parent.body is node else ("orelse", parent.body)
    if code_of(_moved(other)).strip() != code_of(_moved(model)).strip():
        return None
    return parent, side


#: Methods that move or cast a model and hand it back (``net.to(device)``, ``net.cuda()``): the analysis's
#: self-returning methods, less the mode switches.
_MOVES = SELF_RETURNING_METHODS - {"train", "eval"}


def _wrapper_conjuncts(analysis: ScriptAnalysis, test: cst.BaseExpression) -> list[cst.BaseExpression]:
    """The parts of a test joined by ``and`` that ask whether a value is a DataParallel (``not isinstance(model,
    nn.DataParallel)`` of ``torch.cuda.device_count() > 1 and not isinstance(model, nn.DataParallel)``)."""
    if isinstance(test, cst.BooleanOperation) and isinstance(test.operator, cst.And):
        return _wrapper_conjuncts(analysis, test.left) + _wrapper_conjuncts(analysis, test.right)
    return [test] if _wrapper_classes_tested(analysis, test) else []


def _wrapper_classes_tested(analysis: ScriptAnalysis, test: cst.BaseExpression) -> list[cst.BaseExpression]:
    """The ``DataParallel`` classes a test asks a value's type of (``nn.DataParallel`` of ``not isinstance(model,
    nn.DataParallel)``, of ``isinstance(m, (nn.DataParallel, DDP))``)."""
    found = []
    for node in walk(test):
        if type(node) is cst.Call and dotted_name(node.func) == "isinstance" and len(node.args) == 2:  # type: ignore[attr-defined]
            second = node.args[1].value  # type: ignore[attr-defined]
            classes = [e.value for e in second.elements] if type(second) is cst.Tuple else [second]  # type: ignore[attr-defined]
            found.extend(c for c in classes if analysis.qualified_names(c) & names.DATA_PARALLEL)
    return found


def _may_hold_a_wrap_already(analysis: ScriptAnalysis, call: cst.Call, model: cst.BaseExpression) -> bool:
    """Whether the model a wrap takes may already be a wrapper there: a parameter of its function (a caller may
    hand a wrapped model), or a name another wrap of the program may have set."""
    name = dotted_name(model)
    function = analysis.enclosing_function(call)
    if name is not None and function is not None and "." not in name and analysis.is_parameter(function, name):
        return True
    return any(
        origin is not call and type(origin) is cst.Call and analysis.is_call_to(origin, names.DATA_PARALLEL | names.DISTRIBUTED_DATA_PARALLEL)  # type: ignore[arg-type]
        for origin in analysis.origins(model)
    )


def _in_a_lambda(analysis: ScriptAnalysis, call: cst.Call) -> bool:
    """Whether the call is inside a lambda (in the statement that holds it)."""
    stmt = analysis.statement(call)
    return any(isinstance(a, cst.Lambda) for a in analysis.ancestors(call) if analysis.is_inside(a, stmt))


def _moved(expr: cst.BaseExpression) -> cst.BaseExpression:
    """The model under the moves chained on it (``net`` of ``net.cuda().float()``)."""
    while isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute) and expr.func.attr.value in _MOVES:
        expr = expr.func.value
    return expr


def _frozen_before(analysis: ScriptAnalysis, call: cst.Call) -> str | None:
    """The model a DataParallel wraps when all its parameters are frozen before the wrap, in the same
    function: ``teacher.requires_grad_(False)`` or ``for p in teacher.parameters(): p.requires_grad = False``
    (DDP raises "DistributedDataParallel is not needed when a module doesn't have any parameter that
    requires a gradient", where DataParallel wrapped it without a word)."""
    model = wrapped_argument(call)
    name = dotted_name(_moved(model)) if model is not None else None  # (``DataParallel(teacher.to(device))``)
    if name is None:
        return None
    function = analysis.enclosing_function(call)

    def before(node: cst.CSTNode) -> bool:
        return analysis.enclosing_function(node) is function and analysis.comes_before(node, call)

    for change in analysis.method_calls("requires_grad_"):
        if before(change) and dotted_name(change.func.value) == name and change.args and _is_false(change.args[0].value):  # type: ignore[attr-defined]
            return name
    for assign in analysis.assignments:
        if not (isinstance(assign, cst.Assign) and before(assign) and _is_false(assign.value)):
            continue
        loop = analysis.nearest_loop(assign)
        source = loop.iter if isinstance(loop, cst.For) else None
        if not (isinstance(source, cst.Call) and call_method_name(source) == "parameters" and dotted_name(source.func.value) == name):  # type: ignore[attr-defined]
            continue
        variable = dotted_name(loop.target)  # type: ignore[union-attr]
        if any(dotted_name(t.target) == f"{variable}.requires_grad" for t in assign.targets):
            return name
    return None


def _is_false(expr: cst.BaseExpression) -> bool:
    return isinstance(expr, cst.Name) and expr.value == "False"
