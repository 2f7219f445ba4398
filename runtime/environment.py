"""Where this process sits in the job: ranks, world sizes and its device.

Everything here reads torchrun's environment variables (or the initialised process group), so it
works before :func:`ddp_migrate.runtime.setup` runs: migrated code may compute ``runtime.device()``
at module level. Without torchrun's environment the answers describe a world of one (rank 0 of 1).

The device type comes from ``torch.accelerator`` (torch >= 2.6: CUDA, XPU, MPS, ... whichever this
build and machine have), with a fallback to ``torch.cuda`` / ``torch.xpu`` on older torch; an
accelerator counts only when ``torch.distributed`` knows a backend for it. Without one: the CPU.
A program that trains on the CPU wherever it runs says so with ``setup(device="cpu")`` (or the
environment variable ``DDP_MIGRATE_DEVICE=cpu``): every answer here then describes the CPU.
"""

from __future__ import annotations

import os

import torch
import torch.distributed as dist

from .errors import DistributedEnvironmentError

__all__ = [
    "accelerator_type",
    "default_backend",
    "device",
    "device_count",
    "device_ids",
    "is_main_process",
    "local_rank",
    "local_world_size",
    "rank",
    "select_device_type",
    "selected_device_type",
    "set_device_index",
    "world_size",
]

#: Variables that tell a process it was started by a distributed launcher.
LAUNCH_VARIABLES = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE")
#: Environment variable that makes every process train on the CPU (``cpu``), accelerator or not.
DEVICE_VARIABLE = "DDP_MIGRATE_DEVICE"
#: Device types a program may choose instead of this machine's accelerator.
CHOOSABLE_DEVICE_TYPES = ("cpu",)

#: The device type chosen by :func:`select_device_type` (``setup(device=...)``); ``None``: detected.
_selected_device_type: str | None = None

#: Variables that must all be set once any launch variable is (``LOCAL_WORLD_SIZE`` is optional).
REQUIRED_VARIABLES = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


def _is_set(name: str) -> bool:
    """Whether environment variable ``name`` holds a non-blank value."""
    return os.environ.get(name, "").strip() != ""


def _env_int(name: str, default: int) -> int:
    """Environment variable ``name`` as an int, ``default`` when unset or blank."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        return int(raw)
    except ValueError:
        raise DistributedEnvironmentError(
            f"environment variable {name}={raw!r} is not an integer; it is normally set by torchrun"
        ) from None


def _group_ready() -> bool:
    """Whether the default process group exists."""
    return dist.is_available() and dist.is_initialized()


def launched_by_torchrun() -> bool:
    """Whether this process has a complete distributed launch environment.

    Returns ``False`` when none of ``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE`` and
    ``LOCAL_WORLD_SIZE`` is set (a plain ``python train.py`` run; a stray ``MASTER_ADDR`` /
    ``MASTER_PORT`` alone does not count), ``True`` when all of ``RANK``, ``LOCAL_RANK``,
    ``WORLD_SIZE``, ``MASTER_ADDR`` and ``MASTER_PORT`` are set and consistent.

    Raises:
        DistributedEnvironmentError: the environment is partial (names the missing variables) or its
            values are not valid integers / out of range.
    """
    present = [name for name in LAUNCH_VARIABLES if _is_set(name)]
    if not present:
        return False
    missing = [name for name in REQUIRED_VARIABLES if not _is_set(name)]
    if missing:
        raise DistributedEnvironmentError(
            f"incomplete distributed environment: {', '.join(present)} "
            f"{'is' if len(present) == 1 else 'are'} set but {', '.join(missing)} "
            f"{'is' if len(missing) == 1 else 'are'} missing. Launch the script with torchrun "
            "(e.g. `torchrun --nproc_per_node=2 train.py`), which sets all of "
            f"{', '.join(REQUIRED_VARIABLES)}; or unset {', '.join(present)} to run as a single "
            "process with plain `python train.py`."
        )
    global_rank = _env_int("RANK", 0)
    size = _env_int("WORLD_SIZE", 1)
    local = _env_int("LOCAL_RANK", 0)
    port = _env_int("MASTER_PORT", 0)
    if size < 1 or not 0 <= global_rank < size:
        raise DistributedEnvironmentError(
            f"RANK={global_rank} and WORLD_SIZE={size} are inconsistent: "
            "need 0 <= RANK < WORLD_SIZE"
        )
    if local < 0:
        raise DistributedEnvironmentError(f"LOCAL_RANK={local} must not be negative")
    if _is_set("LOCAL_WORLD_SIZE"):
        local_size = _env_int("LOCAL_WORLD_SIZE", 1)
        if not 0 <= local < local_size:
            raise DistributedEnvironmentError(
                f"LOCAL_RANK={local} and LOCAL_WORLD_SIZE={local_size} are inconsistent: "
                "need 0 <= LOCAL_RANK < LOCAL_WORLD_SIZE"
            )
    if not 0 < port < 65536:
        raise DistributedEnvironmentError(f"MASTER_PORT={port} is not a valid TCP port")
    return True


def rank() -> int:
    """Global rank of this process: the process group's when initialised, else ``$RANK``, else 0."""
    if _group_ready():
        return dist.get_rank()
    return _env_int("RANK", 0)


