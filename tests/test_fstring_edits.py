"""Edits inside f-strings keep to the quote the f-string does not use.

``print(f"keys {list(model.state_dict())}")`` of a DataParallel program: DDP016's fix wrote
``state_dict(prefix="module.")`` inside the double-quoted f-string, which Python before 3.12 cannot parse;
the engine refused the whole program ("produced code that does not compile"), exit 2.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from ddp_migrate.cli import cli

PROGRAM = """import torch
import torch.nn as nn

model = nn.DataParallel(nn.Linear(2, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
model(torch.randn(4, 2)).sum().backward()
opt.step()
print(PRINTED)
"""


@pytest.mark.parametrize(
    ("printed", "expected"),
    [
        ('f"keys {list(model.state_dict())}"', "f\"keys {list(runtime.unwrap(model).state_dict(prefix='module.'))}\""),
        ("f'keys {list(model.state_dict())}'", "f'keys {list(runtime.unwrap(model).state_dict(prefix=\"module.\"))}'"),
    ],
    ids=["double-quoted", "single-quoted"],
)
def test_a_string_inserted_into_an_f_string_takes_the_other_quote(tmp_path: Path, printed: str, expected: str) -> None:
    script = tmp_path / "train.py"
    script.write_text(PROGRAM.replace("PRINTED", printed))
    result = CliRunner().invoke(cli, [str(script)])
    assert result.exit_code == 0, result.output
    migrated = script.read_text()
    compile(migrated, str(script), "exec")
    assert f"runtime.print0({expected})" in migrated, migrated
