"""Model helpers: unwrapping data-parallel wrappers and the SyncBatchNorm conversion (CUDA), with the BatchNorm
running statistics shared between processes where SyncBatchNorm does not run (the CPU)."""

from __future__ import annotations

import itertools
import weakref
from typing import Any, cast

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm
from torch.nn.modules.module import register_module_forward_hook
from torch.nn.parallel import DataParallel, DistributedDataParallel

from .environment import device

__all__ = ["call_through_ddp", "convert_sync_batchnorm", "unwrap"]

#: Wrappers whose ``.module`` holds the model the user wrote.
WRAPPERS = (DistributedDataParallel, DataParallel)


def unwrap(model: nn.Module) -> nn.Module:
    """The model inside DistributedDataParallel / DataParallel wrappers (all layers of them), or
    ``model`` itself when it is not wrapped. Its ``state_dict()`` has no ``module.`` prefix."""
    while isinstance(model, WRAPPERS):
        model = model.module
    return model


def call_through_ddp(model: nn.Module, method: str, *args: Any, **kwargs: Any) -> Any:
    """Run a method of the wrapped model (``train_step(batch)``, ``compute_loss(x, y)``) inside DDP's forward.

    ``model.module.train_step(batch)`` runs the model past DistributedDataParallel: DDP never prepares the
    gradient all-reduce, and each process trains its own replica. Here the wrapper's own forward runs, with
    the method in place of the model's ``forward`` for that one call: DDP moves the inputs to the device,
    syncs buffers, runs the method (whose own ``self(x)`` reaches the model's real ``forward``) and all-reduces
    the gradients of the backward that follows, as mmcv's ``MMDistributedDataParallel.train_step`` does.
    A model that is not DDP-wrapped (a world of one, DataParallel) simply runs the method.

    Args:
        model: the DDP-wrapped model (or the model itself).
        method: the name of the model's method to run.
        *args, **kwargs: its arguments.
    """
    if not isinstance(model, DistributedDataParallel):
        return getattr(unwrap(model), method)(*args, **kwargs)
    inner = model.module
    bound = getattr(inner, method)
    own = inner.__dict__.get("forward", _NO_FORWARD)

    def restore() -> None:
        if own is _NO_FORWARD:
            inner.__dict__.pop("forward", None)
        else:
            inner.__dict__["forward"] = own

    def run_the_method(*inputs: Any, **named: Any) -> Any:
        restore()  # (the method's own ``self(x)`` runs the model's forward)
        return bound(*inputs, **named)

    inner.__dict__["forward"] = run_the_method
    try:
        return model(*args, **kwargs)
    finally:
        restore()


#: ``call_through_ddp``'s mark of a model without a ``forward`` of its own instance.
_NO_FORWARD = object()


def convert_sync_batchnorm(model: nn.Module) -> nn.Module:
    """Replace BatchNorm layers by SyncBatchNorm where that can work, i.e. on CUDA.

    Converts when the model's parameters (or buffers) are on CUDA, or when they are still on the CPU
    and this process's device is CUDA (conversion before ``.to(device)``, as in the PyTorch docs).
    Otherwise the layers stay plain BatchNorm: DDP on CPU rejects SyncBatchNorm ("SyncBatchNorm layers only
    work with GPU modules"); each process then normalises with its own share's statistics, but their running
    statistics are averaged across processes after every DDP forward in training mode, so evaluations and EMA
    copies agree between ranks (:func:`_share_running_statistics`). Call it before wrapping the model in DDP.
    """
    kinds = {tensor.device.type for tensor in itertools.chain(model.parameters(), model.buffers())}
    on_cuda = "cuda" in kinds
    headed_for_cuda = kinds <= {"cpu"} and device().type == "cuda"
    if on_cuda or headed_for_cuda:
        converted = nn.SyncBatchNorm.convert_sync_batchnorm(model)  # type: ignore[no-untyped-call]
        return cast(nn.Module, converted)
    _share_running_statistics(model)
    return model