def world_size() -> int:
    """Number of processes in the job: the process group's when initialised, else ``$WORLD_SIZE``,
    else 1."""
    if _group_ready():
        return dist.get_world_size()
    return _env_int("WORLD_SIZE", 1)


def local_rank() -> int:
    """Rank of this process on its own machine (``$LOCAL_RANK``, else 0); it picks the GPU."""
    return _env_int("LOCAL_RANK", 0)


def local_world_size() -> int:
    """Number of processes on this machine: ``$LOCAL_WORLD_SIZE``, else :func:`world_size`."""
    return _env_int("LOCAL_WORLD_SIZE", world_size())


def is_main_process() -> bool:
    """Whether this is global rank 0, the process that saves checkpoints and prints."""
    return rank() == 0


#: Default backend per device type where torch has no ``Backend.default_device_backend_map``.
_FALLBACK_BACKENDS = {"cpu": "gloo", "cuda": "nccl", "xpu": "xccl"}


def _backend_map() -> dict[str, str]:
    """torch's default backend per device type (``cuda`` -> nccl, ``xpu`` -> xccl, ``cpu`` -> gloo)."""
    known = getattr(dist.Backend, "default_device_backend_map", None) if dist.is_available() else None
    return dict(known) if known else dict(_FALLBACK_BACKENDS)


def _detected_accelerator() -> str | None:
    """The device type of this machine's accelerator per torch, or ``None`` when there is none."""
    api = getattr(torch, "accelerator", None)
    if api is not None and hasattr(api, "current_accelerator"):  # torch >= 2.6
        available = getattr(api, "is_available", None)
        if available is not None and not available():
            return None
        found = api.current_accelerator()
        return None if found is None else torch.device(found).type
    if torch.cuda.is_available():  # torch < 2.6
        return "cuda"
    xpu = getattr(torch, "xpu", None)
    if xpu is not None and xpu.is_available():
        return "xpu"
    return None


def _checked_device_type(kind: str, source: str) -> str:
    """``kind`` in lower case, when it is one of :data:`CHOOSABLE_DEVICE_TYPES`; ``source`` names
    where it came from for the error message."""
    chosen = kind.strip().lower()
    if chosen not in CHOOSABLE_DEVICE_TYPES:
        raise DistributedEnvironmentError(
            f"{source}={kind!r} is not a device type a program can choose: use "
            f"{' or '.join(repr(k) for k in CHOOSABLE_DEVICE_TYPES)}, or leave it unset for this "
            "machine's accelerator"
        )
    return chosen


def select_device_type(kind: str | torch.device | None) -> None:
    """Make this process train on ``kind`` wherever it runs: ``"cpu"`` (a program that places
    nothing on an accelerator, on a machine that has one), or ``None`` to go back to detection.

    Called by :func:`ddp_migrate.runtime.setup` (its ``device`` argument).

    Raises:
        DistributedEnvironmentError: ``kind`` is not a device type a program can choose.
    """
    global _selected_device_type
    if kind is None:
        _selected_device_type = None
        return
    name = kind.type if isinstance(kind, torch.device) else str(kind)
    _selected_device_type = _checked_device_type(name, "device")


