"""Models saved whole (``torch.save(model, path)``), not as a state dict. A save kept as ``torch.save``
under a rank-0 guard (a best-model save inside ``if loss < best:``) pickled the DistributedDataParallel
wrapper: loading the file anywhere without a process group failed (a trial). And ``runtime.save`` writes
the model inside its wrapper, so a program that loads the file back and reads ``loaded.module`` failed
with AttributeError on every rank. Both with exit 0.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from launch import run_python
from migrated import migrate_script, train_original_and_migrated

BEST = '''
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


def main():
    torch.manual_seed(0)
    loader = DataLoader(TensorDataset(torch.randn(64, 4), torch.randn(64, 1)), batch_size=8)
    model = nn.DataParallel(nn.Linear(4, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    best = float("inf")
    for epoch in range(3):
        total = 0.0
        for x, y in loader:
            optimizer.zero_grad()
            loss = nn.functional.mse_loss(model(x), y)
            loss.backward()
            optimizer.step()
            total += loss.item()
        if total < best:
            best = total
            torch.save({"net": model, "epoch": epoch}, "best.pt")
    torch.save(model, "whole.pt")
    loaded = torch.load("whole.pt", weights_only=False)
    print("loaded", type(loaded.module).__name__, tuple(loaded.module.weight.shape), flush=True)


if __name__ == "__main__":
    main()
'''


def test_whole_models_are_saved_and_read_back_without_their_wrapper(tmp_path: Path) -> None:
    migrated, report, code = migrate_script(tmp_path, BEST)
    # The one item left: the best model is chosen on this rank's training loss (DDP041).
    assert code == 1 and report.count("  review ") == 1 and "DDP041 `total < best`" in report, report
    assert 'torch.save({"net": runtime.unwrap(model), "epoch": epoch}, "best.pt")' in migrated, migrated
    assert "runtime.unwrap(loaded).weight.shape" in migrated and "loaded.module" not in migrated, migrated


@pytest.mark.distributed
def test_the_saved_models_load_without_a_process_group(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    _, migrated, launch = train_original_and_migrated(tmp_path, BEST)
    assert "loaded Linear (1, 4)" in launch.output, launch.output  # (printed on rank 0; every rank loads it)
    best = torch.load(migrated / "best.pt", weights_only=False)  # no process group in this process
    assert type(best["net"]).__name__ == "Linear"


EMA = '''
import copy

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


def main():
    torch.manual_seed(0)
    loader = DataLoader(TensorDataset(torch.randn(64, 4), torch.randn(64, 1)), batch_size=16)
    model = nn.DataParallel(nn.Linear(4, 1))
    ema = copy.deepcopy(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        for x, y in loader:
            optimizer.zero_grad()
            nn.functional.mse_loss(model(x), y).backward()
            optimizer.step()
            with torch.no_grad():
                for averaged, current in zip(ema.parameters(), model.parameters()):
                    averaged.lerp_(current, 0.1)
    print("ema", round(ema.module.weight.sum().item(), 4), flush=True)


if __name__ == "__main__":
    main()
'''


def test_module_of_a_copy_of_the_model_itself_is_reached_through_unwrap(tmp_path: Path) -> None:
    """``ema = copy.deepcopy(model)`` of a DataParallel model becomes a copy of the model itself (a copy of
    the DDP wrapper fails): ``ema.module`` then has nothing to reach (a trial: AttributeError on every
    rank under torchrun, exit 0)."""
    migrated, report, code = migrate_script(tmp_path, EMA)
    assert code == 0, report
    assert "ema = copy.deepcopy(model.module)" in migrated and "runtime.unwrap(ema).weight" in migrated, migrated


RESUMED = '''
import os
import sys

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


def main():
    torch.manual_seed(0)
    loader = DataLoader(TensorDataset(torch.randn(64, 4), torch.randn(64, 1)), batch_size=16)
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
    if len(sys.argv) > 1 and os.path.exists(sys.argv[1]):
        model = torch.load(sys.argv[1], weights_only=False)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        for x, y in loader:
            optimizer.zero_grad()
            nn.functional.mse_loss(model(x), y).backward()
            optimizer.step()
    torch.save(model, "model.pth")


if __name__ == "__main__":
    main()
'''


def test_a_model_resumed_whole_is_wrapped_after_the_resume(tmp_path: Path) -> None:
    """``if resume: model = torch.load(path)`` after the model is built: the wrap goes after that ``if``
    (it went before, and the resumed model trained unwrapped on each rank's shard: no gradient sync, exit 0)."""
    migrated, report, code = migrate_script(tmp_path, RESUMED)
    assert code == 0, report
    body = migrated.split("def main")[1]
    assert body.index("model = torch.load(") < body.index("model = DistributedDataParallel(model"), migrated


COMPILED = 'import torch\nimport torch.nn as nn\nfrom torch.utils.data import DataLoader, TensorDataset\n\nUSE_COMPILE = True\n\n\ndef main():\n    torch.manual_seed(0)\n    loader = DataLoader(TensorDataset(torch.randn(32, 4), torch.randn(32, 1)), batch_size=8)\n    model = nn.Linear(4, 1)\n    if USE_COMPILE:\n        model = torch.compile(model, backend="aot_eager")\n    opt = torch.optim.SGD(model.parameters(), lr=0.1)\n    for epoch in range(2):\n        for x, y in loader:\n            loss = nn.functional.mse_loss(model(x), y)\n            opt.zero_grad()\n            loss.backward()\n            opt.step()\n    raw = model._orig_mod if USE_COMPILE else model\n    torch.save(raw.state_dict(), "final.pt")\n    print("checksum", sum(p.sum().item() for p in raw.parameters()))\n\n\nif __name__ == "__main__":\n    main()\n'


def test_a_name_that_holds_the_wrapper_on_one_branch_only_is_unwrapped_at_run_time(tmp_path: Path) -> None:
    """``raw = model._orig_mod if USE_COMPILE else model`` becomes ``model.module._orig_mod if ... else
    model``: ``raw`` holds the wrapper only without compile, so ``raw.state_dict()`` goes through
    ``runtime.unwrap(raw)`` (``raw.module`` raised AttributeError with compile on, a trial, exit 0)."""
    migrated, report, code = migrate_script(tmp_path, COMPILED)
    assert code == 0, report
    assert "runtime.unwrap(raw).state_dict()" in migrated and "raw.module" not in migrated, migrated


RELOADED = '''
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 1)

    def forward(self, x):
        return self.fc(x)

    def describe(self):
        return tuple(self.fc.weight.shape)


model = Net()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
loader = DataLoader(TensorDataset(torch.randn(32, 4), torch.randn(32, 1)), batch_size=8, shuffle=True)


def report():
    print("model", model.describe(), flush=True)


for epoch in range(2):
    for x, y in loader:
        opt.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    report()
    with open("best.pt", "wb") as f:
        torch.save(model, f)
with open("best.pt", "rb") as f:
    model = torch.load(f, weights_only=False)
report()
'''


def test_a_model_bound_again_from_a_whole_model_load_is_reached_through_unwrap(tmp_path: Path) -> None:
    # A trial (the word-language-model example): after ``model = torch.load(f)`` the migrated code read
    # ``model.module.rnn`` and failed with AttributeError, in a plain run too; a helper reads the model
    # both while it is wrapped and after the reload.
    migrated, report, _ = migrate_script(tmp_path, RELOADED)
    assert "model.module" not in migrated and "runtime.unwrap(model).describe()" in migrated, migrated
    run = run_python("train.py", cwd=tmp_path, timeout=120, check=False)
    assert run.returncode == 0 and run.stdout.count("model (1, 4)") == 3, run.stderr


def test_the_report_says_a_whole_model_is_saved_without_its_wrapper(tmp_path: Path) -> None:
    """A trial: ``torch.save(model, path)`` of a DataParallel model pickled the wrapper; runtime.save pickles the
    model itself, and a reader outside the program that used ``.module`` broke, with nothing said."""
    source = (
        "import torch\nimport torch.nn as nn\nfrom torch.utils.data import DataLoader, TensorDataset\n\n"
        "model = nn.DataParallel(nn.Linear(4, 1))\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "loader = DataLoader(TensorDataset(torch.randn(16, 4), torch.randn(16, 1)), batch_size=4)\n"
        "for x, y in loader:\n    opt.zero_grad()\n    nn.functional.mse_loss(model(x), y).backward()\n    opt.step()\n"
        'torch.save(model, "model.pt")\ntorch.save(model.state_dict(), "weights.pt")\n'
    )
    _, report, _ = migrate_script(tmp_path, source)
    notes = [line for line in report.splitlines() if "saved without its wrapper" in line]
    assert len(notes) == 1 and "line 12" in notes[0], report
