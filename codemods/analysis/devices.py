"""Whether a program trains on the CPU wherever it runs: a fact of the analysis for the rules that set up the
process group and map loads (:func:`trains_on_the_cpu_only`).

A program that places nothing on an accelerator trains on the CPU even on a GPU machine. Its migrated copy
must do the same: a DDP wrap given a CUDA device for a CPU model fails ("device_ids ... only work with
... GPU modules"), and nccl, the GPU machine's default backend, cannot carry a CPU model's gradients.
``runtime.setup(device="cpu")`` keeps every process on the CPU, with gloo.

The answer must be certain (a GPU program kept on the CPU is a silent wrong migration), so any sign of an
accelerator anywhere in the program counts against it:

- a name or string that names one (``cuda``, ``"mps"``, ``DataParallel``, ``local_rank``, a ``--gpu`` or
  ``--device`` option, ``cfg["device"]``), but for the calls that place nothing (``torch.cuda.manual_seed_all``,
  ``torch.cuda.is_available()``: :data:`INERT_CUDA_CALLS`);
- a device variable (a name with ``device`` in it) given anything but the CPU: by an assignment, an
  unpacking or a loop, a parameter's default or an argument a call of the program passes it, a keyword
  (``device=``, ``device_map=``, ``map_location=``), an import;
- a device variable read where nothing of the program binds it (``args.device``, ``tensor.device``, a name
  of a module the program does not hold, a star import of one);
- a ``.to(x)`` whose ``x`` is not known to be the CPU or a dtype; a whole model loaded from a file
  (``torch.jit.load``, ``torch.load(..., weights_only=False)`` of what is then used as a model: its tensors
  come back where they were saved); an attribute fetched by a computed name and called.

A program whose set-up already says ``device="cpu"`` (``runtime.setup(device="cpu")``, written by a first
migration) has made the choice: the runtime's ``device()`` and ``device_ids()`` then name the CPU.
"""

from __future__ import annotations

import re
import sys

import libcst as cst

from .. import names
from .script import ScriptAnalysis, callee_name, dotted_name, is_docstring_line, is_true, keyword_argument, walk

#: Calls that name CUDA but put nothing on it: seeding (a no-op without a GPU) and questions about the machine.
INERT_CUDA_CALLS = names.CUDA_QUERIES | frozenset(
    {"torch.cuda.manual_seed", "torch.cuda.manual_seed_all", "torch.cuda.empty_cache", "torch.cuda.is_bf16_supported"}
)
#: Libraries that never move a model or tensors to an accelerator by themselves.
PLACING_NOTHING = frozenset(
    {"torch", "torchvision", "torchaudio", "torchtext", "numpy", "scipy", "pandas", "sklearn", "PIL", "tqdm", "yaml",
     "matplotlib", "tensorboard", "timm", "einops", "ddp_migrate", "ddp_runtime"}
)
#: Calls whose string arguments are only shown: printed, logged, written to a progress bar.
OUTPUT_CALLS = frozenset({"print", "print0", "debug", "info", "warning", "warn", "error", "log", "write", "set_description", "set_postfix"})
#: Fragments of a name or string, in lower case, that name an accelerator or a way to reach one.
ACCELERATOR_FRAGMENTS = ("cuda", "gpu", "nccl", "accelerat", "dataparallel", "local_rank", "localrank", "set_device")
#: Whole words (of a name split at ``_`` and digits, or of a string) that name an accelerator.
ACCELERATOR_WORDS = frozenset({"mps", "xpu", "npu", "hpu", "tpu", "xla", "xccl", "hccl", "rocm", "hip"})
#: The fragment of a name that marks a device variable (``device``, ``self.device``, ``DEVICE``).
DEVICE_FRAGMENT = "device"
#: Keywords whose value is where tensors go, besides those with ``device`` in their name.
PLACEMENT_KEYWORDS = frozenset({"map_location"})
#: Methods that use an object as a model (``model.eval()``, ``model.parameters()``): a loaded object used so is one.
_MODEL_USES = frozenset({"parameters", "named_parameters", "eval", "train", "to", "cuda", "state_dict", "load_state_dict", "modules", "children", "forward"})
#: Fragments of a command-line option's name, in lower case, that say it picks where to train.
DEVICE_OPTION_FRAGMENTS = ("cpu", "cuda", "gpu", DEVICE_FRAGMENT)
#: What a device variable may hold in a program that trains on the CPU only.
CPU_NAMES = frozenset({"cpu"})
#: ``torch`` attributes that are dtypes: ``x.to(torch.float16)`` changes no device.
_DTYPE_PATTERN = re.compile(r"^torch\.(u?int\d*|float\d*|bfloat16|half|double|long|short|bool|complex\d*|cfloat|cdouble)$")
#: Loads that bring back whole modules, their tensors where they were saved.
_MODULE_LOADS = frozenset({"torch.jit.load"})
#: Nodes that hold the parts of an assignment target that unpacks.
_UNPACKING = (cst.Element, cst.Tuple, cst.List, cst.StarredElement)

