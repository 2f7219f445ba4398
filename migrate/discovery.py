"""Turning the paths on the command line into the Python files to process."""

from __future__ import annotations

import fnmatch
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

#: What a folder is walked for: Python files and Jupyter notebooks.
SUFFIXES = (".py", ".ipynb")

#: Folders never worth walking into.
DEFAULT_EXCLUDES = (".git", ".hg", ".svn", ".venv", "venv", ".tox", ".nox", "__pycache__", "build", "dist", "node_modules", "site-packages", ".ipynb_checkpoints", ".eggs", "*.egg-info", ".mypy_cache", ".pytest_cache", ".ruff_cache")


@dataclass
class Discovery:
    """The files found, one error per path that could not be used, one warning per folder with no files."""

    files: list[Path] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    excluded: int = 0


def is_excluded(path: Path, patterns: Iterable[str], root: Path | None = None) -> bool:
    """Whether a path matches an exclude glob, by its name, any folder on its way, or its relative path.

    With a ``root`` only the part of the path below it is matched, so a glob never matches a folder above
    the project (``--exclude 'test_*'`` must not exclude everything under ``/tmp/test_run/``).
    """
    relative = path
    if root is not None:
        try:
            relative = path.relative_to(root)
        except ValueError:
            pass
    text = relative.as_posix()
    parts = relative.parts
    for pattern in patterns:
        pattern = pattern.rstrip("/")
        if fnmatch.fnmatch(text, pattern) or any(fnmatch.fnmatch(part, pattern) for part in parts):
            return True
    return False


def _base(anchor: Path, root: Path | None) -> Path:
    """The folder exclude globs are relative to: the configuration's folder, else the working folder, else
    (for paths outside both) the folder named on the command line."""
    for base in (root, Path.cwd()):
        if base is not None:
            base = base.resolve()
            if anchor == base or base in anchor.parents:
                return base
    return anchor


def discover(paths: Iterable[str], excludes: Iterable[str], root: Path | None = None) -> Discovery:
    """Expand files and folders (walked for ``*.py`` and ``*.ipynb``) into a list of files, honouring excludes.

    Exclude globs are relative to ``root`` (the configuration's folder) or else the working folder. A
    folder with no such file is a warning, not an error (as in ruff and black): there is nothing to do.
    """
    result = Discovery()
    patterns = tuple(excludes)
    seen: set[Path] = set()
    for raw in paths:
        path = Path(raw)
        if not path.exists():
            result.errors.append(f"{raw}:1:1: no such file or directory")
            continue
        resolved = path.resolve()
        if path.is_file():
            if is_excluded(resolved, patterns, _base(resolved.parent, root)):
                result.excluded += 1
            elif resolved not in seen:
                seen.add(resolved)
                result.files.append(path)
            continue
        base = _base(resolved, root)
        found = []
        excluded_here = 0
        for folder, dirnames, filenames in os.walk(path):
            here = Path(folder)
            kept = []
            for name in sorted(dirnames):
                if is_excluded(Path(name), DEFAULT_EXCLUDES) or is_excluded((here / name).resolve(), patterns, base):
                    excluded_here += 1
                else:
                    kept.append(name)
            dirnames[:] = kept
            for name in sorted(filenames):
                if not name.endswith(SUFFIXES):
                    continue
                file = here / name
                if is_excluded(file.resolve(), patterns, base):
                    excluded_here += 1
                elif file.resolve() not in seen:
                    seen.add(file.resolve())
                    found.append(file)
        result.excluded += excluded_here
        if not found:
            hint = f" ({excluded_here} path(s) excluded)" if excluded_here else ""
            result.warnings.append(f"{raw}: no Python files or notebooks found{hint}")
        result.files.extend(found)
    return result
