"""The command line: exit codes, stdin/stdout, diffs, rule selection, configuration, discovery, subcommands.

Everything goes through the real ``ddp_migrate.cli.cli`` (click's ``CliRunner``) or a real subprocess.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Iterable

import pytest
from click.testing import CliRunner, Result

from ddp_migrate import __version__, codemods
from ddp_migrate.cli import cli
from ddp_migrate.codemods.analysis import ScriptAnalysis
from ddp_migrate.codemods.base import Match, Rule

DP_SCRIPT = """\
import torch
import torch.nn as nn
model = nn.DataParallel(model)
torch.save(model, "m.pt")
"""

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

ANSI = re.compile(r"\x1b\[")


def invoke(*args: str, input: bytes | str | None = None) -> Result:
    """Run the real command line in-process; an unexpected exception fails the test."""
    return CliRunner().invoke(cli, list(args), input=input, catch_exceptions=False)


def codes(result: Result) -> set[str]:
    """The rule codes on ``lint``'s finding lines."""
    return set(re.findall(r"^\S+:\d+:\d+: (\w+) ", result.stdout, flags=re.M))


def error_lines(result: Result) -> list[str]:
    return [line for line in result.stderr.splitlines() if re.match(r"^\S+:\d+:\d+: ", line)]


class NeedsReview(Rule):
    """Test rule: reports every ``review_me()`` call and cannot fix it."""

    code = "TST951"
    name = "needs-review"
    triggers = ("review_me",)
    manual_fix = "look at it"

    def matches(self, analysis: ScriptAnalysis) -> Iterable[Match]:
        for call in analysis.calls:
            if getattr(call.func, "value", None) == "review_me":
                yield Match(call, "review_me() needs a human", fixable=False)


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
    return path


# -------------------------------------------------------------------------------------- exit codes


def test_exit_0_when_nothing_to_do(tmp_path: Path) -> None:
    write(tmp_path / "clean.py", "import torch\nx = torch.zeros(2)\n")
    result = invoke("clean.py")
    assert result.exit_code == 0, result.output
    assert "0 file(s) migrated, 1 unchanged, 0 item(s) need a human, 0 error(s)." in result.stderr


def test_exit_0_after_everything_was_fixed(tmp_path: Path) -> None:
    path = write(tmp_path / "train.py", DP_SCRIPT)
    result = invoke("--select", "DDP001", "train.py")
    assert result.exit_code == 0, result.output
    assert "train.py: migrated, 1 change(s)" in result.stderr
    assert "DistributedDataParallel(model" in path.read_text()


def test_check_exits_1_and_writes_nothing(tmp_path: Path) -> None:
    path = write(tmp_path / "train.py", DP_SCRIPT)
    result = invoke("--check", "train.py")
    assert result.exit_code == 1
    assert path.read_text() == DP_SCRIPT
    assert result.stdout == ""
    assert "train.py: would be migrated" in result.stderr
    assert "1 file(s) would be migrated" in result.stderr


