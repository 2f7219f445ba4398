"""DDP034 (a sharded evaluation whose metrics are not reduced) on the ImageNet example's shape: ``validate``
runs a nested ``run_validate`` over the loader that fills a meter of ``validate``'s own, then reduces the meter
in place (``top1.all_reduce()``). A trial's false review said the metrics were not reduced."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from ddp_migrate.cli import cli

PROGRAM = """
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


class Meter:
    def __init__(self):
        self.sum, self.count = 0.0, 0

    def update(self, v, n):
        self.sum += v * n
        self.count += n

    def all_reduce(self):
        t = torch.tensor([self.sum, self.count], dtype=torch.float64)
        dist.all_reduce(t)
        self.sum, self.count = t.tolist()


def validate(loader, model):
    def run_validate(loader):
        with torch.no_grad():
            for x, y in loader:
                top1.update((model(x).argmax(1) == y).float().mean().item(), len(y))

    top1 = Meter()
    run_validate(loader)
    REDUCE
    return top1.sum / top1.count


def main():
    dist.init_process_group("gloo")
    ds = TensorDataset(torch.randn(64, 4), torch.randint(0, 2, (64,)))
    train_loader = DataLoader(ds, batch_size=8, sampler=DistributedSampler(ds))
    val_loader = DataLoader(ds, batch_size=8, sampler=DistributedSampler(ds, shuffle=False))
    model = DDP(nn.Linear(4, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(3):
        train_loader.sampler.set_epoch(epoch)
        for x, y in train_loader:
            opt.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
        print(validate(val_loader, model))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
"""


HELPER_THAT_REDUCES = """

def reduced_norm(model):
    t = torch.stack([p.detach().norm() for p in model.parameters()]).sum()
    dist.all_reduce(t)
    return t.item()
"""


@pytest.mark.parametrize(
    ("reduce", "unreduced"),
    [
        ("top1.all_reduce()", False),
        ("pass", True),
        # A reduction of another value that the evaluation also reads (the model): no reduction of its metric.
        ("print(reduced_norm(model))", True),
    ],
    ids=["meter-reduced", "nothing-reduced", "another-value-reduced"],
)
def test_a_meter_a_nested_evaluation_fills_and_its_caller_reduces_counts_as_reduced(tmp_path: Path, reduce: str, unreduced: bool) -> None:
    (tmp_path / "train.py").write_text(PROGRAM.replace("REDUCE", reduce).replace("\n\ndef validate", HELPER_THAT_REDUCES + "\n\ndef validate"))
    result = CliRunner().invoke(cli, ["lint", "--select", "DDP034", str(tmp_path / "train.py")])
    assert ("its metrics are not reduced across ranks" in result.output) is unreduced, result.output
    if not unreduced:  # (the reduced metric still counts the sampler's padding twice: that review stays)
        assert "pads the set to a multiple of the world size" in result.output, result.output
