"""The ``ddp-migrate`` command line.

``ddp-migrate PATH...`` migrates (the ``migrate`` subcommand is the default, so a path is never mistaken
for a command: ``ddp-migrate ./lint`` is a path). ``lint``, ``rules``, ``explain`` and ``example`` are
subcommands. Exit codes follow ruff and black: 0 nothing left to report, 1 findings remain or ``--check``
would change a file, 2 an error, 130 interrupted (Ctrl-C).
"""

from __future__ import annotations

import dataclasses
import re
import sys
from collections import Counter
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

import click

from ddp_migrate import __version__

from .color import CHOICES as COLOR_CHOICES
from .color import use_color
from .example import DEFAULT as DEFAULT_EXAMPLE
from .example import EXAMPLES

if TYPE_CHECKING:  # the heavy modules (libcst and the rules) are imported by the commands that need them
    from ddp_migrate.codemods.base import Options, Rule

    from . import formats
    from .config import Config
    from .engine import FileResult

# Start-up: ``--version`` and ``--help`` import only click and the light modules above. Everything that
# pulls in libcst (the engine, the rules, the formats) is imported inside the commands that run rules.

EXIT_CLEAN, EXIT_FINDINGS, EXIT_ERROR, EXIT_INTERRUPTED = 0, 1, 2, 130
#: ``--runtime``: import the installed package's runtime, or a module written beside the program.
RUNTIME_CHOICES = ("package", "vendor")
#: The module ``--runtime vendor`` writes beside each migrated entry script (and the migrated code imports).
VENDORED_RUNTIME = "ddp_runtime"
COMMANDS = ("migrate", "lint", "rules", "explain", "example")
#: ``lint --format`` (the same as :data:`ddp_migrate.formats.FORMATS`, spelled here so ``--help`` needs no libcst).
FORMATS = ("text", "json", "github", "sarif")
#: ``migrate --batch-size`` (the values of :class:`ddp_migrate.codemods.base.BatchSizePolicy`).
BATCH_SIZE_CHOICES = ("global", "per-process")


class DefaultToMigrate(click.Group):
    """A group that runs ``migrate`` when the first argument is not one of its commands."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and args[0] not in ("--help", "-h", "--version"):
            args = ["migrate", *args]
        return super().parse_args(ctx, args)


@dataclass
class Flags:
    """The flags every file-processing command takes, as click hands them over."""

    paths: tuple[str, ...] = ()
    select: tuple[str, ...] = ()
    extend_select: tuple[str, ...] = ()
    ignore: tuple[str, ...] = ()
    extend_ignore: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    jobs: int | None = None
    quiet: bool = False
    verbose: bool = False
    color: str | None = None
    stdin_filename: str | None = None
    follow_imports: bool = True

    @classmethod
    def take(cls, kwargs: dict[str, Any]) -> "Flags":
        """Pop the common flags out of a command's keyword arguments."""
        return cls(**{f.name: kwargs.pop(f.name) for f in dataclasses.fields(cls) if f.name in kwargs})

    @property
    def reads_stdin(self) -> bool:
        """``-`` among the paths, or no path but ``--stdin-filename`` (as in ruff)."""
        return "-" in self.paths or (not self.paths and self.stdin_filename is not None)

    @property
    def file_paths(self) -> list[str]:
        return [p for p in self.paths if p != "-"]


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
    follow_imports: bool = True
    stdin_filename: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def stdin_name(self) -> str:
        """The name standard input is processed under: ``--stdin-filename``, else ``-``."""
        return self.stdin_filename or "-"


def _fail(message: str) -> None:
    click.echo(f"ddp-migrate: error: {message}", err=True)
    sys.exit(EXIT_ERROR)


def _choose(flag: Sequence[str], configured: Sequence[str], extend_configured: Sequence[str], extend_flag: Sequence[str]) -> tuple[list[str], list[str]]:
    """(base, extension): a flag replaces the configuration's list and its ``extend-`` list; ``--extend-*`` adds."""
    from .selection import normalise_codes

    if flag:
        return normalise_codes(flag), normalise_codes(extend_flag)
    return normalise_codes(configured), normalise_codes([*extend_configured, *extend_flag])


