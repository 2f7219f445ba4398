"""Runners whose hooks run the backward pass (mmcv-style: ``for h in self.hooks: h.after_train_iter(self)``).

Two migrations of such runners trained without DDP while the report said nothing needed a human:

- the model's own ``train_step(batch)`` (its forward and loss) was reached through ``.module``: DDP's forward
  never ran, no gradient was all-reduced, and the ranks' weights drifted apart (checksums 1.672 and 1.961
  where the original ended at 1.793);
- hooks built by a registry from config dicts stepped an optimizer built the same way: no model was wrapped,
  and every process trained its own copy.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from ddp_migrate.cli import cli
from migrated import saved_states

RUNNER = """import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 2)

    def forward(self, x):
        return self.fc(x)

    def train_step(self, batch):
        x, y = batch
        return {"loss": F.cross_entropy(self(x), y)}


class OptimizerHook:
    def after_train_iter(self, runner):
        runner.optimizer.zero_grad()
        runner.outputs["loss"].backward()
        runner.optimizer.step()


class Runner:
    def __init__(self, model, optimizer, loader, hooks):
        self.model = model
        self.optimizer = optimizer
        self.loader = loader
        self.hooks = hooks

    def run(self, epochs):
        for epoch in range(epochs):
            for batch in self.loader:
                self.outputs = self.model.train_step(batch)
                for hook in self.hooks:
                    hook.after_train_iter(self)


def main():
    data = TensorDataset(torch.randn(64, 4), torch.randint(0, 2, (64,)))
    model = Net().cuda()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    Runner(model, optimizer, DataLoader(data, batch_size=16, shuffle=True), [OptimizerHook()]).run(2)
    torch.save(model.state_dict(), "final.pt")


if __name__ == "__main__":
    main()
"""


def _migrate(folder: Path, entry: str) -> str:
    result = CliRunner().invoke(cli, [str(folder / entry)])
    assert result.exit_code in (0, 1), result.output
    return result.output


def test_a_model_method_whose_output_a_hook_backpropagates_runs_through_ddps_forward(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(RUNNER)
    report = _migrate(tmp_path, "train.py")
    assert "DDP008 line 37: train_step() runs through DDP's forward (runtime.call_through_ddp)" in report, report
    assert "0 item(s) need a human" in report
    migrated = (tmp_path / "train.py").read_text()
    assert 'self.outputs = runtime.call_through_ddp(self.model, "train_step", batch)' in migrated, migrated
    assert ".module.train_step" not in migrated


@pytest.mark.distributed
def test_the_routed_method_trains_the_originals_weights_under_torchrun(tmp_path: Path) -> None:
    """The runner's weights after two epochs: 2 processes (each half of every batch, gradients all-reduced
    through DDP's forward) and one process equal the original's (through ``.module`` they drifted apart)."""
    source = RUNNER.replace("Net().cuda()", "Net()").replace("shuffle=True", "shuffle=False").replace(
        "def main():\n", "def main():\n    torch.manual_seed(0)\n"
    )
    original, (torchrun, alone) = saved_states(tmp_path, source)
    for state in (torchrun, alone):
        assert state.keys() == original.keys()
        for key in original:
            assert torch.allclose(state[key], original[key], atol=1e-6), key


def test_the_same_method_under_no_grad_is_reached_through_module(tmp_path: Path) -> None:
    evaluating = RUNNER.replace(
        "                self.outputs = self.model.train_step(batch)\n",
        "                with torch.no_grad():\n                    self.outputs = self.model.train_step(batch)\n",
    )
    (tmp_path / "train.py").write_text(evaluating)
    report = _migrate(tmp_path, "train.py")
    assert "train_step() in the training step" not in report
    assert "self.model.module.train_step(batch)" in (tmp_path / "train.py").read_text()


def test_the_same_method_under_a_test_of_the_rank_is_left_to_a_human(tmp_path: Path) -> None:
    """Through DDP's forward on rank 0 alone, rank 0 would wait for the others at the all-reduce (a hang);
    through .module no gradient is reduced: neither is right, so the step is a review item."""
    guarded = RUNNER.replace("import torch\n", "import torch\nimport torch.distributed as dist\n", 1).replace(
        "                self.outputs = self.model.train_step(batch)\n",
        "                if self.rank == 0:\n                    self.outputs = self.model.train_step(batch)\n",
    ).replace(
        "        self.hooks = hooks\n",
        "        self.hooks = hooks\n        self.rank = dist.get_rank() if dist.is_initialized() else 0\n",
    )
    (tmp_path / "train.py").write_text(guarded)
    report = _migrate(tmp_path, "train.py")
    assert "train.py:45:36: DDP008 train_step() in the training step runs under a test of the rank" in report, report
    assert "1 item(s) need a human" in report
    migrated = (tmp_path / "train.py").read_text()
    assert "call_through_ddp" not in migrated
    assert "self.outputs = self.model.train_step(batch)" in migrated
    assert "# TODO(ddp-migrate): this model method runs the training step's forward on the processes a test" in migrated


HOOKS = """class OptimizerHook:
    def after_train_iter(self, runner):
        runner.optimizer.zero_grad()
        runner.outputs["loss"].backward()
        runner.optimizer.step()
