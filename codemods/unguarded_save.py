"""DDP007 unguarded-save."""

from __future__ import annotations

from typing import Iterator

import libcst as cst

from . import names
from .analysis import ScriptAnalysis, dotted_name, keyword_argument, walk
from .analysis.script import into_memory, leaves_function
from .analysis.per_rank import per_rank_values, shard_values_saved
from .analysis.ranks import Condition, Kind, rank_facts
from .base import Change, Example, FixResult, FixSafety, Match, Note, Options, Phase, Rule, Valid
from .edits import Edits, code_of, expression, statement
from .runtime_calls import runtime_name

CHECKPOINT_WRITERS = frozenset(q for q, kind in names.WRITERS.items() if kind == "checkpoint")


def _expression_line(analysis: ScriptAnalysis, call: cst.Call) -> cst.SimpleStatementLine | None:
    """The line when the call is the whole of a statement line of its own (``torch.save(...)``)."""
    expr = analysis.parent(call)
    line = analysis.parent(expr) if isinstance(expr, cst.Expr) else None
    if isinstance(line, cst.SimpleStatementLine) and len(line.body) == 1:
        return line
    return None


class UnguardedSave(Rule):
    """Save checkpoints on rank 0 only, and never put a barrier where not every rank goes.

    What it finds: ``torch.save(...)`` that every process executes (no condition that flows from the rank,
    such as ``if rank == 0:``, ``if master_process:`` or ``if get_rank() == 0:`` of a helper, keeps it off the
    other ranks).

    Why it is a problem: N processes write the same file at once (torn or corrupt checkpoints on shared
    storage, N times the I/O), and a process that loads the file right after may read it half-written.

    What the fix does, depending on where the save is (proven by data flow, see the rank analysis):

    - on a path every rank takes: ``runtime.save(obj, path)``: it unwraps DDP modules inside ``obj``,
      writes on global rank 0 only, then waits on a barrier on every rank;
    - under a condition that may differ between ranks (``if acc > best:`` with a per-rank ``acc``, a test
      the analysis cannot resolve): ``if runtime.is_main_process(): torch.save(...)``, with no barrier
      there, since the other ranks may never get to it. When the program loads a file after the save,
      ``runtime.barrier()`` follows the outermost such condition, where every rank passes; after an early
      ``return`` (``if os.path.isdir(root): return`` in a data preparation helper) it follows the helper's one
      call, where the ranks meet again. A save read back with no such place is left for review: a rank could
      read the file before rank 0 wrote it (a trial's shards: 4 runs of 6 crashed, one trained on part).

    Also a save already on rank 0 only that pickles the DistributedDataParallel wrapper whole
    (``if rank == 0: torch.save(model, path)``): the file loads only where a process group exists. The fix
    saves ``runtime.unwrap(model)``, the model itself, as ``runtime.save`` does.

    Fix safety: the checkpoint keeps its contents; a save written on rank 0 only under a per-rank
    condition follows rank 0's decision (``acc`` of rank 0's shard).
    """

    code = "DDP007"
    name = "unguarded-save"
    fix_safety = FixSafety.UNSAFE
    phase = Phase.CHECKPOINTS
    triggers = ("save",)
    requires = (*names.TRAINING_STEP_WORDS, "DataParallel")
    needs_names = (names.TRAINING_CODE_NAMES,)
    examples = (
        Example(
            before="""\
import torch

state = {"net": net.state_dict(), "acc": acc}
torch.save(state, "checkpoint/best.pt")
loss.backward()
""",
            after="""\
import torch
from ddp_migrate import runtime

state = {"net": net.state_dict(), "acc": acc}
runtime.save(state, "checkpoint/best.pt")
loss.backward()
""",
        ),
        # A per-rank condition: rank 0 saves alone, no barrier where the other ranks may not go.
        Example(
            before="""\
import torch

for x, y in loader:
    loss = criterion(model(x), y)
    loss.backward()
    acc = evaluate(model)
    if acc > best:
        best = acc
        torch.save(model.state_dict(), "best.pt")
""",
            after="""\
import torch
from ddp_migrate import runtime

for x, y in loader:
    loss = criterion(model(x), y)
    loss.backward()
    acc = evaluate(model)
    if acc > best:
        best = acc
        if runtime.is_main_process():
            torch.save(model.state_dict(), "best.pt")
""",
        ),
        # A later load needs the file complete: the barrier goes after the condition, on the common path.
        Example(
            before="""\
import torch

for epoch in range(3):
    loss.backward()
    if check(epoch):
        torch.save(model.state_dict(), "last.pt")
model.load_state_dict(torch.load("last.pt"))
""",
            after="""\
import torch
from ddp_migrate import runtime

for epoch in range(3):
    loss.backward()
    if check(epoch):
        if runtime.is_main_process():
            torch.save(model.state_dict(), "last.pt")
    runtime.barrier()
model.load_state_dict(torch.load("last.pt"))
""",
        ),
        # Rank 0 alone gets past the early return: the save is already its own (a trial's hang, when it
        # became runtime.save with a barrier).
        Valid(
            """\
import os
import torch


def save_checkpoint(state, path):
    if int(os.environ.get("RANK", "0")) != 0:
        return
    torch.save(state, path)


for epoch in range(3):
    train(model)
    loss.backward()
    save_checkpoint(model.state_dict(), "last.pt")
"""
        ),
        Valid(
            """\
import torch
import torch.distributed as dist

if dist.get_rank() == 0:
    torch.save(model.state_dict(), "model.pt")
"""
        ),
        # Rank-0 guards recognised through data flow: a variable, a helper of the file, a condition in a
        # conjunction (issue 14: these saves used to become runtime.save, whose barrier hung).
        Valid(
            """\
import os
import torch
import torch.distributed as dist

master_process = int(os.environ.get("RANK", 0)) == 0

def get_rank():
    if not dist.is_initialized():
        return 0
    return dist.get_rank()

for it in range(4):
    loss.backward()
    if it % 2 == 0 and master_process:
        torch.save({"model": model.state_dict()}, "ckpt.pt")
    if get_rank() == 0:
        torch.save(model.state_dict(), "last.pt")
"""
        ),
        # A self-recursive helper in the file (issue 14: RecursionError in the guard search).
        Valid(
            """\
import torch
import torch.distributed as dist

def repackage_hidden(h):
    if isinstance(h, torch.Tensor):
        return h.detach()
    return tuple(repackage_hidden(v) for v in h)

def checkpoint(h):
    torch.save(repackage_hidden(h), "h.pt")

loss.backward()
if dist.get_rank() == 0:
    checkpoint(hidden)
"""
        ),
        # Rank 0, or a run without a process group: the other ranks of a job never save.
        Valid(
            """\
import torch
import torch.distributed as dist

loss.backward()
if (not dist.is_initialized()) or dist.get_rank() == 0:
    torch.save(model.module.state_dict(), "ck.pt")
if dist.get_rank() == 0 or not dist.is_available():
    torch.save(model.module.state_dict(), "last.pt")
"""
        ),
        # A file of each rank's own (its name carries the rank): every rank must write it (a trial's fix left
        # rank 1 without its random state on resume).
        Valid(
            """\
import os
import torch
import torch.distributed as dist

rank = dist.get_rank()
rng_path = os.path.join("out", f"rng_state_rank{rank}.pt")
loss.backward()
torch.save({"cpu_rng": torch.get_rng_state()}, rng_path)
torch.save(sampler.state_dict(), f=f"sampler_{os.environ['RANK']}.pt")
"""
        ),
    )

    def _cases(self, analysis: ScriptAnalysis) -> Iterator[tuple[cst.Call, Condition | None]]:
        """Every save that runs on every rank reaching it, with the condition that may keep some ranks away."""
        if not analysis.is_training_code:
            return
        facts = rank_facts(analysis)
        for call in analysis.calls_to(CHECKPOINT_WRITERS):
            if facts.guard(call) is not None or into_memory(analysis, call):
                continue  # (``torch.save(state, io.BytesIO())``: no file, every rank keeps its own copy)
            target = keyword_argument(call, "f")
            target = target if target is not None else (call.args[1] if len(call.args) > 1 and call.args[1].keyword is None else None)
            if target is not None and facts.is_rank_dependent(target.value):
                continue  # each rank's own file (``f"rng_rank{rank}.pt"``): every rank must write it
            yield call, facts.unsafe_condition(call)

    @staticmethod
    def _guarded_wrapper_pickles(analysis: ScriptAnalysis) -> Iterator[cst.Call]:
        """Saves already on rank 0 only (``if rank == 0: torch.save(model, path)``) that pickle a
        DistributedDataParallel wrapper whole."""
        if not analysis.is_training_code:
            return
        facts = rank_facts(analysis)
        loaded: set[str] | None = None
        for call in analysis.calls_to(names.TORCH_SAVE):
            if facts.guard(call) is None:
                continue
            pickled = [
                value for value in _wrapped_models_saved_whole(analysis, call)
                if (wrap := analysis.wrapped_at(value)) is not None and analysis.is_call_to(wrap, names.DISTRIBUTED_DATA_PARALLEL)
            ]
            if not pickled:
                continue
            loaded = _names_loaded_into(analysis) if loaded is None else loaded
            if any(dotted_name(value) in loaded for value in pickled):
                continue  # ``model = torch.load("whole.pt")`` resumes the wrapper itself: the file is the program's own
            yield call

    def matches(self, analysis: ScriptAnalysis) -> Iterator[Match]:
        for call in self._guarded_wrapper_pickles(analysis):
            yield Match(call, WRAPPER_PICKLED)
        loads: list[cst.Call] | None = None
        for call, condition in self._cases(analysis):
            if condition is None:
                yield Match(call, "torch.save runs on every process: save on rank 0 only (runtime.save)")
                continue
            loads = _loads(analysis) if loads is None else loads
            read_back, outer, _ = self._rejoin(analysis, call, condition, loads)
            helper = _preparation_call(analysis, call) if read_back and _after_an_early_return(analysis, call) else None
            if helper is not None:
                yield Match(
                    call,
                    f"torch.save in `{code_of(helper.func)}()`, which returns early on a test of the file system and "  # type: ignore[attr-defined]
                    "whose files the program reads back: every rank would run it, and the ranks race (one sees the "
                    f"folder another made and writes nothing); run `{code_of(helper)}` on rank 0 only, then wait on every rank",
                )
            elif read_back and _after_an_early_return(analysis, call):
                yield Match(call, f"torch.save runs on every process that gets here, and {_how_it_splits(analysis, condition)}: {UNSYNCHRONISED_READ}", fixable=False)
            else:
                yield Match(
                    call,
                    f"torch.save runs on every process that gets here, and {_how_it_splits(analysis, condition)}: "
                    "save on rank 0 only, without a barrier here",
                    fixable=_expression_line(analysis, call) is not None,
                )

    def notes(self, analysis: ScriptAnalysis, options: Options) -> list[Note]:
        """Where the checkpoint rank 0 writes holds a value computed on rank 0's shard of the data (a threshold
        tuned on the shard's errors, a running loss): the file keeps rank 0's share's number."""
        return [
            Note(
                self.code,
                analysis.line(call),
                f"the checkpoint holds {held}, computed on rank 0's share of the data only (rank 0 writes it): the number "
                "is not the one a single process computes over all the data; reduce it across ranks first where the "
                "whole data's value is wanted (runtime.reduce_mean, runtime.weighted_mean; an order statistic, a "
                "quantile, needs the values themselves: all_gather them)",
            )
            for call, held in shard_values_saved(analysis)
        ]

    def fix(self, analysis: ScriptAnalysis, options: Options) -> FixResult | None:
        edits = Edits(analysis)
        loads = _loads(analysis)
        barriers: set[cst.CSTNode] = set()
        prepared: set[cst.CSTNode] = set()
        for call in self._guarded_wrapper_pickles(analysis):
            self._unwrap_whole_models(analysis, edits, call, runtime_name(analysis, edits))
            edits.changes.append(Change(self.code, analysis.line(call), UNWRAPPED_WHOLE))
        for call, condition in self._cases(analysis):
            rt = runtime_name(analysis, edits)
            if condition is None:
                edits.replace(call.func, expression(f"{rt}.save"))
                message = "torch.save replaced by runtime.save (rank 0 writes, all ranks wait)"
                if _wrapped_models_saved_whole(analysis, call):
                    # (the original pickled its DataParallel wrapper: a reader that used ``.module`` of it must not)
                    message += "; the whole model is saved without its wrapper (the file holds the model itself: code that reads the file and uses .module must use the model directly)"
                edits.changes.append(Change(self.code, analysis.line(call), message))
                continue
            read_back, outer, where = self._rejoin(analysis, call, condition, loads)
            helper = _preparation_call(analysis, call) if read_back and _after_an_early_return(analysis, call) else None
            if helper is not None:
                # The whole preparation (its early return, its folder, its saves) on rank 0, the others waiting.
                stmt = analysis.statement(helper)
                if stmt not in prepared:
                    prepared.add(stmt)
                    guard = cst.If(test=expression(f"{rt}.is_main_process()"), body=cst.IndentedBlock(body=[stmt]))  # type: ignore[list-item]
                    edits.replace(stmt, lambda updated, guard=guard: guard.with_changes(
                        leading_lines=updated.leading_lines,
                        body=cst.IndentedBlock(body=[updated.with_changes(leading_lines=[])]),
                    ))
                    edits.insert_after(stmt, statement(f"{rt}.barrier()"))
                    edits.changes.append(Change(
                        self.code, analysis.line(stmt),
                        f"{code_of(helper)} (it saves files the program reads back) runs on rank 0 only; every rank waits after it",
                    ))
                continue
            if read_back and _after_an_early_return(analysis, call):
                continue  # (left for review: see matches)
            line = _expression_line(analysis, call)
            if line is None:
                edits.todo(analysis.statement(call), "save on rank 0 only (the ranks may not all get here: no barrier)")
                continue
            unwrapped = self._unwrap_whole_models(analysis, edits, call, rt)
            guard = cst.If(test=expression(f"{rt}.is_main_process()"), body=cst.IndentedBlock(body=[line]))
            edits.replace(line, lambda updated, guard=guard: guard.with_changes(
                leading_lines=updated.leading_lines,
                body=cst.IndentedBlock(body=[updated.with_changes(leading_lines=[])]),
            ))
            message = "torch.save on rank 0 only, without a barrier (the ranks may not all get here)"
            if unwrapped:
                message += f"; {UNWRAPPED_WHOLE}"
            if read_back and outer is not None:
                if outer not in barriers:
                    barriers.add(outer)
                    edits.insert_after(outer, statement(f"{rt}.barrier()"))
                message += f"; every rank waits {where}"
            edits.changes.append(Change(self.code, analysis.line(call), message))
        return edits.apply(analysis.module) if edits else None

    def _rejoin(
        self, analysis: ScriptAnalysis, call: cst.Call, condition: Condition, loads: list[cst.Call]
    ) -> tuple[bool, cst.BaseStatement | None, str]:
        """For a save that only some ranks may reach (``condition``): whether the program reads a file back
        after it, and the statement after which every rank can wait for rank 0's file (``None``: no such
        place), with how the report names that place. (After an early ``return``, the ranks meet again only
        where the function is called: see :func:`_preparation_call`.)"""
        facts = rank_facts(analysis)
        read_back = any(not analysis.comes_before(load, call) or self._same_loop(analysis, load, call) for load in loads)
        outer = facts.rejoin_point(call)
        where = "after the loop" if type(outer) in (cst.For, cst.While) else "after the condition"
        if outer is not None and not facts.collective_safe_at(outer):
            outer = None
        return read_back, outer, where

    @staticmethod
    def _unwrap_whole_models(analysis: ScriptAnalysis, edits: Edits, call: cst.Call, rt: str) -> bool:
        """In a save kept as ``torch.save`` under a rank-0 guard, reach a wrapped model saved whole (``torch.save(
        model, path)``, ``{"net": model}``) through ``runtime.unwrap``, as ``runtime.save`` does: a pickled
        DistributedDataParallel loads only where a process group exists. Whether any was found."""
        found = _wrapped_models_saved_whole(analysis, call)
        for value in found:
            edits.replace(value, expression(f"{rt}.unwrap({code_of(value)})"))
        return bool(found)

    @staticmethod
    def _same_loop(analysis: ScriptAnalysis, load: cst.Call, call: cst.Call) -> bool:
        """Whether a loop runs both calls (the load may run after the save of an earlier iteration)."""
        return any(isinstance(a, (cst.For, cst.While)) and analysis.is_inside(load, a) for a in analysis.ancestors(call))


