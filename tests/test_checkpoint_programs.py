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


EMA_OF_DATA_PARALLEL = '''
import copy
import os

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
x = torch.randn(32, 4)
loader = DataLoader(TensorDataset(x, x.sum(1, keepdim=True)), batch_size=8)
model = nn.DataParallel(nn.Linear(4, 1))
ema = copy.deepcopy(model)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
if os.path.exists("ckpt.pt"):
    ckpt = torch.load("ckpt.pt")
    model.load_state_dict(ckpt["model"])
    ema.load_state_dict(ckpt["ema"])
for epoch in range(2):
    for xb, yb in loader:
        opt.zero_grad()
        nn.functional.mse_loss(model(xb), yb).backward()
        opt.step()
        with torch.no_grad():
            for e, p in zip(ema.parameters(), model.parameters()):
                e.mul_(0.9).add_(0.1 * p)
torch.save({"model": model.state_dict(), "ema": ema.state_dict()}, "ckpt.pt")
print("ema keys", sorted(torch.load("ckpt.pt")["ema"]))
'''


def test_an_ema_copied_from_a_data_parallel_model_keeps_its_checkpoint_keys(tmp_path: Path) -> None:
    migrated, report, code = migrate_script(tmp_path, EMA_OF_DATA_PARALLEL)
    assert code == 0, report
    assert "ema = copy.deepcopy(model.module)" in migrated, migrated
    assert '"ema": runtime.unwrap(ema).state_dict(prefix="module.")' in migrated, migrated
    assert 'ema.load_state_dict({k.removeprefix("module."): v for k, v in ckpt["ema"].items()})' in migrated, migrated


@pytest.mark.distributed
def test_the_migrated_ema_resumes_from_the_originals_checkpoint(tmp_path: Path) -> None:
    """The original writes ``ckpt.pt`` (``module.`` keys for both models); the migrated program resumes from it
    under torchrun and writes the same keys (the copy's load had failed: missing keys "weight", "bias")."""
    pytest.importorskip("torch")
    from launch import run_python, run_torchrun

    (tmp_path / "original.py").write_text(EMA_OF_DATA_PARALLEL)
    run_python(tmp_path / "original.py", cwd=tmp_path, timeout=120)
    migrate_script(tmp_path, EMA_OF_DATA_PARALLEL)
    run = run_torchrun(tmp_path / "train.py", nproc_per_node=2, cwd=tmp_path, timeout=120)
    assert "ema keys ['module.bias', 'module.weight']" in run.output, run.output


MODEL_IN_A_DICT = '''
import copy
import os

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
x = torch.randn(32, 4)
loader = DataLoader(TensorDataset(x, x.sum(1, keepdim=True)), batch_size=8)
net = nn.Linear(4, 1)
ema = copy.deepcopy(net)
state = {"model": nn.DataParallel(net), "ema": ema}
opt = torch.optim.SGD(state["model"].parameters(), lr=0.1)
if os.path.exists("ckpt.pt"):
    ckpt = torch.load("ckpt.pt")
    state["model"].load_state_dict(ckpt["model"])
    state["ema"].load_state_dict(ckpt["ema"])
for epoch in range(2):
    for xb, yb in loader:
        opt.zero_grad()
        nn.functional.mse_loss(state["model"](xb), yb).backward()
        opt.step()
torch.save({"model": state["model"].state_dict(), "ema": state["ema"].state_dict()}, "ckpt.pt")
saved = torch.load("ckpt.pt")
print("keys", sorted(saved["model"]), sorted(saved["ema"]))
'''


