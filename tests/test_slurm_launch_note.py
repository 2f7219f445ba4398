"""A reference script's SLURM branch after the migration (DDP022's note).

A trial (torchvision's reference shape): ``init_distributed_mode`` read ``RANK``/``WORLD_SIZE``, else
``SLURM_PROCID`` and ``--world-size``, and set the group up with the rank and world size it found. The migration
put ``runtime.setup()`` there (torchrun's environment), and the report listed a change only; started by ``srun``
alone, each process then formed a world of one, trained on all the data and wrote the same files. The report now
says so, and how to launch under SLURM.
"""

from __future__ import annotations

from pathlib import Path

from migrated import migrate_script

PROGRAM = '''
import argparse
import os

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def init_distributed_mode(args):
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        args.rank = int(os.environ["RANK"])
        args.world_size = int(os.environ["WORLD_SIZE"])
    elif BRANCH:
        args.rank = int(os.environ[VARIABLE])
    else:
        args.distributed = False
        return
    args.distributed = True
    dist.init_process_group("gloo", init_method=args.dist_url, world_size=args.world_size, rank=args.rank)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--world-size", type=int, default=1)
    parser.add_argument("--dist-url", default="env://")
    args = parser.parse_args()
    init_distributed_mode(args)
    data = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
    sampler = DistributedSampler(data) if args.distributed else None
    loader = DataLoader(data, batch_size=8, sampler=sampler, shuffle=sampler is None)
    model = torch.nn.Linear(4, 1)
    if args.distributed:
        model = DistributedDataParallel(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for x, y in loader:
        optimizer.zero_grad()
        F.mse_loss(model(x), y).backward()
        optimizer.step()


if __name__ == "__main__":
    main()
'''


def test_a_slurm_launch_path_the_migration_replaced_is_noted(tmp_path: Path) -> None:
    source = PROGRAM.replace("BRANCH", '"SLURM_PROCID" in os.environ').replace("VARIABLE", '"SLURM_PROCID"')
    migrated, report, _ = migrate_script(tmp_path, source)
    assert "runtime.setup(" in migrated, report
    notes = [line.strip() for line in report.splitlines() if line.strip().startswith("note DDP022")]
    assert len(notes) == 1 and "reads SLURM's launch variables (SLURM_PROCID)" in notes[0] and "srun torchrun" in notes[0], report


def test_a_program_reading_no_slurm_variable_gets_no_such_note(tmp_path: Path) -> None:
    source = PROGRAM.replace("BRANCH", '"OTHER_RANK" in os.environ').replace("VARIABLE", '"OTHER_RANK"')
    migrated, report, _ = migrate_script(tmp_path, source)
    assert "runtime.setup(" in migrated, report
    assert "SLURM" not in report, report
