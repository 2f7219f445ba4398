"""DDP037 invalid-collective-argument."""

from __future__ import annotations

from typing import Iterator

import libcst as cst

from . import names
from .analysis import ScriptAnalysis
from .base import Example, Match, Phase, Rule, Severity, Valid

#: The parameters of each ``torch.distributed`` collective and point-to-point call, in order, as
#: ``inspect.signature`` shows them in torch 2.13 (the linter itself never imports torch).
PARAMETERS: dict[str, tuple[str, ...]] = {
    "all_reduce": ("tensor", "op", "group", "async_op"),
    "reduce": ("tensor", "dst", "op", "group", "async_op", "group_dst"),
    "broadcast": ("tensor", "src", "group", "async_op", "group_src"),
    "all_gather": ("tensor_list", "tensor", "group", "async_op"),
    "all_gather_into_tensor": ("output_tensor", "input_tensor", "group", "async_op"),
    "reduce_scatter": ("output", "input_list", "op", "group", "async_op"),
    "reduce_scatter_tensor": ("output", "input", "op", "group", "async_op"),
    "gather": ("tensor", "gather_list", "dst", "group", "async_op", "group_dst"),
    "scatter": ("tensor", "scatter_list", "src", "group", "async_op", "group_src"),
    "barrier": ("group", "async_op", "device_ids", "timeout"),
    "monitored_barrier": ("group", "timeout", "wait_all_ranks"),
    "all_to_all": ("output_tensor_list", "input_tensor_list", "group", "async_op"),
    "all_to_all_single": ("output", "input", "output_split_sizes", "input_split_sizes", "group", "async_op"),
    "send": ("tensor", "dst", "group", "tag", "group_dst"),
    "recv": ("tensor", "src", "group", "tag", "group_src"),
    "isend": ("tensor", "dst", "group", "tag", "group_dst"),
    "irecv": ("tensor", "src", "group", "tag", "group_src"),
    "broadcast_object_list": ("object_list", "src", "group", "device", "group_src"),
    "all_gather_object": ("object_list", "obj", "group"),
    "gather_object": ("obj", "object_gather_list", "dst", "group", "group_dst"),
    "scatter_object_list": ("scatter_object_output_list", "scatter_object_input_list", "src", "group", "group_src"),
}
#: The collective that takes an argument another one lacks, for the usual mix-ups.
DID_YOU_MEAN: dict[tuple[str, str], str] = {
    ("all_reduce", "dst"): "reduce",
    ("all_reduce", "src"): "broadcast",
    ("all_gather", "dst"): "gather",
    ("all_gather_object", "dst"): "gather_object",
    ("all_gather_into_tensor", "dst"): "gather",
    ("broadcast", "dst"): "scatter",
    ("broadcast", "op"): "all_reduce",
}
_BY_QUALIFIED_NAME = {qualified: name for name in PARAMETERS for qualified in names.distributed(name)}


class InvalidCollectiveArgument(Rule):
    """Call ``torch.distributed`` collectives with the arguments they take.

    What it finds: a call to a ``torch.distributed`` collective or point-to-point operation (``all_reduce``,
    ``reduce``, ``broadcast``, ``all_gather``, ``gather``, ``scatter``, ``barrier``, ``send``, ``recv``,
    ...; through any import alias) with a keyword the function does not have (``dist.all_reduce(t,
    op=ReduceOp.SUM, dst=0)``), a keyword that repeats a positional argument, or more positional
    arguments than it has parameters. The table of parameters follows torch 2.13.

    Why it is a problem: the call raises ``TypeError`` when it runs, which in a training script is often
    at the end of the first epoch or only on some ranks, after the others have already entered the
    collective and wait for it forever. The mix-up usually hides a misunderstanding (``all_reduce`` sends
    the result to every rank; a ``dst`` means ``reduce`` was meant).

    What a human must do: remove the argument, or call the collective that takes it (the message names
    it for the usual mix-ups: ``all_reduce`` with ``dst`` → ``reduce``, ``all_gather`` with ``dst`` →
    ``gather``). Which one was meant is a decision the tool leaves to you.
    """

    code = "DDP037"
    name = "invalid-collective-argument"
    phase = Phase.CLEANUP
    severity = Severity.ERROR
    triggers = ("distributed",)
    needs_names = (frozenset(_BY_QUALIFIED_NAME),)
    #: A collective is spelled with its own name, wherever it is imported from.
    requires = tuple(PARAMETERS)
    manual_fix = "remove the argument, or call the collective that takes it"
    examples = (
        Example(
            before="""\
import torch.distributed as dist

dist.all_reduce(correct, op=dist.ReduceOp.SUM, dst=0)
""",
        ),
        Example(
            before="""\
from torch.distributed import broadcast

broadcast(weights, 0, None, False, 0, "extra")
""",
        ),
        Valid(
            """\
import torch.distributed as dist

dist.all_reduce(correct, op=dist.ReduceOp.SUM)
dist.reduce(correct, dst=0, op=dist.ReduceOp.SUM)
dist.barrier(device_ids=[0])
dist.all_gather_object(results, obj)
"""
        ),
    )

    def matches(self, analysis: ScriptAnalysis) -> Iterator[Match]:
        for call in analysis.calls_to(_BY_QUALIFIED_NAME):
            function = next(_BY_QUALIFIED_NAME[q] for q in analysis.qualified_names(call.func) if q in _BY_QUALIFIED_NAME)
            yield from self._check(call, function)

    def _check(self, call: cst.Call, function: str) -> Iterator[Match]:
        parameters = PARAMETERS[function]
        spelled = ", ".join(parameters)
        positional = [arg for arg in call.args if arg.keyword is None and not arg.star]
        has_star_args = any(arg.star == "*" for arg in call.args)
        if not has_star_args and len(positional) > len(parameters):
            yield Match(
                call,
                f"{function}() takes at most {len(parameters)} positional arguments ({spelled}), "
                f"{len(positional)} given: TypeError at run time",
                fixable=False,
            )
        given = set(parameters[: len(positional)]) if not has_star_args else set()
        for arg in call.args:
            if arg.keyword is None:
                continue
            keyword = arg.keyword.value
            if keyword not in parameters:
                hint = DID_YOU_MEAN.get((function, keyword))
                suggestion = f"; did you mean {hint}()?" if hint else ""
                yield Match(
                    arg,
                    f"{function}() has no parameter {keyword!r} (it takes {spelled}): TypeError at run time{suggestion}",
                    fixable=False,
                )
            elif keyword in given:
                yield Match(arg, f"{function}() gets {keyword!r} both by position and by keyword: TypeError at run time", fixable=False)
