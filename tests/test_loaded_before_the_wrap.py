"""The DDP tutorial's Trainer (``multigpu_torchrun.py``): ``__init__`` moves the model to its GPU, loads a snapshot
through ``self._load_snapshot(path)`` when there is one, and only then wraps ``self.model = DDP(self.model)``. The
snapshot's ``self.model.load_state_dict(...)`` runs on the model itself; a lint called it a load into the wrapper
(DDP008) and its fix, ``self.model.module.load_state_dict``, failed on every resume."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from ddp_migrate.cli import cli

PROGRAM = """
import os

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


class Trainer:
    def __init__(self, model, train_data, optimizer, snapshot_path):
        self.gpu_id = int(os.environ["LOCAL_RANK"])
        self.model = model.to(self.gpu_id)
        self.train_data = train_data
        self.optimizer = optimizer
        self.epochs_run = 0
        self.snapshot_path = snapshot_path
        if os.path.exists(snapshot_path):
            self._load_snapshot(snapshot_path)
        WRAP

    def _load_snapshot(self, snapshot_path):
        snapshot = torch.load(snapshot_path, map_location=f"cuda:{self.gpu_id}")
        self.model.load_state_dict(snapshot["MODEL_STATE"])
        self.epochs_run = snapshot["EPOCHS_RUN"]

    def _run_batch(self, source, targets):
        self.optimizer.zero_grad()
        loss = F.cross_entropy(self.model(source), targets)
        loss.backward()
        self.optimizer.step()

    def train(self, max_epochs):
        for epoch in range(self.epochs_run, max_epochs):
            self.train_data.sampler.set_epoch(epoch)
            for source, targets in self.train_data:
                self._run_batch(source.to(self.gpu_id), targets.to(self.gpu_id))
            if self.gpu_id == 0:
                snapshot = {"MODEL_STATE": self.model.module.state_dict(), "EPOCHS_RUN": epoch}
                torch.save(snapshot, self.snapshot_path)


def main():
    dist.init_process_group("nccl")
    data = TensorDataset(torch.randn(64, 4), torch.randint(0, 2, (64,)))
    model = torch.nn.Linear(4, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(data, batch_size=8, sampler=DistributedSampler(data))
    Trainer(model, loader, optimizer, "snapshot.pt").train(3)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
"""

WRAP = "self.model = DDP(self.model, device_ids=[self.gpu_id])"


def _lint(tmp_path: Path, source: str) -> str:
    path = tmp_path / "multigpu_torchrun.py"
    path.write_text(source)
    return CliRunner().invoke(cli, ["lint", "--select", "DDP008", str(path)]).output


def test_a_load_the_constructor_runs_before_its_wrap_is_into_the_model_itself(tmp_path: Path) -> None:
    assert "Found 0 problem" in _lint(tmp_path, PROGRAM.replace("WRAP", WRAP))


def test_a_load_the_constructor_runs_after_its_wrap_is_into_the_wrapper(tmp_path: Path) -> None:
    source = PROGRAM.replace("        if os.path.exists(snapshot_path):\n            self._load_snapshot(snapshot_path)\n        WRAP", f"        {WRAP}\n        if os.path.exists(snapshot_path):\n            self._load_snapshot(snapshot_path)")
    assert source != PROGRAM
    assert "DDP008 load_state_dict on the DDP wrapper" in _lint(tmp_path, source)


@pytest.mark.parametrize("resumed", ["trainer.resume()", "trainer._load_snapshot(path)", "built_elsewhere()._load_snapshot(path)"])
def test_a_load_another_method_may_run_after_the_wrap_is_into_the_wrapper(tmp_path: Path, resumed: str) -> None:
    source = PROGRAM.replace("WRAP", WRAP).replace(
        '    Trainer(model, loader, optimizer, "snapshot.pt").train(3)',
        f'    trainer = Trainer(model, loader, optimizer, "snapshot.pt")\n    path = "snapshot.pt"\n    {resumed}\n    trainer.train(3)',
    )
    if "resume" in resumed:
        source = source.replace("    def _run_batch(", "    def resume(self):\n        self._load_snapshot(self.snapshot_path)\n\n    def _run_batch(")
    assert "DDP008 load_state_dict on the DDP wrapper" in _lint(tmp_path, source)
