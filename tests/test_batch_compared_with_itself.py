"""DDP050: a loss that compares each sample with the other samples of its batch.

A trial's SimCLR program (NT-Xent over ``z @ z.t()``) migrated without a word: under torchrun each rank
compared its samples with 15 others instead of 31 (loss 1.86 against the original's 2.52, weights off by
6e-3 after 3 epochs). The comparison is found by data flow: both operands come from this process's batch.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from migrated import migrate_script

PROGRAM = '''
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset


def contrastive(a, b, t=0.5):
    LOSS


def main():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 8))
    head = nn.Linear(8, 8)
    x = torch.randn(128, 16)
    loader = DataLoader(TensorDataset(x + 0.1 * torch.randn(128, 16), x + 0.1 * torch.randn(128, 16)), batch_size=32)
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    for epoch in range(2):
        for v1, v2 in loader:
            loss = contrastive(model(v1), model(v2))
            opt.zero_grad()
            loss.backward()
            opt.step()


if __name__ == "__main__":
    main()
'''

COMPARED = {
    "nt-xent": """z = F.normalize(torch.cat([a, b]), dim=1)
    n = a.shape[0]
    sim = (z @ z.t() / t).fill_diagonal_(float("-inf"))
    return F.cross_entropy(sim, torch.cat([torch.arange(n, 2 * n), torch.arange(0, n)]))""",
    "clip": "logits = torch.mm(F.normalize(a, dim=1), F.normalize(b, dim=1).T) / t\n    return F.cross_entropy(logits, torch.arange(len(a)))",
    "hard-negatives": "d = torch.cdist(a, b)\n    return F.relu(d.diagonal() - d.min(dim=1).values + 1.0).mean()",
    # a review found the tensor's own methods missed
    "method-mm": "return F.cross_entropy(a.mm(b.t()) / t, torch.arange(len(a)))",
    "method-matmul": "return F.cross_entropy(a.matmul(b.T) / t, torch.arange(len(a)))",
    # a trial's SimCLR: a similarity broadcast by hand
    "broadcast-product": "return F.cross_entropy((a[:, None, :] * b[None, :, :]).sum(-1) / t, torch.arange(len(a)))",
    "broadcast-difference": "return F.cross_entropy(-(a.unsqueeze(1) - b.unsqueeze(0)).norm(dim=-1), torch.arange(len(a)))",
}

NOT_COMPARED = {
    "classifier": "return F.cross_entropy(a @ head_weight().t(), torch.zeros(len(a), dtype=torch.long))",
    "attention": "w = (a.unsqueeze(1) @ b.unsqueeze(1).transpose(-2, -1)).softmax(-1)\n    return (w * a.unsqueeze(1)).pow(2).mean()",
    "per-sample": "return (1 - F.cosine_similarity(a, b)).mean()",
    "broadcast-within-each-sample": "return (a[:, None, :] * b[:, None, :]).pow(2).mean()",
    "no-grad": "with torch.no_grad():\n        print((a @ b.t()).diagonal().mean())\n    return F.mse_loss(a, b)",
    # a review found these reviewed: metrics outside no_grad, and a comparison within each sample
    "detached-metric": "print((a.detach() @ b.detach().t()).diagonal().mean())\n    return F.mse_loss(a, b)",
    "argmax-metric": "print((torch.mm(a, b.t()).argmax(1) == torch.arange(len(a))).float().mean().item())\n    return F.mse_loss(a, b)",
    "within-each-sample": "loss = 0\n    for za, zb in zip(a, b):\n        loss = loss + (za.view(2, 4) @ zb.view(2, 4).t()).pow(2).mean()\n    return loss / len(a)",
}


@pytest.mark.parametrize("name", sorted(COMPARED))
def test_a_loss_comparing_the_batch_with_itself_is_reviewed(tmp_path: Path, name: str) -> None:
    migrated, report, _ = migrate_script(tmp_path, PROGRAM.replace("LOSS", COMPARED[name]))
    assert "DDP050" in report and "of this process's batch with each other" in report, report
    assert "review" in report


@pytest.mark.parametrize("name", sorted(NOT_COMPARED))
def test_products_within_a_sample_or_with_weights_are_fine(tmp_path: Path, name: str) -> None:
    source = PROGRAM.replace("LOSS", NOT_COMPARED[name]).replace(
        "def contrastive", "def head_weight():\n    return torch.eye(8)\n\n\ndef contrastive"
    )
    migrated, report, _ = migrate_script(tmp_path, source)
    assert "DDP050" not in report, report


def test_a_single_process_program_is_not_reported_by_lint(tmp_path: Path) -> None:
    """Without DDP nothing is split: the linter says nothing about the original program."""
    from click.testing import CliRunner

    from ddp_migrate.cli import cli

    (tmp_path / "train.py").write_text(PROGRAM.replace("LOSS", COMPARED["nt-xent"]))
    result = CliRunner().invoke(cli, ["lint", "--select", "DDP050", str(tmp_path / "train.py")])
    assert "DDP050" not in result.output, result.output


LOSS_MODULE = """
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset


class NTXentLoss(nn.Module):
    def __init__(self, temperature):
        super().__init__()
        self.temperature = temperature

    def forward(self, z_i, z_j):
        b = z_i.size(0)
        z = F.normalize(torch.cat([z_i, z_j], dim=0), dim=1)
        sim = torch.mm(z, z.t()) / self.temperature
        sim.fill_diagonal_(float("-inf"))
        labels = torch.cat([torch.arange(b, 2 * b), torch.arange(0, b)])
        return F.cross_entropy(sim, labels)


def main():
    device = "cuda" if torch.cuda.is_available() else "cpu"
    loader = DataLoader(TensorDataset(torch.randn(64, 8)), batch_size=16, shuffle=True)
    model = nn.Linear(8, 4).to(device)
    criterion = NTXentLoss(0.5)MOVED
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for (x,) in loader:
        x = x.to(device)
        loss = criterion(model(x + 0.1 * torch.randn_like(x)), model(x + 0.1 * torch.randn_like(x)))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


if __name__ == "__main__":
    main()
"""


@pytest.mark.parametrize("moved", ["", ".to(device)"], ids=["built", "built-and-moved"])
def test_in_batch_negatives_in_a_loss_modules_forward_are_reviewed(tmp_path: Path, moved: str) -> None:
    # A trial (SimCLR): ``criterion = NTXentLoss(t).to(device)`` then ``criterion(z1, z2)``: the ``.to()`` hid the
    # class whose ``forward`` the call runs, the batch did not flow into it, and the migration said nothing.
    _, report, _ = migrate_script(tmp_path, LOSS_MODULE.replace("MOVED", moved))
    assert "DDP050 `torch.mm(z, z.t())` multiplies the samples of this process's batch" in report, report