#: A binding's key: the function or module whose name it is (``None`` for an attribute chain, which any
#: module may set), and the dotted name.
Key = tuple[cst.CSTNode | None, str]


class DeviceFacts:
    """The signs of an accelerator in one module, and the device variables it binds and reads."""

    def __init__(self, analysis: ScriptAnalysis) -> None:
        self.analysis = analysis
        #: The value each assignment target of the module is given.
        self._values: dict[cst.AssignTarget, cst.BaseExpression] = {
            target: node.value  # type: ignore[attr-defined]
            for node in analysis.preorder
            if type(node) is cst.Assign
            for target in node.targets  # type: ignore[attr-defined]
        }
        #: The device variables the module binds, and those it reads (each must be bound in the program).
        self.bound: set[Key] = set()
        self.read: set[Key] = set()
        #: Whether the module's set-up says ``runtime.setup(device="cpu")``.
        self.declares_the_cpu = any(
            (chosen := keyword_argument(call, "device")) is not None and _cpu_string(chosen.value)
            for call in analysis.calls_to(names.RUNTIME_SETUP)
        )
        #: Whether the module names an accelerator, or gives a device variable a value other than the CPU
        #: (the scan stops at the first sign: ``bound`` and ``read`` are then partial, and not needed).
        #: Whether the module imports only code the analysis reads or trusts (see :meth:`_imports_only_readable_code`).
        self._reads_all = self._imports_only_readable_code()
        self.names_an_accelerator = self._names_an_accelerator()

    def _names_an_accelerator(self) -> bool:
        docstrings = _docstring_parts(self.analysis)
        # ``torch.cuda.manual_seed_all(0)``, ``torch.cuda.device_count()``: they name CUDA but place nothing on it;
        # nor does text that is only shown. Such words are passed over only where the module reads no code the
        # analysis cannot see (``from labkit.hw import place``: a ``.cuda()`` may hide there).
        inert = {n for call in self.analysis.calls_to(INERT_CUDA_CALLS) for n in walk(call.func)} if self._reads_all else set()
        for node in self.analysis.preorder:
            if node in inert:
                continue
            kind = type(node)
            if kind is cst.Name or kind is cst.Attribute:
                identifier = node.value if kind is cst.Name else node.attr.value  # type: ignore[attr-defined]
                if _names_accelerator(identifier):
                    return True
                if DEVICE_FRAGMENT in identifier.lower() and not self._device_variable_keeps_the_cpu(node):  # type: ignore[arg-type]
                    return True
            elif kind is cst.SimpleString and node not in docstrings:
                if _names_accelerator(str(node.evaluated_value), strings=True) and not self._only_shown(node):  # type: ignore[attr-defined]
                    return True
            elif kind is cst.FormattedStringText and _names_accelerator(node.value, strings=True) and not self._only_shown(node):  # type: ignore[attr-defined]
                return True
            elif kind is cst.Arg and node.keyword is not None and _places(node.keyword.value):  # type: ignore[attr-defined]
                if not cpu_value(self.analysis, node.value):  # type: ignore[attr-defined]
                    return True
            elif kind is cst.Call and self._accelerator_call(node):  # type: ignore[arg-type]
                return True
            elif kind is cst.ImportStar and not self._star_of_the_program(self.analysis.parent(node)):  # type: ignore[arg-type]
                return True
        return False

    def _imports_only_readable_code(self) -> bool:
        """Whether every module this one imports is a module of the program, of the standard library, or of a
        library that never moves a model by itself (:data:`PLACING_NOTHING`); no dynamic import."""
        program = set(self.analysis.shared.by_name)
        for node in self.analysis.preorder:
            kind = type(node)
            if kind is cst.Import:
                modules = [dotted_name(alias.name) or "" for alias in node.names]  # type: ignore[attr-defined]
            elif kind is cst.ImportFrom:
                if node.relative:  # type: ignore[attr-defined]
                    continue  # (a module of the program's own package)
                modules = [dotted_name(node.module) or ""] if node.module is not None else [""]  # type: ignore[attr-defined]
            elif kind is cst.Call and callee_name(node) in ("import_module", "__import__"):  # type: ignore[arg-type]
                return False
            else:
                continue
            for module in modules:
                top = module.split(".")[0]
                if module not in program and top not in program and top not in sys.stdlib_module_names and top not in PLACING_NOTHING:
                    return False
        return True

    def _only_shown(self, node: cst.CSTNode) -> bool:
        """Whether a string is text a call prints or logs (``print("many gpus")``, ``logger.info(f"on {n} GPUs")``):
        words about an accelerator, not a place to put tensors (only where the module reads all it imports)."""
        if not self._reads_all:
            return False
        for ancestor in self.analysis.ancestors(node):
            if type(ancestor) is cst.Call:
                return callee_name(ancestor) in OUTPUT_CALLS  # type: ignore[arg-type]
            if isinstance(ancestor, cst.BaseStatement):
                return False
        return False

    def _accelerator_call(self, call: cst.Call) -> bool:
        """Whether a call may put tensors on an accelerator: a ``.to(x)`` of an unknown ``x``, a whole-module
        load, ``getattr(obj, computed)(...)``."""
        func = call.func
        if type(func) is cst.Attribute and func.attr.value == "to":  # type: ignore[attr-defined]
            return not all(self._device_or_dtype(arg.value) for arg in call.args)
        if self.analysis.is_call_to(call, _MODULE_LOADS):
            return True
        if self.analysis.is_call_to(call, names.TORCH_LOAD):
            weights_only = keyword_argument(call, "weights_only")
            return weights_only is not None and not is_true(weights_only.value) and self._loads_a_model(call)
        if type(func) is cst.Call and dotted_name(func.func) == "getattr" and len(func.args) >= 2:  # type: ignore[attr-defined]
            return type(func.args[1].value) is not cst.SimpleString  # type: ignore[attr-defined]
        return False

    def _loads_a_model(self, load: cst.Call) -> bool:
        """Whether what a whole-object load gives back is used as a model (called, asked for its parameters, put in
        a mode, moved) where it is assigned to a name, or is not assigned to one: a load of data
        (``data = torch.load("traindata.pt", weights_only=False)``, handed to a model) places nothing itself."""
        target = self.analysis.assigned_to(load)
        if type(target) is not cst.Name:
            return True
        name = target.value  # type: ignore[attr-defined]
        scope = self.analysis.scope_of(load)
        for node in self.analysis.calls:
            if self.analysis.scope_of(node) is not scope:
                continue
            func = node.func
            if type(func) is cst.Name and func.value == name:  # type: ignore[attr-defined]
                return True  # ``model(x)``
            if (
                type(func) is cst.Attribute and type(func.value) is cst.Name and func.value.value == name  # type: ignore[attr-defined]
                and func.attr.value in _MODEL_USES  # type: ignore[attr-defined]
            ):
                return True
            if any(type(a.value) is cst.Name and a.value.value == name for a in node.args) and self.analysis.targets_of(node):  # type: ignore[attr-defined]
                return True  # (``train(model, loader)``: handed to the program's code, which may use it as a model)
        return False

    def _star_of_the_program(self, node: cst.CSTNode | None) -> bool:
        """Whether ``from m import *`` takes the names of a module of the program (their bindings are checked
        there)."""
        module = dotted_name(node.module) if type(node) is cst.ImportFrom and node.module is not None else None  # type: ignore[attr-defined]
        if module is None:
            return False
        last = module.rsplit(".", 1)[-1]
        return any(name == module or name.rsplit(".", 1)[-1] == last for name in self.analysis.shared.by_name)

    def _device_variable_keeps_the_cpu(self, node: cst.Name | cst.Attribute) -> bool:
        """Record a use of a device variable; whether what it is given there is the CPU (a read is checked
        later, against the bindings of the whole program)."""
        analysis = self.analysis
        parent = analysis.parent(node)
        if type(node) is cst.Attribute and type(parent) is cst.Attribute:
            return True  # ``args.device.type``: the outer attribute is the variable's read
        if type(node) is cst.Name and type(parent) is cst.Attribute and parent.value is not node:  # type: ignore[attr-defined]
            return True  # the ``device`` of ``self.device``: the attribute is the use
        if type(parent) is cst.Arg and parent.keyword is node:  # type: ignore[attr-defined]
            return True  # ``device=`` of a call: its value is checked as the argument's
        name = dotted_name(node)
        if name is None:
            return False
        if type(parent) in (cst.ImportAlias, cst.AsName):
            return False  # a device of another module: where it comes from is not known here
        key = self._key(node, name)
        if type(parent) is cst.Param and parent.name is node:  # type: ignore[attr-defined]
            self.bound.add(key)
            return self._parameter_keeps_the_cpu(parent, name)  # type: ignore[arg-type]
        if type(parent) in (cst.FunctionDef, cst.ClassDef) and parent.name is node:  # type: ignore[attr-defined]
            self.bound.add(key)
            return True
        value = self._bound_value(node)
        if value is not None:
            self.bound.add(key)
            return cpu_value(self.analysis, value)
        if name == "torch.device" and type(parent) is cst.Call and parent.func is node:  # type: ignore[attr-defined]
            return all(cpu_value(self.analysis, arg.value) for arg in parent.args)  # type: ignore[attr-defined]
        self.read.add(key)
        return True

    def _key(self, node: cst.CSTNode, name: str) -> Key:
        """Whose name a device variable is: the function that binds it, else its module; an attribute chain's
        is the program's."""
        if "." in name:
            return (None, name)
        function = self.analysis.enclosing_function(node)
        parent = self.analysis.parent(node)
        if type(parent) is cst.Param:
            function = self.analysis.enclosing_function(parent)
        if function is not None and self.analysis.binds_locally(function, name):
            return (function, name)
        return (self.analysis.module, name)

    def _parameter_keeps_the_cpu(self, param: cst.Param, name: str) -> bool:
        """Whether a device parameter gets the CPU: its default, and what every call of the program passes."""
        if param.default is not None and not cpu_value(self.analysis, param.default):
            return False
        function = self.analysis.enclosing_function(param)
        if function is None:
            return param.default is not None  # a lambda's: called where it is not known
        for call in self.analysis.callers_in_program(function):
            owner = self.analysis.shared.analysis_of(call) or self.analysis
            given = owner.argument_for(call, function, name)
            if given is not None and not cpu_value(owner, given):
                return False
        return True

    def _bound_value(self, node: cst.CSTNode) -> cst.BaseExpression | None:
        """What a binding of ``node`` gives it (a value no CPU test accepts where an unpacking, a loop or a
        ``with`` does), or ``None`` where ``node`` is read, not bound."""
        parents = self.analysis.index.parents
        target, parent, unpacked = node, parents.get(node), False
        while type(parent) in _UNPACKING:
            target, parent, unpacked = parent, parents.get(parent), True
        kind = type(parent)
        unknown = cst.Ellipsis()
        if kind is cst.AssignTarget and parent.target is target:  # type: ignore[union-attr]
            return unknown if unpacked else self._values.get(parent, unknown)  # type: ignore[arg-type]
        if kind is cst.AnnAssign and parent.target is target:  # type: ignore[union-attr]
            return unknown if unpacked else (parent.value or cst.Name("None"))  # type: ignore[union-attr]
        if kind is cst.NamedExpr and parent.target is target:  # type: ignore[union-attr]
            return parent.value  # type: ignore[union-attr]
        if kind in (cst.AugAssign, cst.For, cst.CompFor) and parent.target is target:  # type: ignore[union-attr]
            return unknown
        if kind is cst.AsName and parent.name is target:  # type: ignore[union-attr]
            return unknown
        return None

    def _device_or_dtype(self, value: cst.BaseExpression) -> bool:
        """Whether a ``.to()`` argument is known to keep the CPU: the CPU itself, a device variable (checked
        where it is bound), a dtype, a boolean (``non_blocking``, ``copy``) or a ``memory_format``."""
        if cpu_value(self.analysis, value):
            return True
        if type(value) is cst.Name and value.value in ("True", "False", "None"):  # type: ignore[attr-defined]
            return True
        name = dotted_name(value)
        if name is None:
            return False
        last = name.rsplit(".", 1)[-1].lower()
        return bool(_DTYPE_PATTERN.match(name)) or "dtype" in last or "memory_format" in name or last.endswith("_format")


