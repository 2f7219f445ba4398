"""minGPT's shape (a trial): ``optimizer = create_optimizer(model, lr)`` builds parameter groups from
``model.named_parameters()`` in a module of its own, and a ``Trainer`` of another module wraps the model it is handed
(``self.model = DDP(self.model)``). DDP011 said the model was never wrapped, and its fix would have wrapped it twice."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from ddp_migrate.cli import cli

MAIN = """import torch
from torch.distributed import destroy_process_group, init_process_group
from torch.utils.data import TensorDataset

from optim import create_optimizer
from trainer import Trainer


def main():
    init_process_group(backend="gloo")
    dataset = TensorDataset(torch.randn(64, 4), torch.randn(64, 2))
    model = torch.nn.Linear(4, 2)
    optimizer = create_optimizer(model, 1e-3)
    Trainer(MODEL, optimizer, dataset).train(3)
    destroy_process_group()


if __name__ == "__main__":
    main()
"""

OPTIM = """import torch


def create_optimizer(model, lr):
    decay = {pn for pn, p in model.named_parameters()}
    param_dict = {pn: p for pn, p in model.named_parameters()}
    groups = [{"params": [param_dict[pn] for pn in sorted(decay)], "weight_decay": 0.1}]
    return torch.optim.AdamW(groups, lr=lr)
"""

TRAINER = """import torch
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler


class Trainer:
    def __init__(self, model, optimizer, train_dataset):
        self.train_loader = DataLoader(train_dataset, batch_size=8, sampler=DistributedSampler(train_dataset))
        self.optimizer = optimizer
        self.model = DDP(model)

    def train(self, epochs):
        for epoch in range(epochs):
            self.train_loader.sampler.set_epoch(epoch)
            for x, y in self.train_loader:
                loss = torch.nn.functional.mse_loss(self.model(x), y)
                self.optimizer.zero_grad()
                loss.backward()
                self.optimizer.step()
"""


def _lint(folder: Path, model: str) -> str:
    (folder / "main.py").write_text(MAIN.replace("MODEL", model))
    (folder / "optim.py").write_text(OPTIM)
    (folder / "trainer.py").write_text(TRAINER)
    return CliRunner().invoke(cli, ["lint", "--select", "DDP011", str(folder)]).output


def test_a_model_its_trainer_wraps_is_wrapped_whatever_builds_its_optimizer(tmp_path: Path) -> None:
    assert "Found 0 problem" in _lint(tmp_path, "model")


def test_a_trainer_handed_another_model_leaves_this_one_unwrapped(tmp_path: Path) -> None:
    assert "DDP011 model is trained but never wrapped" in _lint(tmp_path, "torch.nn.Linear(4, 2)")
