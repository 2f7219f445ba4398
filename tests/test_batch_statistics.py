"""DDP050 on a loss that depends on the batch as a whole, where the analysis follows the model's own ``forward()``.

A trial's programs migrated without a word: a two-tower recommender whose ``forward()`` scores every user
against every item of the batch (in-batch negatives), and a mixture of experts whose load-balancing term squares
the batch's mean gate usage (``(g.mean(0) ** 2).sum()``). Under DDP each rank holds 1/N of the batch, so both
compute something else than the original did. A call of the model now runs its ``forward()`` for the data flow
(its inputs are the step's batch), and a statistic over axis 0 used non-linearly on its way to a loss term is
reviewed; the loss-scale rule (DDP039) no longer calls the sum over experts a sum over the batch.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from migrated import lint_findings, migrate_script

PROGRAM = '''
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset


class Net(nn.Module):
    def __init__(self, n_experts=4):
        super().__init__()
        self.gate = nn.Linear(8, n_experts)
        self.body = nn.Linear(8, 16)
        self.head = nn.Linear(16, 1)
        self.n_experts = n_experts

    def forward(self, x):
FORWARD


def main():
    torch.manual_seed(0)
    loader = DataLoader(TensorDataset(torch.randn(256, 8), torch.randn(256, 1)), batch_size=32, shuffle=True)
    model = Net()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    for epoch in range(2):
        for x, y in loader:
STEP
            opt.zero_grad()
            loss.backward()
            opt.step()
    torch.save(model.state_dict(), "model.pt")


if __name__ == "__main__":
    main()
'''

PLAIN_STEP = "            loss = F.mse_loss(model(x), y)"
AUX_STEP = "            out, aux = model(x)\n            loss = F.mse_loss(out, y) + 0.01 * aux"


def program(forward: str, step: str = AUX_STEP) -> str:
    """The program with this body of ``Net.forward`` (indented by 8) and this training step (indented by 12)."""
    return PROGRAM.replace("FORWARD", forward).replace("STEP", step)


#: Forward bodies (returning an output and an auxiliary loss) whose loss depends on the batch as a whole.
REVIEWED = {
    "balance-through-a-name": """        g = F.softmax(self.gate(x), dim=1)
        usage = g.mean(0)
        return self.head(self.body(x)), self.n_experts * (usage ** 2).sum()""",
    "variance-term": """        z = self.body(x)
        std = torch.sqrt(z.var(dim=0) + 1e-4)
        return self.head(z), torch.mean(F.relu(1 - std))""",
    "centred-square": """        z = self.body(x)
        return self.head(z), (z - z.mean(0)).pow(2).mean()""",
    "mean-into-a-loss": """        g = F.softmax(self.gate(x), dim=1)
        return self.head(self.body(x)), F.mse_loss(g.mean(0), torch.full((self.n_experts,), 1 / self.n_experts))""",
    "in-batch-negatives": """        u, i = F.normalize(self.body(x), dim=1), F.normalize(self.body(-x), dim=1)
        return self.head(self.body(x)), F.cross_entropy(u @ i.t() / 0.1, torch.arange(len(x)))""",
}

#: Forward bodies whose batch statistics reach the loss linearly, or not as a loss term at all.
NOT_REVIEWED = {
    "mean-of-losses": """        z = self.body(x)
        return self.head(z), z.pow(2).mean(0).sum()""",
    "pooled-into-the-head": """        z = self.body(x)
        return self.head(F.relu(z)), self.head(z.mean(0)).sum() * 0.0""",
    "detached-statistic": """        z = self.body(x)
        return self.head(z), (z.detach().mean(0) ** 2).sum()""",
    "per-sample-norm": """        z = self.body(x)
        return self.head(z), (z ** 2).sum(1).mean()""",
}


@pytest.mark.parametrize("forward", REVIEWED.values(), ids=REVIEWED.keys())
def test_a_loss_on_the_batch_as_a_whole_in_forward_is_reviewed(tmp_path: Path, forward: str) -> None:
    migrated, report, code = migrate_script(tmp_path, program(forward))
    assert code == 1, report  # (a review item is left)
    assert "DDP050" in report and "1 item(s) need a human" in report, report
    assert "DDP039" not in report


@pytest.mark.parametrize("forward", NOT_REVIEWED.values(), ids=NOT_REVIEWED.keys())
def test_a_linear_or_no_loss_use_of_a_batch_statistic_is_fine(tmp_path: Path, forward: str) -> None:
    migrated, report, code = migrate_script(tmp_path, program(forward))
    assert code == 0, report
    assert "DDP050" not in report, report


def test_a_balance_term_in_the_training_step_is_reviewed_and_is_no_batch_sum(tmp_path: Path) -> None:
    forward = "        return self.head(self.body(x)), F.softmax(self.gate(x), dim=1)"
    step = "            out, g = model(x)\n            loss = F.mse_loss(out, y) + 0.01 * (g.mean(0) ** 2).sum()"
    migrated, report, code = migrate_script(tmp_path, program(forward, step))
    assert "DDP050" in report and "`g.mean(0)` is a statistic of this process's batch" in report, report
    assert "DDP039" not in report


def test_a_sequence_first_pooling_feeding_the_output_is_fine(tmp_path: Path) -> None:
    # ``h.mean(0)`` of a sequence-first tensor pools over positions: its value is the model's output, no loss term.
    forward = "        h = torch.stack([self.body(x), self.body(-x)])\n        return F.relu(self.head(h.mean(0))), 0.0"
    migrated, report, _ = migrate_script(tmp_path, program(forward))
    assert "DDP050" not in report, report


def test_lint_on_the_single_process_program_reports_nothing(tmp_path: Path) -> None:
    assert lint_findings(tmp_path, program(REVIEWED["balance-through-a-name"]), "DDP050") == []


def test_a_model_converted_for_batchnorm_still_runs_its_forward(tmp_path: Path) -> None:
    """The migration converts a model with BatchNorm (``model = runtime.convert_sync_batchnorm(model)``) before the
    wrap: the model's calls still run its ``forward()``."""
    source = program(REVIEWED["balance-through-a-name"]).replace("self.body = nn.Linear(8, 16)", "self.body = nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16))")
    migrated, report, _ = migrate_script(tmp_path, source)
    assert "runtime.convert_sync_batchnorm(model)" in migrated
    assert "DDP050" in report and "`g.mean(0)` is a statistic" in report, report
