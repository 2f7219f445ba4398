"""``ddp-migrate lint``: ordering, exit codes, noqa, output formats (validated against schemas), statistics,
``--fix``, configuration, and the zero-paths no-op that pre-commit relies on.

Everything goes through the real ``ddp_migrate.cli.cli`` (click's ``CliRunner``) or a real subprocess.
The ``TST9xx`` rules below exist to give findings a chosen severity or an awkward message; they live at
module level so forked worker processes (``-j 2``) can unpickle them.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any, Iterable

import jsonschema
import pytest
from click.testing import CliRunner, Result

from ddp_migrate import __version__, codemods
from ddp_migrate.cli import cli
from ddp_migrate.codemods.analysis import ScriptAnalysis
from ddp_migrate.codemods.base import Match, Rule, Severity
from ddp_migrate.registry import all_rules

SCHEMAS = Path(__file__).resolve().parent / "schemas"
SARIF_SCHEMA = json.loads((SCHEMAS / "sarif-schema-2.1.0.json").read_text(encoding="utf-8"))
LINT_SCHEMA = json.loads((SCHEMAS / "lint-json.schema.json").read_text(encoding="utf-8"))

LOADER_SCRIPT = """\
import torch
import torch.nn as nn
from torch.utils.data import DataLoader

loader = DataLoader(data, batch_size=8)
model = nn.DataParallel(model)
for x in loader:
    model(x).sum().backward()