def resolve_settings(flags: Flags, batch_size: str | None = None, options: dict[str, Any] | None = None) -> Settings:
    """Merge flags over ``[tool.ddp-migrate]``; a bad configuration or code is a one-line error (exit 2).

    ``--select`` replaces the configuration's ``select`` and ``extend-select``; ``--extend-select`` adds
    to whatever is selected. ``--ignore`` and ``--extend-ignore`` work the same way.
    """
    from ddp_migrate.codemods.base import BatchSizePolicy, Options

    from .config import ConfigError, load_config
    from .runner import default_jobs
    from .selection import SelectionError, normalise_codes, select_rules

    where = [*flags.file_paths, *([flags.stdin_filename] if flags.stdin_filename else [])]
    try:
        config = load_config(where)
        select, extend_select = _choose(flags.select, config.select, config.extend_select, flags.extend_select)
        ignore, extend_ignore = _choose(flags.ignore, config.ignore, config.extend_ignore, flags.extend_ignore)
        per_file_ignores = {glob: normalise_codes(codes) for glob, codes in config.per_file_ignores.items()}
    except (ConfigError, SelectionError) as error:
        _fail(str(error))
        raise  # unreachable: _fail exits
    policy = BatchSizePolicy(batch_size) if batch_size else config.batch_size
    return Settings(
        config=config,
        rules=select_rules(select, [*ignore, *extend_ignore], extend_select=extend_select),
        per_file_ignores=per_file_ignores,
        excludes=list(flags.exclude) if flags.exclude else config.exclude,
        options=dataclasses.replace(Options(batch_size=policy), **(options or {})),
        jobs=flags.jobs or default_jobs(),
        quiet=flags.quiet,
        verbose=flags.verbose and not flags.quiet,
        follow_imports=flags.follow_imports,
        stdin_filename=flags.stdin_filename,
    )


def _codes(*values: str) -> Callable:
    return click.option(*values, multiple=True, metavar="CODES")


def common_options(function: Callable) -> Callable:
    """The options every file-processing command takes."""
    options = [
        click.argument("paths", nargs=-1, required=False, metavar="[PATH]..."),
        click.option("--select", multiple=True, metavar="CODES", help="Only these rule codes or prefixes (comma-separated, e.g. DDP0)."),
        click.option("--extend-select", multiple=True, metavar="CODES", help="Add these codes or prefixes to the selection."),
        click.option("--ignore", multiple=True, metavar="CODES", help="Skip these rule codes or prefixes."),
        click.option("--extend-ignore", multiple=True, metavar="CODES", help="Skip these too, on top of the configured ignore."),
        click.option("--exclude", multiple=True, metavar="GLOB", help="Skip files and folders matching the glob (repeatable)."),
        click.option("-j", "--jobs", type=click.IntRange(min=0), default=None, help="Worker processes (default, or 0: all cores)."),
        click.option("-q", "--quiet", is_flag=True, help="Print only errors (lint: the findings too, without the summary)."),
        click.option("-v", "--verbose", is_flag=True, help="Also list unchanged and skipped files."),
        click.option(
            "--color",
            type=click.Choice(COLOR_CHOICES),
            default=None,
            help="Colour the output: auto (default: on a terminal, unless NO_COLOR is set or FORCE_COLOR is), always, never.",
        ),
        click.option("--stdin-filename", metavar="PATH", default=None, help="The name of the code read from '-' (stdin): for messages, per-file ignores and excludes."),
        click.option(
            "--follow-imports/--no-follow-imports",
            default=True,
            help="Process the local modules an entry script imports with it (default), or only the files named.",
        ),
    ]
    for option in reversed(options):
        function = option(function)
    return function


def _nothing_to_do(flags: Flags, empty_output: str = "") -> None:
    """No paths at all (pre-commit with no matching files): check the codes, then exit 0.

    ``empty_output`` is what a machine-readable format prints for no findings (``[]``, an empty SARIF log).
    """
    if flags.paths or flags.stdin_filename is not None:
        return
    from .selection import SelectionError, normalise_codes

    try:
        for codes in (flags.select, flags.extend_select, flags.ignore, flags.extend_ignore):
            normalise_codes(codes)
    except SelectionError as error:
        _fail(str(error))
    if empty_output:
        click.echo(empty_output, nl=False)
    sys.exit(EXIT_CLEAN)


