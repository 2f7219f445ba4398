"""Model helpers: unwrapping data-parallel wrappers and the CUDA-only SyncBatchNorm conversion."""

from __future__ import annotations

import itertools
from typing import cast

from torch import nn
from torch.nn.parallel import DataParallel, DistributedDataParallel

from .environment import device

__all__ = ["convert_sync_batchnorm", "unwrap"]

#: Wrappers whose ``.module`` holds the model the user wrote.
WRAPPERS = (DistributedDataParallel, DataParallel)


def unwrap(model: nn.Module) -> nn.Module:
    """The model inside DistributedDataParallel / DataParallel wrappers (all layers of them), or
    ``model`` itself when it is not wrapped. Its ``state_dict()`` has no ``module.`` prefix."""
    while isinstance(model, WRAPPERS):
        model = model.module
    return model


def convert_sync_batchnorm(model: nn.Module) -> nn.Module:
    """Replace BatchNorm layers by SyncBatchNorm where that can work, i.e. on CUDA.

    Converts when the model's parameters (or buffers) are on CUDA, or when they are still on the CPU
    and this process's device is CUDA (conversion before ``.to(device)``, as in the PyTorch docs).
    Otherwise the model is returned unchanged: DDP on CPU rejects SyncBatchNorm ("SyncBatchNorm
    layers only work with GPU modules"). Call it before wrapping the model in DDP.
    """
    kinds = {tensor.device.type for tensor in itertools.chain(model.parameters(), model.buffers())}
    on_cuda = "cuda" in kinds
    headed_for_cuda = kinds <= {"cpu"} and device().type == "cuda"
    if on_cuda or headed_for_cuda:
        converted = nn.SyncBatchNorm.convert_sync_batchnorm(model)  # type: ignore[no-untyped-call]
        return cast(nn.Module, converted)
    return model