torch.save(model.state_dict(), "m.pt")
"""
#: (line, 1-based column, code) of every finding in LOADER_SCRIPT, in reporting order.
LOADER_FINDINGS = [(5, 10, "DDP005"), (6, 9, "DDP001"), (8, 5, "DDP003"), (9, 1, "DDP007"), (9, 12, "DDP008")]

DP_SCRIPT = """\
import torch
import torch.nn as nn
model = nn.DataParallel(model)
torch.save(model, "m.pt")
"""

FINDING_LINE = re.compile(r"^(\S+):(\d+):(\d+): (\w+) ", flags=re.M)


class Loud(Rule):
    """Test rule: an error-severity finding on every ``loud()`` call, with a message that needs escaping."""

    code = "TST961"
    name = "loud"
    severity = Severity.ERROR
    triggers = ("loud",)

    def matches(self, analysis: ScriptAnalysis) -> Iterable[Match]:
        for call in analysis.calls:
            if getattr(call.func, "value", None) == "loud":
                yield Match(call, "100% wrong,\r\nsee: docs", fixable=False)


class Quiet(Rule):
    """Test rule: an info-severity finding on every ``hint()`` call."""

    code = "TST962"
    name = "quiet-hint"
    severity = Severity.INFO
    triggers = ("hint",)
    manual_fix = "read the hint"

    def matches(self, analysis: ScriptAnalysis) -> Iterable[Match]:
        for call in analysis.calls:
            if getattr(call.func, "value", None) == "hint":
                yield Match(call, "just a hint", fixable=False)


def invoke(*args: str, input: bytes | str | None = None) -> Result:
    """Run the real command line in-process; an unexpected exception fails the test."""
    return CliRunner().invoke(cli, list(args), input=input, catch_exceptions=False)


def found(result: Result) -> list[tuple[str, int, int, str]]:
    """(path, line, column, code) of every text-format finding line, in printed order."""
    return [(p, int(line), int(col), code) for p, line, col, code in FINDING_LINE.findall(result.stdout)]


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
    return path


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)


@pytest.fixture(autouse=True)
def core_rules(monkeypatch: pytest.MonkeyPatch) -> None:
    """The rules the expectations below were written against, so that new rules do not change them."""
    monkeypatch.setattr(codemods, "ALL_RULES", tuple(rule for rule in codemods.ALL_RULES if rule.code <= "DDP011"))


@pytest.fixture
def test_rules(core_rules: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(codemods, "ALL_RULES", (*codemods.ALL_RULES, Loud, Quiet))


# ---------------------------------------------------------------------------------- text and order


def test_text_format_lines_and_summary(tmp_path: Path) -> None:
    write(tmp_path / "train.py", LOADER_SCRIPT)
    result = invoke("lint", "train.py")
    assert result.exit_code == 1
    assert found(result) == [("train.py", line, col, code) for line, col, code in LOADER_FINDINGS]
    assert result.stdout.splitlines()[1] == (
        "train.py:6:9: DDP001 nn.DataParallel: use DistributedDataParallel with one process per device (launched by torchrun)"
    )
    assert result.stderr.splitlines()[-1] == (
        "Found 5 problem(s) in 1 file(s) (1 file(s) checked, 1 fixable with: ddp-migrate lint --fix, "
        "4 more fixable with: ddp-migrate lint --fix --unsafe-fixes)."
    )


def test_findings_are_sorted_by_file_line_and_column_the_same_way_every_run(tmp_path: Path) -> None:
    for name in ("z.py", "a.py", "sub/m.py", "b.py"):
        write(tmp_path / name, LOADER_SCRIPT)
    write(tmp_path / "clean.py", "import torch\n")
    serial = invoke("lint", "-j", "1", "z.py", "sub", ".", "a.py")
    parallel = invoke("lint", "-j", "2", ".")
    assert serial.exit_code == parallel.exit_code == 1
    rows = found(serial)
    assert rows == sorted(rows, key=lambda r: (r[0], r[1], r[2], r[3]))
    assert [r[0] for r in rows[:: len(LOADER_FINDINGS)]] == ["a.py", "b.py", "sub/m.py", "z.py"]
    assert found(parallel) == rows
    assert invoke("lint", "-j", "2", ".").stdout == parallel.stdout
    assert "Found 20 problem(s) in 4 file(s) (5 file(s) checked, " in serial.stderr, "files with problems, then files checked"


def test_exit_codes(tmp_path: Path) -> None:
    write(tmp_path / "clean.py", "import torch\nx = torch.zeros(2)\n")
    write(tmp_path / "train.py", DP_SCRIPT)
    write(tmp_path / "bad.py", "import torch.nn as nn\ndef f(:\n    nn.DataParallel(m)\n")
    clean = invoke("lint", "clean.py")
    assert (clean.exit_code, clean.stdout) == (0, "")
    assert clean.stderr == "Found 0 problem(s) in 0 file(s) (1 file(s) checked).\n"
    assert invoke("lint", "train.py").exit_code == 1
    broken = invoke("lint", "train.py", "bad.py")
    assert broken.exit_code == 2
    assert "bad.py:2:7: cannot parse: invalid syntax" in broken.stderr
    assert {r[0] for r in found(broken)} == {"train.py"}, "the other files are still reported"
    assert invoke("lint", "missing.py").exit_code == 2
    assert invoke("lint", "--select", "NOPE", "train.py").exit_code == 2
    assert invoke("lint", "--format", "xml", "train.py").exit_code == 2


def test_quiet_prints_findings_but_no_summary(tmp_path: Path) -> None:
    write(tmp_path / "train.py", DP_SCRIPT)
    result = invoke("lint", "-q", "train.py")
    assert result.exit_code == 1
    assert [r[3] for r in found(result)] == ["DDP001", "DDP007"]
    assert result.stderr == ""


def test_exclude_and_select(tmp_path: Path) -> None:
    write(tmp_path / "src" / "train.py", DP_SCRIPT)
    write(tmp_path / "src" / "gen_model.py", DP_SCRIPT)
    result = invoke("lint", "--select", "DDP007", "--exclude", "gen_*", ".")
    assert found(result) == [("src/train.py", 4, 1, "DDP007")]


# ------------------------------------------------------------------------------------------- noqa


@pytest.mark.parametrize(
    "comment, left",
    [
        ("# noqa", []),
        ("# NOQA", []),
        ("#noqa", []),
        ("# noqa: DDP001", ["DDP007"]),
        ("# noqa:DDP001,DDP007", []),
        ("# noqa: DDP001, DDP007", []),
        ("# noqa: ddp001 ddp007", []),
        ("# NoQA: DDP007", ["DDP001"]),
        ("# type: ignore  # noqa: DDP001", ["DDP007"]),
        ("# noqa: E501", ["DDP007", "DDP001"]),
        ("# noqa: DDP001 because we still run it on one GPU", ["DDP007"]),
        ("# no qa", ["DDP007", "DDP001"]),
        ("# noqa-ish", ["DDP007", "DDP001"]),
    ],
)
def test_noqa_comment_on_the_reported_line(tmp_path: Path, comment: str, left: list[str]) -> None:
    write(tmp_path / "train.py", f"import torch\nimport torch.nn as nn\ntorch.save(nn.DataParallel(model), 'm.pt')  {comment}\n")
    result = invoke("lint", "train.py")
    assert [r[3] for r in found(result)] == left
    assert result.exit_code == (1 if left else 0)


def test_noqa_applies_to_its_own_line_only_and_never_inside_strings(tmp_path: Path) -> None:
    write(
        tmp_path / "train.py",
        '''\
        import torch
        import torch.nn as nn
        model = nn.DataParallel(model)  # noqa: DDP001
        other = nn.DataParallel(other)
        text = """
        torch.save(model, "m.pt")  # noqa
        """
        torch.save(model, "m.pt"); s = "# noqa"
        ''',
    )
    assert found(invoke("lint", "train.py")) == [("train.py", 4, 9, "DDP001"), ("train.py", 8, 1, "DDP007")]


def test_noqa_of_a_multi_line_statement_goes_on_its_first_line(tmp_path: Path) -> None:
    head = "import torch\nimport torch.nn as nn\nmodel = nn.DataParallel(model)\n"
    write(tmp_path / "first.py", head + 'torch.save(  # noqa: DDP007\n    model,\n    "m.pt",\n)\n')
    write(tmp_path / "last.py", head + 'torch.save(\n    model,\n    "m.pt",\n)  # noqa: DDP007\n')
    result = invoke("lint", "--select", "DDP007", "first.py", "last.py")
    assert found(result) == [("last.py", 4, 1, "DDP007")]


def test_unknown_noqa_code_is_reported_where_it_is_written(tmp_path: Path) -> None:
    write(
        tmp_path / "train.py",
        """\
        import torch
        import torch.nn as nn
        model = nn.DataParallel(model)  # noqa: DDP07, E501,DDP999
        x = 1  # noqa: DDP001
        """,
    )
    result = invoke("lint", "train.py")
    assert result.exit_code == 1
    lines = result.stdout.splitlines()
    assert lines[:2] == [
        "train.py:3:9: DDP001 nn.DataParallel: use DistributedDataParallel with one process per device (launched by torchrun)",
        "train.py:3:41: DDP100 unknown rule code DDP07 in noqa comment (did you mean DDP007?)",
    ]
    assert lines[2].startswith("train.py:3:53: DDP100 unknown rule code DDP999 in noqa comment")
    assert len(lines) == 3
    first = json.loads(invoke("lint", "--format", "json", "--select", "DDP100", "train.py").stdout)[0]
    assert (first["column"], first["end_column"], first["name"], first["fixable"]) == (41, 46, "unknown-noqa-code", False)
    assert found(invoke("lint", "--ignore", "DDP100", "train.py")) == [("train.py", 3, 9, "DDP001")]
    assert found(invoke("lint", "--select", "DDP0", "train.py")) == [("train.py", 3, 9, "DDP001")]


def test_unknown_noqa_code_can_itself_be_silenced_and_counts_without_torch(tmp_path: Path) -> None:
    write(tmp_path / "a.py", "x = 1  # noqa: DDP999, DDP100\ny = 2  # noqa: DDP999\n")
    result = invoke("lint", "a.py")
    assert found(result) == [("a.py", 2, 16, "DDP100")]


def test_unknown_noqa_code_never_fails_a_migration(tmp_path: Path) -> None:
    path = write(tmp_path / "train.py", "import torch\nx = torch.zeros(2)  # noqa: DDP999\n")
    result = invoke("train.py")
    assert result.exit_code == 0, result.output
    assert "DDP100" not in result.output
    assert path.read_text() == "import torch\nx = torch.zeros(2)  # noqa: DDP999\n"


def test_noqa_silences_review_items_of_a_migration(tmp_path: Path, test_rules: None) -> None:
    write(tmp_path / "a.py", "loud()\nloud()  # noqa: TST961\n")
    result = invoke("a.py")
    assert result.exit_code == 1
    # The review item gets its TODO line above it; the silenced one gets nothing.
    assert (tmp_path / "a.py").read_text().splitlines()[0] == "# TODO(ddp-migrate): 100% wrong, see: docs"
    assert "review a.py:2:1: TST961" in result.stderr and "a.py:3:1" not in result.stderr


def test_rules_and_explain_know_the_noqa_check() -> None:
    assert re.search(r"^DDP100  unknown-noqa-code\s+report ", invoke("rules").stdout, flags=re.M)
    explained = invoke("explain", "ddp100")
    assert explained.exit_code == 0
    assert explained.stdout.startswith("DDP100 unknown-noqa-code\n")
    assert "# noqa: DDP999" in explained.stdout and "Fix available: no:" in explained.stdout


# ------------------------------------------------------------------------------------------- JSON


def test_json_format_matches_its_schema(tmp_path: Path, test_rules: None) -> None:
    write(tmp_path / "train.py", LOADER_SCRIPT)
    write(tmp_path / "extra.py", "loud()\nhint()  # noqa: DDP1234\n")
    result = invoke("lint", "--format", "json", "train.py", "extra.py")
    assert result.exit_code == 1
    data = json.loads(result.stdout)
    jsonschema.validate(data, LINT_SCHEMA)
    assert [(d["path"], d["line"], d["column"], d["code"]) for d in data] == [
        ("extra.py", 1, 1, "TST961"),
        ("extra.py", 2, 1, "TST962"),
        ("extra.py", 2, 17, "DDP100"),
        *[("train.py", line, col, code) for line, col, code in LOADER_FINDINGS],
    ]
    assert data[3] == {
        "path": "train.py",
        "line": 5,
        "column": 10,
        "end_line": 5,
        "end_column": 40,
        "code": "DDP005",
        "name": "missing-distributed-sampler",
        "message": data[3]["message"],
        "severity": "warning",
        "fixable": True,
    }
    assert "DataLoader(data, batch_size=8)" == LOADER_SCRIPT.splitlines()[4][9:39]
    assert [d["severity"] for d in data[:2]] == ["error", "info"]
    assert all(d["end_line"] > d["line"] or d["end_column"] > d["column"] for d in data)
    assert "Found 8 problem(s) in 2 file(s)" in result.stderr


def test_json_of_a_clean_run_is_an_empty_list(tmp_path: Path) -> None:
    write(tmp_path / "clean.py", "import torch\n")
    result = invoke("lint", "--format", "json", "clean.py")
    assert result.exit_code == 0
    assert json.loads(result.stdout) == []
    jsonschema.validate([], LINT_SCHEMA)


def test_the_json_schema_rejects_malformed_findings() -> None:
    good = {
        "path": "a.py", "line": 1, "column": 1, "end_line": 1, "end_column": 2, "code": "DDP001",
        "name": "data-parallel", "message": "m", "severity": "warning", "fixable": True,
    }
    jsonschema.validate([good], LINT_SCHEMA)
    for bad in ({**good, "column": 0}, {**good, "severity": "fatal"}, {**good, "extra": 1}, {k: v for k, v in good.items() if k != "fixable"}):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate([bad], LINT_SCHEMA)


# ----------------------------------------------------------------------------------------- GitHub


def test_github_format_annotations(tmp_path: Path, test_rules: None) -> None:
    write(tmp_path / "a,b:c.py", "import torch\nimport torch.nn as nn\nm = nn.DataParallel(m)\nloud()\nhint()\n")
    result = invoke("lint", "--format", "github", "a,b:c.py")
    assert result.exit_code == 1
    assert result.stdout.splitlines() == [
        "::warning file=a%2Cb%3Ac.py,line=3,col=5,endLine=3,endColumn=23,title=DDP001::"
        "nn.DataParallel: use DistributedDataParallel with one process per device (launched by torchrun)",
        "::error file=a%2Cb%3Ac.py,line=4,col=1,endLine=4,endColumn=7,title=TST961::100%25 wrong,%0D%0Asee: docs",
        "::notice file=a%2Cb%3Ac.py,line=5,col=1,endLine=5,endColumn=7,title=TST962::just a hint",
    ]


# ------------------------------------------------------------------------------------------ SARIF


def sarif_of(*args: str) -> tuple[Result, dict[str, Any]]:
    result = invoke("lint", "--format", "sarif", *args)
    log = json.loads(result.stdout)
    jsonschema.validate(log, SARIF_SCHEMA)
    return result, log


def test_sarif_is_valid_and_complete(tmp_path: Path, test_rules: None) -> None:
    write(tmp_path / "src" / "my train.py", LOADER_SCRIPT)
    write(tmp_path / "extra.py", "loud()\nhint()\n")
    result, log = sarif_of("src", "extra.py")
    assert result.exit_code == 1
    assert log["version"] == "2.1.0" and log["$schema"].endswith("sarif-schema-2.1.0.json")
    [run] = log["runs"]
    driver = run["tool"]["driver"]
    assert (driver["name"], driver["version"]) == ("ddp-migrate", __version__)
    assert "informationUri" not in driver
    assert [r["id"] for r in driver["rules"]] == [rule.code for rule in all_rules()]
    by_id = {r["id"]: r for r in driver["rules"]}
    dp = codemods.rule_for_code("DDP001")
    assert dp is not None
    assert by_id["DDP001"]["name"] == "data-parallel"
    assert by_id["DDP001"]["shortDescription"]["text"] == dp.summary().replace("``", "`")
    for rule in driver["rules"]:
        texts = [rule["shortDescription"]["text"], rule["fullDescription"]["text"], *rule["help"].values()]
        assert not [text for text in texts if "``" in text], "plain text and Markdown, no reStructuredText"
        assert rule["helpUri"].startswith("https://")
    markdown = by_id["DDP001"]["help"]["markdown"]
    assert "`nn.DataParallel`" in markdown and "What the fix does" in markdown
    assert by_id["DDP001"]["help"]["text"].startswith(dp.summary().replace("``", "`"))
    assert by_id["TST962"]["help"]["text"].endswith("What to do: read the hint.")
    assert {r["id"]: r["defaultConfiguration"]["level"] for r in driver["rules"] if r["id"].startswith("TST")} == {
        "TST961": "error",
        "TST962": "note",
    }
    assert by_id["DDP001"]["defaultConfiguration"]["level"] == "warning"
    results = run["results"]
    assert [r["ruleId"] for r in results] == ["TST961", "TST962", *[code for _, _, code in LOADER_FINDINGS]]
    for item in results:
        assert driver["rules"][item["ruleIndex"]]["id"] == item["ruleId"]
    sampler = results[2]
    assert sampler["level"] == "warning" and sampler["message"]["text"]
    [location] = sampler["locations"]
    assert location["physicalLocation"]["artifactLocation"] == {"uri": "src/my%20train.py", "uriBaseId": "%SRCROOT%"}
    assert location["physicalLocation"]["region"] == {"startLine": 5, "startColumn": 10, "endLine": 5, "endColumn": 40}
    assert run["originalUriBaseIds"]["%SRCROOT%"]["uri"] == tmp_path.resolve().as_uri() + "/"
    assert run["invocations"] == [{"executionSuccessful": True, "toolExecutionNotifications": []}]


def test_sarif_outside_the_working_folder_and_with_errors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    outside = write(tmp_path / "outside" / "train.py", DP_SCRIPT)
    write(tmp_path / "work" / "bad.py", "import torch.nn as nn\ndef f(:\n    nn.DataParallel(m)\n")
    monkeypatch.chdir(tmp_path / "work")
    result, log = sarif_of(str(outside), "bad.py")
    assert result.exit_code == 2
    [run] = log["runs"]
    uris = {r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] for r in run["results"]}
    assert uris == {outside.resolve().as_uri()}
    [invocation] = run["invocations"]
    assert invocation["executionSuccessful"] is False
    assert [n["message"]["text"] for n in invocation["toolExecutionNotifications"]] == ["bad.py:2:7: cannot parse: invalid syntax"]


def test_sarif_of_a_clean_run(tmp_path: Path) -> None:
    write(tmp_path / "clean.py", "import torch\n")
    result, log = sarif_of("clean.py")
    assert result.exit_code == 0
    assert log["runs"][0]["results"] == []


def test_sarif_paths_are_relative_to_the_repository_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "repo" / ".git").mkdir(parents=True)
    write(tmp_path / "repo" / "src" / "pkg" / "train.py", DP_SCRIPT)
    monkeypatch.chdir(tmp_path / "repo" / "src")
    result, log = sarif_of("pkg")
    assert result.exit_code == 1
    [run] = log["runs"]
    assert run["originalUriBaseIds"] == {"%SRCROOT%": {"uri": (tmp_path / "repo").resolve().as_uri() + "/"}}
    locations = {r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] for r in run["results"]}
    assert locations == {"src/pkg/train.py"}, "GitHub code scanning wants paths from the repository root"
    bases = {r["locations"][0]["physicalLocation"]["artifactLocation"]["uriBaseId"] for r in run["results"]}
    assert bases == {"%SRCROOT%"}


@pytest.mark.parametrize("args", [[], ["empty"]])
def test_sarif_of_an_empty_run_is_a_valid_log(tmp_path: Path, args: list[str]) -> None:
    (tmp_path / "empty").mkdir()
    result, log = sarif_of(*args)
    assert result.exit_code == 0
    assert log["runs"][0]["results"] == []
    assert [rule["id"] for rule in log["runs"][0]["tool"]["driver"]["rules"]] == [rule.code for rule in all_rules()]
    as_json = invoke("lint", "--format", "json", *args)
    assert (as_json.exit_code, json.loads(as_json.stdout)) == (0, [])


def test_sarif_with_exit_zero_for_an_upload_step(tmp_path: Path) -> None:
    write(tmp_path / "train.py", DP_SCRIPT)
    result = invoke("lint", "--format", "sarif", "--exit-zero", "--output-file", "ddp.sarif", "train.py")
    assert result.exit_code == 0 and result.stdout == ""
    log = json.loads((tmp_path / "ddp.sarif").read_text())
    jsonschema.validate(log, SARIF_SCHEMA)
    assert {r["ruleId"] for r in log["runs"][0]["results"]} == {"DDP001", "DDP007"}


# ------------------------------------------------------------------------------------- statistics


def test_statistics_count_per_code_most_frequent_first(tmp_path: Path) -> None:
    write(tmp_path / "one.py", LOADER_SCRIPT)
    write(tmp_path / "two.py", DP_SCRIPT)
    write(tmp_path / "three.py", DP_SCRIPT + "torch.save(model, 'b')  # noqa: DDP999\n")
    result = invoke("lint", "--statistics", ".")
    assert result.exit_code == 1
    assert result.stdout.splitlines() == [
        "4  DDP007  [*] unguarded-save",
        "3  DDP001  [*] data-parallel",
        "1  DDP003  [*] missing-process-group",
        "1  DDP005  [*] missing-distributed-sampler",
        "1  DDP008  [*] wrapped-module-access",
        "1  DDP100      unknown-noqa-code",
    ]
    assert "Found 11 problem(s) in 3 file(s)" in result.stderr
    as_json = invoke("lint", "--statistics", "--format", "json", ".")
    assert as_json.exit_code == 1
    stats = json.loads(as_json.stdout)
    assert stats[0] == {"code": "DDP007", "name": "unguarded-save", "count": 4, "fixable": 4}
    assert [s["code"] for s in stats] == ["DDP007", "DDP001", "DDP003", "DDP005", "DDP008", "DDP100"]


def test_statistics_of_a_clean_run_and_in_formats_that_cannot_hold_them(tmp_path: Path) -> None:
    write(tmp_path / "clean.py", "import torch\n")
    clean = invoke("lint", "--statistics", "clean.py")
    assert (clean.exit_code, clean.stdout) == (0, "")
    refused = invoke("lint", "--statistics", "--format", "sarif", "clean.py")
    assert refused.exit_code == 2
    assert refused.stderr == "ddp-migrate: error: --statistics works with --format text or json, not sarif\n"


# ------------------------------------------------------------------------------------------ --fix


def test_fix_applies_the_safe_fixes_then_reports_what_is_left(tmp_path: Path) -> None:
    # Two passes, one after the other, and no epoch loop: set_epoch is left to a human.
    two_passes = "for x in loader:\n    model(x).sum().backward()\n"
    shuffled = LOADER_SCRIPT.replace("batch_size=8)", "batch_size=8, shuffle=True)").replace(two_passes, two_passes * 2)
    path = write(tmp_path / "train.py", shuffled)
    reference = write(tmp_path / "ref" / "train.py", shuffled)
    result = invoke("lint", "--fix", "--unsafe-fixes", "train.py")
    assert invoke("ref/train.py").exit_code in (0, 1)
    assert path.read_text() == reference.read_text() != shuffled, "--fix writes what a migration writes"
    assert [r[3] for r in found(result)] == ["DDP006"]
    assert result.exit_code == 1
    assert "Found 1 problem(s) in 1 file(s) (1 file(s) checked, 5 fixed)." in result.stderr
    again = invoke("lint", "--fix", "--unsafe-fixes", "train.py")
    assert found(again) == found(result)
    assert ", 0 fixed)" in again.stderr


def test_fix_that_fixes_everything_exits_0(tmp_path: Path) -> None:
    path = write(tmp_path / "train.py", DP_SCRIPT)
    result = invoke("lint", "--fix", "--unsafe-fixes", "--select", "DDP001,DDP007", "train.py")
    assert result.exit_code == 0, result.output
    assert result.stdout == ""
    assert "runtime.save(model" in path.read_text()
    assert invoke("lint", "--select", "DDP001,DDP007", "train.py").exit_code == 0


def test_lint_without_fix_writes_nothing(tmp_path: Path) -> None:
    path = write(tmp_path / "train.py", LOADER_SCRIPT)
    invoke("lint", "--format", "sarif", "train.py")
    assert path.read_text() == LOADER_SCRIPT


# ---------------------------------------------------------------------------------- configuration


def test_config_and_per_file_ignores_apply_to_lint(tmp_path: Path) -> None:
    write(
        tmp_path / "pyproject.toml",
        """\
        [tool.ddp-migrate]
        ignore = ["DDP008"]
        exclude = ["legacy"]

        [tool.ddp-migrate.per-file-ignores]
        "scripts/*" = ["DDP001", "DDP100"]
        "eval_*.py" = ["DDP00"]
        """,
    )
    write(tmp_path / "scripts" / "a.py", DP_SCRIPT.replace('"m.pt")', '"m.pt")  # noqa: DDP070'))
    write(tmp_path / "b.py", DP_SCRIPT.replace('"m.pt")', '"m.pt")  # noqa: DDP070'))
    write(tmp_path / "eval_model.py", DP_SCRIPT)
    write(tmp_path / "legacy" / "old.py", DP_SCRIPT)
    result = invoke("lint", ".")
    assert found(result) == [
        ("b.py", 3, 9, "DDP001"),
        ("b.py", 4, 1, "DDP007"),
        ("b.py", 4, 36, "DDP100"),
        ("scripts/a.py", 4, 1, "DDP007"),
    ]
    assert "Found 4 problem(s) in 2 file(s) (3 file(s) checked" in result.stderr
    fixed = invoke("lint", "--fix", "--unsafe-fixes", "scripts/a.py")
    assert "nn.DataParallel(model)" in (tmp_path / "scripts" / "a.py").read_text(), "per-file-ignores hold for --fix"
    assert found(fixed) == []


# --------------------------------------------------------------------------------- no paths at all


@pytest.mark.parametrize("args", [["lint"], ["lint", "--statistics"], ["migrate"], ["migrate", "--check"], ["--diff"], ["-q"]])
def test_no_paths_is_a_silent_no_op(tmp_path: Path, args: list[str]) -> None:
    write(tmp_path / "train.py", DP_SCRIPT)
    result = invoke(*args)
    assert (result.exit_code, result.stdout, result.stderr) == (0, "", "")
    assert (tmp_path / "train.py").read_text() == DP_SCRIPT


def test_no_paths_still_checks_codes() -> None:
    assert invoke("lint", "--select", "NOPE").exit_code == 2


def test_no_paths_in_a_real_process(tmp_path: Path) -> None:
    for command in (["lint"], ["migrate"]):
        done = subprocess.run([sys.executable, "-m", "ddp_migrate", *command], capture_output=True, timeout=60, cwd=tmp_path)
        assert (done.returncode, done.stdout, done.stderr) == (0, b"", b"")


def test_a_file_libcst_once_could_not_check_is_linted_the_same_in_any_order(tmp_path: Path) -> None:
    """``return(lambda x: m(x))`` (a parenthesised lambda right after a keyword) once made libcst raise on
    whichever node was rebuilt first: the lint's result depended on which file a fresh process read first.
    Each order, in a fresh process, now gives the same findings, and migration rewrites the file."""
    lambda_file = write(
        tmp_path / "b_train.py",
        "import torch.nn as nn\n\n\ndef make(m):\n    return(lambda x: m(x))\n\n\nmodel = nn.DataParallel(nn.Linear(4, 4)).cuda()\n",
    )
    write(tmp_path / "a_other.py", "import torch.nn as nn\n\nmodel = nn.DataParallel(nn.Linear(4, 4)).cuda()\n")

    def lint(*paths: str) -> list[str]:
        done = subprocess.run(
            [sys.executable, "-m", "ddp_migrate", "lint", "-j", "1", *paths],
            capture_output=True, text=True, timeout=60, cwd=tmp_path,
        )
        assert done.returncode == 1, done.stdout + done.stderr
        return [line for line in done.stdout.splitlines() if line.startswith("b_train.py")]

    alone, after = lint("b_train.py"), lint("a_other.py", "b_train.py")
    assert alone == after
    assert [line.split()[1] for line in alone] == ["DDP001", "DDP002", "DDP004"]
    done = subprocess.run([sys.executable, "-m", "ddp_migrate", "b_train.py"], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    migrated = lambda_file.read_text()
    assert "    return(lambda x: m(x))\n" in migrated and "DistributedDataParallel(" in migrated
