"""Where code runs, and how often: a review's and a trial's reproducers of session 21.

- A helper module of a program that trains in its entry's ``__main__`` block is a training module (its prints
  and saves are rank 0's); only an entry ignores another entry's ``__main__`` block.
- A DataParallel returned through a move (``return wrapped.to(device)``) is handed on: it trains.
- A pass over a loader called from a comprehension over epochs is one pass per epoch.
- A set-up only when launched inside a ``try``, or a wrap after an early exit for the single-process run:
  ``runtime.setup()`` goes right after the set-up's test, and nowhere where the wrap is conditional.
- A model method called before a function's own training loop is no training step.
- A loop over a constant list of learning rates gives the sampler no epoch number; ``zip(range(n), lrs)`` does.
- A ``with open(log)`` block around the training stays every rank's (only rank 0 trained).
- Parameter groups built with ``getattr(model, part)`` train the model (it was never wrapped).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner
from launch import run_python, run_torchrun
from migrated import migrate_script

from ddp_migrate.cli import cli

HELPER = '''
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


def make_loader():
    return DataLoader(TensorDataset(torch.randn(64, 4), torch.randn(64, 1)), batch_size=16, shuffle=True)


def save(model, epoch):
    print("saving", epoch)
    torch.save(model.state_dict(), f"ckpt_{epoch}.pt")
'''

ENTRY_TRAINING_IN_MAIN_BLOCK = '''
import torch
import torch.nn as nn
import torch.nn.functional as F

from lib import make_loader, save

if __name__ == "__main__":
    loader = make_loader()
    net = nn.Linear(4, 1)
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    for epoch in range(2):
        for x, y in loader:
            opt.zero_grad()
            F.mse_loss(net(x), y).backward()
            opt.step()
        save(net, epoch)
'''


def test_a_helper_of_an_entry_that_trains_in_its_main_block_is_migrated(tmp_path: Path) -> None:
    (tmp_path / "lib.py").write_text(HELPER)
    (tmp_path / "train.py").write_text(ENTRY_TRAINING_IN_MAIN_BLOCK)
    result = CliRunner().invoke(cli, [str(tmp_path / "train.py")], catch_exceptions=False)
    helper = (tmp_path / "lib.py").read_text()
    assert "runtime.print0(" in helper and "runtime.save(" in helper, result.output


RETURNED_WRAP = '''
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset


def build(device):
    wrapped = nn.DataParallel(nn.Linear(4, 1))
    return wrapped.to(device)


def main():
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    loader = DataLoader(TensorDataset(torch.randn(32, 4), torch.randn(32, 1)), batch_size=8)
    model = build(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for x, y in loader:
        opt.zero_grad()
        F.mse_loss(model(x.to(device)), y.to(device)).backward()
        opt.step()
    print("weight", model.module.weight.sum().item())


if __name__ == "__main__":
    main()
'''


def test_a_data_parallel_returned_through_a_move_is_migrated(tmp_path: Path) -> None:
    migrated, report, _ = migrate_script(tmp_path, RETURNED_WRAP)
    assert "nn.DataParallel(" not in migrated and "never trains" not in report, migrated
    assert "weight" in run_python(tmp_path / "train.py", cwd=tmp_path, timeout=120).output


EPOCHS_IN_A_COMPREHENSION = '''
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset


def train_epoch(model, loader, opt):
    for x, y in loader:
        opt.zero_grad()
        F.mse_loss(model(x), y).backward()
        opt.step()


def main():
    loader = DataLoader(TensorDataset(torch.randn(32, 4), torch.randn(32, 1)), batch_size=8, shuffle=True)
    model = nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    OUTER


if __name__ == "__main__":
    main()
'''


@pytest.mark.parametrize(
    "outer, reviewed",
    [("[train_epoch(model, loader, opt) for epoch in range(3)]", True), ("train_epoch(model, loader, opt)", False)],
    ids=["comprehension_over_epochs", "one_pass"],
)
def test_a_pass_called_from_a_comprehension_is_not_a_single_pass(tmp_path: Path, outer: str, reviewed: bool) -> None:
    _, report, _ = migrate_script(tmp_path, EPOCHS_IN_A_COMPREHENSION.replace("OUTER", outer))
    assert ("DDP006" in report) is reviewed, report


SETUP_IN_A_TRY = '''
import os

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def main():
    try:
        if "WORLD_SIZE" in os.environ:
            dist.init_process_group("gloo")
        ds = TensorDataset(torch.randn(32, 4), torch.randn(32, 1))
        sampler = DistributedSampler(ds, num_replicas=int(os.environ.get("WORLD_SIZE", 1)), rank=int(os.environ.get("RANK", 0)))
        loader = DataLoader(ds, batch_size=8, sampler=sampler)
        model = DDP(nn.Linear(4, 1))
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for x, y in loader:
            opt.zero_grad()
            F.mse_loss(model(x), y).backward()
            opt.step()
        print("trained", flush=True)
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


if __name__ == "__main__":
    main()
'''

SINGLE_PROCESS_EXIT = '''
import os

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset


def main():
    if "WORLD_SIZE" in os.environ:
        dist.init_process_group("gloo")
    model = nn.Linear(4, 1)
    if not dist.is_initialized():
        print("single-process run", flush=True)
        return
    model = DDP(model)
    print("distributed run", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
'''


def test_runtime_setup_follows_a_set_up_inside_a_try(tmp_path: Path) -> None:
    migrated, report, code = migrate_script(tmp_path, SETUP_IN_A_TRY)
    assert 'dist.init_process_group("gloo")\n        runtime.setup(device="cpu")\n' in migrated, migrated
    assert "trained" in run_python(tmp_path / "train.py", cwd=tmp_path, timeout=120).output


def test_a_wrap_after_an_early_exit_for_one_process_gets_no_setup(tmp_path: Path) -> None:
    migrated, report, _ = migrate_script(tmp_path, SINGLE_PROCESS_EXIT)
    assert "runtime.setup(" not in migrated, migrated
    assert "single-process run" in run_python(tmp_path / "train.py", cwd=tmp_path, timeout=120).output


METHOD_BEFORE_THE_LOOP = '''
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 1)

    def forward(self, x):
        return self.fc(x)

    def init_weights(self):
        self.apply(lambda m: nn.init.zeros_(m.bias) if isinstance(m, nn.Linear) else None)


def train(model, loader, opt):
    model.init_weights()
    for epoch in range(2):
        for x, y in loader:
            opt.zero_grad()
            F.mse_loss(model(x), y).backward()
            opt.step()
    print("trained", flush=True)


def main():
    loader = DataLoader(TensorDataset(torch.randn(32, 4), torch.randn(32, 1)), batch_size=8)
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    train(model, loader, opt)


if __name__ == "__main__":
    main()
'''


def test_a_model_method_before_the_training_loop_is_no_step(tmp_path: Path) -> None:
    migrated, report, code = migrate_script(tmp_path, METHOD_BEFORE_THE_LOOP)
    assert "model.module.init_weights()" in migrated and code == 0, report
    assert "trained" in run_python(tmp_path / "train.py", cwd=tmp_path, timeout=120).output


SWEEP = '''
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

LRS = [0.1, 0.05, 0.01]


def main():
    loader = DataLoader(TensorDataset(torch.randn(32, 4), torch.randn(32, 1)), batch_size=8, shuffle=True)
    model = nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for OUTER:
        for group in opt.param_groups:
            group["lr"] = lr
        for x, y in loader:
            opt.zero_grad()
            F.mse_loss(model(x), y).backward()
            opt.step()
    print("swept", flush=True)


if __name__ == "__main__":
    main()
'''


@pytest.mark.parametrize(
    "outer, epoch", [("lr in LRS", None), ("epoch, lr in zip(range(3), LRS)", "epoch")], ids=["constant_list", "zip_of_a_range"]
)
def test_the_epoch_number_of_a_loop_over_settings(tmp_path: Path, outer: str, epoch: str | None) -> None:
    migrated, report, _ = migrate_script(tmp_path, SWEEP.replace("OUTER", outer))
    assert "set_epoch(lr)" not in migrated, migrated
    if epoch is not None:
        assert f"loader.sampler.set_epoch({epoch})" in migrated, migrated
    else:
        assert "DDP006" in report, report
    assert "swept" in run_python(tmp_path / "train.py", cwd=tmp_path, timeout=120).output


LOG_AROUND_TRAINING = '''
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset


def main():
    loader = DataLoader(TensorDataset(torch.randn(32, 4), torch.randn(32, 1)), batch_size=8)
    model = nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with open("log.csv", "w") as f:
        for epoch in range(2):
            for x, y in loader:
                opt.zero_grad()
                loss = F.mse_loss(model(x), y)
                loss.backward()
                opt.step()
                sys.stderr.write("step\\n")
            f.write(f"{epoch},{loss.item():.4f}\\n")


if __name__ == "__main__":
    main()
'''


def test_a_log_file_held_open_around_the_training_is_not_made_rank_0_s(tmp_path: Path) -> None:
    """A trial: the whole ``with open(...)`` block went under ``if runtime.is_main_process():``, so rank 1 never
    trained (24 steps against 0), reported as a change."""
    migrated, report, code = migrate_script(tmp_path, LOG_AROUND_TRAINING)
    assert "if runtime.is_main_process():\n        with open(" not in migrated, migrated
    assert "DDP012" in report and code == 1, report
    out = run_torchrun(tmp_path / "train.py", cwd=tmp_path, timeout=120).output
    assert out.count("step") == 16, out  # (each of 2 ranks: half the data in batches of 4, 2 epochs)


PART_GROUPS = '''
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

LRS = {"encoder": 1e-2, "head": 1e-1}


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Linear(8, 16)
        self.head = nn.Linear(16, 2)

    def forward(self, x):
        return self.head(torch.relu(self.encoder(x)))


def main():
    torch.manual_seed(0)
    x = torch.randn(64, 8)
    loader = DataLoader(TensorDataset(x, (x.sum(1) > 0).long()), batch_size=16)
    model = Model()
    opt = torch.optim.SGD([{"params": GROUP.parameters(), "lr": lr} for k, lr in LRS.items()])
    for epoch in range(2):
        for xb, yb in loader:
            opt.zero_grad()
            F.cross_entropy(model(xb), yb).backward()
            opt.step()
    print("enc_sum", model.encoder.weight.sum().item(), flush=True)


if __name__ == "__main__":
    main()
'''


@pytest.mark.parametrize("group", ["getattr(model, k)", "model.get_submodule(k)"])
def test_parameter_groups_by_part_name_train_the_model(tmp_path: Path, group: str) -> None:
    """A trial's silent miss: no DDP wrap at all, each rank trained its own model (enc_sum -0.874 vs -0.892)."""
    migrated, report, code = migrate_script(tmp_path, PART_GROUPS.replace("GROUP", group))
    assert "DistributedDataParallel(model" in migrated and code == 0, report
    if group.startswith("getattr"):
        out = run_torchrun(tmp_path / "train.py", cwd=tmp_path, timeout=120).output
        assert "enc_sum" in out, out


