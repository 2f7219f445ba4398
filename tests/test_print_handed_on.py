"""``print`` handed on as a function (pytorchtools' ``EarlyStopping(trace_func=print)``) (DDP010).

A trial's early stopper printed its counter through ``self.trace_func(...)`` of ``def __init__(..., trace_func=print)``:
every process printed it (36 lines where the original printed 18), and nothing was said. The builtin handed on as
a parameter's default or as an argument is now ``runtime.print0``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from migrated import migrate_script

PROGRAM = """import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset


class EarlyStopping:
    def __init__(self, patience=1, trace_func=DEFAULT):
        self.patience, self.trace_func, self.best, self.bad = patience, trace_func, None, 0

    def __call__(self, value):
        if self.best is not None and value >= self.best:
            self.bad += 1
            self.trace_func(f"EarlyStopping counter: {self.bad} out of {self.patience}")
        else:
            self.best, self.bad = value, 0


def main():
    data = TensorDataset(torch.randn(64, 4), torch.randint(0, 2, (64,)))
    loader = DataLoader(data, batch_size=8, shuffle=True)
    model = nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    stopper = EarlyStopping(ARGUMENT)
    for epoch in range(3):
        for x, y in loader:
            opt.zero_grad()
            F.cross_entropy(model(x), y).backward()
            opt.step()
        stopper(float(epoch % 2))


if __name__ == "__main__":
    main()
"""


@pytest.mark.parametrize(
    ("default", "argument", "written"),
    [("print", "", "trace_func=runtime.print0"), ("None", "trace_func=print", "EarlyStopping(trace_func=runtime.print0)")],
    ids=["a-default", "an-argument"],
)
def test_print_handed_on_becomes_print0(tmp_path: Path, default: str, argument: str, written: str) -> None:
    migrated, report, _ = migrate_script(tmp_path, PROGRAM.replace("DEFAULT", default).replace("ARGUMENT", argument))
    assert written in migrated, migrated
    assert "print handed on replaced by runtime.print0 (rank 0 only)" in report, report
