"""DDP009 load-without-map-location."""

from __future__ import annotations

from typing import Iterator

import libcst as cst

from . import names
from .analysis import ScriptAnalysis, dotted_name
from .analysis.script import callee_name
from .base import Change, Example, FixResult, FixSafety, Match, Options, Phase, Rule, Valid
from .edits import Edits, expression, with_keyword
from .analysis.devices import trains_on_the_cpu_only
from .runtime_calls import runtime_name


class LoadWithoutMapLocation(Rule):
    """Load checkpoints onto this process's device.

    What it finds: ``torch.load(path)`` without ``map_location``; not in a data set's methods (``__getitem__``
    loading a sample file runs in the ``DataLoader``'s worker processes, where a GPU cannot be used).

    Why it is a problem: tensors are restored onto the device they were saved from, usually ``cuda:0``, so
    every process loads onto GPU 0 (memory spikes, or failure on a machine with fewer GPUs or none).

    What the fix does: ``torch.load(path, map_location=runtime.device())``; ``map_location="cpu"`` for a
    checkpoint whose random state goes to ``torch.set_rng_state`` (which takes a CPU tensor only; the
    model's and optimizer's states are copied onto their devices when they are loaded), and in a program
    that trains on the CPU wherever it runs (see DDP003), where a load before the set-up would otherwise
    map onto the GPU of a GPU machine.

    Fix safety: tensors load onto this process's device instead of the device they were saved from (a
    plain run: ``cuda:0`` or the CPU), so a checkpoint saved on GPU 1 or on a CUDA machine now loads
    where it runs.
    """

    code = "DDP009"
    name = "load-without-map-location"
    fix_safety = FixSafety.SAFE
    phase = Phase.CHECKPOINTS
    triggers = ("load",)
    requires = (*names.TRAINING_STEP_WORDS, "DataParallel")
    needs_names = (names.TRAINING_CODE_NAMES,)
    examples = (
        Example(
            before="""\
import torch

model = Net().cuda()
checkpoint = torch.load("checkpoint/best.pt")
loss.backward()
""",
            after="""\
import torch
from ddp_migrate import runtime

model = Net().cuda()
checkpoint = torch.load("checkpoint/best.pt", map_location=runtime.device())
loss.backward()
""",
        ),
        # A program that trains on the CPU wherever it runs (DDP003's device="cpu"): its loads stay there.
        Example(
            before="""\
import torch

checkpoint = torch.load("checkpoint/best.pt")
loss.backward()
""",
            after="""\
import torch

checkpoint = torch.load("checkpoint/best.pt", map_location="cpu")
loss.backward()
""",
        ),
        # A checkpoint that holds a random state: set_rng_state takes a CPU tensor only (a trial's resume
        # failed on a GPU).
        Example(
            before="""\
import torch

checkpoint = torch.load("last.pt")
model.load_state_dict(checkpoint["model"])
torch.set_rng_state(checkpoint["rng"])
loss.backward()
""",
            after="""\
import torch

checkpoint = torch.load("last.pt", map_location="cpu")
model.load_state_dict(checkpoint["model"])
torch.set_rng_state(checkpoint["rng"])
loss.backward()
""",
        ),
        Valid(
            """\
import torch

checkpoint = torch.load(path, map_location="cpu")
"""
        ),
    )

    def matches(self, analysis: ScriptAnalysis) -> Iterator[Match]:
        if not analysis.is_training_code:
            return
        for call in analysis.calls_to(names.TORCH_LOAD):
            positional = [a for a in call.args if a.keyword is None]
            keywords = {a.keyword.value for a in call.args if a.keyword is not None}
            if "map_location" not in keywords and len(positional) < 2 and not any(a.star for a in call.args):
                if analysis.runs_in_a_data_set(call):
                    continue  # (a data set's files: loaded where the data is, maybe in a worker, never on a GPU of ours)
                yield Match(call, "torch.load without map_location loads onto the device the tensors were saved from")

    def fix(self, analysis: ScriptAnalysis, options: Options) -> FixResult | None:
        edits = Edits(analysis)
        on_the_cpu = trains_on_the_cpu_only(analysis)
        for match in self.matches_in(analysis):
            call = match.node
            assert isinstance(call, cst.Call)
            rng = _holds_random_state(analysis, call)
            target = '"cpu"' if rng or on_the_cpu else f"{runtime_name(analysis, edits)}.device()"
            edits.replace(call, with_keyword(call, "map_location", expression(target)))
            if rng:
                message = "torch.load maps onto the CPU (it holds a random state, which set_rng_state takes on the CPU only)"
            elif on_the_cpu:
                message = "torch.load maps onto the CPU, where the program trains (it places nothing on an accelerator)"
            else:
                message = "torch.load maps onto runtime.device()"
            edits.changes.append(Change(self.code, analysis.line(call), message))
        return edits.apply(analysis.module) if edits else None


def _holds_random_state(analysis: ScriptAnalysis, load: cst.Call) -> bool:
    """Whether what a ``torch.load`` returns reaches ``torch.set_rng_state`` (or CUDA's): a random state is a
    CPU byte tensor, and mapped onto a GPU it is refused ("RNG state must be a torch.ByteTensor")."""
    for call in analysis.calls:
        if callee_name(call) in ("set_rng_state", "set_rng_state_all") and call.args and _comes_from(analysis, load, call.args[0].value, set()):
            return True
    return False


def _comes_from(analysis: ScriptAnalysis, load: cst.Call, given: cst.BaseExpression, seen: set[cst.CSTNode]) -> bool:
    """Whether a value is (a part of) what the load returns, through names, items and attributes, and the
    arguments of a helper (``restore_rng(ckpt["rng"])`` calling ``torch.set_rng_state(state["torch"])``)."""
    if given in seen or len(seen) > 20:
        return False
    seen.add(given)
    if analysis.is_inside(load, given):
        return True
    root = given
    while type(root) in (cst.Subscript, cst.Attribute):
        root = root.value  # type: ignore[attr-defined]
    name = dotted_name(root)
    if name is None:
        return False
    return any(
        analysis.owns(value) and _comes_from(analysis, load, value, seen)  # type: ignore[arg-type]
        for value in analysis.flows_into(root, name)
        if isinstance(value, cst.BaseExpression)
    )
