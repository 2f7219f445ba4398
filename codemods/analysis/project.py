"""The project a file belongs to, how its imports resolve to local modules, and what role it plays.

Cheap on purpose: everything here reads Python's own ``ast`` (a tenth of a libcst parse), so the engine can
group files into programs before it parses any of them with libcst.

- the project root is the nearest folder above a file with ``pyproject.toml``, ``setup.py``,
  ``setup.cfg`` or ``.git`` (else the file's own folder);
- imports resolve against the importing script's folder, the project root and ``<root>/src``, relative
  imports against the importing module's package;
- an entry is a file with an ``if __name__ == "__main__":`` block, or with work at module level (a call,
  a loop) that no other module of the project imports; tests (``test_*.py``, ``*_test.py``,
  ``conftest.py``, anything under a ``tests``/``test`` folder) are never entries.
"""

from __future__ import annotations

import ast
import gc
import os
import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Iterable, Iterator

from ..names import DISTRIBUTING_WORDS

ROOT_MARKERS = ("pyproject.toml", "setup.py", "setup.cfg", ".git")
TEST_FOLDERS = frozenset({"tests", "test", "testing"})


@lru_cache(maxsize=None)
def project_root(folder: Path) -> Path:
    """The nearest folder at or above ``folder`` that marks a project root; ``folder`` itself if none."""
    for candidate in (folder, *folder.parents):
        if any((candidate / marker).exists() for marker in ROOT_MARKERS):
            return candidate
    return folder


def package_root(path: Path) -> Path:
    """The folder above the outermost package that contains the file (the file's own folder when it is
    not in a package): where ``python -m pkg.mod`` runs from."""
    folder = path.resolve().parent
    while (folder / "__init__.py").is_file() and folder.parent != folder:
        folder = folder.parent
    return folder


def search_roots(script: Path, added: Iterable[Path] = ()) -> tuple[Path, ...]:
    """Where the imports of a script are looked up: the folder above its package (``python -m``), its
    own folder (``python script.py``), the project root and ``<root>/src``, and the folders the script
    adds to ``sys.path`` itself (``added``: :attr:`SourceFacts.path_additions`)."""
    folder = script.resolve().parent
    root = project_root(folder)
    roots = [package_root(script), folder, root, root / "src", *added]
    unique: list[Path] = []
    for path in roots:
        if path.is_dir() and path not in unique:
            unique.append(path)
    return tuple(unique)


def is_test_file(path: Path, resolved: bool = False) -> bool:
    """Whether a file is a test: pytest's naming, or a file under a tests folder of its project.
    ``resolved``: the path is already absolute with every link resolved (``Path.resolve()``)."""
    resolved_path = path if resolved else path.resolve()
    name = resolved_path.name
    if name.startswith("test_") or name.endswith("_test.py") or name == "conftest.py":
        return True
    root = project_root(resolved_path.parent)
    try:
        parts = resolved_path.parent.relative_to(root).parts
    except ValueError:
        parts = ()
    return any(part in TEST_FOLDERS for part in parts)


def module_name(path: Path, roots: tuple[Path, ...]) -> tuple[str, bool]:
    """The dotted name under which the file is imported from the first root that contains it, and
    whether it is a package (``__init__.py``)."""
    names, is_package = module_names(path, roots)
    return names[0], is_package


def module_names(path: Path, roots: tuple[Path, ...]) -> tuple[list[str], bool]:
    """Every dotted name under which the file can be imported, one per root that contains it, in the order
    of the roots (``src.mylib.data`` from the project root, ``mylib.data`` from ``<root>/src``: a program may
    spell either), and whether it is a package (``__init__.py``)."""
    resolved = path.resolve()
    names: list[str] = []
    is_package = resolved.name == "__init__.py"
    for root in roots:
        try:
            relative = resolved.relative_to(root)
        except ValueError:
            continue
        parts = list(relative.with_suffix("").parts)
        if is_package:
            parts = parts[:-1]
        name = ".".join(parts)
        if parts and all(part.isidentifier() for part in parts) and name not in names:
            names.append(name)
    return (names or [resolved.stem]), is_package and bool(names)


