"""Layers of the program's classes held in an ``nn.ModuleList`` (the binding model's container of layers).

A trial's Switch-style router computed its load-balancing loss from batch statistics (``F.one_hot(idx).mean(0) *
probs.mean(0)``) in a layer the model ran through ``for layer in self.layers: x = layer(x)`` of
``self.layers = nn.ModuleList([Router()])``: the layer's forward was out of the analysis's sight, so DDP050 said
nothing, and 2 processes ended at 4.2626 where the original gave 4.6400. The same layer held as a plain attribute
got the review. A loop over a ModuleList written out of the program's layers now binds each of them.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from migrated import lint_findings

PROGRAM = """import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset
from torch.nn.parallel import DistributedDataParallel


class Router(nn.Module):
    def __init__(self):
        super().__init__()
        self.gate = nn.Linear(8, 4)
        self.head = nn.Linear(8, 8)

    def forward(self, x):
        probs = self.gate(x).softmax(-1)
        frac = F.one_hot(probs.argmax(-1), 4).float().mean(0)
        self.aux_loss = 4 * (frac * probs.mean(0)).sum()
        return self.head(x)


class Outer(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = LAYERS

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


data = TensorDataset(torch.randn(64, 8), torch.randint(0, 3, (64,)))
loader = DataLoader(data, batch_size=16, sampler=DistributedSampler(data))
model = DistributedDataParallel(Outer())
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for x, y in loader:
    opt.zero_grad()
    loss = F.cross_entropy(model(x)[:, :3], y) + sum(layer.aux_loss for layer in model.module.layers)
    loss.backward()
    opt.step()
"""


@pytest.mark.parametrize("layers", ["nn.ModuleList([Router(), Router()])", "nn.ModuleList([Router()])"])
def test_a_batch_statistic_in_a_layer_of_a_module_list_is_reviewed(tmp_path: Path, layers: str) -> None:
    found = lint_findings(tmp_path, PROGRAM.replace("LAYERS", layers), "DDP050")
    assert any("F.one_hot(probs.argmax(-1), 4).float().mean(0)" in line for line in found), found
    assert any("probs.mean(0)" in line for line in found), found


def test_a_module_list_of_library_layers_binds_nothing(tmp_path: Path) -> None:
    source = PROGRAM.replace("LAYERS", "nn.ModuleList([nn.Linear(8, 8), nn.Linear(8, 8)])").replace(
        "sum(layer.aux_loss for layer in model.module.layers)", "0.0"
    )
    assert lint_findings(tmp_path, source, "DDP050") == []
