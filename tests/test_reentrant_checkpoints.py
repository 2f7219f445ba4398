"""A model that checkpoints one block the reentrant way more than once per step (weights shared across depth).

Each reentrant checkpoint runs a backward pass of its own, so DDP's hooks mark the shared block's parameters
ready once per checkpoint and DDP stops at the first ``backward()`` ("Expected to mark a variable ready only
once"). A trial's migrated program crashed so while the report said nothing. The wrap now passes
``static_graph=True`` where the model's graph is the same on every step (DDP052), and leaves a review line
where it is not.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from launch import run_python, run_torchrun
from migrated import lint_findings, migrate_script

PROGRAM = '''
import torch
import torch.nn as nn
from torch.utils.checkpoint import checkpoint
from torch.utils.data import DataLoader, TensorDataset


class Shared(nn.Module):
    def __init__(self, depth=3):
        super().__init__()
        self.inp = nn.Linear(8, 16)
        self.block = nn.Sequential(nn.Linear(16, 16), nn.Tanh())
        self.blocks = nn.ModuleList(nn.Linear(16, 16) for _ in range(depth))
        self.depth = depth
        self.out = nn.Linear(16, 1)

    def forward(self, x):
        h = self.inp(x)
FORWARD
        return self.out(h)


def main():
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(128, 8), torch.randn(128, 1))
    loader = DataLoader(data, batch_size=32, shuffle=False)
    model = WRAPShared()).to("cpu")
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    for epoch in range(2):
        for x, y in loader:
            loss = nn.functional.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
    torch.save(model.state_dict(), "final.pt")


if __name__ == "__main__":
    main()
'''

#: Forward bodies that run ``self.block`` through more than one reentrant checkpoint per step.
REENTERED = {
    "loop": "        for _ in range(self.depth):\n            h = checkpoint(self.block, h, use_reentrant=True)\n",
    "default-flag": "        for _ in range(self.depth):\n            h = checkpoint(self.block, h)\n",
    "twice": "        h = checkpoint(self.block, h, use_reentrant=True)\n        h = checkpoint(self.block, h, use_reentrant=True)\n",
    "and-plainly": "        h = checkpoint(self.block, h, use_reentrant=True)\n        h = self.block(h)\n",
    "while": "        i = 0\n        while i < self.depth:\n            h = checkpoint(self.block, h, use_reentrant=True)\n            i += 1\n",
    "lambda": "        for _ in range(self.depth):\n            h = checkpoint(lambda t: self.block(t) + t, h, use_reentrant=True)\n",
    "outer-loop": "        for _ in range(2):\n            for block in self.blocks:\n                h = checkpoint(block, h, use_reentrant=True)\n",
}

#: Forward bodies whose reentrant checkpoints each reach parameters of their own, or that record one graph.
ONCE_EACH = {
    "each-block": "        for block in self.blocks:\n            h = checkpoint(block, h, use_reentrant=True)\n",
    "indexed": "        for i in range(self.depth):\n            h = checkpoint(self.blocks[i], h, use_reentrant=True)\n",
    "non-reentrant": "        for _ in range(self.depth):\n            h = checkpoint(self.block, h, use_reentrant=False)\n",
    "either-branch": "        if self.depth > 2:\n            h = checkpoint(self.block, h, use_reentrant=True)\n        else:\n            h = checkpoint(self.block, h, use_reentrant=True)\n",
}


def program(forward: str, wrap: str = "(") -> str:
    """The training program with this body of ``Shared.forward`` and this wrap around the model's
    construction (``nn.DataParallel(``)."""
    return PROGRAM.replace("FORWARD\n", forward).replace("WRAP", wrap)


@pytest.mark.parametrize("forward", REENTERED.values(), ids=REENTERED.keys())
def test_the_wrap_of_a_model_that_reenters_a_block_passes_static_graph(tmp_path: Path, forward: str) -> None:
    migrated, report, code = migrate_script(tmp_path, program(forward))
    assert code == 0, report
    assert "static_graph=True" in migrated
    assert "DDP052" in report and "Shared.forward() checkpoints" in report
    assert "0 item(s) need a human" in report


@pytest.mark.parametrize("forward", ONCE_EACH.values(), ids=ONCE_EACH.keys())
def test_a_block_checkpointed_once_per_step_needs_no_static_graph(tmp_path: Path, forward: str) -> None:
    migrated, report, code = migrate_script(tmp_path, program(forward))
    assert code == 0, report
    assert "DistributedDataParallel(" in migrated
    assert "static_graph" not in migrated and "DDP052" not in report


def test_a_data_parallel_wrap_becomes_a_static_graph(tmp_path: Path) -> None:
    migrated, report, _ = migrate_script(tmp_path, program(REENTERED["loop"], "nn.DataParallel("))
    assert "static_graph=True" in migrated and "DataParallel(Shared()" not in migrated.replace("DistributedDataParallel", "")


def test_a_graph_that_changes_between_steps_is_left_for_review(tmp_path: Path) -> None:
    layerdrop = (
        "        for block in self.blocks:\n"
        "            if self.training and torch.rand(()) < 0.2:\n"
        "                continue\n"
        "            h = block(h)\n"
    )
    migrated, report, _ = migrate_script(tmp_path, program(REENTERED["loop"] + layerdrop))
    wrap = next(line for line in migrated.splitlines() if "DistributedDataParallel(model" in line)
    assert "static_graph" not in wrap
    assert "# TODO(ddp-migrate): Shared.forward() checkpoints `self.block`" in migrated
    assert "use_reentrant=False" in migrated
    assert "1 item(s) need a human" in report


WRAPPED = '''
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.checkpoint import checkpoint


class Tied(nn.Module):
    def __init__(self):
        super().__init__()
        self.cell = nn.GRUCell(8, 8)

    def forward(self, xs):
        h = xs[0]
        for x in xs:
            h = checkpoint(self.cell, x, h)
        return h


model = DDP(Tied().to(device), device_ids=[local_rank]ARGS)
for xs in batches:
    model(xs).sum().backward()
'''


@pytest.mark.parametrize(
    ("args", "found"),
    [("", True), (", static_graph=False", True), (", static_graph=True", False), (", **ddp_options", False)],
    ids=["plain", "static-false", "static-true", "spread-options"],
)
def test_lint_reports_an_existing_wrap_of_a_reentered_block(tmp_path: Path, args: str, found: bool) -> None:
    lines = lint_findings(tmp_path, WRAPPED.replace("ARGS", args), "DDP052")
    assert any("DDP052" in line and "Tied.forward() checkpoints `self.cell`" in line for line in lines) is found, lines


def test_lint_fix_turns_static_graph_on(tmp_path: Path) -> None:
    from click.testing import CliRunner
    from ddp_migrate.cli import cli

    path = tmp_path / "train.py"
    path.write_text(WRAPPED.replace("ARGS", ", static_graph=False"))
    CliRunner().invoke(cli, ["lint", "--fix", "--select", "DDP052", str(path)])
    assert "device_ids=[local_rank], static_graph=True)" in path.read_text()


@pytest.mark.e2e
@pytest.mark.distributed
def test_the_migrated_model_trains_under_torchrun_as_the_original_did(tmp_path: Path) -> None:
    import torch

    source = program(REENTERED["loop"])
    original, migrated = tmp_path / "original", tmp_path / "migrated"
    original.mkdir()
    migrated.mkdir()
    (original / "train.py").write_text(source)
    migrate_script(migrated, source)
    run_python(original / "train.py", cwd=original, timeout=120)
    run_torchrun(migrated / "train.py", nproc_per_node=2, cwd=migrated, timeout=120)
    before = torch.load(original / "final.pt", weights_only=True)
    after = torch.load(migrated / "final.pt", weights_only=True)
    assert before.keys() == after.keys()
    for key in before:
        torch.testing.assert_close(after[key], before[key], rtol=1e-5, atol=1e-6)
