"""The linter's output formats: text, JSON, GitHub workflow commands and SARIF 2.1.0, plus statistics.

Positions: lines and columns are 1-based everywhere. In JSON, GitHub annotations and SARIF the end of a
finding (``end_line``, ``end_column``) is exclusive: the position just after its last character, as in
SARIF's regions. Every format lists findings in the same order: by file, line, column, then code.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Sequence
from urllib.parse import quote

from ddp_migrate import __version__
from ddp_migrate.codemods.base import Finding, Rule, Severity

from . import report

FORMATS = ("text", "json", "github", "sarif")
STATISTICS_FORMATS = ("text", "json")

SARIF_SCHEMA = "https://raw.githubusercontent.com/oasis-tcs/sarif-spec/master/Schemata/sarif-schema-2.1.0.json"
SARIF_LEVELS = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "note"}
GITHUB_LEVELS = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "notice"}


@dataclass(frozen=True)
class Located:
    """A finding and the file it is in."""

    path: str
    finding: Finding

    def sort_key(self) -> tuple[str, int, int, str, int, int, str]:
        """By file, line, column, code (then end and message, so equal positions still sort the same way)."""
        f = self.finding
        return (self.path, f.line, f.column, f.code, f.end_line, f.end_column, f.message)


def ordered(located: Sequence[Located]) -> list[Located]:
    """The findings in reporting order."""
    return sorted(located, key=Located.sort_key)


# ------------------------------------------------------------------------------------------------ text


def text(located: Sequence[Located]) -> str:
    """``path:line:col: CODE message``, one line per finding."""
    return "".join(report.finding_line(item.path, item.finding) + "\n" for item in located)


# ------------------------------------------------------------------------------------------------ JSON


def as_dict(item: Located) -> dict[str, Any]:
    """One finding as the JSON format writes it (see ``tests/schemas/lint-json.schema.json``)."""
    f = item.finding
    return {
        "path": item.path,
        "line": f.line,
        "column": f.column + 1,
        "end_line": f.end_line,
        "end_column": f.end_column + 1,
        "code": f.code,
        "name": f.name,
        "message": f.message,
        "severity": Severity(f.severity).value,
        "fixable": f.fixable,
    }


def json_list(located: Sequence[Located]) -> str:
    """A JSON list of findings."""
    return json.dumps([as_dict(item) for item in located], indent=2, ensure_ascii=False) + "\n"


# ----------------------------------------------------------------------------------------------- GitHub


def _escape_data(value: str) -> str:
    """Escape a workflow command's message (``%``, ``\\r``, ``\\n``), as GitHub's toolkit does."""
    return value.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_property(value: str) -> str:
    """Escape a workflow command's property value: the message escapes plus ``:`` and ``,``."""
    return _escape_data(value).replace(":", "%3A").replace(",", "%2C")


def github(located: Sequence[Located]) -> str:
    """One ``::error``/``::warning``/``::notice`` workflow command per finding (pull-request annotations)."""
    lines = []
    for item in located:
        f = item.finding
        properties = {
            "file": item.path,
            "line": f.line,
            "col": f.column + 1,
            "endLine": f.end_line,
            "endColumn": f.end_column + 1,
            "title": f.code,
        }
        joined = ",".join(f"{key}={_escape_property(str(value))}" for key, value in properties.items())
        lines.append(f"::{GITHUB_LEVELS[Severity(f.severity)]} {joined}::{_escape_data(f.message)}\n")
    return "".join(lines)


# ------------------------------------------------------------------------------------------------ SARIF


def _artifact_location(path: str, base: Path) -> dict[str, str]:
    """A relative URI under ``%SRCROOT%`` (the working folder) when the file is below it, else a file URI."""
    if path == "-":
        return {"uri": "stdin"}
    absolute = Path(os.path.abspath(path))
    try:
        relative = absolute.relative_to(base)
    except ValueError:
        return {"uri": absolute.as_uri()}
    return {"uri": quote(relative.as_posix(), safe="/"), "uriBaseId": "%SRCROOT%"}