def test_a_wrapped_model_held_in_a_dict_keeps_its_keys_and_loads_through_unwrap(tmp_path: Path) -> None:
    """``state["model"]`` holds the DataParallel model: its save keeps the ``module.`` keys (as a name's does)
    and its load reaches the model through ``runtime.unwrap``, accepting both formats (a trial's migration
    unwrapped the save alone and left the load on the DDP wrapper: missing keys "module.weight" at once);
    ``state["ema"]``, a plain model beside it, is left as it was."""
    migrated, report, code = migrate_script(tmp_path, MODEL_IN_A_DICT)
    assert code == 0, report
    flat = " ".join(migrated.split()).replace("( ", "(").replace(" )", ")")  # (long lines are wrapped)
    assert '"model": runtime.unwrap(state["model"]).state_dict(prefix="module.")' in flat, migrated
    assert 'runtime.unwrap(state["model"]).load_state_dict({k.removeprefix("module."): v for k, v in ckpt["model"].items()})' in flat, migrated
    assert 'state["ema"].load_state_dict(ckpt["ema"])' in flat and '"ema": state["ema"].state_dict()' in flat, migrated


@pytest.mark.parametrize("holder", ['state["model"]', "model"])
def test_a_holder_given_the_plain_model_back_before_the_save_keeps_plain_keys(tmp_path: Path, holder: str) -> None:
    """``state["model"] = net`` after the training: the original saved the plain model's keys, and so does the
    migrated program (a review's migration kept ``module.`` there)."""
    source = (
        "import torch\nimport torch.nn as nn\n\nnet = nn.Linear(4, 1)\nHOLDER = nn.DataParallel(net)\n"
        "opt = torch.optim.SGD(HOLDER.parameters(), lr=0.1)\nfor _ in range(2):\n    opt.zero_grad()\n"
        "    HOLDER(torch.randn(8, 4)).sum().backward()\n    opt.step()\nHOLDER = net\n"
        'torch.save(HOLDER.state_dict(), "final.pt")\n'
    ).replace("HOLDER", holder)
    if holder != "model":
        source = source.replace("net = nn.Linear(4, 1)\n", "net = nn.Linear(4, 1)\nstate = {}\n")
    migrated, report, _ = migrate_script(tmp_path, source)
    assert 'prefix="module."' not in migrated, migrated
    # (``model = net`` in effect at the save: the name holds the plain model, which needs no unwrapping)
    assert f"runtime.unwrap({holder}).state_dict()" in migrated or f"runtime.save({holder}.state_dict()" in migrated, migrated


@pytest.mark.distributed
def test_the_migrated_model_in_a_dict_resumes_from_the_originals_checkpoint(tmp_path: Path) -> None:
    """The original writes ``ckpt.pt`` (``module.`` keys for the wrapped model); the migrated program runs as
    plain python, then resumes from it under torchrun and writes the same keys."""
    pytest.importorskip("torch")
    from launch import run_python, run_torchrun

    (tmp_path / "original.py").write_text(MODEL_IN_A_DICT)
    run_python(tmp_path / "original.py", cwd=tmp_path, timeout=120)
    migrate_script(tmp_path, MODEL_IN_A_DICT)
    expected = "keys ['module.bias', 'module.weight'] ['bias', 'weight']"
    alone = run_python(tmp_path / "train.py", cwd=tmp_path, timeout=120)
    assert expected in alone.output, alone.output
    run = run_torchrun(tmp_path / "train.py", nproc_per_node=2, cwd=tmp_path, timeout=120)
    assert expected in run.output, run.output


EXPORTS = '''
import io

import torch
import torch.nn as nn

model = nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x = torch.randn(8, 4)
loss = model(x).sum()
loss.backward()
opt.step()
traced = torch.jit.trace(model, x[:2])
traced.save("traced.pt")
torch.jit.save(traced, "traced_again.pt")
torch.jit.script(model).save("scripted.pt")
buffer = io.BytesIO()
torch.jit.save(traced, buffer)
'''


def test_torchscript_saves_are_written_on_rank_0(tmp_path: Path) -> None:
    """``traced.save(path)``, ``torch.jit.save(m, path)`` and ``torch.jit.script(m).save(path)``: every rank
    wrote the same file at once."""
    migrated, report, _ = migrate_script(tmp_path, EXPORTS)
    for line in ('traced.save("traced.pt")', 'torch.jit.save(traced, "traced_again.pt")', 'torch.jit.script(model.module).save("scripted.pt")'):
        assert f"if runtime.is_main_process():\n    {line}\n" in migrated, (line, migrated)
    assert "\ntorch.jit.save(traced, buffer)\n" in migrated, migrated  # (into memory: no file)


