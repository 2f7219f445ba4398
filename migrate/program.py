"""Programs, not files: grouping the files to process into units that are analysed and migrated together.

A unit is either a *program* (an entry script and the local modules it imports, migrated as one) or a
*standalone* file (a library module or a test no entry reaches: linted, never migrated). The runner hands
each unit to one worker; :func:`process_unit` runs the engine over the whole unit.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Sequence

from ddp_migrate.codemods.analysis.program import ModuleInfo
from ddp_migrate.codemods.analysis.project import (
    SourceFacts,
    is_test_file,
    may_start_program,
    may_distribute,
    module_names,
    resolve_imports,
    scan,
    search_roots,
)
from ddp_migrate.codemods.base import Note, Options, Rule

from .engine import FileResult, ProgramFile, process, process_program
from .source import SourceError, decode

RulesFor = Callable[[Path], Sequence[type[Rule]]]
#: Scans many files at once (:func:`scan_path` over worker processes, in the order given).
ScanMany = Callable[[Sequence[Path]], Sequence["SourceFacts | None"]]


@dataclass(frozen=True)
class Unit:
    """Files processed together by one worker.

    ``paths`` are every file of the unit, the entry first for a program (``entries``: all its entry scripts); ``migrate`` the ones that may be
    rewritten (all of a program's modules, or only the files named with ``follow_imports=False``);
    ``entry`` is ``None`` for a file no entry reaches (a library module or a test: linted, not migrated).
    ``names`` holds each file's dotted module name and ``packages`` the files that are packages.
    """

    paths: tuple[Path, ...]
    migrate: frozenset[Path] = field(default_factory=frozenset)
    entry: Path | None = None
    #: Every entry script of a program (programs that share a module are one unit): each sets up its own
    #: process group when it runs.
    entries: frozenset[Path] = field(default_factory=frozenset)
    names: tuple[tuple[Path, str], ...] = ()
    #: The other names a file of the unit can be imported by (:func:`module_names`), where it has some.
    aliases: tuple[tuple[Path, tuple[str, ...]], ...] = ()
    packages: frozenset[Path] = field(default_factory=frozenset)
    why_not: str = ""
    #: The modules of the program that a script outside it imports too (:attr:`ModuleInfo.shared_with_other_scripts`).
    shared_with_other_scripts: frozenset[Path] = field(default_factory=frozenset)
    #: Entries read alone because their program is too large to analyse whole (:attr:`ModuleInfo.program_out_of_sight`).
    program_out_of_sight: frozenset[Path] = field(default_factory=frozenset)


#: Why a test file is not migrated (a migration reports nothing else about it: lint does).
WHY_NOT_A_TEST = "a test file"
#: A program with more local modules than this is processed file by file (a library, not a training
#: program; the analysis of a program holds all its modules in memory at once).
MAX_PROGRAM_MODULES = 100


def _read_text(path: Path) -> str | None:
    try:
        return decode(path.read_bytes()).text
    except (OSError, SourceError):
        return None


def scan_path(path: Path) -> SourceFacts | None:
    """The cheap scan of one file (``None`` when it cannot be read): what a worker process does for a plan."""
    text = _read_text(path)
    return scan(path, text) if text is not None else None


class _Scanner:
    """The cheap ``ast`` scan of every file the plan touches, done once per file (only its facts are kept).

    It also remembers, for the length of one plan, what the plan asks again and again of the file system:
    resolved paths, which files are tests and the package ``__init__.py`` files above a folder.
    ``scan_many`` scans a batch of files in worker processes (:meth:`prefetch`); without it every file is
    scanned here, when it is first asked for.
    """

    def __init__(self, scan_many: ScanMany | None = None) -> None:
        self.scan_many = scan_many
        self.facts: dict[Path, SourceFacts | None] = {}
        self.texts: dict[Path, str | None] = {}
        self._resolved: dict[Path, Path] = {}
        self._folders: dict[Path, Path] = {}
        self._tests: dict[Path, bool] = {}
        self._inits: dict[Path, tuple[Path, ...]] = {}

    def resolve(self, path: Path) -> Path:
        """``path.resolve()``, asked of the file system once per path: a file that is no link is its folder,
        resolved once per folder, and its name."""
        found = self._resolved.get(path)
        if found is None:
            if path.name in ("", ".", "..") or path.is_symlink():
                found = path.resolve()
            else:
                folder = self._folders.get(path.parent)
                if folder is None:
                    folder = self._folders[path.parent] = path.parent.resolve()
                found = folder / path.name
            self._resolved[path] = found
            self._resolved[found] = found
        return found

    def is_test(self, path: Path) -> bool:
        """:func:`is_test_file`, once per file."""
        key = self.resolve(path)
        found = self._tests.get(key)
        if found is None:
            found = self._tests[key] = is_test_file(key, resolved=True)
        return found

    def package_inits(self, folder: Path) -> tuple[Path, ...]:
        """The resolved ``__init__.py`` of ``folder`` and of every package folder above it, innermost first."""
        found = self._inits.get(folder)
        if found is None:
            init = folder / "__init__.py"
            if init.is_file() and folder.parent != folder:
                found = (self.resolve(init), *self.package_inits(folder.parent))
            else:
                found = ()
            self._inits[folder] = found
        return found

    def text(self, path: Path) -> str | None:
        """The file's text, read once; dropped again once the file is scanned."""
        key = self.resolve(path)
        if key in self.facts:
            return None
        if key not in self.texts:
            self.texts[key] = _read_text(key)
        return self.texts[key]

    def __call__(self, path: Path) -> SourceFacts | None:
        key = self.resolve(path)
        if key not in self.facts:
            text = self.texts.pop(key, None) if key in self.texts else _read_text(key)
            self.facts[key] = scan(key, text) if text is not None else None
        return self.facts[key]

    def distributes(self, path: Path) -> bool:
        """Whether the file's facts say it distributes (:attr:`SourceFacts.distributes`); a file not scanned yet
        is scanned only if its text holds one of the words (the fact is a text test, false for a file that does
        not parse)."""
        key = self.resolve(path)
        if key not in self.facts:
            text = self.texts[key] = self.texts[key] if key in self.texts else _read_text(key)  # (kept for the scan)
            if text is None or not may_distribute(text):
                self.texts.pop(key, None)
                return False
        facts = self(key)
        return facts is not None and facts.distributes

    def scanned(self, path: Path) -> bool:
        """Whether the file's facts are known (asking for them costs nothing)."""
        return self.resolve(path) in self.facts

    def prefetch(self, paths: Iterable[Path]) -> None:
        """Scan the files not scanned yet in one batch, over the worker processes when there are some."""
        todo = [key for key in dict.fromkeys(self.resolve(path) for path in paths) if key not in self.facts]
        if self.scan_many is None or len(todo) < 2:
            for key in todo:
                self(key)
            return
        for key, facts in zip(todo, self.scan_many(todo)):
            self.facts[key] = facts
            self.texts.pop(key, None)


@dataclass
class _Closure:
    """One entry's closure while it is being found: breadth first, in import order."""

    roots: tuple[Path, ...]
    order: list[Path]
    seen: set[Path]
    queue: deque[Path]

    @property
    def growing(self) -> bool:
        return bool(self.queue) and len(self.order) <= MAX_PROGRAM_MODULES


def _closures(entries: Sequence[Path], scanner: _Scanner) -> dict[Path, list[Path]]:
    """For each entry, the entry and every local module it imports, directly or through other local modules.

    Each closure is found breadth first, one module at a time, and stops past :data:`MAX_PROGRAM_MODULES`.
    The closures grow side by side: each goes as far as the modules already scanned take it, then the
    modules waiting in all their queues are scanned in one batch (in parallel when the scanner has
    workers). The result is the same as growing one closure after the other.
    """
    closures = {}
    for entry in entries:
        start = scanner.resolve(entry)
        closures[entry] = _Closure(search_roots(entry, _added_roots(scanner(start))), [start], {start}, deque([start]))
    while growing := [c for c in closures.values() if c.growing]:
        scanner.prefetch(path for closure in growing for path in closure.queue)
        for closure in growing:
            while closure.growing and scanner.scanned(closure.queue[0]):
                current = closure.queue.popleft()
                facts = scanner(current)
                if facts is None or not facts.parsed:
                    continue
                for imported in [*resolve_imports(facts, closure.roots), *_packages_of(current, scanner)]:
                    if imported not in closure.seen and not scanner.is_test(imported):
                        closure.seen.add(imported)
                        closure.order.append(imported)
                        closure.queue.append(imported)
    return {entry: closure.order for entry, closure in closures.items()}


def _added_roots(facts: SourceFacts | None) -> list[Path]:
    """The folders an entry adds to ``sys.path`` itself, where its imports are looked up too."""
    return [folder for folder in facts.path_additions if folder.is_dir()] if facts is not None else []


def _packages_of(path: Path, scanner: _Scanner) -> list[Path]:
    """The ``__init__.py`` of every package the file sits in: importing the file runs them."""
    return [init for init in scanner.package_inits(path.parent) if init != path]


def _is_entry(path: Path, facts: SourceFacts | None, imported: set[Path], scanner: _Scanner) -> bool:
    if facts is None or not facts.parsed or scanner.is_test(path):
        return False
    return facts.has_main_guard or (facts.works_at_module_level and scanner.resolve(path) not in imported)


def _speller(given: dict[Path, Path], entry: Path) -> Callable[[Path], Path]:
    """How the files of a program are named: as the user spelled them, and a module reached through
    imports the way its entry was spelled (relative to the working folder when the entry was, else by its
    full path), so one report names a program's files alike."""
    if entry.is_absolute():
        return lambda module: given.get(module, module)
    here = Path.cwd().resolve()

    def spell(module: Path) -> Path:
        if module in given:
            return given[module]
        try:
            return module.relative_to(here)
        except ValueError:
            return module

    return spell


def plan(files: Sequence[Path], follow_imports: bool = True, scan_many: ScanMany | None = None) -> list[Unit]:
    """Group the files into units: one per program (an entry and the local modules it imports, programs
    that share a module merged into one unit), and one per file that no entry reaches.

    Files keep the spelling the user gave; modules reached through imports are named by their path.
    ``scan_many``: scans batches of files in worker processes (the runner's pool); the units are the same.
    """
    scanner = _Scanner(scan_many)
    given = {scanner.resolve(path): path for path in files}
    candidates = []
    for resolved in given:
        text = scanner.text(resolved)
        if text is not None and not scanner.is_test(resolved) and may_start_program(text):
            candidates.append(resolved)
            if scan_many is None:
                scanner(resolved)  # scanned from the text just read, which it then drops
        else:
            scanner.texts.pop(resolved, None)
    scanner.prefetch(candidates)
    runnable = [
        r for r in candidates if (facts := scanner(r)) is not None and facts.parsed and (facts.has_main_guard or facts.works_at_module_level)
    ]
    closures = _closures(runnable, scanner)
    imported: set[Path] = {module for closure in closures.values() for module in closure[1:]}
    entries = [r for r in candidates if _is_entry(r, scanner(r), imported, scanner)]
    # Only a program that trains is worth analysing as a whole; the others (a library's scripts and
    # examples) are processed file by file, which keeps the units of a large tree small.
    imported_alone: set[Path] = set()  # modules that scripts processed alone import
    too_large: set[Path] = set()  # entries of programs past the cap, read alone
    for entry in entries:
        members = closures[entry]
        too_many = len(members) > MAX_PROGRAM_MODULES  # (first: the modules past the cap were never scanned)
        if too_many or not any((facts := scanner(m)) is not None and facts.trains for m in members):
            imported_alone.update(members[1:])
            if too_many and any(scanner.distributes(m) for m in members[1:]):
                too_large.add(entry)  # (what its imports do decides the migration, and they are out of sight)
            closures[entry] = [entry]
    groups: list[tuple[list[Path], list[Path]]] = []  # (entries, modules in order)
    for entry in entries:
        members = closures[entry]
        overlapping = [g for g in groups if set(g[1]) & set(members)]
        merged_entries, merged = [entry], list(members)
        for group in overlapping:
            groups.remove(group)
            merged_entries = [*group[0], *merged_entries]
            merged = [*group[1], *(m for m in merged if m not in group[1])]
        groups.append((merged_entries, merged))
    # A merged group past the cap is a library's web of scripts, not a training program: file by file.
    for group_entries, members in [g for g in groups if len(g[1]) > MAX_PROGRAM_MODULES]:
        groups.remove((group_entries, members))
        groups.extend(([entry], [entry]) for entry in group_entries)
        if any((facts := scanner(m)) is not None and facts.distributes for m in members if m not in group_entries):
            too_large.update(group_entries)
    units: list[Unit] = []
    covered: set[Path] = set()
    for group_entries, members in groups:
        ordered = [*group_entries, *(m for m in members if m not in group_entries)]
        roots = search_roots(group_entries[0], _added_roots(scanner(scanner.resolve(group_entries[0]))))
        spell = _speller(given, given.get(group_entries[0], group_entries[0]))
        named = {m: module_names(m, roots) for m in ordered}
        names = tuple((spell(m), named[m][0][0]) for m in ordered)
        aliases = tuple((spell(m), tuple(named[m][0][1:])) for m in ordered if len(named[m][0]) > 1)
        packages = frozenset(spell(m) for m in ordered if named[m][1])
        paths = tuple(spell(m) for m in ordered)
        writable = frozenset(p for p in paths if follow_imports or p.resolve() in given)
        units.append(
            Unit(
                paths=paths,
                migrate=writable,
                entry=paths[0],
                entries=frozenset(spell(e) for e in group_entries),
                names=names,
                aliases=aliases,
                packages=packages,
                shared_with_other_scripts=frozenset(spell(m) for m in ordered if m in imported_alone),
                program_out_of_sight=frozenset(spell(m) for m in ordered if m in too_large),
            )
        )
        covered.update(ordered)
    for resolved, path in given.items():
        if resolved in covered:
            continue
        facts = scanner.facts.get(resolved)
        if facts is not None and not facts.parsed:
            units.append(Unit(paths=(path,), migrate=frozenset({path}), entry=path))
            continue
        why = WHY_NOT_A_TEST if scanner.is_test(resolved) else "a module no entry script reaches (migrate the script that runs it)"
        units.append(Unit(paths=(path,), why_not=why))
    return units


def read_result(path: Path) -> tuple[bytes | None, FileResult | None]:
    """A file's bytes, or the result that reports why it cannot be read."""
    try:
        return path.read_bytes(), None
    except OSError as error:
        return None, FileResult(path=str(path), original=b"", error=f"{path}:1:1: cannot read: {error.strerror or error}")


def process_unit(
    unit: Unit, rules_for: RulesFor, options: Options, fix: bool, fixable: frozenset[type[Rule]] | None = None
) -> list[FileResult]:
    """Run the engine over a unit: a lone script through the single-file pipeline, a program of several
    modules through :func:`ddp_migrate.engine.process_program`, a library file or test linted only."""
    if unit.entry is None:
        path = unit.paths[0]
        data, failed = read_result(path)
        if failed is not None:
            return [failed]
        result = process(str(path), data, tuple(rules_for(path)), options, fix=False, is_entry=False)  # type: ignore[arg-type]
        if fix and not result.error:
            if unit.why_not == WHY_NOT_A_TEST:
                result.findings = []  # a test runs in one process: nothing in it is left for a human to migrate
            result.notes.append(Note("program", 1, f"not migrated: {unit.why_not}"))
        return [result]
    if len(unit.paths) == 1:
        path = unit.paths[0]
        data, failed = read_result(path)
        if failed is not None:
            return [failed]
        rules = tuple(rules_for(path))
        result = process(
            str(path), data, rules, options, fix and path in unit.migrate, fixable=fixable, program_out_of_sight=path in unit.program_out_of_sight  # type: ignore[arg-type]
        )
        return [result]
    names = dict(unit.names)
    aliases = dict(unit.aliases)
    files: list[ProgramFile] = []
    failures: list[FileResult] = []
    for path in unit.paths:
        data, failed = read_result(path)
        if failed is not None:
            failures.append(failed)
            continue
        is_entry = path == unit.entry or path in unit.entries
        info = ModuleInfo(
            names.get(path, path.stem),
            is_entry=is_entry,
            is_package=path in unit.packages,
            aliases=aliases.get(path, ()),
            shared_with_other_scripts=path in unit.shared_with_other_scripts,
            program_out_of_sight=path in unit.program_out_of_sight,
        )
        files.append(ProgramFile(str(path), data, info, tuple(rules_for(path)), migrate=path in unit.migrate))  # type: ignore[arg-type]
    return [*process_program(files, options, fix, fixable), *failures]
