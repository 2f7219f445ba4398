"""DDP012 unguarded-file-write."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

import libcst as cst

from . import names
from .analysis import ScriptAnalysis, call_method_name, dotted_name, keyword_argument, leaves_function, statements_of, walk
from .analysis.ranks import process_state_draw_in, rank_facts
from .analysis.script import assignment_targets, callee_name, into_memory
from .base import Change, Example, FixResult, FixSafety, Match, Options, Phase, Rule, Valid
from .edits import Edits, code_of, expression, statement, with_keyword
from .runtime_calls import runtime_name

FILE_HANDLER = frozenset({"logging.FileHandler", "logging.handlers.RotatingFileHandler", "logging.handlers.TimedRotatingFileHandler"})
#: Calls that, reached from a block this rule puts on rank 0, make that guard a deadlock.
BLOCKING = names.COLLECTIVES | names.RUNTIME_SAVE
BARRIER = frozenset({names.runtime("barrier")}) | names.distributed("barrier")
#: The module functions that open a file, whose mode decides whether they write (``open``, ``gzip.open``).
_OPENS = frozenset(name for name, kind in names.WRITERS.items() if kind == "open")
#: ``logging``'s one-call set-up, which opens its ``filename=`` at once.
LOG_CONFIGS = frozenset({"logging.basicConfig"})
#: ``Path.mkdir`` spelled through the class (``Path.mkdir(p)``, ``pathlib.Path.mkdir(p)``).
PATH_MKDIR = frozenset({f"pathlib.{cls}.mkdir" for cls in ("Path", "PosixPath", "WindowsPath")})


def _write_mode(call: cst.Call, mode_first: bool = False) -> bool:
    """Whether an ``open(...)`` call opens for writing (``w``, ``a``, ``x`` or ``+`` in a literal mode): the
    mode is the second argument of ``open(file, mode)``, the first of a path's (``Path(p).open(mode)``:
    ``mode_first``)."""
    mode = keyword_argument(call, "mode")
    if mode is None:
        positional = [a for a in call.args if a.keyword is None]
        at = 0 if mode_first else 1
        mode = positional[at] if len(positional) > at else None
    if mode is None or not isinstance(mode.value, cst.SimpleString):
        return False
    return any(flag in str(mode.value.evaluated_value) for flag in "wax+")


#: Exceptions a folder that exists already raises as (``FileExistsError`` and what it derives from).
_EXISTING_FOLDER_ERRORS = frozenset({"FileExistsError", "OSError", "IOError", "EnvironmentError", "Exception", "BaseException"})


def _existing_folder_caught(analysis: ScriptAnalysis, call: cst.Call) -> bool:
    """Whether a folder's creation runs in the body of a ``try`` that catches the error of a folder that exists
    already (``except OSError as e: if e.errno != errno.EEXIST: raise``, ``except FileExistsError: pass``, a bare
    ``except:``): the race between ranks is handled."""
    child: cst.CSTNode = call
    for ancestor in analysis.ancestors(call):
        if isinstance(ancestor, (cst.FunctionDef, cst.ClassDef)):
            return False
        if isinstance(ancestor, cst.Try) and child is ancestor.body:
            for handler in ancestor.handlers:
                caught = handler.type
                names_ = [dotted_name(e.value) for e in caught.elements] if isinstance(caught, cst.Tuple) else [dotted_name(caught) if caught is not None else None]
                if caught is None or any((name or "").split(".")[-1] in _EXISTING_FOLDER_ERRORS for name in names_):
                    return True
        child = ancestor
    return False


def _is_false(expr: cst.BaseExpression | None) -> bool:
    return expr is None or (isinstance(expr, cst.Name) and expr.value == "False")


def _imported_root(analysis: ScriptAnalysis, node: cst.CSTNode) -> bool:
    """Whether the root name of a name or attribute chain is bound by an import where it is used (in an
    enclosing function or at module level): ``utils`` in ``utils.mkdir``, ``os`` in ``os.path``.

    TODO(analysis): a query of the analysis (``ModuleIndex``'s import table by scope) belongs there.
    """
    dotted = dotted_name(node)
    if dotted is None:
        return False
    owner = analysis.shared.analysis_of(node) or analysis
    root = dotted.partition(".")[0]
    imports = owner.index.imports
    for ancestor in owner.ancestors(node):
        if isinstance(ancestor, cst.FunctionDef) and root in imports.get(ancestor, {}):
            return True
    return root in imports.get(None, {})


def _path_mkdir(analysis: ScriptAnalysis, call: cst.Call) -> bool:
    """Whether an ``x.mkdir(...)`` call is ``pathlib.Path.mkdir`` (which takes ``exist_ok``), by what it
    resolves to: not a function or method of the program (``utils.mkdir(p)``, ``self.mkdir(p)``: the
    user's helper, whose own folder creation the rule finds in its body), not a function of a module
    (``utils.mkdir``, ``some_lib.mkdir``: an import whose name no value of the program flows into), but a
    method on an object (``Path(p).mkdir()``, ``out_dir.mkdir()``, ``args.output_dir.mkdir()``)."""
    if analysis.call_target(call) is not None:
        return False
    return analysis.is_call_to(call, PATH_MKDIR) or _on_an_object(analysis, call)


#: The classes of ``pathlib`` whose objects are paths, and the methods of a path that give a path.
_PATH_CLASSES = frozenset(f"pathlib.{cls}" for cls in ("Path", "PurePath", "PosixPath", "WindowsPath"))
_PATH_METHODS = frozenset({"with_suffix", "with_name", "with_stem", "joinpath", "resolve", "absolute", "expanduser"})


def _a_path(analysis: ScriptAnalysis, expr: cst.BaseExpression, depth: int = 3) -> bool:
    """Whether an expression holds a ``pathlib`` path: ``Path(p)``, ``out_dir / "log.txt"`` of a path, a path's
    ``with_suffix(...)`` or ``.parent``, or a name assigned such a value (a few assignments deep)."""
    if isinstance(expr, cst.Call):
        if analysis.is_call_to(expr, _PATH_CLASSES):
            return True
        return call_method_name(expr) in _PATH_METHODS and _a_path(analysis, expr.func.value, depth)  # type: ignore[attr-defined]
    if isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, cst.Divide):
        return _a_path(analysis, expr.left, depth)
    if isinstance(expr, cst.Attribute) and expr.attr.value == "parent":
        return _a_path(analysis, expr.value, depth)
    name = dotted_name(expr)
    if name is None or depth <= 0:
        return False
    return any(_a_path(analysis, value, depth - 1) for value in analysis.flows_into(expr, name))  # type: ignore[arg-type]


def _on_an_object(analysis: ScriptAnalysis, call: cst.Call) -> bool:
    """Whether an ``x.method(...)`` call is a method of an object, not a function of an imported module (``out_dir.
    mkdir()``, ``Path(p).open("w")``; not ``utils.mkdir(p)``, ``Image.open(p)``)."""
    receiver = call.func.value if isinstance(call.func, cst.Attribute) else None
    if receiver is None:
        return False
    return not (_imported_root(analysis, receiver) and not analysis.origins(receiver))


def _expression_line(analysis: ScriptAnalysis, call: cst.Call) -> cst.SimpleStatementLine | None:
    """The statement line when it holds nothing but this call, as a statement or assigned to names
    (``fig.savefig(p)``, ``train_set = MNIST(..., download=True)``), in an indented block or the module."""
    small = analysis.parent(call)
    if isinstance(small, cst.Assign) and small.value is call:
        pass
    elif not (isinstance(small, cst.Expr) and small.value is call):
        return None
    line = analysis.parent(small)
    if isinstance(line, cst.SimpleStatementLine) and len(line.body) == 1 and isinstance(analysis.parent(line), (cst.IndentedBlock, cst.Module)):
        return line
    return None


@dataclass(frozen=True)
class _Case:
    """One write: the call, its kind (``names.WRITERS``, plus ``handler``), and what the fix acts on."""

    call: cst.Call
    kind: str
    block: cst.CSTNode | None = None  # the statement the fix guards; ``None``: report only


class UnguardedFileWrite(Rule):
    """Write files, event logs and downloads once: on rank 0, never N times at once.

    What it finds, in training code, outside a condition that flows from the rank (``if rank == 0:``,
    ``if master_process:``, a helper's ``is_main_process()``): every writer of the one table in
    ``names.WRITERS``: ``open(path, "w")`` (also ``"a"``, ``"x"``, ``"wb"``, ...), ``os.mkdir`` /
    ``os.makedirs`` / ``Path.mkdir`` without ``exist_ok=True`` (by what the call resolves to: a
    ``mkdir`` helper of the program, ``utils.mkdir(out)``, is not one, the folder creation in its body is), ``torchvision.utils.save_image``,
    ``savefig`` (``plt`` and figures), ``np.save`` / ``savetxt`` / ``savez``, ``pickle.dump`` / ``json.dump``
    / ``csv`` writers on a file object of their own, ``shutil.copy*`` / ``move``, ``Path.write_text`` /
    ``write_bytes``, a PIL image's ``save``, ``save_pretrained``; ``SummaryWriter(...)``; ``wandb.init``;
    logging ``FileHandler`` objects opened at start-up; and downloads (``download=True`` data sets,
    ``pretrained=True``, ``torch.hub``, ``from_pretrained``). ``torch.save`` is DDP007's.

    Why it is a problem: every process runs the same code. ``if not os.path.isdir(p): os.mkdir(p)`` is a
    race: one rank creates the folder between another's check and its ``mkdir``, which then dies with
    ``FileExistsError``. Files written on every rank are written N times at once (garbled or truncated
    output on shared storage); N ``SummaryWriter`` objects write N event files into one log folder (TensorBoard
    shows every curve N times); N ``wandb`` runs appear for one job; N processes downloading the same
    archive into one folder corrupt it.

    What the fix does: ``exist_ok=True`` on folder creation (safe on every rank); a writing statement or
    ``with open(...)`` block goes under ``if runtime.is_main_process():`` when nothing inside it waits for
    other ranks (otherwise it is reported for a human); ``SummaryWriter(...)`` becomes ``SummaryWriter(...)
    if runtime.is_main_process() else None`` and each statement that uses it runs under ``if writer is not
    None:``; ``wandb.init`` gets ``mode="disabled"`` off rank 0 (its ``log`` calls then do nothing there);
    a download runs on rank 0 first while the others wait: ``if not runtime.is_main_process():
    runtime.barrier()`` before and ``if runtime.is_main_process(): runtime.barrier()`` after, only where
    every rank passes (proven by the rank analysis; otherwise a TODO); ``FileHandler`` gets
    ``delay=True``, so it opens its file only when it first emits, which with
    ``runtime.silence_non_main_logging()`` happens on rank 0 alone.

    Fix safety: rank 0 writes what every rank wrote before (the same content when the ranks computed the
    same thing); per-rank files (a name that contains the rank) are left alone.
    """

    code = "DDP012"
    name = "unguarded-file-write"
    fix_safety = FixSafety.UNSAFE
    phase = Phase.CHECKPOINTS
    triggers = (
        "mkdir", "makedirs", "open", "FileHandler", "save", "dump", "write", "writer", "Writer", "copy", "move",
        "rmtree", "remove", "unlink", "rename", "replace", "download", "pretrained", "hub", "wandb", "urlretrieve",
        "basicConfig",
    )
    requires = (*names.TRAINING_STEP_WORDS, "DataParallel")
    needs_names = (names.TRAINING_CODE_NAMES,)
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
        Example(
            before="""\
import os
from pathlib import Path


def mkdir(path):
    os.makedirs(path)


mkdir(args.output_dir)
Path(args.log_dir).mkdir(parents=True)
loss.backward()
""",
            after="""\
import os
from pathlib import Path


def mkdir(path):
    os.makedirs(path, exist_ok=True)


mkdir(args.output_dir)
Path(args.log_dir).mkdir(parents=True, exist_ok=True)
loss.backward()
""",
        ),
        # Keeping the newest checkpoint: the others list the folder while rank 0 deletes from it (a trial's
        # FileNotFoundError on rank 1, 5 runs in 5).
        Example(
            before="""\
import glob
import os

for epoch in range(epochs):
    for x, y in loader:
        criterion(model(x), y).backward()
    old = sorted(glob.glob("ckpt/*.pt"), key=os.path.getmtime)
    for f in old[:-1]:
        os.remove(f)
""",
            after="""\
import glob
import os

for epoch in range(epochs):
    for x, y in loader:
        criterion(model(x), y).backward()
    old = sorted(glob.glob("ckpt/*.pt"), key=os.path.getmtime)
    for f in old[:-1]:
        # TODO(ddp-migrate): list the old files and delete them on rank 0 only (one rank-0 block around both)
        os.remove(f)
""",
        ),
        Valid(
            """\
import os

import utils


def mkdir(path):
    os.makedirs(path, exist_ok=True)


class Run:
    def mkdir(self, path):
        os.makedirs(path, exist_ok=True)

    def start(self, out):
        self.mkdir(out)


mkdir(out)
utils.mkdir(out)
Run().start(out)
loss.backward()
"""
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


    # ------------------------------------------------------------------------------ what is written

    @staticmethod
    def _writer(analysis: ScriptAnalysis, call: cst.Call) -> str | None:
        """The kind of writer a call is (``names.WRITERS``), ``handler`` for a logging file handler."""
        qualified = analysis.qualified_names(call.func)
        kind = names.writer_kind(qualified)
        if kind is None and qualified & FILE_HANDLER:
            return "handler"
        if kind is None:
            method = call_method_name(call)
            receiver = call.func.value if isinstance(call.func, cst.Attribute) else None
            if method == "open":
                # ``Path(p).open("wt")``: a path's (not ``Image.open(p)``, a module's, nor ``zf.open("train.csv")``)
                on_path = analysis.call_target(call) is None and _a_path(analysis, call.func.value)  # type: ignore[union-attr]
                return "open" if on_path and _write_mode(call, mode_first=True) else None
            if method in names.WRITER_METHODS:
                if analysis.call_target(call) is not None:
                    return None  # a function or method of the program: its body's writes are found there
                if method == "mkdir" and not _path_mkdir(analysis, call):
                    return None
                kind = names.WRITER_METHODS[method]
            elif method == "save" and receiver is not None and any(
                isinstance(o, cst.Call) and analysis.is_call_to(o, names.PIL_IMAGES | names.TORCHSCRIPT_MODULES) for o in analysis.origins(receiver)
            ):
                kind = "file"
            elif any(
                a.keyword is not None and a.keyword.value in names.DOWNLOAD_KEYWORDS and isinstance(a.value, cst.Name) and a.value.value == "True"
                for a in call.args
            ):
                kind = "download"
        if kind == "open" and (not _write_mode(call) or (bool(call.args) and "os.devnull" in analysis.qualified_names(call.args[0].value))):
            return None  # (``open(os.devnull, "w")``: a sink for a library's prints, no file)
        if kind == "handle" and qualified & {"yaml.dump", "yaml.safe_dump"} and len([a for a in call.args if a.keyword is None]) < 2 and keyword_argument(call, "stream") is None:
            return None  # ``yaml.safe_dump(args.__dict__)`` with no stream: the text comes back, nothing is written
        if kind == "file" and into_memory(analysis, call):
            return None  # ``torch.jit.save(m, buffer)`` of ``buffer = io.BytesIO()``: no file
        return None if kind == "checkpoint" else kind

    def _cases(self, analysis: ScriptAnalysis) -> Iterator[_Case]:
        if not analysis.is_training_code:
            return
        facts = rank_facts(analysis)
        blocking = analysis.calls_to(BLOCKING)
        write_opens = [c for c in analysis.calls if (callee_name(c) == "open" or analysis.is_call_to(c, _OPENS)) and self._writer(analysis, c) == "open"]
        for call in analysis.calls:
            kind = self._writer(analysis, call)
            if kind is None and keyword_argument(call, "filename") is not None and analysis.is_call_to(call, LOG_CONFIGS):
                # ``logging.basicConfig(filename="run.log", filemode="w")``: every rank opens (and truncates)
                # the file at once; configured on rank 0 only, the others log nothing below a warning.
                kind = "file"
            if kind is None or facts.guard(call) is not None:
                continue
            if kind != "folder" and any(facts.is_rank_dependent(a.value) for a in call.args if a.keyword is None or a.keyword.value != "mode"):
                continue  # a file of each rank's own (its name or contents carry the rank)
            if kind == "folder":
                if _existing_folder_caught(analysis, call):
                    continue  # ``try: os.makedirs(p) except OSError as e: if e.errno != errno.EEXIST: raise``
                exist_ok = keyword_argument(call, "exist_ok")
                value = exist_ok.value if exist_ok is not None else None
                if _is_false(value):
                    yield _Case(call, kind, call)
                elif not (isinstance(value, cst.Name) and value.value == "True") and not (isinstance(value, cst.Integer) and value.evaluated_value):
                    # ``exist_ok=run_id == ""``: false on some runs, when each rank's mkdir races the others'
                    yield _Case(call, "folder-sometimes", None)
            elif kind == "handler":
                if keyword_argument(call, "delay") is None:
                    yield _Case(call, kind, call)
            elif kind == "open":
                item = analysis.parent(call)
                block = analysis.parent(item) if isinstance(item, cst.WithItem) else None
                # (a block that trains stays every rank's: ``with open(log, "w") as f:`` around the epoch loop)
                trains = [*analysis.backward_calls, *analysis.optimizer_step_calls]
                safe = (
                    isinstance(block, cst.With)
                    and len(block.items) == 1
                    and not analysis.reaches(block, blocking)
                    and not analysis.reaches(block, trains)
                )
                if safe and _state_set_in(analysis, block):  # type: ignore[arg-type]
                    yield _Case(call, "open-with-state", None)  # (rank 0 alone would go on updating it)
                    continue
                if safe and process_state_draw_in(analysis, block) is not None:  # type: ignore[arg-type]
                    yield _Case(call, "open-with-draw", None)
                    continue
                yield _Case(call, kind, block if safe else None)
            elif kind in ("file", "handle"):
                if kind == "handle" and self._on_open_file(analysis, call, write_opens):
                    continue
                if _removes_what_every_rank_lists(analysis, call):
                    yield _Case(call, "remove-listed", None)
                    continue
                line = _expression_line(analysis, call)
                plain = line is not None and isinstance(line.body[0], cst.Expr) and not analysis.reaches(line, blocking)
                yield _Case(call, "file", line if plain else None)
            elif kind == "event-log":
                assign = analysis.parent(call)
                ok = isinstance(assign, cst.Assign) and assign.value is call and len(assign.targets) == 1 and dotted_name(assign.targets[0].target)
                yield _Case(call, kind, assign if ok else None)
            elif kind == "tracker":
                mode = keyword_argument(call, "mode")
                if mode is None or not facts.is_rank_dependent(mode.value):
                    yield _Case(call, kind, call)
            elif kind == "download":
                line = _expression_line(analysis, call)
                if line is not None and self._bracketed(analysis, line):
                    continue
                safe = line is not None and facts.collective_safe_at(line) and not analysis.reaches(line, blocking)
                yield _Case(call, kind, line if safe else None)
        yield from self._unwaited_reads(analysis)

    def _unwaited_reads(self, analysis: ScriptAnalysis) -> Iterator[_Case]:
        """Reads, on every rank, of a file that rank 0 alone writes elsewhere in the program (a checkpoint
        helper's ``if is_best: shutil.copyfile(path, "model_best.pth")`` guarded to rank 0, read back by
        ``torch.load("model_best.pth")`` in ``main``) with no barrier before them in their function: the
        other ranks read a missing or half-written file. Paths are matched by their literal text."""
        reads = [(call, _literal_path(analysis, call)) for call in _file_reads(analysis)]
        if not reads:
            return
        facts = rank_facts(analysis)
        written: dict[str, list[tuple[ScriptAnalysis, cst.Call]]] = {}
        unnamed: list[tuple[ScriptAnalysis, cst.Call]] = []  # rank 0's writes of a path no literal spells
        for module in analysis.shared.analyses:
            module_facts = rank_facts(module)
            for call in module.calls:
                writer = self._writer(module, call)
                if (writer is None and not module.is_call_to(call, names.TORCH_SAVE)) or module_facts.guard(call) is None:
                    continue
                literal = False
                for arg in call.args:
                    if (text := _literal(module, arg.value)) is not None:
                        written.setdefault(text, []).append((module, call))
                        literal = True
                if not literal and writer in (None, "open", "file") and not module.is_call_to(call, _REMOVALS):
                    unnamed.append((module, call))
        waits = [(module, c) for module in analysis.shared.analyses for c in module.calls_to(BARRIER | names.RUNTIME_SAVE)]
        for call, path in reads:
            if facts.guard(call) is not None:
                continue
            if path in written:
                # (a resume's read before the training loop that saves: no write of this run comes first)
                before = [(module, write) for module, write in written[path] if analysis.may_run_before(write, call)]
                if before and not self._waited_before(analysis, call, before, waits):
                    stmt = analysis.statement(call)
                    yield _Case(call, "read", stmt if facts.collective_safe_at(stmt) else None)
                continue
            # A path the analysis cannot spell (``os.path.join(root, f"shard-{s}.pt")`` written under ``if rank ==
            # 0:``, read back through ``glob``): the same kind of file written by rank 0 earlier in the run.
            if not unnamed:
                continue
            family = _family(analysis, call)
            earlier = [(m, w) for m, w in unnamed if _family(m, w) == family and analysis.runs_before(w, call) and analysis.may_run_before(w, call)]
            if earlier and not self._waited_before(analysis, call, earlier, waits):
                stmt = analysis.statement(call)
                yield _Case(call, "read-after", stmt if facts.collective_safe_at(stmt) else None)

    @staticmethod
    def _waited_before(
        analysis: ScriptAnalysis,
        read: cst.Call,
        writes: list[tuple[ScriptAnalysis, cst.Call]],
        waits: list[tuple[ScriptAnalysis, cst.Call]],
    ) -> bool:
        """Whether every rank passes one of the program's ``waits`` (a ``barrier()``, or a ``runtime.save``,
        which ends with one) between rank 0's writes and the read: before the read in its function, or after
        each write in the writer's function (the best-model save of ``test(epoch)`` that waits after its
        condition)."""
        function = analysis.enclosing_function(read)
        if any(module is analysis and module.enclosing_function(c) is function and module.comes_before(c, read) for module, c in waits):
            return True
        if all(any(analysis.runs_before(write, c) and analysis.runs_before(c, read) for _, c in waits) for _, write in writes):
            return True  # a barrier every rank passes between them, up the calls (after ``prepare()`` in ``main``)
        return all(
            any(
                module is home and home.enclosing_function(c) is home.enclosing_function(write) and home.comes_before(write, c)
                for module, c in waits
            )
            for home, write in writes
        )

    @staticmethod
    def _on_open_file(analysis: ScriptAnalysis, call: cst.Call, write_opens: list[cst.Call]) -> bool:
        """Whether a ``json.dump``-style call writes to a file an ``open(..., "w")`` of its own made (that
        ``open`` is the write to guard)."""
        for ancestor in analysis.ancestors(call):
            if isinstance(ancestor, cst.With) and any(analysis.is_inside(o, item) for item in ancestor.items for o in write_opens):
                return True
        for arg in call.args:
            if any(o in write_opens for o in analysis.origins(arg.value)) or any(analysis.is_inside(o, arg.value) for o in write_opens):
                return True
        return False

    @staticmethod
    def _bracketed(analysis: ScriptAnalysis, line: cst.SimpleStatementLine) -> bool:
        """Whether a download statement already runs between ``if not main: barrier()`` and
        ``if main: barrier()`` (this fix's, or the classic ``local_rank`` idiom)."""
        facts = rank_facts(analysis)
        body = list(statements_of(analysis.parent(line)))  # type: ignore[arg-type]
        index = body.index(line) - 1
        while index >= 0 and isinstance(body[index], cst.SimpleStatementLine):
            stmt = body[index]
            if not any(isinstance(n, cst.Call) and UnguardedFileWrite._writer(analysis, n) == "download" for n in walk(stmt)):
                break
            index -= 1
        if index < 0 or not isinstance(body[index], cst.If):
            return False
        before = body[index]
        return facts.zero_side(before.test) is False and any(
            isinstance(n, cst.Call) and analysis.is_call_to(n, BARRIER) for n in walk(before.body)
        )

    def matches(self, analysis: ScriptAnalysis) -> Iterator[Match]:
        messages = {
            "folder": "every rank creates this folder: a race (FileExistsError); create it with exist_ok=True",
            "folder-sometimes": (
                "every rank creates this folder, and exist_ok may be False: a race (FileExistsError on every rank but "
                "one); create it on rank 0 only, the others waiting at a barrier, from a name every rank agrees on"
            ),
            "handler": "every rank opens this log file at start-up: open it lazily (delay=True)",
            "open": "every rank writes this file: write it on rank 0 only",
            "open-with-state": (
                "every rank writes this file: write it on rank 0 only, but the with block also sets values the "
                "program reads later, which every rank needs: move them out of the block, then guard it"
            ),
            "open-with-draw": (
                "every rank writes this file: write it on rank 0 only, but the with block also draws from a process-wide "
                "random state (torch.randn, random, numpy): on rank 0 alone that draw moves its random stream ahead of "
                "the others', and every later draw (dropout, stochastic depth, augmentation) differs between the ranks; "
                "make the draw before the block on every rank, then guard the block"
            ),
            "file": "every rank writes this file: write it on rank 0 only",
            "remove-listed": (
                "every rank deletes files it lists from the folder right before (glob, listdir, getmtime): rank 0 alone "
                "must delete, but then the others may list a file rank 0 has just deleted (FileNotFoundError); list "
                "and delete on rank 0 only (one `if runtime.is_main_process():` around both)"
            ),
            "event-log": "every rank creates a SummaryWriter (N event files in one log folder): create it on rank 0 only",
            "tracker": "every rank starts a wandb run: disable it off rank 0 (mode=\"disabled\")",
            "download": "every rank downloads into the same folder at once: download on rank 0 first while the others wait",
            "read": "every rank reads a file that only rank 0 writes, with no barrier before: a missing or half-written file; wait for rank 0 first",
            "read-after": (
                "every rank reads a file after rank 0 alone wrote files of its kind (under a rank test, earlier in the "
                "run), with no barrier between: a missing or half-written file; wait for rank 0 first"
            ),
        }
        for case in self._cases(analysis):
            yield Match(case.call, messages[case.kind], fixable=case.block is not None)

    # --------------------------------------------------------------------------------------- the fix

    def fix(self, analysis: ScriptAnalysis, options: Options) -> FixResult | None:
        edits = Edits(analysis)
        downloads: list[cst.SimpleStatementLine] = []
        barriers: set[cst.CSTNode] = set()
        cases = list(self._cases(analysis))
        # Every block this fix makes rank 0's: no barrier may go inside one (nor in a function run there).
        guarded = [case.block for case in cases if case.kind in ("open", "file") and case.block is not None]
        for case in cases:
            call, kind = case.call, case.kind
            if case.block is None:
                what = {
                    "read": "wait for rank 0's write of this file before reading it (runtime.barrier() on a path every rank takes)",
                    "folder-sometimes": (
                        "every rank creates this folder and exist_ok may be False (FileExistsError): create it on rank 0 "
                        "only, then runtime.barrier() on a path every rank takes"
                    ),
                    "read-after": "wait for rank 0's writes before reading this file (runtime.barrier() on a path every rank takes)",
                    "download": "download on rank 0 first while the others wait at a barrier on a path every rank takes",
                    "open-with-state": (
                        "write this file on rank 0 only; the block also sets values every rank needs "
                        f"({', '.join(_state_set_in(analysis, analysis.statement(call)))}): move them out of it first"
                    ),
                    "open-with-draw": (
                        "write this file on rank 0 only; the block also draws from a process-wide random state, which every "
                        "rank must do alike (rank 0's stream would run ahead): make the draw before the block, then guard it"
                    ),
                    "event-log": "create the SummaryWriter on rank 0 only, and use it only there",
                    "remove-listed": "list the old files and delete them on rank 0 only (one rank-0 block around both)",
                }.get(kind, "write this file on rank 0 only" + (" (the block waits for other ranks)" if isinstance(analysis.parent(analysis.parent(call)), cst.With) else ""))
                edits.todo(analysis.statement(call), what)
                continue
            if kind == "folder":
                message = self._fix_folder(analysis, edits, call)
            elif kind == "handler":
                edits.replace(call, with_keyword(call, "delay", cst.Name("True")))
                message = "log file opened lazily (delay=True), so only the rank that logs opens it"
            elif kind in ("open", "file"):
                rt = runtime_name(analysis, edits)
                taken = _take_first(analysis, edits, case.call, case.block) if kind == "file" else []  # type: ignore[arg-type]
                _guard_statement(edits, case.block, f"{rt}.is_main_process()")  # type: ignore[arg-type]
                message = "file written on rank 0 only"
                if taken:
                    message += f" (every rank still takes {', '.join(taken)} first)"
                waits = self._wait_after(analysis, case.block, guarded)  # type: ignore[arg-type]
                for point in waits:
                    if point not in barriers:
                        barriers.add(point)
                        edits.insert_after(point, statement(f"{rt}.barrier()"))
                if waits:
                    message += "; every rank waits for it before reading on"
            elif kind in ("read", "read-after"):
                rt = runtime_name(analysis, edits)
                edits.insert_before(case.block, statement(f"{rt}.barrier()"))  # type: ignore[arg-type]
                message = "every rank waits for rank 0's write before reading the file"
            elif kind == "event-log":
                message = self._fix_event_log(analysis, edits, case)
            elif kind == "tracker":
                rt = runtime_name(analysis, edits)
                mode = keyword_argument(call, "mode")
                if mode is None:
                    edits.replace(call, with_keyword(call, "mode", expression(f'None if {rt}.is_main_process() else "disabled"')))
                else:
                    edits.replace(mode.value, expression(f'({code_of(mode.value)}) if {rt}.is_main_process() else "disabled"'))
                message = "wandb run disabled off rank 0"
            else:
                downloads.append(case.block)  # type: ignore[arg-type]
                continue
            edits.changes.append(Change(self.code, analysis.line(call), message))
        self._fix_downloads(analysis, edits, downloads)
        return edits.apply(analysis.module) if edits else None

    @staticmethod
    def _wait_after(analysis: ScriptAnalysis, block: cst.BaseStatement, guarded: list[cst.BaseStatement]) -> list[cst.BaseStatement]:
        """Where every rank should wait for a file rank 0 writes once (``prepare()`` writing the data set or a
        vocabulary that the next lines read on every rank): after the write, or after the outermost test
        around it that may differ between ranks (``if not os.path.exists(path):``), or, past an early
        ``return`` on such a test, after the calls of its function in this file. None for a write in a loop
        (a log line per epoch: nothing reads it back), nor where not every rank gets (a barrier there would
        wait forever)."""
        if not _reads_files_after(analysis, block):
            return []
        facts = rank_facts(analysis)
        splits = [condition for condition in facts.conditions(block) if condition.splits_ranks]
        point = facts.rejoin_point(block) if splits else block
        if point is not None:
            points = [point]
        elif any(condition.early_exit and leaves_function(condition.owner) for condition in splits):
            function = analysis.enclosing_function(block)
            points = [analysis.statement(call) for call in analysis.callers_of(function)] if function is not None else []
        else:
            points = []
        return [
            found
            for found in points
            if analysis.owns(found)
            and analysis.nearest_loop(found) is None
            and facts.collective_safe_at(found)
            and _runs_once_on_every_rank(analysis, found, guarded)
        ]

    @staticmethod
    def _fix_folder(analysis: ScriptAnalysis, edits: Edits, call: cst.Call) -> str:
        func = call.func
        if isinstance(func, cst.Attribute) and func.attr.value == "mkdir" and analysis.is_call_to(call, {"os.mkdir"}):
            func = func.with_changes(attr=cst.Name("makedirs"))
        elif isinstance(func, cst.Name) and analysis.is_call_to(call, {"os.mkdir"}):
            edits.add_import("os")
            func = expression("os.makedirs")
        existing = keyword_argument(call, "exist_ok")
        if existing is not None:
            new_args = [a.with_changes(value=cst.Name("True")) if a is existing else a for a in call.args]
            edits.replace(call, call.with_changes(func=func, args=new_args))
        else:
            edits.replace(call, with_keyword(call.with_changes(func=func), "exist_ok", cst.Name("True")))
        return "folder created with exist_ok=True"

    @staticmethod
    def _fix_event_log(analysis: ScriptAnalysis, edits: Edits, case: _Case) -> str:
        rt = runtime_name(analysis, edits)
        call = case.call
        edits.replace(call, lambda updated: cst.IfExp(
            test=expression(f"{rt}.is_main_process()"), body=updated, orelse=cst.Name("None"),
            whitespace_before_if=cst.SimpleWhitespace(" "), whitespace_after_if=cst.SimpleWhitespace(" "),
            whitespace_before_else=cst.SimpleWhitespace(" "), whitespace_after_else=cst.SimpleWhitespace(" "),
        ))
        facts = rank_facts(analysis)
        for use in analysis.calls:
            receiver = use.func.value if isinstance(use.func, cst.Attribute) else None
            if receiver is None or call not in analysis.origins(receiver) or facts.guard(use) is not None:
                continue
            line = _expression_line(analysis, use)
            name = dotted_name(receiver)
            if line is None or name is None or not isinstance(line.body[0], cst.Expr):
                edits.todo(analysis.statement(use), "the SummaryWriter is None off rank 0: use it on rank 0 only")
                continue
            _guard_statement(edits, line, f"{name} is not None")
        return "SummaryWriter created on rank 0 only (None elsewhere), its uses guarded"

    def _fix_downloads(self, analysis: ScriptAnalysis, edits: Edits, lines: list[cst.SimpleStatementLine]) -> None:
        if not lines:
            return
        rt = runtime_name(analysis, edits)
        chosen = set(lines)
        done: set[cst.CSTNode] = set()
        for line in lines:
            if line in done:
                continue
            body = list(statements_of(analysis.parent(line)))  # type: ignore[arg-type]
            start = end = body.index(line)
            while end + 1 < len(body) and body[end + 1] in chosen:
                end += 1
            done.update(body[start : end + 1])
            edits.insert_before(body[start], statement(f"if not {rt}.is_main_process():\n    {rt}.barrier()\n"))
            edits.insert_after(body[end], statement(f"if {rt}.is_main_process():\n    {rt}.barrier()\n"))
            for stmt in body[start : end + 1]:
                edits.changes.append(Change(self.code, analysis.line(stmt), "downloaded on rank 0 first; the other ranks wait, then read it"))



#: Methods (and ``next``) whose call changes the object it reads: a guard must not keep them from the other ranks.
_TAKING_METHODS = frozenset({"pop", "popleft", "popitem"})


def _takes(call: cst.Call) -> bool:
    """Whether a call takes a value out of an object (``kept.pop(0)``, ``queue.popleft()``, ``next(it)``)."""
    return call_method_name(call) in _TAKING_METHODS or (type(call.func) is cst.Name and call.func.value == "next")


def _take_first(analysis: ScriptAnalysis, edits: Edits, call: cst.Call, stmt: cst.CSTNode) -> list[str]:
    """Before a write that goes under a rank-0 guard, take out of their objects the arguments that take a
    value (``os.remove(kept.pop(0))``: ``popped = kept.pop(0)`` on every rank, then the guarded
    ``os.remove(popped)``), so every rank's list stays the same. The taking calls, as written."""
    taken: list[str] = []
    chosen: list[str] = []
    for arg in call.args:
        if any(type(n) is cst.Call and _takes(n) for n in walk(arg.value)):  # type: ignore[arg-type]
            name = analysis.free_name(*(c for c in ("popped", "taken", "popped_2", "taken_2", "popped_3") if c not in chosen))
            chosen.append(name)
            edits.insert_before(stmt, statement(f"{name} = {code_of(arg.value).strip()}"))  # type: ignore[arg-type]
            edits.replace(arg.value, cst.Name(name))
            taken.append(code_of(arg.value).strip())
    return taken


#: Methods that change the container they are called on.
_CHANGING_METHODS = frozenset({"append", "extend", "insert", "update", "add", "pop", "popleft", "appendleft", "remove", "clear", "setdefault"})


def _state_set_in(analysis: ScriptAnalysis, block: cst.CSTNode) -> list[str]:
    """The names a ``with`` block assigns that the program reads outside it (``best``, ``bad`` of a log
    block that also counts patience), and attributes or items it assigns (``self.best``, ``hist[k]``): state
    every rank needs, which a rank-0 guard around the block would keep on rank 0."""
    found: list[str] = []
    bound: set[str] = set()
    for node in walk(block):
        for target in assignment_targets(node):
            for part in walk(target):
                if isinstance(part, (cst.Attribute, cst.Subscript)) and part is target:
                    found.append(code_of(part).strip())
                elif isinstance(part, cst.Name) and not isinstance(analysis.parent(part), (cst.Attribute, cst.Subscript)):
                    bound.add(part.value)
        if type(node) is cst.Call and call_method_name(node) in _CHANGING_METHODS and type(node.func.value) is cst.Name:  # type: ignore[arg-type, attr-defined]
            bound.add(node.func.value.value)  # ``history.append(total)``: the list changes like an assignment  # type: ignore[attr-defined]
    if not bound:
        return found
    scope = analysis.enclosing_function(block) or analysis.module
    read_outside = {
        n.value  # type: ignore[attr-defined]
        for n in walk(scope)
        if type(n) is cst.Name and n.value in bound and not isinstance(analysis.parent(n), cst.AssignTarget)  # type: ignore[attr-defined]
        and not analysis.is_inside(n, block)
    }
    return found + sorted(read_outside)


def _guard_statement(edits: Edits, stmt: cst.CSTNode, test: str) -> None:
    """Put a statement under ``if <test>:``, keeping its comments and blank lines above the ``if``; the same
    guard already inside it (``torch.save(model, f)`` of the ``with open(...)`` block, guarded by DDP007) is
    dropped: under the outer one it always holds."""
    guard = cst.If(test=expression(test), body=cst.IndentedBlock(body=[]))
    edits.replace(stmt, lambda updated, guard=guard: guard.with_changes(
        leading_lines=updated.leading_lines,
        body=cst.IndentedBlock(body=[updated.with_changes(leading_lines=[]).visit(_SameGuardsDropped(test))]),
    ))


class _SameGuardsDropped(cst.CSTTransformer):
    """Replaces each ``if <test>:`` without ``else`` by its body (not inside functions or classes, which may
    run elsewhere)."""

    def __init__(self, test: str) -> None:
        super().__init__()
        self.test = test

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        return False

    def visit_ClassDef(self, node: cst.ClassDef) -> bool:
        return False

    def leave_If(self, original_node: cst.If, updated_node: cst.If) -> cst.BaseStatement | cst.FlattenSentinel[cst.BaseStatement]:
        body = updated_node.body
        if updated_node.orelse is not None or code_of(updated_node.test) != self.test or not isinstance(body, cst.IndentedBlock) or not body.body:
            return updated_node
        if body.header.comment is not None or body.footer:
            return updated_node  # (a comment of the user's on the guard's line, or closing its block: kept)
        first, *rest = body.body
        return cst.FlattenSentinel([first.with_changes(leading_lines=[*updated_node.leading_lines, *first.leading_lines]), *rest])


def _runs_once_on_every_rank(analysis: ScriptAnalysis, point: cst.CSTNode, guarded: list[cst.BaseStatement]) -> bool:
    """Whether the statement runs once per run on every rank, once this fix has guarded its blocks: it sits
    in none of them, and its function (if any) is called only from this module, outside loops and outside
    those blocks, from places that run once themselves (three calls up)."""
    seen: set[cst.FunctionDef] = set()
    nodes = [point]
    for _ in range(4):
        callers: list[cst.CSTNode] = []
        for node in nodes:
            if any(node is not block and analysis.is_inside(node, block) for block in guarded):
                return False
            function = analysis.enclosing_function(node)
            if function is None or function in seen:
                continue
            seen.add(function)
            calls = analysis.callers_in_program(function)
            if any(not analysis.owns(call) or analysis.nearest_loop(call) is not None for call in calls):
                return False
            callers.extend(calls)
        if not callers:
            return True
        nodes = callers
    return False


#: Calls that read a file back (``open`` counts when its mode reads).
FILE_READERS = frozenset(
    {
        "json.load", "numpy.load", "numpy.loadtxt", "numpy.genfromtxt", "pandas.read_csv", "pandas.read_json",
        "pandas.read_parquet", "pickle.load", "torch.load", "yaml.safe_load", "csv.reader", "csv.DictReader",
        "PIL.Image.open",
    }
)


def _reads_files_after(analysis: ScriptAnalysis, block: cst.BaseStatement) -> bool:
    """Whether the program reads some file after the block may have written one: a reading call in any
    module (``open(path)``, ``json.load``, ``np.load``, ``pd.read_csv``...) outside the block, and not
    earlier in the block's own module."""
    for module in analysis.shared.analyses:
        for call in module.derived("file reads", _file_reads):
            if not (analysis.is_inside(call, block) or (module is analysis and analysis.comes_before(call, block))):
                return True
    return False


def _literal(analysis: ScriptAnalysis, expr: cst.BaseExpression) -> str | None:
    """A string the expression always holds: a literal, or a name its function (or module) assigns only that."""
    if isinstance(expr, cst.SimpleString):
        value = expr.evaluated_value
        return value if isinstance(value, str) else None
    if isinstance(expr, cst.Name):
        function = analysis.enclosing_function(expr)
        values = analysis.assigned_values(function, expr.value)
        if len(values) == 1 and isinstance(values[0], cst.SimpleString):
            return _literal(analysis, values[0])
        if not values and function is not None and analysis.is_parameter(function, expr.value):
            # ``def make_init_weights(path)`` called with ``"init.pt"`` at every call site.
            passed = set()
            for call in analysis.callers_in_program(function):
                caller = analysis.shared.analysis_of(call) or analysis
                argument = caller.argument_for(call, function, expr.value)
                passed.add(_literal(caller, argument) if isinstance(argument, cst.SimpleString) else None)
            if len(passed) == 1:
                return passed.pop()
    return None


def _literal_path(analysis: ScriptAnalysis, call: cst.Call) -> str | None:
    """The literal path a read reads (its first argument)."""
    return _literal(analysis, call.args[0].value) if call.args and call.args[0].keyword is None else None


#: Calls that delete files: nothing is read back from them.
_REMOVALS = frozenset({"os.remove", "os.unlink", "shutil.rmtree"})

#: What kind of file a write or a read is about, by the library that does it (a path no literal spells is
#: matched with the files of its kind only).
_FAMILIES = (("torch.", "torch"), ("numpy.", "numpy"), ("PIL.", "image"), ("torchvision.utils.save_image", "image"))


def _family(analysis: ScriptAnalysis, call: cst.Call) -> str:
    """The kind of file a write or a read is about: ``torch``, ``numpy``, ``image``, or ``file`` (``open``
    and what reads or writes through it)."""
    for qualified in sorted(analysis.qualified_names(call.func)):
        for prefix, family in _FAMILIES:
            if qualified.startswith(prefix):
                return family
    return "file"


def _file_reads(analysis: ScriptAnalysis) -> list[cst.Call]:
    """The module's calls that read a file."""
    found = []
    for call in analysis.calls:
        if analysis.is_call_to(call, FILE_READERS):
            found.append(call)
        elif analysis.is_call_to(call, {"builtins.open", "io.open"}):
            mode = keyword_argument(call, "mode") or (call.args[1] if len(call.args) > 1 else None)
            text = mode.value.evaluated_value if mode is not None and isinstance(mode.value, cst.SimpleString) else "r"
            if not any(flag in str(text) for flag in "wax+"):
                found.append(call)
    return found


#: Calls that delete files, and calls that list a folder or read a listed file's metadata.
_REMOVALS = frozenset({"os.remove", "os.unlink", "shutil.rmtree"})
_LISTINGS = frozenset(
    {"glob.glob", "glob.iglob", "os.listdir", "os.scandir", "os.path.getmtime", "os.path.getctime", "os.path.getsize"}
)


def _removes_what_every_rank_lists(analysis: ScriptAnalysis, call: cst.Call) -> bool:
    """Whether a deletion runs in a loop over a listing of files every rank computes (``for f in sorted(glob(
    "ckpt/*.pt"), key=os.path.getmtime)[:-1]: os.remove(f)``, the listing held in a name or not): guarded for rank
    0 alone, it races with the other ranks' listing of the files it deletes."""
    if not analysis.is_call_to(call, _REMOVALS):
        return False
    loop = analysis.nearest_loop(call)
    if not isinstance(loop, cst.For):
        return False
    values: list[cst.CSTNode] = [loop.iter]
    values += [v for node in walk(loop.iter) if type(node) is cst.Name for v in analysis.flows_into(node, node.value)]  # type: ignore[attr-defined]
    nodes = [node for value in values for node in walk(value)]
    calls = [node for node in nodes if type(node) is cst.Call]
    listed = any(analysis.is_call_to(c, _LISTINGS) or call_method_name(c) in ("glob", "iterdir", "rglob") for c in calls)  # type: ignore[arg-type]
    # (a folder of this process's own: ``tempfile.mkdtemp()``, a name with ``os.getpid()``)
    held = [o for node in nodes if type(node) is cst.Name for o in analysis.origins(node)]  # type: ignore[arg-type]
    own = any(type(c) is cst.Call and analysis.is_call_to(c, _PER_PROCESS) for c in [*calls, *held])  # type: ignore[arg-type]
    return listed and not own


#: Calls that make a name or a folder of this process's own.
_PER_PROCESS = frozenset({"tempfile.mkdtemp", "tempfile.TemporaryDirectory", "os.getpid"})
