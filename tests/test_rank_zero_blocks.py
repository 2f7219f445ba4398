"""What a block guarded to rank 0 may hold (a trial's epoch-end probe, written to a file).

- ``with open("probe.txt", "a") as f: probe = torch.randn(1, 8); f.write(...)``: the migration guarded the whole
  block, draw included. Rank 0's random stream then ran ahead of the others', and the stochastic-depth decisions
  (``torch.rand(1) < 0.5`` in forward) differed between ranks from the next epoch on: checksum 66.1404 where the
  original and one process gave 66.1323, "0 item(s) need a human". Now a review says to draw before the block.
- ``model.eval()(probe)`` under such a guard ran DDP's forward (its buffer broadcast) on rank 0 alone: a hang.
  The chained call now reaches the model itself, as ``model(probe)`` did.
"""

from __future__ import annotations

from pathlib import Path

from migrated import migrate_script

PROGRAM = """import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.inp, self.block, self.out = nn.Linear(8, 16), nn.Linear(16, 16), nn.Linear(16, 3)

    def forward(self, x):
        h = torch.relu(self.inp(x))
        if not (self.training and torch.rand(1).item() < 0.5):
            h = h + torch.relu(self.block(h))
        return self.out(h)


def main():
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(64, 8), torch.randint(0, 3, (64,)))
    loader = DataLoader(data, batch_size=16, shuffle=False)
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(3):
        model.train()
        for x, y in loader:
            opt.zero_grad()
            F.cross_entropy(model(x), y).backward()
            opt.step()
BLOCK


if __name__ == "__main__":
    main()
"""

DRAW_INSIDE = """        with open("probe.txt", "a") as f:
            probe = torch.randn(1, 8)
            f.write(f"epoch {epoch}: {model(probe).argmax(1).item()}\\n")"""

DRAW_BEFORE = """        probe = torch.randn(1, 8)
        with open("probe.txt", "a") as f:
            f.write(f"epoch {epoch}: {model.eval()(probe).argmax(1).item()}\\n")"""


def test_a_write_block_that_draws_from_the_process_wide_state_is_left_to_a_human(tmp_path: Path) -> None:
    migrated, report, code = migrate_script(tmp_path, PROGRAM.replace("BLOCK", DRAW_INSIDE))
    assert code == 1, report
    assert "DDP012 every rank writes this file: write it on rank 0 only, but the with block also draws from a process-wide random state" in report, report
    assert "is_main_process()" not in migrated.split("for epoch in range(3):")[1].split("if __name__")[0], migrated


def test_a_write_block_after_the_draw_is_guarded_and_runs_the_model_itself(tmp_path: Path) -> None:
    migrated, report, code = migrate_script(tmp_path, PROGRAM.replace("BLOCK", DRAW_BEFORE))
    assert code == 0, report
    assert "        probe = torch.randn(1, 8)\n        if runtime.is_main_process():\n            with open(" in migrated, migrated
    assert "model.module.eval()(probe)" in migrated, migrated