@dataclass
class SourceFacts:
    """What the cheap scan learned of one file."""

    path: Path
    #: Whether the file parses (a file that does not is reported by the engine, not here).
    parsed: bool
    has_main_guard: bool = False
    works_at_module_level: bool = False
    #: Whether the source may train (:func:`_may_train`, a cheap text test): a program none of whose files
    #: does trains nothing, and its files are processed one by one.
    trains: bool = False
    #: Whether the source may set up a process group or distribute a model (a cheap text test: its words
    #: ``init_process_group``, ``DistributedDataParallel``, ``init_device_mesh``, ...).
    distributes: bool = False
    imports: list[tuple[str, int, tuple[str, ...]]] = field(default_factory=list)
    #: Folders the file puts on ``sys.path`` (``sys.path.insert(0, os.path.join(os.path.dirname(__file__),
    #: ".."))``, ``sys.path.append(str(Path(__file__).resolve().parents[1]))``): a script in ``tools/``
    #: importing the package beside that folder.
    path_additions: list[Path] = field(default_factory=list)


def scan(path: Path, text: str) -> SourceFacts:
    """Parse a file with ``ast`` and note its main guard, its module-level work and its imports
    (``(module, level, names)``; a file that does not parse gets no facts, the engine reports it)."""
    # An ``ast`` tree holds no reference cycles (its nodes know no parents): the cyclic collector, run
    # again and again while a long file's hundreds of thousands of nodes are made, would find nothing, and
    # costs a third of the parse. The tree is freed by reference counting when the scan is done.
    collecting = gc.isenabled()
    gc.disable()
    try:
        tree = ast.parse(text, filename=str(path))
    except (SyntaxError, ValueError):
        return SourceFacts(path, False)
    finally:
        if collecting:
            gc.enable()
    # The tree itself is not kept: a plan over a large tree would hold every file's tree at once.
    facts = SourceFacts(path, True, trains=_may_train(text), distributes=may_distribute(text))
    # A call is named in the text: without any of these words no assignment can train or wrap.
    may_train = any(name in text for name in TRAINING_CALLS)
    for stmt in tree.body:
        if isinstance(stmt, ast.If) and _is_main_test(stmt.test):
            facts.has_main_guard = True
        elif isinstance(stmt, (ast.For, ast.While, ast.With)) or (
            isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call)
        ):
            facts.works_at_module_level = True
        elif may_train and isinstance(stmt, (ast.Assign, ast.AnnAssign)) and stmt.value is not None and _trains_or_wraps(stmt.value):
            facts.works_at_module_level = True  # ``model = nn.DataParallel(model)`` at module level
    folders: dict[str, Path] = {}  # names bound at module level to a path from ``__file__`` (``ROOT = ...``)
    adds_paths = "sys.path" in text  # (looked for once: the text is long, its assignments many)
    for node in nested_statements(tree.body):
        if adds_paths and isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            bound = _path_of(node.value, path.resolve(), folders)
            if bound is not None:
                folders[node.targets[0].id] = bound
        elif isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
            added = _sys_path_addition(node.value, path, folders)
            if added is not None:
                facts.path_additions.append(added)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                facts.imports.append((alias.name, 0, ()))
        elif isinstance(node, ast.ImportFrom):
            facts.imports.append((node.module or "", node.level, tuple(a.name for a in node.names)))
    return facts


def may_distribute(text: str) -> bool:
    """Whether a source may set up a process group or distribute a model: one of its words
    (:data:`~ddp_migrate.codemods.names.DISTRIBUTING_WORDS`) is in the text (:attr:`SourceFacts.distributes`)."""
    return any(word in text for word in DISTRIBUTING_WORDS)


