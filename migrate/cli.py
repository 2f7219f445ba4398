"""The ``ddp-migrate`` command line.

``ddp-migrate PATH...`` migrates (the ``migrate`` subcommand is the default, so a path is never mistaken
for a command: ``ddp-migrate ./lint`` is a path). ``lint``, ``rules`` and ``explain`` are subcommands.
Exit codes follow ruff and black: 0 nothing left to report, 1 findings remain or ``--check`` would change a
file, 2 an error.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import click

from ddp_migrate import __version__, codemods
from ddp_migrate.codemods.base import BatchSizePolicy, Options, Rule

from . import formats, report
from .config import Config, ConfigError, load_config
from .discovery import discover, is_excluded
from .engine import FileResult, process
from .registry import all_rules, rule_for_code, without_lint_only
from .runner import default_jobs, run, write_result
from .selection import SelectionError, drop_rules, normalise_codes, select_rules

EXIT_CLEAN, EXIT_FINDINGS, EXIT_ERROR = 0, 1, 2
COMMANDS = ("migrate", "lint", "rules", "explain")


class DefaultToMigrate(click.Group):
    """A group that runs ``migrate`` when the first argument is not one of its commands."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and args[0] not in ("--help", "-h", "--version"):
            args = ["migrate", *args]
        return super().parse_args(ctx, args)


@dataclass
class Settings:
    """Command-line flags merged over the configuration file."""

    config: Config
    rules: list[type[Rule]]
    per_file_ignores: dict[str, list[str]]
    excludes: list[str]
    options: Options
    jobs: int
    quiet: bool
    verbose: bool


def _fail(message: str) -> None:
    click.echo(f"ddp-migrate: error: {message}", err=True)
    sys.exit(EXIT_ERROR)


def resolve_settings(
    paths: Sequence[str],
    select: Sequence[str],
    ignore: Sequence[str],
    exclude: Sequence[str],
    batch_size: str | None,
    jobs: int | None,
    quiet: bool,
    verbose: bool,
) -> Settings:
    """Merge flags over ``[tool.ddp-migrate]``; a bad configuration or code is a one-line error (exit 2)."""
    try:
        config = load_config(paths)
        chosen_select = normalise_codes(select) if select else normalise_codes(config.select)
        chosen_ignore = normalise_codes(ignore) if ignore else normalise_codes(config.ignore)
        per_file_ignores = {glob: normalise_codes(codes) for glob, codes in config.per_file_ignores.items()}
    except (ConfigError, SelectionError) as error:
        _fail(str(error))
        raise  # unreachable: _fail exits
    policy = BatchSizePolicy(batch_size) if batch_size else config.batch_size
    return Settings(
        config=config,
        rules=select_rules(chosen_select, chosen_ignore),
        per_file_ignores=per_file_ignores,
        excludes=list(exclude) if exclude else config.exclude,
        options=Options(batch_size=policy),
        jobs=jobs or default_jobs(),
        quiet=quiet,
        verbose=verbose and not quiet,
    )


def common_options(function: Callable) -> Callable:
    """The options every file-processing command takes."""
    options = [
        click.argument("paths", nargs=-1, required=False, metavar="[PATH]..."),
        click.option("--select", multiple=True, metavar="CODES", help="Only these rule codes or prefixes (comma-separated, e.g. DDP0)."),
        click.option("--ignore", multiple=True, metavar="CODES", help="Skip these rule codes or prefixes."),
        click.option("--exclude", multiple=True, metavar="GLOB", help="Skip files and folders matching the glob (repeatable)."),
        click.option("-j", "--jobs", type=click.IntRange(min=0), default=None, help="Worker processes (default, or 0: all cores)."),
        click.option("-q", "--quiet", is_flag=True, help="Print only errors (lint: the findings too, without the summary)."),
        click.option("-v", "--verbose", is_flag=True, help="Also list unchanged and skipped files."),
    ]
    for option in reversed(options):
        function = option(function)
    return function


def _nothing_to_do(paths: Sequence[str], select: Sequence[str], ignore: Sequence[str]) -> None:
    """No paths at all (pre-commit with no matching files): check the codes, then exit 0 saying nothing."""
    if paths:
        return
    try:
        normalise_codes(select)
        normalise_codes(ignore)
    except SelectionError as error:
        _fail(str(error))
    sys.exit(EXIT_CLEAN)


def _files(paths: Sequence[str], settings: Settings) -> tuple[list[Path], list[str], int]:
    found = discover(paths, settings.excludes, settings.config.root)
    return found.files, found.errors, found.excluded


def _rules_for(settings: Settings) -> Callable[[Path], Sequence[type[Rule]]]:
    """The rules for one file: the selected ones less those its ``per-file-ignores`` globs drop."""

    def rules_for(path: Path) -> Sequence[type[Rule]]:
        resolved = path.resolve()
        dropped = [
            code
            for glob, codes in settings.per_file_ignores.items()
            if is_excluded(resolved, [glob], settings.config.root)
            for code in codes
        ]
        return drop_rules(settings.rules, dropped) if dropped else settings.rules

    return rules_for


