"""``# noqa`` comments: suppressing findings on a line, and reporting codes a noqa comment gets wrong.

``# noqa`` on the line where a finding starts silences every finding there; ``# noqa: DDP007`` (several
codes separated by commas or spaces, ``noqa`` in any case) silences only those codes. The comment is found
with :mod:`tokenize`, so text that merely looks like a comment inside a string never counts.

Only the finding's first line is looked at: for a finding on a statement that spans several lines, put the
comment on the line where the reported code starts.

As in ruff, such a line is not rewritten either: ``migrate`` drops a rule's fix when one of the rule's
findings starts on a line whose comment silences it, or when the fix would rewrite or remove a line of a
statement whose first line (or the line itself) carries such a comment (see
:func:`ddp_migrate.engine.blocked_by_noqa`). A fix rewrites all of its matches at once, so when only some
of a rule's findings are silenced the fix is skipped whole and the others stay in the report for a human.
The other rules still migrate the rest of the file.

A code in a noqa comment that looks like one of ours (same letters as a registered code, ``DDP``) but names
no rule is reported as ``DDP100 unknown-noqa-code``: a typo there would otherwise silently suppress
nothing. Codes of other tools (``# noqa: E501``) are left alone.
"""

from __future__ import annotations

import difflib
import io
import re
import tokenize
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Iterable, Sequence

from ddp_migrate import codemods
from ddp_migrate.codemods.base import Example, Finding, Match, Rule, Severity, Valid

if TYPE_CHECKING:
    from ddp_migrate.codemods.analysis import ScriptAnalysis

#: ``# noqa`` or ``# noqa: CODE, CODE`` anywhere in a comment (after other text too: ``# type: ignore  # noqa``).
NOQA = re.compile(r"#\s*noqa(?=\s|:|$)(?:\s*:\s*(?P<codes>[A-Za-z]+[0-9]+(?:(?:\s*,\s*|\s+)[A-Za-z]+[0-9]+)*))?", re.IGNORECASE)
CODE = re.compile(r"[A-Za-z]+[0-9]+")


@dataclass(frozen=True)
class NoqaCode:
    """One code written in a noqa comment, where it stands (1-based line, 0-based column)."""

    code: str
    line: int
    column: int


@dataclass(frozen=True)
class NoqaComment:
    """The noqa comment on one line: ``codes`` is ``None`` for a bare ``# noqa`` (everything)."""

    line: int
    codes: frozenset[str] | None
    written: tuple[NoqaCode, ...] = ()

    def suppresses(self, code: str) -> bool:
        """Whether this comment silences a finding with this code."""
        return self.codes is None or code in self.codes


_WORD = re.compile("noqa", re.IGNORECASE)


def might_have_noqa(text: str) -> bool:
    """The cheap check before tokenizing: does the word occur at all (in any case)?"""
    return _WORD.search(text) is not None


@lru_cache(maxsize=8)
def noqa_comments(text: str) -> dict[int, NoqaComment]:
    """Every noqa comment in the source text, by line (an empty mapping if the text does not tokenize)."""
    if not might_have_noqa(text):
        return {}
    comments: dict[int, NoqaComment] = {}
    try:
        for token in tokenize.generate_tokens(io.StringIO(text).readline):
            if token.type != tokenize.COMMENT:
                continue
            match = NOQA.search(token.string)
            if match is None:
                continue
            line, column = token.start
            if match.group("codes") is None:
                comments[line] = NoqaComment(line, None)
                continue
            offset = match.start("codes")
            written = tuple(
                NoqaCode(code.group().upper(), line, column + offset + code.start())
                for code in CODE.finditer(match.group("codes"))
            )
            comments[line] = NoqaComment(line, frozenset(c.code for c in written), written)
    except (tokenize.TokenError, SyntaxError):
        return comments
    return comments


def suppress(findings: Sequence[Finding], text: str) -> list[Finding]:
    """The findings that no noqa comment on their first line silences."""
    if not findings:
        return []  # without tokenizing the text for its comments
    comments = noqa_comments(text)
    if not comments:
        return list(findings)
    return [f for f in findings if not (f.line in comments and comments[f.line].suppresses(f.code))]