def _rules_for(settings: Settings) -> Callable[[Path], Sequence[type[Rule]]]:
    """The rules for one file: the selected ones less those its ``per-file-ignores`` globs drop."""
    from .discovery import is_excluded
    from .selection import drop_rules


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


def _stdin_excluded(settings: Settings) -> bool:
    """Whether ``--stdin-filename`` names a file the excludes skip (then stdin passes through untouched)."""
    from .discovery import is_excluded

    name = settings.stdin_filename
    if not name:
        return False
    resolved = Path(name).resolve()
    base = settings.config.root or Path.cwd()
    return is_excluded(resolved, settings.excludes, base)


def _stdin_result(settings: Settings, fix: bool, fixable: frozenset[type[Rule]] | None = None) -> FileResult:
    """Process standard input under its ``--stdin-filename`` (or ``-``); a notebook's code cells if it is one.

    ``fixable``: the rules whose fixes may run (``None``: all), as for a file.
    """
    from .engine import process
    from .runner import is_notebook

    data = sys.stdin.buffer.read()
    name = settings.stdin_name
    rules = _rules_for(settings)(Path(name)) if settings.stdin_filename else settings.rules
    if is_notebook(name):
        from .notebook import process_notebook_bytes

        return process_notebook_bytes(name, data, tuple(rules), settings.options, fix, fixable=fixable)
    return process(name, data, tuple(rules), settings.options, fix, fixable=fixable)


def _write_code(data: bytes) -> None:
    """Write code to standard output as bytes (its own encoding and newlines)."""
    sys.stdout.buffer.write(data)
    sys.stdout.buffer.flush()


def _fixed_code(result: FileResult) -> bytes:
    """What a fix of standard input writes back: the new code, or the input as it came (unchanged, or an error)."""
    return result.output if result.output is not None and not result.error else result.original


def _discover(flags: Flags, settings: Settings) -> tuple[list[Path], list[str], int]:
    from .discovery import discover

    found = discover(flags.file_paths, settings.excludes, settings.config.root)
    for warning in found.warnings:
        click.echo(f"warning: {warning}", err=True)
    return found.files, found.errors, found.excluded


def _interrupted(progress: Any, written: int) -> None:
    """Ctrl-C: say what was done and exit 130 (workers are already gone, every file is whole)."""
    progress.close()
    done = f"{written} file(s) written before it; " if written else ""
    click.echo(f"\nddp-migrate: interrupted: {done}every file is whole (unchanged or completely rewritten).", err=True)
    sys.exit(EXIT_INTERRUPTED)


@click.group(cls=DefaultToMigrate, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, "--version", prog_name="ddp-migrate")
def cli() -> None:
    """Rewrite single-GPU and nn.DataParallel PyTorch scripts into torchrun-ready DDP code.

    \b
    ddp-migrate train.py            migrate in place (same as: ddp-migrate migrate train.py)
    ddp-migrate --diff train.py     show the change, write nothing
    ddp-migrate lint src/           report DDP pitfalls (exit 1 when any are found)
    ddp-migrate rules               list the rules
    ddp-migrate explain DDP001      document one rule (by code or name)
    ddp-migrate example > train.py  a small DataParallel script to try it on
    """


