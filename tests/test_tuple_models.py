"""Models built in one tuple assignment (``netG, netD = Generator(), Discriminator()``).

A trial's GAN: both models were "trained but never wrapped" (a review line, no reason given), while the data
was sharded, so the replicas drifted apart (-0.4889 against -0.4930). The wrap looked for an assignment to the
name alone; an element of a tuple target is one too. (The review of the noise every rank draws alike, which needs the
wrap, comes back with it.)
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from migrated import migrate_script

GAN = '''
import os

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


def main():
    torch.manual_seed(0)
    loader = DataLoader(TensorDataset(torch.randn(64, 2)), batch_size=8, shuffle=True)
    netG, netD = nn.Linear(4, 2), nn.Linear(2, 1)
    optG = torch.optim.Adam(netG.parameters())
    optD = torch.optim.Adam(netD.parameters())
    for epoch in range(2):
        for (real,) in loader:
            fake = netG(torch.randn(real.size(0), 4))
            optD.zero_grad()
            lossD = netD(fake.detach()).mean() - netD(real).mean()
            lossD.backward()
            optD.step()
            optG.zero_grad()
            lossG = -netD(fake).mean()
            lossG.backward()
            optG.step()
    g = sum(p.sum().item() for p in netG.parameters())
    d = sum(p.sum().item() for p in netD.parameters())
    os.write(1, f"G {g:.6f} D {d:.6f}\\n".encode())


if __name__ == "__main__":
    main()
'''


def test_both_models_of_a_tuple_assignment_are_wrapped(tmp_path: Path) -> None:
    migrated, report, code = migrate_script(tmp_path, GAN)
    assert "never wrapped" not in report, report
    assert "DDP051" in report, report  # the noise drawn alike on every rank, reviewed once the models are wrapped
    wraps = "    netG = DistributedDataParallel(netG, device_ids=runtime.device_ids())\n    netD = DistributedDataParallel(netD, device_ids=runtime.device_ids())\n"
    assert "    netG, netD = nn.Linear(4, 2), nn.Linear(2, 1)\n" + wraps in migrated, migrated


@pytest.mark.distributed
def test_the_replicas_stay_alike_under_torchrun(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    from launch import run_torchrun

    migrate_script(tmp_path, GAN)
    launch = run_torchrun(tmp_path / "train.py", nproc_per_node=2, cwd=tmp_path, timeout=120)
    found = re.findall(r"G (-?\d+\.\d+) D (-?\d+\.\d+)", launch.output)
    assert len(found) == 2 and found[0] == found[1], launch.output
