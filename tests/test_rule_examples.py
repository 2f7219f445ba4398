"""Every rule's examples are its specification: run each one through the real engine."""

from __future__ import annotations

import pytest

from ddp_migrate.codemods import ALL_RULES, Example, Valid
from ddp_migrate.codemods.base import Rule
from ddp_migrate.engine import process

CASES = [
    pytest.param(rule, example, id=f"{rule.code}-{index}-{type(example).__name__.lower()}")
    for rule in ALL_RULES
    for index, example in enumerate(rule.examples)
]


def run(rule: type[Rule], code: str, fix: bool, options=None):
    from ddp_migrate.codemods.base import Options

    result = process("example.py", code.encode(), [rule], options or Options(), fix=fix)
    assert result.error is None, result.error
    return result


@pytest.mark.parametrize(("rule", "example"), CASES)
def test_example(rule: type[Rule], example: Example | Valid) -> None:
    if isinstance(example, Valid):
        assert run(rule, example.code, fix=False).findings == []
        assert not run(rule, example.code, fix=True).changed
        return
    found = run(rule, example.before, fix=False, options=example.options).findings
    assert found, f"{rule.code} reports nothing on its own example"
    assert all(f.code == rule.code for f in found)
    migrated = run(rule, example.before, fix=True, options=example.options)
    if example.after is None:
        assert not migrated.changed
        return
    assert migrated.new_text == example.after
    compile(migrated.new_text, "example.py", "exec")
    again = run(rule, example.after, fix=True, options=example.options)
    assert not again.changed, "the fix is not idempotent"
    assert not [f for f in again.findings if f.fixable], "findings remain after the fix"


@pytest.mark.parametrize("rule", ALL_RULES, ids=lambda r: r.code)
def test_rule_documents_itself(rule: type[Rule]) -> None:
    doc = rule.documentation()
    assert rule.summary() and "What it finds" in doc and "Why it is a problem" in doc
    assert any(isinstance(e, Example) for e in rule.examples), "every rule needs a before/after example"
    assert any(isinstance(e, Valid) for e in rule.examples), "every rule needs a snippet it must not fire on"
    assert rule.name == rule.name.lower() and " " not in rule.name


def test_codes_are_unique_and_ordered() -> None:
    codes = [rule.code for rule in ALL_RULES]
    assert codes == sorted(set(codes))
