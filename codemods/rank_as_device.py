"""DDP024 rank-as-device."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

import libcst as cst

from . import names
from .analysis import ScriptAnalysis, call_method_name, dotted_name, walk
from .base import Change, Example, FixResult, FixSafety, Match, Options, Phase, Rule, Valid
from .edits import Edits, code_of, expression, remove_statements, without_argument
from .analysis.legacy import DDP_PARAMETERS, RANK_SOURCE_WORDS, LegacyFacts, argument, legacy_facts
from .analysis.devices import falls_back_to_the_cpu
from .runtime_calls import device_ids_call, runtime_name

#: ``runtime.device()``: this process's GPU, or the CPU.
RUNTIME_DEVICE = frozenset({names.runtime("device")})
DEVICE = "device"  # the expression becomes runtime.device()
DEVICE_STRING = "device string"  # a string naming the device becomes str(runtime.device()), still a string
CUDA_CALL = "cuda"  # x.cuda(rank) becomes x.to(runtime.device())
SET_DEVICE = "set_device"  # torch.cuda.set_device(rank): runtime.setup() does it
DEVICE_IDS = "device_ids"  # device_ids=[rank] becomes runtime.device_ids()
OUTPUT_DEVICE = "output_device"  # dropped: DDP uses device_ids[0]


@dataclass(frozen=True)
class _Case:
    node: cst.CSTNode
    kind: str
    message: str


def _mentions_rank(facts: LegacyFacts, node: cst.CSTNode) -> bool:
    """Whether any name, attribute or call inside the node holds the global rank."""
    return any(
        isinstance(n, (cst.Name, cst.Attribute, cst.Call)) and facts.holds_global_rank(n)  # type: ignore[arg-type]
        for n in walk(node)
    )


def _is_cuda_query(analysis: ScriptAnalysis, call: cst.Call) -> bool:
    """``torch.cuda.get_device_name(i)``, ``torch.cuda.memory_allocated(i)``, ``torch.cuda.device(i)``, ...:
    the ``torch.cuda`` functions that take a device (``set_device`` is handled on its own)."""
    return any(
        q.startswith("torch.cuda.") and q.count(".") == 2 and q not in names.SET_DEVICE_CALLS | names.CUDA_QUERIES
        for q in analysis.qualified_names(call.func)
    )


def _under_a_gpu_test(analysis: ScriptAnalysis, call: cst.Call, device: cst.BaseExpression) -> bool:
    """Whether the call runs only under a test of the GPU or of the device index itself (``if
    torch.cuda.is_available():``, ``if args.gpu is not None:``): a CPU run never gets there."""
    index = code_of(device).strip()
    return any(
        isinstance(a, cst.If) and ("cuda" in code_of(a.test) or " ".join(code_of(a.test).split()) == f"{index} is not None")
        for a in analysis.ancestors(call)
    )


def _cuda_string(node: cst.CSTNode) -> bool:
    """A string that is a GPU's name and nothing else, built from its number: ``f"cuda:{...}"``, ``"cuda:%d" %
    ...``, ``"cuda:{}".format(...)`` (not ``f"cuda:{rank} is starting"``: the rest of the text would be lost)."""
    kind = type(node)
    if kind is cst.FormattedString:
        parts = node.parts  # type: ignore[attr-defined]
        return (
            len(parts) == 2
            and isinstance(parts[0], cst.FormattedStringText)
            and parts[0].value == "cuda:"
            and isinstance(parts[1], cst.FormattedStringExpression)
        )
    if kind is cst.BinaryOperation and type(node.operator) is cst.Modulo:  # type: ignore[attr-defined]
        return _is_template(node.left, ("cuda:%d", "cuda:%s", "cuda:%i"))  # type: ignore[attr-defined]
    if kind is cst.Call and type(node.func) is cst.Attribute and node.func.attr.value == "format":  # type: ignore[attr-defined]
        return _is_template(node.func.value, ("cuda:{}", "cuda:{0}"))  # type: ignore[attr-defined]
    return False


def _is_template(node: cst.CSTNode, templates: tuple[str, ...]) -> bool:
    """Whether a node is a string literal that reads exactly one of the templates."""
    return type(node) is cst.SimpleString and node.evaluated_value in templates  # type: ignore[attr-defined]


def _takes_a_device(analysis: ScriptAnalysis, argument: cst.Arg) -> bool:
    """Whether a device object does as well as its name for the argument: ``device=`` or ``map_location=``,
    or the first argument of ``.to()``, ``.cuda()``, ``torch.device()``, ``set_device()`` or a CUDA query."""
    if argument.keyword is not None and argument.keyword.value in names.DEVICE_KEYWORDS:
        return True
    call = analysis.parent(argument)
    if type(call) is not cst.Call or argument.keyword is not None or call.args[0] is not argument:  # type: ignore[attr-defined]
        return False
    return (
        call_method_name(call) in ("to", "cuda")  # type: ignore[arg-type]
        or analysis.is_call_to(call, names.TORCH_DEVICE | names.SET_DEVICE_CALLS)  # type: ignore[arg-type]
        or _is_cuda_query(analysis, call)  # type: ignore[arg-type]
    )


class RankAsDevice(Rule):
    """Pick the GPU by the local rank, not by the global rank.

    What it finds: the global rank (a spawn function's rank parameter, ``dist.get_rank()``, ``RANK`` from
    the environment, or a variable copied from them) used as a device: ``.to(rank)``, ``.cuda(rank)``,
    ``torch.device(f"cuda:{rank}")``, a device string (``f"cuda:{rank}"``, ``"cuda:%d" % rank``,
    ``"cuda:{}".format(rank)``), ``torch.cuda.set_device(rank)`` (or ``torch.accelerator.set_device_index(rank)``,
    ``torch.xpu.set_device(rank)``), ``DistributedDataParallel(model,
    device_ids=[rank], output_device=rank)``; and ``device_ids=[local_rank]`` where the model goes to
    ``runtime.device()`` or to a device the program makes the CPU without CUDA (``"cuda" if
    torch.cuda.is_available() else "cpu"``): there DDP refuses ``device_ids`` (a migrated ``--local_rank``
    script failed under a CPU torchrun), and they become ``runtime.device_ids(model)``, the ids of where the
    model is.

    Why it is a problem: on one machine the global rank happens to equal the GPU index, so the bug hides
    until the job spans nodes: there, rank 8 asks for ``cuda:8`` on a machine with eight GPUs and fails,
    or ranks of different nodes share GPUs. The GPU index of a process is its local rank.

    What the fix does: the device expression becomes ``runtime.device()`` (``cuda:<LOCAL_RANK>``, or the
    CPU without CUDA, so a ``... if torch.cuda.is_available() else "cpu"`` around it goes too), and a
    device string outside a call that takes a device becomes ``str(runtime.device())``, still a string
    (``name.split(":")``, a ``map_location`` dict's value: ``torch.load`` wants strings there);
    ``.cuda(rank)`` becomes ``.to(runtime.device())``; ``device_ids=[rank]`` becomes
    ``device_ids=runtime.device_ids()`` and ``output_device`` goes; ``set_device(rank)`` is removed where
    ``runtime.setup()`` sets the device, and uses ``runtime.local_rank()`` otherwise. Where the variable
    is used as a rank (``if rank == 0:``, ``DistributedSampler(rank=rank)``) it stays.

    Fix safety: each process uses ``cuda:<LOCAL_RANK>`` instead of ``cuda:<rank>``: the same on one
    node; on several nodes the global rank was no valid GPU index, so only failing runs change.
    """

    code = "DDP024"
    name = "rank-as-device"
    fix_safety = FixSafety.SAFE
    phase = Phase.DEVICES
    triggers = ("rank", "RANK")
    requires = RANK_SOURCE_WORDS  # it reports only values the analysis knows to be the rank
    manual_fix = "choose the device by the local rank (runtime.device())"
    examples = (
        Example(
            before="""\
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def train(rank, world_size):
    dist.init_process_group("nccl", rank=rank, world_size=world_size)
    torch.cuda.set_device(rank)
    model = Net().to(rank)
    model = DDP(model, device_ids=[rank], output_device=rank)
    for x, y in loader:
        x, y = x.cuda(rank), y.to(f"cuda:{rank}")
        loss_fn(model(x), y).backward()
    if rank == 0:
        print("trained on", torch.cuda.get_device_name(rank))
        torch.save(model.module.state_dict(), "model.pt")
""",
            after="""\
import torch
import torch.distributed as dist
from ddp_migrate import runtime
from torch.nn.parallel import DistributedDataParallel as DDP


def train(rank, world_size):
    dist.init_process_group("nccl", rank=rank, world_size=world_size)
    torch.cuda.set_device(runtime.local_rank())
    model = Net().to(runtime.device())
    model = DDP(model, device_ids=runtime.device_ids())
    for x, y in loader:
        x, y = x.to(runtime.device()), y.to(runtime.device())
        loss_fn(model(x), y).backward()
    if rank == 0:
        print("trained on", torch.cuda.get_device_name(runtime.device()))
        torch.save(model.module.state_dict(), "model.pt")
""",
        ),
        Example(
            before="""\
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from ddp_migrate import runtime

runtime.setup()
rank = dist.get_rank()
if torch.cuda.is_available():
    torch.cuda.set_device(rank)
device = torch.device("cuda", rank) if torch.cuda.is_available() else torch.device("cpu")
model = DDP(Net().to(device), device_ids=[rank] if torch.cuda.is_available() else None)
""",
            after="""\
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from ddp_migrate import runtime

runtime.setup()
rank = dist.get_rank()
device = runtime.device()
model = DDP(Net().to(device), device_ids=runtime.device_ids())
""",
        ),
        Valid(
            """\
import os

import torch
from torch.nn.parallel import DistributedDataParallel as DDP

local_rank = int(os.environ["LOCAL_RANK"])
rank = int(os.environ["RANK"])
model = DDP(Net().to(local_rank), device_ids=[local_rank])
if rank == 0:
    print("training on", torch.cuda.device_count(), "GPUs")
"""
        ),
        # The local rank as device_ids, once the model goes to runtime.device(): right on GPUs, refused by DDP
        # on a CPU run (a migrated --local_rank script failed under torchrun without CUDA).
        Example(
            before="""\
import argparse

import torch
from ddp_migrate import runtime
from torch.nn.parallel import DistributedDataParallel as DDP

parser = argparse.ArgumentParser()
parser.add_argument("--local_rank", type=int, default=-1)
args = parser.parse_args()
device = runtime.device()
model = DDP(Net().to(device), device_ids=[args.local_rank], output_device=args.local_rank)
loss.backward()
""",
            after="""\
import argparse

import torch
from ddp_migrate import runtime
from torch.nn.parallel import DistributedDataParallel as DDP

parser = argparse.ArgumentParser()
parser.add_argument("--local_rank", type=int, default=-1)
args = parser.parse_args()
device = runtime.device()
model = DDP(Net().to(device), device_ids=runtime.device_ids())
loss.backward()
""",
        ),
    )

    def _cases(self, analysis: ScriptAnalysis) -> Iterator[_Case]:
        facts = legacy_facts(analysis)
        devices: list[cst.Call] = []
        for call in analysis.calls:
            if analysis.is_call_to(call, names.TORCH_DEVICE):
                if any(_mentions_rank(facts, a.value) for a in call.args):
                    devices.append(call)
                    yield _Case(call, DEVICE, "torch.device from the global rank: the GPU of a process is its local rank")
            elif analysis.is_call_to(call, names.SET_DEVICE_CALLS):
                if call.args and facts.holds_global_rank(call.args[0].value):
                    yield _Case(call, SET_DEVICE, f"{code_of(call.func)}(global rank): the GPU of a process is its local rank")
            elif _is_cuda_query(analysis, call) and call.args and call.args[0].keyword is None and facts.holds_global_rank(call.args[0].value):
                yield _Case(call.args[0].value, DEVICE, f"{call_method_name(call)}(global rank): the GPU of a process is its local rank")
            elif call_method_name(call) in ("to", "cuda") and call.args:
                first = call.args[0]
                if (first.keyword is None or first.keyword.value == "device") and facts.holds_global_rank(first.value):
                    if call_method_name(call) == "cuda":
                        yield _Case(call, CUDA_CALL, ".cuda(global rank): the GPU of a process is its local rank")
                    else:
                        yield _Case(first.value, DEVICE, ".to(global rank): the GPU of a process is its local rank")
            if analysis.is_call_to(call, names.DISTRIBUTED_DATA_PARALLEL):
                ids = argument(call, DDP_PARAMETERS, "device_ids")
                listed = ids.value.body if ids is not None and isinstance(ids.value, cst.IfExp) else ids.value if ids is not None else None
                if isinstance(listed, cst.List) and len(listed.elements) == 1 and facts.holds_global_rank(listed.elements[0].value):
                    yield _Case(listed, DEVICE_IDS, "device_ids=[global rank]: DDP needs this process's local GPU")
                    output = argument(call, DDP_PARAMETERS, "output_device")
                    if output is not None and _mentions_rank(facts, output.value):
                        yield _Case(output.value, OUTPUT_DEVICE, "output_device=global rank: DDP needs this process's local GPU")
                elif (
                    isinstance(listed, cst.List)
                    and ids is not None
                    and ids.value is listed  # (``[local_rank] if torch.cuda.is_available() else None`` is CPU-safe)
                    and len(listed.elements) == 1
                    and facts.holds_local_rank(listed.elements[0].value)
                    and (analysis.calls_to(RUNTIME_DEVICE) or falls_back_to_the_cpu(analysis))
                    and not _under_a_gpu_test(analysis, call, listed.elements[0].value)
                ):
                    # The model goes to runtime.device() (or a device the program makes the CPU without CUDA), the
                    # CPU where there is no GPU: DDP refuses device_ids there.
                    yield _Case(listed, DEVICE_IDS, "device_ids=[local rank] with a model that is on the CPU where there is no GPU: on a CPU run DDP takes no device_ids")
                    output = argument(call, DDP_PARAMETERS, "output_device")
                    if output is not None and facts.holds_local_rank(output.value):
                        yield _Case(output.value, OUTPUT_DEVICE, "output_device=local rank: DDP uses device_ids[0]")
        for node in analysis.preorder:
            if _cuda_string(node) and _mentions_rank(facts, node) and not any(analysis.is_inside(node, d) for d in devices):
                # Where a device call takes it, the device object does as well; elsewhere it stays a string
                # (``name.split(":")``, a ``map_location`` dict's value: torch.load wants strings there).
                holder = analysis.parent(node)
                kind = DEVICE if type(holder) is cst.Arg and _takes_a_device(analysis, holder) else DEVICE_STRING  # type: ignore[arg-type]
                yield _Case(node, kind, f'{code_of(node)} from the global rank: the GPU of a process is its local rank')

    def matches(self, analysis: ScriptAnalysis) -> Iterator[Match]:
        blocked = legacy_facts(analysis).blocked()
        for case in self._cases(analysis):
            yield Match(case.node, case.message + blocked, not blocked)

    def fix(self, analysis: ScriptAnalysis, options: Options) -> FixResult | None:
        facts = legacy_facts(analysis)
        if facts.blocked():
            return None
        edits = Edits(analysis)
        removed: list[cst.CSTNode] = []
        runtime_sets_device = not analysis.calls_to(names.INIT_PROCESS_GROUP)
        for case in self._cases(analysis):
            rt = runtime_name(analysis, edits)
            node = case.node
            if case.kind == DEVICE:
                edits.replace(facts.device_choice(node), expression(f"{rt}.device()"))  # type: ignore[arg-type]
                message = "device of the global rank replaced by runtime.device() (the local rank's GPU)"
            elif case.kind == DEVICE_STRING:
                edits.replace(facts.device_choice(node), expression(f"str({rt}.device())"))  # type: ignore[arg-type]
                message = "device of the global rank replaced by str(runtime.device()) (the local rank's GPU)"
            elif case.kind == CUDA_CALL:
                assert isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute)
                edits.replace(node, node.with_changes(func=node.func.with_changes(attr=cst.Name("to")), args=[cst.Arg(expression(f"{rt}.device()"))]))
                message = ".cuda(rank) replaced by .to(runtime.device())"
            elif case.kind == SET_DEVICE:
                assert isinstance(node, cst.Call)
                stmt = analysis.statement(node)
                if runtime_sets_device and isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1:
                    removed.append(stmt)
                    message = f"{code_of(node.func)}(rank) removed (runtime.setup() sets the local rank's device)"
                else:
                    edits.replace(node.args[0].value, expression(f"{rt}.local_rank()"))
                    message = f"{code_of(node.func)} uses the local rank"
            elif case.kind == DEVICE_IDS:
                wrap = analysis.parent(analysis.parent(node))
                model = wrap.args[0].value if isinstance(wrap, cst.Call) and wrap.args and wrap.args[0].keyword is None else None
                ids = device_ids_call(analysis, edits, model)
                if model is not None and dotted_name(model) is not None and not ids.args and falls_back_to_the_cpu(analysis):
                    # (the program's own device choice, not the runtime's: the ids of where the model is)
                    ids = ids.with_changes(args=[cst.Arg(model)])
                edits.replace(facts.device_choice(node, fallback="none"), ids)  # type: ignore[arg-type]
                message = f"device_ids={code_of(node).strip()} replaced by runtime.device_ids()"
            else:
                arg = analysis.parent(node)
                call = analysis.parent(arg)
                assert isinstance(arg, cst.Arg) and isinstance(call, cst.Call)
                index = list(call.args).index(arg)
                edits.replace(call, lambda updated, i=index: without_argument(updated, updated.args[i]))  # type: ignore[arg-type]
                message = "output_device removed (DDP uses device_ids[0])"
            edits.changes.append(Change(self.code, analysis.line(node), message))
        remove_statements(analysis, edits, removed)
        if not edits:
            return None
        edits.drop_unused_imports()
        return edits.apply(analysis.module)