def _names_loaded_into(analysis: ScriptAnalysis) -> set[str]:
    """The names the program assigns what ``torch.load`` reads (``model = torch.load(path)``), in any module."""
    found: set[str] = set()
    for module in analysis.shared.analyses:
        for call in module.calls_to(names.TORCH_LOAD):
            assign = module.parent(call)
            if type(assign) is cst.Assign:
                found.update(name for t in assign.targets if (name := dotted_name(t.target)) is not None)  # type: ignore[attr-defined]
    return found


def _wrapped_models_saved_whole(analysis: ScriptAnalysis, call: cst.Call) -> list[cst.BaseExpression]:
    """The wrapped models a save pickles whole: its object (``torch.save(model, path)``) or the values of a dict
    written out (``{"net": model}``)."""
    if not call.args:
        return []
    saved = call.args[0].value
    values = [element.value for element in saved.elements if isinstance(element, cst.DictElement)] if isinstance(saved, cst.Dict) else [saved]
    return [value for value in values if isinstance(value, (cst.Name, cst.Attribute)) and analysis.wrapped_at(value) is not None]


#: What the report says of a wrapped model a kept ``torch.save`` now writes through ``runtime.unwrap``.
UNWRAPPED_WHOLE = "the whole model saved through runtime.unwrap (the file holds the model, not its wrapper)"
#: What a save on rank 0 of the DDP wrapper itself writes.
WRAPPER_PICKLED = (
    "torch.save pickles the DistributedDataParallel wrapper: the file loads only where a process group exists "
    "(torch.load elsewhere fails: \"Default process group has not been initialized\"); save the model itself (runtime.unwrap(model))"
)


