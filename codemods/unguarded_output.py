"""DDP010 unguarded-output."""

from __future__ import annotations

from typing import Iterator

import libcst as cst

from . import names
from .analysis import ScriptAnalysis
from .analysis.per_rank import shard_values_shown
from .analysis.ranks import rank_facts
from .base import Change, Example, FixResult, FixSafety, Match, Note, Options, Phase, Rule, Severity, Valid
from .edits import Edits, code_of, expression, statement
from .runtime_calls import runtime_name


class UnguardedOutput(Rule):
    """Print, show progress bars and log on rank 0 only.

    What it finds, in a training script: ``print(...)`` outside a rank guard, and the writes that are prints
    in all but name (``tqdm.write(msg)``, ``sys.stdout.write(text)``); ``tqdm(...)`` without ``disable=``
    (or with a ``disable=`` that does not read the rank), and ``logging`` calls (``logging.info``,
    ``logger.info`` on a ``logging.getLogger`` logger) in a file that never installs the runtime's rank-0 logging filter.

    Why it is a problem: every process prints every line, so the console shows each message N times,
    interleaved, and N progress bars fight over one terminal.

    Prints that carry the rank (``print(f"rank {rank}: ...")``, the value flowing from a rank source) and
    prints with ``force=True`` (a script's own rank-aware ``print``) are meant for every rank and stay; so do all
    prints of a program that replaces the builtin ``print`` itself (``builtins.print = print`` in DETR's
    ``setup_for_distributed``, quiet off rank 0).
    Guards are recognised by data flow (``if master_process:``, ``if get_rank() == 0:`` of a helper).

    What the fix does: ``print`` becomes ``runtime.print0`` (prints on global rank 0 only), and so do the
    writes (``sys.stdout.write(text)`` as ``runtime.print0(text, end="")``); ``tqdm`` gets
    ``disable=not runtime.is_main_process()`` (a ``disable=flag`` of its own becomes ``disable=flag or not
    runtime.is_main_process()``); ``runtime.silence_non_main_logging()`` is called right after
    ``runtime.setup()``, so log records are emitted on rank 0 only, but errors, which every rank still logs.

    Fix safety: only global rank 0 prints and logs: output of the other ranks, including per-rank values
    and their ``logging`` warnings, is no longer shown (their errors are); a plain run prints as before.
    What rank 0 shows of a value computed on its shard of the data (an epoch's loss summed over the sharded
    loader) is its share's alone: the migration's report notes each such line (DDP038 reports them when
    selected).
    """

    code = "DDP010"
    name = "unguarded-output"
    fix_safety = FixSafety.UNSAFE
    phase = Phase.OUTPUT
    severity = Severity.INFO
    triggers = ("print", "tqdm", "logging", "stdout")
    requires = names.TRAINING_STEP_WORDS
    needs_names = (names.TRAINING_SCRIPT_NAMES,)
    examples = (
        Example(
            before="""\
import logging
from tqdm import tqdm
from ddp_migrate import runtime

logger = logging.getLogger(__name__)
runtime.setup()
for x, y in tqdm(loader, desc="train"):
    loss.backward()
    logger.info("loss %.3f", loss.item())
print("done")
""",
            after="""\
import logging
from tqdm import tqdm
from ddp_migrate import runtime

logger = logging.getLogger(__name__)
runtime.setup()
runtime.silence_non_main_logging()
for x, y in tqdm(loader, desc="train", disable=not runtime.is_main_process()):
    loss.backward()
    logger.info("loss %.3f", loss.item())
runtime.print0("done")
""",
        ),
        Example(
            before="""\
import sys
from tqdm import tqdm
from ddp_migrate import runtime

for x, y in tqdm(loader, disable=not runtime.is_main_process()):
    loss.backward()
    tqdm.write(f"loss {loss.item():.3f}")
sys.stdout.write("done\\n")
""",
            after="""\
import sys
from tqdm import tqdm
from ddp_migrate import runtime

for x, y in tqdm(loader, disable=not runtime.is_main_process()):
    loss.backward()
    runtime.print0(f"loss {loss.item():.3f}")
runtime.print0("done\\n", end="")
""",
        ),
        # A bar the program switches itself keeps its switch, and is off on the other ranks too.
        Example(
            before="""\
from tqdm import tqdm

for x, y in tqdm(loader, disable=args.quiet):
    loss.backward()
for x, y in tqdm(val_loader, disable=False):
    evaluate(x, y)
for x, y in tqdm(test_loader, disable=None):
    evaluate(x, y)
""",
            after="""\
from ddp_migrate import runtime
from tqdm import tqdm

for x, y in tqdm(loader, disable=args.quiet or not runtime.is_main_process()):
    loss.backward()
for x, y in tqdm(val_loader, disable=not runtime.is_main_process()):
    evaluate(x, y)
for x, y in tqdm(test_loader, disable=None if runtime.is_main_process() else True):
    evaluate(x, y)
""",
        ),
        Valid(
            """\
import torch.distributed as dist

loss.backward()
if dist.get_rank() == 0:
    print("done")
"""
        ),
        # What the user chose is kept (issue 14): per-rank prints, force=True, data-flow guards, and a
        # self-recursive helper (RecursionError in the guard search).
        Valid(
            """\
import os
import torch


def repackage_hidden(h):
    if isinstance(h, torch.Tensor):
        return h.detach()
    return tuple(repackage_hidden(v) for v in h)


rank = int(os.environ["RANK"])
master_process = rank == 0
loss.backward()
print(f"rank {rank}: {len(loader)} batches")
print("setup done", force=True)
if master_process:
    print(repackage_hidden(h))
"""
        ),
    )

    def matches(self, analysis: ScriptAnalysis) -> Iterator[Match]:
        if not analysis.is_training_script:
            return
        facts = rank_facts(analysis)
        print_replaced = analysis.program_prints_on_its_terms
        for call in analysis.calls:  # the output calls first; whether a rank guard keeps them is dearer to ask
            if analysis.is_call_to(call, {"builtins.print"}):
                if print_replaced or facts.guard(call) is not None:
                    continue  # (``builtins.print = print`` of ``setup_for_distributed``: quiet off rank 0 already)
                if any(a.keyword is not None and a.keyword.value == "force" for a in call.args):
                    continue  # the script's own rank-aware print (``setup_for_distributed``): its choice
                if any(facts.is_rank_dependent(a.value) for a in call.args if a.keyword is None):
                    continue  # it says which rank speaks: meant for every rank
                if _before_the_process_ends(analysis, call):
                    continue  # why this process stops (``print("Loss is nan"); sys.exit(1)``): on whichever rank it does
                yield Match(call, "print runs on every process: print on rank 0 only (runtime.print0)")
            elif analysis.is_call_to(call, _WRITES) and type(analysis.parent(call)) is cst.Expr:
                if facts.guard(call) is not None or any(facts.is_rank_dependent(a.value) for a in call.args if a.keyword is None):
                    continue
                positional = [a for a in call.args if a.keyword is None]
                # (``tqdm.write(msg, sys.stderr)``: print would print the stream; only keywords carry over)
                fixable = len(positional) == 1 and positional[0].star == "" and all(a.keyword is None or a.keyword.value in ("file", "end") for a in call.args)
                yield Match(call, f"{code_of(call.func)}() writes on every process: write on rank 0 only (runtime.print0)", fixable=fixable)
            elif analysis.is_call_to(call, names.TQDM):
                disable = _disable_argument(call)
                if facts.guard(call) is None and (disable is None or not facts.is_rank_dependent(disable.value)):
                    yield Match(call, "progress bar drawn by every process: disable it off rank 0")
        if not print_replaced:
            for handed in _prints_handed_on(analysis):
                yield Match(handed, "print handed on as a function (trace_func=print) prints on every process: hand runtime.print0")
        # One silence_non_main_logging() (the entry's, after setup) quiets the logging of every module.
        if not any(module.calls_to(names.RUNTIME_SILENCE_LOGGING) for module in analysis.shared.analyses):
            logging_calls = [c for c in analysis.logging_calls if facts.guard(c) is None]
            if logging_calls:
                yield Match(
                    logging_calls[0],
                    "logging on every process: silence it off rank 0 (runtime.silence_non_main_logging())",
                    fixable=bool(analysis.calls_to(names.RUNTIME_SETUP)),
                )

    def notes(self, analysis: ScriptAnalysis, options: Options) -> list[Note]:
        """Where rank 0 alone shows a value computed on its shard of the data (:func:`shard_values_shown`): the
        number is rank 0's share's, where the single process's was the whole data's (an epoch's loss, an
        accuracy); DDP038 reports the same values when selected."""
        return [
            Note(
                self.code,
                analysis.line(call),
                f"{what} shows {shown}, computed on rank 0's share of the data only: the number is not the one a single "
                "process computes over all the data; reduce it across ranks first (runtime.reduce_mean, "
                "runtime.weighted_mean) where the whole data's value is wanted",
            )
            for call, what, shown in shard_values_shown(analysis, containers=False)  # (a note: only what it is sure of)
        ]

    def fix(self, analysis: ScriptAnalysis, options: Options) -> FixResult | None:
        edits = Edits(analysis)
        for match in self.matches_in(analysis):
            call = match.node  # (a call, or the name ``print`` handed on)
            if not match.fixable:
                continue
            rt = runtime_name(analysis, edits)
            if type(call) is cst.Name:  # ``trace_func=print``: the function handed on
                edits.replace(call, expression(f"{rt}.print0"))
                message = "print handed on replaced by runtime.print0 (rank 0 only)"
            elif analysis.is_call_to(call, {"builtins.print"}):
                edits.replace(call.func, expression(f"{rt}.print0"))
                message = "print replaced by runtime.print0 (rank 0 only)"
            elif analysis.is_call_to(call, _WRITES):
                edits.replace(call, _printed(analysis, call, rt))
                message = f"{code_of(call.func)}() replaced by runtime.print0 (rank 0 only)"
            elif analysis.is_call_to(call, names.TQDM):
                given = _disable_argument(call)
                off_rank_0 = f"not {rt}.is_main_process()"
                if given is not None:
                    # ``disable=False``: rank 0's choice only; ``disable=args.quiet``: kept, and off rank 0 too.
                    kept = code_of(given.value).strip()
                    if not isinstance(given.value, (cst.Name, cst.Attribute, cst.Call, cst.Subscript)):
                        kept = f"({kept})"
                    if kept == "None":  # (tqdm's own choice on rank 0: no bar where the output is no terminal)
                        value = f"None if {rt}.is_main_process() else True"
                    else:
                        value = off_rank_0 if kept == "False" else f"{kept} or {off_rank_0}"
                    edits.replace(given.value, expression(value))
                else:
                    disable = cst.Arg(
                        expression(off_rank_0),
                        keyword=cst.Name("disable"),
                        equal=cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace("")),
                    )
                    args = [*call.args[:-1], call.args[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)] if call.args else []
                    edits.replace(call, call.with_changes(args=[*args, disable]))
                message = "progress bar disabled off rank 0"
            else:
                setup = analysis.statement(analysis.calls_to(names.RUNTIME_SETUP)[0])
                edits.insert_after(setup, statement(f"{rt}.silence_non_main_logging()"))
                message = "logging silenced off rank 0 (runtime.silence_non_main_logging())"
            edits.changes.append(Change(self.code, analysis.line(call), message))
        return edits.apply(analysis.module) if edits else None


