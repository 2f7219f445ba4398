"""Migrate one script through the command line as a user does, for the tests that read what it wrote."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from ddp_migrate.cli import cli


def migrate_script(folder: Path, source: str, name: str = "train.py") -> tuple[str, str, int]:
    """Write ``source`` as ``folder/name``, migrate it in place; its new text, the report, the exit code."""
    script = folder / name
    script.write_text(source)
    result = CliRunner().invoke(cli, [str(script)], catch_exceptions=False)
    return script.read_text(), result.output, result.exit_code
