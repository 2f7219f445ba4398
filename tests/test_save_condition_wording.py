"""What DDP007 says of the test that keeps some ranks from a save: a per-rank value, or one the analysis cannot follow.

Trials read "`self.global_step % self.args.save_steps == 0` may differ between ranks" on a Trainer whose step
counter moves alike on every rank, and "`epoch % self.save_period == 0` may differ" on PyTorch-Template: the advice
(save on rank 0) was right, the cause it named was not. A test of a per-rank value (a loss of this process's
share) still "may differ"; one the analysis cannot follow says so.
"""

from __future__ import annotations

from pathlib import Path

from migrated import lint_findings

TRAINER = """import torch
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler


class Trainer:
    def __init__(self, model, data, opt, args):
        self.model = DDP(model)
        self.loader = DataLoader(data, batch_size=8, sampler=DistributedSampler(data))
        self.opt, self.args = opt, args
        self.global_step = 0
        self.best = float("inf")

    def train(self):
        for x, y in self.loader:
            loss = (self.model(x) - y).pow(2).mean()
            loss.backward()
            self.opt.step()
            self.global_step += 1
            if TEST:
                torch.save(self.model.module.state_dict(), "ck.pt")
"""


def test_a_test_the_analysis_cannot_follow_is_said_so(tmp_path: Path) -> None:
    lines = lint_findings(tmp_path, TRAINER.replace("TEST", "self.global_step % self.args.save_steps == 0"), "DDP007")
    assert len(lines) == 1 and "the analysis cannot tell whether `self.global_step % self.args.save_steps == 0` is the same on every rank" in lines[0], lines


def test_a_test_of_this_process_s_loss_may_differ(tmp_path: Path) -> None:
    lines = lint_findings(tmp_path, TRAINER.replace("TEST", "loss.item() < self.best"), "DDP007")
    assert len(lines) == 1 and "`loss.item() < self.best` may differ between ranks" in lines[0], lines
