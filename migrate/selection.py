"""Choosing rules by code: ``--select`` and ``--ignore`` take codes or prefixes (``DDP0``)."""

from __future__ import annotations

from typing import Iterable, Sequence

from ddp_migrate.codemods.base import Rule

from .registry import all_rules


class SelectionError(Exception):
    """A code or prefix that matches no rule."""


def _matches(code: str, prefixes: Iterable[str]) -> bool:
    return any(code.startswith(prefix) for prefix in prefixes)


def normalise_codes(raw: Iterable[str]) -> list[str]:
    """Split comma-separated values, upper-case them, and check each names at least one rule."""
    codes = [part.strip().upper() for value in raw for part in value.split(",") if part.strip()]
    for code in codes:
        if code != "ALL" and not any(rule.code.startswith(code) for rule in all_rules()):
            raise SelectionError(f"unknown rule code or prefix: {code}")
    return codes


def select_rules(
    select: Sequence[str],
    ignore: Sequence[str],
    rules: Sequence[type[Rule]] | None = None,
    extend_select: Sequence[str] = (),
) -> list[type[Rule]]:
    """The rules that ``select`` (or ``extend_select``) keeps and ``ignore`` does not drop.

    Without ``select`` every rule that is on by default runs; rules that are off by default (they would
    flag correct migrated code, like DDP038) run only when a code or prefix selects them, or ``ALL``.
    ``extend_select`` adds rules to that choice, whatever it was.
    """
    rules = all_rules() if rules is None else rules
    if select:
        chosen = [r for r in rules if "ALL" in select or _matches(r.code, select)]
    else:
        chosen = [r for r in rules if getattr(r, "enabled_by_default", True)]
    if extend_select:
        chosen += [r for r in rules if r not in chosen and ("ALL" in extend_select or _matches(r.code, extend_select))]
        order = {rule: position for position, rule in enumerate(rules)}
        chosen.sort(key=order.__getitem__)
    return drop_rules(chosen, ignore)


def drop_rules(rules: Sequence[type[Rule]], ignore: Sequence[str]) -> list[type[Rule]]:
    """The rules whose codes no code or prefix in ``ignore`` matches."""
    return [r for r in rules if not _matches(r.code, ignore)]
