"""Settings from ``[tool.ddp-migrate]`` in the nearest ``pyproject.toml``; command-line flags win."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on older interpreters only
    import tomli as tomllib

from ddp_migrate.codemods.base import BatchSizePolicy

KNOWN_KEYS = {
    "select",
    "extend-select",
    "ignore",
    "extend-ignore",
    "exclude",
    "extend-exclude",
    "batch-size",
    "per-file-ignores",
}


class ConfigError(Exception):
    """The configuration cannot be used (bad TOML, unknown key, wrong type)."""


@dataclass
class Config:
    """The settings of one run, before command-line flags are applied."""

    path: Path | None = None
    select: list[str] = field(default_factory=list)
    extend_select: list[str] = field(default_factory=list)
    ignore: list[str] = field(default_factory=list)
    extend_ignore: list[str] = field(default_factory=list)
    exclude: list[str] = field(default_factory=list)
    batch_size: BatchSizePolicy = BatchSizePolicy.GLOBAL
    per_file_ignores: dict[str, list[str]] = field(default_factory=dict)

    @property
    def root(self) -> Path | None:
        """The folder the configuration's relative globs are relative to."""
        return self.path.parent if self.path else None


def find_pyproject(start: Path) -> Path | None:
    """The nearest ``pyproject.toml`` with a ``[tool.ddp-migrate]`` table, from ``start`` upwards.

    A file that cannot be read or parsed is passed over, unless it mentions ``tool.ddp-migrate``: then it
    is the user's configuration with a mistake in it, and running without it would silently ignore their
    excludes, so :func:`load_config` reports the mistake instead.
    """
    folder = start if start.is_dir() else start.parent
    for candidate in (folder, *folder.parents):
        pyproject = candidate / "pyproject.toml"
        if pyproject.is_file():
            try:
                text = pyproject.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError):
                continue
            try:
                data = tomllib.loads(text)
            except tomllib.TOMLDecodeError:
                if "tool.ddp-migrate" in text:
                    return pyproject
                continue
            if "ddp-migrate" in data.get("tool", {}):
                return pyproject
    return None


def common_folder(paths: Iterable[str]) -> Path:
    """The deepest folder containing all the given paths (the working folder when there are none)."""
    resolved = [Path(p).resolve() for p in paths if p != "-"]
    if not resolved:
        return Path.cwd()
    common = resolved[0] if resolved[0].is_dir() else resolved[0].parent
    for path in resolved[1:]:
        while common not in (path, *path.parents):
            common = common.parent
    return common


def _string_list(table: dict[str, Any], key: str, where: Path) -> list[str]:
    value = table.get(key, [])
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{where}: [tool.ddp-migrate] {key} must be a list of strings")
    return value


def load_config(paths: Iterable[str], explicit: Path | None = None) -> Config:
    """Read the configuration that applies to the given paths (or the explicit file)."""
    pyproject = explicit or find_pyproject(common_folder(paths))
    if pyproject is None:
        return Config()
    try:
        data = tomllib.loads(pyproject.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as error:
        raise ConfigError(f"{pyproject}: cannot read: {error}") from None
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"{pyproject}: invalid TOML: {error}") from None
    table = data.get("tool", {}).get("ddp-migrate", {})
    unknown = sorted(set(table) - KNOWN_KEYS)
    if unknown:
        raise ConfigError(f"{pyproject}: unknown option(s) in [tool.ddp-migrate]: {', '.join(unknown)}")
    config = Config(path=pyproject)
    config.select = _string_list(table, "select", pyproject)
    config.extend_select = _string_list(table, "extend-select", pyproject)
    config.ignore = _string_list(table, "ignore", pyproject)
    config.extend_ignore = _string_list(table, "extend-ignore", pyproject)
    config.exclude = _string_list(table, "exclude", pyproject) + _string_list(table, "extend-exclude", pyproject)
    policy = table.get("batch-size", BatchSizePolicy.GLOBAL.value)
    try:
        config.batch_size = BatchSizePolicy(policy)
    except ValueError:
        choices = ", ".join(p.value for p in BatchSizePolicy)
        raise ConfigError(f"{pyproject}: batch-size must be one of {choices}, not {policy!r}") from None
    per_file = table.get("per-file-ignores", {})
    if not isinstance(per_file, dict):
        raise ConfigError(f"{pyproject}: per-file-ignores must be a table of glob = [codes]")
    config.per_file_ignores = {glob: _string_list(per_file, glob, pyproject) for glob in per_file}
    return config
