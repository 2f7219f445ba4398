"""DDP016 keeps the ``module.`` keys of a wrapped model's ``state_dict()`` for the files it writes, not for an
in-memory copy.

A trial's DataParallel program kept an EMA (``ema = copy.deepcopy(model)``) updated key by key from
``model.state_dict()``. The migration copied ``model.module`` (plain keys) and kept the prefix on the
model's state dict: ``KeyError: '0.weight'``, as plain python and under torchrun, with nothing to review.
A state dict that never reaches a save is read through ``.module``, like the copy.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from migrated import migrate_script

EMA = '''
import copy

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset


@torch.no_grad()
def ema_update(ema, model, decay=0.9):
    msd = model.state_dict()
    for k, v in ema.state_dict().items():
        v.mul_(decay).add_(msd[k], alpha=1 - decay)


def main():
    torch.manual_seed(0)
    model = nn.DataParallel(nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2)))
    ema = copy.deepcopy(model)
    loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randint(0, 2, (64,))), batch_size=16)
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    for epoch in range(2):
        for xb, yb in loader:
            loss = F.cross_entropy(model(xb), yb)
            opt.zero_grad()
            loss.backward()
            opt.step()
            ema_update(ema, model)
    SAVE


if __name__ == "__main__":
    main()
'''


def test_an_in_memory_state_dict_has_the_keys_of_the_copy_it_updates(tmp_path: Path) -> None:
    migrated, report, code = migrate_script(tmp_path, EMA.replace("SAVE", "pass"))
    assert code == 0, report
    assert "msd = model.module.state_dict()" in migrated, migrated
    assert "copy.deepcopy(model.module)" in migrated


@pytest.mark.parametrize(
    "save",
    [
        'torch.save(model.state_dict(), "final.pt")',
        'sd = model.state_dict()\n    torch.save({"model": sd}, "final.pt")',
        'sd = model.state_dict()\n    torch.save({k: v.cpu() for k, v in sd.items()}, "final.pt")',
    ],
    ids=["saved", "saved-in-a-dict", "copied-then-saved"],
)
def test_a_saved_state_dict_keeps_its_module_keys(tmp_path: Path, save: str) -> None:
    migrated, report, _ = migrate_script(tmp_path, EMA.replace("SAVE", save))
    assert 'runtime.unwrap(model).state_dict(prefix="module.")' in migrated.split("def main")[1], migrated


@pytest.mark.distributed
def test_the_migrated_ema_trains_under_torchrun(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    from launch import run_torchrun

    migrate_script(tmp_path, EMA.replace("SAVE", 'torch.save(ema.state_dict(), "ema.pt")'))
    run = run_torchrun(tmp_path / "train.py", nproc_per_node=2, cwd=tmp_path, timeout=120)
    assert (tmp_path / "ema.pt").exists(), run.output


#: timm's ``ModelEma`` shape: the copy of a DataParallel model kept in the holder's ``self.module``, saved as
#: ``ema.module.state_dict()``. The original saved ``module.`` keys for both; a trial's migration copied
#: ``model.module`` and saved the EMA's plain keys without a word, so a loader of the old checkpoints broke.
EMA_HOLDER = '''
import copy

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


class ModelEma:
    def __init__(self, model, decay=0.9):
        self.module = copy.deepcopy(model)
        self.decay = decay

    @torch.no_grad()
    def update(self, model):
        for e, p in zip(self.module.parameters(), model.parameters()):
            e.mul_(self.decay).add_(p, alpha=1 - self.decay)


def main():
    torch.manual_seed(0)
    model = nn.DataParallel(nn.Linear(4, 1))
    ema = ModelEma(model)
    loader = DataLoader(TensorDataset(torch.randn(64, 4), torch.randn(64, 1)), batch_size=16)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        for x, y in loader:
            loss = nn.functional.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            ema.update(model)
    torch.save({"model": model.state_dict(), "ema": ema.module.state_dict()}, "ckpt.pt")
    print("keys", sorted(torch.load("ckpt.pt")["ema"]))


if __name__ == "__main__":
    main()
'''


def test_the_copy_an_ema_holder_keeps_saves_the_originals_keys(tmp_path: Path) -> None:
    migrated, report, _ = migrate_script(tmp_path, EMA_HOLDER)
    assert "copy.deepcopy(model.module)" in migrated, report
    assert '"ema": runtime.unwrap(ema.module).state_dict(prefix="module.")' in migrated, migrated


ONE_ADVICE = """import torch
import torch.nn as nn

model = nn.DataParallel(nn.Linear(4, 1))
state = {"model": model}
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for x, y in loader:
    nn.functional.mse_loss(model(x), y).backward()
    opt.step()
torch.save(model.state_dict(), "dp.pt")
torch.save({"m": state["model"].state_dict()}, "dp2.pt")
shadow = nn.Linear(4, 1)
shadow.load_state_dict(model.state_dict())
"""


def test_lint_gives_one_advice_for_a_saved_state_dict(tmp_path: Path) -> None:
    """Lint said both "use .module.state_dict()" (DDP008) and "keep the module. keys" (DDP016) on one call: the
    saved state dicts get DDP016's advice alone; the one kept in memory gets DDP008's."""
    from click.testing import CliRunner

    from ddp_migrate.cli import cli

    path = tmp_path / "train.py"
    path.write_text(ONE_ADVICE)
    result = CliRunner().invoke(cli, ["lint", "-q", "--select", "DDP008,DDP016", str(path)])
    found = sorted(line.split(": ", 1)[1].split(" ", 1)[0] + "@" + line.split(":")[1] for line in result.output.splitlines() if "DDP0" in line)
    assert found == ["DDP008@13", "DDP016@10", "DDP016@11"], result.output