# ------------------------------------------------------------------ a second review's reproducers

NAMED_AT_RUN_TIME = '''
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset


def main():
    loader = DataLoader(TensorDataset(torch.randn(32, 4), torch.randn(32, 1)), batch_size=8)
    model = nn.DataParallel(nn.Linear(4, 1))
    for name, _ in model.named_children():
        print(name, type(getattr(model, name)).__name__, flush=True)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    call = "forward"
    for x, y in loader:
        opt.zero_grad()
        F.mse_loss(getattr(model, call)(x), y).backward()
        opt.step()


if __name__ == "__main__":
    main()
'''


def test_getattr_by_a_name_known_at_run_time_stays_on_the_wrapper(tmp_path: Path) -> None:
    """``getattr(model, name)`` may ask for the wrapper's own (``module``, ``forward``): unwrapping it crashed, or ran
    the forward past DDP. Only ``getattr(model, k).parameters()`` (parameter groups by part) reaches the model."""
    migrated, report, _ = migrate_script(tmp_path, NAMED_AT_RUN_TIME)
    assert "runtime.unwrap" not in migrated, migrated
    assert "module Linear" in run_python(tmp_path / "train.py", cwd=tmp_path, timeout=120).output


HEADS_IN_A_STEP = '''
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.backbone = nn.Linear(4, 8)
        self.heads = nn.ModuleList([nn.Linear(8, 2), nn.Linear(8, 2)])

    def forward(self, x):
        return [head(self.backbone(x)) for head in self.heads]


def train_step(model, x, y, opt):
    opt.zero_grad()
    feats = model.module.backbone(x)
    for head in model.module.heads:
        F.cross_entropy(head(feats), y).backward(retain_graph=True)
    opt.step()


def main():
    x = torch.randn(32, 4)
    loader = DataLoader(TensorDataset(x, (x[:, 0] > 0).long()), batch_size=8)
    model = nn.DataParallel(Net())
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        for xb, yb in loader:
            train_step(model, xb, yb, opt)


if __name__ == "__main__":
    main()
'''


