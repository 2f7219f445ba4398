"""Jupyter notebooks through the real command line: folders are walked for them, ``lint`` reports per cell
(``path:cell N:line:col``), IPython magics and shell lines are skipped safely, and ``migrate`` writes a
torchrun-ready script beside the notebook, which itself stays byte for byte as it was.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import jsonschema
import pytest
from click.testing import CliRunner, Result

from ddp_migrate import codemods
from ddp_migrate.cli import cli
from ddp_migrate.notebook import HEADER, extract, neutralise

SCHEMAS = Path(__file__).resolve().parent / "schemas"

SETUP = "import torch\nimport torch.nn as nn\n"
TRAIN = 'model = nn.DataParallel(model)\ntorch.save(model, "m.pt")\n'


def notebook(path: Path, *cells: tuple[str, str]) -> Path:
    """Write a notebook with (cell_type, source) cells; sources as lists of lines, as Jupyter writes them."""
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {
        "cells": [
            {"cell_type": kind, "metadata": {}, "source": source.splitlines(keepends=True), **({"outputs": [], "execution_count": None} if kind == "code" else {})}
            for kind, source in cells
        ],
        "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    path.write_text(json.dumps(payload, indent=1) + "\n")
    return path


def invoke(*args: str, input: str | None = None) -> Result:
    return CliRunner().invoke(cli, list(args), input=input, env={"NO_COLOR": "1"}, catch_exceptions=False)


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(codemods, "ALL_RULES", tuple(rule for rule in codemods.ALL_RULES if rule.code in ("DDP001", "DDP007")))


def standard(tmp_path: Path) -> Path:
    return notebook(
        tmp_path / "train.ipynb",
        ("markdown", "# Training\nwith `nn.DataParallel(model)` in the prose\n"),
        ("code", "%matplotlib inline\n!pip install torch\n" + SETUP),
        ("code", "files = !ls\nlen?\n" + TRAIN),
    )


def test_lint_reports_positions_per_cell_and_skips_magics(tmp_path: Path) -> None:
    standard(tmp_path)
    result = invoke("lint", "train.ipynb")
    assert result.exit_code == 1, result.output
    assert result.stdout.splitlines() == [
        "train.ipynb:cell 2:3:9: DDP001 nn.DataParallel: use DistributedDataParallel with one process per device (launched by torchrun)",
        "train.ipynb:cell 2:4:1: DDP007 torch.save runs on every process: save on rank 0 only (runtime.save)",
    ]
    assert "Found 2 problem(s) in 1 file(s)" in result.stderr


def test_folders_are_walked_for_notebooks_but_not_checkpoints(tmp_path: Path) -> None:
    standard(tmp_path / "nb")
    notebook(tmp_path / "nb" / ".ipynb_checkpoints" / "train-checkpoint.ipynb", ("code", SETUP + TRAIN))
    (tmp_path / "nb" / "train.py").write_text(SETUP + TRAIN)
    result = invoke("lint", "nb")
    paths = {line.split(":", 1)[0] for line in result.stdout.splitlines()}
    assert paths == {"nb/train.ipynb", "nb/train.py"}


def test_json_output_carries_the_cell_and_matches_the_schema(tmp_path: Path) -> None:
    standard(tmp_path)
    result = invoke("lint", "--format", "json", "train.ipynb")
    findings = json.loads(result.stdout)
    jsonschema.validate(findings, json.loads((SCHEMAS / "lint-json.schema.json").read_text()))
    assert [(f["cell"], f["line"], f["column"], f["code"]) for f in findings] == [(2, 3, 9, "DDP001"), (2, 4, 1, "DDP007")]


def test_syntax_error_is_reported_in_its_cell(tmp_path: Path) -> None:
    notebook(tmp_path / "bad.ipynb", ("code", SETUP), ("code", "x = 1\ndef f(:\n    pass\n"))
    result = invoke("lint", "bad.ipynb")
    assert result.exit_code == 2
    assert re.search(r"^bad\.ipynb:cell 2:2:\d+: cannot parse", result.stderr, flags=re.M), result.stderr


def test_a_file_that_is_not_a_notebook_is_one_error_line(tmp_path: Path) -> None:
    (tmp_path / "broken.ipynb").write_text("{ not json")
    result = invoke("lint", "broken.ipynb")
    assert result.exit_code == 2
    assert "broken.ipynb:1:1: not a readable notebook" in result.stderr


def test_magics_are_neutralised_only_in_cells_that_do_not_compile() -> None:
    valid = 'text = """\n%not a magic\n!nor this\n"""\n'
    assert neutralise(valid) == valid
    assert neutralise("%%bash\necho hi\n") == "# %%bash\n# echo hi\n"
    assert neutralise("for i in range(2):\n    !echo $i\n") == "for i in range(2):\n    pass  # !echo $i\n"
    assert neutralise("out = !ls\nprint(out)\n") == "out = None  # !ls\nprint(out)\n"
    extracted = extract(json.dumps({"cells": [{"cell_type": "code", "source": ["a = 1\n", "b = 2"]}]}).encode())
    assert extracted.text == "# %% cell 1\na = 1\nb = 2\n\n"
    assert extracted.position(3) == (1, 2)


def test_migrate_writes_a_script_beside_the_notebook_and_leaves_it_alone(tmp_path: Path) -> None:
    path = standard(tmp_path)
    before = path.read_bytes()
    result = invoke("train.ipynb")
    assert result.exit_code == 0, result.output
    assert path.read_bytes() == before, "the notebook is left byte for byte as it was"
    script = (tmp_path / "train_ddp.py").read_text()
    assert script.startswith(HEADER.format(name="train.ipynb"))
    assert "DistributedDataParallel(model" in script and "runtime.save(model" in script
    assert "# %matplotlib inline" in script and "# !pip install torch" in script
    compile(script, "train_ddp.py", "exec")
    assert "train.ipynb: migrated code written to train_ddp.py, 2 change(s); the notebook is left as it is" in result.stderr
    assert "DDP001 cell 2 line 3:" in result.stderr
    assert "launch it with: torchrun --standalone --nproc_per_node=<processes> train_ddp.py" in result.stderr
    again = invoke("train.ipynb")
    assert again.exit_code == 0 and "0 file(s) migrated, 1 unchanged" in again.stderr
    assert (tmp_path / "train_ddp.py").read_text() == script


def test_check_and_diff_on_a_notebook_write_nothing(tmp_path: Path) -> None:
    standard(tmp_path)
    check = invoke("--check", "train.ipynb")
    assert check.exit_code == 1
    assert "migrated code would be written to train_ddp.py" in check.stderr
    diff = invoke("--diff", "train.ipynb")
    assert diff.exit_code == 1
    assert diff.stdout.startswith("--- /dev/null\n+++ b/train_ddp.py\n")
    assert not (tmp_path / "train_ddp.py").exists()


def test_an_existing_script_it_did_not_write_is_never_overwritten(tmp_path: Path) -> None:
    standard(tmp_path)
    mine = tmp_path / "train_ddp.py"
    mine.write_text("print('my own work')\n")
    result = invoke("train.ipynb")
    assert result.exit_code == 2
    assert "train_ddp.py exists and was not written by ddp-migrate from this notebook: not overwritten" in result.stderr
    assert mine.read_text() == "print('my own work')\n"


def test_a_script_it_wrote_before_is_updated_and_the_report_says_so(tmp_path: Path) -> None:
    path = standard(tmp_path)
    assert invoke("train.ipynb").exit_code == 0
    notebook(path, ("code", SETUP), ("code", TRAIN + "print('more')\n"))
    result = invoke("train.ipynb")
    assert result.exit_code == 0, result.output
    assert "migrated code rewritten into train_ddp.py" in result.stderr
    assert "print('more')" in (tmp_path / "train_ddp.py").read_text()


def test_notebook_on_stdin(tmp_path: Path) -> None:
    source = standard(tmp_path).read_text()
    lint = invoke("lint", "--stdin-filename", "nb/train.ipynb", "-", input=source)
    assert lint.stdout.startswith("nb/train.ipynb:cell 2:3:9: DDP001 ")
    migrated = invoke("--stdin-filename", "nb/train.ipynb", "-", input=source)
    assert migrated.exit_code == 0
    assert migrated.stdout.startswith(HEADER.format(name="train.ipynb"))
    compile(migrated.stdout, "stdout", "exec")


def test_lint_fix_of_a_notebook_on_stdin_gives_the_notebook_back_as_it_came(tmp_path: Path) -> None:
    """An editor pipes the notebook through ``lint --fix`` and takes standard output as the new notebook: a
    notebook is never rewritten (its migration is a script beside it), so it comes back byte for byte, and its
    findings are reported on standard error, none of them counted as fixed."""
    source = standard(tmp_path).read_text()  # DDP001 and DDP007: both unsafe fixes
    for extra in ([], ["--unsafe-fixes"]):
        result = invoke("lint", "--fix", *extra, "--stdin-filename", "train.ipynb", "-", input=source)
        assert result.stdout == source
        assert "train.ipynb:cell 2:3:9: DDP001 " in result.stderr and " 0 fixed" in result.stderr


def test_the_summary_of_a_notebook_on_stdin_offers_no_fix_that_stdin_cannot_apply(tmp_path: Path) -> None:
    """Standard input never rewrites a notebook, so the summary does not send the user to a ``--fix`` or
    ``--unsafe-fixes`` run on standard input that would fix nothing: it points to the file itself."""
    source = standard(tmp_path).read_text()  # DDP001 and DDP007: both fixable (unsafe)
    for args in (["lint"], ["lint", "--fix"], ["lint", "--fix", "--unsafe-fixes"]):
        result = invoke(*args, "--stdin-filename", "nb/train.ipynb", "-", input=source)
        summary = result.stderr.splitlines()[-1]
        assert summary.startswith("Found 2 problem(s) in 1 file(s)"), summary
        assert "fixable with" not in summary, summary
        assert "2 fixable in the file nb/train.ipynb itself, not on standard input" in summary, summary
    on_file = invoke("lint", "train.ipynb")
    assert "2 fixable with: ddp-migrate lint --fix --unsafe-fixes" in on_file.stderr


def test_notebook_without_anything_to_migrate(tmp_path: Path) -> None:
    notebook(tmp_path / "plot.ipynb", ("code", "import math\nprint(math.pi)\n"))
    result = invoke("-v", "plot.ipynb")
    assert result.exit_code == 0
    assert "plot.ipynb: nothing to migrate (the notebook is left as it is)" in result.stderr
    assert not (tmp_path / "plot_ddp.py").exists()


def test_lint_fix_on_a_notebook_applies_only_the_safe_fixes_unless_asked(tmp_path: Path) -> None:
    standard(tmp_path)  # DDP001 and DDP007: both unsafe fixes
    safe = invoke("lint", "--fix", "train.ipynb")
    script = tmp_path / "train_ddp.py"
    assert safe.exit_code == 1, safe.output
    assert not script.exists() or "DistributedDataParallel" not in script.read_text()
    unsafe = invoke("lint", "--fix", "--unsafe-fixes", "train.ipynb")
    assert "DistributedDataParallel" in script.read_text(), unsafe.output