def _may_train(text: str) -> bool:
    """Whether a source calls ``.backward(``, ``torch.autograd.grad(`` or an optimizer's ``zero_grad(``, wraps a model in
    ``DistributedDataParallel``, or wraps one in ``DataParallel``
    without running it for inference (``no_grad``, ``inference_mode``, ``.eval()``: an evaluation script, which
    a training program sharing its model module must not take in; a wrapped model handed to a library's loop
    trains out of sight)."""
    if ".backward(" in text or "autograd.grad(" in text or "zero_grad(" in text:
        return True  # (``optimizer.zero_grad()`` beside a library's backward: DeiT's ``loss_scaler(loss, optimizer)``)
    if "DistributedDataParallel(" in text:
        return True  # (a DDP wrap is made for training: a frozen teacher's ``.eval()`` beside it evaluates nothing)
    return "DataParallel" in text and not any(word in text for word in ("no_grad", "inference_mode", ".eval()"))


#: A statement at column 0 that does work when the module runs: a loop, a ``with`` or a bare call.
_MODULE_LEVEL_WORK = re.compile(r"^(?:for|while|with|async)\b|^[A-Za-z_][\w.]*\s*\(", re.MULTILINE)


#: Calls whose result, assigned at module level, makes the module a training script run as such.
TRAINING_CALLS = frozenset({"DataParallel", "DistributedDataParallel", "DataLoader", "backward"})


def _trains_or_wraps(value: ast.expr) -> bool:
    for node in ast.walk(value):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
            if name in TRAINING_CALLS:
                return True
    return False


def _sys_path_addition(call: ast.Call, path: Path, folders: dict[str, Path]) -> Path | None:
    """The folder ``sys.path.insert(i, folder)`` / ``sys.path.append(folder)`` adds, where it is spelled
    from ``__file__`` (directly, or through a name in ``folders``: ``ROOT = Path(__file__).resolve().parents[1]``);
    ``None`` otherwise (a folder relative to the working directory cannot be told)."""
    func = call.func
    if not (isinstance(func, ast.Attribute) and func.attr in ("insert", "append") and _dotted(func.value) == "sys.path"):
        return None
    args = call.args
    value = args[-1] if (func.attr == "insert" and len(args) == 2) or (func.attr == "append" and len(args) == 1) else None
    found = _path_of(value, path.resolve(), folders) if value is not None else None
    return Path(os.path.normpath(found)) if found is not None else None


def _dotted(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value)
        return f"{base}.{node.attr}" if base else None
    return None


#: Calls that hand back the path they are given, as far as finding a folder goes.
_SAME_PATH = frozenset({"os.path.abspath", "os.path.realpath", "os.path.normpath", "str", "Path", "pathlib.Path", "os.fspath"})


def _path_of(node: ast.expr, path: Path, folders: dict[str, Path]) -> Path | None:
    """The path an expression built from ``__file__`` names (``os.path`` calls, ``pathlib`` attributes), or
    from a name ``folders`` knows."""
    if isinstance(node, ast.Name):
        return path if node.id == "__file__" else folders.get(node.id)
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return None
    if isinstance(node, ast.Call):
        name = _dotted(node.func)
        if name in _SAME_PATH and len(node.args) == 1:
            return _path_of(node.args[0], path, folders)
        if name == "os.path.dirname" and len(node.args) == 1:
            inner = _path_of(node.args[0], path, folders)
            return inner.parent if inner is not None else None
        if name == "os.path.join" and node.args:
            base = _path_of(node.args[0], path, folders)
            parts = [a.value for a in node.args[1:] if isinstance(a, ast.Constant) and isinstance(a.value, str)]
            return base.joinpath(*parts) if base is not None and len(parts) == len(node.args) - 1 else None
        if isinstance(node.func, ast.Attribute) and node.func.attr in ("resolve", "absolute") and not node.args:
            return _path_of(node.func.value, path, folders)
        return None
    if isinstance(node, ast.Attribute) and node.attr == "parent":
        inner = _path_of(node.value, path, folders)
        return inner.parent if inner is not None else None
    if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Attribute) and node.value.attr == "parents":
        inner = _path_of(node.value.value, path, folders)
        index = node.slice
        if inner is not None and isinstance(index, ast.Constant) and isinstance(index.value, int) and 0 <= index.value < len(inner.parents):
            return inner.parents[index.value]
        return None
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div) and isinstance(node.right, ast.Constant) and isinstance(node.right.value, str):
        inner = _path_of(node.left, path, folders)
        return inner / node.right.value if inner is not None else None
    return None