def test_review_items_exit_1(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(codemods, "ALL_RULES", (*codemods.ALL_RULES, NeedsReview))
    write(tmp_path / "a.py", "review_me()\n")
    result = invoke("a.py")
    assert result.exit_code == 1
    # The item is marked in the code too, and the report points at the statement below the TODO.
    assert (tmp_path / "a.py").read_text() == "# TODO(ddp-migrate): review_me() needs a human\nreview_me()\n"
    assert "review a.py:2:1: TST951 review_me() needs a human" in result.stderr
    assert "1 item(s) need a human" in result.stderr
    lint = invoke("lint", "a.py")
    assert lint.exit_code == 1
    assert lint.stdout == "a.py:2:1: TST951 review_me() needs a human\n"


@pytest.mark.parametrize(
    "args, message",
    [
        (["--select", "NOPE"], "ddp-migrate: error: unknown rule code or prefix: NOPE"),
        (["--ignore", "DDP001,XYZ"], "ddp-migrate: error: unknown rule code or prefix: XYZ"),
        (["--batch-size", "huge"], "Invalid value for '--batch-size'"),
        (["-j", "-1"], "Invalid value for '-j'"),
        (["--no-such-flag"], "No such option"),
    ],
)
def test_bad_options_exit_2(tmp_path: Path, args: list[str], message: str) -> None:
    path = write(tmp_path / "train.py", DP_SCRIPT)
    result = invoke(*args, "train.py")
    assert result.exit_code == 2
    assert message in result.stderr
    assert path.read_text() == DP_SCRIPT


def test_errors_win_over_findings(tmp_path: Path) -> None:
    write(tmp_path / "train.py", DP_SCRIPT)
    write(tmp_path / "bad.py", "import torch.nn as nn\nnn.DataParallel(\n")
    assert invoke("--check", "train.py", "bad.py").exit_code == 2
    assert invoke("lint", "train.py", "bad.py").exit_code == 2


# ---------------------------------------------------------------------------------- stdin, stdout, diff


def test_stdin_to_stdout_is_exactly_the_migrated_code(tmp_path: Path) -> None:
    path = write(tmp_path / "train.py", DP_SCRIPT)
    result = invoke("--select", "DDP001,DDP007", "-", input=DP_SCRIPT.encode())
    assert result.exit_code == 0, result.output
    assert invoke("--select", "DDP001,DDP007", "train.py").exit_code == 0
    assert result.stdout_bytes == path.read_bytes()
    assert "-: migrated, 2 change(s)" in result.stderr
    assert "launch it with" not in result.stderr


def test_stdin_without_anything_to_change_is_echoed(tmp_path: Path) -> None:
    source = "print('hi')\r\nx = 1\r\n"
    result = invoke("-", input=source.encode())
    assert result.exit_code == 0
    assert result.stdout_bytes == source.encode()


def test_stdin_with_a_syntax_error_writes_nothing_and_exits_2() -> None:
    result = invoke("-", input=b"import torch.nn as nn\ndef f(:\n    nn.DataParallel(m)\n")
    assert result.exit_code == 2
    assert result.stdout == ""
    assert error_lines(result) == ["-:2:7: cannot parse: invalid syntax"]


def test_diff_prints_a_unified_diff_and_writes_nothing(tmp_path: Path) -> None:
    path = write(tmp_path / "train.py", DP_SCRIPT)
    result = invoke("--diff", "--select", "DDP001", "train.py")
    assert result.exit_code == 1
    assert path.read_text() == DP_SCRIPT
    lines = result.stdout.splitlines()
    assert lines[:2] == ["--- a/train.py", "+++ b/train.py"]
    assert lines[2].startswith("@@ ")
    assert "-model = nn.DataParallel(model)" in lines
    assert "+model = DistributedDataParallel(model, device_ids=runtime.device_ids())" in lines
    assert not ANSI.search(result.output)
    assert "train.py: would be migrated" in result.stderr


def test_diff_of_stdin(tmp_path: Path) -> None:
    result = invoke("--diff", "--select", "DDP001", "-", input=DP_SCRIPT)
    assert result.exit_code == 1
    assert result.stdout.startswith("--- a/-\n+++ b/-\n@@ ")


def test_real_process_keeps_code_on_stdout_and_report_on_stderr(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "ddp_migrate", "--select", "DDP001", "-"],
        input=DP_SCRIPT.encode(),
        capture_output=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout.decode()
    assert out.startswith("import torch\nimport torch.nn as nn\n")
    assert "DistributedDataParallel(model, device_ids=runtime.device_ids())" in out
    assert "migrated" not in out and not ANSI.search(out)
    assert b"1 file(s) migrated" in done.stderr and b"\x1b[" not in done.stderr
    compile(out, "stdout", "exec")


#: One safe fix (DDP004, ``.cuda()``) and one unsafe one (DDP001, ``nn.DataParallel``).
SAFE_AND_UNSAFE = """\
import torch
import torch.nn as nn
model = nn.Linear(2, 2).cuda()
model = nn.DataParallel(model)
"""


def test_lint_fix_on_stdin_writes_the_safely_fixed_code_to_stdout_and_the_report_to_stderr(tmp_path: Path) -> None:
    path = write(tmp_path / "train.py", SAFE_AND_UNSAFE)
    result = invoke("lint", "--fix", "--select", "DDP001,DDP004", "-", input=SAFE_AND_UNSAFE.encode())
    assert result.exit_code == 1, result.output  # DDP001 is left: its fix is unsafe
    compile(result.stdout, "stdout", "exec")
    assert ".to(runtime.device())" in result.stdout and "nn.DataParallel(model)" in result.stdout
    assert invoke("lint", "--fix", "--select", "DDP001,DDP004", "train.py").exit_code == 1
    assert result.stdout_bytes == path.read_bytes(), "stdin gets exactly what lint --fix writes to a file"
    assert "-:" not in result.stdout and "Found" not in result.stdout
    assert re.findall(r"^-:\d+:\d+: (\w+) ", result.stderr, flags=re.M) == ["DDP001"]
    assert "(1 file(s) checked, 1 fixed, 1 more fixable with: ddp-migrate lint --fix --unsafe-fixes)." in result.stderr


def test_lint_fix_unsafe_fixes_on_stdin_applies_both(tmp_path: Path) -> None:
    result = invoke("lint", "--fix", "--unsafe-fixes", "--select", "DDP001,DDP004", "-", input=SAFE_AND_UNSAFE)
    assert result.exit_code == 0, result.output
    compile(result.stdout, "stdout", "exec")
    assert ".to(runtime.device())" in result.stdout
    assert "DistributedDataParallel(model, device_ids=runtime.device_ids())" in result.stdout
    assert "nn.DataParallel" not in result.stdout
    assert "Found 0 problem(s) in 0 file(s) (1 file(s) checked, 2 fixed)." in result.stderr


@pytest.mark.parametrize(
    "source",
    [
        b"import torch.nn as nn\r\nmodel = nn.DataParallel(model)\r\n",  # only an unsafe fix: nothing fixed
        b"print('hi')\n",  # nothing to report
    ],
)
def test_lint_fix_on_stdin_with_nothing_fixed_echoes_the_input(source: bytes) -> None:
    result = invoke("lint", "--fix", "-", input=source)
    assert result.stdout_bytes == source
    assert "0 fixed" in result.stderr


def test_lint_fix_on_stdin_with_a_syntax_error_echoes_the_input_and_exits_2() -> None:
    source = b"import torch.nn as nn\ndef f(:\n    nn.DataParallel(m)\n"
    result = invoke("lint", "--fix", "-", input=source)
    assert result.exit_code == 2
    assert result.stdout_bytes == source, "never a partial text: the input as it came"
    assert error_lines(result) == ["-:2:7: cannot parse: invalid syntax"]


def test_lint_fix_on_stdin_sends_a_json_report_to_stderr_or_to_the_output_file(tmp_path: Path) -> None:
    args = ("lint", "--fix", "--format", "json", "--select", "DDP001,DDP004", "--stdin-filename", "train.py")
    result = invoke(*args, input=SAFE_AND_UNSAFE)
    compile(result.stdout, "stdout", "exec")
    report, _ = json.JSONDecoder().raw_decode(result.stderr)
    assert [(item["path"], item["code"]) for item in report] == [("train.py", "DDP001")]
    to_file = invoke(*args, "-o", "report.json", input=SAFE_AND_UNSAFE)
    assert to_file.stdout == result.stdout
    assert [item["code"] for item in json.loads((tmp_path / "report.json").read_text())] == ["DDP001"]
    assert (result.exit_code, to_file.exit_code) == (1, 1)
    assert invoke(*args, "--exit-zero", input=SAFE_AND_UNSAFE).exit_code == 0


def test_lint_fix_on_excluded_stdin_echoes_it_untouched(tmp_path: Path) -> None:
    write(tmp_path / "pyproject.toml", '[tool.ddp-migrate]\nexclude = ["legacy/*"]\n')
    result = invoke("lint", "--fix", "--stdin-filename", "legacy/old.py", "-", input=SAFE_AND_UNSAFE)
    assert (result.exit_code, result.stdout) == (0, SAFE_AND_UNSAFE)


def test_real_process_lint_fix_keeps_code_on_stdout_and_findings_on_stderr() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "ddp_migrate", "lint", "--fix", "--select", "DDP001,DDP004", "-"],
        input=SAFE_AND_UNSAFE.encode(),
        capture_output=True,
        timeout=60,
    )
    assert done.returncode == 1, done.stderr
    out = done.stdout.decode()
    compile(out, "stdout", "exec")
    assert ".to(runtime.device())" in out and "nn.DataParallel(model)" in out and not ANSI.search(out)
    assert b"-:5:9: DDP001 " in done.stderr and b"1 fixed" in done.stderr