def _rule_help(rule: type[Rule]) -> str:
    help_text = rule.documentation()
    if not rule.can_fix() and rule.manual_fix:
        help_text += f"\n\nWhat to do: {rule.manual_fix}."
    return help_text


def sarif_rule(rule: type[Rule]) -> dict[str, Any]:
    """A ``reportingDescriptor`` for one rule, its documentation taken from the rule's docstring."""
    return {
        "id": rule.code,
        "name": rule.name,
        "shortDescription": {"text": rule.summary()},
        "fullDescription": {"text": rule.documentation()},
        "help": {"text": _rule_help(rule)},
        "defaultConfiguration": {"level": SARIF_LEVELS[Severity(rule.severity)]},
        "properties": {"tags": ["ddp", "pytorch"], "fixable": rule.can_fix()},
    }


def sarif(located: Sequence[Located], rules: Sequence[type[Rule]], errors: Sequence[str], base: Path | None = None) -> str:
    """A SARIF 2.1.0 log (one run) that GitHub code scanning accepts.

    ``rules`` is the whole registry, so a rule's ``ruleIndex`` does not depend on what was selected;
    ``errors`` (files that could not be processed) become tool execution notifications.
    """
    base = (base or Path.cwd()).resolve()
    index = {rule.code: position for position, rule in enumerate(rules)}
    results = []
    for item in located:
        f = item.finding
        result: dict[str, Any] = {"ruleId": f.code}
        if f.code in index:
            result["ruleIndex"] = index[f.code]
        result["level"] = SARIF_LEVELS[Severity(f.severity)]
        result["message"] = {"text": f.message}
        result["locations"] = [
            {
                "physicalLocation": {
                    "artifactLocation": _artifact_location(item.path, base),
                    "region": {
                        "startLine": f.line,
                        "startColumn": f.column + 1,
                        "endLine": f.end_line,
                        "endColumn": f.end_column + 1,
                    },
                }
            }
        ]
        results.append(result)
    log = {
        "$schema": SARIF_SCHEMA,
        "version": "2.1.0",
        "runs": [
            {
                "tool": {
                    "driver": {
                        "name": "ddp-migrate",
                        "version": __version__,
                        "semanticVersion": __version__,
                        "rules": [sarif_rule(rule) for rule in rules],
                    }
                },
                "originalUriBaseIds": {"%SRCROOT%": {"uri": base.as_uri().rstrip("/") + "/"}},
                "columnKind": "unicodeCodePoints",
                "invocations": [
                    {
                        "executionSuccessful": not errors,
                        "toolExecutionNotifications": [{"level": "error", "message": {"text": error}} for error in errors],
                    }
                ],
                "results": results,
            }
        ],
    }
    return json.dumps(log, indent=2, ensure_ascii=False) + "\n"


# ------------------------------------------------------------------------------------------- statistics


@dataclass(frozen=True)
class Statistic:
    """How often one code was reported."""

    code: str
    name: str
    count: int
    fixable: int


def statistics(located: Sequence[Located]) -> list[Statistic]:
    """One entry per reported code, the most frequent first, then by code."""
    counts = Counter(item.finding.code for item in located)
    fixable = Counter(item.finding.code for item in located if item.finding.fixable)
    names = {item.finding.code: item.finding.name for item in located}
    return [
        Statistic(code, names[code], count, fixable[code])
        for code, count in sorted(counts.items(), key=lambda pair: (-pair[1], pair[0]))
    ]


def statistics_text(stats: Sequence[Statistic]) -> str:
    """``count  CODE  name`` per line, counts right-aligned; ``[*]`` marks codes whose findings all fix."""
    if not stats:
        return ""
    width = max(len(str(s.count)) for s in stats)
    code_width = max(len(s.code) for s in stats)
    lines = []
    for s in stats:
        mark = "[*] " if s.fixable == s.count else "    "
        lines.append(f"{s.count:>{width}}  {s.code:<{code_width}}  {mark}{s.name}\n")
    return "".join(lines)


def statistics_json(stats: Sequence[Statistic]) -> str:
    """A JSON list of ``{code, name, count, fixable}``."""
    return json.dumps([asdict(s) for s in stats], indent=2) + "\n"
