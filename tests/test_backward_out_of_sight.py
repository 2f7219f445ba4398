"""A training loop whose backward pass runs in a library (DeiT's ``optimizer.zero_grad()`` then ``loss_scaler(loss,
optimizer)``, timm's ``NativeScaler``): the loop zeroes an optimizer's gradients, so it trains. A trial's lint of
DeiT called its training sampler an evaluation sampler that pads the set (DDP034)."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from ddp_migrate.cli import cli
from ddp_migrate.codemods.analysis.script import backward_loss
from ddp_migrate.codemods.edits import code_of

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


# A single-process program whose backward pass runs in a library (timm's ``NativeScaler``): nothing of the
# program says ``backward``, yet it trains and must be migrated whole (set-up, wrap, sampler, rank 0's
# output). Before, only its loader was given a DistributedSampler, with no process group to shard it by.
SINGLE_PROCESS = """import argparse

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset
from timm.utils import NativeScaler


def train_one_epoch(model, criterion, loader, optimizer, device, loss_scaler):
    model.train()
    for samples, targets in loader:
        samples, targets = samples.to(device), targets.to(device)
        loss = criterion(model(samples), targets)
        optimizer.zero_grad()
        loss_scaler(loss, optimizer, parameters=model.parameters())
    return loss.item()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=3)
    args = parser.parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    data = TensorDataset(torch.randn(256, 8), torch.randint(0, 4, (256,)))
    loader = DataLoader(data, batch_size=32, shuffle=True)
    model = nn.Linear(8, 4).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loss_scaler = NativeScaler()
    for epoch in range(args.epochs):
        loss = train_one_epoch(model, nn.CrossEntropyLoss(), loader, optimizer, device, loss_scaler)
        print(f"epoch {epoch} loss {loss:.3f}")
        torch.save(model.state_dict(), "model.pt")


if __name__ == "__main__":
    main()
"""


def test_a_program_whose_backward_runs_in_a_library_is_migrated_whole(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(SINGLE_PROCESS)
    result = CliRunner().invoke(cli, [str(script)])
    assert result.exit_code == 0, result.output
    migrated = script.read_text()
    compile(migrated, "train.py", "exec")
    for code in ("DDP003", "DDP005", "DDP006", "DDP007", "DDP010", "DDP011"):
        assert f"  {code} line" in result.output, (code, result.output)
    assert "runtime.setup()" in migrated
    wrap = migrated.index("model = DistributedDataParallel(model")
    assert migrated.index("model = nn.Linear(8, 4).to(device)") < wrap < migrated.index("optimizer = torch.optim.AdamW(")
    assert "sampler=DistributedSampler(data, shuffle=True)" in migrated
    assert "runtime.save(model.module.state_dict()" in migrated


def _analysis(source: str):  # type: ignore[no-untyped-def]
    from ddp_migrate.engine import analyse
    from ddp_migrate.codemods.analysis.tree import parse_module

    return analyse(parse_module(source), source=source)


def test_the_library_call_handed_the_loss_and_the_optimizer_is_the_backward() -> None:
    analysis = _analysis(SINGLE_PROCESS)
    assert [code_of(call) for call in analysis.backward_calls] == ["loss_scaler(loss, optimizer, parameters=model.parameters())"]
    assert code_of(backward_loss(analysis.backward_calls[0])) == "loss"
    assert analysis.is_training_script


@pytest.mark.parametrize(
    "loop",
    [
        # a visible backward and step: the optimizer handed to a helper only sets its learning rate
        "optimizer.zero_grad()\n    loss.backward()\n    optimizer.step()\n    adjust_learning_rate(optimizer, loss)",
        # a program's own step function: its backward is in sight
        "optimizer.zero_grad()\n    train_step(loss, optimizer)",
        # the optimizer first: no loss handed over
        "optimizer.zero_grad()\n    log_state(optimizer, loss)\n    optimizer.step()",
        # no gradients zeroed: nothing says this loop trains
        "clip_and_step(loss, optimizer)",
        # a backward and a step in a function of the program the loop runs (a review's find: the library
        # call beside it was taken for the backward, and a test after the loop for a decision on the shard)
        "optimizer.zero_grad()\n    adjust_learning_rate(loss, optimizer)\n    train_step(loss, optimizer)",
        # a starred argument: which one is the loss cannot be told
        "optimizer.zero_grad()\n    clip_and_step(*[loss], optimizer)",
    ],
)
def test_other_calls_handed_an_optimizer_are_no_backward(loop: str) -> None:
    source = (
        "import torch\nfrom lib import adjust_learning_rate, log_state, clip_and_step\n\n"
        "def train_step(loss, optimizer):\n    loss.backward()\n    optimizer.step()\n\n"
        "model = torch.nn.Linear(2, 1)\noptimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        f"for x in data:\n    loss = model(x).sum()\n    {loop}\n"
    )
    assert not _analysis(source).backward_calls_out_of_sight


def test_the_optimizer_handed_by_keyword_is_found_too() -> None:
    """``loss_scaler(loss, optimizer=optimizer)`` (a review's find: only the sampler was added, no process group)."""
    analysis = _analysis(SINGLE_PROCESS.replace("loss_scaler(loss, optimizer, parameters", "loss_scaler(loss, optimizer=optimizer, parameters"))
    assert [code_of(call) for call in analysis.backward_calls] == ["loss_scaler(loss, optimizer=optimizer, parameters=model.parameters())"]
