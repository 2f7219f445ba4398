"""DDP020 spawn-launcher."""

from __future__ import annotations

from typing import Iterator

import libcst as cst

from .analysis import ScriptAnalysis, dotted_name
from .base import Change, Example, FixResult, FixSafety, Match, Options, Phase, Rule, Valid
from .edits import Edits, call_with, code_of, expression, is_pure, remove_statements, replace_values, without_launch_comments
from .analysis.legacy import DISTRIBUTED_SETUP_WORDS, GET_CONTEXT, PROCESS, SPAWN, Launch, legacy_facts
from .runtime_calls import runtime_name


class SpawnLauncher(Rule):
    """Let torchrun start the processes: call the worker function once instead of spawning it.

    What it finds: a script that starts its own training processes, with ``mp.spawn(fn, args=(...),
    nprocs=N)`` (``torch.multiprocessing.spawn``, ``start_processes``) or with a loop that starts
    ``multiprocessing.Process(target=fn, args=(rank, ...))`` objects and joins them, where ``fn`` sets up
    a process group or a DDP model.

    Why it is a problem: a launcher inside the script can only start processes on its own machine, so the
    job can never span nodes, and under torchrun every one of torchrun's processes would spawn N more.
    torchrun starts the processes, restarts them on failure, and hands each its rank in the environment.

    What the fix does: the launch becomes one call, ``fn(runtime.rank(), *args)``: the extra ``args`` pass
    through unchanged, and the index that ``spawn`` used to pass comes from torchrun's environment. It is
    the global rank (``runtime.rank()``) when the function hands it to ``init_process_group(rank=...)``,
    and the local rank (``runtime.local_rank()``) when the function uses it as a GPU index and computes the
    global rank itself (``node_rank * ngpus + gpu``). The join loop, the list of processes and
    ``set_start_method`` go. A process count that is only this machine's GPU count becomes
    ``runtime.world_size()`` where it also serves as the world size, else ``runtime.local_world_size()``
    (the processes on this node); one that is no longer used is removed. A count made any other way (an
    environment variable, a command-line option) that the launch hands its workers as well (``args=(n,)``
    with ``nprocs=n``) is not passed on: the workers get torchrun's count in its place, so a sampler's
    ``num_replicas`` or a learning rate scaled by it follows the processes torchrun starts. The report says how to launch:
    ``torchrun --nproc_per_node=<GPUs per node> script.py``.

    Fix safety: the script no longer starts its own processes: ``python train.py`` runs one process, and
    the N processes come from ``torchrun --nproc_per_node=N``; the spawn's join loop and
    ``set_start_method`` go.
    """

    code = "DDP020"
    name = "spawn-launcher"
    fix_safety = FixSafety.UNSAFE
    phase = Phase.LEGACY_LAUNCH
    triggers = ("spawn", "Process", "start_processes")
    requires = DISTRIBUTED_SETUP_WORDS  # a launch counts only when its workers set up a process group
    needs_names = (SPAWN | PROCESS | GET_CONTEXT,)
    manual_fix = "remove the launcher and call the worker function once per process with runtime.rank(); start the script with torchrun"
    examples = (
        Example(
            before="""\
import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def train(rank, world_size, epochs):
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    run_epochs(epochs)


if __name__ == "__main__":
    world_size = torch.cuda.device_count()
    mp.spawn(train, args=(world_size, 10), nprocs=world_size, join=True)
""",
            after="""\
import torch.distributed as dist
from ddp_migrate import runtime


def train(rank, world_size, epochs):
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    run_epochs(epochs)


if __name__ == "__main__":
    world_size = runtime.world_size()
    train(runtime.rank(), world_size, 10)
""",
        ),
        Example(
            before="""\
import os

import torch.distributed as dist
import torch.multiprocessing as mp
from torch.utils.data.distributed import DistributedSampler


def worker(rank, world_size):
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank)


if __name__ == "__main__":
    world_size = int(os.environ.get("NPROC", 2))
    mp.spawn(worker, args=(world_size,), nprocs=world_size, join=True)
""",
            after="""\
import torch.distributed as dist
from ddp_migrate import runtime
from torch.utils.data.distributed import DistributedSampler


def worker(rank, world_size):
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank)


if __name__ == "__main__":
    worker(runtime.rank(), runtime.world_size())
""",
        ),
        Example(
            before="""\
import torch.distributed as dist
import torch.multiprocessing as mp


def worker(rank, world_size, accum_steps):
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    train(accum_steps)


if __name__ == "__main__":
    mp.spawn(worker, args=(2, 2), nprocs=2)
""",
            after="""\
import torch.distributed as dist
from ddp_migrate import runtime


def worker(rank, world_size, accum_steps):
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    train(accum_steps)


if __name__ == "__main__":
    worker(runtime.rank(), 2, 2)
""",
        ),
        # Both sides of a conditional count of processes (a trial: ``runtime.world_size() if ... else
        # runtime.world_size()``) become one.
        Example(
            before="""\
import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def worker(rank, world_size):
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    train(rank)


if __name__ == "__main__":
    world_size = torch.cuda.device_count() if torch.cuda.is_available() else 2
    mp.spawn(worker, args=(world_size,), nprocs=world_size, join=True)
""",
            after="""\
import torch.distributed as dist
from ddp_migrate import runtime


def worker(rank, world_size):
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    train(rank)


if __name__ == "__main__":
    world_size = runtime.world_size()
    worker(runtime.rank(), world_size)
""",
        ),
        Example(
            before="""\
import torch.distributed as dist
from multiprocessing import Process


def init_process(rank, size, fn):
    dist.init_process_group("gloo", rank=rank, world_size=size)
    fn(rank, size)


if __name__ == "__main__":
    size = 2
    processes = []
    for rank in range(size):
        p = Process(target=init_process, args=(rank, size, run))
        p.start()
        processes.append(p)

    for p in processes:
        p.join()
""",
            after="""\
import torch.distributed as dist
from ddp_migrate import runtime


def init_process(rank, size, fn):
    dist.init_process_group("gloo", rank=rank, world_size=size)
    fn(rank, size)


if __name__ == "__main__":
    size = runtime.world_size()
    init_process(runtime.rank(), size, run)
""",
        ),
        Example(
            before="""\
import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def main_worker(gpu, ngpus_per_node, args):
    args.rank = args.rank * ngpus_per_node + gpu
    dist.init_process_group("nccl", rank=args.rank, world_size=args.world_size)
    torch.cuda.set_device(gpu)


def main(args):
    ngpus_per_node = torch.cuda.device_count()
    args.world_size = ngpus_per_node * args.world_size
    # launch one process per GPU with torch.multiprocessing.spawn
    mp.spawn(main_worker, nprocs=ngpus_per_node, args=(ngpus_per_node, args))
""",
            after="""\
import torch
import torch.distributed as dist
from ddp_migrate import runtime


def main_worker(gpu, ngpus_per_node, args):
    args.rank = args.rank * ngpus_per_node + gpu
    dist.init_process_group("nccl", rank=args.rank, world_size=args.world_size)
    torch.cuda.set_device(gpu)


def main(args):
    ngpus_per_node = runtime.local_world_size()
    args.world_size = ngpus_per_node * args.world_size
    main_worker(runtime.local_rank(), ngpus_per_node, args)
""",
        ),
        Example(
            before="""\
import torch.distributed as dist
from torch.multiprocessing import spawn


def worker(index, config, data):
    dist.init_process_group("gloo", init_method="env://")
    fit(config, data)


def launch(config, data):
    worker_args = (config, data)
    spawn(worker, worker_args, 2)
""",
            after="""\
import torch.distributed as dist
from ddp_migrate import runtime


def worker(index, config, data):
    dist.init_process_group("gloo", init_method="env://")
    fit(config, data)


def launch(config, data):
    worker_args = (config, data)
    worker(runtime.local_rank(), *worker_args)
""",
        ),
        Valid(
            """\
import torch.multiprocessing as mp


def train(model):
    for x, y in loader:
        model(x).sum().backward()


if __name__ == "__main__":
    model.share_memory()
    workers = [mp.Process(target=train, args=(model,)) for _ in range(4)]
"""
        ),
        Valid(
            """\
import torch.distributed as dist


def main():
    dist.init_process_group("nccl")


if __name__ == "__main__":
    main()
"""
        ),
    )

    def matches(self, analysis: ScriptAnalysis) -> Iterator[Match]:
        for launch in legacy_facts(analysis).launches:
            what = "mp.spawn" if launch.kind == "spawn" else "multiprocessing.Process"
            if launch.problem is None:
                yield Match(launch.call, f"{what} starts the training processes itself: let torchrun start them and call the worker once")
            else:
                yield Match(launch.call, f"{what} starts the training processes itself ({launch.problem}): let torchrun start them", fixable=False)

    def fix(self, analysis: ScriptAnalysis, options: Options) -> FixResult | None:
        facts = legacy_facts(analysis)
        edits = Edits(analysis)
        for launch in facts.launches:
            if launch.problem is not None or launch.function is None:
                continue
            rt = runtime_name(analysis, edits)
            index = f"{rt}.rank()" if facts.index_is_global(launch) else f"{rt}.local_rank()"
            # The count is the world size only where the index is init_process_group's rank (a one-machine
            # script); an index named rank but used as a GPU index leaves a count per machine.
            count = f"{rt}.world_size()" if facts.index_is_init_rank(launch) else f"{rt}.local_world_size()"
            counts = self._counts_passed_on(analysis, launch)
            arguments = tuple(a.with_changes(value=expression(count)) if a in counts else a for a in launch.arguments)
            call = call_with(launch.function, expression(index), arguments)
            statement = launch.statement
            kept_comments = without_launch_comments(statement.leading_lines)
            edits.replace(statement, cst.SimpleStatementLine([cst.Expr(call)], leading_lines=kept_comments))
            remove_statements(analysis, edits, launch.extra)
            self._fix_process_count(analysis, edits, launch, rt, counts)
            self._fix_worker_counts(analysis, edits, launch, rt)
            count = code_of(launch.nprocs) if launch.nprocs is not None else "1"
            edits.changes.append(
                Change(
                    self.code,
                    analysis.line(launch.call),
                    f"{'mp.spawn' if launch.kind == 'spawn' else 'Process loop'} replaced by {code_of(call)}: launch with "
                    f"torchrun --nproc_per_node=<processes per node, was {count}> (and --nnodes for several machines)",
                )
            )
        if not edits:
            return None
        edits.drop_unused_imports()
        return edits.apply(analysis.module)

    @staticmethod
    def _counts_passed_on(analysis: ScriptAnalysis, launch: Launch) -> list[cst.Arg]:
        """The arguments that hand the workers the launch's own process count (``args=(world_size,),
        nprocs=world_size``) where that count is not a literal or this machine's GPU count, which
        :meth:`_fix_process_count` replaces where it is made. torchrun decides how many processes run, so such
        a copy (``int(os.environ.get("NPROC", 2))``, an option) would size the job wrongly: the workers get
        torchrun's count instead (the world size when the index is the global rank, else this node's count)."""
        facts = legacy_facts(analysis)
        nprocs = launch.nprocs
        if nprocs is None:
            return []
        name = dotted_name(nprocs) if isinstance(nprocs, (cst.Name, cst.Attribute)) else None
        sources = [s for s in facts.sources(nprocs) if s is not nprocs]
        if name is not None and sources and all(isinstance(s, cst.BaseExpression) and facts.is_process_count(s) for s in sources):
            return []  # replaced where it is made (:meth:`_fix_process_count`)
        if name is None and facts.is_process_count(nprocs):
            return []  # a literal or this machine's GPU count, written in the launch itself
        key = facts.key(nprocs, name) if name is not None else None
        found = []
        for arg in launch.arguments:
            value = arg.value
            same_variable = key is not None and isinstance(value, (cst.Name, cst.Attribute)) and dotted_name(value) == name and facts.key(value, name) == key
            # The same computation spelled twice (``nprocs=int(os.environ["N"])``, ``args=(int(os.environ["N"]),)``)
            # is the count; an equal literal (``args=(2, 2), nprocs=2``) may be anything else that is 2.
            same_computation = name is None and isinstance(value, cst.Call) and value.deep_equals(nprocs)
            if same_variable or same_computation:
                found.append(arg)
        return found

    @staticmethod
    def _fix_worker_counts(analysis: ScriptAnalysis, edits: Edits, launch: Launch, rt: str) -> None:
        """The process count the worker computes again itself (``ngpus = args.ngpus or torch.cuda.device_count()``
        in ``main_worker``, beside the launch's ``nprocs=ngpus``), or reads from the object the launch hands it
        (``args.batch_size / args.ngpus`` of ``nprocs=args.ngpus, args=(args,)``), where it sizes something (an
        assigned value, a factor or divisor): torchrun's processes on this node. (Left, a batch split by it
        crashed on a CPU machine, a count of 0, or split a global batch by the wrong number.)"""
        target, nprocs = launch.target, launch.nprocs
        if target is None or nprocs is None or not analysis.owns(target):
            return
        facts = legacy_facts(analysis)
        computed = [s for s in (nprocs, *facts.sources(nprocs)) if isinstance(s, cst.BaseExpression) and type(s) not in (cst.Name, cst.Integer)]
        handed: str | None = None
        name = dotted_name(nprocs) if type(nprocs) is cst.Attribute else None
        if name is not None:
            root, _, attribute = name.partition(".")
            positions = [i for i, arg in enumerate(launch.arguments) if dotted_name(arg.value) == root]
            params = target.params.params
            if positions and positions[0] + 1 < len(params):
                handed = f"{params[positions[0] + 1].name.value}.{attribute}"
        found: list[cst.BaseExpression] = []
        for node in analysis.nodes_below(target.body):
            if not isinstance(node, cst.BaseExpression):
                continue
            same = (
                any(node.deep_equals(c) for c in computed if type(c) is not cst.Attribute)
                or (handed is not None and dotted_name(node) == handed)
                or (type(node) is cst.Call and facts.is_process_count(node))  # (``ngpus = torch.cuda.device_count()`` again)
            )
            if not same or isinstance(analysis.parent(node), cst.AssignTarget):
                continue
            parent = analysis.parent(node)
            sizes = (type(parent) is cst.Assign and parent.value is node) or (  # type: ignore[attr-defined]
                type(parent) is cst.BinaryOperation and type(parent.operator) in (cst.Divide, cst.FloorDivide, cst.Multiply)  # type: ignore[attr-defined]
            )
            if sizes:
                found.append(node)
        if found:
            replace_values(analysis, edits, found, f"{rt}.local_world_size()")

    @staticmethod
    def _fix_process_count(analysis: ScriptAnalysis, edits: Edits, launch: Launch, rt: str, replaced: list[cst.Arg]) -> None:
        """The launch's process count: dropped when only the launch read it, else taken from torchrun.
        ``replaced``: the launch's arguments that no longer pass it on (:meth:`_counts_passed_on`)."""
        facts = legacy_facts(analysis)
        nprocs = launch.nprocs
        name = dotted_name(nprocs) if isinstance(nprocs, (cst.Name, cst.Attribute)) else None
        if nprocs is None or name is None:
            return
        key = facts.key(nprocs, name)
        launch_nodes = [launch.statement, *launch.extra]
        passed_on = [a.value for a in launch.arguments if a not in replaced]
        only_launch = all(
            any(analysis.is_inside(r, n) for n in launch_nodes) and not any(analysis.is_inside(r, p) for p in passed_on)
            for r in facts.reads(key)
        )
        assignments = facts.assignments_to(key)
        if only_launch and assignments and all(isinstance(a, cst.Assign) and len(a.targets) == 1 and is_pure(a.value) for a in assignments):
            remove_statements(analysis, edits, assignments)
            return
        counts = facts.process_count_sources(launch)
        world = set(facts.program_world_size_sources)
        replace_values(analysis, edits, [c for c in counts if c in world], f"{rt}.world_size()")
        replace_values(analysis, edits, [c for c in counts if c not in world], f"{rt}.local_world_size()")
