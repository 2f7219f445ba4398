"""A training loop whose backward pass runs in a library (DeiT's ``optimizer.zero_grad()`` then ``loss_scaler(loss,
optimizer)``, timm's ``NativeScaler``): the loop zeroes an optimizer's gradients, so it trains. A trial's lint of
DeiT called its training sampler an evaluation sampler that pads the set (DDP034)."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from ddp_migrate.cli import cli

ENGINE = """import torch


def train_one_epoch(model, loader, optimizer, loss_scaler):
    model.train()
    for x, y in loader:
        loss = torch.nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss_scaler(loss, optimizer)


@torch.no_grad()
def evaluate(model, loader):
    total = 0.0
    for x, y in loader:
        total += torch.nn.functional.mse_loss(model(x), y).item()
    return total
"""

MAIN = """import torch
import torch.distributed as dist
from timm.utils import NativeScaler
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

from engine import evaluate, train_one_epoch


def main():
    dist.init_process_group("gloo")
    dataset = TensorDataset(torch.randn(64, 4), torch.randn(64, 2))
    sampler = DistributedSampler(dataset, shuffle=True)
    loader = DataLoader(dataset, batch_size=8, sampler=sampler)
    val_loader = DataLoader(dataset, batch_size=8, sampler=DistributedSampler(dataset, shuffle=False))
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loss_scaler = NativeScaler()
    for epoch in range(3):
        sampler.set_epoch(epoch)
        train_one_epoch(model, loader, optimizer, loss_scaler)
        evaluate(model, val_loader)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
"""


def test_a_loop_that_zeroes_an_optimizers_gradients_trains(tmp_path: Path) -> None:
    (tmp_path / "engine.py").write_text(ENGINE)
    (tmp_path / "main.py").write_text(MAIN)
    output = CliRunner().invoke(cli, ["lint", "--select", "DDP034", str(tmp_path)]).output
    assert "main.py:13:" not in output, output  # the training loader (its sampler shuffles the training set)
    assert "main.py:14:18: DDP034 evaluation DistributedSampler pads the set" in output, output