def cpu_value(analysis: ScriptAnalysis, value: cst.BaseExpression) -> bool:
    """Whether a value given to a device variable is the CPU: ``"cpu"``, ``torch.device("cpu")``, ``None``,
    another device variable (checked where it is bound), or either side of a conditional of those."""
    kind = type(value)
    if kind is cst.SimpleString:
        return _cpu_string(value)
    if kind is cst.Name and value.value == "None":  # type: ignore[attr-defined]
        return True
    if kind is cst.IfExp:
        return cpu_value(analysis, value.body) and cpu_value(analysis, value.orelse)  # type: ignore[attr-defined]
    if kind is cst.Call:
        return (
            analysis.is_call_to(value, {"torch.device"})  # type: ignore[arg-type]
            and bool(value.args)  # type: ignore[attr-defined]
            and all(cpu_value(analysis, a.value) for a in value.args)  # type: ignore[attr-defined]
        )
    name = dotted_name(value)
    return name is not None and DEVICE_FRAGMENT in name.rsplit(".", 1)[-1].lower()


def _cpu_string(value: cst.BaseExpression) -> bool:
    """Whether a value is a string that names the CPU (``"cpu"``, ``"cpu:0"``)."""
    if type(value) is not cst.SimpleString:
        return False
    return str(value.evaluated_value).strip().lower().split(":")[0] in CPU_NAMES  # type: ignore[attr-defined]