def test_a_step_with_a_backward_per_head_is_still_a_step(tmp_path: Path) -> None:
    _, report, code = migrate_script(tmp_path, HEADS_IN_A_STEP)
    assert "DDP008" in report and "backbone() through .module in the training step" in report and code == 1, report


UNRELATED_DEVICE_FIELD = '''
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset


class ExportSettings:
    device = "cuda:0"


def main():
    loader = DataLoader(TensorDataset(torch.randn(32, 4), torch.randn(32, 1)), batch_size=8)
    model = nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for x, y in loader:
        noise = torch.randn(x.shape, device=x.device)
        opt.zero_grad()
        F.mse_loss(model(x + noise), y).backward()
        opt.step()
    print("export to", ExportSettings.device, flush=True)


if __name__ == "__main__":
    main()
'''


def test_a_device_field_of_a_class_no_device_reads_is_kept(tmp_path: Path) -> None:
    migrated, report, _ = migrate_script(tmp_path, UNRELATED_DEVICE_FIELD)
    assert 'device = "cuda:0"' in migrated and "DDP004" not in report, report


SETUP_AFTER_AN_EARLY_RETURN = '''
import os

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


def init_distributed():
    if "WORLD_SIZE" not in os.environ:
        return False
    dist.init_process_group("gloo")
    return True


def main():
    distributed = init_distributed()
    model = DDP(nn.Linear(4, 2))
    model(torch.randn(3, 4)).sum().backward()
    print("distributed", distributed, flush=True)


if __name__ == "__main__":
    main()
'''


