"""A training loader given ``sampler=RandomSampler(ds)`` or ``sampler=SequentialSampler(ds)`` of its own data set:
``shuffle=True`` / ``shuffle=False`` spelled out, sharded like them.

Such a loader got a review ("its own sampler is not sharded: shard it by hand") where the migration knows the
answer: a ``DistributedSampler`` shuffling as the sampler did, in its place, with ``set_epoch``. A sampler that
draws otherwise (``replacement=True``, ``num_samples=``, a weighted one) is still left to a human.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from migrated import migrate_script, saved_states

PROGRAM = """import torch
import torch.nn as nn
from torch.utils.data import DataLoader, RandomSampler, SequentialSampler, TensorDataset

torch.manual_seed(0)
ds = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
SAMPLER_LINE
loader = DataLoader(ds, batch_size=8, sampler=SAMPLER)
model = nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for epoch in range(2):
    for x, y in loader:
        loss = nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
torch.save(model.state_dict(), "final.pt")
"""


def program(sampler: str, held: bool = False) -> str:
    if held:
        return PROGRAM.replace("SAMPLER_LINE", f"sampler = {sampler}").replace("SAMPLER)", "sampler)")
    return PROGRAM.replace("SAMPLER_LINE\n", "").replace("SAMPLER)", f"{sampler})")


@pytest.mark.parametrize("held", [False, True])
def test_a_random_sampler_of_the_data_set_becomes_a_shuffling_distributed_sampler(tmp_path: Path, held: bool) -> None:
    text, report, _ = migrate_script(tmp_path, program("RandomSampler(ds)", held))
    assert "sampler=DistributedSampler(ds, shuffle=True)" in text and "loader.sampler.set_epoch(epoch)" in text, report + text
    assert "in place of its RandomSampler" in report and "review" not in report, report
    assert "RandomSampler" not in text.split("\n", 6)[3] or held, text  # (the import line drops it where unused)


@pytest.mark.parametrize("sampler", ["RandomSampler(ds, replacement=True)", "RandomSampler(ds, num_samples=32)", "RandomSampler(other)"])
def test_a_sampler_that_draws_otherwise_is_left_to_a_human(tmp_path: Path, sampler: str) -> None:
    text, report, _ = migrate_script(tmp_path, program(sampler).replace("torch.manual_seed(0)\n", "torch.manual_seed(0)\nother = ds\n"))
    assert "review" in report and "DDP005" in report and "DistributedSampler(" not in text, report


def test_a_sequential_sampler_trains_as_the_original_under_torchrun(tmp_path: Path) -> None:
    # SequentialSampler -> DistributedSampler(shuffle=False): the ranks' halves of each batch make the original's.
    original, (distributed, plain) = saved_states(tmp_path, program("SequentialSampler(ds)"))
    assert "sampler=DistributedSampler(ds, shuffle=False)" in (tmp_path / "migrated" / "train.py").read_text()
    for name, weight in original.items():
        assert torch.allclose(distributed[name], weight, atol=1e-6), name
        assert torch.allclose(plain[name], weight, atol=1e-6), name


def test_a_sampler_of_a_data_set_the_name_no_longer_holds_is_left_to_a_human(tmp_path: Path) -> None:
    """The same text is not the same data set: ``ds`` is rebound between the sampler and the loader."""
    source = program("RandomSampler(ds)", held=True).replace(
        "\nloader = DataLoader(", "\nds = TensorDataset(torch.randn(32, 4), torch.randn(32, 1))\nloader = DataLoader("
    )
    text, report, _ = migrate_script(tmp_path, source)
    assert "review" in report and "DDP005" in report and "DistributedSampler(" not in text, report + text