def _places(keyword: str) -> bool:
    """Whether a keyword argument says where tensors go (``device=``, ``device_map=``, ``map_location=``)."""
    return DEVICE_FRAGMENT in keyword.lower() or keyword in PLACEMENT_KEYWORDS


def _docstring_parts(analysis: ScriptAnalysis) -> set[cst.CSTNode]:
    """The strings of the module's docstrings (bare string statements), the parts of concatenated ones too."""
    found: set[cst.CSTNode] = set()
    for stmt in analysis.preorder:
        if type(stmt) is cst.SimpleStatementLine and is_docstring_line(stmt):
            pending = [stmt.body[0].value]  # type: ignore[attr-defined]
            while pending:
                string = pending.pop()
                found.add(string)
                if type(string) is cst.ConcatenatedString:
                    pending.extend((string.left, string.right))  # type: ignore[attr-defined]
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


def _offers_the_cpu(analysis: ScriptAnalysis) -> bool:
    """Whether the module names the CPU as a place (a ``"cpu"`` string, but a load's ``map_location`` and a set-up's
    ``device``) or has a command-line option about where to train (``--no-cuda``, ``--cpu``, ``--device``)."""
    docstrings = _docstring_parts(analysis)
    for node in analysis.preorder:
        if type(node) is not cst.SimpleString or node in docstrings or not _cpu_string(node):  # type: ignore[arg-type]
            continue
        parent = analysis.parent(node)
        if not isinstance(parent, cst.Arg) or parent.keyword is None:
            return True
        call = analysis.parent(parent)
        # A load mapped onto the CPU moves no model; a set-up on the CPU (``device="cpu"``) keeps every process
        # there, and device_ids() already answers None.
        if parent.keyword.value not in PLACEMENT_KEYWORDS and not (
            isinstance(call, cst.Call) and analysis.is_call_to(call, names.RUNTIME_SETUP)
        ):
            return True
    for call in analysis.calls:
        if isinstance(call.func, cst.Attribute) and call.func.attr.value == "add_argument":
            flags = [a.value.evaluated_value for a in call.args if a.keyword is None and type(a.value) is cst.SimpleString]  # type: ignore[attr-defined]
            if any(isinstance(flag, str) and _names_a_device_option(flag) for flag in flags):
                return True
    return False


