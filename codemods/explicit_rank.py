"""DDP022 explicit-rank-and-world-size."""

from __future__ import annotations

from typing import Iterator

import libcst as cst

from . import names
from .analysis import ScriptAnalysis, dotted_name
from .base import Change, Example, FixResult, FixSafety, Match, Note, Options, Phase, Rule, Valid
from .edits import Edits, code_of, expression, is_pure, removal_set, remove_statements, replace_values, statement, statement_line
from .analysis.legacy import INIT_PARAMETERS, LaunchIndex, LegacyFacts, argument, legacy_facts, string_value
from .runtime_calls import on_the_cpu_note, runtime_name, setup_code

#: ``init_process_group`` arguments the runtime's ``setup()`` replaces or takes over.
REPLACED = frozenset({"backend", "init_method", "rank", "world_size", "timeout"})
#: Backends the runtime chooses by itself (``nccl`` on CUDA, ``gloo`` otherwise).
DEFAULT_BACKENDS = frozenset({"nccl", "gloo"})


class ExplicitRankAndWorldSize(Rule):
    """Create the process group from torchrun's environment, not from a rank and world size of the script.

    What it finds: ``init_process_group(backend, rank=..., world_size=...)`` where the rank or the world
    size comes from the script (a spawn index, a command-line option, arithmetic) rather than from
    torchrun's ``RANK``/``WORLD_SIZE``; and a world size that is this machine's GPU count or a constant
    (``world_size = torch.cuda.device_count()``); and, in a ``torch.distributed.launch`` script (it takes
    ``--local_rank``), an ``init_process_group`` that reads everything from the launcher's environment
    (``env://``) on a path every run takes, so that ``python train.py`` fails for want of ``RANK`` (a call
    the script guards by the environment is its own fallback and is left alone). A rank or world size read
    from ``RANK``/``WORLD_SIZE``, with a literal ``0``/``1`` only where those are absent (``else: args.rank,
    args.world_size = 0, 1``: reference scripts' ``init_distributed_mode``), is torchrun's and is left alone.

    Why it is a problem: the rank and world size of a job belong to whoever starts its processes. Under
    torchrun the script's own numbers disagree with the processes that actually exist (two nodes of four
    GPUs are a world of eight, not four; ``node_rank * ngpus + gpu`` assumes a layout torchrun does not
    promise), and the group waits forever for ranks that never come.

    What the fix does: ``runtime.setup()``, which reads torchrun's environment (or forms a world of one
    without it), keeps a backend or timeout the script chose (the usual ``"nccl" if cuda else "gloo"`` is
    what ``setup()`` does anyway, so it goes) and drops ``init_method``. Variables that held the rank or
    world size and are read later are set from the runtime right after (``args.rank = runtime.rank()``),
    and their earlier, now dead, computations go (only where the setup runs whenever they do, and only
    statements that set nothing else). A world size taken from the GPU count or a constant
    becomes ``runtime.world_size()``. While the script still starts its own processes in a way DDP020
    cannot rewrite, those processes have no torchrun environment, so this (like DDP021 to DDP025) only
    reports.

    Fix safety: the rank and world size come from torchrun's environment instead of the script's own
    computation, and an ``init_method`` is dropped; a plain run is a world of one, as before. A script that
    still reads SLURM's launch variables (``SLURM_PROCID``) gets a note: started by ``srun`` alone, each process
    would now train alone; under SLURM, ``srun`` starts torchrun on each node.
    """

    code = "DDP022"
    name = "explicit-rank-and-world-size"
    fix_safety = FixSafety.SAFE
    phase = Phase.LEGACY_LAUNCH
    triggers = ("init_process_group",)
    manual_fix = "create the process group from torchrun's environment (runtime.setup()) and read rank and world size from it"
    examples = (
        Example(
            before="""\
import sys

import torch
import torch.distributed as dist


def setup(rank, world_size):
    backend = "nccl" if torch.cuda.is_available() else "gloo"
    dist.init_process_group(backend, rank=rank, world_size=world_size)


if __name__ == "__main__":
    world_size = torch.cuda.device_count()
    setup(int(sys.argv[1]), world_size)
""",
            after="""\
import sys

from ddp_migrate import runtime


def setup(rank, world_size):
    runtime.setup()


if __name__ == "__main__":
    world_size = runtime.world_size()
    setup(int(sys.argv[1]), world_size)
""",
        ),
        Example(
            before="""\
import os

import torch.distributed as dist


def main_worker(gpu, ngpus_per_node, args):
    if args.dist_url == "env://" and args.rank == -1:
        args.rank = int(os.environ["RANK"])
    args.rank = args.rank * ngpus_per_node + gpu
    dist.init_process_group(
        backend=args.dist_backend, init_method=args.dist_url, world_size=args.world_size, rank=args.rank
    )
    print(f"rank {args.rank} of {args.world_size}")
""",
            after="""\
from ddp_migrate import runtime


def main_worker(gpu, ngpus_per_node, args):
    runtime.setup(backend=args.dist_backend)
    args.rank = runtime.rank()
    args.world_size = runtime.world_size()
    print(f"rank {args.rank} of {args.world_size}")
""",
        ),
        Example(
            # The script still starts its own processes (DDP020 cannot rewrite a spawn whose context is
            # used): they have no torchrun environment, so only report.
            before="""\
import torch.distributed as dist
import torch.multiprocessing as mp


def run(rank, world_size):
    dist.init_process_group("gloo", rank=rank, world_size=world_size)


if __name__ == "__main__":
    context = mp.spawn(run, args=(2,), nprocs=2, join=False)
    context.join()
""",
            after=None,
        ),
        Example(
            # ``env://`` (the default) reads torchrun's environment: as plain python it fails.
            before="""\
import argparse

import torch.distributed as dist


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--local_rank", type=int, default=0)
    parser.parse_args()
    dist.init_process_group(backend="gloo", init_method="env://")
    train()


if __name__ == "__main__":
    main()
""",
            after="""\
import argparse

from ddp_migrate import runtime


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--local_rank", type=int, default=0)
    parser.parse_args()
    runtime.setup(backend="gloo")
    train()


if __name__ == "__main__":
    main()
""",
        ),
        Valid(
            # The script's own single-process fallback: it initialises only under a launcher.
            """\
import os
import argparse

import torch.distributed as dist


def init_distributed():
    parser = argparse.ArgumentParser()
    parser.add_argument("--local_rank", type=int, default=0)
    args = parser.parse_args()
    if "RANK" not in os.environ:
        args.distributed = False
        return
    args.distributed = True
    dist.init_process_group(backend="gloo")
"""
        ),
    )

    def _fixable(self, analysis: ScriptAnalysis, call: cst.Call) -> bool:
        stmt = analysis.statement(call)
        is_statement = (
            isinstance(stmt, cst.SimpleStatementLine)
            and len(stmt.body) == 1
            and isinstance(stmt.body[0], cst.Expr)
            and stmt.body[0].value is call
        )
        if not is_statement or any(a.star for a in call.args):
            return False
        given = {a.keyword.value if a.keyword else INIT_PARAMETERS[i] for i, a in enumerate(call.args) if a.keyword or i < len(INIT_PARAMETERS)}
        return given <= REPLACED

    def notes(self, analysis: ScriptAnalysis, options: Options) -> list[Note]:
        """Where the module sets its group up through the runtime (torchrun's environment) but still reads SLURM's
        launch variables (a reference script's ``elif "SLURM_PROCID" in os.environ:`` branch): launched by ``srun``
        alone, each process now forms a world of one and trains on all the data. Said once, at the set-up."""
        setups = analysis.calls_to(names.RUNTIME_SETUP)
        if not setups:
            return []
        read = sorted(
            {value for node in analysis.preorder if type(node) is cst.SimpleString and (value := string_value(node)) and value.startswith("SLURM_")}
        )
        if not read:
            return []
        return [
            Note(
                self.code,
                analysis.line(setups[0]),
                f"the program reads SLURM's launch variables ({', '.join(read[:3])}), but its process group now comes from "
                "torchrun's environment only: started by srun alone, each process forms a world of one and trains on all "
                "the data; under SLURM start torchrun on each node (srun torchrun --nnodes=$SLURM_NNODES "
                "--nproc_per_node=<GPUs per node> --rdzv_backend=c10d --rdzv_endpoint=<first node>:29500 ...)",
            )
        ]

    def matches(self, analysis: ScriptAnalysis) -> Iterator[Match]:
        facts = legacy_facts(analysis)
        blocked = facts.blocked()
        for call in facts.explicit_inits:
            fixable = self._fixable(analysis, call)
            extra = "" if fixable else " (it passes arguments the runtime's setup() does not take, such as a store)"
            message = f"init_process_group given its rank and world size by the script: torchrun's environment has them{extra}"
            yield Match(call, message + blocked, fixable and not blocked)
        for call in facts.environment_inits:
            message = "init_process_group needs torchrun's environment: run as plain python it fails (runtime.setup() falls back to one process)"
            yield Match(call, message + blocked, self._fixable(analysis, call) and not blocked)
        for value in facts.own_world_size_sources:
            message = "world size taken from this machine's GPU count or a constant: under torchrun it is every process on every node"
            yield Match(value, message + blocked, not blocked)

    def fix(self, analysis: ScriptAnalysis, options: Options) -> FixResult | None:
        facts = legacy_facts(analysis)
        if facts.blocked():
            return None
        edits = Edits(analysis)
        removed: set[cst.CSTNode] = set()
        for call in [*facts.explicit_inits, *facts.environment_inits]:
            if not self._fixable(analysis, call):
                continue
            rt = runtime_name(analysis, edits)
            stmt = analysis.statement(call)
            parts = []
            backend = argument(call, INIT_PARAMETERS, "backend")
            if backend is not None:
                if self._is_default_backend(facts, backend.value):
                    removed |= self._drop_backend_variable(analysis, facts, call, backend.value)
                else:
                    parts.append(f"backend={code_of(backend.value)}" if backend.keyword else code_of(backend.value))
            timeout = argument(call, INIT_PARAMETERS, "timeout")
            if timeout is not None:
                parts.append(f"timeout={code_of(timeout.value)}")
            edits.replace(call, expression(setup_code(analysis, rt, *parts)))
            after = []
            for parameter in ("rank", "world_size"):
                arg = argument(call, INIT_PARAMETERS, parameter)
                name = dotted_name(arg.value) if arg is not None and isinstance(arg.value, (cst.Name, cst.Attribute)) else None
                if arg is None or name is None:
                    continue
                read_later, dead = self._variable(analysis, facts, call, arg.value, name)
                removed |= dead
                # A value read later is put back from the runtime where it was hand-made, or where its
                # computation (even torchrun's own WORLD_SIZE) is removed as dead.
                if read_later and (dead or not self._trusted(analysis, facts, arg.value, parameter)):
                    after.append(statement(f"{name} = {rt}.{parameter}()"))
            if after:
                edits.insert_after(stmt, *after)
            what = "with a hand-made rank and world size" if call in facts.explicit_inits else "from torchrun's environment"
            edits.changes.append(
                Change(
                    self.code,
                    analysis.line(call),
                    f"init_process_group {what} replaced by runtime.setup() (torchrun's environment, or one process as plain python)"
                    + on_the_cpu_note(analysis),
                )
            )
        remove_statements(analysis, edits, removed)
        sizes = [v for v in facts.own_world_size_sources if not any(analysis.is_inside(v, r) for r in removed)]
        if sizes:
            rt = runtime_name(analysis, edits)
            replace_values(analysis, edits, sizes, f"{rt}.world_size()")
            for value in sizes:
                edits.changes.append(Change(self.code, analysis.line(value), "world size taken from torchrun (runtime.world_size())"))
        if not edits:
            return None
        edits.drop_unused_imports()
        return edits.apply(analysis.module)

    @staticmethod
    def _is_default_backend(facts: LegacyFacts, value: cst.BaseExpression) -> bool:
        """Whether the backend is the runtime's own choice: ``"nccl"``, or ``nccl``/``gloo`` by CUDA."""
        chosen: set[str] = set()
        for source in facts.sources(value):
            if isinstance(source, cst.Attribute) and dotted_name(source) in ("dist.Backend.NCCL", "torch.distributed.Backend.NCCL"):
                chosen.add("nccl")
                continue
            literal = string_value(source) if isinstance(source, cst.BaseExpression) else None
            if literal not in DEFAULT_BACKENDS:
                return False
            chosen.add(literal)  # type: ignore[arg-type]
            parent = facts.analysis.parent(source)
            if isinstance(parent, cst.Param):  # a default the caller may override
                return False
        return "nccl" in chosen

    @staticmethod
    def _drop_backend_variable(analysis: ScriptAnalysis, facts: LegacyFacts, call: cst.Call, value: cst.BaseExpression) -> set[cst.CSTNode]:
        """The assignments of a backend variable that only this call read."""
        name = dotted_name(value) if isinstance(value, cst.Name) else None
        if name is None:
            return set()
        key = facts.key(value, name)
        if any(not analysis.is_inside(r, call) for r in facts.reads(key)):
            return set()
        assignments = facts.assignments_to(key)
        if not all(isinstance(a, cst.Assign) and len(a.targets) == 1 and is_pure(a.value) for a in assignments):
            return set()
        return {statement_line(analysis, a) for a in assignments}

    @staticmethod
    def _trusted(analysis: ScriptAnalysis, facts: LegacyFacts, expr: cst.BaseExpression, parameter: str) -> bool:
        """Whether the variable holds torchrun's value once the legacy launch is migrated: a spawn index that
        stands for the rank (DDP020 passes ``runtime.rank()``), a GPU count that becomes
        ``runtime.world_size()``, or the value read from the environment."""
        sizes = facts.world_size_sources
        from_runtime = names.RUNTIME_RANK if parameter == "rank" else {names.runtime("world_size"), "torch.distributed.get_world_size"}
        variable = "RANK" if parameter == "rank" else "WORLD_SIZE"
        sources = facts.sources(expr)
        for source in sources:
            if isinstance(source, LaunchIndex):
                trusted = parameter == "rank" and facts.index_is_global(source.launch)
            elif source in sizes:
                trusted = parameter == "world_size"
            else:
                trusted = (isinstance(source, cst.Call) and analysis.is_call_to(source, from_runtime)) or facts.env_read(source) == variable
            if not trusted:
                return False
        return bool(sources)

    @staticmethod
    def _variable(
        analysis: ScriptAnalysis, facts: LegacyFacts, call: cst.Call, expr: cst.BaseExpression, name: str
    ) -> tuple[bool, set[cst.CSTNode]]:
        """Whether the variable that held the rank (or world size) is read after the setup, and its earlier
        computations in the same function that the setup makes dead."""
        key = facts.key(expr, name)
        function = analysis.enclosing_function(call)
        scope = key[0]
        root = name.split(".", 1)[0]
        # ``args.world_size`` of ``def init_distributed_mode(args)``: the object outlives the function, and its
        # callers may read the attribute (``lr = blr * args.world_size``).
        outlives = "." in name and function is not None and (analysis.is_parameter(function, root) or not analysis.binds_locally(function, root))
        # A store is dead only where it assigns the variable alone (``args.rank, args.gpu = 0, 0`` also sets
        # ``args.gpu``) and the setup runs whenever it does: the setup's block holds the store (not ``if
        # args.distributed: init_process_group(...)`` after an unconditional store, which plain python reads).
        block = analysis.parent(analysis.statement(call))
        stores = [
            statement_line(analysis, a)
            for a in facts.assignments_to(key)
            if analysis.enclosing_function(a) is function
            and analysis.comes_before(a, call)
            and isinstance(a, cst.Assign)
            and len(a.targets) == 1
            and dotted_name(a.targets[0].target) == name
            and is_pure(a.value)
            and block is not None
            and analysis.is_inside(a, block)
        ]
        dead = removal_set(analysis, stores) if stores else set()
        reads = [r for r in facts.reads(key) if not analysis.is_inside(r, call) and not any(analysis.is_inside(r, d) for d in dead)]
        if outlives:
            read_later = _attribute_read_elsewhere(analysis, name.rsplit(".", 1)[1], call) and not _read_only(analysis, expr)
        elif scope is None or isinstance(scope, cst.ClassDef):
            read_later = bool(reads)  # an attribute lives on: any read elsewhere counts
        else:
            read_later = any(analysis.enclosing_function(r) is function and analysis.comes_before(call, r) for r in reads)
        if dead and stores:
            first = min(stores, key=lambda s: analysis.span(s)[0])
            if any(analysis.comes_before(first, r) and analysis.comes_before(r, call) for r in reads):
                return read_later, set()  # an earlier value is read before the setup: not dead
        return read_later, dead