RNG_THROUGH_A_HELPER = '''
import os

import torch
import torch.nn as nn


def restore_rng(state):
    torch.set_rng_state(state["torch"])


model = nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
if os.path.exists("last.pt"):
    ckpt = torch.load("last.pt")
    model.load_state_dict(ckpt["model"])
    restore_rng(ckpt["rng"])
model(torch.randn(4, 8)).sum().backward()
opt.step()
torch.save({"model": model.state_dict(), "rng": {"torch": torch.get_rng_state()}}, "last.pt")
'''


def test_a_random_state_restored_through_a_helper_is_loaded_on_the_cpu(tmp_path: Path) -> None:
    """``restore_rng(ckpt["rng"])`` hands the loaded state to ``torch.set_rng_state`` in a helper: mapped onto
    the GPU, the resume failed there with "RNG state must be a torch.ByteTensor" (a trial on an H100)."""
    migrated, report, _ = migrate_script(tmp_path, RNG_THROUGH_A_HELPER)
    assert 'ckpt = torch.load("last.pt", map_location="cpu")' in migrated, migrated


def test_a_device_chosen_between_the_wrap_and_the_move_comes_first(tmp_path: Path) -> None:
    """``if n_gpu > 1: model = DP(model)``, then ``device = ...`` and ``model.to(device)``: the move was put above
    the wrap, before ``device`` existed (NameError as plain python); now the wrap follows the move."""
    source = (
        "import torch\nimport torch.nn as nn\n\nmodel = nn.Linear(4, 1)\nif torch.cuda.device_count() > 1:\n"
        "    model = nn.DataParallel(model)\ndevice = 'cuda' if torch.cuda.is_available() else 'cpu'\nmodel.to(device)\n"
        "opt = torch.optim.SGD(model.parameters(), lr=0.1)\nmodel(torch.ones(2, 4)).sum().backward()\nopt.step()\n"
    )
    migrated, report, code = migrate_script(tmp_path, source)
    assert code == 0, report
    assert "device = 'cuda' if torch.cuda.is_available() else 'cpu'\nmodel.to(device)\nmodel = DistributedDataParallel(" in migrated, migrated


def test_two_values_taken_for_one_write_get_two_names(tmp_path: Path) -> None:
    source = KEEP_LAST.replace("import os\n", "import os\nimport shutil\n").replace(
        "kept = []\n", "kept = []\narchive = ['a0', 'a1', 'a2', 'a3', 'a4']\n"
    ).replace("        os.remove(kept.pop(0))\n", "        shutil.move(kept.pop(0), archive.pop(0))\n")
    migrated, report, _ = migrate_script(tmp_path, source)
    assert "popped = kept.pop(0)\n        taken = archive.pop(0)\n" in migrated, migrated
    assert "shutil.move(popped, taken)" in migrated, migrated


def test_a_log_block_that_appends_to_a_list_read_later_is_left_to_a_human(tmp_path: Path) -> None:
    source = PATIENCE_IN_THE_LOG.replace(
        "        if vloss < best - 1e-2:\n            best, bad = vloss, 0\n        else:\n            bad += 1\n",
        "        history.append(vloss)\n",
    ).replace("best, bad = float(\"inf\"), 0\n", "history = []\n").replace("    if bad >= 2:\n", "    if len(history) > 3 and history[-1] > history[-3]:\n")
    migrated, report, code = migrate_script(tmp_path, source)
    assert "the block also sets values every rank needs (history)" in migrated, migrated


def test_a_save_into_memory_is_no_checkpoint(tmp_path: Path) -> None:
    """``torch.save(state, io.BytesIO())``: became runtime.save, and rank 1's buffer stayed empty (EOFError)."""
    source = EXPORTS + "state = io.BytesIO()\ntorch.save(model.state_dict(), state)\n"
    migrated, report, _ = migrate_script(tmp_path, source)
    assert "\ntorch.save(model.module.state_dict(), state)\n" in migrated, migrated
