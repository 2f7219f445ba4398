"""A model built in the script and wrapped in ``nn.DataParallel`` by a Trainer of another module (a trial).

DDP011 looked for wraps in the script's own module only: it wrapped ``model`` in ``run.py`` while DDP001 turned
the Trainer's DataParallel into a DistributedDataParallel too, so the program trained ``DDP(DDP(model))`` (every
gradient reduced twice, checkpoint keys with ``module.module.``). One wrap, the Trainer's.
"""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from ddp_migrate.cli import cli

TRAINER = '''import torch
import torch.nn as nn


class Trainer:
    def __init__(self, model, optimizer, loader):
        self.device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        model = model.to(self.device)
        if torch.cuda.device_count() > 1:
            model = nn.DataParallel(model)
        self.model = model
        self.optimizer = optimizer
        self.loader = loader

    def fit(self, epochs):
        for epoch in range(epochs):
            for x, y in self.loader:
                x, y = x.to(self.device), y.to(self.device)
                loss = nn.functional.mse_loss(self.model(x), y)
                self.optimizer.zero_grad()
                loss.backward()
                self.optimizer.step()
'''

RUN = '''import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

from trainer import Trainer


def main():
    model = nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(TensorDataset(torch.randn(64, 4), torch.randn(64, 1)), batch_size=8, shuffle=True)
    Trainer(model, optimizer, loader).fit(2)


if __name__ == "__main__":
    main()
'''


def test_a_model_a_trainer_of_another_module_wraps_is_wrapped_once(tmp_path: Path) -> None:
    (tmp_path / "trainer.py").write_text(TRAINER)
    (tmp_path / "run.py").write_text(RUN)
    result = CliRunner().invoke(cli, [str(tmp_path / "run.py")])
    assert result.exit_code == 0, result.output
    run, trainer = (tmp_path / "run.py").read_text(), (tmp_path / "trainer.py").read_text()
    assert "DistributedDataParallel(" not in run, run
    assert trainer.count("DistributedDataParallel(") == 1 and "DataParallel(model)" not in trainer.replace("DistributedDataParallel", ""), trainer
