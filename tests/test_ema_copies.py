"""An EMA object that copies the model and freezes its copy (timm's ``ModelEma``, YOLOv5's ``ModelEMA``).

A trial's silent wrong with a wrong message: the freeze inside the EMA class (``self.ema = deepcopy(model)``,
then ``p.requires_grad_(False)`` over ``self.ema.parameters()``) was read as a freeze of the model handed in.
The model was left unwrapped ("this hands model to an object and changes which of its parameters require
gradients"), the data was sharded, and the replicas drifted apart (weight sums -3.12 and -2.60). A freeze of a
copy the object makes leaves the caller's model as it was: the model is wrapped before it is handed over.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from migrated import migrate_script

PROGRAM = '''
import os
from copy import deepcopy

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


class ModelEma:
    def __init__(self, model, decay=0.9):
        self.ema = COPY
        for p in self.ema.parameters():
            p.requires_grad_(False)
        self.decay = decay

    @torch.no_grad()
    def update(self, model):
        for e, m in zip(self.ema.parameters(), model.parameters()):
            e.mul_(self.decay).add_(m.detach(), alpha=1 - self.decay)


def main():
    torch.manual_seed(0)
    loader = DataLoader(TensorDataset(torch.randn(64, 4), torch.randn(64, 1)), batch_size=8, shuffle=True)
    model = nn.Linear(4, 1)
    model_ema = ModelEma(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        for xb, yb in loader:
            loss = nn.functional.mse_loss(model(xb), yb)
            opt.zero_grad()
            loss.backward()
            opt.step()
            model_ema.update(model)
    weights = sum(p.sum().item() for p in model.parameters())
    ema = sum(p.sum().item() for p in model_ema.ema.parameters())
    os.write(1, f"weights {weights:.6f} ema {ema:.6f}\\n".encode())


if __name__ == "__main__":
    main()
'''


@pytest.mark.parametrize(
    ("copy", "copied"),
    [
        ("deepcopy(model)", "deepcopy(model.module)"),
        ("deepcopy(model).eval()", "deepcopy(model.module).eval()"),  # YOLOv5's ModelEMA
        ("torch.optim.swa_utils.AveragedModel(model)", "torch.optim.swa_utils.AveragedModel(model.module)"),
    ],
    ids=["deepcopy", "deepcopy-eval", "averaged-model"],
)
def test_a_frozen_copy_is_no_freeze_of_the_model(tmp_path: Path, copy: str, copied: str) -> None:
    migrated, report, code = migrate_script(tmp_path, PROGRAM.replace("COPY", copy))
    assert code == 0 and "0 item(s) need a human" in report, report
    assert "    model = DistributedDataParallel(model, device_ids=runtime.device_ids())\n    model_ema = ModelEma(model)\n" in migrated, migrated
    assert f"self.ema = {copied}" in migrated, migrated


def test_a_freeze_of_the_model_itself_in_the_object_stays_a_review(tmp_path: Path) -> None:
    """``self.ema = model`` keeps the model itself: its freeze is the model's, and no place is right for the wrap."""
    migrated, report, code = migrate_script(tmp_path, PROGRAM.replace("COPY", "model"))
    assert "changes which of its parameters require gradients" in report, report


