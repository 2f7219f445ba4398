"""Sharing the data out between the processes of the job: the global batch size split, the sampler's epoch."""

from __future__ import annotations

import operator
import warnings
import weakref
from typing import Any, Callable

from .environment import world_size
from .errors import BatchSizeError

__all__ = ["next_epoch", "per_process_batch_size", "set_epoch"]


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
    def tell(samplers: list[Any]) -> None:
        for sampler in samplers:
            sampler.set_epoch(epoch)

    _tell(loader, tell)


def next_epoch(loader: Any) -> None:
    """Tell the sampler of a data loader that a new pass over it starts, where the program has no epoch
    number (an endless generator, ``while True: for batch in loader: yield batch``): epoch 0 at the first
    call for a sampler (or the epoch it was last given), one more at each call after. The loader is found as
    :func:`set_epoch` finds it, and a warning says so once where none is (not for a plain iterable, a list or
    a tensor: a generator may go over those as well). The samplers of one loader (its ``sampler`` and a
    ``batch_sampler`` that takes an epoch and may pass it on to that sampler) start the same epoch, the one
    counted for the first of them."""
    _tell(loader, _advance, plain_ok=True)


#: The samplers :func:`next_epoch` has already started a pass of (their next call moves them on).
_STARTED: "weakref.WeakSet[Any]" = weakref.WeakSet()


def _advance(samplers: list[Any]) -> None:
    """Move the samplers of one loader to the next epoch of the first of them (:func:`next_epoch`)."""
    epoch = _next_epoch_of(samplers[0])
    for sampler in samplers:
        if sampler is not samplers[0]:
            _next_epoch_of(sampler)  # (counted as started, so a later call on its own moves it on)
        sampler.set_epoch(epoch)


def _next_epoch_of(sampler: Any) -> int:
    """The epoch a sampler's next pass starts: 0 (or the epoch it was last given) at the first call for it,
    one more at each call after."""
    current = getattr(sampler, "epoch", None)
    try:
        first = sampler not in _STARTED
        _STARTED.add(sampler)
    except TypeError:  # a sampler that cannot be referred to weakly: each call moves it on
        first = False
    says_its_epoch = type(current) is int
    if not says_its_epoch:  # the passes are counted here instead
        current, first = _PASSES.get(id(sampler), -1), False
    epoch = current if first else current + 1
    if not says_its_epoch:
        _PASSES[id(sampler)] = epoch
    return epoch


#: The passes :func:`next_epoch` counted for samplers without an ``epoch`` attribute, by ``id``.
_PASSES: dict[int, int] = {}


def _tell(loader: Any, tell: Callable[[list[Any]], None], plain_ok: bool = False) -> None:
    """``tell`` the samplers of each loader found (a list per loader); a warning, once per type, where there is
    none (``plain_ok``: not for an object without attributes of its own, which holds no loader)."""
    if plain_ok and not hasattr(loader, "__dict__"):
        return
    if not _tell_samplers(loader, tell, _WRAPPER_DEPTH, set()) and type(loader) not in _WARNED:
        _WARNED.add(type(loader))
        warnings.warn(
            f"set_epoch: no sampler with set_epoch() found in this {type(loader).__name__}; "
            "every epoch repeats the same order",
            RuntimeWarning,
            stacklevel=3,
        )


#: The types :func:`set_epoch` warned about already (once each).
_WARNED: set[type] = set()


def _tell_samplers(value: Any, tell: Callable[[list[Any]], None], depth: int, seen: set[int]) -> bool:
    if id(value) in seen:
        return False
    seen.add(id(value))
    batches = getattr(value, "batch_sampler", None)
    samplers = [getattr(value, "sampler", None), batches, getattr(batches, "sampler", None)]
    told: list[Any] = []
    for sampler in samplers:
        if sampler is not None and callable(getattr(sampler, "set_epoch", None)) and not any(sampler is t for t in told):
            told.append(sampler)  # the sampler, or a batch sampler that shuffles its own buckets (each once)
    if told:
        tell(told)
    if told or samplers[0] is not None:
        return True  # (a loader whose samplers take no epoch needs none)
    if depth <= 0 or not hasattr(value, "__dict__") or isinstance(value, type):
        return False
    found = False
    for attribute in list(vars(value).values()):
        if hasattr(attribute, "__dict__") and not callable(attribute):
            found |= _tell_samplers(attribute, tell, depth - 1, seen)
    return found