def _stdin_result(settings: Settings, fix: bool) -> FileResult:
    data = sys.stdin.buffer.read()
    return process("-", data, settings.rules, settings.options, fix)


@click.group(cls=DefaultToMigrate, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "--version", prog_name="ddp-migrate")
def cli() -> None:
    """Rewrite single-GPU and nn.DataParallel PyTorch scripts into torchrun-ready DDP code.

    \b
    ddp-migrate train.py            migrate in place (same as: ddp-migrate migrate train.py)
    ddp-migrate --diff train.py     show the change, write nothing
    ddp-migrate lint src/           report DDP pitfalls (exit 1 when any are found)
    ddp-migrate rules               list the rules
    ddp-migrate explain DDP001      document one rule
    """


@cli.command("migrate")
@common_options
@click.option("--diff", "show_diff", is_flag=True, help="Print a unified diff per file; write nothing.")
@click.option("--check", is_flag=True, help="Write nothing; exit 1 if any file would change.")
@click.option(
    "--batch-size",
    type=click.Choice([p.value for p in BatchSizePolicy]),
    default=None,
    help="global (default): keep the original batch as the global batch; per-process: keep it per process.",
)
def migrate_command(
    paths: tuple[str, ...],
    select: tuple[str, ...],
    ignore: tuple[str, ...],
    exclude: tuple[str, ...],
    jobs: int | None,
    quiet: bool,
    verbose: bool,
    show_diff: bool,
    check: bool,
    batch_size: str | None,
) -> None:
    """Migrate files in place (folders are walked for *.py; '-' reads stdin and writes stdout).

    With no PATH at all there is nothing to do: exit 0 without a word (as pre-commit expects).
    """
    _nothing_to_do(paths, select, ignore)
    settings = resolve_settings(paths, select, ignore, exclude, batch_size, jobs, quiet, verbose)
    settings.rules = without_lint_only(settings.rules)
    write = not (show_diff or check)
    color = sys.stdout.isatty()
    errors: list[str] = []
    results: list[FileResult] = []
    if "-" in paths:
        result = _stdin_result(settings, fix=True)
        results.append(result)
        if result.error:
            errors.append(result.error)
        elif show_diff:
            click.echo(report.unified_diff(result, color), nl=False)
        elif write:
            sys.stdout.buffer.write(result.output if result.output is not None else result.original)
            sys.stdout.buffer.flush()
    file_paths = [p for p in paths if p != "-"]
    if file_paths:
        files, discovery_errors, excluded = _files(file_paths, settings)
        errors.extend(discovery_errors)
        with _progress(files, settings) as advance:
            for result in run(files, _rules_for(settings), settings.options, fix=True, jobs=settings.jobs):
                advance()
                results.append(result)
                if result.error:
                    errors.append(result.error)
                    continue
                if show_diff and result.changed:
                    click.echo(report.unified_diff(result, color), nl=False)
                if write:
                    failure = write_result(result)
                    if failure:
                        errors.append(failure)
        if settings.verbose and excluded:
            click.echo(f"{excluded} path(s) excluded", err=True)
    if not settings.quiet:
        for result in results:
            if result.error:
                continue
            for line in report.migration_summary(result, settings.verbose, written=write):
                click.echo(line, err=True)
    for error in errors:
        click.echo(error, err=True)
    changed = sum(r.changed for r in results)
    needs_human = sum(len(r.findings) for r in results if not r.error)
    if not settings.quiet:
        verb = "would be migrated" if not write else "migrated"
        skipped = sum(r.skipped for r in results)
        line = f"{changed} file(s) {verb}, {len(results) - changed - len([r for r in results if r.error])} unchanged"
        if settings.verbose:
            line += f" ({skipped} skipped by the quick text check)"
        line += f", {needs_human} item(s) need a human, {len(errors)} error(s)."
        click.echo(line, err=True)
    if errors:
        sys.exit(EXIT_ERROR)
    if (check or show_diff) and changed:
        sys.exit(EXIT_FINDINGS)
    sys.exit(EXIT_FINDINGS if needs_human else EXIT_CLEAN)


class _progress:
    """A progress bar on a terminal when there are many files; nothing otherwise."""

    THRESHOLD = 20

    def __init__(self, files: Sequence[Path], settings: Settings) -> None:
        self.enabled = len(files) >= self.THRESHOLD and sys.stderr.isatty() and not settings.quiet
        self.bar = click.progressbar(length=len(files), label="migrating", file=sys.stderr) if self.enabled else None

    def __enter__(self) -> Callable[[], None]:
        if self.bar is None:
            return lambda: None
        bar = self.bar.__enter__()
        return lambda: bar.update(1)

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.__exit__(*exc)


