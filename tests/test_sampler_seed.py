"""The program's torch seed and the DistributedSampler's (a trial of unseen programs).

A single-process ``DataLoader(shuffle=True)`` draws its order from torch's seed: ``torch.manual_seed(seed)``
changes it. A ``DistributedSampler`` draws it from its own ``seed`` (0 unless given), so the migrated
program trained every seed of a sweep on the same orders, with nothing said. The migration now passes the
program's seed where it can spell it at the loader (the same on every rank), and the report says so where not.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from launch import run_python
from migrated import migrate_script

TRAIN = """
import argparse

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    SEED
    ds = TensorDataset(torch.randn(64, 4), torch.arange(64))
    loader = DataLoader(ds, batch_size=8, shuffle=True)
    AFTER
    model = nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        for step, (x, idx) in enumerate(loader):
            if epoch == 0 and step == 0:
                print("first", idx.tolist(), flush=True)
            opt.zero_grad()
            model(x).sum().backward()
            opt.step()


def set_seed(seed):
    torch.manual_seed(seed)


if __name__ == "__main__":
    main()
"""

CASES = {
    "torch.manual_seed(args.seed)": ("torch.manual_seed(args.seed)", "", "shuffle=True, seed=args.seed)"),
    # a helper's arguments are its own (which is the seed, whether it lets None through)
    "a seeding helper": ("set_seed(args.seed)", "", "shuffle=True)"),
    "set again before the loader": ("torch.manual_seed(args.seed)\n    args.seed = None", "", "shuffle=True)"),
    "moved on before the loader": ("torch.manual_seed(args.seed)\n    args.seed += 1", "", "shuffle=True)"),
    "a literal": ("torch.manual_seed(42)", "", "shuffle=True, seed=42)"),
    "0, the sampler's own": ("torch.manual_seed(0)", "", "shuffle=True)"),
    "seeded after the loader": ("pass", "torch.manual_seed(args.seed)", "shuffle=True)"),
    "seeded per rank": ("torch.manual_seed(args.seed + int(__import__('os').environ.get('RANK', 0)))", "", "shuffle=True)"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_the_sampler_takes_the_programs_seed_where_it_can_be_spelled(tmp_path: Path, case: str) -> None:
    seed, after, expected = CASES[case]
    migrated, report, _ = migrate_script(tmp_path, TRAIN.replace("SEED", seed).replace("AFTER", after))
    assert f"sampler=DistributedSampler(ds, {expected}" in migrated, report + migrated


def test_a_seed_out_of_reach_of_the_loader_is_said(tmp_path: Path) -> None:
    source = TRAIN.replace("SEED", "torch.manual_seed(args.seed)").replace("AFTER", "").replace(
        "    ds = TensorDataset(torch.randn(64, 4), torch.arange(64))\n    loader = DataLoader(ds, batch_size=8, shuffle=True)\n",
        "    loader = build()\n",
    ).replace("def set_seed(seed):", "def build():\n    ds = TensorDataset(torch.randn(64, 4), torch.arange(64))\n    return DataLoader(ds, batch_size=8, shuffle=True)\n\n\ndef set_seed(seed):")
    migrated, report, _ = migrate_script(tmp_path, source)
    assert "sampler=DistributedSampler(ds, shuffle=True)" in migrated, report + migrated
    assert re.search(r"DDP005 line \d+: DistributedSampler added to the training DataLoader; it shuffles from its own seed", report), report
    unseeded, report, _ = migrate_script(tmp_path, TRAIN.replace("SEED", "pass").replace("AFTER", ""))
    assert "its own seed" not in report, report
    zero, report, _ = migrate_script(tmp_path, source.replace("torch.manual_seed(args.seed)", "torch.manual_seed(0)"))
    assert "its own seed" not in report, report  # 0 is the sampler's own seed


@pytest.mark.e2e
def test_two_seeds_still_give_two_orders(tmp_path: Path) -> None:
    """The migrated program, run as one process with two seeds: two first batches (one, before)."""
    pytest.importorskip("torch")
    migrate_script(tmp_path, TRAIN.replace("SEED", "torch.manual_seed(args.seed)").replace("AFTER", ""))
    firsts = [re.search(r"first (\[.*\])", run_python(tmp_path / "train.py", "--seed", seed, cwd=tmp_path).output) for seed in (1, 2)]
    assert all(firsts) and firsts[0].group(1) != firsts[1].group(1), firsts  # type: ignore[union-attr]


@pytest.mark.parametrize(("shuffle", "said"), [("shuffle=True", True), ("shuffle=False", False)])
def test_the_report_says_a_shuffling_sampler_has_an_order_of_its_own(tmp_path: Path, shuffle: str, said: bool) -> None:
    """Two trials compared the migrated program run as one process with the original and found other numbers
    wherever the loader shuffled, with nothing in the report to say why."""
    source = TRAIN.replace("SEED", "torch.manual_seed(args.seed)").replace("AFTER", "").replace("shuffle=True", shuffle)
    _, report, _ = migrate_script(tmp_path, source)
    assert ("it shuffles in an order of its own, so even one process sees other batches than the original did" in report) is said, report
