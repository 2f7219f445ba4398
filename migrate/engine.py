"""The per-file pipeline: decode → cheap skip check → parse → analyse → find / fix to a fixed point → verify.

The engine has no rules of its own; it runs whichever rule classes it is given. It never writes: it hands
back the new bytes, and the runner writes them only after they have been verified.
"""

from __future__ import annotations

import ast
import difflib
import traceback
from pathlib import Path
import warnings
from dataclasses import dataclass, field, replace
from types import CodeType
from typing import Callable, Sequence, TypeVar

import libcst as cst

from ddp_migrate.codemods.analysis.lines import split_lines
from ddp_migrate.codemods.analysis import ScriptAnalysis
from ddp_migrate.codemods.analysis.program import ModuleInfo, Program
from ddp_migrate.codemods.analysis.project import child_statements, first_line, nested_statements
from ddp_migrate.codemods.analysis.script import ModuleIndex
from ddp_migrate.codemods.analysis.tree import parse_module
from ddp_migrate.codemods.base import Change, Finding, Note, Options, Rule, Severity
from ddp_migrate.codemods.edits import TODO_PREFIX

from .layout import Wrapped, line_length_for, wrap_new_lines
from .noqa import noqa_comments, suppress
from .source import SourceError, decode
from .todos import TodoAuthors, statement_start, unreported_todos
from .tables import blank_number_tables
from .vocabulary import Vocabulary

T = TypeVar("T")

#: How many rounds of all fixes the engine runs before it calls a file unsettled.
MAX_PASSES = 8


class FileError(Exception):
    """A problem with one file that the user must hear about as ``path:line:col: message``."""

    def __init__(self, message: str, line: int = 1, column: int = 1) -> None:
        super().__init__(message)
        self.message = message
        self.line = line
        self.column = column


@dataclass
class FileResult:
    """What happened to one file."""

    path: str
    original: bytes
    output: bytes | None = None
    changes: list[Change] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    notes: list[Note] = field(default_factory=list)
    error: str | None = None
    skipped: bool = False
    text: str = ""
    new_text: str = ""
    #: ``entry`` (a program starts here, or a lone script), ``module`` (a module of a program, migrated
    #: with its entry) or ``library`` (no entry reaches it: linted, never migrated).
    role: str = "entry"
    #: The entry script of the program the file belongs to (``None`` for a lone script or a library).
    entry: str | None = None
    #: The folder the module's dotted name is imported from (the one above its top package): where a module
    #: of a package finds a top-level module such as the vendored runtime when the package is imported from
    #: elsewhere (a test run from the repository's root). ``None``: the file's own folder.
    import_root: str | None = None
    #: How many review items the other modules of the entry's program hold (its launch line waits for them too).
    reviews_elsewhere: int = 0

    @property
    def changed(self) -> bool:
        """Whether the file's bytes would change."""
        return self.output is not None and self.output != self.original


def parse_checked(text: str) -> cst.Module:
    """Parse with libcst source text :func:`check_syntax` accepted (an error of libcst's own is still a
    :class:`FileError`)."""
    try:
        return parse_module(text)
    except cst.ParserSyntaxError as error:
        raise FileError(f"cannot parse: {error.message}", error.raw_line, error.raw_column + 1) from None


