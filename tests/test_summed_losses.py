"""A loss summed over the batch inside a helper of the program (DDP039).

A trial's VAE returned ``F.binary_cross_entropy(recon, x, reduction="sum") + kld`` from ``loss_function``:
under DDP each process sums over its half of the batch and DDP averages the gradients, so the update
halved (weights 178.314 under torchrun against 178.098), with nothing to review. A helper that returns a
summed loss is read like the same call written in the loop: the loss is scaled by the world size.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from migrated import migrate_script

VAE = '''
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset


def loss_function(recon, x):
    return REDUCED


def main():
    torch.manual_seed(0)
    data = torch.rand(32, 6)
    loader = DataLoader(TensorDataset(data), batch_size=8)
    model = nn.Sequential(nn.Linear(6, 6), nn.Sigmoid())
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for epoch in range(2):
        for (x,) in loader:
            loss = loss_function(model(x), x)
            opt.zero_grad()
            loss.backward()
            opt.step()
    print("checksum", round(sum(float(p.sum()) for p in model.parameters()), 5), flush=True)


if __name__ == "__main__":
    main()
'''

SUMMED = 'F.binary_cross_entropy(recon, x, reduction="sum") + 0.5 * F.mse_loss(recon, x, reduction="sum")'


def test_a_helper_returning_a_summed_loss_is_scaled(tmp_path: Path) -> None:
    migrated, report, code = migrate_script(tmp_path, VAE.replace("REDUCED", SUMMED))
    assert code == 0, report
    assert "(loss * runtime.world_size()).backward()" in migrated, migrated


def test_a_helper_returning_a_mean_is_left_alone(tmp_path: Path) -> None:
    migrated, report, _ = migrate_script(tmp_path, VAE.replace("REDUCED", "F.binary_cross_entropy(recon, x)"))
    assert "world_size()" not in migrated and "DDP039" not in report, report


@pytest.mark.distributed
def test_the_scaled_helper_loss_trains_as_the_original(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    from launch import run_python, run_torchrun

    (tmp_path / "original").mkdir()
    source = VAE.replace("REDUCED", SUMMED)
    (tmp_path / "original" / "train.py").write_text(source)
    expected = run_python(tmp_path / "original" / "train.py", cwd=tmp_path / "original", timeout=120).output.split("checksum")[1].split()[0]
    migrate_script(tmp_path, source)
    launch = run_torchrun(tmp_path / "train.py", nproc_per_node=2, cwd=tmp_path, timeout=120)
    assert f"checksum {expected}" in launch.output, (expected, launch.output)


@pytest.mark.parametrize(
    "reduced",
    [
        "torch.sum(F.relu((recon - x).pow(2).sum(1) - 0.1))",
        "((recon - x) ** 2).sum()",
        "F.binary_cross_entropy(recon, x, reduction='none').sum()",
        "-0.5 * torch.sum(1 + recon - x.pow(2) - recon.exp())",
        "F.binary_cross_entropy(recon, x, reduction='none').sum(1).sum()",
        "((recon - x) ** 2).sum(dim=(0, 1))",
        "torch.sum((recon - x) ** 2, (0, 1))",
    ],
    ids=[
        "triplet-torch-sum", "squared-error-sum", "per-sample-losses-summed", "kld-term", "sum-of-sums",
        "sum-over-a-dim-tuple", "torch-sum-over-a-dim-tuple",
    ],
)
def test_a_loss_summed_with_sum_over_the_batch_is_left_to_a_human(tmp_path: Path, reduced: str) -> None:
    """A trial's triplet loss returned ``torch.sum(F.relu(d_pos - d_neg + margin))``: nothing was reported,
    and under torchrun both ranks ended at 3.36267516 against the original's 3.51650466 (the update halved).
    A full ``.sum()`` of what the batch computes is reviewed (other terms of the loss may be means)."""
    migrated, report, _ = migrate_script(tmp_path, VAE.replace("REDUCED", reduced))
    assert "DDP039" in report and "a .sum() over this process's share of the batch" in report, report
    assert "TODO(ddp-migrate): a loss summed over the batch with .sum()" in migrated, migrated
    assert "world_size()).backward()" not in migrated


@pytest.mark.parametrize(
    "reduced",
    [
        "((recon - x) ** 2).sum(1).mean()",
        "F.mse_loss(recon, x) + 1e-4 * sum(p.pow(2).sum() for p in PARAMS)",
        "((recon - x) ** 2).sum() / x.size(0)",
        "torch.sum((recon - x) ** 2, dim=0).mean()",
        # a review found these reviewed, each computing the same update under DDP:
        "(F.binary_cross_entropy(recon, x, reduction='none') * (x > 0.5)).sum() / (x > 0.5).sum()",
        "1 - 2 * (recon * x).sum() / (recon.sum() + x.sum())",
        "torch.stack([F.binary_cross_entropy(recon, x), F.mse_loss(recon, x)]).sum()",
        "F.binary_cross_entropy(recon, x).sum()",
        # a trial's: a zero loss that keeps the graph, a WGAN-GP gradient penalty
        "F.mse_loss(recon, x) if x.numel() else recon.sum() * 0",
        "F.mse_loss(recon, x) + ((torch.autograd.grad(recon.sum(), x, create_graph=True)[0].norm(2, dim=1) - 1) ** 2).mean()",
    ],
    ids=[
        "per-sample-sum-then-mean", "l2-penalty-on-the-parameters", "divided-by-this-batch", "sum-over-one-dim",
        "masked-mean", "dice", "stack-of-means", "sum-of-a-mean", "zero-loss", "gradient-penalty",
    ],
)
def test_a_sum_that_is_no_batch_sum_is_left_alone(tmp_path: Path, reduced: str) -> None:
    source = VAE.replace("REDUCED", reduced.replace("PARAMS", "MODEL.parameters()")).replace(
        "def loss_function(recon, x):", "MODEL = nn.Linear(1, 1)\n\n\ndef loss_function(recon, x):"
    )
    migrated, report, _ = migrate_script(tmp_path, source)
    # (no fix, no review; a masked mean gets its note: each shard divides by its own count)
    assert not any("DDP039" in line and not line.strip().startswith("note DDP039") for line in report.splitlines()), report
    assert "world_size()" not in migrated, migrated
    assert ("note DDP039" in report) is (reduced == "(F.binary_cross_entropy(recon, x, reduction='none') * (x > 0.5)).sum() / (x > 0.5).sum()"), report


def test_a_summed_loss_scaled_by_a_name_holding_the_world_size_is_left_alone(tmp_path: Path) -> None:
    """``ws = dist.get_world_size() ...`` then ``loss = per.sum() * ws``: scaled already (a review found it
    reviewed as an update that shrinks)."""
    source = VAE.replace("REDUCED", "F.binary_cross_entropy(recon, x, reduction='none').sum()").replace(
        "            loss = loss_function(model(x), x)\n",
        "            ws = dist.get_world_size() if dist.is_initialized() else 1\n"
        "            loss = loss_function(model(x), x) * ws\n",
    ).replace("import torch\n", "import torch\nimport torch.distributed as dist\n", 1)
    migrated, report, _ = migrate_script(tmp_path, source)
    assert "DDP039" not in report, report


def test_sum_of_a_local_name_is_a_batch_sum(tmp_path: Path) -> None:
    """``losses = F.cross_entropy(..., reduction='none')`` then ``loss = losses.sum()`` (a review found it missed:
    0.158 against 0.032)."""
    source = VAE.replace("REDUCED", "F.binary_cross_entropy(recon, x, reduction='none')").replace(
        "            loss = loss_function(model(x), x)\n",
        "            losses = loss_function(model(x), x)\n            loss = losses.sum()\n",
    )
    migrated, report, _ = migrate_script(tmp_path, source)
    assert "a .sum() over this process's share of the batch" in report, report


WEIGHTED = '''
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randint(0, 2, (64,))), batch_size=16, shuffle=True)
model = nn.Linear(8, 2)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
counts = torch.zeros(2)
for _, yb in loader:
    counts += torch.bincount(yb, minlength=2)
criterion = nn.CrossEntropyLoss(weight=counts.sum() / (2 * counts)REDUCTION)
for epoch in range(2):
    for x, y in loader:
        loss = criterion(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
'''


def test_class_weights_computed_with_a_sum_make_no_summed_loss(tmp_path: Path) -> None:
    """A trial's class-weighted mean loss (weights from a pass over the loader: ``counts.sum() / (2 * counts)``)
    got "a summed loss divided by a fixed number: multiply by runtime.world_size()": following it would have
    scaled the gradients by N. The criterion's reduction decides, not what its weights are computed from."""
    text, report, _ = migrate_script(tmp_path, WEIGHTED.replace("REDUCTION", ""))
    # (the class-weighted mean is noted as a per-process mean, no summed loss to scale)
    assert "sums over the batch" not in report and "summed loss" not in text and "world_size()" not in text, report
    assert "weight=...) averages over this process's targets weighted by class" in report, report
    summed, report, _ = migrate_script(tmp_path, WEIGHTED.replace("REDUCTION", ', reduction="sum"'))
    assert "DDP039" in report and "runtime.world_size()" in summed, report


def test_a_summed_loss_of_a_lambda_criterion_is_still_scaled(tmp_path: Path) -> None:
    """The review of the class-weights change: ``loss_fn = lambda out, y: F.mse_loss(out, y, reduction="sum")``
    is called too, but its body is the loss: it is read (2 ranks trained W = 0.533 where the original had 0.285)."""
    source = WEIGHTED.replace("REDUCTION", "").replace(
        "loss = criterion(model(x), y)", 'loss_fn = lambda out, t: nn.functional.cross_entropy(out, t, reduction="sum")\n        loss = loss_fn(model(x), y)'
    )
    text, report, _ = migrate_script(tmp_path, source)
    assert "DDP039" in report and "runtime.world_size()" in text, report