@cli.command("migrate")
@common_options
@click.option("--diff", "show_diff", is_flag=True, help="Print a unified diff per file; write nothing.")
@click.option("--check", is_flag=True, help="Write nothing; exit 1 if any file would change.")
@click.option(
    "--batch-size",
    type=click.Choice(BATCH_SIZE_CHOICES),
    default=None,
    help="global (default): keep the original batch as the global batch; per-process: keep it per process.",
)
@click.option("--elastic", is_flag=True, help="Make the program restartable under torchrun --max-restarts (snapshot and resume).")
@click.option(
    "--snapshot-every",
    type=click.IntRange(min=1),
    default=None,
    metavar="N",
    help="With --elastic, also snapshot every N optimizer steps (default: at the end of every epoch only).",
)
@click.option(
    "--runtime",
    type=click.Choice(RUNTIME_CHOICES),
    default="package",
    show_default=True,
    help="package: the migrated code imports ddp_migrate.runtime (install ddp-migrate where it trains); "
    f"vendor: it imports {VENDORED_RUNTIME}, a module written beside each migrated entry script, so training needs only torch.",
)
def migrate_command(
    show_diff: bool, check: bool, batch_size: str | None, elastic: bool, snapshot_every: int | None, runtime: str, **kwargs: Any
) -> None:
    """Migrate files in place (folders are walked for *.py and *.ipynb; '-' reads stdin and writes stdout).

    A notebook is left as it is: its migrated code is written to NAME_ddp.py beside it. With no PATH at
    all there is nothing to do: exit 0 without a word (as pre-commit expects).
    """
    from . import report
    from .progress import progress_for
    from .registry import without_lint_only
    from .runner import run, write_result

    flags = Flags.take(kwargs)
    _nothing_to_do(flags)
    if snapshot_every is not None and not elastic:
        _fail("--snapshot-every needs --elastic")
    extra: dict[str, Any] = {"elastic": True, "snapshot_every": snapshot_every} if elastic else {}
    extra["review_todos"] = True  # what is left to a human is marked in the code too
    if runtime == "vendor":
        extra["runtime_module"] = VENDORED_RUNTIME
    settings = resolve_settings(flags, batch_size, extra)
    settings.rules = without_lint_only(settings.rules)
    write = not (show_diff or check)
    stdout_color = use_color(flags.color, sys.stdout)
    stderr_color = use_color(flags.color, sys.stderr)
    errors: list[str] = []
    results: list[FileResult] = []
    if flags.reads_stdin:
        results.append(_migrate_stdin(settings, show_diff, write, stdout_color, errors))
    written = 0
    progress = progress_for("checking" if not write else "migrating", settings.quiet)
    if flags.file_paths:
        files, discovery_errors, excluded = _discover(flags, settings)
        errors.extend(discovery_errors)
        from_files: list[FileResult] = []
        try:
            with progress, closing(run(files, _rules_for(settings), settings.options, True, settings.jobs, settings.follow_imports, progress)) as stream:
                for result in stream:
                    from_files.append(result)
                    if write and not result.error:
                        failure = write_result(result)
                        if failure:
                            errors.append(failure)
                        elif result.changed:
                            written += 1
        except KeyboardInterrupt:
            _interrupted(progress, written)
        from_files.sort(key=lambda r: r.path)
        results.extend(from_files)
        if show_diff:
            for result in from_files:
                if result.changed and not result.error:
                    click.echo(report.unified_diff(result, stdout_color), nl=False, color=stdout_color)
        if settings.verbose and excluded:
            click.echo(f"{excluded} path(s) excluded", err=True)
    vendored = _write_vendored_runtime(results, errors) if write and runtime == "vendor" else []
    errors[:0] = [r.error for r in results if r.error]
    _migration_report(results, errors, settings, write, stderr_color, vendored)
    changed = sum(r.changed for r in results)
    needs_human = sum(len(r.findings) for r in results if not r.error)
    if errors:
        sys.exit(EXIT_ERROR)
    if (check or show_diff) and changed:
        sys.exit(EXIT_FINDINGS)
    sys.exit(EXIT_FINDINGS if needs_human else EXIT_CLEAN)


def _migrate_stdin(settings: Settings, show_diff: bool, write: bool, color: bool, errors: list[str]) -> FileResult:
    """Migrate standard input to standard output (excluded by ``--stdin-filename``: echoed untouched)."""
    from . import report
    from .engine import FileResult

    if _stdin_excluded(settings):
        data = sys.stdin.buffer.read()
        if write:
            _write_code(data)
        return FileResult(path=settings.stdin_name, original=data, skipped=True)
    result = _stdin_result(settings, fix=True)
    if result.error:
        return result
    if show_diff:
        click.echo(report.unified_diff(result, color), nl=False, color=color)
    elif write:
        _write_code(_fixed_code(result))
    return result


def _runtime_folders(results: Sequence[FileResult]) -> list[Path]:
    """The folders of the entry scripts of the files a migration changed (stdin aside), in order, and the
    folder a changed module of a package is imported from (``mylib.data`` run by ``tools/train.py`` and
    imported by the tests from the repository's root)."""
    folders: dict[Path, None] = {}
    for result in results:
        if result.changed and not result.error and result.path != "-":
            folders[Path(result.entry or result.path).parent] = None
            if result.import_root is not None:
                folders[Path(result.import_root)] = None
    return list(folders)


