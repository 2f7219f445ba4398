"""Whether a program trains on the CPU wherever it runs: a fact of the analysis for the rules that set up the
process group (:func:`trains_on_the_cpu_only`).

A program that places nothing on an accelerator trains on the CPU even on a GPU machine. Its migrated copy
must do the same: a DDP wrap given a CUDA device for a CPU model fails ("device_ids ... only work with
... GPU modules"), and nccl, the GPU machine's default backend, cannot carry a CPU model's gradients.
``runtime.setup(device="cpu")`` keeps every process on the CPU, with gloo.

The answer must be certain, so any sign of an accelerator anywhere in the program counts against it: a name
or string that names one (``cuda``, ``"mps"``, ``DataParallel``, ``local_rank``, a ``--gpu`` option), a
device read from outside the program (``args.device``, ``cfg["device"]``, ``tensor.device``), a device
variable given anything but the CPU, or a ``.to(x)`` whose ``x`` is not known to be the CPU or a dtype.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

import libcst as cst

from .script import ScriptAnalysis, dotted_name, is_docstring_line

#: Fragments of a name or string, in lower case, that name an accelerator or a way to reach one.
ACCELERATOR_FRAGMENTS = ("cuda", "gpu", "nccl", "accelerat", "dataparallel", "local_rank", "localrank", "set_device")
#: Whole words (of a name split at ``_`` and digits, or of a string) that name an accelerator.
ACCELERATOR_WORDS = frozenset({"mps", "xpu", "npu", "hpu", "tpu", "xla", "xccl", "hccl", "rocm", "hip"})
#: The fragment of a name that marks a device variable (``device``, ``self.device``, ``DEVICE``).
DEVICE_FRAGMENT = "device"
#: What a device variable may hold in a program that trains on the CPU only.
CPU_NAMES = frozenset({"cpu"})
#: ``torch`` attributes that are dtypes: ``x.to(torch.float16)`` changes no device.
_DTYPE_PATTERN = re.compile(r"^torch\.(u?int\d*|float\d*|bfloat16|half|double|long|short|bool|complex\d*|cfloat|cdouble)$")


class DeviceFacts:
    """The signs of an accelerator in one module, and the device variables it binds and reads."""

    def __init__(self, analysis: ScriptAnalysis) -> None:
        self.analysis = analysis
        #: Whether the module itself names an accelerator, or gives a device variable a value other than the CPU.
        self.names_an_accelerator = False
        #: The dotted names of device variables the module binds (``device``, ``self.device``).
        self.bound: set[str] = set()
        #: The dotted names of device variables it reads (each must be bound somewhere in the program).
        self.read: set[str] = set()
        self._scan()

    def _scan(self) -> None:
        docstrings = {
            stmt.body[0].value  # type: ignore[attr-defined]
            for stmt in self.analysis.preorder
            if type(stmt) is cst.SimpleStatementLine and is_docstring_line(stmt)
        }
        self._values = {
            target: node.value  # type: ignore[attr-defined]
            for node in self.analysis.preorder
            if type(node) is cst.Assign
            for target in node.targets  # type: ignore[attr-defined]
        }
        for node in self.analysis.preorder:
            kind = type(node)
            if kind is cst.Name or kind is cst.Attribute:
                identifier = node.value if kind is cst.Name else node.attr.value  # type: ignore[attr-defined]
                if _names_accelerator(identifier):
                    self.names_an_accelerator = True
                elif DEVICE_FRAGMENT in identifier.lower():
                    self._device_variable(node)  # type: ignore[arg-type]
            elif kind is cst.SimpleString and node not in docstrings and node not in _parts(docstrings):
                if _names_accelerator(str(node.evaluated_value), strings=True):  # type: ignore[attr-defined]
                    self.names_an_accelerator = True
            elif kind is cst.FormattedStringText:
                if _names_accelerator(node.value, strings=True):  # type: ignore[attr-defined]
                    self.names_an_accelerator = True
            elif kind is cst.Call and _moves(node):  # type: ignore[arg-type]
                if not all(_device_or_dtype(arg.value) for arg in node.args):  # type: ignore[attr-defined]
                    self.names_an_accelerator = True
            if self.names_an_accelerator:
                return

    def _device_variable(self, node: cst.Name | cst.Attribute) -> None:
        """Record a use of a device variable: what a binding gives it must be the CPU."""
        parent = self.analysis.index.parents.get(node)
        if type(node) is cst.Attribute and type(parent) is cst.Attribute:
            return  # ``args.device.type``: the outer attribute is the variable's read
        if type(node) is cst.Name and type(parent) is cst.Attribute and parent.value is not node:  # type: ignore[attr-defined]
            return  # the ``device`` of ``self.device``: the attribute is the use
        name = dotted_name(node)
        if name is None:
            self.names_an_accelerator = True
            return
        if type(parent) is cst.Arg and parent.keyword is node:  # type: ignore[attr-defined]
            return  # ``device=`` of a call: its value is read on its own
        if type(parent) is cst.Param and parent.name is node:  # type: ignore[attr-defined]
            self.bound.add(name)
            default = parent.default  # type: ignore[attr-defined]
            if default is not None and not _cpu_value(default):
                self.names_an_accelerator = True
            return
        if type(parent) in (cst.FunctionDef, cst.ClassDef) and parent.name is node:  # type: ignore[attr-defined]
            self.bound.add(name)
            return
        value = _bound_value(node, self.analysis.index.parents, self._values)
        if value is not None:
            self.bound.add(name)
            if not _cpu_value(value):
                self.names_an_accelerator = True
            return
        if name == "torch.device" and type(parent) is cst.Call and parent.func is node:  # type: ignore[attr-defined]
            if not all(_cpu_value(arg.value) for arg in parent.args):  # type: ignore[attr-defined]
                self.names_an_accelerator = True
            return
        self.read.add(name)


def _parts(strings: set[cst.CSTNode]) -> set[cst.CSTNode]:
    """The strings inside concatenated docstrings."""
    found: set[cst.CSTNode] = set()
    for string in strings:
        if type(string) is cst.ConcatenatedString:
            found.update(node for node in (string.left, string.right))  # type: ignore[attr-defined]
    return found


def _names_accelerator(text: str, strings: bool = False) -> bool:
    """Whether a name (or, with ``strings``, a string) names an accelerator or a device option (a string
    that says ``device``: ``cfg["device"]``, ``--device``)."""
    lowered = text.lower().replace("distributeddataparallel", "ddp")  # a DDP wrap alone needs no accelerator
    if any(fragment in lowered for fragment in ACCELERATOR_FRAGMENTS):
        return True
    if strings and DEVICE_FRAGMENT in lowered:
        return True
    return any(word in ACCELERATOR_WORDS for word in re.split(r"[^a-z]+", lowered))


#: Stands for a value a binding gives that is not known here (a loop's, a tuple's, a ``with``'s target).
UNKNOWN = cst.Name("__unknown__")
#: Nodes that hold the parts of an assignment target that unpacks.
_UNPACKING = (cst.Element, cst.Tuple, cst.List, cst.StarredElement)


def _bound_value(
    node: cst.CSTNode, parents: Mapping[cst.CSTNode, cst.CSTNode], values: Mapping[cst.AssignTarget, cst.BaseExpression]
) -> cst.BaseExpression | None:
    """What a binding of ``node`` gives it (:data:`UNKNOWN` where an unpacking, a loop or a ``with`` does), or
    ``None`` where ``node`` is read, not bound."""
    target, parent, unpacked = node, parents.get(node), False
    while type(parent) in _UNPACKING:
        target, parent, unpacked = parent, parents.get(parent), True
    kind = type(parent)
    if kind is cst.AssignTarget and parent.target is target:  # type: ignore[union-attr]
        return UNKNOWN if unpacked else values.get(parent, UNKNOWN)  # type: ignore[arg-type]
    if kind is cst.AnnAssign and parent.target is target:  # type: ignore[union-attr]
        return UNKNOWN if unpacked else (parent.value or cst.Name("None"))  # type: ignore[union-attr]
    if kind is cst.NamedExpr and parent.target is target:  # type: ignore[union-attr]
        return parent.value  # type: ignore[union-attr]
    if kind in (cst.AugAssign, cst.For, cst.CompFor) and parent.target is target:  # type: ignore[union-attr]
        return UNKNOWN
    if kind is cst.AsName and parent.name is target:  # type: ignore[union-attr]
        return UNKNOWN
    return None


def _moves(call: cst.Call) -> bool:
    """Whether a call is a ``.to(...)`` (a move to a device or a dtype)."""
    return type(call.func) is cst.Attribute and call.func.attr.value == "to"  # type: ignore[attr-defined]


def _device_or_dtype(value: cst.BaseExpression) -> bool:
    """Whether a ``.to()`` argument is known to keep the CPU: the CPU itself, a device variable (checked where
    it is bound), a dtype, a boolean (``non_blocking``, ``copy``) or a ``memory_format``."""
    if _cpu_value(value):
        return True
    if type(value) is cst.Name and value.value in ("True", "False", "None"):  # type: ignore[attr-defined]
        return True
    name = dotted_name(value)
    if name is None:
        return False
    last = name.rsplit(".", 1)[-1].lower()
    return bool(_DTYPE_PATTERN.match(name)) or "dtype" in last or "memory_format" in name or last.endswith("_format")


def _cpu_value(value: cst.BaseExpression) -> bool:
    """Whether a value given to a device variable is the CPU: ``"cpu"``, ``torch.device("cpu")``, ``None``,
    another device variable (checked where it is bound), or either side of a conditional of those."""
    kind = type(value)
    if kind is cst.SimpleString:
        return str(value.evaluated_value).strip().lower().split(":")[0] in CPU_NAMES  # type: ignore[attr-defined]
    if kind is cst.Name and value.value == "None":  # type: ignore[attr-defined]
        return True
    if kind is cst.IfExp:
        return _cpu_value(value.body) and _cpu_value(value.orelse)  # type: ignore[attr-defined]
    if kind is cst.Call:
        return dotted_name(value.func) == "torch.device" and bool(value.args) and all(_cpu_value(a.value) for a in value.args)  # type: ignore[attr-defined]
    name = dotted_name(value)
    return name is not None and DEVICE_FRAGMENT in name.rsplit(".", 1)[-1].lower()


def trains_on_the_cpu_only(analysis: ScriptAnalysis) -> bool:
    """Whether the program of this module trains on the CPU wherever it runs: no module of it names an
    accelerator, gives a device variable anything but the CPU, or reads a device it does not bind."""
    modules = [analysis.derived("devices", DeviceFacts) for analysis in analysis.shared.analyses or [analysis]]
    if any(facts.names_an_accelerator for facts in modules):
        return False
    bound = set().union(*(facts.bound for facts in modules))
    return all(facts.read <= bound for facts in modules)
