"""DDP002 wrap-before-device."""

from __future__ import annotations

from typing import Iterator

import libcst as cst

from . import names
from .analysis import ScriptAnalysis, call_method_name, dotted_name, statements_of, walk, wrapped_argument
from .analysis.script import assignment_targets
from .base import Change, Example, FixResult, FixSafety, Match, Options, Phase, Rule, Valid
from .edits import Edits, code_of, expression
from .runtime_calls import runtime_name

MOVES = frozenset({"to", "cuda"})


def _move_of(stmt: cst.BaseStatement, name: str) -> cst.Call | None:
    """The ``name.to(...)`` / ``name.cuda()`` call a statement consists of (``x.to(d)`` or ``x = x.to(d)``)."""
    if not isinstance(stmt, cst.SimpleStatementLine) or len(stmt.body) != 1:
        return None
    small = stmt.body[0]
    if isinstance(small, cst.Expr):
        value = small.value
    elif isinstance(small, cst.Assign) and len(small.targets) == 1 and dotted_name(small.targets[0].target) == name:
        value = small.value
    else:
        return None
    if isinstance(value, cst.IfExp) and isinstance(small, cst.Assign):
        # ``model = model.cuda() if torch.cuda.is_available() else model`` (either way round): a move or none
        sides = (value.body, value.orelse)
        moves = [side for side in sides if isinstance(side, cst.Call) and call_method_name(side) in MOVES and dotted_name(side.func.value) == name]  # type: ignore[union-attr]
        kept = [side for side in sides if dotted_name(side) == name]
        reads = any(dotted_name(n) == name for n in walk(value.test) if isinstance(n, (cst.Name, cst.Attribute)))
        return moves[0] if len(moves) == 1 and len(kept) == 1 and not reads else None  # type: ignore[return-value]
    if isinstance(value, cst.Call) and call_method_name(value) in MOVES and dotted_name(value.func.value) == name:  # type: ignore[union-attr]
        return value
    return None


def _conditional_move(stmt: cst.BaseStatement, name: str) -> bool:
    """Whether a statement is ``if <test>: name.cuda()`` (only moves of ``name``, no ``else``, a test that
    does not read ``name``)."""
    if not isinstance(stmt, cst.If) or stmt.orelse is not None or not isinstance(stmt.body, cst.IndentedBlock):
        return False
    if any(dotted_name(n) == name for n in walk(stmt.test) if isinstance(n, (cst.Name, cst.Attribute))):
        return False
    return bool(stmt.body.body) and all(_move_of(s, name) is not None for s in stmt.body.body)


def _applied_to(move: cst.Call, model: cst.BaseExpression) -> cst.Call:
    """The move call (``wrapper.to(d)``, ``wrapper.cuda()``) made on the wrapped model instead."""
    return move.with_changes(func=move.func.with_changes(value=model))  # type: ignore[attr-defined]


def _moved_to_inner(stmt: cst.BaseStatement, name: str, inner: cst.BaseExpression) -> cst.BaseStatement:
    """A move statement of the wrapper (``name.to(d)``, ``name = name.to(d)``) as a move of the wrapped model."""
    move = _move_of(stmt, name)
    assert move is not None and isinstance(stmt, cst.SimpleStatementLine)
    # Copies: the wrap keeps ``inner`` (one node at two places of a tree makes the engine clone the module).
    new_move = _applied_to(move, inner.deep_clone())
    small = stmt.body[0]
    if isinstance(small, cst.Assign) and isinstance(small.value, cst.IfExp):  # (the move on one side, the model on the other)
        choice = small.value
        sides = {side: (new_move if side is move else inner.deep_clone()) for side in (choice.body, choice.orelse)}
        new_small = small.with_changes(
            targets=[cst.AssignTarget(inner.deep_clone())], value=choice.with_changes(body=sides[choice.body], orelse=sides[choice.orelse])
        )
    elif isinstance(small, cst.Assign):
        new_small = small.with_changes(targets=[cst.AssignTarget(inner.deep_clone())], value=new_move)
    else:
        new_small = small.with_changes(value=new_move)  # type: ignore[call-arg]
    return stmt.with_changes(body=[new_small])


