"""The rule model: what a rule is, what it reports, and how its fix hands back a new module.

A rule is one class with a stable code, a kebab-case name, a docstring that documents it, and
examples that are both its specification and its tests. ``find`` reports; ``fix`` (where a fix is safe)
rewrites. Both read the shared :class:`~ddp_migrate.codemods.analysis.ScriptAnalysis` of the file.
"""

from __future__ import annotations

import abc
import enum
import inspect
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar, Iterable, Sequence

import libcst as cst

if TYPE_CHECKING:
    from .analysis import ScriptAnalysis


class Phase(enum.IntEnum):
    """The fixed order in which fixes run (see the design: legacy launch first, clean-up last)."""

    LEGACY_LAUNCH = 10
    PROCESS_GROUP = 20
    DEVICES = 30
    WRAPPING = 40
    SAMPLERS = 50
    MODULE_ACCESS = 60
    CHECKPOINTS = 70
    OUTPUT = 80
    CLEANUP = 90


class Severity(str, enum.Enum):
    """How serious a finding is, for the linter's output formats."""

    ERROR = "error"
    WARNING = "warning"
    INFO = "info"


class FixSafety(str, enum.Enum):
    """Whether a rule's fix may run under ``lint --fix`` (as ruff's safe and unsafe fixes).

    ``SAFE``: the fix is the mechanical migration, and a plain run computes what it computed before.
    ``UNSAFE``: the fix changes behaviour on purpose beyond that (a save moved to rank 0, a wrap moved out
    of a condition, the loss divided differently); ``lint --fix`` applies it only with ``--unsafe-fixes``.
    The migrate command applies every fix. Each rule's "Fix safety" paragraph says what its fix may change.
    """

    SAFE = "safe"
    UNSAFE = "unsafe"


class BatchSizePolicy(str, enum.Enum):
    """What a migrated loader's ``batch_size`` means.

    ``GLOBAL`` keeps the original batch as the global one (each process takes its share), so the migrated
    script computes what the original computed. ``PER_PROCESS`` keeps the number per process, so the
    effective batch grows with the number of processes.
    """

    GLOBAL = "global"
    PER_PROCESS = "per-process"


@dataclass(frozen=True)
class Options:
    """Settings that change what a fix writes."""

    batch_size: BatchSizePolicy = BatchSizePolicy.GLOBAL
    #: Make the migrated program restartable under ``torchrun --max-restarts``: snapshot the training state
    #: at the end of every epoch and resume from it at start.
    elastic: bool = False
    #: With ``elastic``, also snapshot every this many optimizer steps inside the epoch (``None``: epochs only).
    snapshot_every: int | None = None
    #: The module migrated code imports the runtime from: the installed package (default), or a module
    #: written beside the program (``--runtime vendor``: ``ddp_runtime``) so training needs only torch.
    runtime_module: str = "ddp_migrate.runtime"
    #: Leave a ``# TODO(ddp-migrate): ...`` comment above every statement a finding leaves to a human (the
    #: migration does; ``lint --fix`` does not).
    review_todos: bool = False


@dataclass(frozen=True)
class Example:
    """A ``before`` snippet the rule reports and rewrites into ``after``.

    ``after`` is ``None`` for rules that only report. ``options`` lets an example pin a setting.
    """

    before: str
    after: str | None = None
    options: Options = Options()


@dataclass(frozen=True)
class Valid:
    """A snippet on which the rule must stay silent."""

    code: str


@dataclass(frozen=True)
class Finding:
    """One problem the rule reports at a place in the file (1-based line, 0-based column)."""

    code: str
    name: str
    line: int
    column: int
    end_line: int
    end_column: int
    message: str
    severity: Severity
    fixable: bool
    #: See :attr:`Match.advice`.
    advice: bool = False

    def sort_key(self) -> tuple[int, int, str]:
        """Order findings by position, then code."""
        return (self.line, self.column, self.code)


@dataclass(frozen=True)
class Change:
    """One edit a fix made, for the migration report."""

    code: str
    line: int
    message: str


@dataclass(frozen=True)
class Note:
    """Something the report should tell the user although nothing is wrong (no effect on the exit code)."""

    code: str
    line: int
    message: str


@dataclass
class FixResult:
    """What a fix hands back: the new module and what it did."""

    module: cst.Module
    changes: list[Change] = field(default_factory=list)
    notes: list[Note] = field(default_factory=list)


@dataclass(frozen=True)
class Match:
    """A node a rule found, with the message to report for it.

    Rules compute their matches once (:meth:`Rule.matches`); ``find`` turns them into findings and ``fix``
    rewrites the same nodes, so the two can never disagree about what is wrong.
    """

    node: cst.CSTNode
    message: str
    fixable: bool = True
    #: Only speed is at stake (an all-reduce a ``no_sync()`` could skip): lint reports it; a migration, which
    #: computes the original either way, notes it instead of counting it among the items for a human.
    advice: bool = False