def compile_quietly(text: str, path: str) -> CodeType:
    """Python's own bytecode compile of a source, its warnings (``"is" with a literal``, invalid escapes:
    the user's, not ours to print) silenced."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return compile(text, path, "exec", dont_inherit=True, optimize=0)  # asserts kept, whatever -O says


def check_syntax(text: str, path: str) -> CodeType | None:
    """Report a syntax error through Python's own compiler: cheap, so files the gate skips are still
    checked (a syntax error is always reported, never skipped). Hands back the code object, whose names the
    gate reads (:mod:`ddp_migrate.vocabulary`), or ``None`` for source that parses but does not compile to
    bytecode (``return`` outside a function): as before, only a parse error is reported, with the parser's
    own message and position."""
    try:
        return compile_quietly(text, path)
    except Exception:  # the parser's verdict and message decide, below
        pass
    try:
        compile(text, path, "exec", flags=ast.PyCF_ONLY_AST, dont_inherit=True)
    except SyntaxError as error:
        raise FileError(f"cannot parse: {error.msg}", error.lineno or 1, error.offset or 1) from None
    except ValueError as error:  # e.g. source code containing NUL bytes
        raise FileError(f"cannot parse: {error}") from None
    return None


def vocabulary_of(text: str, path: str) -> Vocabulary:
    """The gate's view of a source (:class:`Vocabulary`), syntax checked on the way (:func:`check_syntax`)."""
    return Vocabulary.of(text, check_syntax(text, path))


def verify(text: str, path: str, rule: Rule) -> Vocabulary:
    """Refuse a fix whose output does not compile, naming the rule that produced it (Python's own
    compiler: cheap enough to run after every fix); the vocabulary of the output for the next rules' gates."""
    try:
        return Vocabulary.of(text, compile_quietly(text, path))
    except (SyntaxError, ValueError) as error:
        raise FileError(f"{rule.code} ({rule.name}) produced code that does not compile ({error}); file left unchanged") from None


def verify_output(text: str) -> None:
    """Refuse a migrated file that libcst itself cannot read back (checked once, on the final text)."""
    try:
        parse_module(text)
    except cst.ParserSyntaxError as error:
        raise FileError(f"the migrated code cannot be parsed again ({error.message}); file left unchanged") from None


def _instance(rule_class: type[Rule], options: Options) -> Rule:
    """A rule object for this run: rules whose findings depend on the options (DDP013 reports only with
    ``elastic``) take them when they are built."""
    try:
        return rule_class(options)  # type: ignore[call-arg]
    except TypeError:
        return rule_class()


def _guarded(what: str, call: Callable[[], T]) -> T:
    """Run rule code (or the shared analysis the rules read), turning a crash into a one-line :class:`FileError`."""
    try:
        return call()
    except FileError:
        raise
    except Exception as error:  # a bug in a rule must not cost the user the rest of the run
        where = traceback.extract_tb(error.__traceback__)[-1]
        # One line: an error may carry a syntax tree (a KeyError's key), whose text runs to thousands of lines.
        said = str(error).splitlines()[0] if str(error) else ""
        said = said if len(said) <= 120 else said[:117] + "..."
        raise FileError(
            f"internal error in {what}: {type(error).__name__}: {said} "
            f"[{where.filename.rsplit('/', 1)[-1]}:{where.lineno}]; file left unchanged, please report this"
        ) from None


def _run_rule(rule: Rule | type[Rule], step: str, call: Callable[[], T]) -> T:
    return _guarded(f"{rule.code} ({rule.name}) while {step}", call)


def analyse(
    module: cst.Module,
    is_entry: bool = True,
    options: Options | None = None,
    source: str | None = None,
    earlier: ScriptAnalysis | None = None,
    *,
    program_out_of_sight: bool = False,
) -> ScriptAnalysis:
    """The shared analysis of a lone module (a crash in it is a one-line error, like a crash in a rule); the
    analysis of a clone of it where :func:`index_of` says so. ``source``: the text the module was just
    parsed from (its positions are then generated only around the nodes a report asks about). ``earlier``:
    the analysis of the module a fix rewrote into this one (the statements the fix kept are not generated
    again, :class:`~ddp_migrate.codemods.analysis.positions.Generated`)."""

    def build() -> ScriptAnalysis:
        index = ModuleIndex(module, source) if source is not None else index_of(module, earlier.index if earlier is not None else None)
        return ScriptAnalysis(index.module, is_entry=is_entry, options=options, index=index, program_out_of_sight=program_out_of_sight)

    return _guarded("the script analysis", build)