@pytest.mark.distributed
def test_the_replicas_and_their_averages_stay_alike_under_torchrun(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    from launch import run_torchrun

    migrate_script(tmp_path, PROGRAM.replace("COPY", "deepcopy(model)"))
    launch = run_torchrun(tmp_path / "train.py", nproc_per_node=2, cwd=tmp_path, timeout=120)
    found = re.findall(r"weights (-?\d+\.\d+) ema (-?\d+\.\d+)", launch.output)
    assert len(found) == 2 and found[0] == found[1], launch.output


FROZEN_COPY_AFTER_THE_WRAP = """
import copy

import torch
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

net = nn.Linear(2, 2)
COPY
model = DDP(WRAPPED)
ema = copy.deepcopy(model.module).eval()
for p in ema.parameters():
    p.requires_grad_(False)
frozen = copy.deepcopy(model.module)
frozen.requires_grad_(False)
FREEZE
model(torch.randn(2, 2)).sum().backward()
"""


def _requires_grad_lines(source: str) -> list[int]:
    from ddp_migrate.codemods.base import Options
    from ddp_migrate.engine import process
    from ddp_migrate.registry import all_rules

    result = process("train.py", source.encode(), all_rules(), Options(), fix=False)
    return [f.line for f in result.findings if f.code == "DDP042"]


def test_a_copy_frozen_after_the_wrap_is_no_change_of_the_wrapped_model() -> None:
    """A trial's EMA (``ema = copy.deepcopy(unwrap(model)).eval()`` after the wrap, then its parameters frozen)
    was a review item: a copy's parameters are its own. A copy that the wrap takes is the wrapped model."""
    alone = FROZEN_COPY_AFTER_THE_WRAP.replace("COPY", "").replace("WRAPPED", "net").replace("FREEZE", "")
    assert _requires_grad_lines(alone) == []
    wrapped = FROZEN_COPY_AFTER_THE_WRAP.replace("COPY", "m = copy.deepcopy(net)").replace("WRAPPED", "m")
    wrapped = wrapped.replace("FREEZE", "for q in m.parameters():\n    q.requires_grad = False")
    lines = wrapped.splitlines()
    assert _requires_grad_lines(wrapped) == [lines.index("    q.requires_grad = False") + 1]


EMA_MODULE = '''
import torch


class ExponentialMovingAverage(torch.optim.swa_utils.AveragedModel):
    def __init__(self, model, decay):
        super().__init__(model, multi_avg_fn=torch.optim.swa_utils.get_ema_multi_avg_fn(decay))
'''

EMA_SUBCLASS_TRAIN = '''
import os
import sys

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

from ema import ExponentialMovingAverage


def main():
    torch.manual_seed(0)
    loader = DataLoader(TensorDataset(torch.randn(64, 4), torch.randn(64, 1)), batch_size=8, shuffle=True)
    model = nn.Linear(4, 1)
    model_ema = ExponentialMovingAverage(model, 0.9)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    if len(sys.argv) > 1:
        checkpoint = torch.load(sys.argv[1])
        model.load_state_dict(checkpoint["model"])
        model_ema.load_state_dict(checkpoint["ema"])
    for epoch in range(2):
        for xb, yb in loader:
            loss = nn.functional.mse_loss(model(xb), yb)
            opt.zero_grad()
            loss.backward()
            opt.step()
            model_ema.update_parameters(model)
    torch.save({"model": model.state_dict(), "ema": model_ema.state_dict()}, "checkpoint.pt")
    os.write(1, b"resumed and saved\\n")


if __name__ == "__main__":
    main()
'''


def test_an_ema_class_derived_from_averaged_model_copies_the_model_itself(tmp_path: Path) -> None:
    """A trial's crash: torchvision's ``ExponentialMovingAverage(AveragedModel)`` was handed the DDP wrapper, so
    its keys became ``module.module.*``: resuming from the single-GPU program's checkpoint failed (missing keys),
    and the original could not load the migrated program's checkpoint either; the report said nothing."""
    pytest.importorskip("torch")
    from launch import run_python

    (tmp_path / "ema.py").write_text(EMA_MODULE)
    (tmp_path / "train.py").write_text(EMA_SUBCLASS_TRAIN)
    original = tmp_path / "original.py"
    original.write_text(EMA_SUBCLASS_TRAIN)
    run_python(original, cwd=tmp_path, timeout=120)  # the single-GPU program's checkpoint
    (tmp_path / "checkpoint.pt").rename(tmp_path / "old.pt")
    migrated, report, code = migrate_script(tmp_path, EMA_SUBCLASS_TRAIN)
    assert "    model_ema = ExponentialMovingAverage(model.module, 0.9)\n" in migrated, migrated
    assert code == 0, report
    resumed = run_python(tmp_path / "train.py", "old.pt", cwd=tmp_path, timeout=120)
    assert "resumed and saved" in resumed.output, resumed.output
    again = run_python(original, "checkpoint.pt", cwd=tmp_path, timeout=120)  # the original reads the new one
    assert "resumed and saved" in again.output, again.output


TIMM_V1_EMA = '''import torch
import torch.nn as nn
import torch.nn.functional as F
from copy import deepcopy
from torch.utils.data import DataLoader, TensorDataset


class ModelEma:
    def __init__(self, model, decay=0.9):
        self.ema = deepcopy(model)
        self.decay = decay
        self.ema_has_module = hasattr(self.ema, "module")
        for p in self.ema.parameters():
            p.requires_grad_(False)

    def update(self, model):
        needs_module = hasattr(model, "module") and not self.ema_has_module
        with torch.no_grad():
            msd = model.state_dict()
            for k, ema_v in self.ema.state_dict().items():
                if needs_module:
                    k = "module." + k
                ema_v.copy_(ema_v * self.decay + (1.0 - self.decay) * msd[k].detach())


def main():
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(64, 10), torch.randint(0, 2, (64,)))
    loader = DataLoader(data, batch_size=16, shuffle=False)
    model = nn.DataParallel(nn.Linear(10, 2))
    model_ema = ModelEma(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        for xb, yb in loader:
            loss = F.cross_entropy(model(xb), yb)
            opt.zero_grad()
            loss.backward()
            opt.step()
            model_ema.update(model)
    torch.save(model_ema.ema.state_dict(), "final.pt")


if __name__ == "__main__":
    main()
'''


def test_state_dict_where_the_code_asks_whether_it_holds_a_wrapper_is_left_as_written(tmp_path: Path) -> None:
    """timm's ``ModelEma`` (v1) prefixes its copy's keys with ``module.`` where ``hasattr(model, "module")``: reaching
    the model through ``.module`` there made every update a ``KeyError: 'module.weight'`` (0 items for a human)."""
    migrated, report, _ = migrate_script(tmp_path, TIMM_V1_EMA)
    assert "            msd = model.state_dict()\n" in migrated, migrated
    assert "self.ema = deepcopy(model.module)" in migrated
    assert "0 item(s) need a human" in report


@pytest.mark.distributed
def test_the_timm_v1_average_equals_the_originals_under_torchrun(tmp_path: Path) -> None:
    import torch

    from migrated import saved_states

    original, runs = saved_states(tmp_path, TIMM_V1_EMA)
    for state in runs:
        assert state.keys() == original.keys()
        for key in original:
            assert torch.allclose(state[key], original[key], atol=1e-6), key
