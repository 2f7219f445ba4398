"""DDP003 missing-process-group."""

from __future__ import annotations

from typing import Iterator, Sequence

import libcst as cst

from . import names
from .analysis import ScriptAnalysis, is_docstring_line, is_import_line, statements_of
from .analysis.legacy import legacy_facts
from .analysis.ranks import Condition, rank_facts
from .base import Change, Example, FixResult, FixSafety, Match, Note, Options, Phase, Rule, Valid
from .edits import Edits, expression, statement
from .runtime_calls import on_the_cpu_note, runtime_name, setup_code


NEVER_DESTROYED = (
    "the program sets up a process group but never destroys it "
    "(torch warns of leaked resources; with gloo a process may abort at exit)"
)
CONDITIONAL_SETUP = (
    "the program sets up its process group only under a condition (launched by torchrun), but wraps its model "
    "in DistributedDataParallel on every path: a plain python run fails without a group; runtime.setup() after "
    "the set-up makes a world of one there (and does nothing where the group exists)"
)
BARE_TEARDOWN = (
    "the group runtime.setup() made is destroyed by destroy_process_group() alone: with gloo a process may "
    "still abort at exit; runtime.cleanup() destroys it and waits for gloo's threads"
)


class MissingProcessGroup(Rule):
    """Set up the process group at the start of the entry point and tear it down at its end.

    What it finds: the entry script of a training program (a module of the program calls ``backward()``)
    when no module of the program calls ``init_process_group`` or the runtime's ``setup()``. Modules the
    entry imports are never given a set-up of their own. Also a program that sets up its group itself
    (in the entry or a helper such as ``utils.init_distributed_mode(args)``) but never destroys it: no
    module calls ``destroy_process_group()`` or the runtime's ``cleanup()``.

    Why it is a problem: DistributedDataParallel, DistributedSampler and every collective need the default
    process group. Without it, processes launched by torchrun each train alone on the whole data set. A
    group never destroyed leaks its resources (torch warns at exit), and with gloo a process may abort at
    exit ("terminate called without an active exception") after all its work, failing the job.

    What the fix does: ``runtime.setup()`` before the first statement, in execution order from the entry,
    that needs the process group or the device: first in ``main()`` when the ``if __name__ == "__main__":``
    block hands all that work to it, else first in that block, else (a model or loader built at module
    level) after the module's imports; ``runtime.cleanup()`` at the end of the same block (the
    ``__main__`` block's end when the set-up is at module level). ``setup()`` reads torchrun's environment, picks ``nccl`` on CUDA and
    ``gloo`` on CPU, sets this process's CUDA device, and falls back to a world of one process when the
    script runs as plain ``python train.py``.

    A program that places nothing on an accelerator (no name, string or option in any of its modules names
    one, no device comes from outside: see :mod:`.analysis.devices`) trains on the CPU even on a GPU
    machine; its set-up is ``runtime.setup(device="cpu")``, which keeps every process there, with gloo.
    Given a GPU's ``device_ids``, DDP refuses its CPU model, and nccl cannot carry its gradients.

    A program that sets up its group only under a condition (``if "WORLD_SIZE" in os.environ:
    init_process_group()``, in the entry or in a helper it calls) while a DDP wrap runs on every path gets
    ``runtime.setup()`` right after the statement that leads to its set-up: it does nothing where the group
    exists, and gives a plain ``python`` run a world of one, without which the wrap fails.

    For a program that only never destroys its group: ``runtime.cleanup()`` at the end of that same
    block (nothing is added where the block ends by returning a computed value, which may still need the
    group). ``cleanup()`` does nothing when no group exists, so a run that did not set one up is unchanged.

    Also, in any module of a program whose group the runtime's ``setup()`` makes: a bare
    ``destroy_process_group()`` (no group given) becomes ``runtime.cleanup()``. Destroying the group
    alone leaves gloo's worker threads running at exit, and torch 2.13 then aborts about one process in
    fifteen after all its work (SIGABRT, a failed job); ``cleanup()`` destroys the group and waits for
    them. A migration meets this shape whenever it turns a program's own ``init_process_group`` into
    ``runtime.setup()`` (DDP022): the program's own tear-down stays.

    Fix safety: a plain ``python train.py`` runs as before, in a world of one process; the call only
    adds the process group, the device selection and the clean-up. ``cleanup()`` in place of a bare
    ``destroy_process_group()`` destroys the same group (and does nothing where none exists, where the
    bare call raised).
    """

    code = "DDP003"
    name = "missing-process-group"
    fix_safety = FixSafety.SAFE
    phase = Phase.PROCESS_GROUP
    # A training script, or a program of the runtime that destroys its group by hand.
    triggers = (*names.TRAINING_STEP_WORDS, "destroy_process_group", "DistributedDataParallel")
    needs_names = (names.TRAINING_SCRIPT_NAMES | names.RUNTIME_SETUP | names.DISTRIBUTED_DATA_PARALLEL,)
    examples = (
        Example(
            before='''\
def main():
    """Train."""
    model = Net().cuda()
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
    model = Net().cuda()
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

loss = model(x.cuda()).sum()
loss.backward()
""",
            after="""\
import torch
from ddp_migrate import runtime

runtime.setup()

loss = model(x.cuda()).sum()
loss.backward()
runtime.cleanup()
""",
        ),
        # A program that trains on the CPU stays there on a GPU machine.
        Example(
            before="""\
def main():
    model = nn.Linear(4, 1)
    for x, y in loader:
        nn.functional.mse_loss(model(x), y).backward()


if __name__ == "__main__":
    main()
""",
            after="""\
from ddp_migrate import runtime


def main():
    runtime.setup(device="cpu")
    model = nn.Linear(4, 1)
    for x, y in loader:
        nn.functional.mse_loss(model(x), y).backward()
    runtime.cleanup()


if __name__ == "__main__":
    main()
""",
        ),
        Example(
            before="""\
import torch.distributed as dist


def main():
    dist.init_process_group("nccl")
    model = build()
    model(x).sum().backward()


if __name__ == "__main__":
    main()
""",
            after="""\
import torch.distributed as dist
from ddp_migrate import runtime


def main():
    dist.init_process_group("nccl")
    model = build()
    model(x).sum().backward()
    runtime.cleanup()


if __name__ == "__main__":
    main()
""",
        ),
        # A set-up only when launched, a wrap on every path: plain python needs a group too (a trial's crash).
        Example(
            before="""\
import os
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def main():
    if "WORLD_SIZE" in os.environ:
        dist.init_process_group("nccl")
    model = DDP(build().cuda())
    model(x).sum().backward()


if __name__ == "__main__":
    main()
""",
            after="""\
import os
import torch.distributed as dist
from ddp_migrate import runtime
from torch.nn.parallel import DistributedDataParallel as DDP


def main():
    if "WORLD_SIZE" in os.environ:
        dist.init_process_group("nccl")
    runtime.setup()
    model = DDP(build().cuda())
    model(x).sum().backward()
    runtime.cleanup()


if __name__ == "__main__":
    main()
""",
        ),
        Example(
            before="""\
import torch.distributed as dist
from ddp_migrate import runtime

runtime.setup()
loss.backward()
dist.destroy_process_group()
""",
            after="""\
from ddp_migrate import runtime

runtime.setup()
loss.backward()
runtime.cleanup()
""",
        ),
        Valid(
            """\
import torch.distributed as dist

dist.init_process_group("nccl")
loss.backward()
dist.destroy_process_group()
"""
        ),
        Valid(
            """\
import torch.distributed as dist
from ddp_migrate import runtime

runtime.setup()
loss.backward()
dist.destroy_process_group(group)
"""
        ),
    )

    def matches(self, analysis: ScriptAnalysis) -> Iterator[Match]:
        for call in self._bare_teardowns(analysis):
            yield Match(call, BARE_TEARDOWN)
        if not (analysis.is_entry and (analysis.is_training_script or self._wraps_in_ddp(analysis))):
            return
        if not analysis.is_distributed:
            node = analysis.backward_calls[0] if analysis.backward_calls else analysis.first_group_need
            if node is not None and not analysis.program_out_of_sight and not analysis.program_distributed_by_a_library:
                # (read alone, the group may be set up out of sight; a device mesh, FSDP, DeepSpeed set up their own)
                yield Match(node, "training script never sets up a process group for DDP")
            return
        if self._never_destroyed(analysis):
            node = analysis.first_group_need
            if node is not None:
                yield Match(node, NEVER_DESTROYED)
        anchor = self._after_a_conditional_setup(analysis)
        if anchor is not None:
            yield Match(anchor, CONDITIONAL_SETUP)

    @staticmethod
    def _after_a_conditional_setup(analysis: ScriptAnalysis) -> cst.BaseStatement | None:
        """Where ``runtime.setup()`` must follow the program's own set-up, when that set-up runs only under a
        condition (``if "WORLD_SIZE" in os.environ: init_process_group()``, in the entry or up the calls of a
        helper) while a DDP wrap runs on every path: after the outermost test around the last set-up, in the
        block that holds it (inside a ``try``, a ``with``), or after the entry's statement that calls the helper
        that sets it up; ``None`` where a wrap sits inside that statement. ``setup()`` does nothing where the
        group exists and makes a world of one where it does not (a plain ``python`` run)."""
        if analysis.group_set_up_by_runtime or analysis.setup_site is None:
            return None
        setups = analysis.running_group_setups
        if not setups or not all(_on_some_paths(analysis, call) for call in setups):
            return None
        unconditional = [
            wrap
            for wrap in analysis.program_wrap_calls
            if analysis.is_call_to(wrap, names.DISTRIBUTED_DATA_PARALLEL) and not _on_some_paths(analysis, wrap)
        ]
        if not unconditional:
            return None  # (``if args.distributed: model = DDP(model)``: the wrap runs where the group was set up)
        anchor: cst.BaseStatement | None = None
        for call in setups:
            for home, place in analysis.places_up_the_calls(call):
                conditions = [c for c in rank_facts(home).conditions(place) if c.owner is not home.main_guard]
                if home is not analysis or any(c.early_exit for c in conditions):
                    continue  # (``if not launched: return`` before the set-up: after the caller's statement)
                tests = [c.owner for c in conditions if type(c.owner) is cst.If]
                found = tests[-1] if tests else analysis.statement(place)
                if anchor is None or analysis.comes_before(anchor, found):
                    anchor = found  # type: ignore[assignment]
                break  # (the nearest place in this module: its callers run it, set-up and all)
        if anchor is None or any(analysis.is_inside(wrap, anchor) or not analysis.runs_before(anchor, wrap) for wrap in unconditional):
            return None  # (the wrap runs under the set-up's own test, or before the place found)
        return anchor

    @staticmethod
    def _wraps_in_ddp(analysis: ScriptAnalysis) -> bool:
        """The program wraps a model in DDP, which needs the group whether or not its training step shows
        (a loop of a library's that the model is handed to, gradients by ``torch.autograd.grad``)."""
        return any(module.calls_to(names.DISTRIBUTED_DATA_PARALLEL) for module in analysis.shared.analyses)

    @staticmethod
    def _bare_teardowns(analysis: ScriptAnalysis) -> list[cst.Call]:
        """This module's ``destroy_process_group()`` calls that name no group, where the runtime's
        ``setup()`` makes the program's group."""
        calls = [call for call in analysis.calls_to(names.DESTROY_PROCESS_GROUP) if not call.args]
        return calls if calls and analysis.group_set_up_by_runtime else []

    @staticmethod
    def _never_destroyed(analysis: ScriptAnalysis) -> bool:
        """The program sets up its own group (no launcher of its own left to convert) and never destroys it."""
        return not analysis.tears_down_group and not legacy_facts(analysis).launches

    def notes(self, analysis: ScriptAnalysis, options: Options) -> list[Note]:
        if analysis.program_out_of_sight and analysis.is_entry and analysis.is_training_script and not analysis.is_distributed:
            return [
                Note(
                    self.code,
                    1,
                    "read alone: the program imports more of its own modules than one analysis holds, so whether they set "
                    "up the process group or wrap the model is out of sight; nothing was set up or wrapped here: check "
                    "that the program does both (migrate the modules that train as a smaller program, or by hand)",
                )
            ]
        return []

    def fix(self, analysis: ScriptAnalysis, options: Options) -> FixResult | None:
        teardowns = self._bare_teardowns(analysis)
        if teardowns:
            return self._cleanup_instead(analysis, teardowns)
        if not self.matches_in(analysis):
            return None
        site = analysis.setup_site
        if site is None:
            return None
        edits = Edits(analysis)
        rt = runtime_name(analysis, edits)
        cleanup = statement(f"{rt}.cleanup()")
        if analysis.is_distributed:  # the program sets its group up itself: the clean-up is missing, or a set-up on every path
            anchor = next((m.node for m in self.matches_in(analysis) if m.message == CONDITIONAL_SETUP), None)
            if anchor is not None:
                edits.insert_after(anchor, statement(setup_code(analysis, rt)))
                edits.changes.append(
                    Change(
                        self.code,
                        analysis.line(anchor),
                        "runtime.setup() after the program's own set-up, which runs only when launched: a plain python run "
                        "gets a world of one for the DDP wrap" + on_the_cpu_note(analysis),
                    )
                )
            if self._never_destroyed(analysis):
                return self._add_cleanup(analysis, site, edits, cleanup)
            return edits.apply(analysis.module) if edits else None
        setup = statement(setup_code(analysis, rt))
        if isinstance(site, (cst.FunctionDef, cst.If)):
            body = statements_of(site.body)
            first = next((i for i, s in enumerate(body) if not is_docstring_line(s)), None)
            if first is None:
                return None
            edits.insert_before(body[first], setup)
            where = f"{site.name.value}()" if isinstance(site, cst.FunctionDef) else "the main block"
            line = analysis.line(body[first])
        else:
            anchor = self._after_imports(site.body)
            if anchor is None:
                edits.insert_before(site.body[0], setup)
            else:
                edits.insert_after(anchor, setup.with_changes(leading_lines=[cst.EmptyLine()]))
            where = "the module"
            line = analysis.line(anchor) + 1 if anchor is not None else 1
        self._cleanup_at_end(edits, self._work_block(analysis, site)[0], cleanup)
        edits.changes.append(
            Change(self.code, line, f"process group set up at the start of {where} and cleaned up at its end" + on_the_cpu_note(analysis))
        )
        return edits.apply(analysis.module)

    def _cleanup_instead(self, analysis: ScriptAnalysis, teardowns: Sequence[cst.Call]) -> FixResult | None:
        """``runtime.cleanup()`` for each bare ``destroy_process_group()``."""
        edits = Edits(analysis)
        rt = runtime_name(analysis, edits)
        for call in teardowns:
            edits.replace(call, expression(f"{rt}.cleanup()"))
            edits.changes.append(
                Change(self.code, analysis.line(call), "destroy_process_group() replaced by runtime.cleanup() (it also waits for gloo's threads: no abort at exit)")
            )
        edits.drop_unused_imports()  # ``import torch.distributed as dist`` may have served the call alone
        return edits.apply(analysis.module)

    def _add_cleanup(
        self, analysis: ScriptAnalysis, site: cst.FunctionDef | cst.If | cst.Module, edits: Edits, cleanup: cst.BaseStatement
    ) -> FixResult | None:
        """``cleanup()`` at the end of the block that runs the program's work; none where that block ends by
        returning a computed value, which might still need the group."""
        body, where = self._work_block(analysis, site)
        last = body[-1]
        if isinstance(last, cst.SimpleStatementLine) and isinstance(last.body[0], cst.Return):
            value = last.body[0].value
            if value is not None and not isinstance(value, (cst.Name, cst.BaseNumber, cst.BaseString)):
                return None
        self._cleanup_at_end(edits, body, cleanup)
        edits.changes.append(Change(self.code, analysis.line(last), f"the program's process group is destroyed at the end of {where}"))
        return edits.apply(analysis.module)

    @staticmethod
    def _work_block(
        analysis: ScriptAnalysis, site: cst.FunctionDef | cst.If | cst.Module
    ) -> tuple[Sequence[cst.BaseStatement], str]:
        """The block at whose end the program's work is done, and its name: ``main()`` or the ``__main__``
        block where the set-up site is one; for a module-level site, the ``__main__`` block, else the module."""
        if isinstance(site, cst.FunctionDef):
            return statements_of(site.body), f"{site.name.value}()"
        if isinstance(site, cst.If):
            return statements_of(site.body), "the main block"
        guard = analysis.main_guard
        if guard is not None:
            return statements_of(guard.body), "the main block"
        return site.body, "the module"

    @staticmethod
    def _cleanup_at_end(edits: Edits, body: Sequence[cst.BaseStatement], cleanup: cst.BaseStatement) -> None:
        """``cleanup()`` after the last statement of a block, or before it when that is a ``return``."""
        last = body[-1]
        if isinstance(last, cst.SimpleStatementLine) and isinstance(last.body[0], cst.Return):
            edits.insert_before(last, cleanup)
        else:
            edits.insert_after(last, cleanup)

    @staticmethod
    def _after_imports(body: Sequence[cst.BaseStatement]) -> cst.BaseStatement | None:
        """The last statement of the module's leading docstring-and-imports block."""
        anchor = None
        for stmt in body:
            if is_import_line(stmt) or (anchor is None and is_docstring_line(stmt)):
                anchor = stmt
            else:
                break
        return anchor


def _on_some_paths(analysis: ScriptAnalysis, node: cst.CSTNode) -> bool:
    """Whether the node runs only under a condition (the analysis's conditions: a branch of a test, an early
    exit before it such as ``if not dist.is_initialized(): ...; return``, an ``except``), in its function or
    in one up the calls that lead to it; the ``__main__`` block is no condition."""
    return any(
        condition.owner is not home.main_guard and not _left_where_the_group_is_up(home, condition)
        for home, place in analysis.places_up_the_calls(node)
        for condition in rank_facts(home).conditions(place)
    )


def _left_where_the_group_is_up(analysis: ScriptAnalysis, condition: Condition) -> bool:
    """Whether a condition is an early exit taken where the group is set up already (``if dist.is_initialized():
    return`` before ``init_process_group``): every path past it, or out of it, has a group."""
    test = condition.test
    return condition.early_exit and type(test) is cst.Call and analysis.is_call_to(test, names.GROUP_IS_INITIALIZED)  # type: ignore[arg-type]
