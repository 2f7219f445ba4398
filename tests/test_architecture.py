"""The layering DESIGN.md asks for, checked on the source: no rule imports another rule, no import circle
among the package's modules (imports under ``TYPE_CHECKING`` aside: they never run), and the command line
and the rules never import torch at module level."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = {"migrate": "ddp_migrate", "codemods": "ddp_migrate.codemods", "runtime": "ddp_migrate.runtime"}
#: Modules of codemods/ that are not rules: the rule model, shared builders, names, the registry.
SHARED = {"__init__", "base", "edits", "names", "runtime_calls"}


def module_files() -> dict[str, Path]:
    found = {}
    for folder, package in PACKAGES.items():
        for path in (ROOT / folder).rglob("*.py"):
            relative = path.relative_to(ROOT / folder).with_suffix("")
            parts = [p for p in relative.parts if p != "__init__"]
            found[".".join([package, *parts])] = path
    return found


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def imports_of(name: str, path: Path, known: set[str]) -> set[str]:
    """The package's modules this module imports at run time (anywhere in it, lazily included)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()

    def visit(nodes: list[ast.stmt]) -> None:
        for node in nodes:
            if isinstance(node, ast.If) and _is_type_checking(node):
                visit(node.orelse)
                continue
            if isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names if alias.name in known)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = package.split(".")
                    parts = parts[: len(parts) - (node.level - 1)] if node.level > 1 else parts
                    base = ".".join([*parts, base] if base else parts)
                for alias in node.names:
                    candidate = f"{base}.{alias.name}"
                    found.add(candidate if candidate in known else base)
            for field in ("body", "orelse", "finalbody", "handlers"):
                inner = getattr(node, field, None)
                if isinstance(inner, list):
                    visit([n for n in inner if isinstance(n, ast.stmt)] + [s for h in inner if isinstance(h, ast.ExceptHandler) for s in h.body])

    visit(tree.body)
    return {module for module in found if module in known and module != name}


def graph() -> dict[str, set[str]]:
    files = module_files()
    known = set(files)
    return {name: imports_of(name, path, known) for name, path in files.items()}


def test_no_rule_imports_another_rule() -> None:
    rules = {f"ddp_migrate.codemods.{p.stem}" for p in (ROOT / "codemods").glob("*.py") if p.stem not in SHARED}
    offenders = {(name, imported) for name, imports in graph().items() if name in rules for imported in imports & rules}
    assert not offenders


def test_no_import_circle() -> None:
    edges = graph()
    # The package __init__ modules re-export their children: an edge into a package means its children.
    state: dict[str, int] = {}
    cycle: list[str] = []

    def visit(node: str, path: list[str]) -> bool:
        state[node] = 1
        for nxt in sorted(edges.get(node, ())):
            if nxt.startswith(node + "."):
                continue  # a package importing its own sub-modules to re-export them
            if state.get(nxt) == 1:
                if not node.startswith(nxt + "."):
                    cycle.extend([*path, node, nxt])
                    return True
                continue
            if state.get(nxt) is None and visit(nxt, [*path, node]):
                return True
        state[node] = 2
        return False

    for start in sorted(edges):
        if state.get(start) is None and visit(start, []):
            break
    assert not cycle, " -> ".join(cycle)


def test_the_tool_does_not_import_torch_at_module_level() -> None:
    for folder in ("migrate", "codemods"):
        for path in (ROOT / folder).rglob("*.py"):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            for node in tree.body:
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""] if isinstance(node, ast.ImportFrom) else []
                assert not any(n == "torch" or n.startswith("torch.") for n in names), path