class UnknownNoqaCode(Rule):
    """Report rule codes in ``# noqa`` comments that name no rule.

    What it finds: a code in a ``# noqa: ...`` comment that has the letters of this tool's codes (``DDP``)
    but names no rule, such as ``# noqa: DDP07`` or ``# noqa: DDP999``. Codes of other tools
    (``# noqa: E501``) are not this tool's business and are left alone.

    Why it is a problem: a mistyped code suppresses nothing, so the finding the comment was meant to
    silence is still reported, or worse, a later rule with that code is silenced by accident. The linter
    reports the comment instead of guessing what was meant.

    What the fix does: nothing; correct the code (``ddp-migrate rules`` lists them) or remove it. This
    check belongs to ``ddp-migrate lint`` and never makes a migration fail.
    """

    code = "DDP100"
    name = "unknown-noqa-code"
    severity = Severity.WARNING
    triggers = ("noqa", "NOQA", "Noqa", "NoQA")
    manual_fix = "correct or remove the code in the noqa comment (ddp-migrate rules lists the codes)"
    examples = (
        Example(before="import torch\nmodel = torch.nn.Linear(2, 2)  # noqa: DDP999\n"),
        Valid("import torch\nmodel = torch.nn.DataParallel(model)  # noqa: DDP001, E501\n"),
    )

    def matches(self, analysis: ScriptAnalysis) -> Iterable[Match]:  # pragma: no cover - find() does the work
        return ()

    def find(self, analysis: ScriptAnalysis) -> list[Finding]:
        """One finding per unknown code, positioned on the code inside the comment."""
        return unknown_codes(analysis.code)

    @classmethod
    def find_in_text(cls, text: str) -> list[Finding]:
        """The same findings, from the source text (libcst gives the comments back unchanged)."""
        return unknown_codes(text)


def suggestion(code: str, known: set[str]) -> str | None:
    """The registered code the writer most likely meant: the zero-padded spelling (``DDP07`` → ``DDP007``),
    else the most similar code (ties go to the lowest code, so the hint is the same every run)."""
    letters = code.rstrip("0123456789")
    for candidate in known:
        if candidate.startswith(letters) and candidate[len(letters):].lstrip("0") == code[len(letters):].lstrip("0"):
            return candidate
    scored = [(difflib.SequenceMatcher(None, code, candidate).ratio(), candidate) for candidate in known]
    best = max((ratio for ratio, _ in scored), default=0.0)
    if best < 0.6:
        return None
    return min(candidate for ratio, candidate in scored if ratio == best)


def _may_name_our_codes(text: str, ours: set[str]) -> bool:
    """The cheap check before tokenizing: could a noqa comment name a code with our letters? Every noqa
    comment matches :data:`NOQA` in the whole text too, at its ``#``, with at least the codes it has (a match
    never takes in a ``#``, so none swallows the comment's), so without such a match there is none."""
    for match in NOQA.finditer(text):
        codes = match.group("codes")
        if codes and any(code.group().upper().rstrip("0123456789") in ours for code in CODE.finditer(codes)):
            return True
    return False


def unknown_codes(text: str) -> list[Finding]:
    """Findings for the codes in noqa comments that look like ours but name no registered rule."""
    rules = (*codemods.ALL_RULES, UnknownNoqaCode)  # read at call time: tests extend the registry
    known = {rule.code for rule in rules}
    ours = {rule.code.rstrip("0123456789") for rule in rules}
    if not _may_name_our_codes(text, ours):
        return []
    findings = []
    for comment in noqa_comments(text).values():
        for written in comment.written:
            if written.code in known or written.code.rstrip("0123456789") not in ours:
                continue
            guess = suggestion(written.code, known)
            hint = f" (did you mean {guess}?)" if guess else ""
            findings.append(
                Finding(
                    code=UnknownNoqaCode.code,
                    name=UnknownNoqaCode.name,
                    line=written.line,
                    column=written.column,
                    end_line=written.line,
                    end_column=written.column + len(written.code),
                    message=f"unknown rule code {written.code} in noqa comment{hint}",
                    severity=UnknownNoqaCode.severity,
                    fixable=False,
                )
            )
    return findings


__all__ = ["NoqaComment", "UnknownNoqaCode", "noqa_comments", "suppress", "unknown_codes"]
