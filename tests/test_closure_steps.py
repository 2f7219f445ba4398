"""A training step in a closure handed to the optimizer (LBFGS's ``optimizer.step(closure)``, pytorch/examples'
time_sequence_prediction, a trial): the closure runs once per iteration of the loop around the ``step``. With
no DataLoader, every process trained on the same tensor while the report said nothing (DDP040)."""

from __future__ import annotations

from pathlib import Path

from migrated import lint_findings

PROGRAM = """
import torch
import torch.nn as nn
import torch.optim as optim

if __name__ == "__main__":
    torch.manual_seed(0)
    data = torch.randn(8, 5, dtype=torch.double)
    seq = nn.Linear(4, 4).double()
    criterion = nn.MSELoss()
    optimizer = optim.LBFGS(seq.parameters(), lr=0.8)
    for i in range(3):
        def closure():
            optimizer.zero_grad()
            loss = criterion(seq(data[:, :-1]), data[:, 1:])
            loss.backward()
            return loss
        STEP
"""


def test_a_closure_the_optimizer_steps_in_a_loop_is_a_training_step(tmp_path: Path) -> None:
    findings = lint_findings(tmp_path, PROGRAM.replace("STEP", "optimizer.step(closure)"), "DDP040")
    assert any("DDP040 training batches here come from no DataLoader" in f for f in findings), findings


def test_a_closure_no_loop_steps_is_no_training_step(tmp_path: Path) -> None:
    source = PROGRAM.replace("    for i in range(3):\n        def closure", "    if True:\n        def closure").replace("STEP", "optimizer.step(closure)")
    findings = lint_findings(tmp_path, source, "DDP040")
    assert not any("DDP040" in f for f in findings), findings
