"""DDP004 hardcoded-device."""

from __future__ import annotations

import re
from typing import Iterator

import libcst as cst

from . import names
from .analysis import ScriptAnalysis, call_method_name, dotted_name, tree, walk
from .analysis.script import binding_name, literal_dict_items, subscript_key
from .analysis.ranks import Kind, rank_facts
from .analysis.devices import under_a_cuda_test
from .base import Change, Example, FixResult, FixSafety, Match, Options, Phase, Rule, Valid
from .edits import Edits, code_of, expression, remove_statements
from .runtime_calls import runtime_name

CUDA_LITERAL = re.compile(r"^cuda(:\d+)?$")


def _mentions_cuda(node: cst.CSTNode) -> bool:
    """Whether an expression spells a CUDA device in a string (``"cuda"``, ``"cuda:0"``, ``f"cuda:{i}"``)."""
    if isinstance(node, cst.SimpleString):
        return bool(CUDA_LITERAL.match(str(node.evaluated_value)))
    if isinstance(node, cst.FormattedString):
        return any(isinstance(p, cst.FormattedStringText) and p.value.startswith("cuda") for p in node.parts)
    return any(_mentions_cuda(child) for child in tree.children(node))


def _configured_defaults(call: cst.Call) -> list[cst.BaseExpression]:
    """The CUDA strings inside ``torch.device(<value>)`` where the value is looked up and CUDA is only its default
    (``cfg.get("device", "cuda")``, ``os.environ.get("DEVICE", "cuda" if ... else "cpu")``, ``args.device or
    "cuda"``): the strings to replace, keeping the lookup; empty for a device written out."""
    if len(call.args) != 1 or type(call.args[0].value) not in (cst.Call, cst.BooleanOperation):
        return []
    return [
        node  # type: ignore[misc]
        for node in tree.walk(call.args[0].value)
        if type(node) in (cst.SimpleString, cst.FormattedString) and _mentions_cuda(node)
    ]


def _user_choice(analysis: ScriptAnalysis, call: cst.Call) -> cst.IfExp | None:
    """The ``"cuda" if use_cuda else "cpu"`` inside ``torch.device(...)`` when its test is the user's
    choice (a flag, ``--no-cuda``), not merely ``torch.cuda.is_available()``."""
    if len(call.args) != 1 or not isinstance(call.args[0].value, cst.IfExp):
        return None
    choice = call.args[0].value
    test = choice.test
    if isinstance(test, cst.Call) and analysis.is_call_to(test, {"torch.cuda.is_available"}):
        return None
    if not (_cuda_side(choice.body) or _cuda_side(choice.orelse)):
        return None
    return choice


def _cuda_side(side: cst.BaseExpression) -> bool:
    """Whether a side of a device choice names a CUDA device: ``"cuda"``, ``"cuda:0"``, ``f"cuda:{args.gpu}"``."""
    if isinstance(side, cst.SimpleString):
        return bool(CUDA_LITERAL.match(str(side.evaluated_value)))
    if isinstance(side, cst.FormattedString) and side.parts and isinstance(side.parts[0], cst.FormattedStringText):
        return side.parts[0].value == "cuda" if len(side.parts) == 1 else side.parts[0].value == "cuda:"
    return False


def _may_run_on_the_cpu(init: cst.Call) -> bool:
    """Whether a process group set up by this call may use gloo: no backend named (torch picks gloo for the CPU),
    or one that names gloo (``backend="nccl" if torch.cuda.is_available() else "gloo"``)."""
    backend = next((a.value for a in init.args if (a.keyword is None and a is init.args[0]) or (a.keyword is not None and a.keyword.value == "backend")), None)
    if backend is None:
        return True
    return any(type(node) is cst.SimpleString and "gloo" in node.evaluated_value.lower() for node in walk(backend))  # type: ignore[attr-defined, union-attr]


def _is_literal_index(node: cst.BaseExpression) -> bool:
    return isinstance(node, cst.Integer) or (isinstance(node, cst.SimpleString) and bool(re.match(r"^cuda:\d+$", str(node.evaluated_value))))


def _cuda_device(call: cst.Call) -> cst.BaseExpression | None:
    """The device a ``.cuda(...)`` call names: its first positional argument or ``device=`` (``None``: none)."""
    for arg in call.args:
        if arg.keyword is None or arg.keyword.value == "device":
            return arg.value
    return None


