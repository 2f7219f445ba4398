"""Sharing the data out between the processes of the job: the global batch size split, the sampler's epoch."""

from __future__ import annotations

import operator
import warnings
from typing import Any

from .environment import world_size
from .errors import BatchSizeError

__all__ = ["per_process_batch_size", "set_epoch"]


def per_process_batch_size(global_batch_size: int | None) -> int | None:
    """The batch size each process loads so that all together process ``global_batch_size``.

    With ``DistributedSampler(shuffle=False)`` the union of the per-process batches is exactly the
    original batch, so the migrated script computes what the original did. ``None`` (a ``DataLoader``
    without automatic batching, which yields one sample at a time) stays ``None``: the sampler alone
    shares the samples out.

    Raises:
        BatchSizeError: ``global_batch_size`` is not positive, is smaller than the world size, or is
            not a multiple of it; the message gives the numbers and the fix.
        TypeError: ``global_batch_size`` is neither an integer nor ``None``.
    """
    if global_batch_size is None:
        return None
    if isinstance(global_batch_size, bool):
        raise TypeError("global_batch_size must be an int, got bool")
    try:
        batch = operator.index(global_batch_size)
    except TypeError:
        raise TypeError(
            f"global_batch_size must be an int, got {type(global_batch_size).__name__}"
        ) from None
    size = world_size()
    fix = (
        f"Use a global batch size that is a multiple of the world size {size} "
        f"(e.g. {size * max(1, batch // size)} or {size * (max(1, batch // size) + 1)}), "
        "or migrate with `--batch-size per-process` to keep the batch size per process."
    )
    if batch <= 0:
        raise BatchSizeError(f"the global batch size must be positive, got {batch}. {fix}")
    if batch < size:
        raise BatchSizeError(
            f"the global batch size {batch} is smaller than the world size {size}: every process "
            f"needs at least one sample per batch. {fix}"
        )
    if batch % size:
        raise BatchSizeError(
            f"the global batch size {batch} is not divisible by the world size {size} "
            f"({batch} % {size} = {batch % size}). {fix}"
        )
    return batch // size


#: How deep :func:`set_epoch` looks into the attributes of a loader's wrapper for the loader it wraps.
_WRAPPER_DEPTH = 3


def set_epoch(loader: Any, epoch: int) -> None:
    """Tell the sampler of a data loader which epoch starts (``sampler.set_epoch(epoch)``): the loader's own
    ``sampler`` (or its ``batch_sampler``'s), or, for an object that wraps a loader (a class that moves
    batches to the device, a prefetcher: ``DeviceDataLoader(DataLoader(...), device)``), the sampler of
    every loader found among its attributes, a few levels down. A sampler without ``set_epoch`` (a
    ``RandomSampler`` on a run without torchrun) needs none. Where no loader is found (a wrapper that builds
    its loader only when iterated), a warning says so once: every epoch then repeats the same order."""
    if not _set_epoch(loader, epoch, _WRAPPER_DEPTH, set()) and type(loader) not in _WARNED:
        _WARNED.add(type(loader))
        warnings.warn(
            f"set_epoch: no sampler with set_epoch() found in this {type(loader).__name__}; "
            "every epoch repeats the same order",
            RuntimeWarning,
            stacklevel=2,
        )


#: The types :func:`set_epoch` warned about already (once each).
_WARNED: set[type] = set()


def _set_epoch(value: Any, epoch: int, depth: int, seen: set[int]) -> bool:
    if id(value) in seen:
        return False
    seen.add(id(value))
    batches = getattr(value, "batch_sampler", None)
    samplers = [getattr(value, "sampler", None), batches, getattr(batches, "sampler", None)]
    told = False
    for sampler in samplers:
        if sampler is not None and callable(getattr(sampler, "set_epoch", None)):
            sampler.set_epoch(epoch)  # the sampler, or a batch sampler that shuffles its own buckets
            told = True
    if told or samplers[0] is not None:
        return True  # (a loader whose samplers take no epoch needs none)
    if depth <= 0 or not hasattr(value, "__dict__") or isinstance(value, type):
        return False
    found = False
    for attribute in list(vars(value).values()):
        if hasattr(attribute, "__dict__") and not callable(attribute):
            found |= _set_epoch(attribute, epoch, depth - 1, seen)
    return found