def _write_vendored_runtime(results: Sequence[FileResult], errors: list[str]) -> list[Path]:
    """``--runtime vendor``: write the runtime module once into each folder of a changed entry script."""
    from .vendor import write_runtime_module

    written = []
    for folder in _runtime_folders(results):
        try:
            written.append(write_runtime_module(folder))
        except OSError as error:
            errors.append(f"{folder / (VENDORED_RUNTIME + '.py')}:1:1: cannot write the runtime: {error.strerror or error}")
    return written


def _imports(text: str, module: str) -> bool:
    """Whether the code imports ``module`` (``import a.b``, ``from a.b import x`` or ``from a import b``)."""
    package, _, name = module.rpartition(".")
    forms = [rf"import\s+{re.escape(module)}\b", rf"from\s+{re.escape(module)}\s+import\b"]
    if package:
        forms.append(rf"from\s+{re.escape(package)}\s+import\s+[^\n]*\b{re.escape(name)}\b")
    return re.search(rf"^[ \t]*(?:{'|'.join(forms)})", text, flags=re.MULTILINE) is not None


def _runtime_line(results: Sequence[FileResult], settings: Settings, write: bool, vendored: Sequence[Path]) -> str | None:
    """What the migrated code needs where it trains (``None`` when the migration imports no runtime)."""
    module = settings.options.runtime_module
    if not any(r.changed and not r.error and _imports(r.new_text, module) for r in results):
        return None
    imports = "imports" if write else "would import"
    if module == VENDORED_RUNTIME:
        if vendored:
            return f"The migrated code {imports} {module}, written to {', '.join(str(p) for p in vendored)}; training needs only torch."
        return f"The migrated code {imports} {module}: ddp-migrate --runtime vendor writes it beside each migrated entry script (not for stdin, --diff or --check)."
    return f"The migrated code {imports} {module}: install ddp-migrate where it trains (or pass --runtime vendor)."


def _migration_report(
    results: Sequence[FileResult], errors: Sequence[str], settings: Settings, write: bool, color: bool, vendored: Sequence[Path] = ()
) -> None:
    """Per-file summaries, the errors, and the closing line, on standard error."""
    from . import report

    if not settings.quiet:
        for result in results:
            if result.error:
                continue
            for line in report.migration_summary(result, settings.verbose, written=write):
                click.echo(line, err=True)
    for error in errors:
        click.echo(error, err=True)
    if settings.quiet:
        return
    changed = sum(r.changed for r in results)
    failed = sum(1 for r in results if r.error)
    needs_human = sum(len(r.findings) for r in results if not r.error)
    verb = "would be migrated" if not write else "migrated"
    line = f"{changed} file(s) {verb}, {len(results) - changed - failed} unchanged"
    if settings.verbose:
        line += f" ({sum(r.skipped for r in results)} skipped by the quick text check)"
    line += f", {needs_human} item(s) need a human, {len(errors)} error(s)."
    click.echo(line, err=True)
    runtime_line = _runtime_line(results, settings, write, vendored)
    if runtime_line:
        click.echo(runtime_line, err=True)


