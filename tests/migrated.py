"""Migrate one script through the command line as a user does, for the tests that read what it wrote."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from ddp_migrate.cli import cli
from launch import LaunchResult, run_python, run_torchrun


def migrate_script(folder: Path, source: str, name: str = "train.py") -> tuple[str, str, int]:
    """Write ``source`` as ``folder/name``, migrate it in place; its new text, the report, the exit code."""
    script = folder / name
    script.write_text(source)
    result = CliRunner().invoke(cli, [str(script)], catch_exceptions=False)
    return script.read_text(), result.output, result.exit_code


def lint_findings(folder: Path, source: str, codes: str, name: str = "train.py") -> list[str]:
    """Write ``source`` as ``folder/name`` and lint it for the rules ``codes`` selects (``DDP041``, ``DDP008,DDP016``):
    the finding lines (the linter itself must not fail)."""
    path = folder / name
    path.write_text(source)
    result = CliRunner().invoke(cli, ["lint", "-q", "--select", codes, str(path)])
    assert result.exit_code in (0, 1), result.output
    return [line for line in result.output.splitlines() if line.strip()]


def train_original_and_migrated(folder: Path, source: str, nproc: int = 2, timeout: float = 120) -> tuple[Path, Path, LaunchResult]:
    """Run ``source`` as ``train.py`` with plain python in ``folder/original``; migrate a copy in
    ``folder/migrated`` and run it under torchrun with ``nproc`` processes. The two folders and the torchrun
    launch (a failure or a timeout of either run fails the test)."""
    original, migrated = folder / "original", folder / "migrated"
    original.mkdir()
    migrated.mkdir()
    (original / "train.py").write_text(source)
    migrate_script(migrated, source)
    run_python(original / "train.py", cwd=original, timeout=timeout)
    launch = run_torchrun(migrated / "train.py", nproc_per_node=nproc, cwd=migrated, timeout=timeout)
    return original, migrated, launch


def saved_states(folder: Path, source: str, saved: str = "final.pt") -> tuple[dict, list[dict]]:
    """Train ``source`` as the original (plain python), its migrated copy under torchrun with 2 processes and
    alone (plain python, in a folder of its own); what the original saved to ``saved`` and what each migrated
    run saved there (torchrun's, then the lone run's)."""
    import torch

    original, migrated, _ = train_original_and_migrated(folder, source)
    plain = folder / "plain"
    plain.mkdir()
    run_python(migrated / "train.py", cwd=plain, timeout=120)
    load = lambda at: torch.load(at / saved, weights_only=True)  # noqa: E731
    return load(original), [load(migrated), load(plain)]


#: A ``say`` that writes each line in one ``write``, so the lines of the ranks of a torchrun launch do not
#: interleave (``print`` writes its parts one by one to an unbuffered stream).
_SAY = (
    "import os\n\n\ndef say(*parts, flush=False):\n"
    '    os.write(1, (" ".join(map(str, parts)) + "\\n").encode())\n'
)


def printed_on_every_rank(migrated: str) -> str:
    """A migrated script whose ``runtime.print0(...)`` lines print on every rank, one whole line each: a test
    compares what the ranks computed."""
    every_rank = migrated.replace("runtime.print0(", "say(")
    assert every_rank != migrated, "the migrated script prints nothing through runtime.print0"
    return _SAY + every_rank
