"""The linter's output formats: text, JSON, GitHub workflow commands and SARIF 2.1.0, plus statistics.

Positions: lines and columns are 1-based everywhere. In JSON, GitHub annotations and SARIF the end of a
finding (``end_line``, ``end_column``) is exclusive: the position just after its last character, as in
SARIF's regions. Every format lists findings in the same order: by file, line, column, then code.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Sequence
from urllib.parse import quote

from ddp_migrate import __version__
from ddp_migrate.codemods.base import Finding, Rule, Severity

from . import docs, report
from .engine import FileResult

FORMATS = ("text", "json", "github", "sarif")
STATISTICS_FORMATS = ("text", "json")

SARIF_SCHEMA = "https://raw.githubusercontent.com/oasis-tcs/sarif-spec/master/Schemata/sarif-schema-2.1.0.json"
SARIF_LEVELS = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "note"}
GITHUB_LEVELS = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "notice"}


@dataclass(frozen=True)
class Located:
    """A finding and the file it is in; ``cell`` is the notebook code cell its lines count from (1-based)."""

    path: str
    finding: Finding
    cell: int | None = None

    def sort_key(self) -> tuple[str, int, int, int, str, int, int, str]:
        """By file, cell, line, column, code (then end and message, so equal positions sort the same way)."""
        f = self.finding
        return (self.path, self.cell or 0, f.line, f.column, f.code, f.end_line, f.end_column, f.message)


def ordered(located: Sequence[Located]) -> list[Located]:
    """The findings in reporting order."""
    return sorted(located, key=Located.sort_key)


def locate(results: Sequence[FileResult]) -> list[Located]:
    """Every finding of the results that have no error, in reporting order; a notebook's per cell."""
    located = []
    for result in results:
        if result.error:
            continue
        extracted = getattr(result, "extracted", None)
        for finding in result.findings:
            if extracted is None:
                located.append(Located(result.path, finding))
                continue
            cell, line = extracted.position(finding.line)
            end_cell, end_line = extracted.position(finding.end_line)
            if end_cell != cell:  # cannot happen for code within a cell; keep the end on the start line
                end_line = line
            located.append(Located(result.path, replace(finding, line=line, end_line=end_line), cell))
    return ordered(located)


# ------------------------------------------------------------------------------------------------ text


def text(located: Sequence[Located], color: bool = False) -> str:
    """``path:line:col: CODE message``, one line per finding (``path:cell N:line:col:`` in a notebook).

    With ``color``, as ruff colours it: the path bold, the separators cyan, the code bold red.
    """
    return "".join(report.finding_line(item.path, item.finding, item.cell, color) + "\n" for item in located)


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
        **({"cell": item.cell} if item.cell is not None else {}),
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
        message = f"cell {item.cell}: {f.message}" if item.cell is not None else f.message
        lines.append(f"::{GITHUB_LEVELS[Severity(f.severity)]} {joined}::{_escape_data(message)}\n")
    return "".join(lines)


# ------------------------------------------------------------------------------------------------ SARIF


def repository_root(start: Path | None = None) -> Path:
    """The root of the git work tree holding ``start`` (the working folder), else ``start`` itself.

    SARIF paths are relative to it, as GitHub code scanning expects, wherever in the tree lint runs.
    """
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if (folder / ".git").exists():
            return folder
    return here


def docs_url() -> str:
    """Where the rules are documented: the distribution's ``Documentation`` or ``Homepage`` project URL,
    else its page on the package index (the README, with the rule table, is shown there)."""
    try:
        from importlib.metadata import PackageNotFoundError, metadata

        urls = metadata("ddp-migrate").get_all("Project-URL") or []
    except (ImportError, PackageNotFoundError):  # pragma: no cover - not installed
        urls = []
    found = dict(entry.split(", ", 1) for entry in urls if ", " in entry)
    for key in ("Documentation", "Homepage", "Repository", "Source"):
        if key in found:
            return found[key]
    return "https://pypi.org/project/ddp-migrate/"


def _artifact_location(path: str, base: Path) -> dict[str, str]:
    """A relative URI under ``%SRCROOT%`` (the repository root) when the file is below it, else a file URI."""
    if path == "-":
        return {"uri": "stdin"}
    absolute = Path(os.path.abspath(path))
    try:
        relative = absolute.relative_to(base)
    except ValueError:
        return {"uri": absolute.as_uri()}
    return {"uri": quote(relative.as_posix(), safe="/"), "uriBaseId": "%SRCROOT%"}


def _rule_help(rule: type[Rule], markdown: bool = False) -> str:
    help_text = docs.markdown(rule.documentation()) if markdown else docs.plain(rule.documentation(), width=10_000)
    if not rule.can_fix() and rule.manual_fix:
        help_text += f"\n\nWhat to do: {rule.manual_fix}."
    return help_text


def sarif_rule(rule: type[Rule], url: str | None = None) -> dict[str, Any]:
    """A ``reportingDescriptor`` for one rule, its documentation taken from the rule's docstring.

    The texts are plain (no reStructuredText markup); ``help.markdown`` is what GitHub shows.
    """
    return {
        "id": rule.code,
        "name": rule.name,
        "shortDescription": {"text": docs.inline(rule.summary())},
        "fullDescription": {"text": docs.plain(rule.documentation(), width=10_000)},
        "helpUri": f"{url or docs_url()}#rules",
        "help": {"text": _rule_help(rule), "markdown": _rule_help(rule, markdown=True)},
        "defaultConfiguration": {"level": SARIF_LEVELS[Severity(rule.severity)]},
        "properties": {"tags": ["ddp", "pytorch"], "fixable": rule.can_fix()},
    }


def sarif(located: Sequence[Located], rules: Sequence[type[Rule]], errors: Sequence[str], base: Path | None = None) -> str:
    """A SARIF 2.1.0 log (one run) that GitHub code scanning accepts.

    ``rules`` is the whole registry, so a rule's ``ruleIndex`` does not depend on what was selected;
    ``errors`` (files that could not be processed) become tool execution notifications.
    """
    base = (base or repository_root()).resolve()
    url = docs_url()
    index = {rule.code: position for position, rule in enumerate(rules)}
    results = []
    for item in located:
        f = item.finding
        result: dict[str, Any] = {"ruleId": f.code}
        if f.code in index:
            result["ruleIndex"] = index[f.code]
        result["level"] = SARIF_LEVELS[Severity(f.severity)]
        result["message"] = {"text": f"cell {item.cell}: {f.message}" if item.cell is not None else f.message}
        if item.cell is not None:
            result["properties"] = {"cell": item.cell}
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
                        "rules": [sarif_rule(rule, url) for rule in rules],
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