@cli.command("lint")
@common_options
@click.option("--fix", is_flag=True, help="Apply the safe fixes, then report what is left (the unsafe fixes' findings among it).")
@click.option("--unsafe-fixes", is_flag=True, help="With --fix, apply the unsafe fixes too (all of them: same as migrating).")
@click.option(
    "--format",
    "output_format",
    type=click.Choice(FORMATS),
    default="text",
    show_default=True,
    help="text: path:line:col: CODE message; json: a list of objects; github: workflow annotations; sarif: SARIF 2.1.0.",
)
@click.option("--statistics", is_flag=True, help="Print how often each code was reported (most frequent first) instead of the findings.")
@click.option("--exit-zero", is_flag=True, help="Exit 0 even when findings remain (errors still exit 2), e.g. to upload SARIF.")
@click.option("-o", "--output-file", type=click.Path(dir_okay=False, writable=True), default=None, help="Write the findings (in --format) to this file instead of stdout.")
def lint_command(fix: bool, unsafe_fixes: bool, output_format: str, statistics: bool, exit_zero: bool, output_file: str | None, **kwargs: Any) -> None:
    """Report DDP pitfalls as path:line:col: CODE message (exit 1 when any are found).

    Findings are sorted by file, line and column; in a notebook, path:cell N:line:col. A '# noqa' comment
    on the line where a finding starts silences it ('# noqa: DDP007,DDP010' only those codes). With no PATH
    at all: exit 0 (json and sarif print an empty list / log).
    """
    from ddp_migrate.codemods.base import FixSafety

    from . import formats
    from .progress import progress_for
    from .registry import all_rules
    from .runner import is_notebook, run, write_result

    flags = Flags.take(kwargs)
    if statistics and output_format not in formats.STATISTICS_FORMATS:
        _fail(f"--statistics works with --format {' or '.join(formats.STATISTICS_FORMATS)}, not {output_format}")
    _nothing_to_do(flags, _empty_output(output_format, statistics) if output_file is None else "")
    settings = resolve_settings(flags)
    errors: list[str] = []
    results: list[FileResult] = []
    checked = 0
    fixable = None if unsafe_fixes else frozenset(r for r in all_rules() if r.fix_safety is FixSafety.SAFE)
    # As ``ruff check --fix -``: standard output carries the code (fixed, or as it came when nothing was
    # fixed, on an error, or excluded), so the findings and the summary go to standard error.
    code_on_stdout = fix and flags.reads_stdin
    if flags.reads_stdin and not _stdin_excluded(settings):
        # A notebook is never rewritten (its migration is a script of its own, written beside it): one read on
        # standard input comes back as it came, and is linted.
        results.append(_stdin_result(settings, fix and not is_notebook(settings.stdin_name), fixable))
        if fix:
            _write_code(_fixed_code(results[-1]))
    elif flags.reads_stdin:
        data = sys.stdin.buffer.read()
        if fix:
            _write_code(data)
    if flags.file_paths:
        files, discovery_errors, _ = _discover(flags, settings)
        errors.extend(discovery_errors)
        progress = progress_for("fixing" if fix else "linting", settings.quiet)
        written = 0
        try:
            stream_of = run(
                files, _rules_for(settings), settings.options, fix, settings.jobs, settings.follow_imports, progress, fixable, sources=fix
            )
            with progress, closing(stream_of) as stream:
                for result in stream:
                    results.append(result)
                    if fix and not result.error:
                        failure = write_result(result)
                        if failure:
                            errors.append(failure)
                        elif result.changed:
                            written += 1
        except KeyboardInterrupt:
            _interrupted(progress, written)
    checked = len(results)
    errors[:0] = [r.error for r in sorted(results, key=lambda r: r.path) if r.error]
    located = formats.locate(results)
    # A notebook on standard input is never rewritten (its migration is a script beside the file): its
    # findings are not fixable there, whatever the flags.
    stdin_notebook = settings.stdin_name if flags.reads_stdin and is_notebook(settings.stdin_name) else None
    fixable_here = [item for item in located if item.path != stdin_notebook]
    unsafe = 0 if unsafe_fixes else _count_unsafe(fixable_here)
    fix_command = "ddp-migrate lint --fix --unsafe-fixes" if unsafe_fixes else "ddp-migrate lint --fix"
    to_terminal = output_file is None
    color = to_terminal and use_color(flags.color, sys.stderr if code_on_stdout else sys.stdout)
    out = _render(located, output_format, statistics, errors, color)
    if output_file is None:
        click.echo(out, nl=False, color=color, err=code_on_stdout)
    else:
        try:
            Path(output_file).write_text(out, encoding="utf-8")
        except OSError as error:
            errors.append(f"{output_file}:1:1: cannot write: {error.strerror or error}")
    for error in errors:
        click.echo(error, err=True)
    if not flags.quiet:
        summary = _lint_summary(results, located, fix, settings.verbose, checked, unsafe, fix_command, fixable_here)
        click.echo(summary, err=True)
    if errors:
        sys.exit(EXIT_ERROR)
    sys.exit(EXIT_FINDINGS if located and not exit_zero else EXIT_CLEAN)


def _empty_output(output_format: str, statistics: bool) -> str:
    """What a format prints when there is nothing at all to lint."""
    from . import formats
    from .registry import all_rules

    if output_format == "json":
        return "[]\n"
    if output_format == "sarif" and not statistics:
        return formats.sarif([], all_rules(), [])
    return ""


