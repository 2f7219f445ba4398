"""``no_sync()`` where the program asked first (timm's ``has_no_sync = hasattr(model, "no_sync")``, then ``if
has_no_sync and not need_update: with model.no_sync(): ...``): it runs only on the wrapper. A trial's DDP008 said
the model was not wrapped on every path and its fix would have added a fallback the code already had."""

from __future__ import annotations

from pathlib import Path

import pytest

from migrated import lint_findings

PROGRAM = """
import os

import torch
import torch.distributed as dist


def main():
    distributed = int(os.environ.get("WORLD_SIZE", 1)) > 1
    if distributed:
        dist.init_process_group("gloo")
    model = torch.nn.Linear(4, 2)
    if distributed:
        model = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    has_no_sync = hasattr(model, "no_sync")
    accum = 4
    g = torch.Generator().manual_seed(dist.get_rank() if distributed else 0)
    for step in range(8):
        need_update = (step + 1) % accum == 0
        x = torch.randn(8, 4, generator=g)
        if TEST:
            with model.no_sync():
                (model(x).sum() / accum).backward()
        else:
            (model(x).sum() / accum).backward()
        if need_update:
            opt.step()
            opt.zero_grad()
    if distributed:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
"""


@pytest.mark.parametrize(
    "test",
    ["has_no_sync and not need_update", 'hasattr(model, "no_sync") and not need_update', "isinstance(model, torch.nn.parallel.DistributedDataParallel) and not need_update"],
)
def test_no_sync_under_a_test_that_asks_for_it_is_not_reported(tmp_path: Path, test: str) -> None:
    findings = lint_findings(tmp_path, PROGRAM.replace("TEST", test), "DDP008")
    assert not any("DDP008" in f for f in findings), findings


def test_no_sync_under_another_test_is_still_reported(tmp_path: Path) -> None:
    findings = lint_findings(tmp_path, PROGRAM.replace("TEST", "not need_update"), "DDP008")
    assert any("DDP008 no_sync() exists only on the DDP wrapper" in f for f in findings), findings


@pytest.mark.parametrize("test", ['hasattr(model, "no_sync") or not need_update', 'not need_update or isinstance(model, torch.nn.parallel.DistributedDataParallel)'])
def test_no_sync_under_a_test_that_lets_a_plain_model_through_is_reported(tmp_path: Path, test: str) -> None:
    # (a review: any wrapper test anywhere in the condition counted as asking for no_sync)
    findings = lint_findings(tmp_path, PROGRAM.replace("TEST", test), "DDP008")
    assert any("DDP008 no_sync() exists only on the DDP wrapper" in f for f in findings), findings