"""
REGISTRY = """import torch
from torch.utils.data import DataLoader

from hooks import OptimizerHook

REGISTRY = {"SGD": torch.optim.SGD, "DataLoader": DataLoader, "OptimizerHook": OptimizerHook}


def build_from_cfg(cfg, default_args=None):
    args = dict(cfg)
    cls = REGISTRY[args.pop("type")]
    for key, value in (default_args or {}).items():
        args.setdefault(key, value)
    return cls(**args)
"""
BUILT_RUNNER = """import torch.nn.functional as F

from registry import build_from_cfg


class Runner:
    def __init__(self, model, optimizer, loader, hooks):
        self.model, self.optimizer, self.loader = model, optimizer, loader
        self.hooks = [build_from_cfg(hook) for hook in hooks]

    def run(self, epochs):
        for epoch in range(epochs):
            for x, y in self.loader:
                self.outputs = {"loss": F.cross_entropy(self.model(x), y)}
                for hook in self.hooks:
                    hook.after_train_iter(self)
"""
BUILT_TRAIN = """import torch
import torch.nn as nn
from torch.utils.data import TensorDataset

from registry import build_from_cfg
from runner import Runner


def main():
    data = TensorDataset(torch.randn(64, 4), torch.randint(0, 2, (64,)))
    model = nn.Linear(4, 2)
    loader = build_from_cfg({"type": "DataLoader", "batch_size": 16}, {"dataset": data})
    optimizer = build_from_cfg({"type": "SGD", "lr": 0.1}, {"params": model.parameters()})
    Runner(model, optimizer, loader, [{"type": "OptimizerHook"}]).run(2)


if __name__ == "__main__":
    main()
"""


def test_a_backward_in_a_hook_built_from_a_config_is_left_to_a_human(tmp_path: Path) -> None:
    for name, text in (("hooks.py", HOOKS), ("registry.py", REGISTRY), ("runner.py", BUILT_RUNNER), ("train.py", BUILT_TRAIN)):
        (tmp_path / name).write_text(text)
    report = _migrate(tmp_path, "train.py")
    assert "hooks.py:5:9: DDP011 `runner.outputs[\"loss\"].backward()` trains a model, but no optimizer" in report
    assert "give its DataLoader a DistributedSampler" in report
    assert "0 item(s) need a human" not in report


def test_a_loader_built_from_a_config_beside_a_wrapped_model_is_left_to_a_human(tmp_path: Path) -> None:
    """The optimizer built directly (the model is wrapped), the loader by the registry: every process trained on
    all the data (16 of 16 iterations per epoch on each of 2 ranks) and nothing was reported."""
    train = BUILT_TRAIN.replace(
        'optimizer = build_from_cfg({"type": "SGD", "lr": 0.1}, {"params": model.parameters()})',
        "optimizer = torch.optim.SGD(model.parameters(), lr=0.1)",
    )
    assert "torch.optim.SGD(model.parameters()" in train
    for name, text in (("hooks.py", HOOKS), ("registry.py", REGISTRY), ("runner.py", BUILT_RUNNER), ("train.py", train)):
        (tmp_path / name).write_text(text)
    report = _migrate(tmp_path, "train.py")
    assert "DDP011 line" in report and "model wrapped in DistributedDataParallel" in report, report
    assert "DDP040 the training batches come from `self.loader` (in module runner)" in report, report
