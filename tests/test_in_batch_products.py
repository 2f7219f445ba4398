"""In-batch similarity matrices written without a transpose (DDP050).

A two-tower contrastive program wrote its similarities as ``F.linear(ea, eb)`` and ``torch.inner(ea, eb)``:
every row of one batch with every row of the other, like ``ea @ eb.t()``, which got the review; these did not
(2 processes: loss 2.46 where one process computed 3.10, "0 item(s) need a human").
"""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from ddp_migrate.cli import cli

PROGRAM = """import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset


def main():
    data = TensorDataset(torch.randn(256, 8), torch.randn(256, 6))
    loader = DataLoader(data, batch_size=64, shuffle=True)
    towers = nn.ModuleDict({"a": nn.Linear(8, 4), "b": nn.Linear(6, 4)})
    opt = torch.optim.SGD(towers.parameters(), lr=0.1)
    for epoch in range(3):
        for a, b in loader:
            ea, eb = F.normalize(towers["a"](a), dim=1), F.normalize(towers["b"](b), dim=1)
            logits = 10.0 * PRODUCT
            target = torch.arange(len(a))
            loss = (F.cross_entropy(logits, target) + F.cross_entropy(logits.t(), target)) / 2
            opt.zero_grad()
            loss.backward()
            opt.step()


if __name__ == "__main__":
    main()
"""


@pytest.mark.parametrize(
    "product",
    [
        "F.linear(ea, eb)",
        "torch.inner(ea, eb)",
        "ea @ eb.t()",
        # MoCo-style spellings (a SimCLR trial: 2 processes trained to loss 1.98 where one process computed 2.65)
        'torch.einsum("nc,mc->nm", [ea, eb])',
        "torch.tensordot(ea, eb, dims=([1], [1]))",
        "ea @ eb.detach().t()",
    ],
)
def test_every_row_with_every_row_is_an_in_batch_comparison(tmp_path: Path, product: str) -> None:
    script = tmp_path / "train.py"
    script.write_text(PROGRAM.replace("PRODUCT", product))
    result = CliRunner().invoke(cli, [str(script)])
    found = [line for line in result.output.splitlines() if "DDP050" in line and "multiplies the samples of this process's batch" in line]
    assert len(found) == 1 and product in found[0], result.output


def test_a_layers_own_weight_is_no_batch(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(PROGRAM.replace("PRODUCT", 'F.linear(ea, towers["b"].weight[:4, :4])'))
    result = CliRunner().invoke(cli, [str(script)])
    assert "DDP050" not in result.output, result.output


@pytest.mark.parametrize(
    "layer, call",
    [
        ("    similarity = nn.CosineSimilarity(dim=2)\n", "similarity(ea.unsqueeze(1), eb.unsqueeze(0))"),
        ("", "nn.CosineSimilarity(dim=2)(ea.unsqueeze(1), eb.unsqueeze(0))"),
    ],
    ids=["held-in-a-name", "built-in-place"],
)
def test_a_cosine_similarity_layer_over_every_pair_is_an_in_batch_comparison(tmp_path: Path, layer: str, call: str) -> None:
    """``nn.CosineSimilarity`` (SimCLR's NT-Xent keeps one as ``self.similarity_f``) compares like ``F.cosine_similarity``."""
    script = tmp_path / "train.py"
    source = PROGRAM.replace("PRODUCT", call).replace("    opt = torch.optim", layer + "    opt = torch.optim")
    script.write_text(source)
    result = CliRunner().invoke(cli, [str(script)])
    found = [line for line in result.output.splitlines() if "DDP050" in line and "compares the samples of this process's batch" in line]
    assert len(found) == 1 and call in found[0], result.output


def test_a_tensordot_over_the_batch_axis_is_no_comparison_of_samples(tmp_path: Path) -> None:
    """``dims=([0], [0])`` sums over the samples (a feature covariance): no matrix of every pair of samples."""
    script = tmp_path / "train.py"
    script.write_text(PROGRAM.replace("PRODUCT", "torch.tensordot(ea, eb, dims=([0], [0]))"))
    result = CliRunner().invoke(cli, [str(script)])
    assert "multiplies the samples" not in result.output, result.output