def _render(located: Sequence[formats.Located], output_format: str, statistics: bool, errors: Sequence[str], color: bool) -> str:
    from . import formats
    from .registry import all_rules

    if statistics:
        stats = formats.statistics(located)
        return formats.statistics_json(stats) if output_format == "json" else formats.statistics_text(stats)
    if output_format == "json":
        return formats.json_list(located)
    if output_format == "github":
        return formats.github(located)
    if output_format == "sarif":
        return formats.sarif(located, all_rules(), errors)
    return formats.text(located, color)


def _count_unsafe(located: Sequence[formats.Located]) -> int:
    """Without ``--unsafe-fixes``: how many findings only an unsafe fix would fix (``lint --fix`` leaves
    them; their ``fixable`` stays true in the formats: a fix exists, behind ``--unsafe-fixes``)."""
    from ddp_migrate.codemods.base import FixSafety

    from .registry import all_rules

    unsafe = {rule.code for rule in all_rules() if rule.can_fix() and rule.fix_safety is FixSafety.UNSAFE}
    return sum(1 for item in located if item.finding.fixable and item.finding.code in unsafe)


def _lint_summary(
    results: Sequence[FileResult],
    located: Sequence[formats.Located],
    fix: bool,
    verbose: bool,
    checked: int,
    unsafe: int = 0,
    fix_command: str = "ddp-migrate lint --fix",
    fixable_here: Sequence[formats.Located] | None = None,
) -> str:
    """``Found N problem(s) in M file(s)`` (files with problems), with what was checked, fixed and fixable.

    ``fixable_here``: the findings a fix could reach (``None``: all; a notebook on standard input is never
    rewritten, so its findings are left out of the fixable counts)."""
    fixable_here = located if fixable_here is None else fixable_here
    details = [f"{checked} file(s) checked"]
    if fix:
        details.append(f"{sum(len(r.changes) for r in results)} fixed")
        if unsafe:
            details.append(f"{unsafe} more fixable with: ddp-migrate lint --fix --unsafe-fixes")
    else:
        fixable = sum(item.finding.fixable for item in fixable_here) - unsafe
        if fixable:
            details.append(f"{fixable} fixable with: {fix_command}")
        if unsafe:
            more = "more " if fixable else ""
            details.append(f"{unsafe} {more}fixable with: ddp-migrate lint --fix --unsafe-fixes")
    reachable = {id(item) for item in fixable_here}
    held = Counter(item.path for item in located if item.finding.fixable and id(item) not in reachable)
    for path, count in sorted(held.items()):
        details.append(f"{count} fixable in the file {path} itself, not on standard input: a notebook's fixes go to a script beside it")
    if verbose:
        details.append(f"{sum(r.skipped for r in results)} skipped by the quick text check")
    with_problems = len({item.path for item in located})
    return f"Found {len(located)} problem(s) in {with_problems} file(s) ({', '.join(details)})."


@cli.command("rules")
@click.option("--format", "output_format", type=click.Choice(["text", "json"]), default="text", show_default=True, help="text: one rule per line; json: a list of objects.")
def rules_command(output_format: str) -> None:
    """List every rule: code, name, whether it fixes, and what it does."""
    import json

    from . import docs
    from .registry import all_rules

    rules = all_rules()
    if output_format == "json":
        click.echo(json.dumps([_rule_json(rule) for rule in rules], indent=2, ensure_ascii=False))
        return
    name_width = max(len(rule.name) for rule in rules)
    for rule in rules:
        fixes = _fix_word(rule)
        head = f"{rule.code}  {rule.name:<{name_width}}  {fixes:<11}  "
        click.echo(_hang(head, docs.inline(rule.summary()), docs.WIDTH))


def _fix_word(rule: type[Rule]) -> str:
    """``safe fix``, ``unsafe fix`` or ``report``."""
    return f"{rule.fix_safety.value} fix" if rule.can_fix() else "report"


def _hang(head: str, text: str, width: int) -> str:
    """``head`` then ``text`` wrapped to ``width``, continuation lines indented under the text."""
    import textwrap

    return "\n".join(textwrap.wrap(text, width=width, initial_indent=head, subsequent_indent=" " * len(head), break_on_hyphens=False))


