"""A model factory named like an unwrapping helper (``get_model(device)`` building the model, with the usual
``if torch.cuda.device_count() > 1: model = nn.DataParallel(model)``).

A trial's silent checkpoint change: ``get_model`` was taken by its name for a helper that hands back the model
inside a wrapper, so ``model = get_model(device)`` counted as the bare model; once the factory returned a DDP
model, ``torch.save(model.state_dict(), ...)`` wrote ``module.``-prefixed keys that the evaluation script could no
longer load. A helper of the program is now read: this one returns the wrapped model, so the save goes
through ``.module``.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from ddp_migrate.cli import cli

MODELS = '''
import torch
import torch.nn as nn


def get_model(device):
    model = nn.Sequential(nn.Linear(4, 2))
    if torch.cuda.device_count() > 1:
        model = nn.DataParallel(model)
    return model.to(device)
'''

TRAIN = '''
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

from models import get_model


def main():
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    loader = DataLoader(TensorDataset(torch.randn(32, 4), torch.randint(0, 2, (32,))), batch_size=8, shuffle=True)
    model = get_model(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        for x, y in loader:
            opt.zero_grad()
            nn.functional.cross_entropy(model(x.to(device)), y.to(device)).backward()
            opt.step()
    torch.save(model.state_dict(), "ckpt.pt")
    fresh = nn.Sequential(nn.Linear(4, 2))
    fresh.load_state_dict(torch.load("ckpt.pt", map_location="cpu"))
    print("reloaded", sorted(torch.load("ckpt.pt")), flush=True)


if __name__ == "__main__":
    main()
'''


def _migrate(folder: Path) -> str:
    (folder / "models.py").write_text(MODELS)
    (folder / "train.py").write_text(TRAIN)
    return CliRunner().invoke(cli, [str(folder / "train.py")], catch_exceptions=False).output


def test_the_factorys_wrapped_model_is_saved_through_module(tmp_path: Path) -> None:
    report = _migrate(tmp_path)
    assert 'runtime.save(model.module.state_dict(), "ckpt.pt")' in (tmp_path / "train.py").read_text(), report


@pytest.mark.distributed
def test_the_checkpoint_keeps_the_originals_keys(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    from launch import run_python

    _migrate(tmp_path)
    alone = run_python(tmp_path / "train.py", cwd=tmp_path, timeout=120)
    assert "reloaded ['0.bias', '0.weight']" in alone.output, alone.output


RECURSIVE_UNWRAP = '''
import torch
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel


def unwrap(m):
    return unwrap(m.module) if hasattr(m, "module") else m


model = DistributedDataParallel(nn.Linear(4, 2))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
model(torch.ones(1, 4)).sum().backward()
raw = unwrap(model)
torch.save(raw.state_dict(), "x.pt")
'''


def test_an_unwrapping_helper_that_calls_itself_is_read_once(tmp_path: Path) -> None:
    """Reading a helper's returns must end (a recursive ``unwrap``), and such a helper still unwraps."""
    (tmp_path / "train.py").write_text(RECURSIVE_UNWRAP)
    report = CliRunner().invoke(cli, [str(tmp_path / "train.py")], catch_exceptions=False).output
    assert "0 error(s)" in report, report
    assert 'runtime.save(raw.state_dict(), "x.pt")' in (tmp_path / "train.py").read_text(), report
