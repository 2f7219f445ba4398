"""A metric logger reduced through its parts (torchvision's references): ``MetricLogger.synchronize_between_processes``
runs ``meter.synchronize_between_processes()`` for each meter it holds, and the meter's own method all-reduces.
After the logger's call its values are every rank's: a trial's false DDP038 said they were rank 0's alone."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from ddp_migrate.cli import cli

PROGRAM = """
import torch
import torch.distributed as dist
from collections import defaultdict
from torch.utils.data import DataLoader, DistributedSampler


class SmoothedValue:
    def __init__(self):
        self.total = 0.0
        self.count = 0

    def update(self, value, n=1):
        self.count += n
        self.total += value * n

    def synchronize_between_processes(self):
        t = torch.tensor([self.count, self.total], dtype=torch.float64)
        dist.all_reduce(t)
        self.count = int(t[0].item())
        self.total = t[1].item()

    @property
    def global_avg(self):
        return self.total / self.count


class MetricLogger:
    def __init__(self):
        self.meters = defaultdict(SmoothedValue)

    def update(self, **kwargs):
        for k, v in kwargs.items():
            self.meters[k].update(v)

    def synchronize_between_processes(self, other=None):
        PARTS

    def __str__(self):
        return "  ".join(f"{k}: {m.global_avg:.4f}" for k, m in self.meters.items())


def evaluate(model, loader):
    metric_logger = MetricLogger()
    for x, y in loader:
        loss = torch.nn.functional.mse_loss(model(x), y)
        metric_logger.update(loss=loss.item())
    SYNC
    if dist.get_rank() == 0:
        print(f"eval {metric_logger}")
    if metric_logger.meters["loss"].global_avg < 0.01:
        return None
    return metric_logger


def main():
    dist.init_process_group("gloo")
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    ds = torch.utils.data.TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
    loader = DataLoader(ds, batch_size=8, sampler=DistributedSampler(ds))
    for epoch in range(3):
        loader.sampler.set_epoch(epoch)
        for x, y in loader:
            optimizer.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            optimizer.step()
        if evaluate(model, loader) is None:
            break


main()
"""

OWN_PARTS = "for meter in self.meters.values():\n            meter.synchronize_between_processes()"
OWN_ITEMS = "for name, meter in self.meters.items():\n            meter.synchronize_between_processes()"
ANOTHERS = "for meter in other.meters.values():\n            meter.synchronize_between_processes()"
SYNCED = "metric_logger.synchronize_between_processes()"


def _lint(tmp_path: Path, parts: str, sync: str) -> str:
    path = tmp_path / "evaluate.py"
    path.write_text(PROGRAM.replace("PARTS", parts).replace("SYNC", sync))
    return CliRunner().invoke(cli, ["lint", "--select", "DDP038,DDP041", str(path)]).output


@pytest.mark.parametrize("parts", [OWN_PARTS, OWN_ITEMS], ids=["values", "items"])
def test_a_logger_reduced_through_its_parts_is_every_ranks(tmp_path: Path, parts: str) -> None:
    output = _lint(tmp_path, parts, SYNCED)
    assert "DDP038" not in output
    assert "DDP041" not in output


def test_a_logger_never_reduced_is_this_ranks(tmp_path: Path) -> None:
    output = _lint(tmp_path, OWN_PARTS, "pass")
    assert "DDP038 print on rank 0 shows metric_logger" in output
    assert "DDP041" in output


def test_reducing_another_objects_parts_does_not_reduce_the_logger(tmp_path: Path) -> None:
    output = _lint(tmp_path, ANOTHERS, SYNCED)
    assert "DDP038 print on rank 0 shows metric_logger" in output
    assert "DDP041" in output
