"""DDP003 missing-process-group."""

from __future__ import annotations

from typing import Iterator, Sequence

import libcst as cst

from .analysis import ScriptAnalysis, statements_of
from .base import Change, Example, FixResult, Match, Options, Phase, Rule, Valid
from .edits import Edits, statement
from .runtime_calls import runtime_name


def _is_docstring(stmt: cst.BaseStatement) -> bool:
    return (
        isinstance(stmt, cst.SimpleStatementLine)
        and isinstance(stmt.body[0], cst.Expr)
        and isinstance(stmt.body[0].value, (cst.SimpleString, cst.ConcatenatedString))
    )


def _is_import(stmt: cst.BaseStatement) -> bool:
    return isinstance(stmt, cst.SimpleStatementLine) and all(isinstance(s, (cst.Import, cst.ImportFrom)) for s in stmt.body)


class MissingProcessGroup(Rule):
    """Set up the process group at the start of the entry point and tear it down at its end.

    What it finds: a training script (it calls ``backward()``) that never calls
    ``init_process_group`` or the runtime's ``setup()``.

    Why it is a problem: DistributedDataParallel, DistributedSampler and every collective need the default
    process group. Without it, processes launched by torchrun each train alone on the whole data set.

    What the fix does: ``runtime.setup()`` first in the entry point (``main()`` when the
    ``if __name__ == "__main__":`` block runs it, else that block, else the module after its imports) and
    ``runtime.cleanup()`` last. ``setup()`` reads torchrun's environment, picks ``nccl`` on CUDA and
    ``gloo`` on CPU, sets this process's CUDA device, and falls back to a world of one process when the
    script runs as plain ``python train.py``.
    """

    code = "DDP003"
    name = "missing-process-group"
    phase = Phase.PROCESS_GROUP
    triggers = ("backward",)
    examples = (
        Example(
            before='''\
def main():
    """Train."""
    model = Net()
    loss = model(x).sum()
    loss.backward()


if __name__ == "__main__":
    main()
''',
            after='''\
from ddp_migrate import runtime

def main():
    """Train."""
    runtime.setup()
    model = Net()
    loss = model(x).sum()
    loss.backward()
    runtime.cleanup()


if __name__ == "__main__":
    main()
''',
        ),
        Example(
            before="""\
import torch

loss = model(x).sum()
loss.backward()
""",
            after="""\
import torch
from ddp_migrate import runtime

runtime.setup()

loss = model(x).sum()
loss.backward()
runtime.cleanup()
""",
        ),
        Valid(
            """\
import torch.distributed as dist

dist.init_process_group("nccl")
loss.backward()
"""
        ),
    )

    def matches(self, analysis: ScriptAnalysis) -> Iterator[Match]:
        if analysis.is_training_script and not analysis.is_distributed:
            yield Match(analysis.backward_calls[0], "training script never sets up a process group for DDP")

    def fix(self, analysis: ScriptAnalysis, options: Options) -> FixResult | None:
        if not list(self.matches(analysis)):
            return None
        edits = Edits(analysis.module.code)
        rt = runtime_name(analysis, edits)
        setup, cleanup = statement(f"{rt}.setup()"), statement(f"{rt}.cleanup()")
        entry = analysis.entry_function or analysis.main_guard
        if entry is not None:
            body = statements_of(entry.body)
            first = next((i for i, s in enumerate(body) if not _is_docstring(s)), None)
            if first is None:
                return None
            edits.insert_before(body[first], setup)
            last = body[-1]
            if isinstance(last, cst.SimpleStatementLine) and isinstance(last.body[0], cst.Return):
                edits.insert_before(last, cleanup)
            else:
                edits.insert_after(last, cleanup)
            where = f"{entry.name.value}()" if isinstance(entry, cst.FunctionDef) else "the main block"
            line = analysis.line(body[first])
        else:
            body = analysis.module.body
            anchor = self._after_imports(body)
            if anchor is None:
                edits.insert_before(body[0], setup)
            else:
                edits.insert_after(anchor, setup.with_changes(leading_lines=[cst.EmptyLine()]))
            edits.insert_after(body[-1], cleanup)
            where = "the module"
            line = analysis.line(anchor) + 1 if anchor is not None else 1
        edits.changes.append(Change(self.code, line, f"process group set up at the start of {where} and cleaned up at its end"))
        return edits.apply(analysis.module)

    @staticmethod
    def _after_imports(body: Sequence[cst.BaseStatement]) -> cst.BaseStatement | None:
        """The last statement of the module's leading docstring-and-imports block."""
        anchor = None
        for stmt in body:
            if _is_import(stmt) or (anchor is None and _is_docstring(stmt)):
                anchor = stmt
            else:
                break
        return anchor
