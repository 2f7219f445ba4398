"""The rules, one module each, and the registry the engine loads them from."""

from __future__ import annotations

from .base import BatchSizePolicy, Example, Finding, Options, Phase, Rule, Severity, Valid

#: Every rule, in code order. The engine runs their fixes in phase order.
ALL_RULES: tuple[type[Rule], ...] = ()


def rule_for_code(code: str) -> type[Rule] | None:
    """The rule with this exact code (case-insensitive), or ``None``."""
    wanted = code.strip().upper()
    return next((rule for rule in ALL_RULES if rule.code == wanted), None)


__all__ = [
    "ALL_RULES",
    "BatchSizePolicy",
    "Example",
    "Finding",
    "Options",
    "Phase",
    "Rule",
    "Severity",
    "Valid",
    "rule_for_code",
]
