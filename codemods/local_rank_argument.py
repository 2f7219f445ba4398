"""DDP023 local-rank-argument."""

from __future__ import annotations

from typing import Iterator

import libcst as cst

from .analysis import ScriptAnalysis
from .base import Change, Example, FixResult, FixSafety, Match, Options, Phase, Rule, Valid
from .edits import Edits, code_of, expression, is_pure, remove_statements, statement_line, with_keyword
from .analysis.legacy import RUNTIME_LOCAL_RANK, LegacyFacts, Option, int_value, legacy_facts
from .runtime_calls import runtime_name

OPTION = "option"
READ = "read"
WRITE = "write"


class LocalRankArgument(Rule):
    """Take the local rank from torchrun's environment, not from a ``--local_rank`` argument.

    What it finds: an argparse option ``--local_rank`` / ``--local-rank`` (the one
    ``torch.distributed.launch`` filled in), the ``args.local_rank`` reads, and assignments to it.

    Why it is a problem: torchrun does not pass ``--local_rank``; it sets ``LOCAL_RANK`` in each process's
    environment. Launched by torchrun, the option keeps its default, so every process on a machine
    believes it is local rank 0 and they all pile onto GPU 0 (or the script fails on the unknown
    ``--local-rank=N`` it used to get).

    What the fix does: ``args.local_rank`` becomes ``runtime.local_rank()`` (``LOCAL_RANK`` from the
    environment), and assignments to it go. The option is removed when nothing else reads it; when
    something still does (``getattr(args, "local_rank")``), it stays with ``default=runtime.local_rank()``.
    A script that tests the option against its default to tell a run without the launcher
    (``if args.local_rank == -1:``) keeps the option and its reads, with the default read from the
    environment (``int(os.environ.get("LOCAL_RANK", -1))``), so that test keeps its meaning.

    Fix safety: the command line changes: ``--local_rank`` is removed when nothing else reads it, so a
    launch command that still passes it (``torch.distributed.launch`` without ``--use-env``) stops with
    a usage error; the value comes from ``LOCAL_RANK``.
    """

    code = "DDP023"
    name = "local-rank-argument"
    fix_safety = FixSafety.UNSAFE
    phase = Phase.LEGACY_LAUNCH
    triggers = ("local_rank", "local-rank")
    manual_fix = "read the local rank from the environment (runtime.local_rank()) instead of --local_rank"
    examples = (
        Example(
            before="""\
import argparse

import torch

parser = argparse.ArgumentParser()
parser.add_argument("--local_rank", type=int, default=0)
parser.add_argument("--epochs", type=int, default=10)
args = parser.parse_args()

torch.cuda.set_device(args.local_rank)
model = DDP(model, device_ids=[args.local_rank])
""",
            after="""\
import argparse

import torch
from ddp_migrate import runtime

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=10)
args = parser.parse_args()

torch.cuda.set_device(runtime.local_rank())
model = DDP(model, device_ids=[runtime.local_rank()])
""",
        ),
        Example(
            before="""\
import os

import torch


def main(parser):
    parser.add_argument("--local-rank", type=int, default=-1)
    args = parser.parse_args()
    if "LOCAL_RANK" in os.environ:
        args.local_rank = int(os.environ["LOCAL_RANK"])
    device = torch.device("cuda", args.local_rank)
    log_rank = getattr(args, "local_rank", 0)
""",
            after="""\
import torch
from ddp_migrate import runtime


def main(parser):
    parser.add_argument("--local-rank", type=int, default=runtime.local_rank())
    args = parser.parse_args()
    device = torch.device("cuda", runtime.local_rank())
    log_rank = getattr(args, "local_rank", 0)
""",
        ),
        Example(
            before="""\
import os

import torch

parser.add_argument("--local_rank", type=int, default=-1, help="-1: not distributed")
args = parser.parse_args()
if args.local_rank == -1:
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
else:
    torch.cuda.set_device(args.local_rank)
    device = torch.device("cuda", args.local_rank)
    torch.distributed.init_process_group(backend="nccl")
""",
            after="""\
import os

import torch

parser.add_argument(
    "--local_rank",
    type=int,
    default=int(os.environ.get("LOCAL_RANK", -1)),
    help="-1: not distributed",
)
args = parser.parse_args()
if args.local_rank == -1:
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
else:
    torch.cuda.set_device(args.local_rank)
    device = torch.device("cuda", args.local_rank)
    torch.distributed.init_process_group(backend="nccl")
""",
        ),
        Valid(
            """\
import os

import torch

local_rank = int(os.environ["LOCAL_RANK"])
torch.cuda.set_device(local_rank)
"""
        ),
    )

    def _cases(self, analysis: ScriptAnalysis) -> Iterator[tuple[str, cst.CSTNode, Option]]:
        """This module's part of the migration off ``--local_rank``: its reads and writes of
        ``args.<dest>`` for an option of any module of the program (a helper module reads the entry's
        ``args.local_rank``), and its own options."""
        facts = legacy_facts(analysis)
        seen: set[cst.CSTNode] = set()  # (two options of one dest, in two modules: each read once)
        for home, option in facts.program_local_rank_options:
            own = home is facts
            if self._sentinel(analysis, home, option) is not None:
                # ``-1`` means "not launched by the launcher": keep the option, default from LOCAL_RANK.
                if own and not self._default_from_environment(home, option):
                    yield OPTION, option.call, option
                continue
            for attribute in facts.option_attributes(option.dest):
                if attribute in seen:
                    continue
                seen.add(attribute)
                if facts.is_load(attribute):
                    yield READ, attribute, option
                else:
                    yield WRITE, attribute, option
            if own and (self._removable(analysis, option) or not self._default_from_environment(home, option)):
                yield OPTION, option.call, option

    @staticmethod
    def _program_facts(analysis: ScriptAnalysis) -> list[LegacyFacts]:
        return [legacy_facts(module) for module in analysis.shared.analyses] or [legacy_facts(analysis)]

    @staticmethod
    def _default(option: Option) -> cst.Arg | None:
        return next((a for a in option.call.args if a.keyword is not None and a.keyword.value == "default"), None)

    def _sentinel(self, analysis: ScriptAnalysis, facts: LegacyFacts, option: Option) -> str | None:
        """``"-1"`` or ``"None"`` when the program (any of its modules) tests the option against its default
        to tell a run without the launcher (``if args.local_rank == -1:``), which ``runtime.local_rank()``
        (0) would change. ``facts``: those of the option's own module."""
        default = self._default(option)
        value = default.value if default is not None else cst.Name("None")
        if isinstance(value, cst.IfExp) and facts.env_read(value.body) == "LOCAL_RANK":
            value = value.orelse  # int(os.environ["LOCAL_RANK"]) if "LOCAL_RANK" in os.environ else None
        elif facts.env_read(value) == "LOCAL_RANK" and isinstance(value, cst.Call) and len(value.args) == 1:
            inner = value.args[0].value  # int(os.environ.get("LOCAL_RANK", -1))
            value = inner.args[1].value if isinstance(inner, cst.Call) and len(inner.args) == 2 else value
        sentinel = "-1" if int_value(value) == -1 else "None" if isinstance(value, cst.Name) and value.value == "None" else None
        if sentinel is None:
            return None
        attributes = [a for module in self._program_facts(analysis) for a in module.option_attributes(option.dest)]
        for attribute in attributes:
            comparison = facts.analysis.parent(attribute)
            if isinstance(comparison, cst.Comparison):
                for other in (comparison.left, *(c.comparator for c in comparison.comparisons)):
                    if other is not attribute and code_of(other).strip() == sentinel:
                        return sentinel
                    if isinstance(other, (cst.List, cst.Tuple)) and any(code_of(e.value).strip() == sentinel for e in other.elements):
                        return sentinel
        return None

    def _removable(self, analysis: ScriptAnalysis, option: Option) -> bool:
        """Whether nothing but ``args.<dest>`` reads the option (no ``getattr(args, "local_rank")`` in any
        module of the program)."""
        return not any(module.mentions_string(option.dest, outside=[option.call]) for module in self._program_facts(analysis))

    def _read_elsewhere(self, analysis: ScriptAnalysis, option: Option) -> bool:
        """Whether another module of the program still reads ``args.<dest>``: the option waits until that
        module's own fix has replaced the reads (the engine runs the fixes again until nothing changes)."""
        return any(module.analysis is not analysis and module.option_attributes(option.dest) for module in self._program_facts(analysis))

    def _default_from_environment(self, facts: LegacyFacts, option: Option) -> bool:
        default = self._default(option)
        value = default.value if default is not None else None
        if isinstance(value, cst.IfExp):
            value = value.body
        if not isinstance(value, cst.Call):
            return False
        return facts.analysis.is_call_to(value, RUNTIME_LOCAL_RANK) or facts.env_read(value) == "LOCAL_RANK"

    def matches(self, analysis: ScriptAnalysis) -> Iterator[Match]:
        blocked = legacy_facts(analysis).blocked()
        for kind, node, option in self._cases(analysis):
            if kind == READ:
                message = f"args.{option.dest} from the command line: torchrun sets LOCAL_RANK in the environment instead"
            elif kind == WRITE:
                message = f"args.{option.dest} set by hand: the local rank comes from the environment (runtime.local_rank())"
            else:
                message = f"{option.flags[0]} option: torchrun does not pass it, so every process would keep its default"
            yield Match(node, message + blocked, not blocked)

    def fix(self, analysis: ScriptAnalysis, options: Options) -> FixResult | None:
        facts = legacy_facts(analysis)
        if facts.blocked():
            return None
        edits = Edits(analysis)
        removed: list[cst.CSTNode] = []
        for kind, node, option in self._cases(analysis):
            if kind == READ:
                rt = runtime_name(analysis, edits)
                edits.replace(node, expression(f"{rt}.local_rank()"))
                edits.changes.append(Change(self.code, analysis.line(node), f"args.{option.dest} replaced by runtime.local_rank() (LOCAL_RANK)"))
            elif kind == WRITE:
                assign = analysis.parent(analysis.parent(node))
                if isinstance(assign, cst.Assign) and len(assign.targets) == 1:
                    if is_pure(assign.value):
                        removed.append(statement_line(analysis, assign))
                    else:  # keep what the value does: ``args.local_rank = init_distributed()``
                        edits.replace(assign, cst.Expr(assign.value))
                    edits.changes.append(Change(self.code, analysis.line(node), f"assignment to args.{option.dest} removed"))
            elif self._sentinel(analysis, facts, option) is None and self._read_elsewhere(analysis, option):
                continue
            elif self._sentinel(analysis, facts, option) is None and self._removable(analysis, option):
                stmt = analysis.statement(option.call)
                if isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 and isinstance(stmt.body[0], cst.Expr):
                    removed.append(stmt)
                    edits.changes.append(Change(self.code, analysis.line(node), f"{option.flags[0]} option removed (torchrun sets LOCAL_RANK)"))
            else:
                call = option.call
                default = self._default(option)
                sentinel = self._sentinel(analysis, facts, option)
                if sentinel == "-1":
                    value = expression('int(os.environ.get("LOCAL_RANK", -1))')
                elif sentinel == "None":
                    value = expression('int(os.environ["LOCAL_RANK"]) if "LOCAL_RANK" in os.environ else None')
                else:
                    value = expression(f"{runtime_name(analysis, edits)}.local_rank()")
                if sentinel is not None and "os" not in facts.imported_names:
                    edits.add_import("os")
                if default is not None:
                    edits.replace(default.value, value)
                else:
                    edits.replace(call, lambda updated, value=value: with_keyword(updated, "default", value))  # type: ignore[arg-type]
                edits.changes.append(Change(self.code, analysis.line(node), f"{option.flags[0]} kept with its default from the environment"))
        remove_statements(analysis, edits, removed)
        if not edits:
            return None
        edits.drop_unused_imports()
        return edits.apply(analysis.module)

