"""Only ``\\r\\n``, ``\\r`` and ``\\n`` end a line of Python source: a form feed or a Unicode line separator in
a file (``str.splitlines`` ends lines at both) must not move a TODO, a change's line or a diff line."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from ddp_migrate.cli import cli
from ddp_migrate.codemods.analysis.lines import split_lines

SCRIPT = (
    "import torch\nimport torch.nn as nn\n\x0c\n# part two \u2028 of the file\n"
    "model = nn.Linear(4, 1)\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
    "for step in range(4):\n    x = torch.randn(8, 4)\n    model(x).sum().backward()\n    opt.step()\n"
)


@pytest.mark.parametrize(
    "text",
    ["", "a", "a\n", "a\nb", "a\r\nb\rc\n", "\n\n", "a\x0cb\x0bc\x1cd\x85e\u2028f\u2029g\n"],
)
def test_split_lines_ends_lines_where_python_does(text: str) -> None:
    python_lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    expected = python_lines[:-1] if python_lines[-1] == "" else python_lines
    assert split_lines(text) == expected
    assert "".join(split_lines(text, keepends=True)) == text


def test_a_todo_lands_above_its_statement_after_a_form_feed_and_a_line_separator(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    Path("train.py").write_text(SCRIPT, encoding="utf-8", newline="")
    result = CliRunner().invoke(cli, ["train.py"], catch_exceptions=False)
    lines = split_lines(Path("train.py").read_text(encoding="utf-8"))
    todo = next(i for i, line in enumerate(lines) if "TODO(ddp-migrate)" in line)
    assert lines[todo].startswith("    # TODO(ddp-migrate): training batches")
    assert lines[todo + 1] == "    model(x).sum().backward()"
    assert f"review train.py:{todo + 2}:5: DDP040" in result.output


def test_a_diff_of_a_file_with_a_form_feed_has_no_broken_lines(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    Path("train.py").write_text(SCRIPT, encoding="utf-8", newline="")
    diff = CliRunner().invoke(cli, ["--diff", "train.py"], catch_exceptions=False).output
    assert "No newline at end of file" not in diff
    assert " \x0c\n" in diff and "+from ddp_migrate import runtime\n" in diff
