"""In-batch hard-example mining without gradients (DDP050).

Metric-learning code mines the hardest positive and negative of each sample under ``torch.no_grad()`` (or on
detached embeddings) and then trains a triplet loss on the samples it picked. Under DDP each rank mines among
its own share of the batch; the comparison was skipped as gradient-free and the migration said nothing needed
a human (checksums 3.783 alone, 3.694 on 2 processes).
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

MINER


def main():
    data = TensorDataset(torch.randn(256, 8), torch.arange(256) % 8)
    loader = DataLoader(data, batch_size=32, shuffle=True)
    model = nn.Linear(8, 4)
    triplet = nn.TripletMarginLoss(margin=0.2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(3):
        for x, y in loader:
            emb = F.normalize(model(x), dim=1)
            STEP
            opt.zero_grad()
            loss.backward()
            opt.step()


if __name__ == "__main__":
    main()
"""
DECORATED = '''@torch.no_grad()
def mine_hard(emb, labels):
    d = torch.cdist(emb, emb)
    same = labels[:, None] == labels[None, :]
    pos = d.masked_fill(~same, -1.0).argmax(1)
    neg = d.masked_fill(same, float("inf")).argmin(1)
    return pos, neg'''
MINED_STEP = """pos, neg = mine_hard(emb, y)
            loss = triplet(emb, emb[pos], emb[neg])"""
INLINE_STEP = """with torch.no_grad():
                d = emb @ emb.t()
                hardest = d.fill_diagonal_(-2.0).argmax(1)
            positive = emb[hardest]
            loss = triplet(emb, positive, emb.roll(1, 0))"""
DETACHED_STEP = """hardest = torch.cdist(emb.detach(), emb.detach()).argmax(1)
            loss = triplet(emb, emb[hardest], emb.roll(1, 0))"""
LOGGED_STEP = """loss = triplet(emb, emb.roll(1, 0), emb.roll(2, 0))
            with torch.no_grad():
                nearest = (emb @ emb.t()).fill_diagonal_(-2.0).argmax(1)
            recall = (y[nearest] == y).float().mean()"""


def _migrate(tmp_path: Path, miner: str, step: str) -> str:
    script = tmp_path / "train.py"
    script.write_text(PROGRAM.replace("MINER", miner).replace("STEP", step))
    result = CliRunner().invoke(cli, [str(script)])
    assert result.exit_code in (0, 1), result.output
    return result.output


@pytest.mark.parametrize(
    ("miner", "step", "compared"),
    [
        (DECORATED, MINED_STEP, "torch.cdist(emb, emb)"),
        ("", INLINE_STEP, "emb @ emb.t()"),
        ("", DETACHED_STEP, "torch.cdist(emb.detach(), emb.detach())"),
    ],
    ids=["helper-under-no-grad", "inline-no-grad-block", "detached"],
)
def test_mining_that_picks_the_training_samples_is_reviewed(tmp_path: Path, miner: str, step: str, compared: str) -> None:
    report = _migrate(tmp_path, miner, step)
    assert f"DDP050 `{compared}`" in report and "(in-batch mining)" in report, report
    assert "1 item(s) need a human" in report


def test_a_retrieval_measure_logged_beside_the_training_is_no_mining(tmp_path: Path) -> None:
    report = _migrate(tmp_path, "", LOGGED_STEP)
    assert "DDP050" not in report and "0 item(s) need a human" in report
