"""Big tables of numbers inside other literals, parsed empty by a lint that writes nothing (issue 11, goal 5:
memory).

- The blanked source keeps every line and column outside the tables, non-ASCII text before the brackets on
  their lines included, and parses; a literal the code reads directly, one that holds a string or a name,
  or a small one, is left as it is, whatever its size.
- A lint reports the same findings, at the same places, as with the whole table parsed, and libcst reads the
  blanked text; a migration and ``lint --fix`` parse, and write back, the whole table.
"""

from __future__ import annotations

from pathlib import Path

import libcst as cst
import pytest

from ddp_migrate import engine, tables
from ddp_migrate.codemods.base import Options
from ddp_migrate.engine import process
from ddp_migrate.registry import all_rules
from ddp_migrate.tables import MIN_TABLE, blank_number_tables, number_tables

ROWS = "\n".join(f"        ({i}, {i * 3}, True): ({i % 7}, -{i}, 1e-3, None, +2j)," for i in range(1000))
ONE_LINE = "{" + ", ".join(f"{i}: ({i}, -1.5)" for i in range(MIN_TABLE // 12)) + "}"
#: A training script with a kernel-style table before it: two tables of numbers, values of a dict keyed
#: by names; the second on one line after non-ASCII text, and code after it on that line, so a column
#: counted in bytes instead of characters would show.
SCRIPT = f"""\
import torch
import torch.nn as nn

TUNED = {{  # generated: do not edit
    ("mm", "ä", torch.int8): {{  # rows
{ROWS}
    }},
    ("ünïcode", torch.half): {ONE_LINE}}}; model = nn.DataParallel(nn.Linear(4, 4)).cuda()


def train(loader):
    opt = torch.optim.SGD(model.parameters(), lr=TUNED[("mm", "ä", torch.int8)][(0, 0, True)][2])
    for x, y in loader:
        loss = ((model(x.cuda()) - y.cuda()) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    torch.save(model.state_dict(), "m.pt")
"""


def _table_lines(source: str) -> tuple[int, int]:
    """The first and the last line (from 1) of the first table in a source."""
    lines = source.splitlines()
    first = next(n for n, line in enumerate(lines, 1) if line.startswith('    ("mm", "ä"'))
    last = next(n for n, line in enumerate(lines[first:], first + 1) if line == "    },")
    return first, last


def test_the_tables_are_emptied_and_every_other_line_and_column_kept() -> None:
    assert len(SCRIPT) > MIN_TABLE
    blanked = blank_number_tables(SCRIPT)
    before, after = SCRIPT.splitlines(), blanked.splitlines()
    assert len(after) == len(before)
    first, last = _table_lines(SCRIPT)
    assert after[: first - 1] == before[: first - 1] and after[last + 1 :] == [
        line.replace(ONE_LINE, "{" + " " * (len(ONE_LINE) - 2) + "}") for line in before[last + 1 :]
    ]
    assert after[first - 1] == '    ("mm", "ä", torch.int8): {'  # the comment after the bracket is inside the table: gone
    assert all(not line.strip() for line in after[first : last - 1])
    assert after[last - 1] == "    },"
    assert ONE_LINE in SCRIPT and ONE_LINE not in blanked
    assert len(blanked.replace(" ", "")) < len(SCRIPT.replace(" ", "")) // 10
    cst.parse_module(blanked)


NUMBERS = ", ".join(f"{i}.5" for i in range(MIN_TABLE // 5))
PAD = "x" * MIN_TABLE


@pytest.mark.parametrize(
    "table",
    [
        f"[{NUMBERS}]",  # numbers the code reads directly: a loop's values, a membership test's
        f"[[{NUMBERS}, 'a string']]",  # a string in it (a key a rule may look for)
        f"{{'shuffle': True, 'pad': {{'x': '{PAD}'}}}}",  # a loader's keyword dict, padded
        "[[" + ", ".join(f"torch.float{i % 2}" for i in range(MIN_TABLE // 10)) + "]]",  # a name in it
        "[[" + ", ".join(f"f({i})" for i in range(MIN_TABLE // 4)) + "]]",  # calls
        "{'k': {" + ", ".join(f"{i}: {i}" for i in range(MIN_TABLE // 8)) + ", **defaults}}",  # an unpacked dict
        "(1, 2), " + ", ".join(f"({i}, {i})" for i in range(MIN_TABLE // 8)),  # a tuple without its own parentheses
        "[[" + ", ".join(str(i) for i in range(100)) + "]]",  # too small
        f"[{{{NUMBERS}}}]",  # a set: emptied, it would read as a dict
    ],
)
def test_a_literal_that_is_not_a_big_table_of_numbers_inside_another_is_kept(table: str) -> None:
    source = f"import torch\nx = {table}\n" + "y = [1, 2]\n" * (MIN_TABLE // 10)  # a file long enough to be looked at
    assert number_tables(source) == []
    assert blank_number_tables(source) == source


def test_the_tables_inside_a_literal_that_holds_a_name_are_emptied() -> None:
    inner = "{" + ", ".join(f"({i}, {i}): ({i}, 4)" for i in range(MIN_TABLE // 12)) + "}"
    source = f"import torch\nx = {{('mm', torch.int8): {inner},\n     ('mm', torch.half): {inner}}}\n"
    spans = number_tables(source)
    assert [source[start:end] for start, end in spans] == [inner, inner]
    blanked = blank_number_tables(source)
    assert blanked == "import torch\nx = {('mm', torch.int8): {" + " " * (len(inner) - 2) + "},\n     ('mm', torch.half): {" + " " * (len(inner) - 2) + "}}\n"


def _lint(source: str, fix: bool = False) -> engine.FileResult:
    result = process("train.py", source.encode(), tuple(all_rules()), Options(), fix=fix)
    assert result.error is None
    return result


def test_a_lint_reports_the_same_findings_with_the_table_parsed_empty(monkeypatch: pytest.MonkeyPatch) -> None:
    parsed: list[str] = []
    real_parse = engine.parse_checked
    monkeypatch.setattr(engine, "parse_checked", lambda text: parsed.append(text) or real_parse(text))
    blanked = _lint(SCRIPT)
    assert parsed == [blank_number_tables(SCRIPT)]
    monkeypatch.setattr(engine, "blank_number_tables", lambda text: text)
    whole = _lint(SCRIPT)
    assert parsed[1] == SCRIPT
    found = [(f.code, f.line, f.column, f.end_line, f.end_column, f.message) for f in blanked.findings]
    assert found == [(f.code, f.line, f.column, f.end_line, f.end_column, f.message) for f in whole.findings]
    line, text = next((n, text) for n, text in enumerate(SCRIPT.splitlines(), 1) if "nn.DataParallel(" in text)
    assert ("DDP001", line, text.index("nn.DataParallel")) in {f[:3] for f in found}
    assert {"DDP004", "DDP007"} <= {f[0] for f in found}


def test_a_migration_and_a_lint_fix_parse_and_write_the_whole_table(monkeypatch: pytest.MonkeyPatch) -> None:
    parsed: list[str] = []
    real_parse = engine.parse_checked
    monkeypatch.setattr(engine, "parse_checked", lambda text: parsed.append(text) or real_parse(text))
    migrated = _lint(SCRIPT, fix=True)
    assert parsed == [SCRIPT]
    assert migrated.output is not None
    written = migrated.output.decode()
    assert "DistributedDataParallel" in written
    first, last = _table_lines(SCRIPT)
    assert "\n".join(SCRIPT.splitlines()[first : last - 1]) in written and ONE_LINE in written  # every row, as it was


def test_a_file_python_cannot_parse_has_no_tables() -> None:
    source = "x = [" + "1, " * MIN_TABLE + "]\ndef (:\n"
    assert number_tables(source) == []
    assert blank_number_tables(source) == source


#: A long file of code and no table: every few lines start like code.
CODE = "".join(f"def f{i}(x):\n    y = [x, {i}, 'a']\n    return (y,\n            {i})\n\n\n" for i in range(MIN_TABLE // 40))


def test_a_file_without_a_long_stretch_of_table_lines_is_not_parsed_twice(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("ast.parse called on a file with no table")

    monkeypatch.setattr(tables.ast, "parse", refuse)
    assert len(CODE) > MIN_TABLE
    for source in ("x = [1, 2, 3]\n", CODE):
        assert blank_number_tables(source) == source


@pytest.mark.parametrize(
    "source",
    [
        SCRIPT,
        "import torch\nW = {'weights': [" + NUMBERS + "]}\n",  # one long line
        "W = (\n    (\n" + "".join(f"    -{i}.5e-3, +{i}, True, None, 0x{i},  # row {i}\n" for i in range(MIN_TABLE // 40)) + "    ),\n)\n",
    ],
)
def test_a_file_with_a_long_stretch_of_table_lines_is_looked_at(source: str) -> None:
    assert tables.may_hold_a_table(source)
    assert number_tables(source)


def test_the_torch_kernel_table_is_parsed_small_where_torch_has_it() -> None:
    torch = pytest.importorskip("torch")
    path = Path(torch.__file__).parent / "sparse" / "_triton_ops_meta.py"
    if not path.exists():
        pytest.skip("this torch has no sparse/_triton_ops_meta.py")
    source = path.read_text(encoding="utf-8")
    blanked = blank_number_tables(source)
    assert blanked.count("\n") == source.count("\n")
    assert len(blanked) < len(source) // 3
