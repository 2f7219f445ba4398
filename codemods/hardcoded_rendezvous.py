"""DDP021 hardcoded-rendezvous."""

from __future__ import annotations

from typing import Iterator

import libcst as cst

from . import names
from .analysis import ScriptAnalysis, call_method_name
from .base import Change, Example, FixResult, FixSafety, Match, Options, Phase, Rule, Valid
from .edits import Edits, remove_statements, without_argument
from .analysis.legacy import INIT_PARAMETERS, LAUNCH_VARIABLES, OS_ENVIRON, argument, legacy_facts, string_value


def _environ_key(analysis: ScriptAnalysis, node: cst.CSTNode) -> str | None:
    """``X`` for ``os.environ["X"]``."""
    if isinstance(node, cst.Subscript) and analysis.qualified_names(node.value) & OS_ENVIRON and len(node.slice) == 1:
        index = node.slice[0].slice
        return string_value(index.value) if isinstance(index, cst.Index) else None
    return None


def _is_tcp_address(node: cst.BaseExpression) -> bool:
    """``"tcp://host:port"``, also as an f-string."""
    if isinstance(node, cst.SimpleString):
        return str(node.evaluated_value).startswith("tcp://")
    if isinstance(node, cst.FormattedString) and node.parts:
        first = node.parts[0]
        return isinstance(first, cst.FormattedStringText) and first.value.startswith("tcp://")
    return False