def index_of(module: cst.Module, earlier: ModuleIndex | None = None) -> ModuleIndex:
    """The index of a module a fix produced. A fix keeps every subtree it does not edit (the same objects);
    one that copied a subtree and kept the original leaves a node at two places, with one parent: such a
    module is cloned (every node its own object again) before it is analysed."""
    index = ModuleIndex(module, earlier=earlier)
    return ModuleIndex(module.deep_clone()) if index.shares_nodes else index


def _applies(rule: Rule, vocabulary: Vocabulary) -> bool:
    """Whether the rule passes the gate (its words occur, the names it needs are spelled): without that
    it has nothing to find."""
    return vocabulary.could_match(type(rule))


def fix_to_fixed_point(
    module: cst.Module,
    rules: Sequence[Rule],
    options: Options,
    path: str,
    is_entry: bool = True,
    fixable: frozenset[type[Rule]] | None = None,
    vocabulary: Vocabulary | None = None,
    authors: TodoAuthors | None = None,
    *,
    program_out_of_sight: bool = False,
) -> tuple[cst.Module, list[Change], ScriptAnalysis, Vocabulary]:
    """Run every fix in phase order, pass after pass, until a whole pass changes nothing.

    The file is settled only when no rule changed it during a pass: two rules that undo each other leave
    the text as it was at the start of the pass, yet they have not settled. The analysis is rebuilt only
    after a rule changed the module, and the final one is handed back for the findings and notes, with the
    gate's view of the final text. A rule
    that changed nothing is not run again on the same analysis (its fix reads nothing else).
    ``fixable``: the rule classes whose fixes may run (``None``: all; ``lint --fix`` leaves out unsafe fixes).
    ``vocabulary``: the gate's view of the module's source (:func:`vocabulary_of`), when the caller has it.
    ``authors``: where to note which rule wrote each TODO comment.
    """
    changes: list[Change] = []
    ordered = sorted((r for r in rules if r.can_fix() and (fixable is None or type(r) in fixable)), key=lambda r: (r.phase, r.code))
    analysis = analyse(module, is_entry, options, program_out_of_sight=program_out_of_sight)
    parsed = module
    text = analysis.code  # libcst's printout, which every fix's output is compared with
    # The printout differs from the source in layout only (a leading form feed, trailing blanks): the same names.
    words = vocabulary.reprinted(text) if vocabulary is not None else vocabulary_of(text, path)
    origins = LineOrigins(text)
    settled_on: dict[Rule, ScriptAnalysis] = {}  # the analysis each rule last changed nothing in
    for _ in range(MAX_PASSES):
        changed_this_pass: list[str] = []
        for rule in ordered:
            if not _applies(rule, words) or settled_on.get(rule) is analysis:
                continue
            current = analysis
            settled_on[rule] = current
            result = _run_rule(rule, "fixing", lambda: rule.fix(current, options))
            if result is None or result.module is current.module:
                continue
            # The next analysis is built before it is known to be needed: its index generates the code and
            # the positions in one pass, and the rules ask for positions of almost every rewritten module.
            rewritten = analyse(result.module, is_entry, options, earlier=current, program_out_of_sight=program_out_of_sight)  # (a clone of it, see index_of)
            new_text = rewritten.code
            if new_text == text:
                continue
            if blocked_by_noqa(rule, current, new_text):
                continue
            words = verify(new_text, path, rule)
            if authors is not None:
                authors.record(rule, text, new_text)
            changes.extend(origins.changes(result.changes))
            origins = origins.advance(text, new_text)
            module, text, analysis = rewritten.module, new_text, rewritten
            changed_this_pass.append(rule.code)
        if not changed_this_pass:
            if module is not parsed and module.code != text:
                # The analysis generates a rewritten module's code reusing the statements kept from before
                # (:mod:`~ddp_migrate.codemods.analysis.positions`): checked once against libcst's own printout.
                raise FileError("internal error: the generated code of the migrated module differs from libcst's; file left unchanged, please report this")
            return module, sort_changes(changes), analysis, words
    involved = ", ".join(dict.fromkeys(changed_this_pass))
    raise FileError(f"fixes did not settle after {MAX_PASSES} passes (rules still changing the file: {involved}); file left unchanged")


