"""A helper that tests whether it was handed a wrapper (``if isinstance(module, nn.DataParallel):``): its other
branch holds the model itself.

A trial's DDPM kept an EMA helper whose ``ema_copy`` mirrored the wrapper: ``DataParallel(copy)`` in the wrapper's
branch, ``copy.deepcopy(module)`` in the other. The migration read the other branch through the program's one
call (with the wrapped model) and wrote ``copy.deepcopy(module.module)`` there: any caller with a plain model (a
sampling script) died with ``AttributeError``. It also moved the branch's wrap after the ``if``, so a plain
model came back wrapped in DDP. A name where such a test failed holds the model itself; a wrap under such a
test stays in its branch.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from ddp_migrate.cli import cli
from launch import run_torchrun
from migrated import printed_on_every_rank

EMA = """import copy

import torch.nn as nn


class EMAHelper:
    def __init__(self, mu=0.9):
        self.mu = mu
        self.shadow = {}

    def register(self, module):
        if isinstance(module, nn.DataParallel):
            module = module.module
        for name, param in module.named_parameters():
            self.shadow[name] = param.data.clone()

    def update(self, module):
        if isinstance(module, nn.DataParallel):
            module = module.module
        for name, param in module.named_parameters():
            self.shadow[name].mul_(self.mu).add_((1 - self.mu) * param.data)

    def ema(self, module):
        if isinstance(module, nn.DataParallel):
            module = module.module
        for name, param in module.named_parameters():
            param.data.copy_(self.shadow[name])

    def ema_copy(self, module):
        if isinstance(module, nn.DataParallel):
            inner = module.module
            module_copy = type(inner)()
            module_copy.load_state_dict(inner.state_dict())
            module_copy = nn.DataParallel(module_copy)
        else:
            module_copy = copy.deepcopy(module)
        self.ema(module_copy)
        return module_copy
"""

TRAIN = """import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

from ema import EMAHelper


class Denoiser(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Linear(4, 4)

    def forward(self, x):
        return self.net(x)


def main():
    torch.manual_seed(0)
    model = nn.DataParallel(Denoiser())
    helper = EMAHelper()
    helper.register(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(TensorDataset(torch.randn(64, 4)), batch_size=8, shuffle=True)
    for epoch in range(2):
        for (x,) in loader:
            loss = ((model(x) - x) ** 2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            helper.update(model)
    sampler = helper.ema_copy(Denoiser())
    print("plain copy", type(sampler).__name__)


if __name__ == "__main__":
    main()
"""


def test_the_branch_where_the_test_failed_keeps_the_model_itself(tmp_path: Path) -> None:
    (tmp_path / "ema.py").write_text(EMA)
    (tmp_path / "train.py").write_text(TRAIN)
    result = CliRunner().invoke(cli, [str(tmp_path / "train.py")], catch_exceptions=False)
    ema = (tmp_path / "ema.py").read_text()
    assert "        else:\n            module_copy = copy.deepcopy(module)\n" in ema, result.output + ema
    # The wrap stays in the wrapper's branch (DDP now), not after the if for both branches.
    assert re.search(r"module_copy = DistributedDataParallel\(\s*module_copy, device_ids=runtime.device_ids\(\)\s*\)\n        else:", ema), ema
    train = tmp_path / "train.py"
    train.write_text(printed_on_every_rank(train.read_text()))
    launch = run_torchrun(train, nproc_per_node=2, cwd=tmp_path, timeout=120)
    assert launch.returncode == 0, launch.output
    assert launch.output.count("plain copy Denoiser") == 2, launch.output


ARCH = """import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


class Trainer:
    def __init__(self, model, loader):
        self.model, self.loader = model, loader
        self.opt = torch.optim.SGD(model.parameters(), lr=0.1)

    def train(self):
        for x, y in self.loader:
            self.opt.zero_grad()
            nn.functional.mse_loss(self.model(x), y).backward()
            self.opt.step()
        arch = type(self.model).__name__
        torch.save({"arch": arch, "state_dict": self.model.state_dict()}, "ck.pt")


model = nn.Linear(4, 1)
if torch.cuda.device_count() > 1:
    model = nn.DataParallel(model)
Trainer(model, DataLoader(TensorDataset(torch.randn(32, 4), torch.randn(32, 1)), batch_size=8)).train()
"""


def test_the_architecture_saved_with_a_checkpoint_names_the_model(tmp_path: Path) -> None:
    """PyTorch-Template saves ``"arch": type(self.model).__name__`` and checks it on resume: after the migration
    every checkpoint named ``DistributedDataParallel``. ``type()`` asks the model itself."""
    (tmp_path / "train.py").write_text(ARCH)
    result = CliRunner().invoke(cli, [str(tmp_path / "train.py")], catch_exceptions=False)
    text = (tmp_path / "train.py").read_text()
    assert "arch = type(runtime.unwrap(self.model)).__name__" in text, result.output + text
    launch = run_torchrun(tmp_path / "train.py", nproc_per_node=2, cwd=tmp_path, timeout=120)
    assert launch.returncode == 0, launch.output
    import torch

    assert torch.load(tmp_path / "ck.pt", weights_only=True)["arch"] == "Linear"


#: YOLOv5's shapes of the test (a trial): ``is_parallel(model)``, a helper returning ``type(model) in
#: (DataParallel, DistributedDataParallel)``, and that test written out. The migration read the else side through
#: the program's one (wrapped) caller and wrote ``model.module.head`` there: a plain model would fail.
WRAPPER_TYPE_HELPER = """
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


def is_parallel(model):
    return type(model) in (nn.parallel.DataParallel, nn.parallel.DistributedDataParallel)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.head = nn.Linear(4, 2)

    def forward(self, x):
        return self.head(x)


class ComputeLoss:
    def __init__(self, model):
        self.head = TESTED

    def __call__(self, out, y):
        return nn.functional.cross_entropy(out, y) + 0.0 * self.head.weight.sum()


def main():
    model = nn.DataParallel(Net())
    compute_loss = ComputeLoss(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for x, y in DataLoader(TensorDataset(torch.randn(16, 4), torch.randint(0, 2, (16,))), batch_size=4):
        loss = compute_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()


if __name__ == "__main__":
    main()
"""



@pytest.mark.parametrize(
    "tested",
    [
        "model.module.head if is_parallel(model) else model.head",
        "model.module.head if type(model) in (nn.parallel.DataParallel, nn.parallel.DistributedDataParallel) else model.head",
    ],
    ids=["helper", "written-out"],
)
def test_the_plain_side_of_a_wrapper_type_test_keeps_the_model_itself(tmp_path: Path, tested: str) -> None:
    path = tmp_path / "train.py"
    path.write_text(WRAPPER_TYPE_HELPER.replace("TESTED", tested))
    result = CliRunner().invoke(cli, [str(path)])
    assert result.exit_code == 0, result.output
    assert tested in path.read_text(), path.read_text()
