"""Parameter groups built by name two calls away from the optimizer's call (DDP011's wrap placement).

``optimizer = build_optimizer(model, lr)`` of ``groups.py`` calls ``param_groups(model)``, which splits
``model.named_parameters()`` on ``n.startswith("head.")``: the wrap went before the call, every name gained
``module.`` and the head's group came out empty (its 10x learning rate lost: 28.565 against 32.817), with
"0 item(s) need a human". One call away, the wrap already followed the split.
"""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from ddp_migrate.cli import cli

GROUPS = """import torch


def param_groups(model, lr):
    head = [p for n, p in model.named_parameters() if n.startswith("head.")]
    rest = [p for n, p in model.named_parameters() if not n.startswith("head.")]
    return [{"params": rest, "lr": lr}, {"params": head, "lr": 10 * lr}]


def build_optimizer(model, lr):
    return torch.optim.SGD(param_groups(model, lr), lr=lr)
"""
TRAIN = """import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

from groups import build_optimizer


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Linear(4, 4)
        self.head = nn.Linear(4, 1)

    def forward(self, x):
        return self.head(self.body(x).relu())


def main():
    loader = DataLoader(TensorDataset(torch.randn(64, 4), torch.randn(64, 1)), batch_size=16)
    model = Net()
    optimizer = build_optimizer(model, 0.05)
    for epoch in range(2):
        for x, y in loader:
            optimizer.zero_grad()
            nn.functional.mse_loss(model(x), y).backward()
            optimizer.step()


if __name__ == "__main__":
    main()
"""


def test_the_wrap_follows_a_split_by_name_two_calls_away(tmp_path: Path) -> None:
    (tmp_path / "groups.py").write_text(GROUPS)
    (tmp_path / "train.py").write_text(TRAIN)
    result = CliRunner().invoke(cli, [str(tmp_path / "train.py")])
    assert result.exit_code == 0, result.output
    migrated = (tmp_path / "train.py").read_text()
    split = migrated.index("optimizer = build_optimizer(model, 0.05)")
    wrap = migrated.index("model = DistributedDataParallel(model")
    assert split < wrap, migrated
