"""A drop-path mask drawn in the model's forward (timm's ``x.new_empty(B, 1).bernoulli_(keep)``) (DDP051's note).

A trial's stochastic-depth block drew a per-sample mask in ``forward()``: every rank seeded torch alike, so each
rank's k-th sample got the same mask (2 processes 31.4733 where the original gave 31.5326), and nothing was said,
where ``nn.Dropout`` in the same place got the note. The mask is now noted as the dropout it is.
"""

from __future__ import annotations

from pathlib import Path

from migrated import migrate_script

PROGRAM = """import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, h):
        if self.training:
            keep = h.new_empty(h.shape[0], 1).bernoulli_(0.8) / 0.8
            return h + keep * self.fc(h)
        return h + self.fc(h)


def main():
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(64, 8), torch.randint(0, 2, (64,)))
    loader = DataLoader(data, batch_size=16, shuffle=True)
    model = nn.Sequential(Block(), nn.Linear(8, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        for x, y in loader:
            opt.zero_grad()
            F.cross_entropy(model(x), y).backward()
            opt.step()


if __name__ == "__main__":
    main()
"""


def test_a_drop_path_mask_drawn_in_forward_gets_the_dropout_note(tmp_path: Path) -> None:
    _, report, code = migrate_script(tmp_path, PROGRAM)
    assert code == 0, report
    assert "note DDP051 line" in report and "h.new_empty(h.shape[0], 1).bernoulli_(0.8)` draws its masks" in report, report
