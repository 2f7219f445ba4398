"""Where a model is trained, followed through the program: an optimizer built by the model's own method in a
Trainer of another module (``model.configure_optimizers()`` in ``Trainer.__init__``, nanoGPT's shape) is the
entry's model to wrap; a model whose own method runs its training step cannot be wrapped from outside."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from ddp_migrate.cli import cli

MODEL = '''
import torch
import torch.nn as nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 1)

    def forward(self, x):
        return self.fc(x)

    def configure_optimizers(self, lr):
        return torch.optim.SGD(self.parameters(), lr=lr)
'''

TRAINER = '''
import torch
from torch.utils.data import DataLoader, TensorDataset


class Trainer:
    def __init__(self, model, lr):
        self.model = model
        self.optimizer = model.configure_optimizers(lr)

    def fit(self, epochs):
        torch.manual_seed(0)
        data = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
        loader = DataLoader(data, batch_size=8, shuffle=True)
        for epoch in range(epochs):
            for x, y in loader:
                loss = torch.nn.functional.mse_loss(self.model(x), y)
                self.optimizer.zero_grad()
                loss.backward()
                self.optimizer.step()
'''

ENTRY = '''
import os

import torch

from model import Net
from trainer import Trainer


def main():
    torch.manual_seed(0)
    model = Net()
    Trainer(model, 0.1).fit(2)
    os.write(1, f"weights {sum(p.sum().item() for p in model.parameters()):.6f}\\n".encode())


if __name__ == "__main__":
    main()
'''


def test_a_model_whose_optimizer_its_own_method_builds_in_another_modules_trainer_is_wrapped_in_the_entry(tmp_path: Path) -> None:
    """A trial's bare review ("model is trained but never wrapped") in trainer.py, and a false one ("self is
    trained") in model.py: the model is handed on twice (to Trainer, then to its own configure_optimizers)."""
    (tmp_path / "model.py").write_text(MODEL)
    (tmp_path / "trainer.py").write_text(TRAINER)
    (tmp_path / "train.py").write_text(ENTRY)
    result = CliRunner().invoke(cli, [str(tmp_path)], catch_exceptions=False)
    assert result.exit_code == 0 and "0 item(s) need a human" in result.output, result.output
    assert "    model = DistributedDataParallel(model, device_ids=runtime.device_ids())\n    Trainer(model, 0.1)" in (tmp_path / "train.py").read_text()
    assert "self.optimizer = model.module.configure_optimizers(lr)" in (tmp_path / "trainer.py").read_text()


