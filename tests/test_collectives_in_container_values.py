"""A collective reached through the values of a ``defaultdict`` of the program's class (DDP033).

A trial's torchvision-style program evaluated on rank 0 only (``if utils.is_main_process(): evaluate(...)``) through a
``MetricLogger`` whose ``synchronize_between_processes()`` runs ``meter.synchronize_between_processes()`` for each
``meter`` of ``self.meters = defaultdict(Meter)``, down to ``dist.all_reduce``: under torchrun rank 0 waited there
for ranks that never came (a hang), and the report had no DDP033 line. The binding model now knows a value of a
``defaultdict(Meter)`` is a ``Meter``.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from ddp_migrate.cli import cli

UTILS = """from collections import defaultdict

import torch
import torch.distributed as dist


def is_dist_avail_and_initialized():
    return dist.is_available() and dist.is_initialized()


def is_main_process():
    return not is_dist_avail_and_initialized() or dist.get_rank() == 0


class Meter:
    def __init__(self):
        self.total, self.count = 0.0, 0

    def update(self, value, n=1):
        self.total += value * n
        self.count += n

    def synchronize_between_processes(self):
        if not is_dist_avail_and_initialized():
            return
        t = torch.tensor([self.count, self.total], dtype=torch.float64)
        dist.all_reduce(t)
        self.count, self.total = int(t[0]), t[1].item()


class MetricLogger:
    def __init__(self):
        self.meters = defaultdict(Meter)

    def update(self, n=1, **kwargs):
        for k, v in kwargs.items():
            self.meters[k].update(v, n=n)

    def synchronize_between_processes(self):
        for meter in VALUES:
            meter.synchronize_between_processes()
"""

TRAIN = """import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

import utils


def evaluate(model, loader):
    logger = utils.MetricLogger()
    with torch.no_grad():
        for x, y in loader:
            logger.update(acc=(model(x).argmax(1) == y).float().mean().item(), n=len(x))
    logger.synchronize_between_processes()
    return logger.meters["acc"].total / logger.meters["acc"].count


def main():
    data = TensorDataset(torch.randn(64, 4), torch.randint(0, 2, (64,)))
    loader = DataLoader(data, batch_size=16, shuffle=True)
    val_loader = DataLoader(data, batch_size=16)
    model = nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        for x, y in loader:
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
        if utils.is_main_process():
            print(epoch, evaluate(model, val_loader))


if __name__ == "__main__":
    main()
"""


@pytest.mark.parametrize("values", ["self.meters.values()", "list(self.meters.values())"])
def test_a_collective_of_a_defaultdicts_values_on_one_rank_is_a_hang(tmp_path: Path, values: str) -> None:
    (tmp_path / "utils.py").write_text(UTILS.replace("VALUES", values))
    (tmp_path / "train.py").write_text(TRAIN)
    result = CliRunner().invoke(cli, ["lint", "--select", "DDP033", str(tmp_path / "train.py")])
    found = [line for line in result.output.splitlines() if "DDP033" in line]
    assert len(found) == 1 and "utils.py:27:9: DDP033 dist.all_reduce() is a collective" in found[0], result.output
    assert "utils.is_main_process()" in found[0]


def test_the_same_collective_on_every_rank_is_no_hang(tmp_path: Path) -> None:
    (tmp_path / "utils.py").write_text(UTILS.replace("VALUES", "self.meters.values()"))
    (tmp_path / "train.py").write_text(TRAIN.replace("        if utils.is_main_process():\n            print(", "        print("))
    result = CliRunner().invoke(cli, ["lint", "--select", "DDP033", str(tmp_path / "train.py")])
    assert "DDP033" not in result.output, result.output