class Rule(abc.ABC):
    """Base class of every rule. Subclasses set the class attributes and implement :meth:`matches`."""

    code: ClassVar[str]
    name: ClassVar[str]
    phase: ClassVar[Phase] = Phase.CLEANUP
    severity: ClassVar[Severity] = Severity.WARNING
    #: Words that must appear in the source for the rule to have anything to find (a cheap pre-parse check).
    triggers: ClassVar[tuple[str, ...]] = ("torch",)
    #: A second cheap gate: when set, one of these words must appear too (a rule that acts only on training
    #: code requires ``backward`` or ``DataParallel``), so most library files are never parsed.
    requires: ClassVar[tuple[str, ...]] = ()
    #: A shape of the text that stands in for the required words (``rank % n``, which no word list says):
    #: where it matches, ``requires`` is met.
    requires_pattern: ClassVar[re.Pattern[str] | None] = None
    #: A third gate, on the names of the compiled code (:mod:`ddp_migrate.vocabulary`): groups of the
    #: qualified names the rule's findings are about (the calls it reports); of each group the code must
    #: spell one (every dotted part a name of the code, not a word of a docstring). Empty: no such gate.
    needs_names: ClassVar[tuple[frozenset[str], ...]] = ()
    examples: ClassVar[Sequence[Example | Valid]] = ()
    #: What a human must do when the rule cannot fix a finding by itself.
    manual_fix: ClassVar[str] = ""
    #: Whether the rule runs unless selected by code. A rule that is off by default reports code that is
    #: correct but worth a look, which every migration writes on purpose (the rank-0 ``print0`` of a shard's
    #: loss); it runs only when ``--select`` names it (or ``ALL``).
    enabled_by_default: ClassVar[bool] = True
    #: Codes of rules whose finding at the same place this rule's finding stands for in a report: this rule's
    #: fix runs first in a migration and leaves theirs nothing to do (DDP016 keeps the ``module.`` keys of a
    #: ``state_dict()`` that DDP008 would otherwise read through ``.module``): one piece of advice per call.
    supersedes: ClassVar[tuple[str, ...]] = ()
    #: Whether the fix may change behaviour beyond the mechanical migration (documented in the docstring's
    #: "Fix safety" paragraph); ``lint --fix`` runs ``UNSAFE`` fixes only with ``--unsafe-fixes``.
    fix_safety: ClassVar[FixSafety] = FixSafety.SAFE

    @classmethod
    def can_fix(cls) -> bool:
        """Whether this rule rewrites code (it overrides :meth:`fix`)."""
        return cls.fix is not Rule.fix

    @classmethod
    def summary(cls) -> str:
        """The first line of the rule's docstring."""
        return inspect.cleandoc(cls.__doc__ or "").splitlines()[0] if cls.__doc__ else ""

    @classmethod
    def documentation(cls) -> str:
        """The rule's whole docstring, dedented."""
        return inspect.cleandoc(cls.__doc__ or "")

    @abc.abstractmethod
    def matches(self, analysis: ScriptAnalysis) -> Iterable[Match]:
        """Yield every node this rule reports in the analysed file."""

    def matches_in(self, analysis: ScriptAnalysis) -> list[Match]:
        """The rule's matches in an analysed module, computed once per analysis and rule object: the last
        pass of a migration runs the fix on the same analysis the findings are then read from. (Kept with
        the rule object itself: two objects of one rule may see different options.)"""
        kept: list[tuple[Rule, list[Match]]] = analysis.derived(f"matches of {self.code}", lambda _: [])
        for rule, matches in kept:
            if rule is self:
                return matches
        matches = list(self.matches(analysis))
        kept.append((self, matches))
        return matches

    def find(self, analysis: ScriptAnalysis) -> list[Finding]:
        """Report the rule's findings, positioned in the analysed file."""
        findings = []
        for match in self.matches_in(analysis):
            start, end = analysis.span(match.node)
            findings.append(
                Finding(
                    code=self.code,
                    name=self.name,
                    line=start[0],
                    column=start[1],
                    end_line=end[0],
                    end_column=end[1],
                    message=match.message,
                    severity=self.severity,
                    fixable=self.can_fix() and match.fixable,
                    advice=match.advice,
                )
            )
        return findings

    @classmethod
    def find_in_text(cls, text: str) -> list[Finding] | None:
        """The rule's findings read from the source text alone, for a rule that needs no parse (its
        comments); ``None`` for a rule that reads the parsed module. A lint whose only rules past the gate
        read the text is done without libcst."""
        return None

    def notes(self, analysis: ScriptAnalysis, options: Options) -> list[Note]:
        """Report items about the migrated file that are correct but worth knowing (no effect on exit codes)."""
        return []

    def fix(self, analysis: ScriptAnalysis, options: Options) -> FixResult | None:
        """Rewrite the analysed module; ``None`` when there is nothing this rule can safely change."""
        return None
