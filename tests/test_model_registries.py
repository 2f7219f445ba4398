"""A model built through a registry of classes (``MODELS[name](**kw)``, a trial's torchvision-style repository).

``build_model(name)`` returning ``MODELS[name](num_classes=4)`` of ``MODELS = {"tiny_resnet": TinyResNet, "mlp":
MLP}``: the call built no class the analysis knew, so a TinyResNet's BatchNorm layers got no SyncBatchNorm and no
note (on GPUs each process normalised with a shard's statistics, without a word).
"""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from ddp_migrate.cli import cli

MODELS = '''import torch.nn as nn


class TinyResNet(nn.Module):
    def __init__(self, num_classes):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.ReLU())
        self.head = nn.Linear(8, num_classes)

    def forward(self, x):
        return self.head(self.body(x))


class MLP(nn.Module):
    def __init__(self, num_classes):
        super().__init__()
        self.net = nn.Linear(4, num_classes)

    def forward(self, x):
        return self.net(x)


MODELS = {"tiny_resnet": TinyResNet, "mlp": MLP}


def build_model(name, **kwargs):
    return MODELS[name](**kwargs)
'''

MAIN = '''import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

from models import build_model


def main():
    model = build_model("NAME", num_classes=2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(TensorDataset(torch.randn(64, 4), torch.randint(0, 2, (64,))), batch_size=8, shuffle=True)
    for epoch in range(2):
        for x, y in loader:
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()


if __name__ == "__main__":
    main()
'''


def test_a_registry_that_may_build_batchnorm_layers_gets_them_converted(tmp_path: Path) -> None:
    (tmp_path / "models.py").write_text(MODELS)
    (tmp_path / "main.py").write_text(MAIN.replace("NAME", "tiny_resnet"))
    result = CliRunner().invoke(cli, [str(tmp_path / "main.py")])
    assert "runtime.convert_sync_batchnorm(model)" in (tmp_path / "main.py").read_text(), result.output
    assert "DDP030" in result.output, result.output


def test_a_registry_of_models_without_batchnorm_is_left_as_is(tmp_path: Path) -> None:
    (tmp_path / "models.py").write_text(MODELS.replace("nn.BatchNorm1d(8), ", ""))
    (tmp_path / "main.py").write_text(MAIN.replace("NAME", "mlp"))
    result = CliRunner().invoke(cli, [str(tmp_path / "main.py")])
    assert "convert_sync_batchnorm" not in (tmp_path / "main.py").read_text(), result.output