def sort_changes(changes: Sequence[Change]) -> list[Change]:
    """The report's order: by line in the original file, then by code (stable for equal keys)."""
    return sorted(changes, key=lambda change: (change.line, change.code))


class LineOrigins:
    """Where each line of an intermediate text of a migration came from in the original file.

    A rule reports its :class:`Change` at a line of the text it fixed, which earlier fixes may already have
    moved (an import block inserted at the top shifts everything below it). The engine keeps, for every
    line of the current text, the 1-based line of the original file it descends from, and moves each
    change's line through it, so the report speaks of the file the user wrote. Each step is aligned with
    :class:`difflib.SequenceMatcher` on the two line lists: an unchanged line keeps its origin, a rewritten
    line takes the origin of the line it replaced (the last one, when a fix turned fewer lines into more),
    and an inserted line takes the origin of the original line it was inserted before (the last line when
    inserted at the end).
    """

    __slots__ = ("origins",)

    def __init__(self, text: str | None = None, origins: list[int] | None = None) -> None:
        self.origins = origins if origins is not None else list(range(1, len(split_lines(text)) + 1)) if text else []

    def original(self, line: int) -> int:
        """The original line of a 1-based line of the current text (clamped to the text's lines)."""
        if not self.origins:
            return max(line, 1)
        return self.origins[min(max(line, 1), len(self.origins)) - 1]

    def changes(self, changes: Sequence[Change]) -> list[Change]:
        """The changes a fix reported at lines of the current text, moved to lines of the original file."""
        return [replace(change, line=self.original(change.line)) for change in changes]

    def advance(self, old_text: str, new_text: str) -> "LineOrigins":
        """The origins of the lines of ``new_text``, the current text (``old_text``) after one fix."""
        old, new = split_lines(old_text), split_lines(new_text)
        at = self.origins
        if len(at) != len(old):  # not the text these origins describe: start from it as it is
            at = list(range(1, len(old) + 1))
        result: list[int] = []
        last = at[-1] if at else 1
        for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, old, new, autojunk=False).get_opcodes():
            if tag == "equal":
                result.extend(at[i1:i2])
            elif tag == "replace":
                result.extend(at[min(i1 + k, i2 - 1)] for k in range(j2 - j1))
            elif tag == "insert":
                result.extend([at[i1] if i1 < len(at) else last] * (j2 - j1))
        return LineOrigins(origins=result)


def _statement_starts(text: str) -> dict[int, int]:
    """For every line of a statement, the line the statement starts on (where its noqa comment goes).

    A compound statement's header (``for ...:``, a decorated ``def``) counts as one statement; its body's
    statements are their own. Lines outside any statement (blank, comments) are left out.
    """
    starts: dict[int, int] = {}
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return starts

    for statement in nested_statements(tree.body):  # a compound statement before the statements inside it
        first = first_line(statement)
        inner = child_statements(statement)
        header_end = (min(s.lineno for s in inner) - 1) if inner else (statement.end_lineno or statement.lineno)
        for line in range(first, max(header_end, first) + 1):
            starts.setdefault(line, first)
    return starts


def _touched_lines(old_text: str, new_text: str) -> set[int]:
    """The 1-based lines of ``old_text`` that a fix rewrote or removed (a line inserted between two others
    touches neither)."""
    old, new = split_lines(old_text), split_lines(new_text)
    touched: set[int] = set()
    for tag, i1, i2, _, _ in difflib.SequenceMatcher(None, old, new, autojunk=False).get_opcodes():
        if tag in ("replace", "delete"):
            touched.update(range(i1 + 1, i2 + 1))
    return touched