#: The BatchNorm layers whose running statistics are shared between processes (held weakly: nothing is stored
#: on the model, whose pickle then needs nothing of this package to load).
_SHARED_LAYERS: weakref.WeakSet[_BatchNorm] = weakref.WeakSet()
_HOOK: list[object] = []


def _share_running_statistics(model: nn.Module) -> None:
    """Where BatchNorm layers stay plain (the CPU: no SyncBatchNorm) in a job of several processes, keep their
    running statistics the same on every process: after each forward of a ``DistributedDataParallel`` that
    synchronises its buffers (training mode, gradients on, ``broadcast_buffers``; not under ``join()``), the
    running means and variances of the model's BatchNorm layers inside it are averaged over the DDP's group.

    Without it each process updates them from its own share of the batch, and they differ between forwards:
    DDP hands every process rank 0's at its next forward, but an evaluation of ``model.module``, or an EMA copy
    made after a step, reads each process's own, so metrics and the decisions taken on them differ between
    ranks (a learning-rate schedule stepped apart, an early stop on one rank: a hang). With equal shares the
    mean of their running means is the one a single process keeps over the whole batch; the running variance is
    a little smaller than its (it misses the spread between the shares' means, and each share's unbiased
    estimate divides by its own count). Only the forwards in which DDP broadcasts its buffers (a collective every
    rank runs alike) average: a ``no_grad`` forward on rank 0 alone is left alone. A recomputation in backward
    (activation checkpointing around a BatchNorm) updates each rank's statistics again, after the average.
    In a world of one, or before a process group is set up, nothing is installed."""
    layers = [layer for layer in model.modules() if isinstance(layer, _BatchNorm) and layer.track_running_stats]
    if not layers or not dist.is_available() or not dist.is_initialized() or dist.get_world_size() < 2:
        return
    _SHARED_LAYERS.update(layers)
    if not _HOOK:
        _HOOK.append(register_module_forward_hook(_average_after_a_ddp_forward))


def _syncs_buffers(ddp: DistributedDataParallel) -> bool:
    """Whether this DDP forward broadcast the module's buffers, a collective every rank of its group runs: training
    mode, gradients on, ``broadcast_buffers``, outside a ``join()`` (which shadows DDP's own collectives only)."""
    join = getattr(ddp, "_join_config", None)
    if join is not None and getattr(join, "enable", False):
        return False
    will_sync = getattr(ddp, "will_sync_module_buffers", None)
    if callable(will_sync):
        return bool(will_sync())
    return ddp.training and torch.is_grad_enabled() and bool(getattr(ddp, "broadcast_buffers", True))


def _average_after_a_ddp_forward(module: nn.Module, args: Any, output: Any) -> None:
    """A forward hook of every module: after a DDP forward that synchronised its buffers, average the shared
    layers' running statistics over the DDP's process group (:func:`_share_running_statistics`)."""
    if not isinstance(module, DistributedDataParallel) or not module.training or not _syncs_buffers(module):
        return
    statistics = [
        tensor
        for layer in module.module.modules()
        if layer in _SHARED_LAYERS and layer.training
        for tensor in (layer.running_mean, layer.running_var)
        if tensor is not None
    ]
    if not statistics:
        return
    group = getattr(module, "process_group", None)
    size = dist.get_world_size(group)
    if size < 2:
        return
    dtype = torch.float64 if any(tensor.dtype == torch.float64 for tensor in statistics) else torch.float32
    with torch.no_grad():
        flat = torch.cat([tensor.reshape(-1).to(dtype) for tensor in statistics])
        dist.all_reduce(flat, group=group)
        flat /= size
        offset = 0
        for tensor in statistics:
            # (through ``.data``: the forward's graph saved these tensors; a training-mode backward reads the
            # batch's own statistics, not them, and an in-place write would fail its version check)
            tensor.data.copy_(flat[offset : offset + tensor.numel()].view_as(tensor))
            offset += tensor.numel()
