"""Code that trains nothing, or runs where no GPU may be used, is left as it is.

Two trials' crashes, each with "0 item(s) need a human":

- a prediction script with ``model = nn.DataParallel(model)`` (no ``backward()`` anywhere) got a
  ``DistributedDataParallel`` wrap but no process group, so it failed under ``python`` and torchrun alike
  ("Default process group has not been initialized"); migrating a project folder did this to every
  predict/export script beside the training one. A program that never trains keeps its DataParallel (a note
  says so) and is not rewritten.
- ``torch.load(path)`` in a data set's ``__getitem__`` became ``torch.load(path, map_location=runtime.device())``:
  on a GPU, a ``DataLoader`` worker process cannot initialise CUDA, and ``pin_memory`` refuses CUDA tensors. A
  data set's loads are left alone.
"""

from __future__ import annotations

from pathlib import Path

import torch
from click.testing import CliRunner

from ddp_migrate.cli import cli
from launch import run_python, run_torchrun
from migrated import migrate_script

PREDICT = '''
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


def main():
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model = nn.DataParallel(nn.Linear(6, 2))
    model.to(device)
    model.eval()
    loader = DataLoader(TensorDataset(torch.randn(20, 6)), batch_size=8)
    preds = []
    with torch.no_grad():
        for (x,) in loader:
            preds.append(model(x.to(device)).argmax(1).cpu())
    torch.save(torch.cat(preds), "preds.pt")
    torch.save(model.state_dict(), "dp_weights.pt")
    print("predictions", torch.cat(preds).numel(), flush=True)


if __name__ == "__main__":
    main()
'''

TRAIN = '''
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


def main():
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model = nn.DataParallel(nn.Linear(6, 2)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(TensorDataset(torch.randn(32, 6), torch.randint(0, 2, (32,))), batch_size=8, shuffle=True)
    for x, y in loader:
        opt.zero_grad()
        nn.functional.cross_entropy(model(x.to(device)), y.to(device)).backward()
        opt.step()
    torch.save(model.state_dict(), "dp_weights.pt")


if __name__ == "__main__":
    main()
'''


def test_a_prediction_script_keeps_its_data_parallel_and_runs(tmp_path: Path) -> None:
    migrated, report, code = migrate_script(tmp_path, PREDICT, "predict.py")
    assert migrated == PREDICT, migrated
    assert "note DDP001" in report and "the program only infers" in report and code == 0, report
    assert "predictions 20" in run_python(tmp_path / "predict.py", cwd=tmp_path, timeout=120).output
    lint = CliRunner().invoke(cli, ["lint", str(tmp_path / "predict.py")], catch_exceptions=False)
    assert lint.exit_code == 0, lint.output  # (no DDP001/DDP002/DDP008/DDP016 for a DataParallel that serves inference)


