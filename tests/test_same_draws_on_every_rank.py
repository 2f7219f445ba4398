"""DDP051: noise drawn per sample from a random state every rank seeds alike.

A trial's GAN seeded torch with ``torch.manual_seed(0)`` and drew ``torch.randn(real.size(0), nz)`` in the
loop: after the migration every rank drew the same noise for its share of the batch (each global batch held
2 copies of 8 noise vectors; weights 9.620 against the original's 9.651), and the report said nothing.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from migrated import migrate_script

GAN = '''
import os

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


def main():
    SEED
    netG = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 8))
    netD = nn.Sequential(nn.Linear(8, 16), nn.LeakyReLU(0.2), nn.Linear(16, 1))
    loader = DataLoader(TensorDataset(torch.randn(128, 8) + 2), batch_size=16)
    optG = torch.optim.Adam(netG.parameters(), lr=1e-3)
    optD = torch.optim.Adam(netD.parameters(), lr=1e-3)
    for epoch in range(2):
        for (real,) in loader:
            DRAW
            errD = netD(fake.detach()).mean() - netD(real).mean()
            optD.zero_grad()
            errD.backward()
            optD.step()
            errG = -netD(fake).mean()
            optG.zero_grad()
            errG.backward()
            optG.step()


if __name__ == "__main__":
    main()
'''

PER_SAMPLE = {
    "noise-vectors": "fake = netG(torch.randn(real.size(0), 4))",
    "through-a-name": "b_size = real.size(0)\n            fake = netG(torch.randn(b_size, 4))",
    "like-the-batch": "fake = netG(torch.randn_like(real[:, :4]))",
    "time-steps": "t = torch.randint(0, 10, (real.shape[0],))\n            fake = netG(real[:, :4] * t[:, None])",
    # A new generator starts from the same fixed seed in every process (67280421310721): a trial's miss.
    "fresh-generator": "fake = netG(torch.randn(real.size(0), 4, generator=torch.Generator()))",
    "masks": "fake = netG(real[:, :4] * torch.bernoulli(torch.full_like(real[:, :4], 0.5)))",
    "filled": "fake = netG(torch.empty(real.size(0), 4).normal_())",
    "distribution": "fake = netG(torch.distributions.Normal(real[:, :4], 1.0).rsample())",
    "distribution-sample-shape": "fake = netG(torch.distributions.Normal(0.0, 1.0).sample((real.size(0), 4)))",
}


@pytest.mark.parametrize("name", sorted(PER_SAMPLE))
def test_noise_per_sample_from_a_state_seeded_alike_is_reviewed(tmp_path: Path, name: str) -> None:
    migrated, report, _ = migrate_script(tmp_path, GAN.replace("SEED", "torch.manual_seed(0)").replace("DRAW", PER_SAMPLE[name]))
    assert "DDP051" in report and "every rank draws the same numbers" in report, report


@pytest.mark.parametrize(
    ("seed", "draw"),
    [
        ("pass", PER_SAMPLE["noise-vectors"]),  # unseeded: every rank draws its own
        ("torch.manual_seed(0)", "fake = netG(torch.randn(16, 4)) if torch.rand(1).item() < 2 else None"),  # not per sample
        (
            "gen = torch.Generator()\n    gen.manual_seed(1000 + int(os.environ.get('RANK', '0')))",
            "fake = netG(torch.randn(real.size(0), 4, generator=gen))",
        ),
        ("pass", "fake = netG(torch.randn(real.size(0), 4, generator=gen_of_unknown_origin))"),
    ],
    ids=["unseeded", "fixed-size-and-batch-decision", "generator-seeded-per-rank", "generator-not-made-here"],
)
def test_draws_that_differ_between_ranks_or_decide_for_the_batch_are_fine(tmp_path: Path, seed: str, draw: str) -> None:
    migrated, report, _ = migrate_script(tmp_path, GAN.replace("SEED", seed).replace("DRAW", draw))
    assert "DDP051" not in report, report


def test_a_seed_per_rank_is_fine(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from ddp_migrate.cli import cli

    migrate_script(tmp_path, GAN.replace("SEED", "torch.manual_seed(0)").replace("DRAW", PER_SAMPLE["noise-vectors"]))
    migrated = (tmp_path / "train.py").read_text()
    reseeded = migrated.replace("    optG = torch.optim.Adam", "    torch.manual_seed(1 + runtime.rank())\n    optG = torch.optim.Adam", 1)
    assert reseeded != migrated
    (tmp_path / "train.py").write_text(reseeded)
    result = CliRunner().invoke(cli, ["lint", "--select", "DDP051", str(tmp_path / "train.py")])
    assert "DDP051" not in result.output, result.output


NUMPY_GAN = GAN.replace("import torch\n", "import numpy as np\nimport torch\n", 1)


@pytest.mark.parametrize(
    ("seed", "reported"),
    [("np.random.seed(0)", True), ("torch.manual_seed(0)", False), ("np.random.seed(1000 + int(os.environ.get('RANK', '0')))", False)],
    ids=["numpy-seeded-alike", "numpy-unseeded", "numpy-seeded-per-rank"],
)
def test_noise_per_sample_from_numpy_seeded_alike_is_reviewed(tmp_path: Path, seed: str, reported: bool) -> None:
    """A trial: ``z = torch.FloatTensor(np.random.normal(0, 1, (real.shape[0], nz)))`` after ``np.random.seed(0)``
    (the PyTorch-GAN scripts' noise) printed the same first noise value on both ranks, 0 items."""
    draw = "fake = netG(torch.FloatTensor(np.random.normal(0, 1, (real.shape[0], 4))))"
    _, report, _ = migrate_script(tmp_path, NUMPY_GAN.replace("SEED", seed).replace("DRAW", draw))
    assert ("numpy's random state, which every rank seeds alike" in report) is reported, report
    if reported:
        assert "np.random.seed(seed + runtime.rank())" in report


def test_a_numpy_draw_whose_bound_reads_the_batch_is_one_draw_for_the_step(tmp_path: Path) -> None:
    """A review: ``np.random.randint(0, real.size(1))`` (one column for the step) was read as per-sample noise."""
    draw = "col = np.random.randint(0, real.size(1))\n            fake = netG(real[:, :4] * col)"
    _, report, _ = migrate_script(tmp_path, NUMPY_GAN.replace("SEED", "np.random.seed(0)").replace("DRAW", draw))
    assert "DDP051" not in report, report


@pytest.mark.parametrize(
    "draw",
    [
        "(real,) = next(batches)",
        "try:\n                (real,) = next(batches)\n            except StopIteration:\n                batches = iter(loader)\n                (real,) = next(batches)",
    ],
    ids=["next", "next-restarted"],
)
def test_batches_drawn_with_next_are_this_ranks_share_too(tmp_path: Path, draw: str) -> None:
    """A trial's GAN and SimCLR drew their batches with ``next(it)`` of ``it = iter(loader)``: neither DDP051
    (the same noise on every rank) nor DDP050 (in-batch negatives) was raised, 0 items for a human, while the
    same bodies under ``for (real,) in loader:`` got both reviews."""
    source = GAN.replace("SEED", "torch.manual_seed(0)").replace("DRAW", PER_SAMPLE["noise-vectors"])
    source = source.replace("        for (real,) in loader:\n", f"        batches = iter(loader)\n        for step in range(8):\n            {draw}\n")
    source = source.replace("errD = netD(fake.detach()).mean() - netD(real).mean()", "h = netD[0](real)\n            errD = netD(fake.detach()).mean() - netD(real).mean() + (h @ h.t()).mean()")
    migrated, report, _ = migrate_script(tmp_path, source)
    assert "DistributedSampler" in migrated, migrated
    assert "DDP051" in report and "every rank draws the same numbers" in report, report
    assert "DDP050" in report and "multiplies the samples of this process's batch with each other" in report, report


@pytest.mark.parametrize(
    "loader",
    [
        "DataLoader(data, batch_size=16, sampler=torch.utils.data.SubsetRandomSampler(range(96)))",
        "DataLoader(data, batch_sampler=torch.utils.data.BatchSampler(torch.utils.data.RandomSampler(data), 16, False))",
    ],
    ids=["own-sampler", "own-batch-sampler"],
)
def test_noise_is_reviewed_where_the_loader_is_left_to_a_human_too(tmp_path: Path, loader: str) -> None:
    """A trial's DCGAN with a ``SubsetRandomSampler``: the loader gets a DDP005 TODO (shard it by hand), and DDP051
    was silent, so a user who shards the loader as told keeps the same noise on every rank. The batches of a
    training loader count whether it is sharded yet or not."""
    source = GAN.replace("SEED", "torch.manual_seed(0)").replace("DRAW", PER_SAMPLE["through-a-name"])
    source = source.replace(
        "loader = DataLoader(TensorDataset(torch.randn(128, 8) + 2), batch_size=16)",
        f"data = TensorDataset(torch.randn(128, 8) + 2)\n    loader = {loader}",
    )
    migrated, report, _ = migrate_script(tmp_path, source)
    assert "DDP005" in report and "DDP051" in report and "every rank draws the same numbers" in report, report


AUGMENTED = '''
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, Dataset


class Views(Dataset):
    def __init__(self):
        self.data = torch.randn(64, 4)

    def __len__(self):
        return len(self.data)

    def __getitem__(self, i):
        GETITEM

    def augment(self, x):
        return x + 0.1 * torch.randn_like(x)


def main():
    torch.manual_seed(0)
    loader = DataLoader(Views(), batch_size=8, shuffle=True)
    model = nn.Linear(4, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        for x in loader:
            opt.zero_grad()
            (model(x) - x).pow(2).mean().backward()
            opt.step()


if __name__ == "__main__":
    main()
'''


@pytest.mark.parametrize(
    "getitem",
    ["x = self.data[i]\n        return x + 0.1 * torch.randn_like(x)", "return self.augment(self.data[i])"],
    ids=["in-getitem", "through-a-helper-method"],
)
def test_an_augmentation_drawn_alike_is_noted_also_through_a_helper(tmp_path: Path, getitem: str) -> None:
    """A trial's SimCLR ``__getitem__`` returned ``self.augment(x)``: the note that each rank's k-th sample gets the
    same draw was given only for a draw written in ``__getitem__`` itself."""
    migrated, report, _ = migrate_script(tmp_path, AUGMENTED.replace("GETITEM", getitem))
    assert "note DDP051" in report and "draws its random augmentation (`torch.randn_like(x)`)" in report, report


DROPOUT = '''
import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset


def main():
    SEED
    loader = DataLoader(TensorDataset(torch.randn(64, 4), torch.randn(64, 1)), batch_size=8, shuffle=True)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), LAYER, nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        for x, y in loader:
            opt.zero_grad()
            F.mse_loss(model(x), y).backward()
            opt.step()


if __name__ == "__main__":
    main()
'''


@pytest.mark.parametrize(
    ("seed", "layer", "noted"),
    [
        ("torch.manual_seed(0)", "nn.Dropout(0.1)", True),
        ("torch.manual_seed(0)", "nn.Dropout(p=0.0)", False),
        ("pass", "nn.Dropout(0.1)", False),
        ("torch.manual_seed(1337 + int(os.environ.get('RANK', '0')))", "nn.Dropout(0.1)", False),
    ],
    ids=["seeded-alike", "rate-zero", "unseeded", "seeded-per-rank"],
)
def test_dropout_seeded_alike_is_noted(tmp_path: Path, seed: str, layer: str, noted: bool) -> None:
    """A trial measured it: with torch seeded alike, each rank's k-th sample gets the same dropout mask (one process
    0.4866, two -0.6988; with Dropout(0.0) -0.4285 both ways). A note, not an item: the advice is a seed per rank."""
    _, report, _ = migrate_script(tmp_path, DROPOUT.replace("SEED", seed).replace("LAYER", layer))
    assert ("draws its masks from torch's random state, which every rank seeds alike" in report) is noted, report
    assert "0 item(s) need a human" in report, report


def test_an_item_picked_by_the_rank_is_no_data_of_its_own(tmp_path: Path) -> None:
    """``device_ids[local_rank]`` picks a device, not a part of the data: the ranks' draws are still alike (it
    silenced the review: any subscript computed from the rank counted as data cut by hand)."""
    seed = "torch.manual_seed(0)\n    device_ids = [0, 1]\n    device_id = device_ids[int(os.environ.get('LOCAL_RANK', '0')) % 2]"
    migrated, report, _ = migrate_script(tmp_path, GAN.replace("SEED", seed).replace("DRAW", PER_SAMPLE["noise-vectors"]))
    assert "DDP051" in report and "every rank draws the same numbers" in report, report


@pytest.mark.parametrize("draw", ["fake = netG(real[:, :4] + torch.randn(real.size(1))[:4])", "fake = netG(real[:, :4] * torch.rand(real.shape[1:])[:4])"])
def test_noise_sized_by_another_axis_of_the_batch_is_reviewed_as_such(tmp_path: Path, draw: str) -> None:
    """Per feature it is the same on every rank, as in the original; per sample of a sequence-first batch it is
    not: the review says which axis and when it matters."""
    migrated, report, _ = migrate_script(tmp_path, GAN.replace("SEED", "torch.manual_seed(0)").replace("DRAW", draw))
    assert "DDP051" in report and "other than the first" in report and "if that axis holds the samples" in report, report


CONDITIONAL_SEED = '''import argparse
import random

parser = argparse.ArgumentParser()
parser.add_argument("--manualSeed", type=int)
opt = parser.parse_args()
UNSET
torch.manual_seed(opt.manualSeed)
'''


@pytest.mark.parametrize(
    ("unset", "reported"),
    [
        ("if opt.manualSeed is None:\n    opt.manualSeed = random.randint(1, 10000)", True),
        ("if not opt.manualSeed:\n    opt.manualSeed = random.randint(1, 10000)", True),
        ("if opt.manualSeed < 0:\n    opt.manualSeed = random.randint(1, 10000)", True),
        ("opt.manualSeed = opt.manualSeed if opt.manualSeed is not None else random.randint(1, 10000)", True),
        # the draw replaces a seed that was given: every run seeds each rank its own way
        ("if opt.manualSeed is not None:\n    opt.manualSeed = random.randint(1, 10000)", False),
        ("opt.manualSeed = random.randint(1, 10000)", False),
    ],
    ids=["is-none", "not-set", "negative", "conditional-expression", "given-replaced", "always-drawn"],
)
def test_a_seed_drawn_only_where_none_is_given_seeds_alike_when_it_is(tmp_path: Path, unset: str, reported: bool) -> None:
    """DCGAN's ``if opt.manualSeed is None: opt.manualSeed = random.randint(1, 10000)`` then ``torch.manual_seed(
    opt.manualSeed)``: run with ``--manualSeed 42``, every rank drew the same noise, and the report said nothing
    (the draw made the seed count as each process's own in every run)."""
    seeding = "\n    ".join(CONDITIONAL_SEED.replace("UNSET", unset).splitlines())  # (the body of ``main``)
    source = GAN.replace("SEED", seeding).replace("DRAW", PER_SAMPLE["noise-vectors"])
    assert "    if opt" in source or "    opt.manualSeed = " in source
    migrated, report, _ = migrate_script(tmp_path, source)
    assert ("DDP051" in report) is reported, report
    if reported:
        assert "which every rank seeds alike whenever `opt.manualSeed` is given" in report, report