def _moved_elsewhere(analysis: ScriptAnalysis, wrap: cst.Call, before: list[cst.BaseStatement]) -> cst.Call | None:
    """The move of the wrapper (``.to(device)`` on a value that holds the wrap, anywhere in the program:
    ``self.model = model.to(device)`` in a ``Trainer``) when the wrapped model was not moved before the wrap
    (no move among its origins, no ``model.to(device)`` among the statements ``before`` the wrap)."""
    inner = wrapped_argument(wrap)
    if inner is None or not analysis.is_call_to(wrap, names.DISTRIBUTED_DATA_PARALLEL):  # DataParallel moves it itself
        return None
    # ``convert_sync_batchnorm(model.to(device))``: the converted model stays on the device its argument is on.
    while type(inner) is cst.Call and inner.args and analysis.is_call_to(inner, names.CONVERT_SYNC_BATCHNORM):  # type: ignore[attr-defined]
        inner = inner.args[0].value  # type: ignore[attr-defined]
    if any(type(o) is cst.Call and call_method_name(o) in MOVES for o in analysis.origins(inner) | {inner}):  # type: ignore[arg-type]
        return None
    name = dotted_name(inner)
    if name is not None and any(_move_of(s, name) is not None for s in before):
        return None
    scope = analysis.enclosing_function(wrap)
    for module, call, moved in _program_moves(analysis):
        if wrap not in moved or analysis.is_inside(call, wrap):
            continue
        if module is analysis and analysis.enclosing_function(call) is scope and not analysis.comes_before(wrap, call):
            continue  # a move earlier in the wrap's own function (of another branch's model)
        return call
    return None


def _program_moves(analysis: ScriptAnalysis) -> list[tuple[ScriptAnalysis, cst.Call, set[cst.CSTNode]]]:
    """Every ``x.to(...)`` / ``x.cuda()`` of the program, with its module and the origins of ``x`` (read once
    per analysis, for all its wraps)."""

    def build(analysis: ScriptAnalysis) -> list[tuple[ScriptAnalysis, cst.Call, set[cst.CSTNode]]]:
        return [
            (module, call, module.origins(call.func.value))  # type: ignore[attr-defined]
            for module in analysis.shared.analyses
            for call in module.calls
            if call_method_name(call) in MOVES and type(call.func) is cst.Attribute
        ]

    return analysis.derived("moves of the program", build)


def _read_names(stmt: cst.CSTNode) -> set[str]:
    """The plain names a statement uses (``model`` and ``device`` of ``model.to(device)``; not ``to``)."""
    nodes = list(walk(stmt))
    attributes = {id(n.attr) for n in nodes if type(n) is cst.Attribute}  # type: ignore[attr-defined]
    return {n.value for n in nodes if type(n) is cst.Name and id(n) not in attributes}  # type: ignore[attr-defined]


def _rewraps(analysis: ScriptAnalysis, stmt: cst.CSTNode, target: str) -> bool:
    """Whether a statement only binds ``target`` again to a wrap of it (``model = DDP(model) if not
    isinstance(model, DDP) else model``): a move of either value moves the same parameters."""
    if not isinstance(stmt, cst.SimpleStatementLine) or len(stmt.body) != 1 or type(stmt.body[0]) is not cst.Assign:
        return False
    assign = stmt.body[0]
    return [dotted_name(t.target) for t in assign.targets] == [target] and any(  # type: ignore[attr-defined]
        type(node) is cst.Call and node in analysis.wrap_calls and dotted_name(wrapped_argument(node)) == target  # type: ignore[arg-type]
        for node in walk(assign.value)  # type: ignore[attr-defined]
    )


def _bound_names(stmt: cst.CSTNode) -> set[str]:
    """The plain names a statement binds: assignment and loop targets, definitions, imports."""
    found: set[str] = set()
    for node in walk(stmt):
        targets: list[cst.CSTNode] = [*assignment_targets(node), *([node.target] if isinstance(node, cst.For) else [])]
        if isinstance(node, (cst.FunctionDef, cst.ClassDef)):
            found.add(node.name.value)
        elif isinstance(node, cst.ImportAlias):
            found.add((dotted_name(node.asname.name) if node.asname else dotted_name(node.name)) or "")  # type: ignore[arg-type]
        for target in targets:
            found.update(n.value for n in walk(target) if type(n) is cst.Name)  # type: ignore[attr-defined]
    return found


def _named(expr: cst.BaseExpression | None) -> bool:
    """Whether the wrapped model is a variable (``model``, ``self.net``) that can be moved before the wrap."""
    return expr is not None and dotted_name(expr) is not None