def selected_device_type() -> str | None:
    """The device type chosen by :func:`select_device_type`, or ``None`` (this machine's accelerator)."""
    return _selected_device_type


def _cpu_chosen() -> bool:
    """Whether this process trains on the CPU by choice: ``setup(device="cpu")``, else
    ``$DDP_MIGRATE_DEVICE``."""
    if _selected_device_type is not None:
        return _selected_device_type == "cpu"
    raw = os.environ.get(DEVICE_VARIABLE, "").strip()
    return bool(raw) and _checked_device_type(raw, DEVICE_VARIABLE) == "cpu"


def accelerator_type() -> str | None:
    """The accelerator this process trains on: ``"cuda"``, ``"xpu"``, ... or ``None`` (the CPU).

    Read from ``torch.accelerator`` (torch >= 2.6; else ``torch.cuda`` and ``torch.xpu``). An
    accelerator that ``torch.distributed`` has no default backend for is not used, nor any where
    the program chose the CPU (``setup(device="cpu")`` or ``DDP_MIGRATE_DEVICE=cpu``).
    """
    if _cpu_chosen():
        return None
    kind = _detected_accelerator()
    if kind is None or kind == "cpu" or kind not in _backend_map():
        return None
    return kind


def default_backend(device_type: str | None = None) -> str:
    """torch's default process-group backend for a device type (default: this process's).

    ``nccl`` for CUDA, ``xccl`` for XPU, ``gloo`` for the CPU, from
    ``torch.distributed.Backend.default_device_backend_map``; ``gloo`` for a type torch maps to none.
    """
    kind = device_type or accelerator_type() or "cpu"
    return _backend_map().get(kind, "gloo")


def device_count(device_type: str) -> int:
    """Number of devices of ``device_type`` visible to this process (1 for the CPU)."""
    if device_type == "cpu":
        return 1
    api = getattr(torch, "accelerator", None)
    counter = getattr(api, "device_count", None)
    if counter is not None and _detected_accelerator() == device_type:
        return int(counter())
    return int(getattr(torch, device_type).device_count())


def set_device_index(device_type: str, index: int) -> None:
    """Make device ``index`` of ``device_type`` this process's current device (no-op on the CPU)."""
    if device_type == "cpu":
        return
    api = getattr(torch, "accelerator", None)
    setter = getattr(api, "set_device_index", None) or getattr(api, "set_device_idx", None)
    if setter is not None and _detected_accelerator() == device_type:
        setter(index)
    else:
        getattr(torch, device_type).set_device(index)


def device() -> torch.device:
    """This process's device: ``<accelerator>:<local_rank>`` (``cuda:1``, ``xpu:0``, ...) when an
    accelerator is available, else ``cpu``."""
    kind = accelerator_type()
    if kind is not None:
        return torch.device(kind, local_rank())
    return torch.device("cpu")


def device_ids(module: torch.nn.Module | None = None) -> list[int] | None:
    """What to pass as ``DistributedDataParallel(device_ids=...)``.

    Without ``module``: ``[local_rank]`` on an accelerator (CUDA, XPU, ...), else ``None`` (DDP on
    the CPU must not be given device ids). With the module about to be wrapped: where it actually
    is, so that a model the program keeps on the CPU by the user's choice (``--no-cuda``) wraps on a
    GPU machine too: ``[index]`` when all its parameters and buffers are on one accelerator device,
    ``None`` when they are on the CPU or spread over several devices (DDP takes no device ids
    then); a module with neither answers as without one.
    """
    if module is not None:
        places = {tensor.device for tensor in module.parameters()} | {tensor.device for tensor in module.buffers()}
        if len(places) > 1:
            return None
        if places:
            (place,) = places
            if place.type == "cpu" or place.index is None:
                return None
            return [place.index]
    if accelerator_type() is not None:
        return [local_rank()]
    return None