def blocked_by_noqa(rule: Rule, analysis: ScriptAnalysis, new_text: str) -> bool:
    """Whether a ``# noqa`` comment in the text the rule fixed forbids the fix that produced ``new_text``.

    As in ruff, a line that carries ``# noqa`` (bare) or ``# noqa: CODE`` is neither reported nor
    rewritten by that rule. The fix is dropped whole when

    * any of the rule's own findings in the current text starts on such a line (even when other findings
      of the rule are not silenced: a fix rewrites all its matches at once and cannot be split safely, so
      the whole fix is skipped and the findings that are not silenced stay in the report for a human), or
    * it rewrites or removes a line of a statement whose first line (or the line itself) carries such a
      comment, found or not (a fix that reaches into a protected statement for another reason).

    Comments are read from the CURRENT text (the one the rule analysed), so lines moved by earlier fixes
    are compared at their current positions. Without a matching comment nothing is computed.
    """
    old_text = analysis.code
    comments = {line: c for line, c in noqa_comments(old_text).items() if c.suppresses(rule.code)}
    if not comments:
        return False
    findings = _run_rule(rule, "checking noqa comments", lambda: rule.find(analysis))
    if any(finding.line in comments for finding in findings):
        return True
    touched = _touched_lines(old_text, new_text)
    if touched & comments.keys():
        return True
    starts = _statement_starts(old_text)
    return any(starts.get(line) in comments for line in touched)


def find_all(analysis: ScriptAnalysis, rules: Sequence[Rule], vocabulary: Vocabulary, text: str) -> list[Finding]:
    """Every finding of every rule that passes the gate (``vocabulary``: the module's, or the whole
    program's), sorted by position. ``text``: the module's code, for the rules that read the text alone
    (:meth:`Rule.find_in_text`)."""
    findings: list[Finding] = []
    for rule in rules:
        if _applies(rule, vocabulary):
            found = _run_rule(rule, "checking", lambda: rule.find_in_text(text))
            findings.extend(found if found is not None else _run_rule(rule, "checking", lambda: rule.find(analysis)))
    superseded = {
        (code, finding.line, finding.column) for rule in rules if rule.supersedes for finding in findings if finding.code == rule.code for code in rule.supersedes
    }
    if superseded:
        findings = [finding for finding in findings if (finding.code, finding.line, finding.column) not in superseded]
    return sorted(findings, key=Finding.sort_key)


def collect_notes(analysis: ScriptAnalysis, rules: Sequence[Rule], options: Options) -> list[Note]:
    """The report's notes about the final module (things that are right but worth knowing)."""
    notes: list[Note] = []
    for rule in rules:
        notes.extend(_run_rule(rule, "writing notes", lambda: rule.notes(analysis, options)))
    return sorted(notes, key=lambda n: (n.line, n.code))


