"""Splitting the global batch size across the processes of the job."""

from __future__ import annotations

import operator

from .environment import world_size
from .errors import BatchSizeError

__all__ = ["per_process_batch_size"]


def per_process_batch_size(global_batch_size: int) -> int:
    """The batch size each process loads so that all together process ``global_batch_size``.

    With ``DistributedSampler(shuffle=False)`` the union of the per-process batches is exactly the
    original batch, so the migrated script computes what the original did.

    Raises:
        BatchSizeError: ``global_batch_size`` is not positive, is smaller than the world size, or is
            not a multiple of it; the message gives the numbers and the fix.
        TypeError: ``global_batch_size`` is not an integer.
    """
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
