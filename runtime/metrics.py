"""Reducing metrics across ranks, so every rank reports the numbers of the whole job.

Each call is one ``all_reduce``; call them on every rank (never only on rank 0), once per epoch or
evaluation rather than per step.
"""

from __future__ import annotations

import time
from typing import Union, overload

import torch
import torch.distributed as dist

from .process_group import is_initialized

__all__ = ["reduce_mean", "reduce_sum", "weighted_mean"]

Number = Union[int, float]

#: Longest wait, in seconds, for gloo's worker threads to let go of a finished collective's tensor.
RELEASE_TIMEOUT = 2.0


def _several_processes() -> bool:
    """Whether a collective would combine more than this process."""
    return is_initialized() and dist.get_world_size() > 1


def _collective_device(current: torch.device) -> torch.device:
    """Where a tensor must be for the backend: CUDA for nccl, CPU for gloo, else where it is."""
    backend = dist.get_backend()
    if backend == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    if backend == "gloo":
        return torch.device("cpu")
    return current


def _wait_until_released(tensor: torch.Tensor) -> None:
    """Wait until the backend's threads hold no more references to ``tensor`` (CPU tensors only).

    gloo runs a collective on its own worker threads, which may drop their references to the
    tensors a few milliseconds after ``all_reduce`` has returned. A tensor created in Python then
    has to free its Python object from that thread, which takes the GIL; if the script has ended
    in the meantime and the interpreter is shutting down, the thread is killed inside a C++
    destructor and the process aborts with "terminate called without an active exception"
    (seen with torch 2.13 under load). Waiting here, usually for no time at all, keeps that
    release inside this call. NCCL keeps its tensors longer, by design, so CUDA tensors are left.
    """
    use_count = getattr(tensor, "_use_count", None)  # private: skip where torch lacks it
    if use_count is None or tensor.device.type != "cpu":
        return
    deadline = time.monotonic() + RELEASE_TIMEOUT
    while use_count() > 1 and time.monotonic() < deadline:
        time.sleep(0.0002)


def _sum_across_ranks(tensor: torch.Tensor) -> torch.Tensor:
    """The element-wise sum of ``tensor`` over all ranks, as a new tensor on ``tensor``'s device."""
    work = tensor.detach().to(_collective_device(tensor.device), copy=True)
    dist.all_reduce(work, op=dist.ReduceOp.SUM)
    _wait_until_released(work)
    return work.to(tensor.device)


def _as_tensor(value: torch.Tensor | Number) -> torch.Tensor:
    """A Python number as a float64 tensor; a tensor as it is."""
    if isinstance(value, torch.Tensor):
        return value
    return torch.tensor(float(value), dtype=torch.float64)


@overload
def reduce_sum(value: torch.Tensor) -> torch.Tensor: ...


@overload
def reduce_sum(value: Number) -> float: ...


def reduce_sum(value: torch.Tensor | Number) -> torch.Tensor | float:
    """The sum of ``value`` over all ranks.

    A number gives a ``float``, a tensor a new tensor (element-wise sum, on the input's device,
    detached); the caller's tensor is not modified. Without a process group, or in a world of one,
    the value itself (a number as ``float``, a tensor as a detached copy).
    """
    if isinstance(value, torch.Tensor):
        if not _several_processes():
            return value.detach().clone()
        return _sum_across_ranks(value)
    number = float(value)
    if not _several_processes():
        return number
    return float(_sum_across_ranks(_as_tensor(number)).item())


@overload
def reduce_mean(value: torch.Tensor) -> torch.Tensor: ...


@overload
def reduce_mean(value: Number) -> float: ...


def reduce_mean(value: torch.Tensor | Number) -> torch.Tensor | float:
    """The mean of ``value`` over all ranks (the sum divided by the world size).

    Same kinds as :func:`reduce_sum`. An unweighted mean: when ranks count different numbers of
    samples (uneven last batches), use :func:`weighted_mean` for an exact metric.
    """
    total = reduce_sum(value)
    size = dist.get_world_size() if is_initialized() else 1
    if size == 1:
        return total
    return total / size


def _scalar(value: torch.Tensor | Number, name: str) -> float:
    """A number or one-element tensor as a float."""
    if isinstance(value, torch.Tensor):
        if value.numel() != 1:
            raise ValueError(
                f"weighted_mean: {name} must be a number or a one-element tensor, "
                f"got a tensor of shape {tuple(value.shape)}"
            )
        return float(value.item())
    return float(value)


def weighted_mean(total: torch.Tensor | Number, count: torch.Tensor | Number) -> float:
    """Sum of ``total`` over all ranks divided by the sum of ``count`` over all ranks.

    The exact metric over a sharded evaluation, e.g. ``weighted_mean(correct, seen)`` is the
    accuracy over every sample any rank evaluated, even when ranks saw different numbers of
    samples. Both are reduced in one collective.

    Raises:
        ZeroDivisionError: the counts add up to zero.
    """
    pair = torch.tensor([_scalar(total, "total"), _scalar(count, "count")], dtype=torch.float64)
    if _several_processes():
        pair = _sum_across_ranks(pair)
    total_sum, count_sum = pair.tolist()
    if count_sum == 0:
        raise ZeroDivisionError("weighted_mean: the counts add up to 0 over all ranks")
    return float(total_sum) / float(count_sum)