def _attribute_read_elsewhere(analysis: ScriptAnalysis, attr: str, call: cst.Call) -> bool:
    """Whether any module of the program reads an attribute of that name outside the setup call (``lr =
    blr * args.world_size`` in the caller of ``init_distributed_mode(args)``): the object that holds it
    outlives the function, so such a read may be of it. (A read-only object, a frozen dataclass, is then
    left alone where nothing reads it.)"""
    for module in analysis.shared.analyses:
        for node in module.attributes:
            if node.attr.value != attr or module.is_inside(node, call):
                continue
            if isinstance(module.parent(node), cst.AssignTarget):
                continue
            return True
    return False


def _read_only(analysis: ScriptAnalysis, expr: cst.BaseExpression) -> bool:
    """Whether the object an attribute is read from may be an instance of a class of the program that
    takes no assignment: a ``@dataclass(frozen=True)`` or a ``NamedTuple``."""
    root = expr
    while isinstance(root, cst.Attribute):
        root = root.value
    for origin in analysis.origins(root):  # type: ignore[arg-type]
        built = analysis.shared.constructed.get(origin) if isinstance(origin, cst.Call) else None
        if built is None:
            continue
        if any(dotted_name(base.value) in ("NamedTuple", "typing.NamedTuple") for base in built.bases):
            return True
        for decorator in built.decorators:
            call = decorator.decorator
            if isinstance(call, cst.Call) and "dataclass" in code_of(call.func) and any(
                arg.keyword is not None and arg.keyword.value == "frozen" and code_of(arg.value).strip() == "True" for arg in call.args
            ):
                return True
    return False
