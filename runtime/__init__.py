"""What code migrated by ddp-migrate imports at run time: ``from ddp_migrate import runtime``.

A thin, readable layer over ``torch.distributed`` that takes the boilerplate out of a DDP script
(environment, backend, device, rank checks, rank-0 saving, metric reduction) while the script keeps
using torch's own ``DistributedDataParallel`` and ``DistributedSampler``::

    from ddp_migrate import runtime

    runtime.setup()                      # torchrun's environment, or a world of one
    device = runtime.device()            # cuda:<local_rank>, xpu:<local_rank>, ..., or cpu
    model = DistributedDataParallel(model.to(device), device_ids=runtime.device_ids())
    ...
    runtime.print0(f"epoch {epoch}: accuracy {runtime.weighted_mean(correct, seen):.3f}")
    runtime.save({"model": runtime.unwrap(model).state_dict()}, "ckpt.pt")  # rank 0 writes
    runtime.cleanup()

The script runs under ``torchrun`` and as plain ``python train.py``, on whatever accelerator
``torch.accelerator`` reports (CUDA with nccl, XPU with xccl, ...) and on the CPU (gloo). With
:class:`Snapshot` it also resumes where it was when torchrun restarts it (``--max-restarts``).
Nothing here adds work to a training step, but for one thing: where BatchNorm layers stay plain (the CPU, no
SyncBatchNorm), ``convert_sync_batchnorm`` averages their running statistics across processes after each
training forward of the DDP model. Only torch and the standard library are used.
"""

from __future__ import annotations

from .batch import next_epoch, per_process_batch_size, set_epoch
from .checkpoint import load, save
from .environment import (
    device,
    device_ids,
    is_main_process,
    local_rank,
    local_world_size,
    rank,
    world_size,
)
from .errors import BatchSizeError, DistributedEnvironmentError
from .metrics import reduce_mean, reduce_sum, weighted_mean
from .modules import call_through_ddp, convert_sync_batchnorm, unwrap
from .output import print0, silence_non_main_logging
from .process_group import barrier, cleanup, is_initialized, setup
from .snapshot import Snapshot

__all__ = [
    "BatchSizeError",
    "DistributedEnvironmentError",
    "Snapshot",
    "barrier",
    "call_through_ddp",
    "cleanup",
    "convert_sync_batchnorm",
    "device",
    "device_ids",
    "is_initialized",
    "is_main_process",
    "load",
    "local_rank",
    "local_world_size",
    "next_epoch",
    "per_process_batch_size",
    "print0",
    "rank",
    "reduce_mean",
    "reduce_sum",
    "save",
    "set_epoch",
    "setup",
    "silence_non_main_logging",
    "unwrap",
    "weighted_mean",
    "world_size",
]