@cli.command("lint")
@common_options
@click.option("--fix", is_flag=True, help="Apply the safe fixes (same as migrating), then report what is left.")
@click.option(
    "--format",
    "output_format",
    type=click.Choice(formats.FORMATS),
    default="text",
    show_default=True,
    help="text: path:line:col: CODE message; json: a list of objects; github: workflow annotations; sarif: SARIF 2.1.0.",
)
@click.option("--statistics", is_flag=True, help="Print how often each code was reported (most frequent first) instead of the findings.")
def lint_command(
    paths: tuple[str, ...],
    select: tuple[str, ...],
    ignore: tuple[str, ...],
    exclude: tuple[str, ...],
    jobs: int | None,
    quiet: bool,
    verbose: bool,
    fix: bool,
    output_format: str,
    statistics: bool,
) -> None:
    """Report DDP pitfalls as path:line:col: CODE message (exit 1 when any are found).

    Findings are sorted by file, line and column. A '# noqa' comment on the line where a finding starts
    silences it ('# noqa: DDP007,DDP010' only those codes). With no PATH at all: exit 0 without a word.
    """
    _nothing_to_do(paths, select, ignore)
    if statistics and output_format not in formats.STATISTICS_FORMATS:
        _fail(f"--statistics works with --format {' or '.join(formats.STATISTICS_FORMATS)}, not {output_format}")
    settings = resolve_settings(paths, select, ignore, exclude, None, jobs, quiet, verbose)
    errors: list[str] = []
    results: list[FileResult] = []
    if "-" in paths:
        results.append(_stdin_result(settings, fix=False))
    file_paths = [p for p in paths if p != "-"]
    if file_paths:
        files, discovery_errors, _ = _files(file_paths, settings)
        errors.extend(discovery_errors)
        for result in run(files, _rules_for(settings), settings.options, fix=fix, jobs=settings.jobs):
            results.append(result)
            if fix and not result.error:
                failure = write_result(result)
                if failure:
                    errors.append(failure)
    errors.extend(r.error for r in sorted(results, key=lambda r: r.path) if r.error)
    located = formats.ordered([formats.Located(r.path, f) for r in results if not r.error for f in r.findings])
    if statistics:
        stats = formats.statistics(located)
        out = formats.statistics_json(stats) if output_format == "json" else formats.statistics_text(stats)
    elif output_format == "json":
        out = formats.json_list(located)
    elif output_format == "github":
        out = formats.github(located)
    elif output_format == "sarif":
        out = formats.sarif(located, all_rules(), errors)
    else:
        out = formats.text(located)
    click.echo(out, nl=False)
    for error in errors:
        click.echo(error, err=True)
    if not quiet:
        click.echo(_lint_summary(results, located, fix, settings.verbose), err=True)
    sys.exit(EXIT_ERROR if errors else EXIT_FINDINGS if located else EXIT_CLEAN)


def _lint_summary(results: Sequence[FileResult], located: Sequence[formats.Located], fix: bool, verbose: bool) -> str:
    """``Found N problem(s) in M file(s)``, with what was fixed, what could be, and (verbose) what was skipped."""
    details = []
    if fix:
        details.append(f"{sum(len(r.changes) for r in results)} fixed")
    else:
        fixable = sum(item.finding.fixable for item in located)
        if fixable:
            details.append(f"{fixable} fixable with: ddp-migrate lint --fix")
    if verbose:
        details.append(f"{sum(r.skipped for r in results)} skipped by the quick text check")
    tail = f" ({', '.join(details)})" if details else ""
    return f"Found {len(located)} problem(s) in {len(results)} file(s){tail}."


@cli.command("rules")
def rules_command() -> None:
    """List every rule: code, name, whether it fixes, and what it finds."""
    for rule in all_rules():
        fixes = "fix" if rule.can_fix() else "report"
        click.echo(f"{rule.code}  {rule.name:<34} {fixes:<6}  {rule.summary()}")


@cli.command("explain")
@click.argument("code")
def explain_command(code: str) -> None:
    """Print a rule's documentation and its first example."""
    rule = rule_for_code(code)
    if rule is None:
        _fail(f"unknown rule code: {code} (see: ddp-migrate rules)")
        return
    click.echo(f"{rule.code} {rule.name}\n")
    click.echo(rule.documentation())
    example = next((e for e in rule.examples if isinstance(e, codemods.Example)), None)
    if example is not None:
        click.echo("\nExample:\n")
        click.echo(_indent(example.before))
        if example.after is not None:
            click.echo("becomes:\n")
            click.echo(_indent(example.after))
    fix = "yes" if rule.can_fix() else "no: " + (rule.manual_fix or "a human must change the code")
    click.echo(f"Fix available: {fix}")


def _indent(code: str) -> str:
    return "".join(f"    {line}" if line.strip() else line for line in code.strip("\n").splitlines(keepends=True)) + "\n"


def main() -> None:
    """Console-script entry point."""
    cli(prog_name="ddp-migrate")


__all__ = ["cli", "main"]
