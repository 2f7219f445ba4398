"""A model wrapped the way DDP042 advises (every parameter training at the wrap, ``find_unused_parameters=True``),
its backbone frozen then unfrozen after the wrap (a trial's fine-tuning): the lint still reported DDP042 on the
unfreeze and DDP032 on the flag the unfreeze needs, so following the advice never gave a clean lint."""

from __future__ import annotations

from pathlib import Path

import pytest

from migrated import lint_findings

PROGRAM = """
import torch
import torch.nn as nn
from ddp_migrate import runtime
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def main():
    runtime.setup(device="cpu")
    ds = TensorDataset(torch.randn(64, 4), torch.randint(0, 2, (64,)))
    loader = DataLoader(ds, batch_size=runtime.per_process_batch_size(16), sampler=DistributedSampler(ds))
    net = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    model = DistributedDataParallel(net, device_ids=runtime.device_ids()FLAG)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for p in model.module[0].parameters():
        p.requires_grad = False
    for epoch in range(4):
        loader.sampler.set_epoch(epoch)
        if epoch == 2:
            for p in model.module[0].parameters():
                p.requires_grad = True
        for x, y in loader:
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
    runtime.cleanup()


if __name__ == "__main__":
    main()
"""


def test_a_model_wrapped_as_advised_gets_a_clean_lint(tmp_path: Path) -> None:
    findings = lint_findings(tmp_path, PROGRAM.replace("FLAG", ", find_unused_parameters=True"), "DDP032,DDP042")
    assert not any("DDP032" in f or "DDP042" in f for f in findings), findings


@pytest.mark.parametrize(
    ("flag", "frozen_first"), [("", False), (", find_unused_parameters=True", True)], ids=["without-the-flag", "frozen-before-the-wrap"]
)
def test_a_model_not_wrapped_as_advised_is_still_reported(tmp_path: Path, flag: str, frozen_first: bool) -> None:
    source = PROGRAM.replace("FLAG", flag)
    if frozen_first:
        source = source.replace("    model = DistributedDataParallel(", "    net[0].requires_grad_(False)\n    model = DistributedDataParallel(")
    findings = lint_findings(tmp_path, source, "DDP042")
    assert any("DDP042" in f for f in findings), findings
