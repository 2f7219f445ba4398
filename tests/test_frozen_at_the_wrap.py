"""A model whose every parameter is frozen where the migration would wrap it (a linear probe's backbone).

DDP refuses such a model (``RuntimeError: DistributedDataParallel is not needed when a module doesn't have any
parameter that requires a gradient``). The migration wrapped a backbone frozen by ``requires_grad_(False)`` before
its optimizer: every migrated run crashed at the wrap while the report said nothing needed a human. Now:

- frozen on every run and never unfrozen: the model trains nothing, and is left unwrapped;
- frozen under a test (``if args.freeze_backbone:``): wrapped where any of its parameters trains;
- unfrozen later (a head warmed up first): no place is right for the wrap, a review line says why.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from launch import run_python, run_torchrun
from migrated import migrate_script

PROBE = """import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--freeze-backbone", action="store_true")
    args = parser.parse_args()
    torch.manual_seed(0)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    x = torch.randn(128, 8)
    y = (x.sum(1) > 0).long()
    loader = DataLoader(TensorDataset(x, y), batch_size=16, shuffle=False)

    backbone = nn.Sequential(nn.Linear(8, 16), nn.Tanh()).to(device)
    if args.freeze_backbone:
        backbone.requires_grad_(False)
    head = nn.Linear(16, 2).to(device)
    optimizer = torch.optim.SGD(list(backbone.parameters()) + list(head.parameters()), lr=0.1)

    for epoch in range(2):
        for xb, yb in loader:
            xb, yb = xb.to(device), yb.to(device)
            loss = F.cross_entropy(head(backbone(xb)), yb)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    torch.save({"backbone": backbone.state_dict(), "head": head.state_dict()}, "final.pt")


if __name__ == "__main__":
    main()
"""

ALWAYS_FROZEN = PROBE.replace(
    "    if args.freeze_backbone:\n        backbone.requires_grad_(False)\n",
    "    for p in backbone.parameters():\n        p.requires_grad = False\n",
)

UNFROZEN_LATER = PROBE.replace(
    "    for epoch in range(2):\n",
    "    for epoch in range(2):\n        if epoch == 1:\n            backbone.requires_grad_(True)\n",
)


def test_a_backbone_frozen_under_a_test_is_wrapped_where_it_trains(tmp_path: Path) -> None:
    migrated, report, code = migrate_script(tmp_path, PROBE)
    assert code == 0, report
    assert "DDP011 line 21: backbone wrapped in DistributedDataParallel where any of its parameters trains" in report, report
    assert "0 item(s) need a human" in report
    assert (
        "    if any(p.requires_grad for p in backbone.parameters()):\n"
        "        backbone = DistributedDataParallel(backbone, device_ids=runtime.device_ids())\n"
    ) in migrated, migrated
    assert "    head = DistributedDataParallel(head, device_ids=runtime.device_ids())\n" in migrated


def test_a_backbone_frozen_on_every_run_trains_nothing_and_stays_unwrapped(tmp_path: Path) -> None:
    migrated, report, code = migrate_script(tmp_path, ALWAYS_FROZEN)
    assert code == 0, report
    assert "DistributedDataParallel(backbone" not in migrated, migrated
    assert "head = DistributedDataParallel(head, device_ids=runtime.device_ids())" in migrated
    assert "0 item(s) need a human" in report


def test_a_backbone_unfrozen_later_is_left_to_a_human_with_the_reason(tmp_path: Path) -> None:
    migrated, report, code = migrate_script(tmp_path, UNFROZEN_LATER.replace(
        "    if args.freeze_backbone:\n        backbone.requires_grad_(False)\n", "    backbone.requires_grad_(False)\n"
    ))
    assert code == 1, report
    assert "DDP011 every parameter of backbone is frozen here, where it would be wrapped in DistributedDataParallel, and unfrozen later" in report, report
    assert "DistributedDataParallel(backbone" not in migrated


def test_a_backbone_frozen_in_part_is_wrapped_after_the_freeze_as_before(tmp_path: Path) -> None:
    partial = PROBE.replace("backbone.requires_grad_(False)", "backbone[0].bias.requires_grad_(False)")
    migrated, report, _ = migrate_script(tmp_path, partial)
    assert (
        "        backbone[0].bias.requires_grad_(False)\n"
        "    backbone = DistributedDataParallel(backbone, device_ids=runtime.device_ids())\n"
    ) in migrated, migrated
    assert "where any of its parameters trains" not in report


@pytest.mark.distributed
def test_the_probe_trains_the_originals_weights_frozen_or_not(tmp_path: Path) -> None:
    """Both runs of the migrated probe under torchrun (2 processes) end with the original's weights: frozen, the
    backbone stays unwrapped and as built; unfrozen, it is wrapped and trains (before: a RuntimeError at the wrap)."""
    original, migrated = tmp_path / "original", tmp_path / "migrated"
    original.mkdir()
    migrated.mkdir()
    (original / "train.py").write_text(PROBE)
    migrate_script(migrated, PROBE)
    for flags in (["--freeze-backbone"], []):
        run_python(original / "train.py", *flags, cwd=original, timeout=120)
        run_torchrun(migrated / "train.py", *flags, nproc_per_node=2, cwd=migrated, timeout=120)
        want = torch.load(original / "final.pt", weights_only=True)
        got = torch.load(migrated / "final.pt", weights_only=True)
        for part in ("backbone", "head"):
            assert got[part].keys() == want[part].keys(), (flags, part)
            for key in want[part]:
                assert torch.allclose(got[part][key], want[part][key], atol=1e-5), (flags, part, key)