#: Writes of a line of output that are prints in all but name: ``tqdm.write(msg)`` (a line above the bars),
#: ``sys.stdout.write(text)`` (no newline added). ``sys.stderr.write`` is left to each rank: a channel programs
#: keep for their own diagnostics, as the runtime keeps a rank's errors.
_TQDM_WRITES = frozenset(f"{bar}.write" for bar in names.TQDM)
_STREAM_WRITES = frozenset({"sys.stdout.write"})
_WRITES = _TQDM_WRITES | _STREAM_WRITES


def _printed(analysis: ScriptAnalysis, call: cst.Call, rt: str) -> cst.Call:
    """The ``runtime.print0(...)`` that writes what the call wrote: ``tqdm.write(msg, end=...)`` keeps its
    arguments (print takes ``file=`` and ``end=`` alike); ``sys.stdout.write(text)`` adds no newline
    (``end=""``)."""
    printed = call.with_changes(func=expression(f"{rt}.print0"))
    if not analysis.is_call_to(call, _STREAM_WRITES):
        return printed
    extra = [cst.Arg(cst.SimpleString('""'), keyword=cst.Name("end"), equal=cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace("")))]
    args = [*call.args[:-1], call.args[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)]
    return printed.with_changes(args=[*args, *extra])


def _prints_handed_on(analysis: ScriptAnalysis) -> list[cst.Name]:
    """The builtin ``print`` handed on as a value: a parameter's default (``def __init__(self, trace_func=print)``, the
    EarlyStopping of pytorchtools) or an argument (``EarlyStopping(trace_func=print)``); its calls print on every rank."""
    found = []
    for node in analysis.preorder:
        if type(node) is not cst.Name or node.value != "print":  # type: ignore[attr-defined]
            continue
        parent = analysis.parent(node)
        if (type(parent) is cst.Param and parent.default is node) or (type(parent) is cst.Arg and parent.value is node):  # type: ignore[attr-defined]
            if "builtins.print" in analysis.qualified_names(node):  # type: ignore[arg-type]
                found.append(node)
    return found  # type: ignore[return-value]


