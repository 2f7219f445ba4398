"""Creating and destroying the default process group, and the barrier.

``setup()`` reads torchrun's environment (``env://``). Without it, the process forms a world of one:
the process group is built on an in-memory ``torch.distributed.HashStore``, so no free port, no file
and no network are needed, and ``DistributedDataParallel`` still wraps the model as under torchrun.
"""

from __future__ import annotations

import datetime
import os
from typing import Any

import torch
import torch.distributed as dist

from .environment import launched_by_torchrun, local_rank
from .errors import DistributedEnvironmentError

__all__ = ["barrier", "cleanup", "is_initialized", "setup"]

#: Environment variable that overrides the backend choice (``gloo``, ``nccl``, ...).
BACKEND_VARIABLE = "DDP_MIGRATE_BACKEND"
#: Environment variable holding the collective timeout in seconds.
TIMEOUT_VARIABLE = "DDP_MIGRATE_TIMEOUT"


def _choose_backend(backend: str | None) -> str:
    """The backend to use: the argument, else ``$DDP_MIGRATE_BACKEND``, else nccl on CUDA / gloo."""
    if backend:
        return backend
    from_env = os.environ.get(BACKEND_VARIABLE, "").strip()
    if from_env:
        return from_env
    return "nccl" if torch.cuda.is_available() else "gloo"


def _positive_timedelta(seconds: float, source: str) -> datetime.timedelta:
    """``seconds`` as a timedelta; ``source`` names where it came from for the error message."""
    if not seconds > 0:
        raise ValueError(f"{source} must be a positive number of seconds, got {seconds!r}")
    return datetime.timedelta(seconds=seconds)


def _resolve_timeout(timeout: float | datetime.timedelta | None) -> datetime.timedelta | None:
    """The timeout argument, else ``$DDP_MIGRATE_TIMEOUT`` seconds, else ``None`` (torch's)."""
    if isinstance(timeout, datetime.timedelta):
        return _positive_timedelta(timeout.total_seconds(), "timeout")
    if timeout is not None:
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
            raise TypeError(
                f"timeout must be seconds or a datetime.timedelta, got {type(timeout).__name__}"
            )
        return _positive_timedelta(float(timeout), "timeout")
    raw = os.environ.get(TIMEOUT_VARIABLE, "").strip()
    if not raw:
        return None
    try:
        seconds = float(raw)
    except ValueError:
        raise DistributedEnvironmentError(
            f"{TIMEOUT_VARIABLE}={raw!r} is not a number of seconds"
        ) from None
    try:
        return _positive_timedelta(seconds, TIMEOUT_VARIABLE)
    except ValueError as error:
        raise DistributedEnvironmentError(str(error)) from None


def _select_cuda_device(backend: str) -> None:
    """Bind this process to ``cuda:<local_rank>`` before any CUDA work; check that nccl has CUDA."""
    if not torch.cuda.is_available():
        if backend.strip().lower() == "nccl":
            raise DistributedEnvironmentError(
                "backend 'nccl' needs CUDA, but no CUDA device is available; use gloo "
                f"(unset {BACKEND_VARIABLE} or set {BACKEND_VARIABLE}=gloo)"
            )
        return
    local = local_rank()
    count = torch.cuda.device_count()
    if local >= count:
        raise DistributedEnvironmentError(
            f"LOCAL_RANK={local} but only {count} CUDA device(s) are visible: start at most "
            f"{count} process(es) per machine (torchrun --nproc_per_node) or check "
            "CUDA_VISIBLE_DEVICES"
        )
    torch.cuda.set_device(local)


def setup(
    backend: str | None = None,
    timeout: float | datetime.timedelta | None = None,
) -> None:
    """Initialise the default process group; a second call does nothing.

    Under torchrun (``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT``
    set) the group is created from that environment. Without any of them, a world of one process
    is created on an in-memory store, so ``python train.py`` still runs the DDP code path.

    On CUDA, ``torch.cuda.set_device(local_rank)`` runs first, before any CUDA work.

    Args:
        backend: ``"gloo"``, ``"nccl"``, ...; default ``$DDP_MIGRATE_BACKEND``, else ``nccl``
            when CUDA is available, else ``gloo``.
        timeout: timeout of collectives, in seconds or as a timedelta; default
            ``$DDP_MIGRATE_TIMEOUT`` seconds, else torch's default.

    Raises:
        DistributedEnvironmentError: the environment is partial or inconsistent (the message names
            the missing variables), or the backend does not fit the machine.
    """
    if not dist.is_available():
        raise DistributedEnvironmentError(
            "torch.distributed is not available in this PyTorch build; install a build with "
            "distributed support"
        )
    if dist.is_initialized():
        return
    launched = launched_by_torchrun()
    chosen = _choose_backend(backend)
    options: dict[str, Any] = {"backend": chosen}
    resolved_timeout = _resolve_timeout(timeout)
    if resolved_timeout is not None:
        options["timeout"] = resolved_timeout
    _select_cuda_device(chosen)
    if launched:
        dist.init_process_group(init_method="env://", **options)
    else:
        # An in-memory store: a world of one needs no port, file or network.
        store = dist.HashStore()  # type: ignore[attr-defined]
        dist.init_process_group(store=store, rank=0, world_size=1, **options)


def cleanup() -> None:
    """Destroy the default process group; safe to call twice or when :func:`setup` never ran."""
    if is_initialized():
        dist.destroy_process_group()


def is_initialized() -> bool:
    """Whether the default process group exists."""
    return dist.is_available() and dist.is_initialized()


def barrier() -> None:
    """Wait until every process reaches this point; nothing to wait for without a group or alone.

    Every rank must call it (never inside a rank-0-only branch), or the others wait forever.
    """
    if not is_initialized() or dist.get_world_size() == 1:
        return
    if dist.get_backend() == "nccl":
        # Name the device explicitly: NCCL otherwise guesses it (and warns).
        dist.barrier(device_ids=[torch.cuda.current_device()])
    else:
        dist.barrier()
