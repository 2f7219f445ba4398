"""How fixes spell calls into the runtime (``ddp_migrate.runtime`` or the vendored ``ddp_runtime``), torch's DDP and
``contextlib.nullcontext``, and make sure the file imports them."""

from __future__ import annotations

import libcst as cst

from .analysis import ScriptAnalysis, dotted_name
from .analysis.devices import model_may_stay_on_the_cpu, trains_on_the_cpu_only
from .edits import Edits, expression

DDP_MODULE, DDP_CLASS = "torch.nn.parallel", "DistributedDataParallel"


def runtime_name(analysis: ScriptAnalysis, edits: Edits) -> str:
    """The local name of the runtime module in this file, adding its import when the file lacks it.

    The runtime comes from ``analysis.options.runtime_module``: ``from ddp_migrate import runtime`` for the
    installed package, ``import ddp_runtime as runtime`` for the module ``--runtime vendor`` writes beside
    the program. A file that already imports the runtime in either spelling keeps its import.
    """
    alias = analysis.runtime_alias
    existing = analysis.runtime_import
    module = analysis.options.runtime_module
    if existing is not None and existing[0] != module:
        return alias
    add_runtime_import(edits, module, alias)
    return alias


#: What a report adds where a set-up keeps a program that places nothing on an accelerator on the CPU.
ON_THE_CPU = "; the program places nothing on an accelerator, so device=\"cpu\" keeps every process on the CPU (gloo) as the original was, GPU machine or not"


def set_up_on_the_cpu(analysis: ScriptAnalysis) -> bool:
    """Whether a set-up written into this module says ``device="cpu"``: the module is the entry of a program
    that trains on the CPU wherever it runs. (A helper module's set-up may serve another script, whose
    program may train on a GPU; a migration of one script does not see them all.)"""
    return analysis.is_entry and trains_on_the_cpu_only(analysis)


def on_the_cpu_note(analysis: ScriptAnalysis) -> str:
    """What a report adds to the line of a set-up written into this module (:data:`ON_THE_CPU`, or nothing)."""
    return ON_THE_CPU if set_up_on_the_cpu(analysis) else ""


def setup_code(analysis: ScriptAnalysis, rt: str, *arguments: str) -> str:
    """The code of a call of the runtime's ``setup()`` with ``arguments``, and ``device="cpu"`` where the program
    trains on the CPU wherever it runs (a CPU model cannot take a GPU's ``device_ids`` or nccl)."""
    if set_up_on_the_cpu(analysis):
        arguments = (*arguments, 'device="cpu"')
    return f"{rt}.setup({', '.join(arguments)})"


def add_runtime_import(edits: Edits, module: str, alias: str) -> None:
    """``from package import runtime [as alias]`` for a dotted module, ``import module [as alias]`` else."""
    package, _, last = module.rpartition(".")
    if package:
        edits.add_import(package, last, None if alias == last else alias)
    else:
        edits.add_import(module, None, None if alias == module else alias)


def imported_name(analysis: ScriptAnalysis, edits: Edits, module: str, name: str) -> str:
    """The local name of ``module.name``, adding ``from module import name`` when the file lacks it."""
    existing = analysis.local_name_for(f"{module}.{name}")
    if existing:
        return existing
    edits.add_import(module, name)
    return name


def find_unused_parameters_argument() -> cst.Arg:
    """``find_unused_parameters=True``, for a wrap whose model skips layers on some steps."""
    return cst.Arg(
        cst.Name("True"),
        keyword=cst.Name("find_unused_parameters"),
        equal=cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace("")),
    )


def device_ids_call(analysis: ScriptAnalysis, edits: Edits, model: cst.BaseExpression | None) -> cst.Call:
    """``runtime.device_ids()`` for the wrap of ``model``; ``runtime.device_ids(model)`` where the program may keep
    the model on the CPU (``--no-cuda``) and ``model`` is a name or attribute that can be read again."""
    rt = runtime_name(analysis, edits)
    call = expression(f"{rt}.device_ids()")
    assert isinstance(call, cst.Call)
    if model is not None and dotted_name(model) is not None and model_may_stay_on_the_cpu(analysis):
        return call.with_changes(args=[cst.Arg(model)])
    return call


def ddp_call(analysis: ScriptAnalysis, edits: Edits, model: cst.BaseExpression, extra: list[cst.Arg] | None = None) -> cst.Call:
    """``DistributedDataParallel(model, device_ids=runtime.device_ids())`` in this file's spelling (see
    :func:`device_ids_call`)."""
    ddp = imported_name(analysis, edits, DDP_MODULE, DDP_CLASS)
    call = expression(f"{ddp}(MODEL, device_ids=IDS)")
    assert isinstance(call, cst.Call)
    args = [call.args[0].with_changes(value=model), call.args[1].with_changes(value=device_ids_call(analysis, edits, model))]
    for arg in extra or []:
        args[-1] = args[-1].with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
        args.append(arg.with_changes(comma=cst.MaybeSentinel.DEFAULT))
    return call.with_changes(args=args)


def nullcontext_name(analysis: ScriptAnalysis, edits: Edits) -> str:
    """How the file spells ``contextlib.nullcontext``, adding ``import contextlib`` (where isort puts it) if needed."""
    function = analysis.local_name_for("contextlib.nullcontext")
    if function:
        return function
    module = analysis.local_name_for("contextlib")
    if module:
        return f"{module}.nullcontext"
    edits.add_import("contextlib")
    return "contextlib.nullcontext"