def may_start_program(text: str) -> bool:
    """The cheap text test before :func:`scan`: only a file with a ``__main__`` block, work at module level
    or a model wrap / loader can be a program's entry (a test never is: the caller asks
    :func:`is_test_file` first)."""
    return "__main__" in text or "DataParallel" in text or "DataLoader(" in text or _MODULE_LEVEL_WORK.search(text) is not None


def child_statements(stmt: ast.stmt) -> list[ast.stmt]:
    """The statements directly inside a compound statement: its body, ``else`` and ``finally`` blocks, then
    its ``except`` handlers' and ``match`` cases' bodies (none for a simple statement)."""
    found: list[ast.stmt] = []
    for field_name in ("body", "orelse", "finalbody"):
        inner = getattr(stmt, field_name, None)
        if isinstance(inner, list):
            found.extend(inner)
    for handler in getattr(stmt, "handlers", ()):
        found.extend(handler.body)
    for case in getattr(stmt, "cases", ()):
        found.extend(case.body)
    return found


def first_line(stmt: ast.stmt) -> int:
    """The line a statement starts on, its decorators included."""
    return min([stmt.lineno, *(d.lineno for d in getattr(stmt, "decorator_list", ()))])


def nested_statements(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """Every statement, nested ones included, without visiting expressions (imports are statements;
    ``ast.walk`` over every expression node costs ten times more)."""
    for stmt in body:
        yield stmt
        yield from nested_statements(child_statements(stmt))


def _is_main_test(test: ast.expr) -> bool:
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq)):
        return False
    sides = [test.left, test.comparators[0]]
    has_name = any(isinstance(s, ast.Name) and s.id == "__name__" for s in sides)
    has_main = any(isinstance(s, ast.Constant) and s.value == "__main__" for s in sides)
    return has_name and has_main


@lru_cache(maxsize=65536)
def _module_file(base: Path, dotted: str) -> Path | None:
    """``base/a/b.py`` or ``base/a/b/__init__.py`` for ``a.b``."""
    if not dotted:
        return None
    target = base.joinpath(*dotted.split("."))
    for candidate in (target.with_suffix(".py"), target / "__init__.py"):
        if candidate.is_file():
            return candidate.resolve()
    return None


def resolve_imports(facts: SourceFacts, roots: tuple[Path, ...], package_dir: Path | None = None) -> list[Path]:
    """The local files a file imports: modules and packages found under the roots (relative imports
    under the file's own package folder), with ``from pkg import mod`` reaching ``pkg/mod.py``."""
    found: list[Path] = []
    seen: set[Path] = set()
    own = facts.path.resolve()
    here = package_dir or own.parent

    def add(path: Path | None) -> None:
        if path is not None and path not in seen and path != own:
            seen.add(path)
            found.append(path)

    for module, level, names in facts.imports:
        if level:
            base = here
            for _ in range(level - 1):
                base = base.parent
            bases = [base]
            dotted = module
        else:
            bases = list(roots)
            dotted = module
        for base in bases:
            hit = _module_file(base, dotted) if dotted else None
            if dotted:
                # Every package on the way is imported too (its __init__ runs).
                parts = dotted.split(".")
                for i in range(1, len(parts)):
                    add(_module_file(base, ".".join(parts[:i])))
            add(hit)
            prefix = f"{dotted}." if dotted else ""
            # ``from pkg import name`` imports a submodule only when ``pkg`` is a package (or ``from . import``).
            if not dotted or (hit is not None and hit.name == "__init__.py"):
                for name in names:
                    if name != "*":
                        add(_module_file(base, prefix + name))
            if hit is not None or (level and names):
                break
    return found