#: The review line of a file the program reads back, where no barrier can go on a path every rank takes.
def _how_it_splits(analysis: ScriptAnalysis, condition: Condition) -> str:
    """What a report says of a test that may keep some ranks from a save: it reads the rank or a value computed
    from this process's share of the data, or the analysis cannot tell (a value read from a file or an object
    it does not follow: a step counter kept on ``self``, a checkpoint's epoch)."""
    test = code_of(condition.test)
    values = per_rank_values(analysis) if condition.kind is not Kind.RANK else None
    if condition.kind is Kind.RANK or (values is not None and values.mention(condition.test) is not None):
        return f"`{test}` may differ between ranks"
    return f"the analysis cannot tell whether `{test}` is the same on every rank"


UNSYNCHRONISED_READ = (
    "the file is read back later, so rank 0 alone should write it and the others wait for it, but no place every "
    "rank passes was found for a barrier (runtime.barrier()); save it on rank 0 and make the ranks wait before they read it"
)


def _loads(analysis: ScriptAnalysis) -> list[cst.Call]:
    """Every checkpoint load of the program: any module may read the file back (``main()`` loads what a
    callback saved)."""
    return [load for module in analysis.shared.analyses for load in module.calls_to(names.CHECKPOINT_LOADS)]


def _after_an_early_return(analysis: ScriptAnalysis, call: cst.Call) -> bool:
    """Whether a test that may differ between ranks returns from the save's function before it (``if
    os.path.isdir(root): return``), at any depth of the conditions around the save."""
    return any(c.early_exit and c.splits_ranks and leaves_function(c.owner) for c in rank_facts(analysis).conditions(call))


