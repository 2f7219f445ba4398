"""DDP011: a trainable tensor of no module handed to an optimizer beside the model DDP wraps.

A trial's silent wrong: ``log_temperature = nn.Parameter(torch.zeros(1))`` trained with the model by one
optimizer (``SGD(list(model.parameters()) + [log_temperature])``). DDP averages the gradients of the module it
wraps only: after the migration every process stepped its own temperature with its own shard's gradient, the
copies drifted apart, and the report said nothing needed a human. Such a tensor is now left to a human.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from ddp_migrate.cli import cli

PROGRAM = '''
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 3)
        bias = nn.Parameter(torch.zeros(3))
        self.register_parameter("extra_bias", bias)

    def forward(self, x):
        return self.fc(x) + self.extra_bias


def main():
    data = TensorDataset(torch.randn(64, 4), torch.randint(0, 3, (64,)))
    loader = DataLoader(data, batch_size=8, shuffle=True)
    model = Net()
    MADE
    optimizer = torch.optim.SGD(PARAMS, lr=0.1)
    for epoch in range(2):
        for x, y in loader:
            loss = nn.functional.cross_entropy(model(x) / scale, y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()


if __name__ == "__main__":
    main()
'''

REVIEW = "the optimizer trains `scale`, a parameter of no module that DistributedDataParallel wraps"


def _migrate(tmp_path: Path, made: str, params: str) -> tuple[str, str]:
    path = tmp_path / "train.py"
    path.write_text(PROGRAM.replace("MADE", made).replace("PARAMS", params))
    report = CliRunner().invoke(cli, [str(path)], catch_exceptions=False).output
    return path.read_text(), report


@pytest.mark.parametrize(
    ("made", "params"),
    [
        ("scale = nn.Parameter(torch.ones(1))", "list(model.parameters()) + [scale]"),
        ("scale = torch.ones(1, requires_grad=True)", "[*model.parameters(), scale]"),
        ("scale = nn.Parameter(torch.ones(1))", '[{"params": model.parameters()}, {"params": [scale], "lr": 0.01}]'),
        ("scale = nn.Parameter(torch.ones(1))\n    groups = [{'params': model.parameters()}]\n    groups.append({'params': [scale]})", "groups"),
        # A trial: added to the optimizer after it was built (log-variance weights of a multi-task loss)
        ("scale = nn.Parameter(torch.ones(1))", "model.parameters())\n    optimizer.add_param_group({'params': [scale]}"),
    ],
    ids=["in-a-list", "requires-grad-tensor", "param-group", "through-a-name", "added-param-group"],
)
def test_a_parameter_of_no_module_is_left_to_a_human(tmp_path: Path, made: str, params: str) -> None:
    migrated, report = _migrate(tmp_path, made, params)
    assert "1 item(s) need a human" in report and REVIEW in report, report
    assert f"# TODO(ddp-migrate): {REVIEW}" in migrated, migrated
    assert "model = DistributedDataParallel(model" in migrated, migrated


@pytest.mark.parametrize(
    ("made", "params"),
    [
        ("model.scale = nn.Parameter(torch.ones(1))\n    scale = model.scale", "model.parameters()"),
        ("scale = torch.ones(1)", "model.parameters()"),
    ],
    ids=["registered-on-the-model", "not-trained"],
)
def test_a_parameter_the_model_owns_needs_no_review(tmp_path: Path, made: str, params: str) -> None:
    """Assigned to a module's attribute, or registered in a module's method, a parameter is the module's own."""
    migrated, report = _migrate(tmp_path, made, params)
    assert "0 item(s) need a human" in report and "parameter of no module" not in report, report


AVERAGED_BY_HAND = PROGRAM.replace("import torch\n", "import torch\nimport torch.distributed as dist\n", 1).replace(
    "            loss.backward()\n",
    "            loss.backward()\n            dist.all_reduce(scale.grad)\n            scale.grad /= dist.get_world_size()\n",
)


def test_a_parameter_whose_gradient_is_averaged_by_hand_needs_no_review(tmp_path: Path) -> None:
    """What the review asks for, done already (``dist.all_reduce(scale.grad)``): nothing to review."""
    path = tmp_path / "train.py"
    path.write_text(AVERAGED_BY_HAND.replace("MADE", "scale = nn.Parameter(torch.ones(1))").replace("PARAMS", "list(model.parameters()) + [scale]"))
    report = CliRunner().invoke(cli, ["lint", "--select", "DDP011", str(path)], catch_exceptions=False).output
    assert "parameter of no module" not in report, report


def test_a_parameter_list_beside_the_model_is_not_wrapped(tmp_path: Path) -> None:
    """``log_vars = nn.ParameterList([...])`` in the optimizer beside the model (a trial's uncertainty-weighted
    multi-task loss): it was wrapped in DDP (``for v in log_vars`` then failed: the wrapper is not iterable, and
    DDP's forward never ran on it). It runs no forward: it stays as written, and its parameters are reviewed."""
    migrated, report = _migrate(
        tmp_path,
        "scale = nn.ParameterList([nn.Parameter(torch.ones(1))])",
        "list(model.parameters()) + list(scale.parameters())",
    )
    assert "DistributedDataParallel(scale" not in migrated, migrated
    assert "model = DistributedDataParallel(model" in migrated
    assert "a parameter of no module that DistributedDataParallel wraps" in report, report
