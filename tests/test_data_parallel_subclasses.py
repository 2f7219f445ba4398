"""A DataParallel of the program's own (``class ListDataParallel(nn.DataParallel)`` with its own ``scatter``, a trial):
the migration did not see a DataParallel in it, wrapped it in DDP as an unwrapped model (DDP011), and under torchrun
each process would have run the subclass over every GPU of its node. It is a DataParallel: DDP001 leaves it to a
human (its overrides cannot be carried over), and nothing wraps it again."""

from __future__ import annotations

from pathlib import Path

import pytest

from migrated import lint_findings, migrate_script

PROGRAM = """
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


class ListDataParallel(nn.DataParallel):
    def scatter(self, inputs, kwargs, device_ids):
        return super().scatter(inputs, kwargs, device_ids)


class BASE:
    pass


def main():
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    loader = DataLoader(TensorDataset(torch.randn(64, 4), torch.randint(0, 2, (64,))), batch_size=8)
    model = WRAPPER(nn.Linear(4, 2)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for x, y in loader:
        loss = nn.functional.cross_entropy(model(x.to(device)), y.to(device))
        opt.zero_grad()
        loss.backward()
        opt.step()


if __name__ == "__main__":
    main()
"""


@pytest.mark.parametrize(("base", "wrapper"), [("Unused", "ListDataParallel"), ("Sub(ListDataParallel)", "Sub")], ids=["direct", "through-a-subclass"])
def test_a_data_parallel_of_the_program_is_left_to_a_human_and_not_wrapped_again(tmp_path: Path, base: str, wrapper: str) -> None:
    source = PROGRAM.replace("BASE", base).replace("WRAPPER", wrapper)
    text, report, code = migrate_script(tmp_path, source)
    assert code == 1, report
    assert f"review {tmp_path / 'train.py'}" in report and f"DDP001 {wrapper} is a DataParallel of the program's own" in report, report
    assert "DistributedDataParallel(" not in text, text
    findings = lint_findings(tmp_path, source, "DDP001,DDP011")
    assert any("DDP001" in f for f in findings) and not any("DDP011" in f for f in findings), findings


def test_a_plain_class_of_the_program_is_no_data_parallel(tmp_path: Path) -> None:
    source = PROGRAM.replace("BASE", "Plain(nn.Module)").replace("WRAPPER(nn.Linear(4, 2))", "nn.Linear(4, 2)")
    findings = lint_findings(tmp_path, source, "DDP001,DDP011")
    assert any("DDP011" in f for f in findings) and not any("DDP001" in f for f in findings), findings