def _rule_json(rule: type[Rule]) -> dict[str, Any]:
    from . import docs

    return {
        "code": rule.code,
        "name": rule.name,
        "summary": docs.inline(rule.summary()),
        "fixable": rule.can_fix(),
        "fix_safety": rule.fix_safety.value if rule.can_fix() else None,
        "severity": rule.severity.value,
        "enabled_by_default": getattr(rule, "enabled_by_default", True),
        "documentation": docs.plain(rule.documentation(), width=10_000),
        "manual_fix": rule.manual_fix or None,
    }


def find_rule(code_or_name: str) -> type[Rule] | None:
    """A rule by its code (``DDP003``) or its name (``missing-process-group``), case-insensitive."""
    from .registry import all_rules, rule_for_code

    rule = rule_for_code(code_or_name)
    if rule is not None:
        return rule
    wanted = code_or_name.strip().lower().replace("_", "-")
    return next((r for r in all_rules() if r.name == wanted), None)


@cli.command("explain")
@click.argument("rule_name", metavar="CODE_OR_NAME")
def explain_command(rule_name: str) -> None:
    """Print a rule's documentation and its first example (by code, DDP005, or name, missing-set-epoch)."""
    from ddp_migrate import codemods

    from . import docs

    rule = find_rule(rule_name)
    if rule is None:
        _fail(f"unknown rule code or name: {rule_name} (see: ddp-migrate rules)")
        return
    click.echo(f"{rule.code} {rule.name}\n")
    click.echo(docs.plain(rule.documentation()))
    example = next((e for e in rule.examples if isinstance(e, codemods.Example)), None)
    if example is not None:
        click.echo("\nExample:\n")
        click.echo(_indent(example.before))
        if example.after is not None:
            click.echo("becomes:\n")
            click.echo(_indent(example.after))
    fix = "yes" if rule.can_fix() else "no: " + (rule.manual_fix or "a human must change the code")
    click.echo(_hang("Fix available: ", fix, docs.WIDTH))
    if rule.can_fix():
        click.echo(_hang("Fix safety: ", _safety_sentence(rule), docs.WIDTH))


def _safety_sentence(rule: type[Rule]) -> str:
    from ddp_migrate.codemods.base import FixSafety

    if rule.fix_safety is FixSafety.UNSAFE:
        return "unsafe: the migration applies it, lint --fix only with --unsafe-fixes."
    return "safe: the migration and lint --fix apply it."


def _indent(code: str) -> str:
    return "".join(f"    {line}" if line.strip() else line for line in code.strip("\n").splitlines(keepends=True)) + "\n"


@cli.command("example")
@click.argument("name", required=False, default=DEFAULT_EXAMPLE, type=click.Choice(sorted(EXAMPLES)))
@click.option("--list", "list_them", is_flag=True, help="List the bundled examples.")
def example_command(name: str, list_them: bool) -> None:
    """Print a bundled training script to try the tool on: ddp-migrate example > train.py

    \b
    ddp-migrate example > train.py
    ddp-migrate --diff train.py
    ddp-migrate train.py && python train.py
    """
    if list_them:
        for key, (description, _) in EXAMPLES.items():
            click.echo(f"{key}  {description}")
        return
    sys.stdout.write(EXAMPLES[name][1])
    sys.stdout.flush()


def main() -> None:
    """Console-script entry point."""
    try:
        code = cli.main(prog_name="ddp-migrate", standalone_mode=False)
    except click.exceptions.Abort as abort:  # click turns Ctrl-C outside the run loops into Abort
        if isinstance(abort.__context__, KeyboardInterrupt) or isinstance(abort.__cause__, KeyboardInterrupt):
            click.echo("ddp-migrate: interrupted.", err=True)
            sys.exit(EXIT_INTERRUPTED)
        click.echo("Aborted!", err=True)
        sys.exit(EXIT_FINDINGS)
    except KeyboardInterrupt:
        click.echo("\nddp-migrate: interrupted.", err=True)
        sys.exit(EXIT_INTERRUPTED)
    except click.ClickException as error:
        error.show()
        sys.exit(error.exit_code)
    sys.exit(code if isinstance(code, int) else EXIT_CLEAN)


__all__ = ["cli", "main", "find_rule"]
