"""DDP049 step-skipped-on-error."""

from __future__ import annotations

from typing import Iterator

import libcst as cst

from . import names
from .analysis import ScriptAnalysis, dotted_name, tree
from .analysis.script import PROCESS_EXITS, exits_with_success
from .base import Example, Match, Phase, Rule, Severity, Valid
from .edits import code_of

#: Exceptions every process of a torchrun job sees alike, or that end an iteration rather than a step:
#: Ctrl-C reaches the whole process group, ``StopIteration`` restarts a loader's iterator.
_NOT_PER_PROCESS = frozenset({"KeyboardInterrupt", "SystemExit", "StopIteration", "StopAsyncIteration", "GeneratorExit"})


def _caught(handler: cst.ExceptHandler) -> list[str]:
    """The names of the exceptions a handler catches (``[]`` for a bare ``except:``)."""
    if handler.type is None:
        return []
    kinds = handler.type.elements if isinstance(handler.type, cst.Tuple) else [handler.type]
    found = []
    for kind in kinds:
        expr = kind.value if isinstance(kind, cst.Element) else kind
        name = dotted_name(expr)  # type: ignore[arg-type]
        found.append(name.split(".")[-1] if name else code_of(expr))  # type: ignore[arg-type]
    return found


def _ends_in_raise(body: cst.BaseSuite) -> bool:
    """Whether a handler's body ends in a ``raise`` or ends the process with a failure (``sys.exit(1)``): unless
    a branch before it leaves, the error stops this process, and torchrun then stops the others."""
    statements = list(body.body) if isinstance(body, cst.IndentedBlock) else [body]
    if not statements:
        return False
    last = statements[-1]
    small = last.body if isinstance(last, (cst.SimpleStatementLine, cst.SimpleStatementSuite)) else []
    if not small:
        return False
    end = small[-1]
    if isinstance(end, cst.Raise):
        return True
    return (
        isinstance(end, cst.Expr)
        and isinstance(end.value, cst.Call)
        and dotted_name(end.value.func) in PROCESS_EXITS
        and not exits_with_success(end.value)  # (``sys.exit(0)`` leaves the others waiting)
    )


def _skips(body: cst.CSTNode) -> bool:
    """Whether a handler goes on without the rest of the step: a ``continue``, ``break`` or ``return`` of its own
    (not of a loop or function inside it)."""
    stack = [body]
    while stack:
        node = stack.pop()
        if isinstance(node, (cst.Continue, cst.Break, cst.Return)):
            return True
        if isinstance(node, (cst.For, cst.While, cst.FunctionDef, cst.ClassDef, cst.Lambda)):
            continue
        stack.extend(tree.children(node))
    return False