def _disable_argument(call: cst.Call) -> cst.Arg | None:
    """The ``disable=`` argument of a progress bar, if given."""
    return next((a for a in call.args if a.keyword is not None and a.keyword.value == "disable"), None)


#: Calls that end the process.
_PROCESS_ENDS = frozenset({"sys.exit", "os._exit", "builtins.exit", "builtins.quit"})


def _before_the_process_ends(analysis: ScriptAnalysis, call: cst.Call) -> bool:
    """Whether the print says why the process stops: a later simple statement of its block raises or ends the
    process (``print(f"Loss is {loss}, stopping training"); sys.exit(1)``), so every path past the print does. Only the rank that gets there prints it, and
    rank 0 may never: on rank 0 alone, another rank's reason would never be seen."""
    statement = analysis.statement(call)
    block = analysis.parent(statement)
    body = getattr(block, "body", None)
    if not isinstance(body, (list, tuple)) or statement not in body:
        return False
    for later in body[body.index(statement) + 1 :]:
        if type(later) is not cst.SimpleStatementLine:
            continue  # (a raise inside a later loop or branch ends the process on some paths only)
        for small in later.body:  # type: ignore[attr-defined]
            if type(small) is cst.Raise:
                return True
            if type(small) is cst.Expr and type(small.value) is cst.Call and analysis.is_call_to(small.value, _PROCESS_ENDS):  # type: ignore[attr-defined, arg-type]
                return True
    return False
