"""A program that sets up its own process group and wraps ``DistributedDataParallel(model, device_ids=[gpu])``
(``gpu`` the local rank), its model on ``"cuda" if torch.cuda.is_available() else "cpu"`` (DeiT's shape, a trial):
on a machine without CUDA the model is on the CPU, where DDP refuses device ids ("device_ids ... module parameters
{device(type='cpu')}"), and neither lint nor the migration said a word. The ids become those of where the model is."""

from __future__ import annotations

from pathlib import Path

import pytest

from launch import run_torchrun
from migrated import lint_findings, migrate_script

PROGRAM = """import os

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def main():
    distributed = "RANK" in os.environ
    gpu = int(os.environ.get("LOCAL_RANK", 0))
    if distributed:
        dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    device = torch.device(DEVICE)
    ds = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
    sampler = DistributedSampler(ds) if distributed else None
    loader = DataLoader(ds, batch_size=8, sampler=sampler, shuffle=sampler is None)
    model = nn.Linear(4, 1).to(device)
    if distributed:
        model = nn.parallel.DistributedDataParallel(model, device_ids=[gpu])
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for epoch in range(2):
        if distributed:
            sampler.set_epoch(epoch)
        for x, y in loader:
            loss = F.mse_loss(model(x.to(device)), y.to(device))
            opt.zero_grad()
            loss.backward()
            opt.step()
    print("trained", epoch)
    if distributed:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
"""

FALLBACK = '"cuda" if torch.cuda.is_available() else "cpu"'


def test_local_rank_ids_on_a_model_that_falls_back_to_the_cpu_are_reported(tmp_path: Path) -> None:
    findings = lint_findings(tmp_path, PROGRAM.replace("DEVICE", FALLBACK), "DDP024")
    assert any("DDP024 device_ids=[local rank] with a model that is on the CPU where there is no GPU" in f for f in findings), findings


def test_local_rank_ids_on_a_model_always_on_its_gpu_are_kept(tmp_path: Path) -> None:
    findings = lint_findings(tmp_path, PROGRAM.replace("DEVICE", '"cuda", gpu'), "DDP024")
    assert not any("DDP024" in f for f in findings), findings


@pytest.mark.distributed
def test_the_migrated_program_wraps_its_cpu_model_under_torchrun(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    text, report, code = migrate_script(tmp_path, PROGRAM.replace("DEVICE", FALLBACK))
    assert code == 0 and "device_ids=runtime.device_ids(model)" in text, report + text
    launch = run_torchrun(tmp_path / "train.py", nproc_per_node=2, cwd=tmp_path, timeout=120)
    assert launch.returncode == 0 and launch.stdout.count("trained 1") == 1, launch.stdout + launch.stderr
