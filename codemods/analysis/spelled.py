"""The qualified names a source could resolve to, read with Python's own ``ast`` before libcst parses it.

The analysis resolves a name or an attribute chain to qualified names through the imports of the module
(:meth:`ModuleIndex.qualified_names`: ``dist.all_reduce`` of ``import torch.distributed as dist`` is
``torch.distributed.all_reduce``), and in no other way. :func:`resolvable_names` gives a superset of every
answer it can give for any node of the module, from an ``ast`` tree (a tenth of a libcst parse): every chain
of names and attributes the code spells, each identifier it spells anywhere else (an attribute's name, a
parameter, a keyword argument, a definition, a ``global``), each taken whole, as a builtin, and with its
first part replaced by what any import of the module (in any scope) binds it to. The import bindings are the
analysis's own (:func:`import_binding`, :func:`from_import_binding`). Two answers are left out, neither a name
any rule asks for: the attribute of a constant (``True.real``), and an identifier ``ast`` normalises (NFKC:
``µ``) where libcst keeps it as written.

So a rule that matches only calls resolving to certain qualified names (``Rule.needs_names``) can find
nothing in a module none of whose resolvable names is one of them, whatever the words of the code: the gate
uses it to leave such a module unparsed (``functools.reduce`` beside ``torch.distributed.is_available()``
spells every part of ``torch.distributed.reduce``, and resolves to neither).
"""

from __future__ import annotations

import ast
import gc

from .script import from_import_binding, import_binding


def _chain(node: ast.expr) -> str | None:
    """``a.b.c`` for a chain of names and attributes (as :func:`~.script.dotted_name` reads libcst's)."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    parts.append(node.id)
    return ".".join(reversed(parts))


def _chains_of(dotted: str) -> list[str]:
    """``a``, ``a.b``, ``a.b.c``, ``b`` and ``c`` of ``a.b.c``: the chains of a dotted module name as libcst
    nests them (each attribute's name a ``Name`` of its own)."""
    parts = dotted.split(".")
    return [".".join(parts[: i + 1]) for i in range(len(parts)) if all(parts[: i + 1])] + parts[1:]


#: The constants libcst reads as names (``ast`` as constants).
_NAMED_CONSTANTS = ("True", "False", "None")


def resolvable_names(text: str) -> frozenset[str] | None:
    """A superset of the qualified names the analysis can resolve any node of the source to (see the module's
    docstring); ``None`` for a source ``ast`` cannot parse (then nothing is ruled out)."""
    collecting = gc.isenabled()
    gc.disable()  # (an ``ast`` tree holds no cycles: the collector would only walk it again and again)
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return None
    finally:
        if collecting:
            gc.enable()
    chains: set[str] = set(_NAMED_CONSTANTS)
    imports: dict[str, set[str]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant):
            continue  # (its value is data, not a name)
        # Every identifier the node holds (a name, an attribute, a parameter, a keyword, a definition, an
        # ``except ... as`` or ``global`` name, an import's module and names): libcst makes each a ``Name``.
        for _, value in ast.iter_fields(node):
            if isinstance(value, str):
                chains.update(_chains_of(value))
            elif isinstance(value, list) and value and isinstance(value[0], str):
                chains.update(value)
        if isinstance(node, ast.Attribute):
            dotted = _chain(node)
            if dotted is not None:
                chains.add(dotted)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                local, qualified = import_binding(alias.name, alias.asname)
                imports.setdefault(local, set()).add(qualified)
        elif isinstance(node, ast.ImportFrom):
            base = "." * node.level + (node.module or "")
            for alias in node.names:
                if alias.name != "*":
                    local, qualified = from_import_binding(base, alias.name, alias.asname)
                    imports.setdefault(local, set()).add(qualified)
    resolved: set[str] = set()
    for dotted in chains:
        root, _, rest = dotted.partition(".")
        resolved.add(dotted)
        resolved.add(f"builtins.{dotted}")
        for qualified in imports.get(root, ()):
            resolved.add(f"{qualified}.{rest}" if rest else qualified)
    return frozenset(resolved)
