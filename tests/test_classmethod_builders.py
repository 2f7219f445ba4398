"""Objects built by a classmethod of the program (``config = ConfigParser.from_args(args)``, ``Model.from_config(cfg)``)
whose body returns ``cls(...)``: an instance of the class, whose methods the analysis follows.

PyTorch-Template's trainer logged through ``config.get_logger(name)`` (a ``logging.getLogger`` logger) on a
config built by ``ConfigParser.from_args``: the object's class was unknown, the logger was not seen as one, and
every rank logged every line to one ``info.log`` (each line twice under torchrun), with nothing to review.
"""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from ddp_migrate.cli import cli

CONFIG = """import logging


class ConfigParser:
    def __init__(self, options):
        self.options = options

    @classmethod
    def from_args(cls, argv):
        return cls({"lr": 0.1, "argv": argv})

    def get_logger(self, name):
        logger = logging.getLogger(name)
        logger.setLevel(logging.INFO)
        return logger
"""

TRAIN = """import sys

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

from parse_config import ConfigParser


def main(config):
    logger = config.get_logger("train")
    model = nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=config.options["lr"])
    loader = DataLoader(TensorDataset(torch.randn(32, 4), torch.randn(32, 1)), batch_size=8)
    for x, y in loader:
        loss = nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        logger.info("loss %.4f", loss.item())


if __name__ == "__main__":
    main(ConfigParser.from_args(sys.argv))
"""


def test_a_logger_of_an_object_built_by_a_classmethod_is_silenced_off_rank_0(tmp_path: Path) -> None:
    (tmp_path / "parse_config.py").write_text(CONFIG)
    (tmp_path / "train.py").write_text(TRAIN)
    result = CliRunner().invoke(cli, [str(tmp_path / "train.py")], catch_exceptions=False)
    text = (tmp_path / "train.py").read_text()
    assert "runtime.silence_non_main_logging()" in text, result.output + text


INHERITED = """import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


class BaseTrainer:
    def __init__(self, cfg):
        self.cfg = cfg

    @classmethod
    def from_config(cls, cfg):
        return cls(cfg)


class Trainer(BaseTrainer):
    def __init__(self, cfg):
        super().__init__(cfg)
        self.model = nn.Linear(4, 1)
        self.opt = torch.optim.SGD(self.model.parameters(), lr=0.1)
        self.loader = DataLoader(TensorDataset(torch.randn(64, 4), torch.randn(64, 1)), batch_size=8, shuffle=True)

    def fit(self):
        for epoch in range(self.cfg["epochs"]):
            for x, y in self.loader:
                loss = nn.functional.mse_loss(self.model(x), y)
                self.opt.zero_grad()
                loss.backward()
                self.opt.step()


def main():
    trainer = Trainer.from_config({"epochs": 2})
    trainer.fit()


if __name__ == "__main__":
    main()
"""


def test_an_inherited_classmethod_builds_the_subclass_it_is_called_on(tmp_path: Path) -> None:
    """``Trainer.from_config(cfg)`` of a base class's ``return cls(cfg)`` runs ``Trainer.__init__``, which builds the
    model: the process group is set up in ``main()`` before it (it was not placed at all: the analysis took the
    object for a ``BaseTrainer``, whose ``__init__`` builds nothing)."""
    (tmp_path / "train.py").write_text(INHERITED)
    result = CliRunner().invoke(cli, [str(tmp_path / "train.py")])
    text = (tmp_path / "train.py").read_text()
    assert result.exit_code == 0, result.output
    assert "never sets up a process group" not in text, text
    main = text[text.index("def main():") :]
    assert main.index("runtime.setup(") < main.index("Trainer.from_config("), main
    assert "self.loader.sampler.set_epoch(epoch)" in text, text