def process(
    path: str,
    data: bytes,
    rule_classes: Sequence[type[Rule]],
    options: Options,
    fix: bool,
    is_entry: bool = True,
    fixable: frozenset[type[Rule]] | None = None,
    *,
    program_out_of_sight: bool = False,
) -> FileResult:
    """Run the pipeline on one file's bytes, a program of its own; errors land in ``result.error`` as one
    ``path:line:col:`` line. ``is_entry=False`` for a module no entry reaches (no process group is due).

    Findings that a ``# noqa`` comment on their first line silences are dropped (:mod:`ddp_migrate.noqa`),
    and a fix that would rewrite such a line is not applied (:func:`blocked_by_noqa`).

    Positions: ``result.changes`` are at lines of the ORIGINAL file (:class:`LineOrigins`), sorted by line
    then code; ``result.findings`` and ``result.notes`` after a migration are at lines of the FINAL text
    (``result.new_text``: the file as written, and the ``+`` side of ``--diff``), since that is the text a
    human reviews them in.
    """
    result = FileResult(path=path, original=data, role="entry" if is_entry else "library")
    try:
        source = decode(data)
        result.text = result.new_text = source.text
        vocabulary = vocabulary_of(source.text, path)
        live = vocabulary.narrowed([cls for cls in rule_classes if vocabulary.could_match(cls)])
        if not live:
            result.skipped = True
            return result
        if not fix and _find_in_text(result, live):
            return result
        # A lint writes nothing: its module is only read, so the big tables of numbers nested in other literals,
        # where no rule finds anything, are parsed empty (lines and columns kept; :mod:`ddp_migrate.tables`).
        parsed = source.text if fix else blank_number_tables(source.text)
        module = parse_checked(parsed)
        rules = [_instance(cls, options) for cls in rule_classes]
        authors = TodoAuthors()
        if fix:
            module, result.changes, analysis, vocabulary = fix_to_fixed_point(
                module, rules, options, path, is_entry, fixable, vocabulary, authors, program_out_of_sight=program_out_of_sight
            )
            result.new_text = analysis.code
        else:
            analysis = analyse(module, is_entry, options, parsed, program_out_of_sight=program_out_of_sight)
        text = result.new_text if fix else source.text  # the module's code, without generating it again
        result.findings = suppress(find_all(analysis, rules, vocabulary, text), text)
        if fix:
            result.findings = sorted(result.findings + unreported_todos(text, result.findings, authors), key=Finding.sort_key)
        result.notes = collect_notes(analysis, rules, options) if fix else []
        if fix:
            advice_as_notes(result)
        if fix and options.review_todos:
            add_review_todos(result)
        analysis.release()
        if fix and result.new_text != source.text:
            lay_out(result)
            verify_output(result.new_text)
            result.output = source.encode(result.new_text)
    except (SourceError, FileError) as error:
        result.error = f"{path}:{error.line}:{error.column}: {error.message}"
        result.output = None
        result.changes = []
        result.new_text = result.text
    return result


def advice_as_notes(result: FileResult) -> None:
    """A migration's findings that are advice (left unfixed, the migrated program computes the original's: a
    ``no_sync()`` it cannot place) become notes, not items for a human; in a lone file and in every module of a
    program alike."""
    if any(f.advice for f in result.findings):
        result.notes += [Note(f.code, f.line, f.message) for f in result.findings if f.advice]
        result.notes.sort(key=lambda n: (n.line, n.code))
        result.findings = [f for f in result.findings if not f.advice]


def _find_in_text(result: FileResult, rules: Sequence[type[Rule]]) -> bool:
    """The findings of a lint whose rules all read the source text alone (:meth:`Rule.find_in_text`):
    no parse, no analysis. ``False`` (nothing done) when one of them reads the parsed module."""
    found: list[Finding] = []
    for rule in rules:
        findings = _run_rule(rule, "checking", lambda: rule.find_in_text(result.text))
        if findings is None:
            return False
        found.extend(findings)
    result.findings = suppress(sorted(found, key=Finding.sort_key), result.text)
    return True


@dataclass
class ProgramFile:
    """One file of a program, as the engine receives it."""

    path: str
    data: bytes
    info: ModuleInfo
    rules: Sequence[type[Rule]]
    #: Whether the file may be rewritten (``False``: analysed with the program, reported, left as it is).
    migrate: bool = True


