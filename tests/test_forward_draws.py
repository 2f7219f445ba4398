"""DDP051 and noise drawn in a model's ``forward`` (or a method it runs): the VAE's reparameterization.

A trial's VAE drew ``eps = torch.randn_like(std)`` in ``reparameterize``, run by ``forward``, with torch seeded
alike on every rank: under torchrun rank 0 and rank 1 drew the same ``eps`` for their k-th samples (the global
batch held two copies of the noise), and the report said nothing needed a human. Only draws in the training
loop's own code were read (a call of the model is no call of ``forward`` the call graph follows). Noise on the
model's own weights (``torch.randn_like(self.weight)``) is rightly the same on every rank.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from ddp_migrate.cli import cli

MODEL = """import torch
import torch.nn as nn


class VAE(nn.Module):
    def __init__(self):
        super().__init__()
        self.enc = nn.Linear(8, 4)
        self.dec = nn.Linear(2, 8)

    def reparameterize(self, mu, logvar):
        std = torch.exp(0.5 * logvar)
        eps = DRAW
        return mu + eps * std

    def forward(self, x):
        h = self.enc(x)
        mu, logvar = h[:, :2], h[:, 2:]
        z = self.reparameterize(mu, logvar)
        return self.dec(z), mu, logvar
"""

TRAIN = """import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

from model import VAE


def main():
    torch.manual_seed(0)
    model = VAE()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    loader = DataLoader(TensorDataset(torch.randn(64, 8)), batch_size=16, shuffle=True)
    for epoch in range(2):
        for (x,) in loader:
            recon, mu, logvar = model(x)
            loss = F.mse_loss(recon, x) - 0.5 * torch.mean(1 + logvar - mu.pow(2) - logvar.exp())
            opt.zero_grad()
            loss.backward()
            opt.step()


if __name__ == "__main__":
    main()
"""


def reviews(tmp_path: Path, draw: str) -> list[str]:
    (tmp_path / "model.py").write_text(MODEL.replace("DRAW", draw))
    (tmp_path / "train.py").write_text(TRAIN)
    result = CliRunner().invoke(cli, ["--diff", str(tmp_path / "train.py")])
    return [line for line in result.output.splitlines() if line.strip().startswith("review") and "DDP051" in line]


@pytest.mark.parametrize("draw", ["torch.randn_like(std)", "torch.randn(std.size(0), 2)", "torch.randn(mu.shape)"])
def test_noise_drawn_in_the_forward_for_each_sample_is_reviewed(tmp_path: Path, draw: str) -> None:
    found = reviews(tmp_path, draw)
    assert len(found) == 1 and "model.py:" in found[0] and draw.split("(")[0] in found[0], found
    assert "for each sample of this process's batch" in found[0], found


@pytest.mark.parametrize("draw", ["torch.randn_like(self.enc.weight)[0, :2]", "torch.randn(2)"])
def test_noise_shaped_by_the_models_own_state_or_constants_is_left_alone(tmp_path: Path, draw: str) -> None:
    assert reviews(tmp_path, draw) == []


def test_noise_like_a_name_holding_the_models_weights_is_left_alone(tmp_path: Path) -> None:
    (tmp_path / "model.py").write_text(MODEL.replace("        eps = DRAW", "        w = self.enc.weight\n        eps = torch.randn_like(w)[0, :2]"))
    (tmp_path / "train.py").write_text(TRAIN)
    result = CliRunner().invoke(cli, ["--diff", str(tmp_path / "train.py")])
    assert "DDP051" not in result.output, result.output


@pytest.mark.parametrize("draw", ["torch.randn(std.size(1))", "torch.randn(std.shape[1:])", "torch.randn(mu.size(-1))"])
def test_noise_sized_by_another_axis_is_reviewed_as_such(tmp_path: Path, draw: str) -> None:
    """One value per feature is the same on every rank, as in the original; but the analysis knows no tensor's
    layout, and for a sequence-first tensor (nn.LSTM without batch_first) axis 1 holds the samples, for a tensor of
    one axis ``-1`` does (a review: these were left alone after a trial's false finding). The review says which."""
    found = reviews(tmp_path, draw)
    assert len(found) == 1 and "an axis of this process's batch other than the first" in found[0] and "if that axis holds the samples" in found[0], found


@pytest.mark.parametrize("draw", ["torch.randn(std.shape[:1] + (2,))", "torch.randn(std.shape[0], 2)", "torch.randn(*std.shape)"])
def test_noise_sized_by_the_batch_axis_spelled_otherwise_is_reviewed(tmp_path: Path, draw: str) -> None:
    assert len(reviews(tmp_path, draw)) == 1


def test_noise_in_the_forward_of_a_model_no_wrap_takes_is_left_alone(tmp_path: Path) -> None:
    """A second model built but never trained (a frozen copy used for sampling elsewhere) is not what DDP wraps:
    its forward runs in no training step."""
    model = MODEL.replace("DRAW", "torch.randn(2)") + MODEL.replace("class VAE(", "class Sampler(").replace("DRAW", "torch.randn_like(std)")
    (tmp_path / "model.py").write_text(model)
    (tmp_path / "train.py").write_text(TRAIN.replace("from model import VAE", "from model import VAE, Sampler").replace(
        "    model = VAE()\n", "    model = VAE()\n    sampler = Sampler()\n"
    ))
    result = CliRunner().invoke(cli, ["--diff", str(tmp_path / "train.py")])
    assert "DDP051" not in result.output, result.output


def test_noise_in_the_forward_of_a_model_inside_a_container_the_wrap_takes_is_reviewed(tmp_path: Path) -> None:
    """``DDP(nn.Sequential(VAE()))``: the VAE's forward runs in the wrapped model's step (a review: missed)."""
    (tmp_path / "model.py").write_text(MODEL.replace("DRAW", "torch.randn_like(std)"))
    (tmp_path / "train.py").write_text(TRAIN.replace("    model = VAE()\n", "    model = torch.nn.Sequential(VAE())\n"))
    result = CliRunner().invoke(cli, ["--diff", str(tmp_path / "train.py")])
    assert len([line for line in result.output.splitlines() if line.strip().startswith("review") and "DDP051" in line]) == 1, result.output
