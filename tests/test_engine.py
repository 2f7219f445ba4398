"""The engine, through the real command line: bytes in, bytes out, and what it refuses to do.

Every test drives ``ddp_migrate.cli.cli`` (click's ``CliRunner``); none mocks the command line. Real rules
come from the registry; the small ``TST9xx`` rules below provoke engine behaviours no real rule can (a fix
that breaks the code, two fixes that undo each other, a rule that crashes). They live at module level so
worker processes (``-j 2``, forked) can unpickle them.
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path
from typing import Iterable, Iterator

import libcst as cst
import pytest
from click.testing import CliRunner, Result

from ddp_migrate import codemods, writer
from ddp_migrate.cli import cli
from ddp_migrate.codemods.analysis import ScriptAnalysis
from ddp_migrate.codemods.base import FixResult, Match, Options, Phase, Rule

# --------------------------------------------------------------------------------------------- helpers

DP_SCRIPT = """\
import torch
import torch.nn as nn
model = nn.DataParallel(model)
torch.save(model, "m.pt")
"""

TRAIN_SCRIPT = '''\
"""Train a small regression model on whatever GPUs there are."""
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


def main():
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    data = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
    loader = DataLoader(data, batch_size=8, shuffle=True)
    model = nn.Linear(4, 1).to(device)
    model = nn.DataParallel(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(3):
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            optimizer.zero_grad()
            loss = nn.functional.mse_loss(model(x), y)
            loss.backward()
            optimizer.step()
        print(f"epoch {epoch} loss {loss.item():.4f}")
    torch.save(model.state_dict(), "model.pt")


if __name__ == "__main__":
    main()
'''


def invoke(*args: str, input: bytes | str | None = None) -> Result:
    """Run the real command line in-process; an unexpected exception fails the test instead of hiding."""
    return CliRunner().invoke(cli, list(args), input=input, catch_exceptions=False)


def error_lines(result: Result) -> list[str]:
    """The ``path:line:col: message`` lines on stderr."""
    return [line for line in result.stderr.splitlines() if re.match(r"^\S+:\d+:\d+: ", line)]


def with_rules(monkeypatch: pytest.MonkeyPatch, *rules: type[Rule]) -> None:
    """Make test rules part of the registry the command line reads."""
    monkeypatch.setattr(codemods, "ALL_RULES", (*codemods.ALL_RULES, *rules))


class _Rename(cst.CSTTransformer):
    def __init__(self, old: str, new: str) -> None:
        self.old, self.new = old, new

    def leave_Name(self, original: cst.Name, updated: cst.Name) -> cst.Name:
        return updated.with_changes(value=self.new) if updated.value == self.old else updated


def _names(analysis: ScriptAnalysis, value: str) -> Iterator[Match]:
    for call in analysis.calls:
        if isinstance(call.func, cst.Name) and call.func.value == value:
            yield Match(call, f"{value}() found")


class BreaksCode(Rule):
    """Test rule: its fix appends ``return 1`` at module level, which parses but does not compile."""

    code = "TST901"
    name = "breaks-code"
    triggers = ("break_me",)

    def matches(self, analysis: ScriptAnalysis) -> Iterable[Match]:
        return _names(analysis, "break_me")

    def fix(self, analysis: ScriptAnalysis, options: Options) -> FixResult | None:
        if not list(self.matches(analysis)):
            return None
        module = analysis.module
        return FixResult(module.with_changes(body=[*module.body, cst.parse_statement("return 1\n")]))


class FooToBar(Rule):
    """Test rule: renames ``foo`` to ``bar``."""

    code = "TST902"
    name = "foo-to-bar"
    phase = Phase.DEVICES
    triggers = ("foo",)

    def matches(self, analysis: ScriptAnalysis) -> Iterable[Match]:
        return _names(analysis, "foo")

    def fix(self, analysis: ScriptAnalysis, options: Options) -> FixResult | None:
        return FixResult(analysis.module.visit(_Rename("foo", "bar")))


class BarToFoo(Rule):
    """Test rule: renames ``bar`` back to ``foo``, undoing TST902."""

    code = "TST903"
    name = "bar-to-foo"
    phase = Phase.OUTPUT
    triggers = ("bar",)

    def matches(self, analysis: ScriptAnalysis) -> Iterable[Match]:
        return _names(analysis, "bar")

    def fix(self, analysis: ScriptAnalysis, options: Options) -> FixResult | None:
        return FixResult(analysis.module.visit(_Rename("bar", "foo")))


class Crashes(Rule):
    """Test rule: raises while looking for findings."""

    code = "TST904"
    name = "crashes"
    triggers = ("crash_me",)

    def matches(self, analysis: ScriptAnalysis) -> Iterable[Match]:
        raise RuntimeError("boom")


class CrashesOnANode(Rule):
    """Test rule: fails with a KeyError whose key is a syntax tree (its text runs to hundreds of lines)."""

    code = "TST905"
    name = "crashes-on-a-node"
    triggers = ("crash_me",)

    def matches(self, analysis: ScriptAnalysis) -> Iterable[Match]:
        raise KeyError(analysis.module)


class WritesNonAscii(Rule):
    """Test rule: renames ``mark_me`` to ``marké`` (non-ASCII, but fine in latin-1 and UTF-8)."""

    code = "TST905"
    name = "writes-non-ascii"
    triggers = ("mark_me",)

    def matches(self, analysis: ScriptAnalysis) -> Iterable[Match]:
        return _names(analysis, "mark_me")

    def fix(self, analysis: ScriptAnalysis, options: Options) -> FixResult | None:
        return FixResult(analysis.module.visit(_Rename("mark_me", "marké")))


class WritesCjk(Rule):
    """Test rule: renames ``cjk_me`` to a name latin-1 cannot encode."""

    code = "TST906"
    name = "writes-cjk"
    triggers = ("cjk_me",)

    def matches(self, analysis: ScriptAnalysis) -> Iterable[Match]:
        return _names(analysis, "cjk_me")

    def fix(self, analysis: ScriptAnalysis, options: Options) -> FixResult | None:
        return FixResult(analysis.module.visit(_Rename("cjk_me", "名前")))


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)


# ------------------------------------------------------------------------------ encoding and newlines


def test_latin1_file_with_cookie_keeps_its_encoding(tmp_path: Path) -> None:
    source = '# -*- coding: latin-1 -*-\n# café naïve\nimport torch\nimport torch.nn as nn\nmodel = nn.DataParallel(model)\ntorch.save(model, "café.pt")\n'
    path = tmp_path / "lat.py"
    path.write_bytes(source.encode("latin-1"))

    result = invoke("--select", "DDP001,DDP007", "lat.py")

    assert result.exit_code == 0, result.output
    data = path.read_bytes()
    assert data.startswith(b"# -*- coding: latin-1 -*-\n# caf\xe9 na\xefve\n")
    assert b'"caf\xe9.pt"' in data
    assert b"\xc3" not in data  # not re-encoded as UTF-8
    text = data.decode("latin-1")
    assert "DistributedDataParallel(model" in text and "runtime.save(model" in text


def test_utf8_bom_is_kept(tmp_path: Path) -> None:
    path = tmp_path / "bom.py"
    path.write_bytes(b"\xef\xbb\xbf" + DP_SCRIPT.replace("import torch\n", "import torch\n# na\u00efve \u2713\n", 1).encode())

    result = invoke("--select", "DDP001", "bom.py")

    assert result.exit_code == 0, result.output
    data = path.read_bytes()
    assert data.startswith(b"\xef\xbb\xbfimport torch\n")
    assert data.count(b"\xef\xbb\xbf") == 1
    assert "# naïve ✓\n" in data.decode("utf-8-sig")
    assert b"DistributedDataParallel(model" in data


def test_non_ascii_text_written_by_a_fix_uses_the_files_encoding(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with_rules(monkeypatch, WritesNonAscii)
    path = tmp_path / "lat.py"
    path.write_bytes("# coding: latin-1\nmark_me()\n".encode("latin-1"))

    result = invoke("--select", "TST905", "lat.py")

    assert result.exit_code == 0, result.output
    assert path.read_bytes() == b"# coding: latin-1\nmark\xe9()\n"


def test_text_the_encoding_cannot_hold_is_a_clean_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with_rules(monkeypatch, WritesCjk)
    original = "# coding: latin-1\n# café\ncjk_me()\n".encode("latin-1")
    path = tmp_path / "lat.py"
    path.write_bytes(original)

    result = invoke("--select", "TST906", "lat.py")

    assert result.exit_code == 2
    assert path.read_bytes() == original
    [line] = error_lines(result)
    assert line.startswith("lat.py:3:1: cannot encode the migrated text as iso-8859-1")
    assert "Traceback" not in result.output


def test_crlf_stays_crlf_including_inserted_lines(tmp_path: Path) -> None:
    path = tmp_path / "crlf.py"
    path.write_bytes(DP_SCRIPT.replace("\n", "\r\n").encode())

    result = invoke("--select", "DDP001,DDP007", "crlf.py")

    assert result.exit_code == 0, result.output
    data = path.read_bytes()
    assert b"from torch.nn.parallel import DistributedDataParallel\r\n" in data
    assert b"runtime.save(model" in data
    assert b"\n" not in data.replace(b"\r\n", b""), "a bare LF slipped in"
    assert b"\r" not in data.replace(b"\r\n", b"")


def test_lf_stays_lf(tmp_path: Path) -> None:
    path = tmp_path / "lf.py"
    path.write_text(DP_SCRIPT)

    assert invoke("--select", "DDP001,DDP007", "lf.py").exit_code == 0
    data = path.read_bytes()
    assert b"DistributedDataParallel" in data and b"\r" not in data


# ---------------------------------------------------------------------------------------- writing


def test_failed_replace_leaves_the_original_and_no_temporary_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "train.py"
    path.write_text(DP_SCRIPT)
    original = path.read_bytes()

    def fail(*args: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(writer.os, "replace", fail)
    result = invoke("-j", "1", "--select", "DDP001", "train.py")

    assert result.exit_code == 2
    assert path.read_bytes() == original
    assert sorted(p.name for p in tmp_path.iterdir()) == ["train.py"]
    assert error_lines(result) == ["train.py:1:1: cannot write: No space left on device"]


def test_failed_fsync_mid_write_leaves_the_original(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "train.py"
    path.write_text(DP_SCRIPT)
    original = path.read_bytes()

    def fail(fd: int) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(writer.os, "fsync", fail)
    result = invoke("-j", "1", "--select", "DDP001", "train.py")

    assert result.exit_code == 2
    assert path.read_bytes() == original
    assert os.listdir(tmp_path) == ["train.py"]


@pytest.mark.parametrize("mode", [0o640, 0o755])
def test_rewrite_keeps_the_file_mode(tmp_path: Path, mode: int) -> None:
    path = tmp_path / "train.py"
    path.write_text(DP_SCRIPT)
    path.chmod(mode)

    assert invoke("--select", "DDP001", "train.py").exit_code == 0

    assert b"DistributedDataParallel" in path.read_bytes()
    assert stat.S_IMODE(path.stat().st_mode) == mode
    assert os.listdir(tmp_path) == ["train.py"]


def test_a_symlink_stays_a_link_and_its_target_is_migrated(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    target = tmp_path / "real" / "train.py"
    target.write_text(DP_SCRIPT)
    link = tmp_path / "link.py"
    link.symlink_to(target)

    assert invoke("--select", "DDP001", "link.py").exit_code == 0

    assert link.is_symlink()
    assert b"DistributedDataParallel" in target.read_bytes()
    assert sorted(p.name for p in (tmp_path / "real").iterdir()) == ["train.py"]


def test_an_unchanged_file_is_not_rewritten(tmp_path: Path) -> None:
    path = tmp_path / "clean.py"
    path.write_text("import torch\nx = torch.zeros(3)\n")
    os.utime(path, (1_000_000, 1_000_000))

    assert invoke("clean.py").exit_code == 0
    assert path.stat().st_mtime == 1_000_000


# ----------------------------------------------------------------------------- unusable input files


def test_syntax_error_is_one_line_and_other_files_are_still_processed(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("import torch\nimport torch.nn as nn\ndef f(:\n    model = nn.DataParallel(model)\n")
    original = bad.read_bytes()
    (tmp_path / "good.py").write_text(DP_SCRIPT)

    result = invoke("-j", "1", "--select", "DDP001", ".")

    assert result.exit_code == 2
    assert bad.read_bytes() == original
    assert b"DistributedDataParallel" in (tmp_path / "good.py").read_bytes()
    [line] = error_lines(result)
    assert re.fullmatch(r"bad\.py:3:7: cannot parse: .+", line), line
    assert "Traceback" not in result.output
    assert result.stdout == ""


def test_undecodable_file_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "undec.py"
    path.write_bytes(b"import torch\nx = '\xff\xfe'\n")

    result = invoke("undec.py")

    assert result.exit_code == 2
    assert error_lines(result) == ["undec.py:2:6: cannot decode as utf-8: invalid byte b'\\xff'"]
    assert path.read_bytes() == b"import torch\nx = '\xff\xfe'\n"


def test_missing_path_is_one_line(tmp_path: Path) -> None:
    result = invoke("nothere.py")
    assert result.exit_code == 2
    assert error_lines(result) == ["nothere.py:1:1: no such file or directory"]


def test_folder_without_python_files_is_a_warning_and_exit_0(tmp_path: Path) -> None:
    """Like ruff and black, a folder with nothing to do is not an error (issue 12, item 4)."""
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "readme.txt").write_text("torch\n")
    result = invoke("docs")
    assert result.exit_code == 0
    assert "warning: docs: no Python files or notebooks found" in result.stderr
    assert error_lines(result) == []


# ------------------------------------------------------------------------------- rules that misbehave


def test_fix_producing_code_that_does_not_compile_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with_rules(monkeypatch, BreaksCode)
    path = tmp_path / "a.py"
    path.write_text("break_me()\n")

    result = invoke("--select", "TST901", "a.py")

    assert result.exit_code == 2
    assert path.read_text() == "break_me()\n"
    [line] = error_lines(result)
    assert line.startswith("a.py:1:1: TST901 (breaks-code) produced code that does not compile")
    assert "file left unchanged" in line


def test_fixes_that_undo_each_other_do_not_settle(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with_rules(monkeypatch, FooToBar, BarToFoo)
    path = tmp_path / "a.py"
    path.write_text("foo()\n")

    result = invoke("--select", "TST902,TST903", "a.py")

    assert result.exit_code == 2
    assert path.read_text() == "foo()\n"
    [line] = error_lines(result)
    assert "did not settle" in line and "TST902" in line and "TST903" in line


def test_a_crashing_rule_is_one_line_and_the_other_files_go_on(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with_rules(monkeypatch, Crashes)
    (tmp_path / "a_crash.py").write_text("crash_me()\n")
    (tmp_path / "b_train.py").write_text(DP_SCRIPT)

    result = invoke("-j", "1", "--select", "TST904,DDP001", ".")

    assert result.exit_code == 2
    [line] = error_lines(result)
    assert line.startswith("a_crash.py:1:1: internal error in TST904 (crashes) while checking: RuntimeError: boom")
    assert "Traceback" not in result.output
    assert b"DistributedDataParallel" in (tmp_path / "b_train.py").read_bytes()


def test_an_internal_error_carrying_a_syntax_tree_is_still_one_short_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A trial's --elastic run printed 1,800 lines of libcst tree per file (a KeyError's key).
    with_rules(monkeypatch, CrashesOnANode)
    (tmp_path / "a_crash.py").write_text("def crash_me():\n    return [1, 2, 3]\n" * 20)

    result = invoke("-j", "1", "--select", "TST905", ".")

    assert result.exit_code == 2
    [line] = error_lines(result)
    assert line.startswith("a_crash.py:1:1: internal error in TST905 (crashes-on-a-node) while checking: KeyError: Module(")
    assert len(result.output.splitlines()) < 10 and len(line) < 300, result.output


def test_worker_processes_see_the_patched_registry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with_rules(monkeypatch, Crashes, FooToBar, BarToFoo)
    for index in range(3):
        (tmp_path / f"crash{index}.py").write_text("crash_me()\n")
        (tmp_path / f"flip{index}.py").write_text("foo()\n")

    result = invoke("-j", "2", "--select", "TST9", ".")

    assert result.exit_code == 2
    lines = error_lines(result)
    assert len(lines) == 6
    assert sum("internal error in TST904" in line for line in lines) == 3
    assert sum("did not settle" in line for line in lines) == 3


# ------------------------------------------------------------------------------------- fixed point


def test_running_on_its_own_output_changes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "train.py"
    path.write_text(TRAIN_SCRIPT)

    first = invoke("train.py")
    assert first.exit_code == 0, first.output
    migrated = path.read_bytes()
    assert migrated != TRAIN_SCRIPT.encode()
    assert b"DistributedDataParallel(model" in migrated and b"runtime.save(" in migrated

    check = invoke("--check", "train.py")
    assert check.exit_code == 0, check.output
    assert "0 file(s) would be migrated" in check.stderr
    assert invoke("train.py").exit_code == 0
    assert path.read_bytes() == migrated
    assert invoke("lint", "train.py").exit_code == 0


# ---------------------------------------------------------------------------------------- parallel


def test_parallel_run_gives_the_same_bytes_and_report(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    variants = {
        "a_dp.py": DP_SCRIPT,
        "b_crlf.py": DP_SCRIPT.replace("\n", "\r\n"),
        "c_clean.py": "import torch\nx = torch.ones(2)\n",
        "d_plain.py": "print('hello')\n",
        "e_bad.py": "import torch.nn as nn\nnn.DataParallel(\n",
        "f_alias.py": "import torch\nfrom torch.nn import DataParallel as DP\nnet = DP(net)\ntorch.save(net, 'n.pt')\n",
        "g_none.py": "x = 1\n",
        "h_dp.py": DP_SCRIPT.replace("model", "net"),
    }
    outputs = {}
    for jobs in ("1", "2"):
        folder = tmp_path / f"j{jobs}"
        folder.mkdir()
        for name, text in variants.items():
            (folder / name).write_bytes(text.encode())
        monkeypatch.chdir(folder)
        result = invoke("-j", jobs, "--select", "DDP001,DDP007", "-v", ".")
        assert result.exit_code == 2  # e_bad.py
        outputs[jobs] = (result.stdout, result.stderr, {n: (folder / n).read_bytes() for n in variants})
    assert outputs["1"] == outputs["2"]
    assert b"DistributedDataParallel" in outputs["2"][2]["f_alias.py"]


# --------------------------------------------------------------------------------- cheap text check


def test_verbose_counts_files_skipped_by_the_text_check(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(DP_SCRIPT)
    (tmp_path / "util.py").write_text("def add(a, b):\n    return a + b\n")
    (tmp_path / "consts.py").write_text("N = 3\n")

    lint = invoke("lint", "-v", "--select", "DDP001", ".")  # before the migration below rewrites train.py
    assert lint.exit_code == 1, lint.output
    assert "2 skipped by the quick text check" in lint.stderr

    result = invoke("-v", "--select", "DDP001", ".")

    assert result.exit_code == 0, result.output
    assert "(2 skipped by the quick text check)" in result.stderr
    assert "util.py: skipped" in result.stderr and "consts.py: skipped" in result.stderr
    quiet = invoke("--select", "DDP001", ".")
    assert "skipped" not in quiet.stderr


def test_ctrl_c_during_a_write_waits_for_the_write(tmp_path: Path) -> None:
    """A Ctrl-C that lands while a file is written is raised once the file is whole, and no temporary file
    stays behind (it used to, when it landed between the temporary file's creation and its ``try``)."""
    import signal

    target = tmp_path / "train.py"
    target.write_text("old\n")
    real_mkstemp = writer.tempfile.mkstemp

    def mkstemp_then_interrupt(*args, **kwargs):  # type: ignore[no-untyped-def]
        found = real_mkstemp(*args, **kwargs)
        os.kill(os.getpid(), signal.SIGINT)  # as if Ctrl-C came right after the file was created
        return found

    writer.tempfile.mkstemp = mkstemp_then_interrupt  # type: ignore[assignment]
    # (Ctrl-C's own handler, whatever the suite was started with: a job started in the background by a shell without
    # job control inherits SIGINT ignored)
    handler = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            writer.write_atomic(target, b"new\n")
    finally:
        writer.tempfile.mkstemp = real_mkstemp  # type: ignore[assignment]
        signal.signal(signal.SIGINT, handler)
    assert target.read_bytes() == b"new\n"
    assert [p.name for p in tmp_path.iterdir()] == ["train.py"]


def test_a_migration_whose_generated_code_differs_from_libcsts_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """The analysis generates each rewritten module's code reusing the statements kept from before; should that
    ever print other than libcst does (a review once found a dropped last statement), the file is left
    unchanged with a one-line error instead of a silently shorter migration."""
    from ddp_migrate.codemods.analysis import positions
    from ddp_migrate.engine import process

    real = positions.generate

    def printing_a_line_more(module: cst.Module, *args: object) -> tuple[str, object, object]:
        code, spans, made = real(module, *args)  # type: ignore[arg-type]
        return code.replace("\n", "\n# not libcst's\n", 1), spans, made  # (it still compiles)

    monkeypatch.setattr(positions, "generate", printing_a_line_more)
    source = (Path(__file__).resolve().parents[1] / "fixtures" / "scripts" / "dp_multi_gpu.py").read_bytes()
    result = process("train.py", source, [r for r in codemods.ALL_RULES if r.enabled_by_default], Options(), fix=True)
    assert result.output is None and "generated code of the migrated module differs" in (result.error or "")