def test_a_project_migrates_its_training_script_and_leaves_its_prediction_script(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(TRAIN)
    (tmp_path / "predict.py").write_text(PREDICT)
    result = CliRunner().invoke(cli, [str(tmp_path)], catch_exceptions=False)
    assert (tmp_path / "predict.py").read_text() == PREDICT, result.output
    assert "DistributedDataParallel(" in (tmp_path / "train.py").read_text(), result.output


DATA_SET_FILES = '''
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, Dataset


def read_sample(path):
    return torch.load(path)


class PtFiles(Dataset):
    def __init__(self, paths):
        self.paths = paths
        self.stats = torch.load(paths[0])

    def __len__(self):
        return len(self.paths)

    def __getitem__(self, i):
        item = read_sample(self.paths[i]) if i % 2 else torch.load(self.paths[i])
        return item["x"], item["y"]


def main():
    for i in range(4):
        torch.save({"x": torch.randn(3), "y": torch.tensor(i % 2)}, f"s{i}.pt")
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model = nn.Linear(3, 2).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(PtFiles([f"s{i}.pt" for i in range(4)]), batch_size=2, num_workers=1, pin_memory=True)
    for x, y in loader:
        opt.zero_grad()
        nn.functional.cross_entropy(model(x.to(device)), y.to(device)).backward()
        opt.step()
    torch.save(model.state_dict(), "w.pt")
    model.load_state_dict(torch.load("w.pt"))
    print("trained on", len(loader.dataset), flush=True)


if __name__ == "__main__":
    main()
'''


def test_a_data_set_s_loads_keep_no_device_map(tmp_path: Path) -> None:
    """The data set's three loads (``__init__``, ``__getitem__``, the helper only it calls) are unchanged; the
    checkpoint load of the training function maps onto this process's device."""
    migrated, report, code = migrate_script(tmp_path, DATA_SET_FILES)
    assert migrated.count("map_location=") == 1, migrated
    assert 'torch.load("w.pt", map_location=runtime.device())' in migrated, migrated
    assert "    return torch.load(path)\n" in migrated and "torch.load(self.paths[i])" in migrated, migrated
    assert "trained on 4" in run_python(tmp_path / "train.py", cwd=tmp_path, timeout=120).output


def test_an_evaluation_script_that_builds_an_optimizer_to_restore_it_only_infers(tmp_path: Path) -> None:
    """An optimizer built and given a checkpoint's state, never stepped nor handed on: still a prediction script."""
    source = PREDICT.replace(
        "    model.eval()\n",
        "    optimizer = torch.optim.Adam(model.parameters())\n    optimizer.load_state_dict(optimizer.state_dict())\n    model.eval()\n",
    )
    migrated, report, code = migrate_script(tmp_path, source, "predict.py")
    assert migrated == source and "the program only infers" in report and code == 0, report


EXPORT_COPY = '''
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 2)

    def forward(self, x):
        return self.fc(x)


device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
model = nn.DataParallel(Net()).to(device)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
loader = DataLoader(TensorDataset(torch.randn(32, 4), torch.randint(0, 2, (32,))), batch_size=8, shuffle=True)
for x, y in loader:
    opt.zero_grad()
    nn.functional.cross_entropy(model(x.to(device)), y.to(device)).backward()
    opt.step()
export_model = nn.DataParallel(Net())
export_model.load_state_dict(model.state_dict())
torch.save(export_model.module.state_dict(), "export.pt")
'''


def test_a_data_parallel_copy_that_never_trains_stays_data_parallel(tmp_path: Path) -> None:
    # A re-trial: the export copy became DistributedDataParallel(Net(), device_ids=...), a CPU module with a GPU
    # device id, which DDP refuses on a GPU host; loading the trained weights into it then lost their prefix.
    migrated, report, code = migrate_script(tmp_path, EXPORT_COPY, "train.py")
    assert "export_model = nn.DataParallel(Net())\n" in migrated, migrated
    assert migrated.count("DistributedDataParallel(") == 1, migrated  # the trained model only
    assert "note DDP001" in report and "never trains the model it wraps" in report and code == 0, report
    run_torchrun(tmp_path / "train.py", cwd=tmp_path, timeout=120)
    assert sorted(torch.load(tmp_path / "export.pt")) == ["fc.bias", "fc.weight"]


TRAIN_IN_MAIN_BLOCK = '''
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


def get_data():
    x = torch.randn(64, 4, generator=torch.Generator().manual_seed(0))
    return TensorDataset(x, x.sum(1, keepdim=True))


def build():
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))


if __name__ == "__main__":
    model = build()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    for epoch in range(2):
        for x, y in DataLoader(get_data(), batch_size=16):
            opt.zero_grad()
            nn.functional.mse_loss(model(x), y).backward()
            opt.step()
    torch.save(model.state_dict(), "m.pt")
'''

PREDICT_IMPORTING_TRAIN = '''
import torch

from train import build, get_data

model = build()
model.load_state_dict(torch.load("m.pt"))
model.eval()
x, y = get_data().tensors
with torch.no_grad():
    print("mse", torch.nn.functional.mse_loss(model(x), y).item())
'''


def test_a_prediction_script_that_imports_the_training_script_is_left_alone(tmp_path: Path) -> None:
    """A trial: ``predict.py`` imports ``build`` from a ``train.py`` whose training runs in its ``__main__`` block
    (which an import never runs); the backward() there made the prediction script a training program, given
    ``runtime.setup()`` and a torchrun launch line."""
    (tmp_path / "train.py").write_text(TRAIN_IN_MAIN_BLOCK)
    (tmp_path / "predict.py").write_text(PREDICT_IMPORTING_TRAIN)
    result = CliRunner().invoke(cli, [str(tmp_path)], catch_exceptions=False)
    assert (tmp_path / "predict.py").read_text() == PREDICT_IMPORTING_TRAIN, result.output
    assert "DistributedDataParallel(" in (tmp_path / "train.py").read_text(), result.output
    run_python(tmp_path / "train.py", cwd=tmp_path, timeout=120)
    assert "mse" in run_python(tmp_path / "predict.py", cwd=tmp_path, timeout=120).output