# -------------------------------------------------------------------------------------- --select


@pytest.mark.parametrize(
    "args, expected",
    [
        ([], {"DDP001", "DDP003", "DDP005", "DDP007", "DDP016"}),  # (DDP016 stands for DDP008 on the save)
        (["--select", "DDP001"], {"DDP001"}),
        (["--select", "ddp001,DDP007"], {"DDP001", "DDP007"}),
        (["--select", "DDP001", "--select", "DDP005"], {"DDP001", "DDP005"}),
        (["--select", "DDP0"], {"DDP001", "DDP003", "DDP005", "DDP007", "DDP016"}),
        (["--select", "ALL", "--ignore", "DDP00,DDP01"], set()),
        (["--ignore", "DDP001,DDP003"], {"DDP005", "DDP007", "DDP016"}),
        (["--select", "DDP00", "--ignore", "DDP007"], {"DDP001", "DDP003", "DDP005", "DDP008"}),
    ],
)
def test_select_and_ignore(tmp_path: Path, args: list[str], expected: set[str]) -> None:
    write(tmp_path / "train.py", LOADER_SCRIPT)
    result = invoke("lint", *args, "train.py")
    assert codes(result) == expected
    assert result.exit_code == (1 if expected else 0)


def test_select_limits_what_migrate_rewrites(tmp_path: Path) -> None:
    path = write(tmp_path / "train.py", DP_SCRIPT)
    assert invoke("--select", "DDP007", "train.py").exit_code == 0
    text = path.read_text()
    assert "runtime.save(model" in text and "nn.DataParallel(model)" in text