class WrapBeforeDevice(Rule):
    """Move the model to its device before wrapping it, not after.

    What it finds: a DataParallel or DistributedDataParallel wrap followed by ``.to(device)`` or ``.cuda()``
    on the wrapper, chained (``DDP(model).to(device)``) or in a later statement of the same block.

    Why it is a problem: DDP records the parameters' devices and registers its gradient hooks when it is
    built; a model moved afterwards leaves DDP with CPU parameters (or fails with "module must be on a
    single device"), and ``device_ids`` no longer matches where the parameters live.

    What the fix does: moves the model first, then wraps: ``DDP(model.to(device))`` for the chained form,
    and the ``.to(...)`` statement moved above the wrap for the separate form, also when the move sits
    under a condition of its own (``if train_on_gpu: model.cuda()``: the whole ``if`` moves). A model
    built inside the wrap (``nn.DataParallel(Net())``) has no name to move first: the move goes into the
    wrap (``nn.DataParallel(Net().to(device))``) and the later statement goes; under a condition of its
    own that is left to a human.

    Fix safety: the model is moved before it is wrapped, which DDP requires; the statements between the
    two (and a condition around the move) run in the same order relative to everything else.
    """

    code = "DDP002"
    name = "wrap-before-device"
    fix_safety = FixSafety.SAFE
    phase = Phase.WRAPPING
    triggers = ("DataParallel",)
    needs_names = (names.MODEL_WRAPPERS,)  # it acts only on model wraps
    examples = (
        Example(
            before="""\
from torch.nn.parallel import DistributedDataParallel as DDP

model = DDP(Net()).to(device)
""",
            after="""\
from torch.nn.parallel import DistributedDataParallel as DDP

model = DDP(Net().to(device))
""",
        ),
        Example(
            before="""\
import torch.nn as nn

model = nn.DataParallel(model)
model.to(device)
""",
            after="""\
import torch.nn as nn

model.to(device)
model = nn.DataParallel(model)
""",
        ),
        Example(
            before="""\
import torch.nn as nn

model = nn.DataParallel(Net())
model = model.to(device)
""",
            after="""\
import torch.nn as nn

model = nn.DataParallel(Net().to(device))
""",
        ),
        Example(
            before="""\
import torch.nn as nn

model = nn.DataParallel(model)
optimizer = SGD(model.parameters(), lr=0.1)
if train_on_gpu:
    model.cuda()
""",
            after="""\
import torch.nn as nn

if train_on_gpu:
    model.cuda()
model = nn.DataParallel(model)
optimizer = SGD(model.parameters(), lr=0.1)
""",
        ),
        # The device is chosen between the wrap and the move: the wrap goes after the move (moved above its
        # ``device = ...``, the move had failed with NameError, a trial found).
        Example(
            before="""\
import torch.nn as nn

model = nn.DataParallel(model)
device = "cuda" if torch.cuda.is_available() else "cpu"
model.to(device)
""",
            after="""\
import torch.nn as nn

device = "cuda" if torch.cuda.is_available() else "cpu"
model.to(device)
model = nn.DataParallel(model)
""",
        ),
        # Moved later by code elsewhere: a Trainer's constructor moves what it is handed (a trial: on a GPU
        # DDP refused the CPU model, "device_ids ... only work with ... module parameters cpu").
        Example(
            before="""\
from torch.nn.parallel import DistributedDataParallel as DDP


class Trainer:
    def __init__(self, model, device):
        self.model = model.to(device)


model = DDP(Net(), device_ids=[local_rank])
trainer = Trainer(model, device)
""",
            after="""\
from ddp_migrate import runtime
from torch.nn.parallel import DistributedDataParallel as DDP


class Trainer:
    def __init__(self, model, device):
        self.model = model.to(device)


model = DDP(Net().to(runtime.device()), device_ids=[local_rank])
trainer = Trainer(model, device)
""",
        ),
        Valid(
            """\
from torch.nn.parallel import DistributedDataParallel as DDP

model = model.to(device)
model = DDP(model, device_ids=[local_rank])
"""
        ),
    )

    def _cases(self, analysis: ScriptAnalysis) -> Iterator[tuple[cst.Call, cst.Call | None, cst.BaseStatement | None, cst.Call | None]]:
        """(wrap, chained move, later move statement, move elsewhere) for every wrap moved after wrapping;
        one of the last three is set."""
        moves_taken: set[cst.BaseStatement] = set()  # moves already paired with an earlier wrap of the same model: moved once
        for wrap in analysis.wrap_calls:
            outer = analysis.parent(wrap)
            if isinstance(outer, cst.Attribute) and outer.attr.value in MOVES:
                call = analysis.parent(outer)
                if isinstance(call, cst.Call):
                    yield wrap, call, None, None
                    continue
            stmt = analysis.statement(wrap)
            target = None
            if isinstance(stmt, cst.SimpleStatementLine) and isinstance(stmt.body[0], cst.Assign):
                target = dotted_name(stmt.body[0].targets[0].target)
            block = analysis.parent(stmt)
            siblings = list(getattr(block, "body", ()))
            if target is None or stmt not in siblings:
                continue
            for later in siblings[siblings.index(stmt) + 1 :]:
                if _move_of(later, target) is not None or _conditional_move(later, target):
                    if later not in moves_taken:
                        moves_taken.add(later)
                        yield wrap, None, later, None
                    break
            else:
                elsewhere = _moved_elsewhere(analysis, wrap, siblings[: siblings.index(stmt)])
                if elsewhere is not None:
                    yield wrap, None, None, elsewhere

    def matches(self, analysis: ScriptAnalysis) -> Iterator[Match]:
        for wrap, _, later, elsewhere in self._cases(analysis):
            if isinstance(later, cst.If) and not _named(wrapped_argument(wrap)):
                yield Match(
                    wrap,
                    "model wrapped before it is moved to its device under a condition: build it, move it (under the "
                    "condition), then wrap it",
                    fixable=False,
                )
            elif elsewhere is not None:
                yield Match(wrap, f"model wrapped before it is moved to its device (later, by `{code_of(elsewhere)}`): move it first, then wrap")
            else:
                yield Match(wrap, "model wrapped before it is moved to its device: move it first, then wrap")

    def fix(self, analysis: ScriptAnalysis, options: Options) -> FixResult | None:
        edits = Edits(analysis)
        for wrap, chained, later, _ in self._cases(analysis):
            inner = wrapped_argument(wrap)
            if inner is None:
                continue
            if chained is not None:
                new_args = [a if a.value is not inner else a.with_changes(value=_applied_to(chained, inner)) for a in wrap.args]
                edits.replace(chained, wrap.with_changes(args=new_args))
            elif later is not None:
                stmt = analysis.statement(wrap)
                target = dotted_name(stmt.body[0].targets[0].target)  # type: ignore[union-attr]
                assert target is not None
                if not _named(inner):  # built inside the wrap: the move goes into it
                    if isinstance(later, cst.If):
                        continue  # reported for a human: the model has no name to move under the condition
                    move = _move_of(later, target)
                    assert move is not None
                    edits.replace(inner, _applied_to(move, inner))
                else:
                    siblings = list(statements_of(analysis.parent(stmt)))  # type: ignore[arg-type]
                    between = siblings[siblings.index(stmt) + 1 : siblings.index(later)]
                    # (``model = DDP(model) if not isinstance(model, DDP) else model`` between: the move moves either)
                    between_bound = {name for s in between if not _rewraps(analysis, s, target) for name in _bound_names(s)}
                    if _read_names(later) & between_bound:
                        # ``device = ...`` between the wrap and ``model.to(device)``: the wrap goes after the move
                        # instead (when the statements between do not use the model), not the move above its device.
                        if any(target.split(".")[0] in _read_names(s) for s in between):
                            edits.todo(stmt, f"move {target} to its device before this wrap (the move below needs values set in between)")
                            continue
                        for moved_up in [*between, later]:
                            edits.insert_before(stmt, moved_up)
                            edits.remove(moved_up)
                        edits.changes.append(Change(self.code, analysis.line(wrap), "model wrapped after it is moved to its device"))
                        continue
                    if isinstance(later, cst.If):
                        body = [_moved_to_inner(s, target, inner) for s in later.body.body]  # type: ignore[union-attr]
                        moved: cst.BaseStatement = later.with_changes(body=later.body.with_changes(body=body), leading_lines=[])
                    else:
                        moved = _moved_to_inner(later, target, inner).with_changes(leading_lines=[])
                    edits.insert_before(stmt, moved)
                edits.remove(later)
            else:
                # Moved later by code elsewhere (a Trainer's ``self.model = model.to(device)``): the wrap moves
                # it to this process's device first; the later move of the wrapper then changes nothing.
                edits.replace(inner, expression(f"{code_of(inner)}.to({runtime_name(analysis, edits)}.device())"))
            edits.changes.append(Change(self.code, analysis.line(wrap), "model moved to its device before it is wrapped"))
        return edits.apply(analysis.module) if edits else None