def _preparation_call(analysis: ScriptAnalysis, node: cst.CSTNode) -> cst.Call | None:
    """The one call of the function holding the node (a data preparation helper), when every rank runs it as
    a statement of its own whose value is not used (``prepare_shards()``), in this file, and the function
    runs no collective (guarded for rank 0, it must not make the others wait for it)."""
    function = analysis.enclosing_function(node)
    if function is None or analysis.enclosing_class(function) is not None:
        return None
    callers = analysis.callers_in_program(function)
    if len(callers) != 1 or not analysis.owns(callers[0]):
        return None
    call = callers[0]
    facts = rank_facts(analysis)
    stmt = analysis.statement(call)
    if facts.guard(call) is not None or not facts.collective_safe_at(stmt) or not isinstance(analysis.parent(stmt), (cst.IndentedBlock, cst.Module)):
        return None
    if not (isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 and isinstance(stmt.body[0], cst.Expr) and stmt.body[0].value is call):
        return None  # (``ds = load_all(prepare())``: the ranks would read before rank 0 is done)
    if any(type(n) is cst.Call and analysis.is_call_to(n, names.COLLECTIVES) for n in walk(function)):  # type: ignore[arg-type]
        return None
    # Every save of the helper after the early return: one before it would become runtime.save, whose
    # barrier rank 0 alone would then wait in.
    saves = [n for n in walk(function) if type(n) is cst.Call and analysis.is_call_to(n, CHECKPOINT_WRITERS)]  # type: ignore[arg-type]
    if not all(_after_an_early_return(analysis, save) for save in saves):  # type: ignore[arg-type]
        return None
    return call