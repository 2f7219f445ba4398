"""What a file's code spells, known before libcst parses it: the cheap gate that keeps most files unparsed.

Two layers, both sound for every rule (a rule that would find something always passes):

* the **text**: a rule's trigger words and required words (``Rule.triggers``, ``Rule.requires``) must occur
  anywhere in the source, comments and strings included;
* the **names of the compiled code**: a rule that reports calls to certain functions (``Rule.needs_names``:
  the qualified names it matches, ``torch.distributed.all_reduce``) needs one of them spelled in code. The
  analysis resolves a qualified name only through imports and attribute chains written in the program, so
  every dotted part of it is then a name of the compiled code (``import torch.distributed as dist`` gives
  ``torch`` and ``distributed``; ``dist.all_reduce(t)`` gives ``all_reduce``). A word in a docstring or a
  comment does not count, nor does ``functools.reduce`` for ``torch.distributed.reduce`` unless
  ``distributed`` is spelled too.

The names come from the code object Python's own compiler makes of the file, which the syntax check
compiles anyway (:func:`ddp_migrate.engine.check_syntax`): the names of every code object (globals,
attributes, imports, locals, parameters, free variables; dead code included). Annotations postponed by
``from __future__ import annotations`` are strings in the code object: their words count as names too.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from types import CodeType
from typing import Iterable

from ddp_migrate.codemods.base import Rule
from ddp_migrate.codemods.names import RUNTIME_MODULE, VENDORED_RUNTIME

#: ``CO_FUTURE_ANNOTATIONS``: the code's annotations are strings (``from __future__ import annotations``).
_FUTURE_ANNOTATIONS = 0x1000000
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
#: The vendored runtime stands for the runtime package (as the analysis's imports read it).
_RUNTIME_PARTS = frozenset(RUNTIME_MODULE.split("."))


def code_names(code: CodeType) -> frozenset[str]:
    """Every name the compiled module and its nested code objects use, dotted names split into their parts."""
    found: set[str] = set()
    postponed = bool(code.co_flags & _FUTURE_ANNOTATIONS)
    stack = [code]
    while stack:
        current = stack.pop()
        found.add(current.co_name)
        found.update(current.co_names, current.co_varnames, current.co_cellvars, current.co_freevars)
        for constant in current.co_consts:
            if isinstance(constant, CodeType):
                stack.append(constant)
            elif postponed and isinstance(constant, str):
                found.update(_WORD.findall(constant))
            elif postponed and isinstance(constant, tuple):
                found.update(w for item in constant if isinstance(item, str) for w in _WORD.findall(item))
    for dotted in [name for name in found if "." in name]:
        found.update(dotted.split("."))
    if VENDORED_RUNTIME in found:
        found.update(_RUNTIME_PARTS)
    return frozenset(found)


@dataclass(frozen=True)
class Vocabulary:
    """A source's text and, where it compiled, the names of its code (``None``: not known, every rule's
    name test passes)."""

    text: str
    names: frozenset[str] | None = None
    #: Whether each word asked about so far occurs in the text (rules share their words).
    _words: dict[str, bool] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def of(cls, text: str, code: CodeType | None) -> Vocabulary:
        """The vocabulary of a source and of the code object compiled from it (``None``: none)."""
        return cls(text, code_names(code) if code is not None else None)

    @classmethod
    def joined(cls, parts: Iterable[Vocabulary]) -> Vocabulary:
        """The vocabulary of a program: all its modules' texts and names (a rule may act on one module
        because of what another one holds)."""
        parts = list(parts)
        names: set[str] = set()
        for part in parts:
            if part.names is None:
                return cls("\n".join(p.text for p in parts), None)
            names.update(part.names)
        return cls("\n".join(p.text for p in parts), frozenset(names))

    def spells(self, qualified: str) -> bool:
        """Whether every dotted part of a qualified name is a name of the code (always, when unknown)."""
        return self.names is None or all(part in self.names for part in qualified.split("."))

    def could_match(self, rule: type[Rule]) -> bool:
        """Whether the rule could find anything here: its trigger words occur, one of its required words
        if it has any, and the code spells a qualified name of each group it needs."""
        if not all(any(self.spells(name) for name in group) for group in rule.needs_names):
            return False  # the cheap test first: a few set look-ups
        if not any(self._occurs(word) for word in rule.triggers):
            return False
        return not rule.requires or any(self._occurs(word) for word in rule.requires)

    def _occurs(self, word: str) -> bool:
        found = self._words.get(word)
        if found is None:
            found = self._words[word] = word in self.text
        return found