def _device_names(analysis: ScriptAnalysis) -> set[str]:
    """The names and attributes (``device``, ``args.device``, ``self.device``) the module hands on as a
    device: to ``.to(...)``, ``torch.device(...)``, ``torch.cuda.set_device(...)``, a ``device=`` or
    ``map_location=`` argument (found once per module)."""
    cached = analysis.__dict__.get("_device_names")
    if cached is None:
        cached = analysis.__dict__["_device_names"] = _find_device_names(analysis)
    return cached


def _find_device_names(analysis: ScriptAnalysis) -> set[str]:
    found: set[str] = set()
    for call in analysis.calls:
        handed: list[cst.BaseExpression] = [a.value for a in call.args if a.keyword is not None and a.keyword.value in names.DEVICE_KEYWORDS]
        if call.args and call.args[0].keyword is None and (
            call_method_name(call) == "to" or analysis.is_call_to(call, names.TORCH_DEVICE | names.SET_DEVICE_CALLS)
        ):
            handed.append(call.args[0].value)
        pending = list(handed)
        while pending:  # ``device = DEVICE``: the name copied from is handed on too
            value = pending.pop()
            if isinstance(value, cst.IfExp):  # ``torch.device(args.device if torch.cuda.is_available() else "cpu")``
                pending.extend((value.body, value.orelse))
                continue
            name = binding_name(value)
            if name is None or name in found:
                continue
            found.add(name)
            pending.extend(analysis.copied_from(value, name))
    return found


def _string_devices(analysis: ScriptAnalysis, strict: bool) -> Iterator[cst.SimpleString]:
    """CUDA devices written as strings into a variable the module uses as a device (``device = "cuda:0"``,
    ``args.device = "cuda" if torch.cuda.is_available() else "cpu"``): a literal index always; a bare
    ``"cuda"`` only where nothing sets the process group up by hand (``strict``) and no choice guards it
    (after ``runtime.setup()`` a bare ``"cuda"`` follows this process's device; a CPU machine still needs
    the other side)."""
    used = _device_names(analysis)
    for assign in analysis.assignments:
        if isinstance(assign, cst.Assign):
            if len(assign.targets) != 1:
                continue
            target = assign.targets[0].target
        else:
            target = assign.target
        name = dotted_name(target)
        if assign.value is None or name is None:
            continue
        # the value itself, or the item of a dict written out whose key is read as a device (``cfg["device"]``)
        values = [assign.value] if name in used or _config_field(analysis, assign, name, used) else []
        values += [item for key, item in literal_dict_items(assign.value) or () if f"{name}[{key!r}]" in used]
        for value in values:
            sides = [value.body, value.orelse] if isinstance(value, cst.IfExp) else [value]
            for side in sides:
                if not (isinstance(side, cst.SimpleString) and CUDA_LITERAL.match(str(side.evaluated_value))):
                    continue
                if _is_literal_index(side) or (strict and side is value):
                    yield side
    yield from _option_defaults(analysis, used)


def _config_field(analysis: ScriptAnalysis, assign: cst.CSTNode, name: str, used: set[str]) -> bool:
    """Whether an assignment in a class body sets a field that the module reads as a device through an instance
    (``device: str = "cuda:0"`` of a config dataclass, read as ``cfg.device`` in a Trainer)."""
    owner = analysis.parent(analysis.parent(assign))  # (the statement line, then the class body)
    cls = analysis.parent(owner) if owner is not None else None
    if "." in name or not isinstance(cls, cst.ClassDef) or not any(u.endswith("." + name) for u in used):
        return False
    constructed = analysis.shared.constructed
    # a read of the field through an instance of this very class (``cfg`` of ``cfg = Config()``, handed on)
    return any(
        type(node) is cst.Attribute
        and node.attr.value == name  # type: ignore[attr-defined]
        and dotted_name(node) in used
        and any(constructed.get(origin) is cls for origin in analysis.origins(node.value))  # type: ignore[attr-defined]
        for node in analysis.preorder
    )


def _visible_devices_set(analysis: ScriptAnalysis) -> Iterator[cst.CSTNode]:
    """Statements that set ``CUDA_VISIBLE_DEVICES`` (``os.environ["CUDA_VISIBLE_DEVICES"] = args.gpu``,
    ``os.environ.setdefault(...)``, ``os.putenv(...)``), not under a test of the launch or the world size."""
    for node in _visible_devices_statements(analysis):
        tests = [code_of(a.test) for a in analysis.ancestors(node) if isinstance(a, (cst.If, cst.IfExp))]
        if not any(word in test for test in tests for word in _LAUNCH_WORDS):
            yield node


