"""Every rule the command line knows: the rule modules of ``ddp_migrate.codemods`` plus the linter's own.

The linter adds one check that is not about DDP code but about the linter's input, ``DDP100
unknown-noqa-code`` (:mod:`ddp_migrate.noqa`). It is selected, ignored, listed and explained like any
rule, but only ``lint`` runs it: a migration never fails because of a noqa comment.
"""

from __future__ import annotations

from ddp_migrate import codemods
from ddp_migrate.codemods.base import Rule

from .noqa import UnknownNoqaCode

#: Rules that belong to the linter alone (``migrate`` drops them).
LINT_ONLY_RULES: tuple[type[Rule], ...] = (UnknownNoqaCode,)


def all_rules() -> tuple[type[Rule], ...]:
    """The rule modules' rules (read at call time, so tests can extend the registry) and the linter's, by code."""
    return tuple(sorted((*codemods.ALL_RULES, *LINT_ONLY_RULES), key=lambda rule: rule.code))


def rule_for_code(code: str) -> type[Rule] | None:
    """The rule with this exact code (case-insensitive), or ``None``."""
    wanted = code.strip().upper()
    return next((rule for rule in all_rules() if rule.code == wanted), None)


def without_lint_only(rules: list[type[Rule]]) -> list[type[Rule]]:
    """The rules a migration runs."""
    return [rule for rule in rules if rule not in LINT_ONLY_RULES]