# -------------------------------------------------------------------------------- configuration


def test_config_select_applies_and_the_flag_wins(tmp_path: Path) -> None:
    write(tmp_path / "pyproject.toml", '[project]\nname = "x"\n\n[tool.ddp-migrate]\nselect = ["DDP007"]\n')
    write(tmp_path / "src" / "train.py", LOADER_SCRIPT)
    assert codes(invoke("lint", "src")) == {"DDP007"}
    assert codes(invoke("lint", "--select", "DDP001", "src")) == {"DDP001"}


def test_config_ignore_applies_and_the_flag_wins(tmp_path: Path) -> None:
    write(tmp_path / "pyproject.toml", '[tool.ddp-migrate]\nignore = ["DDP00", "DDP01"]\n')
    write(tmp_path / "train.py", LOADER_SCRIPT)
    assert invoke("lint", "train.py").exit_code == 0
    assert codes(invoke("lint", "--ignore", "DDP001", "train.py")) == {"DDP003", "DDP005", "DDP007", "DDP016"}


def test_config_batch_size_applies_and_the_flag_wins(tmp_path: Path) -> None:
    write(tmp_path / "pyproject.toml", '[tool.ddp-migrate]\nbatch-size = "per-process"\n')
    write(tmp_path / "train.py", LOADER_SCRIPT)
    per_process = invoke("--diff", "--select", "DDP005", "train.py")
    assert "+loader = DataLoader(data, batch_size=8, sampler=DistributedSampler(" in per_process.stdout
    global_ = invoke("--diff", "--select", "DDP005", "--batch-size", "global", "train.py")
    assert "batch_size=runtime.per_process_batch_size(8)" in global_.stdout


