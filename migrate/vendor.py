"""``--runtime vendor``: the runtime as one module beside the migrated program, so training needs only torch.

:func:`write_runtime_module` builds ``ddp_runtime.py`` from the source of the ``ddp_migrate.runtime``
package: its sub-modules in dependency order, their relative imports removed and their standard-library and
torch imports gathered at the top. Migrated code imports it as ``import ddp_runtime as runtime`` (the
analysis treats that module as ``ddp_migrate.runtime``, so a second migration changes nothing).

The file starts with a header naming ddp-migrate; a file without it is the user's and is never replaced.
"""

from __future__ import annotations

import ast
import importlib.util
import os
import tempfile
from pathlib import Path

from . import __version__
from .codemods.analysis.lines import split_lines
from .codemods.names import VENDORED_RUNTIME

#: The first line of every module this writes; a file that starts otherwise is not ours to replace.
HEADER_PREFIX = "# Written by ddp-migrate"


class VendorError(Exception):
    """The runtime module cannot be written (a file of the user's is in the way, or the source is odd)."""


def runtime_source_folder() -> Path:
    """The folder of the ``ddp_migrate.runtime`` package's source files (found without importing torch)."""
    spec = importlib.util.find_spec("ddp_migrate.runtime")
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    if not locations:
        raise VendorError("cannot find the source of ddp_migrate.runtime")
    return Path(locations[0])


def _header() -> str:
    return (
        f"{HEADER_PREFIX} {__version__} from its ddp_migrate.runtime package; ddp-migrate may regenerate it,\n"
        "# so do not edit it. Migrated code imports it as `import ddp_runtime as runtime` and then needs only torch.\n"
    )


def _relative_dependencies(tree: ast.Module) -> list[str]:
    return [node.module for node in tree.body if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module]


def _dependency_order(trees: dict[str, ast.Module]) -> list[str]:
    """The sub-modules, each after the ones it imports (alphabetical among equals, so the output is stable)."""
    order: list[str] = []
    visiting: set[str] = set()

    def visit(name: str) -> None:
        if name in order:
            return
        if name in visiting:
            raise VendorError(f"ddp_migrate.runtime has an import cycle through {name}")
        visiting.add(name)
        for dependency in sorted(_relative_dependencies(trees[name])):
            if dependency not in trees:
                raise VendorError(f"ddp_migrate.runtime.{name} imports .{dependency}, which is not a module of the package")
            visit(dependency)
        visiting.discard(name)
        order.append(name)

    for name in sorted(trees):
        visit(name)
    return order


def _is_docstring(node: ast.stmt) -> bool:
    return isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)


def _is_all(node: ast.stmt) -> bool:
    return isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets)


def build_runtime_module() -> str:
    """The text of the self-contained runtime module."""
    folder = runtime_source_folder()
    sources = {path.stem: path.read_text(encoding="utf-8") for path in sorted(folder.glob("*.py"))}
    package_source = sources.pop("__init__", None)
    if package_source is None:
        raise VendorError(f"{folder} has no __init__.py")
    trees = {name: ast.parse(text) for name, text in sources.items()}
    plain: set[tuple[str, str | None]] = set()
    from_imports: dict[str, set[tuple[str, str | None]]] = {}
    bodies: list[str] = []
    defined: dict[str, str] = {}
    for name in _dependency_order(trees):
        lines = split_lines(sources[name], keepends=True)
        kept: list[str] = []
        for index, node in enumerate(trees[name].body):
            text = "".join(lines[node.lineno - 1 : node.end_lineno])
            if isinstance(node, ast.ImportFrom) and node.level:
                continue
            if isinstance(node, ast.ImportFrom) and node.module == "__future__":
                continue
            if isinstance(node, ast.Import):
                for alias in node.names:
                    plain.add((alias.name, alias.asname))
                continue
            if isinstance(node, ast.ImportFrom):
                for alias in node.names:
                    from_imports.setdefault(node.module or "", set()).add((alias.name, alias.asname))
                continue
            if (index == 0 and _is_docstring(node)) or _is_all(node):
                continue
            for symbol in _top_level_names(node):
                if symbol in defined and defined[symbol] != name:
                    raise VendorError(
                        f"ddp_migrate.runtime.{name} and .{defined[symbol]} both define {symbol}: they cannot share one module"
                    )
                defined[symbol] = name
            # Keep the comments just above the statement and its blank-line layout.
            start = node.lineno - 1
            if hasattr(node, "decorator_list") and node.decorator_list:  # type: ignore[attr-defined]
                start = min(d.lineno for d in node.decorator_list) - 1  # type: ignore[attr-defined]
            while start > 0 and lines[start - 1].lstrip().startswith("#"):
                start -= 1
            kept.append("".join(lines[start : node.end_lineno]).rstrip("\n") + "\n")
        bodies.append(f"# ---- ddp_migrate/runtime/{name}.py\n\n" + "\n\n".join(kept))
    package_tree = ast.parse(package_source)
    exported = next((node for node in package_tree.body if _is_all(node)), None)
    exported_text = ast.get_source_segment(package_source, exported) if exported is not None else None
    docstring = (
        '"""The ddp-migrate runtime, vendored: what migrated code calls at run time (``runtime.setup()``,\n'
        '``runtime.device()``, ``runtime.save(...)`` ...). Only torch and the standard library are used."""\n'
    )
    import_block = "\n".join(["from __future__ import annotations", "", *_import_lines(plain, from_imports)]) + "\n"
    parts = [*bodies, exported_text] if exported_text else bodies
    text = _header() + docstring + "\n" + import_block + "\n" + "\n\n".join(part.rstrip("\n") + "\n" for part in parts)
    compile(text, f"{VENDORED_RUNTIME}.py", "exec")
    return text