#: Words of a test that tells a torchrun launch from a plain run.
_LAUNCH_WORDS = ("world_size", "WORLD_SIZE", "LOCAL_RANK", "launched_by_torchrun", "distributed", "is_initialized")


def _visible_devices_statements(analysis: ScriptAnalysis) -> Iterator[cst.CSTNode]:
    for assign in analysis.assignments:
        if isinstance(assign, cst.Assign) and any(
            isinstance(t.target, cst.Subscript) and dotted_name(t.target.value) in ("os.environ", "environ")
            and subscript_key(t.target) == "CUDA_VISIBLE_DEVICES" for t in assign.targets
        ):
            yield assign
    for call in analysis.calls:
        if call_method_name(call) in ("setdefault", "putenv", "update") or dotted_name(call.func) == "os.putenv":
            first = call.args[0].value if call.args else None
            if isinstance(first, cst.SimpleString) and first.evaluated_value == "CUDA_VISIBLE_DEVICES":
                yield call


def _option_defaults(analysis: ScriptAnalysis, used: set[str]) -> Iterator[cst.SimpleString]:
    """The default of a command-line option read as a device (``parser.add_argument("--device",
    default="cuda:1")`` with ``args.device`` handed to ``torch.device``): a literal index only (a bare
    ``"cuda"`` follows this process's device once ``runtime.setup()`` has set it)."""
    options = analysis.method_calls("add_argument")
    if not options:
        return
    # (the option may be read in another module: ``TrainConfig(device=args.device)`` handed to a trainer)
    every = used.union(*(_device_names(module) for module in analysis.shared.analyses if module is not analysis))
    read = {name.rsplit(".", 1)[-1] for name in every if "." in name}
    for call in options:
        default = next((a.value for a in call.args if a.keyword is not None and a.keyword.value == "default"), None)
        if isinstance(default, cst.IfExp):  # ``default="cuda:0" if torch.cuda.is_available() else "cpu"``
            default = next((side for side in (default.body, default.orelse) if isinstance(side, cst.SimpleString) and _is_literal_index(side)), None)
        if not (isinstance(default, cst.SimpleString) and _is_literal_index(default)):
            continue
        dest = next((a.value for a in call.args if a.keyword is not None and a.keyword.value == "dest"), None)
        options = [a.value for a in call.args if a.keyword is None and isinstance(a.value, cst.SimpleString)]
        if isinstance(dest, cst.SimpleString):
            name = str(dest.evaluated_value)
        else:
            longs = [str(o.evaluated_value) for o in options if str(o.evaluated_value).startswith("--")]
            plain = [str(o.evaluated_value) for o in options if not str(o.evaluated_value).startswith("-")]
            spelled = longs[0][2:] if longs else (plain[0] if plain else "")
            name = spelled.replace("-", "_")
        if name in read:
            yield default


