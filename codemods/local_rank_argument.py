"""DDP023 local-rank-argument."""

from __future__ import annotations

from typing import Iterator

import libcst as cst

from .analysis import ScriptAnalysis
from .base import Change, Example, FixResult, Match, Options, Phase, Rule, Valid
from .edits import Edits, expression, with_keyword
from .legacy_analysis import (
    RUNTIME_LOCAL_RANK,
    LegacyFacts,
    Option,
    legacy_facts,
    remove_statements,
    statement_line,
    tidy_top,
)
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
    """

    code = "DDP023"
    name = "local-rank-argument"
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
        facts = legacy_facts(analysis)
        for option in facts.local_rank_options:
            for attribute in facts.option_attributes(option.dest):
                if facts.is_load(attribute):
                    yield READ, attribute, option
                else:
                    yield WRITE, attribute, option
            if self._removable(facts, option) or not self._default_from_environment(analysis, option):
                yield OPTION, option.call, option

    @staticmethod
    def _removable(facts: LegacyFacts, option: Option) -> bool:
        """Whether nothing but ``args.<dest>`` reads the option (no ``getattr(args, "local_rank")``)."""
        return not facts.mentions_string(option.dest, outside=[option.call])

    @staticmethod
    def _default_from_environment(analysis: ScriptAnalysis, option: Option) -> bool:
        default = next((a for a in option.call.args if a.keyword is not None and a.keyword.value == "default"), None)
        return default is not None and isinstance(default.value, cst.Call) and analysis.is_call_to(default.value, RUNTIME_LOCAL_RANK)

    def matches(self, analysis: ScriptAnalysis) -> Iterator[Match]:
        for kind, node, option in self._cases(analysis):
            if kind == READ:
                yield Match(node, f"args.{option.dest} from the command line: torchrun sets LOCAL_RANK in the environment instead")
            elif kind == WRITE:
                yield Match(node, f"args.{option.dest} set by hand: the local rank comes from the environment (runtime.local_rank())")
            else:
                yield Match(node, f"{option.flags[0]} option: torchrun does not pass it, so every process would keep its default")

    def fix(self, analysis: ScriptAnalysis, options: Options) -> FixResult | None:
        facts = legacy_facts(analysis)
        edits = Edits(analysis.module.code)
        removed: list[cst.CSTNode] = []
        for kind, node, option in self._cases(analysis):
            rt = runtime_name(analysis, edits)
            if kind == READ:
                edits.replace(node, expression(f"{rt}.local_rank()"))
                edits.changes.append(Change(self.code, analysis.line(node), f"args.{option.dest} replaced by runtime.local_rank() (LOCAL_RANK)"))
            elif kind == WRITE:
                assign = analysis.parent(analysis.parent(node))
                if isinstance(assign, cst.Assign) and len(assign.targets) == 1:
                    removed.append(statement_line(analysis, assign))
                    edits.changes.append(Change(self.code, analysis.line(node), f"assignment to args.{option.dest} removed"))
            elif self._removable(facts, option):
                stmt = analysis.statement(option.call)
                if isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 and isinstance(stmt.body[0], cst.Expr):
                    removed.append(stmt)
                    edits.changes.append(Change(self.code, analysis.line(node), f"{option.flags[0]} option removed (torchrun sets LOCAL_RANK)"))
            else:
                call = option.call
                default = next((a for a in call.args if a.keyword is not None and a.keyword.value == "default"), None)
                value = expression(f"{rt}.local_rank()")
                if default is not None:
                    edits.replace(default.value, value)
                else:
                    edits.replace(call, lambda updated, value=value: with_keyword(updated, "default", value))  # type: ignore[arg-type]
                edits.changes.append(Change(self.code, analysis.line(node), f"{option.flags[0]} kept with its default from the environment"))
        remove_statements(analysis, edits, removed)
        if not edits:
            return None
        edits.remove_import_if_unused("os")
        return tidy_top(analysis.module, edits.apply(analysis.module))

