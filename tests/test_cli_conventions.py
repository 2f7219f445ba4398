"""Command-line conventions ruff and black users expect: colour, --exit-zero, --stdin-filename,
--output-file, extend-select / extend-ignore, explain by name, rules as JSON, empty folders, the progress
bar on a terminal, Ctrl-C, and the options passed through to the engine (--elastic, --no-follow-imports).

Everything goes through the real command line: click's ``CliRunner`` or a real process (a pseudo-terminal
where the behaviour depends on one).
"""

from __future__ import annotations

import ast
import json
import os
import pty
import re
import select
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from ddp_migrate import codemods, program, runner
from ddp_migrate.cli import cli
from ddp_migrate.registry import all_rules

DP_SCRIPT = """\
import torch
import torch.nn as nn
model = nn.DataParallel(model)
torch.save(model, "m.pt")
"""

ANSI = re.compile(r"\x1b\[[0-9;]*m")
FINDING = re.compile(r"^(\S+):(\d+):(\d+): (\w+) ", flags=re.M)


def invoke(*args: str, input: bytes | str | None = None, env: dict[str, str] | None = None) -> Result:
    """The real command line in-process, with NO_COLOR / FORCE_COLOR unset unless ``env`` sets them."""
    clean = {"NO_COLOR": None, "FORCE_COLOR": None, **(env or {})}
    return CliRunner().invoke(cli, list(args), input=input, env=clean, catch_exceptions=False)  # type: ignore[arg-type]


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
    return path


def found(text: str) -> list[tuple[str, str]]:
    return [(m.group(1), m.group(4)) for m in FINDING.finditer(text)]


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)


@pytest.fixture
def core_rules(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(codemods, "ALL_RULES", tuple(rule for rule in codemods.ALL_RULES if rule.code <= "DDP011"))


def _resets_before_newlines(text: str) -> None:
    assert ANSI.search(text), "expected colour"
    assert "\n\x1b[0m" not in text, "a reset code after a newline leaks colour into the next line"
    for line in text.splitlines():
        if ANSI.search(line):
            assert line.endswith("\x1b[0m") or not line.rstrip().endswith(("\x1b[1m", "\x1b[31m")), repr(line)


# ----------------------------------------------------------------------------------------- colour


@pytest.mark.parametrize(
    "args, env, coloured",
    [
        ([], {}, False),  # not a terminal
        ([], {"FORCE_COLOR": "1"}, True),
        ([], {"NO_COLOR": "1", "FORCE_COLOR": "1"}, False),
        ([], {"NO_COLOR": ""}, False),  # empty means unset
        (["--color", "always"], {"NO_COLOR": "1"}, True),
        (["--color", "never"], {"FORCE_COLOR": "1"}, False),
        (["--color", "auto"], {"FORCE_COLOR": "1"}, True),
    ],
)
def test_color_choice_for_lint_and_diff(tmp_path: Path, args: list[str], env: dict[str, str], coloured: bool) -> None:
    write(tmp_path / "train.py", DP_SCRIPT)
    lint = invoke("lint", *args, "train.py", env=env)
    diff = invoke("--diff", *args, "train.py", env=env)
    assert (lint.exit_code, diff.exit_code) == (1, 1)
    for output in (lint.stdout, diff.stdout):
        assert bool(ANSI.search(output)) is coloured, output
        if coloured:
            _resets_before_newlines(output)
    assert ANSI.sub("", lint.stdout).startswith("train.py:3:9: DDP001 ")
    if coloured:
        first = lint.stdout.splitlines()[0]
        assert first.startswith("\x1b[1mtrain.py\x1b[0m"), "the path is bold, as in ruff"
        assert "\x1b[31m\x1b[1mDDP001\x1b[0m" in first, "the code is bold red"


def test_bad_color_choice_is_an_error(tmp_path: Path) -> None:
    write(tmp_path / "train.py", DP_SCRIPT)
    result = invoke("lint", "--color", "sometimes", "train.py")
    assert result.exit_code == 2 and "Invalid value for '--color'" in result.stderr


def _run_on_terminal(args: list[str], cwd: Path, env: dict[str, str] | None = None, timeout: float = 120) -> tuple[int, str, str]:
    """Run the command with stdout and stderr on pseudo-terminals; (exit code, stdout, stderr)."""
    out_master, out_slave = pty.openpty()
    err_master, err_slave = pty.openpty()
    full_env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "FORCE_COLOR")}
    full_env.update(env or {})
    process = subprocess.Popen(
        [sys.executable, "-m", "ddp_migrate", *args], cwd=cwd, stdout=out_slave, stderr=err_slave, stdin=subprocess.DEVNULL, env=full_env
    )
    os.close(out_slave)
    os.close(err_slave)
    chunks: dict[int, list[bytes]] = {out_master: [], err_master: []}
    open_fds = [out_master, err_master]
    deadline = time.monotonic() + timeout
    while open_fds and time.monotonic() < deadline:
        ready, _, _ = select.select(open_fds, [], [], 0.5)
        for fd in ready:
            try:
                data = os.read(fd, 65536)
            except OSError:
                data = b""
            if data:
                chunks[fd].append(data)
            else:
                open_fds.remove(fd)
    code = process.wait(timeout=max(1.0, deadline - time.monotonic()))
    for fd in (out_master, err_master):
        os.close(fd)
    decode = lambda fd: b"".join(chunks[fd]).decode(errors="replace").replace("\r\n", "\n")  # noqa: E731
    return code, decode(out_master), decode(err_master)