def process_program(
    files: Sequence[ProgramFile], options: Options, fix: bool, fixable: frozenset[type[Rule]] | None = None
) -> list[FileResult]:
    """Run the pipeline on the files of one program analysed together (the entry first).

    Every file is decoded and parsed; one :class:`Program` analysis spans them all, so a loader built in
    one module and iterated in another, or a model built in the entry and trained by a ``Trainer`` module,
    is known as such. Fixes run in phase order across the modules, pass after pass, until a pass changes
    nothing; only the module a fix rewrote is indexed again. Each file gets its own result; a file that
    cannot be read or parsed is reported and the others go on without it.

    As in :func:`process`: a fix that would rewrite a line its rule's ``# noqa`` protects is not applied;
    changes are at lines of each module's original text, sorted; findings and notes at lines of its final text.
    """
    entry = files[0].path if files else None
    results: dict[str, FileResult] = {}
    modules: dict[str, tuple[cst.Module, ModuleInfo]] = {}
    sources = {}
    compiled: dict[str, Vocabulary] = {}  # each module's source, for the gate
    for file in files:
        result = FileResult(path=file.path, original=file.data, role="entry" if file.info.is_entry else "module", entry=entry)
        depth = file.info.name.count(".") + (1 if file.info.is_package else 0)
        result.import_root = str(Path(file.path).parents[depth]) if depth and depth < len(Path(file.path).parents) else None
        results[file.path] = result
        try:
            source = decode(file.data)
            result.text = result.new_text = source.text
            compiled[file.path] = vocabulary_of(source.text, file.path)
            modules[file.path] = (parse_checked(source.text), file.info)
            sources[file.path] = source
        except (SourceError, FileError) as error:
            result.error = f"{file.path}:{error.line}:{error.column}: {error.message}"
    by_path = {file.path: file for file in files}
    try:
        program = _guarded("the program analysis", lambda: Program(modules, options))
        rules_of = {path: [cls for cls in by_path[path].rules] for path in modules}
        instances = {cls: _instance(cls, options) for path in modules for cls in rules_of[path]}
        vocabularies = {path: compiled[path].reprinted(program.code(path)) for path in program.keys()}
        authors = TodoAuthors()
        if fix:
            writable = {p for p in modules if by_path[p].migrate}
            changes = _fix_program(program, instances, rules_of, writable, options, fixable, vocabularies, authors)
            for path, found in changes.items():
                results[path].changes = found
        codes = program_codes(program)  # each module's code, generated once (the indexes keep it)
        vocabulary = Vocabulary.joined(vocabularies.values())
        for path in modules:
            analysis = program.analysis(path)
            rules = [instances[cls] for cls in rules_of[path]]
            result = results[path]
            result.new_text = codes[path]
            result.findings = suppress(find_all(analysis, rules, vocabulary, result.new_text), result.new_text)
            if fix:
                found = result.findings + unreported_todos(result.new_text, result.findings, authors)
                result.findings = sorted(found, key=Finding.sort_key)
            result.notes = collect_notes(analysis, rules, options) if fix and by_path[path].migrate else []
            if fix and by_path[path].migrate:
                advice_as_notes(result)
            if fix and options.review_todos and by_path[path].migrate:
                add_review_todos(result)
            if result.new_text != result.text:
                lay_out(result)
                verify_output(result.new_text)
                result.output = sources[path].encode(result.new_text)
        program.release()
    except FileError as error:
        for path in modules:
            result = results[path]
            result.error = f"{path}:{error.line}:{error.column}: {error.message}"
            result.output, result.changes, result.new_text = None, [], result.text
    for result in results.values():
        if result.role == "entry":
            result.reviews_elsewhere = sum(len(other.findings) for other in results.values() if other.role == "module")
    return [results[file.path] for file in files]


def add_review_todos(result: FileResult) -> None:
    """A ``# TODO(ddp-migrate): <message>`` comment above the statement of every finding the migration
    leaves to a human (advice, severity ``info``, aside), unless a TODO of the tool already stands there (a rule's own, or one from an earlier
    run); findings and notes move down with the lines."""
    if not result.findings:
        return
    lines = split_lines(result.new_text, keepends=True)
    try:
        tree = ast.parse(result.new_text)
    except SyntaxError:
        return
    inserted: dict[int, list[str]] = {}
    for finding in result.findings:
        if finding.severity is Severity.INFO:
            continue  # advice (an unreduced metric on display), not a change the program needs
        start = statement_start(tree, finding.line, finding.column)
        if start is None:
            continue
        above = start - 2  # the comment lines right above the statement (0-based)
        while above >= 0 and lines[above].lstrip().startswith("#") and TODO_PREFIX.strip() not in lines[above]:
            above -= 1
        if above >= 0 and TODO_PREFIX.strip() in lines[above]:
            continue
        first = lines[start - 1]
        indent = first[: len(first) - len(first.lstrip())]
        comment = f"{indent}{TODO_PREFIX}{' '.join(finding.message.split())}\n"  # one line, whatever the message
        if comment not in inserted.setdefault(start, []):
            inserted[start].append(comment)
    if not inserted:
        return
    out: list[str] = []
    mapping: list[tuple[int, int]] = []
    for number, line in enumerate(lines, 1):
        out.extend(inserted.get(number, []))
        out.append(line)
        mapping.append((len(out), len(out)))
    _relocate(result, Wrapped("".join(out), mapping))


