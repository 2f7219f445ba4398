"""A ``torch.distributed.launch`` program whose group is set up only when launched (``if args.local_rank == -1:
... else: dist.init_process_group(...)``, the Hugging Face example scripts' shape): a plain ``python`` run never
reaches the call, yet DDP022 said it failed there for want of torchrun's environment (a trial)."""

from __future__ import annotations

from pathlib import Path

import pytest

from migrated import lint_findings

PROGRAM = """
import argparse

import torch
import torch.distributed as dist

parser = argparse.ArgumentParser()
parser.add_argument("--local-rank", "--local_rank", type=int, default=-1, dest="local_rank")
args = parser.parse_args()

GUARD
    dist.init_process_group(backend="gloo")
model = torch.nn.Linear(4, 1)
if args.local_rank != -1:
    model = torch.nn.parallel.DistributedDataParallel(model)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
model(torch.randn(8, 4)).sum().backward()
opt.step()
"""


@pytest.mark.parametrize("guard", ["if args.local_rank != -1:", "if args.local_rank == -1:\n    pass\nelse:"])
def test_a_group_set_up_only_when_launched_is_no_plain_run_failure(tmp_path: Path, guard: str) -> None:
    findings = lint_findings(tmp_path, PROGRAM.replace("GUARD", guard), "DDP022")
    assert not any("needs torchrun's environment" in f for f in findings), findings


def test_a_group_set_up_on_every_path_still_needs_the_environment(tmp_path: Path) -> None:
    findings = lint_findings(tmp_path, PROGRAM.replace("GUARD", "if True:"), "DDP022")
    assert any("needs torchrun's environment" in f for f in findings), findings