def _names_a_device_option(flag: str) -> bool:
    """Whether a command-line option's name is about where to train (``--no-cuda``, ``--cpu``, ``--device``)."""
    lowered = flag.lower()
    return any(word in lowered for word in DEVICE_OPTION_FRAGMENTS)


def under_a_cuda_test(analysis: ScriptAnalysis, node: cst.CSTNode) -> bool:
    """Whether a node runs only where a test found CUDA (``if torch.cuda.is_available():``, ``x if t.is_cuda else
    y``, ``if use_cuda:`` of ``use_cuda = torch.cuda.is_available()``), in its function."""

    def asks_for_cuda(test: cst.BaseExpression, depth: int = 0) -> bool:
        for n in walk(test):
            if (type(n) is cst.Call and analysis.is_call_to(n, names.CUDA_QUERIES)) or (  # type: ignore[arg-type]
                type(n) is cst.Attribute and n.attr.value == "is_cuda"  # type: ignore[attr-defined]
            ):
                return True
            if type(n) is cst.Name and depth < 2:
                values = analysis.flows_into(n, n.value) or analysis.assigned_values(None, n.value)  # type: ignore[attr-defined]
                if values and all(isinstance(v, cst.BaseExpression) and asks_for_cuda(v, depth + 1) for v in values):
                    return True
        return False

    for ancestor in analysis.ancestors(node):
        if type(ancestor) is cst.FunctionDef:
            return False
        if type(ancestor) in (cst.If, cst.IfExp) and asks_for_cuda(ancestor.test):  # type: ignore[attr-defined]
            return True
    return False