def test_lint_on_a_terminal_is_coloured_and_no_color_turns_it_off(tmp_path: Path) -> None:
    write(tmp_path / "train.py", DP_SCRIPT)
    code, out, _ = _run_on_terminal(["lint", "train.py"], tmp_path)
    assert code == 1 and ANSI.search(out), out
    code, out, _ = _run_on_terminal(["lint", "train.py"], tmp_path, env={"NO_COLOR": "1"})
    assert code == 1 and not ANSI.search(out) and "train.py:3:9: DDP001" in out


# --------------------------------------------------------------------------- exit codes and output


def test_exit_zero_keeps_findings_but_exits_0_and_errors_still_exit_2(tmp_path: Path) -> None:
    write(tmp_path / "train.py", DP_SCRIPT)
    result = invoke("lint", "--exit-zero", "train.py")
    assert result.exit_code == 0
    assert ("train.py", "DDP001") in found(result.stdout)
    write(tmp_path / "bad.py", "def f(:\n")
    assert invoke("lint", "--exit-zero", "train.py", "bad.py").exit_code == 2


def test_output_file_gets_the_findings_and_stdout_stays_empty(tmp_path: Path) -> None:
    write(tmp_path / "train.py", DP_SCRIPT)
    result = invoke("lint", "--format", "json", "--output-file", "out/report.json", "train.py", env={"FORCE_COLOR": "1"})
    assert result.exit_code == 2, "a folder that does not exist cannot be written"
    (tmp_path / "out").mkdir()
    result = invoke("lint", "--format", "json", "--output-file", "out/report.json", "train.py", env={"FORCE_COLOR": "1"})
    assert result.exit_code == 1
    assert result.stdout == ""
    findings = json.loads((tmp_path / "out" / "report.json").read_text())
    assert {f["code"] for f in findings} >= {"DDP001", "DDP007"}
    text = invoke("lint", "-o", "report.txt", "--exit-zero", "train.py", env={"FORCE_COLOR": "1"})
    assert text.exit_code == 0
    assert not ANSI.search((tmp_path / "report.txt").read_text()), "a file never gets colour codes"
    assert "train.py:3:9: DDP001" in (tmp_path / "report.txt").read_text()