def test_config_exclude_applies_and_the_flag_replaces_it(tmp_path: Path) -> None:
    write(tmp_path / "pyproject.toml", '[tool.ddp-migrate]\nexclude = ["legacy/*", "gen_*.py"]\n')
    for name in ("src/train.py", "legacy/old.py", "src/gen_model.py"):
        write(tmp_path / name, DP_SCRIPT)
    result = invoke("--check", "--select", "DDP001", ".")
    assert sorted(re.findall(r"^(\S+): would be migrated", result.stderr, flags=re.M)) == ["src/train.py"]
    result = invoke("--check", "--select", "DDP001", "--exclude", "src", ".")
    assert sorted(re.findall(r"^(\S+): would be migrated", result.stderr, flags=re.M)) == ["legacy/old.py"]


def test_nearest_config_with_the_table_applies(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write(tmp_path / "pyproject.toml", '[tool.ddp-migrate]\nselect = ["DDP007"]\n')
    write(tmp_path / "inner" / "pyproject.toml", '[tool.ddp-migrate]\nselect = ["DDP001"]\n')
    write(tmp_path / "inner" / "deeper" / "pyproject.toml", '[project]\nname = "no-table-here"\n')
    write(tmp_path / "inner" / "deeper" / "train.py", LOADER_SCRIPT)
    assert codes(invoke("lint", "inner/deeper/train.py")) == {"DDP001"}
    monkeypatch.chdir(tmp_path / "inner" / "deeper")
    assert codes(invoke("lint", "train.py")) == {"DDP001"}
    assert codes(invoke("lint", "-", input=LOADER_SCRIPT)) == {"DDP001"}


def test_per_file_ignores(tmp_path: Path) -> None:
    write(tmp_path / "pyproject.toml", '[tool.ddp-migrate]\nselect = ["DDP001", "DDP007"]\n\n[tool.ddp-migrate.per-file-ignores]\n"scripts/*" = ["DDP001"]\n')
    write(tmp_path / "scripts" / "a.py", DP_SCRIPT)
    write(tmp_path / "b.py", DP_SCRIPT)
    result = invoke("lint", ".")
    assert set(re.findall(r"^(\S+):\d+:\d+: (\w+)", result.stdout, flags=re.M)) == {
        ("scripts/a.py", "DDP007"),
        ("b.py", "DDP001"),
        ("b.py", "DDP007"),
    }


@pytest.mark.parametrize(
    "table, message",
    [
        ('selct = ["DDP001"]', "unknown option(s) in [tool.ddp-migrate]: selct"),
        ('select = ["NOPE"]', "unknown rule code or prefix: NOPE"),
        ("exclude = [1]", "exclude must be a list of strings"),
        ('batch-size = "huge"', "batch-size must be one of global, per-process"),
        ("select = [", "invalid TOML"),
    ],
)
def test_bad_config_is_one_error_line(tmp_path: Path, table: str, message: str) -> None:
    write(tmp_path / "pyproject.toml", f"[tool.ddp-migrate]\n{table}\n")
    path = write(tmp_path / "train.py", DP_SCRIPT)
    for args in (["train.py"], ["lint", "train.py"]):
        result = invoke(*args)
        assert result.exit_code == 2, result.output
        [line] = result.stderr.splitlines()
        assert line.startswith("ddp-migrate: error: ") and message in line, line
    assert path.read_text() == DP_SCRIPT


# ------------------------------------------------------------------------------------ discovery


def _linted(result: Result) -> list[str]:
    return sorted({m.group(1) for m in re.finditer(r"^(\S+):\d+:\d+: ", result.stdout, flags=re.M)})


def test_exclude_globs_and_default_excludes(tmp_path: Path) -> None:
    for name in (
        "src/train.py",
        "src/skip_me.py",
        "src/gen/model.py",
        "tools/run.py",
        ".venv/lib/site.py",
        "src/__pycache__/cached.py",
        "node_modules/x.py",
        "notes.txt",
    ):
        write(tmp_path / name, DP_SCRIPT)
    everything = invoke("lint", "--select", "DDP001", ".")
    assert _linted(everything) == ["src/gen/model.py", "src/skip_me.py", "src/train.py", "tools/run.py"]
    result = invoke("lint", "--select", "DDP001", "--exclude", "skip_*", "--exclude", "src/gen", "--exclude", "tools/", ".")
    assert _linted(result) == ["src/train.py"]


def test_exclude_globs_do_not_match_folders_above_the_project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    project = tmp_path / "test_project"
    write(project / "src" / "train.py", DP_SCRIPT)
    write(project / "src" / "test_train.py", DP_SCRIPT)
    monkeypatch.chdir(project)
    result = invoke("lint", "--select", "DDP001", "--exclude", "test_*", ".")
    assert _linted(result) == ["src/train.py"]
    result = invoke("lint", "--select", "DDP001", "--exclude", "src/test_train.py", ".")
    assert _linted(result) == ["src/train.py"]


def test_named_file_is_processed_whatever_its_suffix(tmp_path: Path) -> None:
    path = write(tmp_path / "lint", DP_SCRIPT)
    result = invoke("--select", "DDP001", "./lint")
    assert result.exit_code == 0, result.output
    assert "DistributedDataParallel(model" in path.read_text()
    assert "lint: migrated" in result.stderr


def test_migrate_is_the_default_subcommand(tmp_path: Path) -> None:
    one = write(tmp_path / "one.py", DP_SCRIPT)
    two = write(tmp_path / "two.py", DP_SCRIPT)
    assert invoke("--select", "DDP001", "one.py").exit_code == 0
    assert invoke("migrate", "--select", "DDP001", "two.py").exit_code == 0
    assert one.read_text() == two.read_text() != DP_SCRIPT


def test_lint_a_file_named_lint(tmp_path: Path) -> None:
    write(tmp_path / "lint", DP_SCRIPT)
    result = invoke("lint", "--select", "DDP001", "lint")
    assert result.exit_code == 1
    assert result.stdout.startswith("lint:3:9: DDP001 ")


# ------------------------------------------------------------------------------------ subcommands


def test_rules_lists_every_code() -> None:
    result = invoke("rules")
    assert result.exit_code == 0
    listed = [line.split()[0] for line in result.stdout.splitlines() if not line.startswith(" ")]
    assert max(len(line) for line in result.stdout.splitlines()) <= 100
    assert "``" not in result.stdout, "plain text, no reStructuredText markup"
    # the rule modules' rules, plus the linter's own DDP100 (unknown-noqa-code)
    assert listed == sorted([rule.code for rule in codemods.ALL_RULES] + ["DDP100"])
    assert len(listed) >= 11


def test_explain_prints_the_docstring_and_an_example() -> None:
    rule = codemods.rule_for_code("DDP001")
    assert rule is not None
    result = invoke("explain", "ddp001")
    assert result.exit_code == 0
    assert result.stdout.startswith("DDP001 data-parallel\n")
    assert rule.summary().replace("``", "`") in result.stdout
    assert "``" not in result.stdout and max(map(len, result.stdout.splitlines())) <= 100
    assert "Example:" in result.stdout and "becomes:" in result.stdout
    assert "    model = nn.DataParallel(model)" in result.stdout
    assert "    model = DistributedDataParallel(model, device_ids=runtime.device_ids())" in result.stdout


def test_explain_unknown_code_exits_2() -> None:
    result = invoke("explain", "NOPE")
    assert result.exit_code == 2
    assert result.stdout == ""
    assert result.stderr == "ddp-migrate: error: unknown rule code or name: NOPE (see: ddp-migrate rules)\n"


def test_version() -> None:
    result = invoke("--version")
    assert result.exit_code == 0
    assert result.stdout == f"ddp-migrate, version {__version__}\n"


def test_python_dash_m_help() -> None:
    done = subprocess.run([sys.executable, "-m", "ddp_migrate", "--help"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("Usage: ddp-migrate ")
    for command in ("migrate", "lint", "rules", "explain"):
        assert re.search(rf"^  {command} ", done.stdout, flags=re.M)


def test_cli_never_imports_torch(tmp_path: Path) -> None:
    write(tmp_path / "train.py", LOADER_SCRIPT)
    program = textwrap.dedent(
        """
        import sys
        import ddp_migrate.cli, ddp_migrate.codemods
        from click.testing import CliRunner
        runner = CliRunner()
        assert runner.invoke(ddp_migrate.cli.cli, ["--help"]).exit_code == 0
        assert runner.invoke(ddp_migrate.cli.cli, ["lint", "train.py"]).exit_code == 1
        assert runner.invoke(ddp_migrate.cli.cli, ["-j", "1", "train.py"]).exit_code in (0, 1)
        assert runner.invoke(ddp_migrate.cli.cli, ["explain", "DDP007"]).exit_code == 0
        assert runner.invoke(ddp_migrate.cli.cli, ["explain", "missing-process-group"]).exit_code == 0
        assert runner.invoke(ddp_migrate.cli.cli, ["rules", "--format", "json"]).exit_code == 0
        assert "DataParallel" in runner.invoke(ddp_migrate.cli.cli, ["example"]).output
        assert runner.invoke(ddp_migrate.cli.cli, ["lint", "--format", "sarif", "--exit-zero", "train.py"]).exit_code == 0
        assert "runtime.save(" in open("train.py").read()
        loaded = sorted(m for m in sys.modules if m == "torch" or m.startswith("torch."))
        assert not loaded, loaded
        """
    )
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 0, done.stderr


# --------------------------------------------------------------------------- fix safety (lint --fix)


def test_lint_fix_leaves_unsafe_fixes_reported_and_unsafe_fixes_applies_them(tmp_path: Path) -> None:
    safe_only = write(tmp_path / "train.py", DP_SCRIPT)
    result = invoke("lint", "--fix", "train.py")
    assert result.exit_code == 1
    assert codes(result) == {"DDP001", "DDP007"}  # both unsafe: reported, not fixed
    assert safe_only.read_text() == DP_SCRIPT
    assert "2 more fixable with: ddp-migrate lint --fix --unsafe-fixes" in result.stderr
    listed = invoke("lint", "--format", "json", "train.py")
    assert {(f["code"], f["fixable"]) for f in __import__("json").loads(listed.stdout)} == {("DDP001", True), ("DDP007", True)}
    assert "2 fixable with: ddp-migrate lint --fix --unsafe-fixes" in listed.stderr

    result = invoke("lint", "--fix", "--unsafe-fixes", "train.py")
    assert result.exit_code == 0, result.output
    assert codes(result) == set()
    assert "nn.DataParallel" not in safe_only.read_text()
    migrated = write(tmp_path / "copy.py", DP_SCRIPT)
    assert invoke("copy.py").exit_code == 0
    assert migrated.read_text() == safe_only.read_text()  # --unsafe-fixes: exactly the migration


def test_lint_fix_applies_the_safe_fixes_of_a_file_with_both(tmp_path: Path) -> None:
    script = write(tmp_path / "train.py", LOADER_SCRIPT)
    result = invoke("lint", "--fix", "train.py")
    text = script.read_text()
    assert "runtime.setup(" in text  # DDP003: safe, applied
    assert "nn.DataParallel(model)" in text and "DistributedSampler" not in text  # DDP001, DDP005: unsafe
    assert codes(result) == {"DDP001", "DDP005", "DDP007"}
    assert "3 more fixable with: ddp-migrate lint --fix --unsafe-fixes" in result.stderr


# --------------------------------------------------------------------------- --runtime


def test_migration_report_says_what_the_code_needs_at_run_time(tmp_path: Path) -> None:
    write(tmp_path / "train.py", LOADER_SCRIPT)
    result = invoke("train.py")
    last = result.stderr.strip().splitlines()[-1]
    assert last == "The migrated code imports ddp_migrate.runtime: install ddp-migrate where it trains (or pass --runtime vendor)."
    again = invoke("train.py")  # nothing changed: nothing to say
    assert "install ddp-migrate" not in again.stderr
    write(tmp_path / "other.py", LOADER_SCRIPT)
    assert "would import ddp_migrate.runtime" in invoke("--check", "other.py").stderr


def test_runtime_vendor_imports_the_vendored_module_and_writes_it_once_per_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import types

    calls: list[Path] = []

    def write_runtime_module(folder: Path) -> Path:
        calls.append(folder)
        return folder / "ddp_runtime.py"

    monkeypatch.setitem(sys.modules, "ddp_migrate.vendor", types.SimpleNamespace(write_runtime_module=write_runtime_module))
    for name in ("a/train.py", "a/eval_train.py", "b/train.py"):
        (tmp_path / name).parent.mkdir(exist_ok=True)
        write(tmp_path / name, LOADER_SCRIPT)
    result = invoke("-j", "1", "--runtime", "vendor", "a", "b")
    assert result.exit_code == 1, result.output  # migrated, with a review item each (set_epoch)
    assert sorted(p.resolve() for p in calls) == [(tmp_path / "a").resolve(), (tmp_path / "b").resolve()]  # once per folder
    text = (tmp_path / "b" / "train.py").read_text()
    assert "ddp_runtime" in text and "ddp_migrate" not in text
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("The migrated code imports ddp_runtime, written to ")
    assert "ddp_runtime.py" in last and "training needs only torch" in last

    calls.clear()
    write(tmp_path / "c.py", LOADER_SCRIPT)
    checked = invoke("--check", "--runtime", "vendor", "c.py")
    assert calls == []  # --check writes nothing, the runtime included
    assert "would import ddp_runtime" in checked.stderr
    assert invoke("--runtime", "bundled", "c.py").exit_code == 2


def test_runtime_vendor_writes_a_runtime_the_migrated_script_imports(tmp_path: Path) -> None:
    pytest.importorskip("ddp_migrate.vendor")
    (tmp_path / "a").mkdir()
    write(tmp_path / "a" / "train.py", LOADER_SCRIPT)
    result = invoke("--runtime", "vendor", "a/train.py")
    assert result.exit_code in (0, 1), result.output
    assert (tmp_path / "a" / "ddp_runtime.py").is_file()
    assert "ddp_migrate" not in (tmp_path / "a" / "train.py").read_text()
    assert str(Path("a") / "ddp_runtime.py") in result.stderr.strip().splitlines()[-1]


def test_runtime_vendor_is_importable_by_a_package_imported_from_the_repository_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A trial: tools/train.py trains through mylib/engine.py; the runtime went to tools/ only, so importing
    # mylib from the root (its tests) failed with "No module named 'ddp_runtime'".
    pytest.importorskip("ddp_migrate.vendor")
    pytest.importorskip("torch")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "mylib").mkdir()
    (tmp_path / "tools").mkdir()
    write(tmp_path / "pyproject.toml", '[project]\nname = "mylib"\nversion = "0"\n')
    write(tmp_path / "mylib" / "__init__.py", "")
    write(
        tmp_path / "mylib" / "engine.py",
        "import torch\n\n\ndef train(model, loader):\n    opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "    for epoch in range(2):\n        for x, y in loader:\n            opt.zero_grad()\n"
        "            torch.nn.functional.mse_loss(model(x), y).backward()\n            opt.step()\n    print('trained')\n",
    )
    write(
        tmp_path / "tools" / "train.py",
        "import torch\nfrom torch.utils.data import DataLoader, TensorDataset\n\nfrom mylib.engine import train\n\n\n"
        "def main():\n    loader = DataLoader(TensorDataset(torch.randn(32, 4), torch.randn(32, 1)), batch_size=8, shuffle=True)\n"
        "    train(torch.nn.Linear(4, 1), loader)\n\n\nif __name__ == '__main__':\n    main()\n",
    )
    result = invoke("--runtime", "vendor", ".")
    assert result.exit_code in (0, 1), result.output
    assert "ddp_runtime" in (tmp_path / "mylib" / "engine.py").read_text()
    assert (tmp_path / "tools" / "ddp_runtime.py").is_file() and (tmp_path / "ddp_runtime.py").is_file()
    imported = subprocess.run([sys.executable, "-c", "import mylib.engine"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert imported.returncode == 0, imported.stderr