def test_runtime_setup_follows_the_call_of_a_set_up_that_returns_early(tmp_path: Path) -> None:
    migrated, _, _ = migrate_script(tmp_path, SETUP_AFTER_AN_EARLY_RETURN)
    assert 'distributed = init_distributed()\n    runtime.setup(device="cpu")\n' in migrated, migrated
    assert "distributed False" in run_python(tmp_path / "train.py", cwd=tmp_path, timeout=120).output


def test_an_update_bn_given_its_loader_by_keyword_is_reviewed(tmp_path: Path) -> None:
    source = PASS_WITH_SWA.replace("UPDATE", "update_bn(loader=loader, model=swa)")
    _, report, _ = migrate_script(tmp_path, source)
    assert "DDP045 update_bn() recomputes the BatchNorm statistics" in report, report


@pytest.mark.parametrize(
    ("model", "reviewed"),
    [
        ("nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))", False),  # no BatchNorm: update_bn does nothing
        ("make_model()", True),  # a library's model: it may hold BatchNorm layers
    ],
    ids=["no-batchnorm", "library-model"],
)
def test_an_update_bn_over_a_model_without_batchnorm_is_no_review(tmp_path: Path, model: str, reviewed: bool) -> None:
    """A trial's SWA of an MLP: update_bn over the sharded loader was reviewed, though the model has no BatchNorm
    layer for it to update (the migrated run equalled the original's)."""
    source = PASS_WITH_SWA.replace("UPDATE", "update_bn(loader, swa)").replace(
        "nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.Linear(8, 1))", model
    ).replace("import torch\n", "import torch\nfrom mylib import make_model\n", 1)
    _, report, _ = migrate_script(tmp_path, source)
    assert ("DDP045 update_bn() recomputes the BatchNorm statistics" in report) is reviewed, report


PASS_WITH_SWA = '''
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.optim.swa_utils import AveragedModel, update_bn
from torch.utils.data import DataLoader, TensorDataset


def main():
    loader = DataLoader(TensorDataset(torch.randn(32, 4), torch.randn(32, 1)), batch_size=8, shuffle=True)
    model = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.Linear(8, 1))
    swa = AveragedModel(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        for x, y in loader:
            opt.zero_grad()
            F.mse_loss(model(x), y).backward()
            opt.step()
        swa.update_parameters(model)
    UPDATE


if __name__ == "__main__":
    main()
'''


SCRATCH_FOLDER = '''
import glob
import os
import tempfile

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset


def main():
    loader = DataLoader(TensorDataset(torch.randn(32, 4), torch.randn(32, 1)), batch_size=8)
    model = nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    scratch = tempfile.mkdtemp()
    for x, y in loader:
        opt.zero_grad()
        F.mse_loss(model(x), y).backward()
        opt.step()
    for f in glob.glob(os.path.join(scratch, "*.npy")):
        os.remove(f)


if __name__ == "__main__":
    main()
'''


def test_deleting_from_a_folder_of_the_process_s_own_is_no_race(tmp_path: Path) -> None:
    _, report, _ = migrate_script(tmp_path, SCRATCH_FOLDER)
    assert "every rank deletes files it lists" not in report, report


@pytest.mark.parametrize(
    "outer, constant, epoch",
    [("epoch in zip(EPOCHS, EPOCHS)", "EPOCHS = list(range(3))", None), ("epoch, lr in SCHEDULE", "SCHEDULE = [(0, 0.1), (1, 0.01)]", "epoch")],
    ids=["zip_into_one_name", "pairs_with_an_epoch_first"],
)
def test_the_epoch_number_of_a_loop_over_pairs(tmp_path: Path, outer: str, constant: str, epoch: str | None) -> None:
    source = SWEEP.replace("LRS = [0.1, 0.05, 0.01]", constant).replace("OUTER", outer).replace('group["lr"] = lr', 'group["lr"] = 0.1')
    migrated, report, _ = migrate_script(tmp_path, source)
    if epoch is None:
        assert "loader.sampler.set_epoch(epoch)" not in migrated and "DDP006" in report, migrated
    else:
        assert f"loader.sampler.set_epoch({epoch})" in migrated, migrated
    assert "swept" in run_python(tmp_path / "train.py", cwd=tmp_path, timeout=120).output
