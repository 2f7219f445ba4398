"""The README documents what the code does: its rule table is generated from the rules."""

from __future__ import annotations

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
