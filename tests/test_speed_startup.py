"""Start-up (issue 11): ``--version`` and ``--help`` import neither libcst nor the rules.

The command line imports the heavy modules inside the commands that run rules, so a pre-commit hook that
asks for the version, or a user reading the help, does not pay for libcst's import. These tests check what
is imported (a behaviour), never how long it takes.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

HEAVY = ("libcst", "ddp_migrate.codemods", "ddp_migrate.engine", "ddp_migrate.runner", "ddp_migrate.formats", "torch")


def _modules_after(argv: list[str]) -> list[str]:
    """The heavy modules loaded once the command line has run ``argv`` in a fresh interpreter."""
    program = textwrap.dedent(
        f"""
        import sys
        from ddp_migrate.cli import cli
        try:
            cli.main({argv!r}, prog_name="ddp-migrate", standalone_mode=False)
        except SystemExit:
            pass
        heavy = {HEAVY!r}
        print(sorted(m for m in sys.modules if any(m == h or m.startswith(h + ".") for h in heavy)))
        """
    )
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return eval(done.stdout.strip().splitlines()[-1])  # a printed list of module names


@pytest.mark.parametrize(
    "argv",
    [["--version"], ["--help"], ["lint", "--help"], ["migrate", "--help"], ["example"], ["example", "--list"]],
)
def test_light_commands_import_no_libcst(argv: list[str]) -> None:
    assert _modules_after(argv) == []


def test_python_dash_m_version_is_light() -> None:
    program = "import runpy, sys; sys.argv = ['ddp_migrate', '--version']\ntry:\n    runpy.run_module('ddp_migrate', run_name='__main__')\nexcept SystemExit:\n    pass\nprint('libcst' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=120)
    assert done.stdout.startswith("ddp-migrate, version ")
    assert done.stdout.strip().splitlines()[-1] == "False"


def test_rules_still_load_for_commands_that_run_them() -> None:
    assert "libcst" in _modules_after(["rules"])


def test_choices_spelled_in_the_cli_match_their_sources() -> None:
    from ddp_migrate import cli, formats
    from ddp_migrate.codemods.base import BatchSizePolicy

    assert cli.FORMATS == formats.FORMATS
    assert cli.BATCH_SIZE_CHOICES == tuple(policy.value for policy in BatchSizePolicy)