def _import_lines(plain: set[tuple[str, str | None]], from_imports: dict[str, set[tuple[str, str | None]]]) -> list[str]:
    """The gathered imports, one line per module, the standard library before torch (as isort orders them)."""

    def spell(name: str, asname: str | None) -> str:
        return f"{name} as {asname}" if asname else name

    def group(module: str) -> tuple[bool, str]:
        return (module.split(".")[0] == "torch", module)

    lines: dict[tuple[bool, str, int], str] = {}
    for name, asname in plain:
        lines[(*group(name), 0)] = f"import {spell(name, asname)}"
    for module, names in from_imports.items():
        by_type = sorted(names, key=lambda item: (0 if item[0].isupper() else 1 if item[0][0].isupper() else 2, item))
        lines[(*group(module), 1)] = f"from {module} import " + ", ".join(spell(n, a) for n, a in by_type)
    ordered = sorted(lines, key=lambda key: (key[0], key[2], key[1]))
    result: list[str] = []
    for index, key in enumerate(ordered):
        if index and key[0] != ordered[index - 1][0]:
            result.append("")
        result.append(lines[key])
    return result


def _top_level_names(node: ast.stmt) -> list[str]:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [node.name]
    if isinstance(node, ast.Assign):
        return [n.id for target in node.targets for n in ast.walk(target) if isinstance(n, ast.Name)]
    if isinstance(node, (ast.AnnAssign, ast.AugAssign)) and isinstance(node.target, ast.Name):
        return [node.target.id]
    return []


def written_by_us(path: Path) -> bool:
    """Whether the file at ``path`` starts with this tool's header."""
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.readline().startswith(HEADER_PREFIX)
    except OSError:
        return False


def write_runtime_module(folder: Path) -> Path:
    """Write ``ddp_runtime.py`` into ``folder`` (atomically) and return its path.

    A ``ddp_runtime.py`` this tool wrote earlier is replaced; any other file or folder of that name is the
    user's, and :class:`VendorError` says so instead of replacing it.
    """
    folder = Path(folder)
    target = folder / f"{VENDORED_RUNTIME}.py"
    package = folder / VENDORED_RUNTIME
    if package.exists():
        raise VendorError(
            f"{package} exists and would be imported instead of the vendored runtime; rename it or use --runtime package"
        )
    if target.is_symlink() or (target.exists() and not target.is_file()):
        raise VendorError(f"{target} is not a regular file; not replacing it")
    if target.exists() and not written_by_us(target):
        raise VendorError(f"{target} exists and was not written by ddp-migrate; not replacing it")
    data = build_runtime_module().encode("utf-8")
    if target.exists() and target.read_bytes() == data:
        return target
    folder.mkdir(parents=True, exist_ok=True)
    fd, temporary = tempfile.mkstemp(dir=folder, prefix=f".{target.name}.", suffix=".ddp-migrate")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(temporary, 0o666 & ~umask)
        os.replace(temporary, target)
    except BaseException:
        try:
            os.unlink(temporary)
        except FileNotFoundError:
            pass
        raise
    return target