def test_empty_folder_exits_0_with_a_warning(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    write(tmp_path / "docs" / "notes.md", "# notes\n")
    for args in (["lint", "empty", "docs"], ["empty"], ["--check", "docs"]):
        result = invoke(*args)
        assert result.exit_code == 0, result.output
        assert "warning: empty: no Python files or notebooks found" in result.stderr or "warning: docs:" in result.stderr
        assert result.stdout == ""
    assert invoke("lint", "missing_folder").exit_code == 2, "a path that does not exist is still an error"


def test_syntax_error_without_a_trigger_word_is_reported(tmp_path: Path) -> None:
    write(tmp_path / "plain.py", "def f(:\n    return 1\n")
    result = invoke("lint", "plain.py")
    assert result.exit_code == 2
    assert "plain.py:1:7: cannot parse" in result.stderr


# ------------------------------------------------------------------------------- --stdin-filename


def test_stdin_filename_names_the_code_and_its_per_file_ignores_apply(tmp_path: Path) -> None:
    write(tmp_path / "pyproject.toml", '[tool.ddp-migrate]\nselect = ["DDP001", "DDP007"]\n\n[tool.ddp-migrate.per-file-ignores]\n"scripts/*" = ["DDP001"]\n')
    plain = invoke("lint", "--stdin-filename", "train.py", "-", input=DP_SCRIPT)
    assert found(plain.stdout) == [("train.py", "DDP001"), ("train.py", "DDP007")]
    ignored = invoke("lint", "--stdin-filename", "scripts/a.py", input=DP_SCRIPT)  # no '-': stdin, as in ruff
    assert found(ignored.stdout) == [("scripts/a.py", "DDP007")]
    migrated = invoke("--stdin-filename", "scripts/a.py", "-", input=DP_SCRIPT)
    assert migrated.exit_code == 0
    assert "nn.DataParallel(model)" in migrated.stdout and "runtime.save(model" in migrated.stdout
    assert "scripts/a.py: migrated" in migrated.stderr


def test_stdin_filename_that_is_excluded_passes_through(tmp_path: Path) -> None:
    write(tmp_path / "pyproject.toml", '[tool.ddp-migrate]\nexclude = ["legacy/*"]\n')
    lint = invoke("lint", "--stdin-filename", "legacy/old.py", "-", input=DP_SCRIPT)
    assert (lint.exit_code, lint.stdout) == (0, "")
    migrate = invoke("--stdin-filename", "legacy/old.py", "-", input=DP_SCRIPT)
    assert (migrate.exit_code, migrate.stdout) == (0, DP_SCRIPT)


def test_stdin_filename_in_error_messages() -> None:
    result = invoke("lint", "--stdin-filename", "src/x.py", "-", input="import torch\ndef f(:\n")
    assert result.exit_code == 2
    assert "src/x.py:2:7: cannot parse" in result.stderr


# ------------------------------------------------------------------------ extend-select / -ignore


def test_extend_select_adds_an_off_by_default_rule_from_the_configuration(tmp_path: Path) -> None:
    off = next(rule for rule in all_rules() if not getattr(rule, "enabled_by_default", True))
    write(tmp_path / "pyproject.toml", f'[tool.ddp-migrate]\nextend-select = ["{off.code}"]\nextend-ignore = ["DDP007"]\n')
    write(tmp_path / "train.py", DP_SCRIPT)
    codes = {code for _, code in found(invoke("lint", "train.py").stdout)}
    assert "DDP001" in codes and "DDP007" not in codes
    only = invoke("lint", "--select", "DDP001", "train.py")
    assert {code for _, code in found(only.stdout)} == {"DDP001"}, "--select replaces the configured extend-select"
    replaced = invoke("lint", "--ignore", "DDP010", "train.py")
    assert "DDP007" in {code for _, code in found(replaced.stdout)}, "--ignore replaces the configured ignore and extend-ignore"


def test_extend_select_and_extend_ignore_on_the_command_line(tmp_path: Path, core_rules: None) -> None:
    write(tmp_path / "pyproject.toml", '[tool.ddp-migrate]\nselect = ["DDP001"]\n')
    write(tmp_path / "train.py", DP_SCRIPT)
    assert {c for _, c in found(invoke("lint", "train.py").stdout)} == {"DDP001"}
    both = invoke("lint", "--extend-select", "DDP007", "train.py")
    assert {c for _, c in found(both.stdout)} == {"DDP001", "DDP007"}
    less = invoke("lint", "--extend-select", "DDP007", "--extend-ignore", "DDP001", "train.py")
    assert {c for _, c in found(less.stdout)} == {"DDP007"}
    bad = invoke("lint", "--extend-select", "NOPE", "train.py")
    assert bad.exit_code == 2 and "unknown rule code or prefix: NOPE" in bad.stderr
    write(tmp_path / "pyproject.toml", '[tool.ddp-migrate]\nextend-ignore = ["XYZ"]\n')
    assert invoke("lint", "train.py").exit_code == 2


# ------------------------------------------------------------------------------- rules and explain


def test_explain_by_name_or_code_in_plain_text() -> None:
    by_name = invoke("explain", "missing-process-group")
    by_code = invoke("explain", "DDP003")
    assert by_name.exit_code == by_code.exit_code == 0
    assert by_name.stdout == by_code.stdout
    assert by_name.stdout.startswith("DDP003 missing-process-group\n")
    assert "``" not in by_name.stdout and "`runtime.setup()`" in by_name.stdout
    assert max(len(line) for line in by_name.stdout.splitlines()) <= 100
    for rule in all_rules():
        text = invoke("explain", rule.name).stdout
        assert "``" not in text and max(len(line) for line in text.splitlines() if not line.startswith("    ")) <= 100, rule.code
    unknown = invoke("explain", "missing-everything")
    assert unknown.exit_code == 2 and "unknown rule code or name: missing-everything" in unknown.stderr


def test_rules_as_json() -> None:
    result = invoke("rules", "--format", "json")
    assert result.exit_code == 0
    rules = json.loads(result.stdout)
    assert [r["code"] for r in rules] == [rule.code for rule in all_rules()]
    first = rules[0]
    assert set(first) == {"code", "name", "summary", "fixable", "fix_safety", "severity", "enabled_by_default", "documentation", "manual_fix"}
    assert all("``" not in r["summary"] + r["documentation"] for r in rules)


# --------------------------------------------------------------------------- options passed through


def test_elastic_snapshot_every_and_no_follow_imports_reach_the_engine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict[str, object] = {}
    real_plan, real_process_unit = runner.plan, runner.process_unit

    def plan(files, follow_imports=True, scan_many=None):  # type: ignore[no-untyped-def]
        seen["follow_imports"] = follow_imports
        return real_plan(files, follow_imports, scan_many)

    def process_unit(unit, rules_for, options, fix, fixable=None):  # type: ignore[no-untyped-def]
        seen["options"] = options
        return real_process_unit(unit, rules_for, options, fix, fixable)

    monkeypatch.setattr(runner, "plan", plan)
    monkeypatch.setattr(runner, "process_unit", process_unit)
    write(tmp_path / "train.py", DP_SCRIPT)
    assert invoke("-j", "1", "--check", "--elastic", "--snapshot-every", "50", "--no-follow-imports", "train.py").exit_code == 1
    options = seen["options"]
    assert (options.elastic, options.snapshot_every, seen["follow_imports"]) == (True, 50, False)  # type: ignore[attr-defined]
    assert invoke("-j", "1", "--check", "train.py").exit_code == 1
    assert (seen["options"].elastic, seen["options"].snapshot_every, seen["follow_imports"]) == (False, None, True)  # type: ignore[attr-defined]
    assert invoke("lint", "-j", "1", "--no-follow-imports", "train.py").exit_code == 1
    assert seen["follow_imports"] is False
    refused = invoke("--snapshot-every", "5", "train.py")
    assert refused.exit_code == 2 and "--snapshot-every needs --elastic" in refused.stderr
    assert invoke("--elastic", "--snapshot-every", "0", "train.py").exit_code == 2
    assert program.plan is real_plan


# ------------------------------------------------------------------------------- progress, Ctrl-C


def _many(tmp_path: Path, count: int) -> list[Path]:
    return [write(tmp_path / "src" / f"train_{i:03d}.py", DP_SCRIPT) for i in range(count)]


@pytest.mark.parametrize("args, label", [(["lint"], "linting"), (["--check"], "checking"), (["--diff"], "checking"), ([], "migrating")])
def test_progress_bar_on_a_terminal_with_the_right_label(tmp_path: Path, args: list[str], label: str) -> None:
    # Files long enough that the bar renders between them (a 4-line script is linted faster than that).
    padding = "".join(f"value_{n} = torch.zeros({n % 7 + 1})\n" for n in range(400))
    for path in _many(tmp_path, 24):
        path.write_text(path.read_text() + padding)
    code, _, err = _run_on_terminal([*args, "-j", "2", "--select", "DDP001", "src"], tmp_path)
    assert code in (0, 1), err
    assert f"{label}  [" in err, err[-2000:]
    assert "24/24" in err, "the bar reaches the end"
    counts = [int(n) for n in re.findall(r"\]\s+(\d+)/24", err)]
    assert counts == sorted(counts) and len(set(counts)) > 2, f"advances per file: {counts}"
    for eta in re.findall(r"eta (\d+):(\d+)", err):
        assert int(eta[0]) * 60 + int(eta[1]) < 600, "an honest ETA for a run of seconds"
    other = {"linting", "checking", "migrating"} - {label}
    assert not any(f"{word}  [" in err for word in other)


def test_no_progress_bar_when_not_a_terminal_or_quiet(tmp_path: Path) -> None:
    _many(tmp_path, 24)
    piped = subprocess.run([sys.executable, "-m", "ddp_migrate", "lint", "-j", "2", "src"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert piped.returncode == 1
    assert "[" not in piped.stderr.replace("[*]", "") and "\r" not in piped.stderr
    code, _, err = _run_on_terminal(["lint", "-q", "-j", "2", "src"], tmp_path)
    assert code == 1 and "linting" not in err


def test_ctrl_c_stops_at_once_leaves_files_whole_and_exits_130(tmp_path: Path) -> None:
    files = _many(tmp_path, 120)
    process = subprocess.Popen(
        [sys.executable, "-m", "ddp_migrate", "-j", "2", "src"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # (Ctrl-C's default, whatever the suite was started with: a job started in the background by a shell without
        # job control inherits SIGINT ignored, and so would the tool)
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and all(path.read_text() == DP_SCRIPT for path in files[:40]):
        time.sleep(0.05)  # wait until the run is under way and has written something
    process.send_signal(signal.SIGINT)
    sent = time.monotonic()
    _, err = process.communicate(timeout=30)
    took = time.monotonic() - sent
    assert process.returncode == 130, err
    assert took < 2.0, f"exit took {took:.1f}s"
    assert "interrupted" in err and "Traceback" not in err
    migrated = {path.read_text() for path in files} - {DP_SCRIPT}
    assert len(migrated) == 1, "every file is either untouched or completely migrated (the same way)"
    for path in files:
        ast.parse(path.read_text())
    assert sum(path.read_text() != DP_SCRIPT for path in files) < len(files), "the run was really cut short"
    assert not list((tmp_path / "src").glob(".*ddp-migrate")), "no temporary files left behind"
