"""What a file's code spells, known before libcst parses it: the cheap gate that keeps most files unparsed.

Two layers, both sound for every rule (a rule that would find something always passes):

* the **text**: a rule's trigger words and required words (``Rule.triggers``, ``Rule.requires``) must occur
  anywhere in the source, comments and strings included (or in a string of the code: an escape such as
  ``"\\x52ANK"`` spells ``RANK`` there);
* the **names of the compiled code**: a rule that reports calls to certain functions (``Rule.needs_names``:
  the qualified names it matches, ``torch.distributed.all_reduce``) needs one of them spelled in code. The
  analysis resolves a qualified name only through imports and attribute chains written in the program, so
  every dotted part of it is then a name of the compiled code (``import torch.distributed as dist`` gives
  ``torch`` and ``distributed``; ``dist.all_reduce(t)`` gives ``all_reduce``). A word in a docstring or a
  comment does not count, nor does ``functools.reduce`` for ``torch.distributed.reduce`` unless
  ``distributed`` is spelled too.

Where every rule past those two layers reports calls (``Rule.needs_names``), a third one decides whether the
file is parsed at all: the qualified names its imports and chains of names resolve to
(:meth:`Vocabulary.narrowed`, :func:`~ddp_migrate.codemods.analysis.spelled.resolvable_names`, read with
``ast``): ``functools.reduce`` beside ``torch.distributed.is_available()`` spells every part of
``torch.distributed.reduce`` and resolves to neither.

The names come from the code object Python's own compiler makes of the file, which the syntax check
compiles anyway (:func:`ddp_migrate.engine.check_syntax`): the names of every code object (globals,
attributes, imports, locals, parameters, free variables). Annotations postponed by
``from __future__ import annotations`` are strings in the code object: their words count as names too.
The compiler keeps the names of code under ``if False:`` and of statements after a ``return``, but drops
the functions, lambdas, classes and comprehensions defined after a ``return``, ``raise``, ``continue`` or
``break`` in the same block, or after an endless ``while True:`` loop, with every name inside them. The
analysis still reads that code, so the words of such lines count as names too (:func:`unreachable_words`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from types import CodeType
from typing import Iterable

from ddp_migrate.codemods.analysis.lines import LINE_BREAK
from ddp_migrate.codemods.analysis.spelled import resolvable_names
from ddp_migrate.codemods.base import Rule
from ddp_migrate.codemods.names import RUNTIME_MODULE, VENDORED_RUNTIME

#: ``CO_FUTURE_ANNOTATIONS``: the code's annotations are strings (``from __future__ import annotations``).
_FUTURE_ANNOTATIONS = 0x1000000
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
#: The vendored runtime stands for the runtime package (as the analysis's imports read it).
_RUNTIME_PARTS = frozenset(RUNTIME_MODULE.split("."))


def read_code(code: CodeType) -> tuple[frozenset[str], str]:
    """What the compiled module and the code objects inside it hold, in one walk: every name they use
    (dotted names split into their parts), and their string constants, one per line: what the source's
    strings say once escapes are read (``"\\x52ANK"`` is ``RANK``) and adjacent literals joined."""
    names: set[str] = set()
    strings: list[str] = []
    stack: list[object] = [code]
    while stack:
        current = stack.pop()
        if isinstance(current, CodeType):
            names.add(current.co_name)
            names.update(current.co_names, current.co_varnames, current.co_cellvars, current.co_freevars)
            current = current.co_consts
        for item in current:  # type: ignore[attr-defined]
            if isinstance(item, str):
                strings.append(item)
            elif isinstance(item, (CodeType, tuple, frozenset)):
                stack.append(item)
    text = "\n".join(strings)
    if code.co_flags & _FUTURE_ANNOTATIONS:  # the annotations are among the strings
        names.update(_WORD.findall(text))
    for dotted in [name for name in names if "." in name]:
        names.update(dotted.split("."))
    if VENDORED_RUNTIME in names:
        names.update(_RUNTIME_PARTS)
    return frozenset(names), text


#: A statement after which the rest of its block never runs.
_TERMINAL = re.compile(r"(?:return|raise|continue|break)\b|while[ \t(]+(?:True|1)[ \t)]*:")


def _code_lines(code: CodeType) -> set[int]:
    """The source lines that have instructions, in the module or any code object inside it."""
    lines: set[int] = set()
    stack = [code]
    while stack:
        current = stack.pop()
        lines.update(line for _, _, line in current.co_lines() if line is not None)
        stack.extend(c for c in current.co_consts if isinstance(c, CodeType))
    return lines


def unreachable_words(text: str, code: CodeType) -> frozenset[str]:
    """The words of the code the compiler dropped: the lines after a ``return``, ``raise``, ``continue``,
    ``break`` or endless ``while True:`` loop in its block, up to the next line that has instructions.

    Lines indented deeper than the terminal statement continue it (or are the loop's body), as do lines
    that start with a closing bracket; the first line back at its indentation without instructions starts
    code that never runs (with instructions, it runs: a loop left by ``break``). Lines of strings that look
    the same count too: their words are added, which only lets more rules in."""
    lines = LINE_BREAK.split(text)  # Python's lines: a form feed does not end one
    covered: set[int] | None = None
    words: set[str] = set()
    terminal: int | None = None
    number = 0
    while number < len(lines):
        line = lines[number]
        number += 1
        stripped = line.lstrip(" \t")
        if not stripped or stripped[0] in "#)]}":
            continue
        indent = len(line) - len(stripped)
        if terminal is not None and indent > terminal:
            continue
        if terminal is not None and indent == terminal:
            covered = _code_lines(code) if covered is None else covered
            if number not in covered:
                while number <= len(lines) and number not in covered:  # the dropped run, this line first
                    words.update(_WORD.findall(lines[number - 1]))
                    number += 1
                terminal = None
                continue
        terminal = indent if _TERMINAL.match(stripped) else None
    return frozenset(words)


def _reads_text_only(rule: type[Rule]) -> bool:
    """Whether the rule may find what it finds in the source text alone (:meth:`Rule.find_in_text`)."""
    return getattr(rule.find_in_text, "__func__", None) is not getattr(Rule.find_in_text, "__func__", None)


_PARTS: dict[frozenset[str], tuple[tuple[str, ...], ...]] = {}


def _parts_of(group: frozenset[str]) -> tuple[tuple[str, ...], ...]:
    """The dotted parts of each qualified name of a group (split once per run)."""
    found = _PARTS.get(group)
    if found is None:
        found = _PARTS[group] = tuple(dict.fromkeys(tuple(name.split(".")) for name in group))
    return found


@dataclass(frozen=True)
class Vocabulary:
    """A source's text and, where it compiled, the names of its code (``None``: not known, every rule's
    name test passes), its string constants (:func:`read_code`) and the code object itself (for the words
    of code the compiler dropped)."""

    text: str
    names: frozenset[str] | None = None
    strings: str = ""
    code: CodeType | None = field(default=None, compare=False, repr=False)
    #: Answers computed so far: whether each word asked about occurs in the text (rules share their words).
    _words: dict[str, bool] = field(default_factory=dict, compare=False, repr=False)
    _whole: list[frozenset[str]] = field(default_factory=list, compare=False, repr=False)
    #: Whether the code spells one of each group's names, by group asked about (rules share groups).
    _groups: dict[frozenset[str], bool] = field(default_factory=dict, compare=False, repr=False)
    #: The qualified names the code can resolve to, once read (:func:`resolvable_names`).
    _resolvable: list[frozenset[str] | None] = field(default_factory=list, compare=False, repr=False)

    @classmethod
    def of(cls, text: str, code: CodeType | None) -> Vocabulary:
        """The vocabulary of a source and of the code object compiled from it (``None``: none)."""
        if code is None:
            return cls(text)
        names, strings = read_code(code)
        return cls(text, names, strings, code)

    @classmethod
    def joined(cls, parts: Iterable[Vocabulary]) -> Vocabulary:
        """The vocabulary of a program: all its modules' texts and names, those of code the compiler
        dropped included (a rule may act on one module because of what another one holds)."""
        parts = list(parts)
        text = "\n".join(f"{p.text}\n{p.strings}" for p in parts)
        names: set[str] = set()
        for part in parts:
            whole = part.whole_names()
            if whole is None:
                return cls(text, None)
            names.update(whole)
        return cls(text, frozenset(names))

    def reprinted(self, text: str) -> Vocabulary:
        """This vocabulary over the text libcst prints of the same module (its layout may differ a little
        from the source's, never its code): the names and strings stay those of the compiled source."""
        return Vocabulary(text, self.whole_names(), self.strings)

    def whole_names(self) -> frozenset[str] | None:
        """The names, with the words of the code the compiler dropped (:func:`unreachable_words`; found on
        first use: only a rule the names alone would rule out needs them)."""
        if self.names is None or self.code is None:
            return self.names
        if not self._whole:
            self._whole.append(self.names | unreachable_words(self.text, self.code))
        return self._whole[0]

    def spells(self, qualified: str) -> bool:
        """Whether every dotted part of a qualified name is a name of the code (always, when unknown)."""
        return self.spells_one_of(frozenset({qualified}))

    def spells_one_of(self, group: frozenset[str]) -> bool:
        """Whether the code spells one of the qualified names of a group (:meth:`spells`). The words of
        dropped code are looked for only when the names alone spell none, and only for the names every
        part of which is a name or somewhere in the text (the dropped code's words are words of the text)."""
        names = self.names
        if names is None:
            return True
        found = self._groups.get(group)
        if found is None:
            parts = _parts_of(group)
            found = any(all(part in names for part in split) for split in parts)
            if not found:
                text = self.text
                maybe = [split for split in parts if all(part in names or part in text for part in split)]
                whole = self.whole_names() if maybe else None
                found = whole is not None and any(all(part in whole for part in split) for split in maybe)
            self._groups[group] = found
        return found

    def could_match(self, rule: type[Rule]) -> bool:
        """Whether the rule could find anything here: its trigger words occur, one of its required words
        (or its pattern) if it has any, and the code spells a qualified name of each group it needs."""
        if not any(self._occurs(word) for word in rule.triggers):
            return False
        if rule.requires and not any(self._occurs(word) for word in rule.requires):
            if rule.requires_pattern is None or rule.requires_pattern.search(self.text) is None:
                return False
        return all(self.spells_one_of(group) for group in rule.needs_names)

    def narrowed(self, rules: list[type[Rule]]) -> list[type[Rule]]:
        """The rules past the gate (:meth:`could_match`) that could still find something once the qualified
        names the code can resolve are known (:func:`resolvable_names`): a rule that needs certain qualified
        names (``Rule.needs_names``: ``torch.distributed.all_reduce``) needs one of them resolved, not only its
        parts spelled. Read only where it may leave the module unparsed: when every rule past the gate that
        reads the parsed module needs such names (else the rules are handed back as they are)."""
        parsing = [rule for rule in rules if not _reads_text_only(rule)]
        if not parsing or self.code is None or not all(self._may_be_ruled_out(rule) for rule in parsing):
            return rules
        if not self._resolvable:
            self._resolvable.append(resolvable_names(self.text))
        resolvable = self._resolvable[0]
        if resolvable is None:
            return rules
        return [
            rule
            for rule in rules
            if _reads_text_only(rule)
            or all(self._resolves_one_of(group, resolvable) for group in rule.needs_names)
        ]

    def _may_be_ruled_out(self, rule: type[Rule]) -> bool:
        """Whether one of the rule's groups of needed names is met, if at all, by a qualified name resolved (no
        one-part name of it is spelled)."""
        return any(
            any("." in name for name in group) and not self.spells_one_of(frozenset(name for name in group if "." not in name))
            for group in rule.needs_names
        )

    def _resolves_one_of(self, group: frozenset[str], resolvable: frozenset[str]) -> bool:
        """Whether the code resolves one of the group's qualified names, or spells one of its one-part names (a
        method name such as ``backward``, whatever its receiver: :meth:`spells_one_of`)."""
        words = frozenset(name for name in group if "." not in name)
        if words and self.spells_one_of(words):
            return True
        return any(name in resolvable for name in group if "." in name)

    def _occurs(self, word: str) -> bool:
        """Whether the word is in the text, or in a string of the code (spelled with escapes there)."""
        found = self._words.get(word)
        if found is None:
            found = self._words[word] = word in self.text or word in self.strings
        return found