class HardcodedRendezvous(Rule):
    """Let torchrun provide the rendezvous: no hard-coded ``MASTER_ADDR``, ``MASTER_PORT`` or ``tcp://``.

    What it finds: ``os.environ["MASTER_ADDR"] = ...`` and ``os.environ["MASTER_PORT"] = ...`` (also
    ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``), ``os.environ.setdefault(...)`` and ``os.environ.update(...)``
    of these, and an ``init_method="tcp://host:port"`` literal in ``init_process_group``.

    Why it is a problem: torchrun sets these variables for every process, for the whole job. A script
    that writes them overrides torchrun's values: on several machines every node points at its own
    ``localhost`` and waits forever, and a fixed port collides with the next job on the machine. A
    ``setdefault`` is harmless only while the script reads the environment itself; with the runtime's
    setup, a ``RANK`` set without the rest is an inconsistent environment.

    What the fix does: removes the assignments (and an ``if`` left empty by that) and the ``init_method``
    argument, so the process group is created from torchrun's environment (``env://``). A ``setdefault``
    is kept when the script creates its process group from the environment itself, where it only serves
    runs without torchrun.

    Fix safety: only the rendezvous address and port change: they come from torchrun's environment
    instead of the script's constants.
    """

    code = "DDP021"
    name = "hardcoded-rendezvous"
    fix_safety = FixSafety.SAFE
    phase = Phase.LEGACY_LAUNCH
    triggers = ("environ", "tcp://")
    #: Every finding names a launch variable in a string literal or keyword, or writes ``tcp://``.
    requires = (*LAUNCH_VARIABLES, "tcp://")
    manual_fix = "remove the hand-set rendezvous; torchrun sets MASTER_ADDR, MASTER_PORT, RANK and WORLD_SIZE"
    examples = (
        Example(
            before="""\
import os
import random

import torch.distributed as dist


def setup(rank, world_size):
    os.environ["MASTER_ADDR"] = "localhost"
    os.environ["MASTER_PORT"] = str(random.randint(20000, 30000))
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
""",
            after="""\
import torch.distributed as dist


def setup(rank, world_size):
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
""",
        ),
        Example(
            before="""\
import os

import torch.distributed as dist

if "MASTER_ADDR" not in os.environ:
    os.environ["MASTER_ADDR"] = "127.0.0.1"
os.environ.setdefault("MASTER_PORT", "29500")
dist.init_process_group(backend="nccl", init_method="tcp://10.1.1.20:23456", rank=args.rank, world_size=4)
path = os.path.join("runs", "model.pt")
""",
            after="""\
import os

import torch.distributed as dist

dist.init_process_group(backend="nccl", rank=args.rank, world_size=4)
path = os.path.join("runs", "model.pt")
""",
        ),
        Valid(
            """\
import os

import torch.distributed as dist

os.environ.setdefault("MASTER_ADDR", "localhost")
os.environ.setdefault("MASTER_PORT", "29500")
dist.init_process_group("gloo", init_method="env://")
print("rendezvous at", os.environ["MASTER_ADDR"])
"""
        ),
    )

    def _cases(self, analysis: ScriptAnalysis) -> Iterator[tuple[cst.CSTNode, str, bool]]:
        """(node, message, fixable) for every hand-set rendezvous."""
        facts = legacy_facts(analysis)
        inits = analysis.calls_to(names.INIT_PROCESS_GROUP)
        # A script that builds its group from the environment itself may give it defaults for plain runs.
        keeps_environment = any(call not in facts.explicit_inits for call in inits)
        for assign in analysis.assignments:
            if not isinstance(assign, cst.Assign):
                continue
            keys = [_environ_key(analysis, t.target) for t in assign.targets]
            variables = [k for k in keys if k in LAUNCH_VARIABLES]
            if variables:
                yield assign, f"os.environ[{variables[0]!r}] set by hand: torchrun sets it for every process", len(keys) == 1
        for call in analysis.calls:
            method = call_method_name(call)
            if method in ("setdefault", "update") and analysis.qualified_names(call.func.value) & OS_ENVIRON:  # type: ignore[union-attr]
                variables = self._environ_call_variables(call)
                if not variables or (method == "setdefault" and keeps_environment):
                    continue
                fixable = all(v in LAUNCH_VARIABLES for v in variables) and isinstance(analysis.parent(call), cst.Expr)
                if any(v in LAUNCH_VARIABLES for v in variables):
                    yield call, f"os.environ.{method} of {', '.join(v for v in variables if v in LAUNCH_VARIABLES)}: torchrun sets them", fixable
        for call in inits:
            method_arg = argument(call, INIT_PARAMETERS, "init_method")
            if method_arg is not None and _is_tcp_address(method_arg.value):
                positional_after = method_arg.keyword is None and any(
                    a.keyword is None for a in call.args[call.args.index(method_arg) + 1 :]
                )
                yield method_arg.value, "hard-coded tcp:// rendezvous: torchrun provides the address (env://)", not positional_after

    @staticmethod
    def _environ_call_variables(call: cst.Call) -> list[str]:
        """The variables an ``os.environ.setdefault``/``update`` call writes (``?`` for ones it cannot tell)."""
        if call_method_name(call) == "setdefault":
            return [string_value(call.args[0].value) or "?"] if call.args else []
        found: list[str] = []
        for arg in call.args:
            if arg.keyword is not None:
                found.append(arg.keyword.value)
            elif isinstance(arg.value, cst.Dict):
                for element in arg.value.elements:
                    found.append(string_value(element.key) or "?" if isinstance(element, cst.DictElement) else "?")
            else:
                found.append("?")
        return found

    def matches(self, analysis: ScriptAnalysis) -> Iterator[Match]:
        blocked = legacy_facts(analysis).blocked()
        for node, message, fixable in self._cases(analysis):
            yield Match(node, message + blocked, fixable and not blocked)

    def fix(self, analysis: ScriptAnalysis, options: Options) -> FixResult | None:
        if legacy_facts(analysis).blocked():
            return None
        edits = Edits(analysis)
        removed = []
        for node, _message, fixable in self._cases(analysis):
            if not fixable:
                continue
            if isinstance(node, cst.Assign):
                removed.append(node)
                edits.changes.append(Change(self.code, analysis.line(node), "hand-set launch variable removed (torchrun sets it)"))
            elif isinstance(node, cst.Call):
                removed.append(analysis.parent(node))
                edits.changes.append(Change(self.code, analysis.line(node), "os.environ defaults for the rendezvous removed (torchrun sets them)"))
            else:
                arg = analysis.parent(node)
                call = analysis.parent(arg)
                assert isinstance(arg, cst.Arg) and isinstance(call, cst.Call)
                index = list(call.args).index(arg)
                edits.replace(call, lambda updated, i=index: without_argument(updated, updated.args[i]))  # type: ignore[arg-type]
                edits.changes.append(Change(self.code, analysis.line(node), "tcp:// init_method removed (the process group reads torchrun's environment)"))
        remove_statements(analysis, edits, removed)
        if not edits:
            return None
        edits.drop_unused_imports()
        return edits.apply(analysis.module)