def falls_back_to_the_cpu(analysis: ScriptAnalysis) -> bool:
    """Whether the program picks the CPU where it finds no CUDA (``"cuda" if torch.cuda.is_available() else
    "cpu"``, in any of its modules): a model it moves to that device is on the CPU there."""
    for module in analysis.shared.analyses:
        for call in module.calls_to(names.CUDA_IS_AVAILABLE):
            choice = module.parent(call)
            if type(choice) is cst.IfExp and any(
                type(n) is cst.SimpleString and n.evaluated_value == "cpu" for side in (choice.body, choice.orelse) for n in walk(side)  # type: ignore[attr-defined]
            ):
                return True
    return False


def model_may_stay_on_the_cpu(analysis: ScriptAnalysis) -> bool:
    """Whether a model of this module's program may be on the CPU when it is wrapped, on a GPU machine too: some
    module names the CPU as a place or lets its user pick the device on the command line (``--no-cuda``).
    Its wrap then asks for the device ids of the model itself (``runtime.device_ids(model)``): the device ids of
    this process's GPU crash the wrap of a model kept on the CPU. (Where the model is on the GPU, both agree.)"""
    return any(module.derived("offers_the_cpu", _offers_the_cpu) for module in analysis.shared.analyses or [analysis])


def trains_on_the_cpu_only(analysis: ScriptAnalysis) -> bool:
    """Whether the program of this module trains on the CPU wherever it runs: its set-up says so
    (``runtime.setup(device="cpu")``), or no module of it names an accelerator, gives a device variable
    anything but the CPU, or reads a device variable the program does not bind."""
    modules = [module.derived("devices", DeviceFacts) for module in analysis.shared.analyses or [analysis]]
    if any(facts.declares_the_cpu for facts in modules):
        return True
    if any(facts.names_an_accelerator for facts in modules):
        return False
    bound = set().union(*(facts.bound for facts in modules))
    return all(facts.read <= bound for facts in modules)