def lay_out(result: FileResult) -> None:
    """Wrap the long lines the migration wrote to the project's line length (:mod:`layout`); findings and
    notes, at lines of the text before, move with them."""
    wrapped = wrap_new_lines(result.text, result.new_text, line_length_for(result.path))
    if wrapped.text != result.new_text:
        _relocate(result, wrapped)


def _relocate(result: FileResult, rewritten: Wrapped) -> None:
    """Take the rewritten text, and move the findings and notes (at lines of the text before) with its lines."""
    result.new_text = rewritten.text
    result.findings = [
        replace(f, line=rewritten.start(f.line), end_line=rewritten.end(f.end_line)) for f in result.findings
    ]
    result.notes = [replace(n, line=rewritten.start(n.line)) for n in result.notes]


def program_codes(program: Program) -> dict[str, str]:
    """Each module's current code, in the program's order (the entry first)."""
    return {key: program.code(key) for key in program.keys()}


def _fix_program(
    program: Program,
    instances: dict[type[Rule], Rule],
    rules_of: dict[str, list[type[Rule]]],
    writable: set[str],
    options: Options,
    fixable: frozenset[type[Rule]] | None,
    vocabularies: dict[str, Vocabulary],
    authors: TodoAuthors,
) -> dict[str, list[Change]]:
    """Run every fix over the program's writable modules to a fixed point; the changes per module.
    ``vocabularies``: the gate's view of each module, kept up to date here as fixes land; ``authors``: where
    to note which rule wrote each TODO comment."""
    changes: dict[str, list[Change]] = {key: [] for key in program.keys()}
    origins = {key: LineOrigins(program.code(key)) for key in program.keys()}
    ordered = sorted(
        {rule for rule in instances.values() if rule.can_fix() and (fixable is None or type(rule) in fixable)},
        key=lambda r: (r.phase, r.code),
    )
    for _ in range(MAX_PASSES):
        changed_this_pass: list[str] = []
        vocabulary = Vocabulary.joined(vocabularies.values())
        for rule in ordered:
            if not _applies(rule, vocabulary):
                continue
            for key in program.keys():
                if key not in writable or type(rule) not in rules_of[key]:
                    continue
                analysis = program.analysis(key)
                result = _run_rule(rule, f"fixing {key}", lambda: rule.fix(analysis, options))
                if result is None or result.module is analysis.module:
                    continue
                index = _guarded("the script analysis", lambda: index_of(result.module))
                new_text = index.code
                if new_text == analysis.code:
                    continue
                if blocked_by_noqa(rule, analysis, new_text):
                    continue
                vocabularies[key] = verify(new_text, key, rule)
                authors.record(rule, analysis.code, new_text)
                changes[key].extend(origins[key].changes(result.changes))
                origins[key] = origins[key].advance(analysis.code, new_text)
                program.replace(key, index.module, index)
                changed_this_pass.append(rule.code)
                vocabulary = Vocabulary.joined(vocabularies.values())
        if not changed_this_pass:
            return {key: sort_changes(found) for key, found in changes.items()}
    involved = ", ".join(dict.fromkeys(changed_this_pass))
    raise FileError(f"fixes did not settle after {MAX_PASSES} passes (rules still changing the program: {involved}); files left unchanged")
