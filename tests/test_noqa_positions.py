"""Issue 12, items 1 and 3, through the real command line (click's ``CliRunner`` on ``ddp_migrate.cli:cli``).

Item 1: a line with ``# noqa: CODE`` (or a bare ``# noqa``) is neither reported nor rewritten by that rule,
in a lone script and in a program of several modules; the other rules still migrate the rest.

Item 3: the migration report gives each change at its line in the ORIGINAL file (not in the intermediate
text a later fix saw after earlier fixes inserted lines), sorted by line then code, and that line is the
one the ``--diff`` hunk removes or rewrites.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from ddp_migrate.cli import cli

TRAIN = '''\
"""Train a small regression model on whatever GPUs there are."""
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


def main():
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    data = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
    loader = DataLoader(data, batch_size=8, shuffle=True)
    model = nn.Linear(4, 1).to(device)
    model = nn.DataParallel(model){comment}
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(3):
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            optimizer.zero_grad()
            loss = nn.functional.mse_loss(model(x), y)
            loss.backward()
            optimizer.step()
        print(f"epoch {{epoch}} loss {{loss.item():.4f}}")
    torch.save(model.state_dict(), "model.pt")


if __name__ == "__main__":
    main()
'''

WRAP_LINE = 12  # 1-based line of the nn.DataParallel wrap in TRAIN


def invoke(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)


def report_changes(stderr: str, path: str = "") -> list[tuple[str, int]]:
    """``(code, line)`` of every change line of the migration report (of one file when ``path`` is given)."""
    changes, inside = [], not path
    for line in stderr.splitlines():
        if not line.startswith(" "):
            inside = not path or line.startswith(f"{path}:")
            continue
        match = re.match(r"^  (DDP\d+) line (\d+): ", line)
        if inside and match:
            changes.append((match.group(1), int(match.group(2))))
    return changes


def removed_lines(diff: str) -> dict[str, int]:
    """Each line a unified diff removes (``-`` lines), with its 1-based line number in the old file."""
    removed: dict[str, int] = {}
    old = 0
    for line in diff.splitlines():
        if line.startswith("@@"):
            old = int(re.match(r"@@ -(\d+)", line).group(1))
        elif line.startswith("---") or line.startswith("+++"):
            continue
        elif line.startswith("-"):
            removed[line[1:]] = old
            old += 1
        elif line.startswith(" "):
            old += 1
    return removed


# ----------------------------------------------------------------------------------------------- item 1


@pytest.mark.parametrize("comment", ["  # noqa: DDP001", "  # noqa", "  # NOQA:DDP001,E501", "  # type: ignore  # noqa: DDP001"])
def test_noqa_line_is_left_byte_identical_and_the_rest_is_migrated(tmp_path: Path, comment: str) -> None:
    source = TRAIN.format(comment=comment)
    (tmp_path / "train.py").write_text(source)
    result = invoke("train.py")
    assert result.exit_code == 0, result.output
    migrated = (tmp_path / "train.py").read_text()
    wrap = source.splitlines()[WRAP_LINE - 1]
    assert wrap in migrated.splitlines(), "the noqa'd line must stay byte-identical"
    assert "DistributedDataParallel" not in migrated
    # the other rules still migrate the file
    assert "runtime.setup(" in migrated
    assert "DistributedSampler(data, shuffle=True)" in migrated
    assert "runtime.print0(" in migrated
    codes = [code for code, _ in report_changes(result.stderr)]
    assert "DDP001" not in codes and {"DDP003", "DDP005", "DDP007"} <= set(codes)
    assert "DDP001" not in result.stderr  # silenced: not reported for review either


def test_noqa_for_another_code_does_not_stop_the_fix(tmp_path: Path) -> None:
    source = TRAIN.format(comment="  # noqa: DDP007")
    (tmp_path / "train.py").write_text(source)
    assert invoke("train.py").exit_code == 0
    migrated = (tmp_path / "train.py").read_text()
    assert "model = DistributedDataParallel(model, device_ids=runtime.device_ids())  # noqa: DDP001" not in migrated
    assert "DistributedDataParallel(model, device_ids=runtime.device_ids())  # noqa: DDP007" in migrated


def test_noqa_on_the_first_line_of_a_multi_line_statement(tmp_path: Path) -> None:
    source = "import torch\nimport torch.nn as nn\nmodel = nn.DataParallel(  # noqa: DDP001\n    nn.Linear(2, 2),\n)\nprint(model)\n"
    (tmp_path / "a.py").write_text(source)
    assert invoke("--select", "DDP001", "a.py").exit_code == 0
    assert (tmp_path / "a.py").read_text() == source


def test_some_findings_silenced_skips_the_whole_fix_and_reports_the_others(tmp_path: Path) -> None:
    """A fix rewrites all its matches at once; when one of them is silenced the fix is skipped whole and the
    matches that are not silenced stay in the report for a human (documented in ``blocked_by_noqa``)."""
    source = TRAIN.format(comment="  # noqa: DDP001").replace(
        "    optimizer =", "    teacher = nn.DataParallel(nn.Linear(4, 1).to(device))\n    teacher(torch.zeros(1, 4))\n    optimizer =", 1
    )
    (tmp_path / "two.py").write_text(source)
    result = invoke("--select", "DDP001", "two.py")
    # Nothing rewritten; the match left to a human gets its TODO line, and the report points below it.
    todo = "    # TODO(ddp-migrate): nn.DataParallel: use DistributedDataParallel with one process per device (launched by torchrun)\n"
    teacher = "    teacher = nn.DataParallel("
    assert (tmp_path / "two.py").read_text() == source.replace(teacher, todo + teacher, 1)
    review = [line for line in result.stderr.splitlines() if line.lstrip().startswith("review ")]
    assert len(review) == 1 and f"two.py:{WRAP_LINE + 2}:15: DDP001" in review[0], result.stderr
    assert result.exit_code == 1  # an item still needs a human


def test_noqa_in_a_module_of_a_program(tmp_path: Path) -> None:
    """process_program: the entry and the module it imports are migrated together; the noqa'd wrap in the
    module stays, and the module is not rewritten at all (nothing else there to migrate)."""
    (tmp_path / "prog").mkdir()
    entry = 'import torch\nimport torch.nn as nn\nfrom helpers import wrap\n\nmodel = wrap(nn.Linear(2, 2))\nprint("ok")\ntorch.save(model.state_dict(), "m.pt")\n'
    helpers = "import torch.nn as nn\n\n\ndef wrap(model):\n    return nn.DataParallel(model){comment}\n"
    for comment, kept in (("  # noqa: DDP001", True), ("  # noqa", True), ("", False)):
        (tmp_path / "prog" / "train.py").write_text(entry)
        (tmp_path / "prog" / "helpers.py").write_text(helpers.format(comment=comment))
        result = invoke("prog")
        assert result.exit_code == 0, result.output
        after = (tmp_path / "prog" / "helpers.py").read_text()
        assert (after == helpers.format(comment=comment)) is kept, (comment, after)
        assert ("DDP001" in result.stderr) is not kept
        if not kept:  # the report's line is the wrap's line in the original module
            assert report_changes(result.stderr, "prog/helpers.py") == [("DDP001", 5)]


# ----------------------------------------------------------------------------------------------- item 3


def test_report_lines_are_original_lines_sorted_and_agree_with_the_diff(tmp_path: Path) -> None:
    """Early fixes insert imports and the process-group set-up above the wrap, the print and the save; the
    later fixes of those lines are still reported at their lines in the file the user wrote."""
    source = TRAIN.format(comment="")
    (tmp_path / "train.py").write_text(source)
    result = invoke("--diff", "train.py")
    assert result.exit_code == 1  # --diff: the file would change
    changes = report_changes(result.stderr)
    assert changes == sorted(changes, key=lambda change: (change[1], change[0]))
    original = source.splitlines()
    where = dict(changes)
    assert where["DDP001"] == WRAP_LINE and "nn.DataParallel(model)" in original[where["DDP001"] - 1]
    assert "DataLoader(data" in original[where["DDP005"] - 1]
    assert "print(" in original[where["DDP010"] - 1]
    assert "torch.save(" in original[where["DDP007"] - 1]
    # the --diff hunks remove those very lines at the same positions of the old file
    removed = removed_lines(result.stdout)
    for code in ("DDP001", "DDP005", "DDP010", "DDP007"):
        assert removed[original[where[code] - 1]] == where[code], code
    # the file is left alone under --diff
    assert (tmp_path / "train.py").read_text() == source


def test_report_lines_with_a_script_whose_header_grows(tmp_path: Path) -> None:
    """A later fix rewriting a line far down (torch.save) after earlier ones inserted several lines."""
    source = (
        "import torch\n"
        "import torch.nn as nn\n"
        "\n"
        "model = nn.DataParallel(nn.Linear(2, 2).cuda())\n"
        "x = 1\n"
        "y = 2\n"
        "torch.save(model.state_dict(), 'm.pt')\n"
    )
    (tmp_path / "s.py").write_text(source)
    result = invoke("--select", "DDP001,DDP007", "s.py")
    assert result.exit_code == 0, result.output
    assert len((tmp_path / "s.py").read_text().splitlines()) > len(source.splitlines())
    assert report_changes(result.stderr) == [("DDP001", 4), ("DDP007", 7)]
