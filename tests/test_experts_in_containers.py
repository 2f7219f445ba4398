"""Top-1 mixture-of-experts layers held in an ``nn.ModuleList`` (DDP011's find_unused_parameters).

A trial's router sent each sample to one expert, ``for e, expert in enumerate(self.experts): if mask.any(): ...
expert(x[mask])``: an expert no sample of a batch reached got no gradient, and the migrated program (wrapped
without ``find_unused_parameters=True``) failed at its second step ("Expected to have finished reduction in the
prior iteration"), 0 items for a human. The same with ``self.experts[e](...)`` and ``self.experts[0](...)``: a
call through a subscript was not seen as a call of the container, and one through ``enumerate`` not at all.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from launch import run_torchrun
from migrated import migrate_script

PROGRAM = """import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset


class MoE(nn.Module):
    def __init__(self):
        super().__init__()
        self.router = nn.Linear(8, 4)
        self.experts = nn.ModuleList([nn.Linear(8, 8) for _ in range(4)])
        self.head = nn.Linear(8, 3)

    def forward(self, x):
        gate, idx = self.router(x).softmax(-1).max(-1)
        out = torch.zeros_like(x)
        ROUTING
        return self.head(out)


def main():
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(64, 8), torch.randint(0, 3, (64,)))
    loader = DataLoader(data, batch_size=8, shuffle=False)
    model = MoE()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        for x, y in loader:
            opt.zero_grad()
            F.cross_entropy(model(x), y).backward()
            opt.step()


if __name__ == "__main__":
    main()
"""

ROUTINGS = {
    "enumerate": "for e, expert in enumerate(self.experts):\n            mask = idx == e\n            if mask.any():\n"
    "                out[mask] = gate[mask].unsqueeze(-1) * expert(x[mask])",
    "subscript": "for e in range(4):\n            mask = idx == e\n            if mask.any():\n"
    "                out[mask] = gate[mask].unsqueeze(-1) * self.experts[e](x[mask])",
}


@pytest.mark.parametrize("routing", sorted(ROUTINGS))
def test_an_expert_called_on_some_steps_only_makes_ddp_look_for_unused_parameters(tmp_path: Path, routing: str) -> None:
    migrated, report, _ = migrate_script(tmp_path, PROGRAM.replace("ROUTING", ROUTINGS[routing]))
    assert "find_unused_parameters=True" in migrated, migrated
    assert "only on some steps" in report


def test_experts_that_all_run_on_every_step_need_no_search(tmp_path: Path) -> None:
    every = "for e in range(4):\n            out = out + self.experts[e](x)"
    migrated, _, _ = migrate_script(tmp_path, PROGRAM.replace("ROUTING", every))
    assert "find_unused_parameters" not in migrated, migrated


@pytest.mark.distributed
def test_the_routed_experts_train_under_torchrun(tmp_path: Path) -> None:
    migrate_script(tmp_path, PROGRAM.replace("ROUTING", ROUTINGS["subscript"]))
    run_torchrun(tmp_path / "train.py", nproc_per_node=2, cwd=tmp_path, timeout=120)  # (before: a RuntimeError at step 2)
