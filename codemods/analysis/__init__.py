"""The shared analysis every rule reads: one package, one binding model.

Modules, each importing only those listed before it:

- :mod:`.script`: one parsed module: index, qualified names, bindings and value flow, loops and loaders,
  models, entry point, rank guards (:class:`ScriptAnalysis`);
- :mod:`.legacy`: hand-made launches and rank values of legacy distributed code (:class:`LegacyFacts`);
- :mod:`.ranks`: which values may differ between ranks and where collectives are safe, by data flow (:class:`RankFacts`);
- :mod:`.project`: the project a file belongs to and how its imports resolve to local modules;
- :mod:`.program`: the modules of one program analysed together (:class:`Program`).
"""

from __future__ import annotations

from .script import (
    ITERATION_WRAPPERS,
    LOADER_PARAMETERS,
    SELF_RETURNING_METHODS,
    WRAPPER_ATTRIBUTES,
    EpochLoop,
    LoaderLoop,
    ScriptAnalysis,
    argument,
    call_method_name,
    dotted_name,
    is_docstring_line,
    is_import_line,
    is_true,
    keyword_argument,
    leaves_early,
    loader_argument,
    statements_of,
    unwrap_iterable,
    walk,
    wrapped_argument,
)

__all__ = [
    "ITERATION_WRAPPERS",
    "LOADER_PARAMETERS",
    "SELF_RETURNING_METHODS",
    "WRAPPER_ATTRIBUTES",
    "EpochLoop",
    "LoaderLoop",
    "ScriptAnalysis",
    "argument",
    "call_method_name",
    "dotted_name",
    "is_docstring_line",
    "is_import_line",
    "is_true",
    "keyword_argument",
    "leaves_early",
    "loader_argument",
    "statements_of",
    "unwrap_iterable",
    "walk",
    "wrapped_argument",
]