class HardcodedDevice(Rule):
    """Use this process's own device instead of a hard-coded CUDA device.

    What it finds: ``torch.device("cuda")``, ``torch.device("cuda:0")``, ``torch.device("cuda" if ... else
    "cpu")``, ``.cuda()``, ``.to("cuda")``, ``device="cuda"`` / ``map_location="cuda:0"`` arguments and
    ``torch.cuda.set_device(0)`` (``torch.accelerator.set_device_index(0)``); also the default of a command-line
    option read as a device (``add_argument("--device", default="cuda:1")``), ``CUDA_VISIBLE_DEVICES`` set by the
    program (left to a human: under torchrun every process must see all the GPUs of its node), and a device kept
    in a variable as a string (``device = "cuda:0" if torch.cuda.is_available() else "cpu"``) that the program
    hands to ``.to(...)`` or ``device=``, also through copies (``device = DEVICE`` of a module-level ``DEVICE``)
    and a dict written out (``CFG["device"]``). In a script that already sets up a process group only literal
    indices (``cuda:0``, ``.cuda(0)``, ``set_device(0)``) are reported: there ``.cuda()`` follows the current
    device; where that set-up may take gloo (it runs on CPU machines too), so is a ``device="cuda"`` no CUDA test
    guards.

    Why it is a problem: with one process per GPU, every process that says ``cuda`` or ``cuda:0`` piles
    onto GPU 0 (out of memory, or NCCL errors about duplicate GPUs), and none of it runs on a CPU-only
    machine.

    What the fix does: ``runtime.device()`` (``cuda:<LOCAL_RANK>`` on CUDA, ``cpu`` otherwise);
    ``.cuda()`` becomes ``.to(runtime.device())``; ``set_device`` calls are removed because
    ``runtime.setup()`` sets the device before any CUDA work. A device string in a variable becomes
    ``str(runtime.device())``, still a string (code such as ``"cuda" in device`` keeps working).

    Fix safety: a plain run uses ``cuda:0`` (or the CPU without CUDA), as the usual ``cuda``/``cuda:0``
    did; a script that named another GPU (``cuda:1``) now uses ``cuda:<LOCAL_RANK>``, and removed
    ``set_device`` calls are made by ``runtime.setup()``.
    """

    code = "DDP004"
    name = "hardcoded-device"
    fix_safety = FixSafety.SAFE
    phase = Phase.DEVICES
    triggers = ("cuda", "CUDA_VISIBLE_DEVICES", "set_device")  # (``torch.accelerator.set_device_index(0)`` names no CUDA)
    requires = (*names.TRAINING_STEP_WORDS, "DataParallel")
    needs_names = (names.TRAINING_CODE_NAMES,)
    examples = (
        Example(
            before="""\
import torch

device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
model = Net().cuda()
x = x.to("cuda:0")
loss.backward()
""",
            after="""\
import torch
from ddp_migrate import runtime

device = runtime.device()
model = Net().to(runtime.device())
x = x.to(runtime.device())
loss.backward()
""",
        ),
        Example(
            before="""\
import torch

torch.cuda.set_device(0)
if use_cuda:
    x, y = x.cuda(), y.cuda()
loss.backward()
""",
            after="""\
import torch
from ddp_migrate import runtime

if use_cuda:
    x, y = x.to(runtime.device()), y.to(runtime.device())
loss.backward()
""",
        ),
        # A device string of the top level that a function copies (a trial: every rank on GPU 0, nothing said).
        Example(
            before="""\
import torch

DEVICE = "cuda:0" if torch.cuda.is_available() else "cpu"


def train():
    device = DEVICE
    model = Net().to(device)
    loss.backward()
""",
            after="""\
import torch
from ddp_migrate import runtime

DEVICE = str(runtime.device()) if torch.cuda.is_available() else "cpu"


def train():
    device = DEVICE
    model = Net().to(device)
    loss.backward()
""",
        ),
        # The user's choice is kept (issue 14: --no-cuda used to stop working).
        Example(
            before="""\
import torch

use_cuda = not args.no_cuda and torch.cuda.is_available()
device = torch.device("cuda" if use_cuda else "cpu")
loss.backward()
""",
            after="""\
import torch
from ddp_migrate import runtime

use_cuda = not args.no_cuda and torch.cuda.is_available()
device = runtime.device() if use_cuda else torch.device("cpu")
loss.backward()
""",
        ),
        # A device kept as a string: every process used GPU 0 (a trial's finding).
        Example(
            before="""\
import torch

device = "cuda:0" if torch.cuda.is_available() else "cpu"
model = Net().to(device)
device_type = "cuda" if "cuda" in device else "cpu"
loss.backward()
""",
            after="""\
import torch
from ddp_migrate import runtime

device = str(runtime.device()) if torch.cuda.is_available() else "cpu"
model = Net().to(device)
device_type = "cuda" if "cuda" in device else "cpu"
loss.backward()
""",
        ),
        # A ``--gpu`` option (default 0) names one GPU for every process (a trial's crash: DDP's device_ids
        # and the model's device differed on every rank but the first).
        Example(
            before="""\
import argparse
import torch

parser = argparse.ArgumentParser()
parser.add_argument("--gpu", type=int, default=0)
args = parser.parse_args()
model = Net().cuda(args.gpu)
x = x.cuda(args.gpu, non_blocking=True)
loss.backward()
""",
            after="""\
import argparse
import torch
from ddp_migrate import runtime

parser = argparse.ArgumentParser()
parser.add_argument("--gpu", type=int, default=0)
args = parser.parse_args()
model = Net().to(runtime.device())
x = x.to(runtime.device(), non_blocking=True)
loss.backward()
""",
        ),
        # A config class's field read as a device through an instance (a trial's Trainer kept "cuda:0").
        Example(
            before="""\
import torch
from dataclasses import dataclass


@dataclass
class Config:
    device: str = "cuda:0"


class Trainer:
    def __init__(self, cfg):
        self.device = torch.device(cfg.device if torch.cuda.is_available() else "cpu")

    def step(self, x):
        self.model(x.to(self.device)).sum().backward()


trainer = Trainer(Config())
""",
            after="""\
import torch
from dataclasses import dataclass
from ddp_migrate import runtime


@dataclass
class Config:
    device: str = str(runtime.device())


class Trainer:
    def __init__(self, cfg):
        self.device = torch.device(cfg.device if torch.cuda.is_available() else "cpu")

    def step(self, x):
        self.model(x.to(self.device)).sum().backward()


trainer = Trainer(Config())
""",
        ),
        Valid(
            """\
import os
import torch

local_rank = int(os.environ["LOCAL_RANK"])
model = Net().cuda(local_rank)
loss.backward()
"""
        ),
        Valid(
            """\
import torch
import torch.distributed as dist

dist.init_process_group("nccl")
torch.cuda.set_device(local_rank)
model = Net().cuda()
device = torch.device(f"cuda:{local_rank}")
"""
        ),
        Valid(
            """\
import torch

with torch.autocast(device_type="cuda", enabled=False):
    pass
"""
        ),
    )

    def matches(self, analysis: ScriptAnalysis) -> Iterator[Match]:
        if not analysis.is_training_code or analysis.program_distributed_by_a_library:
            return  # (a device mesh, FSDP, DeepSpeed place the model themselves)
        # Only a program that sets up its process group by hand (in any of its modules: ``init_distributed_mode``
        # of a helper module) keeps plain ``.cuda()``; the runtime's own setup (added by DDP003 in the same run)
        # does not count.
        setups = [call for module in analysis.shared.analyses for call in module.calls_to(names.INIT_PROCESS_GROUP)]
        strict = not setups
        # A set-up that may take gloo (``"nccl" if torch.cuda.is_available() else "gloo"``, no backend given) runs on
        # CPU machines too, where a ``device="cuda"`` that no CUDA test guards fails (a path only the group opens).
        every_group_may_use_gloo = bool(setups) and all(_may_run_on_the_cpu(call) for call in setups)
        for call in analysis.calls:
            if analysis.is_call_to(call, names.TORCH_DEVICE):
                literal = any(_is_literal_index(a.value) for a in call.args) or (
                    len(call.args) == 2 and isinstance(call.args[1].value, cst.Integer)
                )
                if _mentions_cuda(call) and (strict or literal):
                    yield Match(call, "hard-coded CUDA device: use this process's device (runtime.device())")
            elif analysis.is_call_to(call, names.SET_DEVICE_CALLS):
                if strict or (call.args and _is_literal_index(call.args[0].value)):
                    yield Match(call, f"{code_of(call.func)} with a fixed device: runtime.setup() sets this process's device")
            elif call_method_name(call) == "cuda" and all(a.star == "" for a in call.args):
                chosen = _cuda_device(call)
                if chosen is None:
                    hit = strict
                else:
                    # ``.cuda(args.gpu)`` of a ``--gpu`` option (default 0): one GPU for every process.
                    hit = _is_literal_index(chosen) or (strict and rank_facts(analysis).kind(chosen) is not Kind.RANK)
                if hit:
                    yield Match(call, ".cuda() sends every process to the same GPU and fails on CPU: use .to(runtime.device())")
            elif call_method_name(call) == "to" and call.args and call.args[0].keyword is None:
                first = call.args[0].value
                if isinstance(first, cst.SimpleString) and _mentions_cuda(first) and (strict or _is_literal_index(first)):
                    yield Match(first, "hard-coded CUDA device: use this process's device (runtime.device())")
            for arg in call.args:
                if arg.keyword is not None and arg.keyword.value in names.DEVICE_KEYWORDS and isinstance(arg.value, cst.SimpleString):
                    unguarded = every_group_may_use_gloo and not under_a_cuda_test(analysis, arg.value)
                    if _mentions_cuda(arg.value) and (strict or _is_literal_index(arg.value) or unguarded):
                        yield Match(arg.value, "hard-coded CUDA device: use this process's device (runtime.device())")
        for statement in _visible_devices_set(analysis):
            yield Match(
                statement,
                "CUDA_VISIBLE_DEVICES set by the program: under torchrun every process of a node must see all its GPUs "
                "(each takes GPU LOCAL_RANK, runtime.device()); with fewer visible, a process asks for a GPU it cannot "
                "see and fails; choose the GPUs in the shell before torchrun (CUDA_VISIBLE_DEVICES=0,1 torchrun ...) "
                "and remove this line, or keep it for plain runs only (if runtime.world_size() == 1:)",
                fixable=False,
            )
        for string in _string_devices(analysis, strict):
            yield Match(string, f"hard-coded CUDA device {code_of(string)}, used as a device: every process would use it; use this process's device (str(runtime.device()))")

    def fix(self, analysis: ScriptAnalysis, options: Options) -> FixResult | None:
        edits = Edits(analysis)
        removed: list[cst.CSTNode] = []
        for match in self.matches_in(analysis):
            if not match.fixable:
                continue
            rt = runtime_name(analysis, edits)
            device = expression(f"{rt}.device()")
            node = match.node
            if isinstance(node, cst.Call) and analysis.is_call_to(node, names.SET_DEVICE_CALLS):
                stmt = analysis.statement(node)
                if not (isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 and isinstance(stmt.body[0], cst.Expr)):
                    continue
                removed.append(stmt)  # with an ``if torch.cuda.is_available():`` it leaves empty
                message = f"{code_of(node.func)} removed (runtime.setup() sets the device)"
            elif isinstance(node, cst.Call) and call_method_name(node) == "cuda":
                to = node.func.with_changes(attr=cst.Name("to"))  # type: ignore[union-attr]
                chosen = _cuda_device(node)
                kept = [a for a in node.args if a.keyword is not None and a.value is not chosen]  # ``non_blocking=True``
                edits.replace(node, node.with_changes(func=to, args=[cst.Arg(device, comma=cst.MaybeSentinel.DEFAULT), *kept]))
                message = ".cuda() replaced by .to(runtime.device())"
            elif isinstance(node, cst.Call) and (choice := _user_choice(analysis, node)) is not None:
                # Keep the user's choice: the CUDA side becomes this process's device, the other side stays.
                cuda_in_body = _cuda_side(choice.body)
                other = choice.orelse if cuda_in_body else choice.body
                kept = f"{code_of(node.func)}({code_of(other)})"
                test = code_of(choice.test)
                new = f"{rt}.device() if {test} else {kept}" if cuda_in_body else f"{kept} if {test} else {rt}.device()"
                edits.replace(node, expression(new))
                message = "CUDA side of the device choice replaced by runtime.device(); the user's choice is kept"
                if "cpu" in code_of(other).lower():
                    # Each process still binds a GPU of its machine (the wrap, runtime.device_ids(model), and the
                    # group's gloo carry a model kept on the CPU): more processes than GPUs need the variable.
                    message += (
                        " (a model kept on the CPU is wrapped there; to start more processes than the machine has "
                        "GPUs, launch with DDP_MIGRATE_DEVICE=cpu: every process then stays on the CPU)"
                    )
            elif isinstance(node, cst.Call) and (defaults := _configured_defaults(node)):
                # ``torch.device(cfg.get("device", "cuda" if ... else "cpu"))``: the configured value wins, as before;
                # only its CUDA default becomes this process's device.
                for literal in defaults:
                    edits.replace(literal, expression(f"str({rt}.device())"))
                message = (
                    "CUDA default of a configured device replaced by str(runtime.device()); the configured value is kept "
                    "(a CPU configured on a machine with GPUs: launch with DDP_MIGRATE_DEVICE=cpu, so that every process "
                    "stays on the CPU)"
                )
            elif isinstance(node, cst.SimpleString) and (
                isinstance(parent := analysis.parent(node), (cst.Assign, cst.AnnAssign, cst.IfExp, cst.DictElement))
                or (isinstance(parent, cst.Arg) and parent.keyword is not None and parent.keyword.value == "default")
            ):
                # A device kept in a variable stays a string: code reads it as one (``"cuda" in device``).
                edits.replace(node, expression(f"str({rt}.device())"))
                message = f"hard-coded CUDA device {code_of(node)} replaced by str(runtime.device())"
            else:
                edits.replace(analysis.device_choice(node), device)  # type: ignore[arg-type]
                message = "hard-coded CUDA device replaced by runtime.device()"
            edits.changes.append(Change(self.code, analysis.line(node), message))
        remove_statements(analysis, edits, removed)
        return edits.apply(analysis.module) if edits else None