class StepSkippedOnError(Rule):
    """Let an error in a training step stop every rank: never skip the step on one process alone.

    What it finds, in a program that trains a ``DistributedDataParallel`` model: an exception handler in a
    training loop, or in a step function a training loop calls, that swallows the error and goes on (or a
    ``with contextlib.suppress(...)`` block around the step), where
    the step it skips runs ``backward()``: the ``try`` holds the backward pass (``except RuntimeError:``
    around the step, the out-of-memory skip), or the handler leaves the iteration (``continue``, ``break``,
    ``return``) before the loop's backward pass (a bad sample skipped while preparing the batch). A handler
    that ends in ``raise`` or in a failing exit (``sys.exit(1)``) stops this process, and torchrun then stops
    the others: it is left alone, as are ``KeyboardInterrupt`` and ``StopIteration`` handlers (Ctrl-C reaches
    every process, and ``StopIteration`` restarts a loader's iterator).

    Why it is a problem: the error is this process's own (an out-of-memory error on one GPU, a corrupt
    sample in one shard, a NaN check that raises). The process that hits it skips the step, while the
    others run ``backward()`` and wait in DDP's gradient all-reduce for it: the job hangs (NCCL) or fails
    later with a mismatched collective (gloo). One process never shows this; a single-GPU program that
    skipped an out-of-memory batch ran on.

    What a human must do: let the error propagate (torchrun then stops every process), or make the skip a
    decision of every rank: catch the error, set a flag, agree on it across ranks (``runtime.reduce_sum`` of
    the flag, every rank) and skip together, zeroing the gradients of the failed step.
    """

    code = "DDP049"
    name = "step-skipped-on-error"
    phase = Phase.OUTPUT
    severity = Severity.ERROR
    triggers = ("except", "suppress")
    requires = ("backward", "zero_grad")
    needs_names = (names.DISTRIBUTED_DATA_PARALLEL,)
    manual_fix = "let the error stop every rank, or agree on the skip across ranks (runtime.reduce_sum of a flag)"
    examples = (
        Example(
            before="""\
import torch
from torch.nn.parallel import DistributedDataParallel

model = DistributedDataParallel(net)
for x, y in loader:
    try:
        loss = criterion(model(x), y)
        loss.backward()
    except RuntimeError as error:
        if "out of memory" not in str(error):
            raise
        optimizer.zero_grad()
        torch.cuda.empty_cache()
        continue
    optimizer.step()
    optimizer.zero_grad()
""",
        ),
        Example(
            before="""\
from torch.nn.parallel import DistributedDataParallel

model = DistributedDataParallel(net)
for batch in loader:
    try:
        x, y = decode(batch)
    except ValueError:
        continue
    criterion(model(x), y).backward()
    optimizer.step()
""",
        ),
        Valid(
            """\
from torch.nn.parallel import DistributedDataParallel

model = DistributedDataParallel(net)
it = iter(loader)
for step in range(steps):
    try:
        x, y = next(it)
    except StopIteration:
        it = iter(loader)
        x, y = next(it)
    try:
        criterion(model(x), y).backward()
    except RuntimeError as error:
        print(f"step {step} failed: {error}")
        raise
    try:
        wandb.log({"step": step})
    except Exception:
        pass
    optimizer.step()
"""
        ),
    )

    def matches(self, analysis: ScriptAnalysis) -> Iterator[Match]:
        if not any(analysis.is_call_to(wrap, names.DISTRIBUTED_DATA_PARALLEL) for wrap in analysis.program_wrap_calls):
            return
        backward = analysis.program_backward_calls
        runs_backward = analysis.reaching_nodes(backward)
        reaching = analysis.functions_reaching_backward()
        for node in analysis.preorder:
            suppressed = _suppressed(analysis, node) if type(node) is cst.With else None
            if type(node) is not cst.Try and suppressed is None:
                continue
            # Where the step runs: a training loop around the ``try``, or else a function of the program that
            # runs backward() (a ``train_step`` the loop calls).
            loop = analysis.nearest_loop(node)
            if loop is not None:
                if loop not in runs_backward:
                    continue
                scope: cst.CSTNode = loop.body
            else:
                # A step function: one that runs backward() and that a loop calls (not a ``main()`` whose ``try``
                # wraps the whole training: a failure there ends the process).
                function = analysis.enclosing_function(node)
                if function is None or function not in reaching or not any(
                    (analysis.shared.analysis_of(call) or analysis).nearest_loop(call) is not None
                    for call in analysis.callers_in_program(function)
                ):
                    continue
                scope = function.body
            # (the ``else:`` of a ``try`` runs only when nothing was raised: a step there is skipped too)
            orelse = getattr(node, "orelse", None)
            trains = node.body in runs_backward or (orelse is not None and orelse in runs_backward)  # type: ignore[attr-defined]
            if suppressed is not None:
                # ``with contextlib.suppress(RuntimeError):`` around the step: the error ends the block here alone
                if trains and not all(kind in _NOT_PER_PROCESS for kind in suppressed):
                    yield Match(
                        node,
                        f"contextlib.suppress({', '.join(suppressed)}) swallows the error and goes on, skipping a step "
                        "that runs backward() on this process alone: the other ranks wait in DDP's gradient "
                        "all-reduce and the job hangs; let the error stop every rank, or agree on the skip across "
                        "ranks (runtime.reduce_sum of a flag) and skip together",
                        fixable=False,
                    )
                continue
            for handler in node.handlers:  # type: ignore[attr-defined]
                caught = _caught(handler)
                if caught and all(kind in _NOT_PER_PROCESS for kind in caught):
                    continue
                leaves = _skips(handler.body)
                if _ends_in_raise(handler.body) and not leaves:
                    continue
                # What a ``continue`` / ``return`` in a handler skips: the backward passes after the ``try``.
                if not (trains or (leaves and _backward_after(analysis, node, scope, runs_backward))):  # type: ignore[arg-type]
                    continue
                what = ", ".join(caught) if caught else "any error"
                yield Match(
                    handler,
                    f"this handler swallows {what} and goes on, skipping a step that runs backward() on this "
                    "process alone (an out-of-memory error or a bad sample is one rank's own): the other ranks "
                    "wait in DDP's gradient all-reduce and the job hangs; let the error stop every rank, or agree "
                    "on the skip across ranks (runtime.reduce_sum of a flag) and skip together",
                    fixable=False,
                )
                break


def _suppressed(analysis: ScriptAnalysis, node: cst.With) -> list[str] | None:
    """The exceptions a ``with contextlib.suppress(...)`` statement swallows (``None``: no such statement)."""
    for item in node.items:
        call = item.item
        if isinstance(call, cst.Call) and analysis.is_call_to(call, {"contextlib.suppress"}):
            return [(dotted_name(a.value) or code_of(a.value)).split(".")[-1] for a in call.args]
    return None


def _backward_after(analysis: ScriptAnalysis, node: cst.Try, scope: cst.CSTNode, runs_backward: frozenset[cst.CSTNode]) -> bool:
    """Whether the loop body or function the ``try`` is in runs backward() after it."""
    return any(
        call in runs_backward and analysis.comes_before(node, call) and analysis.is_inside(call, scope)
        for call in analysis.calls
    )
