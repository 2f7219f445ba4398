"""The modules of one program analysed together, and kept up to date as fixes land.

A :class:`Program` holds one libcst module per file, indexes each once (:class:`ModuleIndex`: the walk and
libcst's qualified names, the expensive part) and builds one :class:`ScriptAnalysis` per module over a
single :class:`SharedFlow`, so that every fact crosses module boundaries. When a fix rewrites a module,
only that module is indexed again; the facts (the binding model and what rules derive from it) are
rebuilt over the indexes, which is cheap.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import libcst as cst

from .script import ModuleIndex, ScriptAnalysis, SharedFlow

if TYPE_CHECKING:
    from ..base import Options


@dataclass(frozen=True)
class ModuleInfo:
    """A module of a program: its dotted name, whether the program starts there, whether it is a package."""

    name: str
    is_entry: bool
    is_package: bool = False
    #: Other names the program may import it by (``mylib.data`` of ``src/mylib/data.py``, beside ``src.mylib.data``).
    aliases: tuple[str, ...] = ()
    #: Whether a script outside the program imports it too (an evaluation script that trains nothing): its
    #: functions may then be handed models the program never wraps.
    shared_with_other_scripts: bool = False
    #: Whether the module is read alone, its program too large to analyse whole (timm's ``train.py`` and its
    #: package): what the modules it imports do (set up the process group, wrap the model) is out of sight.
    program_out_of_sight: bool = False


class Program:
    """The analysed modules of one program, by key (the engine uses file paths)."""

    def __init__(self, modules: dict[str, tuple[cst.Module, ModuleInfo]], options: Options | None = None) -> None:
        self._modules = dict(modules)
        #: The run's settings, handed to every module's analysis.
        self.options = options
        self._indexes: dict[str, ModuleIndex] = {}
        self.index_builds = 0
        self._analyses: dict[str, ScriptAnalysis] = {}
        self._build()

    def _index(self, key: str, module: cst.Module) -> ModuleIndex:
        index = self._indexes.get(key)
        if index is None or index.module is not module:
            index = ModuleIndex(module)
            self.index_builds += 1
            self._indexes[key] = index
        return index

    def _build(self) -> None:
        shared = SharedFlow()
        analyses = {}
        for key, (module, info) in self._modules.items():
            analyses[key] = ScriptAnalysis(
                module,
                shared,
                module_name=info.name,
                is_entry=info.is_entry,
                index=self._index(key, module),
                is_package=info.is_package,
                options=self.options,
                aliases=info.aliases,
                shared_with_other_scripts=info.shared_with_other_scripts,
                program_out_of_sight=info.program_out_of_sight,
            )
        shared.solve()
        self._analyses = analyses

    def release(self) -> None:
        """Drop the analyses and tables once nothing will ask the program again (:meth:`ScriptAnalysis.release`)."""
        for analysis in self._analyses.values():
            analysis.release()
        self.__dict__.clear()

    def analysis(self, key: str) -> ScriptAnalysis:
        """The analysis of one module, over the current state of the whole program."""
        return self._analyses[key]

    def module(self, key: str) -> cst.Module:
        """The current libcst module of one file."""
        return self._modules[key][0]

    def code(self, key: str) -> str:
        """The current source code of one module (generated at most once per version of the module)."""
        return self._indexes[key].code

    def keys(self) -> list[str]:
        """The modules' keys, in the order they were given (the entry first)."""
        return list(self._modules)

    def replace(self, key: str, module: cst.Module, index: ModuleIndex | None = None) -> None:
        """A fix rewrote one module: index it again (or take the caller's ``index`` of it) and rebuild the
        program's facts."""
        self._modules[key] = (module, self._modules[key][1])
        if index is not None and index.module is module:
            self._indexes[key] = index
            self.index_builds += 1
        self._build()