@pytest.mark.distributed
def test_the_replicas_trained_through_the_trainer_stay_alike_under_torchrun(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    from launch import run_torchrun

    (tmp_path / "model.py").write_text(MODEL)
    (tmp_path / "trainer.py").write_text(TRAINER)
    (tmp_path / "train.py").write_text(ENTRY)
    CliRunner().invoke(cli, [str(tmp_path)], catch_exceptions=False)
    launch = run_torchrun(tmp_path / "train.py", nproc_per_node=2, cwd=tmp_path, timeout=120)
    weights = re.findall(r"weights (-?\d+\.\d+)", launch.output)
    assert len(weights) == 2 and weights[0] == weights[1], launch.output


SELF_TRAINING = '''
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 1)

    def forward(self, x):
        return self.fc(x)

    def fit(self, loader, epochs):
        opt = torch.optim.SGD(self.parameters(), lr=0.1)
        for epoch in range(epochs):
            for x, y in loader:
                loss = nn.functional.mse_loss(STEP, y)
                opt.zero_grad()
                loss.backward()
                opt.step()


def main():
    data = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
    loader = DataLoader(data, batch_size=8, shuffle=True)
    model = Net()
    model.fit(loader, 2)
    print(model.fc.weight.sum().item())


if __name__ == "__main__":
    main()
'''


@pytest.mark.parametrize("step", ["self(x)", "self.fc(x)"], ids=["forward-on-self", "forward-on-its-layer"])
def test_a_model_that_trains_itself_in_its_own_method_is_reviewed_not_wrapped(tmp_path: Path, step: str) -> None:
    """The migration wrapped the model and called ``model.module.fit(loader, 2)``: the forward inside ``fit``
    never ran through DDP, each rank trained its own replica on its shard (weights -0.289 and -0.036) and the
    report said 0 items for a human."""
    (tmp_path / "train.py").write_text(SELF_TRAINING.replace("STEP", step))
    result = CliRunner().invoke(cli, [str(tmp_path / "train.py")], catch_exceptions=False)
    migrated = (tmp_path / "train.py").read_text()
    assert "model.module.fit" not in migrated and "DistributedDataParallel(model" not in migrated, migrated
    assert "DDP011 model trains itself in a method of its own class (fit() builds its optimizer" in result.output, result.output
    assert "1 item(s) need a human" in result.output, result.output


def test_a_model_with_an_unrelated_backward_in_its_class_is_still_wrapped(tmp_path: Path) -> None:
    """A review's false review: a model whose ``configure_optimizers`` only builds the optimizer, and whose other
    method runs a backward of its own (an input-saliency pass), trained by an outside loop, is wrapped as before."""
    model = MODEL + (
        "\n    def saliency(self, x):\n        x = x.clone().requires_grad_(True)\n        self(x).sum().backward()\n"
        "        return x.grad\n"
    )
    (tmp_path / "model.py").write_text(model)
    (tmp_path / "trainer.py").write_text(TRAINER)
    (tmp_path / "train.py").write_text(ENTRY)
    result = CliRunner().invoke(cli, [str(tmp_path)], catch_exceptions=False)
    assert "trains itself" not in result.output, result.output
    assert "model = DistributedDataParallel(model" in (tmp_path / "train.py").read_text(), result.output


OWN_OPTIMIZER = '''
import os

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


class Net(nn.Module):
    def __init__(self, lr):
        super().__init__()
        self.fc = nn.Linear(4, 1)
        self.optimizer = torch.optim.SGD(self.parameters(), lr=lr)

    def forward(self, x):
        return self.fc(x)


def main():
    torch.manual_seed(0)
    loader = DataLoader(TensorDataset(torch.randn(64, 4), torch.randn(64, 1)), batch_size=8, shuffle=True)
    model = Net(0.1)
    for epoch in range(2):
        for x, y in loader:
            model.optimizer.zero_grad()
            nn.functional.mse_loss(model(x), y).backward()
            model.optimizer.step()
    os.write(1, f"weights {sum(p.sum().item() for p in model.parameters()):.6f}\\n".encode())


if __name__ == "__main__":
    main()
'''


def test_a_model_whose_init_builds_its_optimizer_is_wrapped_where_it_is_made(tmp_path: Path) -> None:
    """``self.optimizer = SGD(self.parameters())`` in ``__init__``, the loop in ``main``: the model was never
    wrapped (each process trained its own replica on its shard) and the report said nothing needed a human.
    The object made by ``model = Net(0.1)`` is the trained model; its optimizer is reached through .module."""
    (tmp_path / "train.py").write_text(OWN_OPTIMIZER)
    result = CliRunner().invoke(cli, [str(tmp_path / "train.py")], catch_exceptions=False)
    migrated = (tmp_path / "train.py").read_text()
    assert "    model = Net(0.1)\n    model = DistributedDataParallel(model, device_ids=runtime.device_ids())\n" in migrated, migrated
    assert migrated.count("model.module.optimizer.") == 2 and "0 item(s) need a human" in result.output, result.output


@pytest.mark.distributed
def test_the_replicas_of_a_model_with_its_own_optimizer_stay_alike_under_torchrun(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    from launch import run_torchrun

    (tmp_path / "train.py").write_text(OWN_OPTIMIZER)
    CliRunner().invoke(cli, [str(tmp_path / "train.py")], catch_exceptions=False)
    launch = run_torchrun(tmp_path / "train.py", nproc_per_node=2, cwd=tmp_path, timeout=120)
    weights = re.findall(r"weights (-?\d+\.\d+)", launch.output)
    assert len(weights) == 2 and weights[0] == weights[1], launch.output


@pytest.mark.parametrize(
    ("change", "wrapped"),
    [
        # An agent object that only forwards parameters() to its network: no module, never wrapped itself.
        (("class Net(nn.Module):\n    def __init__(self, lr):\n        super().__init__()\n        self.fc = nn.Linear(4, 1)\n",
          "class Net:\n    def __init__(self, lr):\n        self.fc = nn.Linear(4, 1)\n"), False),
        # A second instance whose own optimizer is never stepped (a DQN's target network): only the trained one.
        (("    model = Net(0.1)\n", "    model = Net(0.1)\n    target = Net(0.0)\n"), True),
    ],
    ids=["not-a-module", "a-copy-never-stepped"],
)
def test_only_modules_whose_own_optimizer_is_stepped_are_wrapped_where_they_are_made(tmp_path: Path, change: tuple[str, str], wrapped: bool) -> None:
    """A review of the change above: an ``Agent`` whose ``__init__`` built ``SGD(self.parameters())`` over a
    ``parameters()`` of its own was wrapped in DDP (AttributeError: no named_parameters), and a DQN's never-stepped
    target network got a wrap too."""
    source = OWN_OPTIMIZER.replace(*change)
    if not wrapped:
        source = source.replace("    def forward(self, x):", "    def parameters(self):\n        return self.fc.parameters()\n\n    def __call__(self, x):")
    (tmp_path / "train.py").write_text(source)
    CliRunner().invoke(cli, [str(tmp_path / "train.py")], catch_exceptions=False)
    migrated = (tmp_path / "train.py").read_text()
    assert ("model = DistributedDataParallel(model" in migrated) is wrapped, migrated
    assert "DistributedDataParallel(target" not in migrated, migrated


BASE_CLASS_OPTIMIZER = OWN_OPTIMIZER.replace(
    "class Net(nn.Module):\n    def __init__(self, lr):\n",
    "class Base(nn.Module):\n    def __init__(self, lr):\n",
).replace(
    "    def forward(self, x):\n",
    "\nclass Net(Base):\n    def __init__(self, lr):\n        super().__init__(lr)\n\n    def forward(self, x):\n",
)


@pytest.mark.distributed
def test_a_model_whose_base_class_builds_its_optimizer_is_wrapped_and_its_replicas_stay_alike(tmp_path: Path) -> None:
    """A review: the optimizer built in a base class's ``__init__``, reached through ``super().__init__(lr)``: the
    model was not wrapped and the ranks diverged under torchrun (-0.308 against -0.078), 0 items for a human."""
    pytest.importorskip("torch")
    from launch import run_torchrun

    assert "super().__init__(lr)" in BASE_CLASS_OPTIMIZER
    (tmp_path / "train.py").write_text(BASE_CLASS_OPTIMIZER)
    CliRunner().invoke(cli, [str(tmp_path / "train.py")], catch_exceptions=False)
    migrated = (tmp_path / "train.py").read_text()
    assert "    model = DistributedDataParallel(model, device_ids=runtime.device_ids())\n" in migrated, migrated
    launch = run_torchrun(tmp_path / "train.py", nproc_per_node=2, cwd=tmp_path, timeout=120)
    weights = re.findall(r"weights (-?\d+\.\d+)", launch.output)
    assert len(weights) == 2 and weights[0] == weights[1], launch.output
