"""DDP012 unguarded-file-write."""

from __future__ import annotations

from typing import Iterator

import libcst as cst

from . import names
from .analysis import ScriptAnalysis, keyword_argument
from .base import Change, Example, FixResult, Match, Options, Phase, Rule, Valid
from .edits import Edits, expression, with_keyword
from .runtime_calls import runtime_name

MAKE_FOLDER = frozenset({"os.mkdir", "os.makedirs"})
OPEN = frozenset({"builtins.open", "io.open"})
FILE_HANDLER = frozenset({"logging.FileHandler", "logging.handlers.RotatingFileHandler", "logging.handlers.TimedRotatingFileHandler"})
#: Calls that, reached from a ``with open(...)`` block, make a rank-0 guard around it a deadlock.
BLOCKING = names.COLLECTIVES | names.RUNTIME_SAVE


def _write_mode(call: cst.Call) -> bool:
    """Whether an ``open(...)`` call opens for writing (``w``, ``a``, ``x`` or ``+`` in a literal mode)."""
    mode = keyword_argument(call, "mode")
    if mode is None:
        positional = [a for a in call.args if a.keyword is None]
        mode = positional[1] if len(positional) > 1 else None
    if mode is None or not isinstance(mode.value, cst.SimpleString):
        return False
    return any(flag in str(mode.value.evaluated_value) for flag in "wax+")


class UnguardedFileWrite(Rule):
    """Create folders and write files so that N processes do not trip over each other.

    What it finds, in training code outside a rank-0 guard: ``os.mkdir(path)`` and ``os.makedirs(path)``
    without ``exist_ok=True``; ``with open(path, "w") as f:`` blocks (metrics, histories, configs); and
    logging ``FileHandler``\\s opened at start-up.

    Why it is a problem: every process runs the same code. ``if not os.path.isdir(p): os.mkdir(p)`` is a
    race: one rank creates the folder between another's check and its ``mkdir``, which then dies with
    ``FileExistsError``. Files opened for writing on every rank are written N times at once (garbled or
    truncated output on shared storage), and a log file opened with ``mode="w"`` by every rank is
    truncated by the last one to start, wiping what rank 0 already wrote.

    What the fix does: ``os.makedirs(path, exist_ok=True)`` (safe on every rank); the ``with open(...)``
    block goes under ``if runtime.is_main_process():`` when nothing inside it waits for other ranks
    (otherwise it is reported for a human); ``FileHandler`` gets ``delay=True``, so it opens its file only
    when it first emits, which with ``runtime.silence_non_main_logging()`` happens on rank 0 alone.
    """

    code = "DDP012"
    name = "unguarded-file-write"
    phase = Phase.CHECKPOINTS
    triggers = ("mkdir", "makedirs", "open", "FileHandler")
    manual_fix = "write the file on rank 0 only, keeping collectives outside the rank-0 branch"
    examples = (
        Example(
            before="""\
import json
import os

if not os.path.isdir("checkpoint"):
    os.mkdir("checkpoint")
loss.backward()
with open("history.json", "w") as f:
    json.dump(history, f)
""",
            after="""\
import json
import os
from ddp_migrate import runtime

if not os.path.isdir("checkpoint"):
    os.makedirs("checkpoint", exist_ok=True)
loss.backward()
if runtime.is_main_process():
    with open("history.json", "w") as f:
        json.dump(history, f)
""",
        ),
        Example(
            before="""\
import logging

logging.basicConfig(handlers=[logging.FileHandler("train.log", mode="w")])
loss.backward()
""",
            after="""\
import logging

logging.basicConfig(handlers=[logging.FileHandler("train.log", mode="w", delay=True)])
loss.backward()
""",
        ),
        Valid(
            """\
import os
import torch.distributed as dist

os.makedirs("out", exist_ok=True)
loss.backward()
if dist.get_rank() == 0:
    with open("out/metrics.txt", "a") as f:
        f.write("done")
with open("config.yaml") as f:
    config = f.read()
"""
        ),
    )

    def _cases(self, analysis: ScriptAnalysis) -> Iterator[tuple[cst.Call, str, cst.With | None]]:
        blocking = analysis.calls_to(BLOCKING)
        for call in analysis.calls:
            if analysis.rank_guard(call) is not None:
                continue
            if analysis.is_call_to(call, MAKE_FOLDER):
                exist_ok = keyword_argument(call, "exist_ok")
                if exist_ok is None or (isinstance(exist_ok.value, cst.Name) and exist_ok.value.value == "False"):
                    yield call, "folder", None
            elif analysis.is_call_to(call, FILE_HANDLER) and keyword_argument(call, "delay") is None:
                yield call, "handler", None
            elif analysis.is_call_to(call, OPEN) and _write_mode(call):
                item = analysis.parent(call)
                block = analysis.parent(item) if isinstance(item, cst.WithItem) else None
                safe = isinstance(block, cst.With) and len(block.items) == 1 and not analysis.reaches(block, blocking)
                yield call, "file", block if safe else None

    def matches(self, analysis: ScriptAnalysis) -> Iterator[Match]:
        if not analysis.is_training_code:
            return
        for call, kind, block in self._cases(analysis):
            if kind == "folder":
                yield Match(call, "every rank creates this folder: a race (FileExistsError); use os.makedirs(..., exist_ok=True)")
            elif kind == "handler":
                yield Match(call, "every rank opens this log file at start-up: open it lazily (delay=True)")
            else:
                yield Match(call, "every rank writes this file: write it on rank 0 only", fixable=block is not None)

    def fix(self, analysis: ScriptAnalysis, options: Options) -> FixResult | None:
        if not analysis.is_training_code:
            return None
        edits = Edits(analysis.module.code)
        for call, kind, block in self._cases(analysis):
            if kind == "folder":
                func = call.func
                if isinstance(func, cst.Attribute) and func.attr.value == "mkdir":
                    func = func.with_changes(attr=cst.Name("makedirs"))
                elif isinstance(func, cst.Name) and func.value == "mkdir":
                    edits.add_import("os")
                    func = expression("os.makedirs")
                existing = keyword_argument(call, "exist_ok")
                if existing is not None:
                    new_args = [a.with_changes(value=cst.Name("True")) if a is existing else a for a in call.args]
                    edits.replace(call, call.with_changes(func=func, args=new_args))
                else:
                    edits.replace(call, with_keyword(call.with_changes(func=func), "exist_ok", cst.Name("True")))
                message = "folder created with os.makedirs(..., exist_ok=True)"
            elif kind == "handler":
                edits.replace(call, with_keyword(call, "delay", cst.Name("True")))
                message = "log file opened lazily (delay=True), so only the rank that logs opens it"
            elif block is not None:
                rt = runtime_name(analysis, edits)
                guard = cst.If(
                    test=expression(f"{rt}.is_main_process()"),
                    body=cst.IndentedBlock(body=[block.with_changes(leading_lines=[])]),
                    leading_lines=block.leading_lines,
                )
                edits.replace(block, lambda updated, guard=guard: guard.with_changes(
                    body=cst.IndentedBlock(body=[updated.with_changes(leading_lines=[])])))
                message = "file written on rank 0 only"
            else:
                edits.todo(analysis.statement(call), "write this file on rank 0 only (the block waits for other ranks)")
                continue
            edits.changes.append(Change(self.code, analysis.line(call), message))
        return edits.apply(analysis.module) if edits else None
