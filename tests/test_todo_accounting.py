"""Every TODO comment a migration writes is an item of its report (:mod:`ddp_migrate.todos`).

A trial's two-phase program got a TODO above its second loader in the pass that gave the first loader its
``set_epoch``; the finding behind the TODO was gone from the final analysis, and the report said "0 item(s)
need a human". Here a rule that writes a TODO and then finds nothing stands for any such pair of fixes.
"""

from __future__ import annotations

from typing import Iterator

from ddp_migrate.codemods.analysis import ScriptAnalysis
from ddp_migrate.codemods.base import FixResult, Match, Options, Phase, Rule
from ddp_migrate.codemods.edits import Edits
from ddp_migrate.engine import process
from ddp_migrate.todos import TodoAuthors, todo_messages, unreported_todos

SOURCE = """\
import torch

model = torch.nn.Linear(2, 2)
# a comment of the user's
loader = make_loader()
"""


class WritesATodoAndFindsNothing(Rule):
    """A rule whose fix leaves a TODO and whose finding the final analysis no longer has."""

    code = "DDP990"
    name = "todo-writer"
    phase = Phase.SAMPLERS

    def matches(self, analysis: ScriptAnalysis) -> Iterator[Match]:
        return iter(())

    def fix(self, analysis: ScriptAnalysis, options: Options) -> FixResult | None:
        target = analysis.module.body[-1]
        if "TODO" in analysis.code:
            return None
        edits = Edits(analysis)
        edits.todo(target, "shard this loader by hand")
        return edits.apply(analysis.module)


class ReportsWhatItMarked(WritesATodoAndFindsNothing):
    """The same TODO, with the finding under it still reported."""

    code = "DDP991"

    def matches(self, analysis: ScriptAnalysis) -> Iterator[Match]:
        yield Match(analysis.module.body[-1], "shard this loader by hand", fixable=False)


def test_a_todo_whose_finding_is_gone_is_still_an_item_of_the_report() -> None:
    result = process("train.py", SOURCE.encode(), [WritesATodoAndFindsNothing], Options(), fix=True)
    assert "    # TODO(ddp-migrate): shard this loader by hand\n" not in result.new_text
    assert "# a comment of the user's\n# TODO(ddp-migrate): shard this loader by hand\nloader = make_loader()\n" in result.new_text
    assert [(f.code, f.line, f.message) for f in result.findings] == [("DDP990", 6, "shard this loader by hand")]


def test_a_todo_with_its_finding_under_it_counts_once() -> None:
    result = process("train.py", SOURCE.encode(), [ReportsWhatItMarked], Options(), fix=True)
    assert result.new_text.count("TODO(ddp-migrate)") == 1, result.new_text
    assert [f.code for f in result.findings] == ["DDP991"]


def test_a_lint_and_the_users_own_todos_add_nothing() -> None:
    linted = process("train.py", SOURCE.encode(), [WritesATodoAndFindsNothing], Options(), fix=False)
    assert linted.findings == []
    earlier = SOURCE.replace("loader = ", "# TODO(ddp-migrate): left by an earlier run\nloader = ")
    authors = TodoAuthors()
    assert todo_messages(earlier) == {"left by an earlier run": 1}
    assert unreported_todos(earlier, [], authors) == []  # no rule of this run wrote it
