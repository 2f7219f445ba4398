"""The wrapped model's forward on rank 0 alone: DDP's forward broadcasts the buffers (BatchNorm statistics)
from rank 0 and waits for every rank, so ``if is_main_process(): evaluate(model, loader)`` hung after the
migration (a trial; without the final barrier, rank 0 died of "Connection closed by peer"). The migration
hands such code the model itself (``evaluate(model.module, loader)``), and the run finishes.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from migrated import migrate_script

SCRIPT = '''
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def is_main_process():
    return not dist.is_initialized() or dist.get_rank() == 0


@torch.no_grad()
def evaluate(model, loader):
    model.eval()
    correct = total = 0
    for x, y in loader:
        correct += (model(x).argmax(1) == y).sum().item()
        total += len(y)
    model.train()
    return correct / total


def main():
    torch.manual_seed(0)
    x = torch.randn(128, 4)
    y = (x[:, 0] > 0).long()
    train_loader = DataLoader(TensorDataset(x[:96], y[:96]), batch_size=16)
    val_loader = DataLoader(TensorDataset(x[96:], y[96:]), batch_size=16)
    model = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        for xb, yb in train_loader:
            opt.zero_grad()
            F.cross_entropy(model(xb), yb).backward()
            opt.step()
        if is_main_process():
            print(f"epoch {epoch} accuracy {evaluate(model, val_loader):.3f}")
    torch.save(model.state_dict(), "final.pt")


if __name__ == "__main__":
    main()
'''


def test_rank_0_evaluation_gets_the_model_itself(tmp_path: Path) -> None:
    text, report, code = migrate_script(tmp_path, SCRIPT)
    assert code == 0, report
    assert "evaluate(model.module, val_loader)" in text, text
    assert "run where only some ranks run" in report


@pytest.mark.distributed
def test_the_migrated_rank_0_evaluation_finishes_under_torchrun(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    from launch import run_torchrun

    migrate_script(tmp_path, SCRIPT)
    launch = run_torchrun(tmp_path / "train.py", nproc_per_node=2, cwd=tmp_path, timeout=90)
    assert launch.output.count("epoch 1 accuracy") == 1, launch.output
    assert (tmp_path / "final.pt").exists()


TRAINER = '''
import torch
import torch.distributed as dist
import torch.nn.functional as F


def is_main_process():
    return not dist.is_initialized() or dist.get_rank() == 0


class Trainer:
    def __init__(self, model, opt, train_loader, val_loader):
        self.model, self.opt = model, opt
        self.train_loader, self.val_loader = train_loader, val_loader

    @torch.no_grad()
    def evaluate(self):
        self.model.eval()
        correct = sum((self.model(x).argmax(1) == y).sum().item() for x, y in self.val_loader)
        self.model.train()
        return correct / len(self.val_loader.dataset)

    def fit(self, epochs):
        for epoch in range(epochs):
            for xb, yb in self.train_loader:
                loss = F.cross_entropy(self.model(xb), yb)
                self.opt.zero_grad()
                loss.backward()
                self.opt.step()
            if is_main_process():
                print(f"epoch {epoch} acc {self.evaluate():.3f}", flush=True)
'''

TRAINER_MAIN = '''
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from trainer import Trainer


def main():
    torch.manual_seed(0)
    x, y = torch.randn(32, 4), torch.randint(0, 2, (32,))
    model = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    train_loader = DataLoader(TensorDataset(x, y), batch_size=8)
    val_loader = DataLoader(TensorDataset(x, y), batch_size=16)
    Trainer(model, opt, train_loader, val_loader).fit(3)


if __name__ == "__main__":
    main()
'''


@pytest.mark.distributed
def test_a_trainer_method_that_evaluates_on_rank_0_runs_the_model_itself(tmp_path: Path) -> None:
    """``if is_main_process(): print(self.evaluate())`` with ``self.model(x)`` inside the method: a trial's
    rank 0 broadcast the BatchNorm buffers alone and died ("Connection closed by peer"), report silent."""
    pytest.importorskip("torch")
    import subprocess
    import sys

    from launch import run_torchrun

    (tmp_path / "trainer.py").write_text(TRAINER)
    (tmp_path / "train.py").write_text(TRAINER_MAIN)
    done = subprocess.run([sys.executable, "-m", "ddp_migrate", "train.py"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "(self.model.module(x).argmax(1) == y)" in (tmp_path / "trainer.py").read_text()
    launch = run_torchrun(tmp_path / "train.py", nproc_per_node=2, cwd=tmp_path, timeout=90)
    assert launch.output.count("epoch 2 acc") == 1, launch.output


def test_a_method_that_also_trains_on_every_rank_keeps_the_wrapper(tmp_path: Path) -> None:
    """``compute_loss`` runs the model in every training step and once more under ``is_main_process()``: a
    review found the method itself rewritten to ``self.model.module(x)``, so the training bypassed DDP (the
    ranks' weights drifted apart). The method keeps the wrapper where any call of it runs on every rank."""
    import subprocess
    import sys

    trainer = TRAINER.replace(
        "    @torch.no_grad()\n    def evaluate(self):",
        "    def compute_loss(self, x, y):\n        return F.cross_entropy(self.model(x), y)\n\n    @torch.no_grad()\n    def evaluate(self):",
    ).replace("loss = F.cross_entropy(self.model(xb), yb)", "loss = self.compute_loss(xb, yb)").replace(
        'print(f"epoch {epoch} acc {self.evaluate():.3f}", flush=True)',
        'print(f"epoch {epoch} acc {self.evaluate():.3f}", flush=True)\n                with torch.no_grad():\n                    print(self.compute_loss(xb, yb).item())',
    )
    assert "self.compute_loss(xb, yb).item()" in trainer
    (tmp_path / "trainer.py").write_text(trainer)
    (tmp_path / "train.py").write_text(TRAINER_MAIN)
    done = subprocess.run([sys.executable, "-m", "ddp_migrate", "train.py"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode in (0, 1), done.stdout + done.stderr
    text = (tmp_path / "trainer.py").read_text()
    assert "return F.cross_entropy(self.model(x), y)" in text, text
