"""The shared analysis every rule reads: one package, one binding model.

Modules, each importing only those listed before it:

- :mod:`.script`: one parsed module: index, qualified names, bindings and value flow, loops and loaders,
  models, entry point, rank guards (:class:`ScriptAnalysis`);
- :mod:`.legacy`: hand-made launches and rank values of legacy distributed code (:class:`LegacyFacts`);
- :mod:`.ranks`: which values may differ between ranks and where collectives are safe, by data flow (:class:`RankFacts`);
- :mod:`.loaders`, :mod:`.per_rank`: the training and evaluation loaders, and the values computed on a rank's shard;
- :mod:`.devices`: whether a program trains on the CPU wherever it runs (nothing in it names an accelerator);
- :mod:`.trainable`: which parameters train (``requires_grad`` changes, layers a forward skips on some steps);
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
    given_loader_argument,
    is_docstring_line,
    is_import_line,
    is_none,
    is_true,
    keyword_argument,
    leaves_early,
    leaves_function,
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
    "given_loader_argument",
    "is_docstring_line",
    "is_import_line",
    "is_none",
    "is_true",
    "keyword_argument",
    "leaves_early",
    "leaves_function",
    "loader_argument",
    "statements_of",
    "unwrap_iterable",
    "walk",
    "wrapped_argument",
]
