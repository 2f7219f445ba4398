"""Fix safety, as in ruff: every rule that fixes documents what its fix may change and declares whether
``lint --fix`` may apply it without ``--unsafe-fixes``."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from ddp_migrate.cli import cli
from ddp_migrate.codemods.base import FixSafety, Rule
from ddp_migrate.docs import rules_table
from ddp_migrate.registry import all_rules

FIXING = [rule for rule in all_rules() if rule.can_fix()]


def test_the_default_is_safe() -> None:
    assert Rule.fix_safety is FixSafety.SAFE


@pytest.mark.parametrize("rule", FIXING, ids=lambda rule: rule.code)
def test_every_fixing_rule_documents_and_declares_its_fix_safety(rule: type[Rule]) -> None:
    paragraphs = [p for p in rule.documentation().split("\n\n") if p.startswith("Fix safety:")]
    assert len(paragraphs) == 1, f"{rule.code}: one 'Fix safety:' paragraph in the docstring"
    assert len(paragraphs[0]) > len("Fix safety: ") + 20, f"{rule.code}: say what the fix may change"
    assert "fix_safety" in vars(rule), f"{rule.code}: declare fix_safety = FixSafety.SAFE or UNSAFE"
    assert isinstance(rule.fix_safety, FixSafety)


def test_both_classes_are_used_and_the_named_examples_are_unsafe() -> None:
    by_code = {rule.code: rule.fix_safety for rule in FIXING}
    assert set(by_code.values()) == {FixSafety.SAFE, FixSafety.UNSAFE}
    # the batch split, a wrap moved out of a condition, a save moved to rank 0
    assert by_code["DDP005"] is by_code["DDP001"] is by_code["DDP007"] is FixSafety.UNSAFE


def _invoke(*args: str):  # type: ignore[no-untyped-def]
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


@pytest.mark.parametrize("rule", FIXING, ids=lambda rule: rule.code)
def test_explain_shows_the_paragraph_and_the_class(rule: type[Rule]) -> None:
    out = _invoke("explain", rule.code).stdout
    assert "Fix safety: " in out.split("Example:")[0]
    assert f"Fix safety: {rule.fix_safety.value}" in out


def test_rules_text_and_json_show_the_class() -> None:
    text = _invoke("rules").stdout
    for rule in all_rules():
        line = next(line for line in text.splitlines() if line.startswith(rule.code))
        assert (f"{rule.fix_safety.value} fix" if rule.can_fix() else "report") in line
    listed = {r["code"]: r["fix_safety"] for r in json.loads(_invoke("rules", "--format", "json").stdout)}
    assert listed == {rule.code: (rule.fix_safety.value if rule.can_fix() else None) for rule in all_rules()}


def test_the_readme_table_shows_the_class() -> None:
    table = rules_table()
    for rule in FIXING:
        assert f"| {rule.code} | `{rule.name}` | yes ({rule.fix_safety.value}) |" in table


OWN_METHODS = """
import torch
import torch.nn as nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 1)

    def forward(self, x):
        return self.fc(x)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def main():
    model = Net()
    opt = model.configure_optimizers()
    for step in range(3):
        opt.zero_grad()
        model(torch.randn(8, 4)).pow(2).mean().backward()
        opt.step()
    print("done")


if __name__ == "__main__":
    main()
"""


def test_the_safe_fixes_alone_leave_a_program_that_runs(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A trial's ``lint --fix`` (safe fixes only) wrapped the model but left ``model.configure_optimizers()`` on the
    wrapper (DDP008's ``.module`` is unsafe): AttributeError in a plain run. The wrap is unsafe on its own now."""
    from launch import run_python

    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text(OWN_METHODS)
    _invoke("lint", "--fix", "train.py")
    assert "done" in run_python(tmp_path / "train.py", cwd=tmp_path, timeout=120).output
    _invoke("lint", "--fix", "--unsafe-fixes", "train.py")
    fixed = (tmp_path / "train.py").read_text()
    assert "model.module.configure_optimizers()" in fixed and "DistributedDataParallel(model" in fixed, fixed
    assert "done" in run_python(tmp_path / "train.py", cwd=tmp_path, timeout=120).output
