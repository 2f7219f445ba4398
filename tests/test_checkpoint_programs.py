"""Checkpoints, resumes and evaluations around the training loop (a trial of 33 programs).

- A callable object (``class Saver: def __call__(...)``, kept as ``self.saver``) is a call site like any
  function: its save under ``if dist.get_rank() == 0:`` became ``runtime.save``, whose barrier rank 0 alone
  reached (a hang), and a single-GPU program's saver kept the wrapper's ``module.`` keys.
- A rank-0 guard must not keep state changes from the other ranks: ``os.remove(kept.pop(0))`` of a
  keep-last-k loop (rank 1's list kept the removed file, then failed to load it), and a ``with open(log)``
  block that also counts patience (rank 0 alone stopped early: the other rank crashed in its next
  collective).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from migrated import migrate_script

CALLABLE_SAVER = '''
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


class Saver:
    def __call__(self, model, path):
        torch.save(model.module.state_dict(), path)


class Trainer:
    def __init__(self, model, loader):
        self.model, self.loader, self.saver = model, loader, Saver()
        self.opt = torch.optim.SGD(model.parameters(), lr=0.1)

    def fit(self, epochs):
        for epoch in range(epochs):
            self.loader.sampler.set_epoch(epoch)
            for xb, yb in self.loader:
                self.opt.zero_grad()
                nn.functional.mse_loss(self.model(xb), yb).backward()
                self.opt.step()
            if dist.get_rank() == 0:
                self.saver(self.model, "ckpt.pt")


dist.init_process_group("gloo")
torch.manual_seed(0)
ds = TensorDataset(torch.randn(64, 8), torch.randn(64, 1))
model = DDP(nn.Linear(8, 1))
Trainer(model, DataLoader(ds, batch_size=8, sampler=DistributedSampler(ds))).fit(3)
print("done", dist.get_rank())
dist.destroy_process_group()
'''


def test_a_save_in_a_callable_object_called_on_rank_0_stays_there(tmp_path: Path) -> None:
    migrated, report, code = migrate_script(tmp_path, CALLABLE_SAVER)
    assert "runtime.save" not in migrated, report
    assert migrated == CALLABLE_SAVER and code == 0, migrated


SINGLE_GPU_SAVER = '''
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


class Saver:
    def __call__(self, model, path):
        torch.save(model.state_dict(), path)


class Trainer:
    def __init__(self, model, opt, loader):
        self.model, self.opt, self.loader = model, opt, loader
        self.saver = Saver()

    def fit(self, epochs):
        for epoch in range(epochs):
            for xb, yb in self.loader:
                self.opt.zero_grad()
                nn.functional.mse_loss(self.model(xb), yb).backward()
                self.opt.step()
        self.saver(self.model, "last.pt")


torch.manual_seed(0)
x = torch.randn(64, 8)
model = nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
Trainer(model, opt, DataLoader(TensorDataset(x, x[:, :1].clone()), batch_size=16)).fit(2)
'''


def test_a_callable_objects_save_of_the_trained_model_keeps_its_keys(tmp_path: Path) -> None:
    migrated, report, _ = migrate_script(tmp_path, SINGLE_GPU_SAVER)
    assert "runtime.save(model.module.state_dict(), path)" in migrated, migrated


KEEP_LAST = '''
import os

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
x = torch.randn(64, 8)
loader = DataLoader(TensorDataset(x, x[:, :1].clone()), batch_size=16)
model = nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
kept = []
for epoch in range(4):
    for xb, yb in loader:
        opt.zero_grad()
        nn.functional.mse_loss(model(xb), yb).backward()
        opt.step()
    path = f"ckpt_{epoch}.pt"
    torch.save(model.state_dict(), path)
    kept.append(path)
    if len(kept) > 2:
        os.remove(kept.pop(0))
states = [torch.load(p) for p in kept]
model.load_state_dict({k: sum(s[k] for s in states) / len(states) for k in states[0]})
print("kept", kept, "checksum %.6f" % sum(p.sum().item() for p in model.parameters()))
'''


def test_a_removal_of_a_popped_path_pops_on_every_rank(tmp_path: Path) -> None:
    migrated, report, code = migrate_script(tmp_path, KEEP_LAST)
    assert code == 0, report
    assert "        popped = kept.pop(0)\n        if runtime.is_main_process():\n            os.remove(popped)\n" in migrated, migrated
    assert "every rank still takes kept.pop(0) first" in report, report


@pytest.mark.distributed
def test_the_kept_checkpoints_are_the_same_on_every_rank(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    from launch import run_python, run_torchrun

    original = tmp_path / "original"
    original.mkdir()
    (original / "train.py").write_text(KEEP_LAST)
    expected = run_python(original / "train.py", cwd=original, timeout=120).output
    migrate_script(tmp_path, KEEP_LAST)
    run = run_torchrun(tmp_path / "train.py", nproc_per_node=2, cwd=tmp_path, timeout=120)
    assert "kept ['ckpt_2.pt', 'ckpt_3.pt']" in run.output, run.output
    assert expected.strip().splitlines()[-1] in run.output, (expected, run.output)


PATIENCE_IN_THE_LOG = '''
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
x = torch.randn(64, 8)
loader = DataLoader(TensorDataset(x, x[:, :1].clone()), batch_size=16)
model = nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
best, bad = float("inf"), 0
for epoch in range(10):
    for xb, yb in loader:
        opt.zero_grad()
        nn.functional.mse_loss(model(xb), yb).backward()
        opt.step()
    with torch.no_grad():
        vloss = nn.functional.mse_loss(model(x), x[:, :1]).item()
    with open("log.txt", "a") as f:
        f.write(f"{epoch} {vloss:.6f}\\n")
        if vloss < best - 1e-2:
            best, bad = vloss, 0
        else:
            bad += 1
    if bad >= 2:
        break
'''


def test_a_log_block_that_also_counts_patience_is_left_to_a_human(tmp_path: Path) -> None:
    migrated, report, code = migrate_script(tmp_path, PATIENCE_IN_THE_LOG)
    assert code == 1, report
    assert "the block also sets values every rank needs (bad, best): move them out of it first" in migrated, migrated
    assert '    with open("log.txt", "a") as f:\n' in migrated and "is_main_process" not in migrated, migrated


def test_a_log_block_that_only_writes_is_guarded(tmp_path: Path) -> None:
    source = PATIENCE_IN_THE_LOG.replace(
        "        if vloss < best - 1e-2:\n            best, bad = vloss, 0\n        else:\n            bad += 1\n",
        "        for line in [str(best)]:\n            f.write(line)\n",
    )
    migrated, report, _ = migrate_script(tmp_path, source)
    assert '    if runtime.is_main_process():\n        with open("log.txt", "a") as f:\n' in migrated, migrated
