"""The README documents what the code does: its rule table is generated from the rules."""

from __future__ import annotations

import re
from pathlib import Path

from ddp_migrate.registry import all_rules
from ddp_migrate.docs import render_readme

README = Path(__file__).resolve().parent.parent / "README.md"


def test_readme_rule_table_is_current() -> None:
    text = README.read_text(encoding="utf-8")
    assert render_readme(text) == text, "README rule table is stale: run python -m ddp_migrate.docs"


def test_readme_names_every_rule() -> None:
    text = README.read_text(encoding="utf-8")
    assert all(rule.code in text and rule.name in text for rule in all_rules())


def test_readme_setup_commands_are_what_ci_runs() -> None:
    text = README.read_text(encoding="utf-8")
    ci = (README.parent / ".ci" / "run").read_text(encoding="utf-8")
    block = text.split("## Set up", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    commands = [line for line in block.strip().splitlines() if line.strip()]
    assert len(commands) == 2
    ci_commands = [line for line in ci.splitlines() if line.strip() and not line.startswith(("#", "set ", "cd "))]
    assert ci_commands == commands


def _blocks(text: str, language: str) -> list[str]:
    return [block.split("```", 1)[0] for block in text.split(f"```{language}\n")[1:]]


def test_readme_documents_every_option_of_every_command() -> None:
    import click

    from ddp_migrate.cli import cli

    text = README.read_text(encoding="utf-8")
    missing = []
    for name, command in cli.commands.items():
        assert f"ddp-migrate {name}" in text or name == "migrate", name
        for param in command.params:
            if isinstance(param, click.Option):
                names = [opt for opt in [*param.opts, *param.secondary_opts] if opt.startswith("--")]
                if not any(re.search(rf"(?<![\w-]){re.escape(opt)}(?![\w-])", text) for opt in names):
                    missing.append(f"{name} {names}")
    assert not missing, f"options the README does not document: {missing}"


def test_readme_github_workflow_parses_and_its_commands_run(tmp_path: Path) -> None:
    import json
    import os
    import shlex
    import subprocess
    import sys

    yaml = __import__("yaml")
    text = README.read_text(encoding="utf-8")
    [workflow] = [block for block in _blocks(text, "yaml") if "upload-sarif" in block]
    parsed = yaml.safe_load(workflow)
    steps = parsed["jobs"]["lint"]["steps"]
    assert any(step.get("uses", "").startswith("github/codeql-action/upload-sarif@") for step in steps)
    sarif_file = next(step["with"]["sarif_file"] for step in steps if "with" in step and "sarif_file" in step["with"])
    (tmp_path / "train.py").write_text("import torch\nimport torch.nn as nn\nmodel = nn.DataParallel(model)\n")
    commands = [step["run"].split("#", 1)[0].strip() for step in steps if step.get("run", "").startswith("ddp-migrate ")]
    assert len(commands) == 2
    codes = []
    for command in commands:
        args = shlex.split(command)[1:]
        done = subprocess.run([sys.executable, "-m", "ddp_migrate", *args], cwd=tmp_path, capture_output=True, text=True, timeout=120, env={**os.environ, "NO_COLOR": "1"})
        codes.append(done.returncode)
    assert codes == [0, 1], "the SARIF step passes (--exit-zero), the annotation step fails on findings"
    log = json.loads((tmp_path / sarif_file).read_text())
    assert log["runs"][0]["results"][0]["ruleId"] == "DDP001"


def test_the_readmes_example_diff_is_what_the_tool_writes() -> None:
    """The quick start's diff of ``fixtures/scripts/dp_wrap_first.py`` (it had gone stale: other imports, no
    wrapping of the lines the migration writes)."""
    from click.testing import CliRunner

    from ddp_migrate.cli import cli

    text = README.read_text(encoding="utf-8")
    after = text.index("`fixtures/scripts/dp_wrap_first.py` it is:")
    start = text.index("```diff\n", after) + len("```diff\n")
    shown = text[start : text.index("```", start)]
    fixture = README.parent / "fixtures" / "scripts" / "dp_wrap_first.py"
    output = CliRunner().invoke(cli, ["--diff", str(fixture)], catch_exceptions=False).output
    diff = output[output.index("@@") : output.index(f"{fixture}: would be migrated")]
    assert shown == diff
