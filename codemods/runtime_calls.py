"""How fixes spell calls into ``ddp_migrate.runtime`` and make sure the file imports it."""

from __future__ import annotations

from .analysis import ScriptAnalysis
from .edits import Edits


def runtime_name(analysis: ScriptAnalysis, edits: Edits) -> str:
    """The local name of the runtime module in this file, adding ``from ddp_migrate import runtime``."""
    alias = analysis.runtime_alias
    edits.add_import("ddp_migrate", "runtime", None if alias == "runtime" else alias)
    return alias


def imported_name(analysis: ScriptAnalysis, edits: Edits, module: str, name: str) -> str:
    """The local name of ``module.name``, adding ``from module import name`` when the file lacks it."""
    existing = analysis.local_name_for(f"{module}.{name}")
    if existing:
        return existing
    edits.add_import(module, name)
    return name
