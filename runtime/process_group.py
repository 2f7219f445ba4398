"""Creating and destroying the default process group, and the barrier.

``setup()`` reads torchrun's environment (``env://``). Without it, the process forms a world of one:
the process group is built on an in-memory ``torch.distributed.HashStore``, so no free port, no file
and no network are needed, and ``DistributedDataParallel`` still wraps the model as under torchrun.

``cleanup()`` on gloo also waits until gloo's worker threads are idle, so that the process does not
abort at exit (see :func:`_wait_for_idle_gloo_workers`).
"""

from __future__ import annotations

import datetime
import os
import sys
import time
from typing import Any

import torch
import torch.distributed as dist

from .environment import (
    DEVICE_VARIABLE,
    accelerator_type,
    default_backend,
    device,
    device_count,
    launched_by_torchrun,
    local_rank,
    select_device_type,
    selected_device_type,
    set_device_index,
)
from .errors import DistributedEnvironmentError

__all__ = ["barrier", "cleanup", "is_initialized", "setup"]

#: Environment variable that overrides the backend choice (``gloo``, ``nccl``, ...).
BACKEND_VARIABLE = "DDP_MIGRATE_BACKEND"
#: Environment variable holding the collective timeout in seconds.
TIMEOUT_VARIABLE = "DDP_MIGRATE_TIMEOUT"

#: Longest wait, in seconds, in :func:`cleanup` for gloo's worker threads to become idle.
GLOO_IDLE_TIMEOUT = 2.0
#: Seconds between two looks at gloo's worker threads; the GIL is released meanwhile.
_GLOO_POLL_INTERVAL = 0.005
#: Consecutive looks that must find every gloo worker thread asleep (about 20 ms in all).
_GLOO_QUIET_POLLS = 4
#: Name torch gives gloo's worker threads (``ProcessGroupGloo::runLoop``), as in ``/proc``.
_GLOO_WORKER_NAME = b"pt_gloo_runloop"
#: ``/proc`` thread states of a thread that runs or waits for a CPU (R) or for I/O (D).
_BUSY_STATES = (b"R", b"D")


def _choose_backend(backend: str | None) -> str:
    """The backend to use: the argument, else ``$DDP_MIGRATE_BACKEND``, else torch's default for
    this process's device type (nccl on CUDA, xccl on XPU, gloo on the CPU, ...), with gloo for CPU
    tensors beside an accelerator's (``cpu:gloo,cuda:nccl``)."""
    if backend:
        return backend
    from_env = os.environ.get(BACKEND_VARIABLE, "").strip()
    if from_env:
        return from_env
    chosen = default_backend()
    kind = accelerator_type()
    if kind is None or chosen == "gloo" or not dist.is_gloo_available():
        return chosen
    # As torch's own default group: gloo beside the accelerator's backend carries collectives on CPU
    # tensors (a model the user keeps on the CPU, a metric summed on the CPU), which nccl refuses.
    return f"cpu:gloo,{kind}:{chosen}"


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


#: Backends that drive only accelerators: each needs its device type, never the CPU alone.
_ACCELERATOR_BACKENDS = {"nccl": "cuda", "xccl": "xpu"}


def _select_device(backend: str) -> None:
    """Bind this process to device ``LOCAL_RANK`` of its accelerator before any device work.

    Checks that an accelerator-only backend (nccl, xccl) has its device type, and that this machine
    has a device for every local rank. Nothing to do on the CPU.
    """
    kind = accelerator_type()
    name = backend.strip().lower()
    needed = _ACCELERATOR_BACKENDS.get(name)
    if needed is not None and kind != needed:
        raise DistributedEnvironmentError(
            f"backend {name!r} needs a {needed.upper()} device, but "
            f"{'no accelerator' if kind is None else f'only {kind!r}'} is available; use "
            f"{default_backend()} (unset {BACKEND_VARIABLE} or set {BACKEND_VARIABLE}="
            f"{default_backend()})"
        )
    if kind is None:
        return
    local = local_rank()
    count = device_count(kind)
    if local >= count:
        raise DistributedEnvironmentError(
            f"LOCAL_RANK={local} but only {count} {kind.upper()} device(s) are visible: start at "
            f"most {count} process(es) per machine (torchrun --nproc_per_node), check which "
            f"devices are visible (CUDA_VISIBLE_DEVICES, ZE_AFFINITY_MASK, ...), or, to train on "
            f"the CPU, set {DEVICE_VARIABLE}=cpu"
        )
    set_device_index(kind, local)


def setup(
    backend: str | None = None,
    timeout: float | datetime.timedelta | None = None,
    device: str | torch.device | None = None,
) -> None:
    """Initialise the default process group; a second call does nothing.

    Under torchrun (``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT``
    set) the group is created from that environment. Without any of them, a world of one process
    is created on an in-memory store, so ``python train.py`` still runs the DDP code path.

    On an accelerator (CUDA, XPU, ... from ``torch.accelerator``) the process is first bound to
    device ``LOCAL_RANK``, before any device work.

    Args:
        backend: ``"gloo"``, ``"nccl"``, ...; default ``$DDP_MIGRATE_BACKEND``, else torch's default
            backend for this process's device type (``nccl`` on CUDA, ``xccl`` on XPU, ``gloo`` on
            the CPU); on an accelerator, gloo too for collectives on CPU tensors, as torch's own
            default group (``cpu:gloo,cuda:nccl``).
        timeout: timeout of collectives, in seconds or as a timedelta; default
            ``$DDP_MIGRATE_TIMEOUT`` seconds, else torch's default.
        device: ``"cpu"`` for a program that trains on the CPU wherever it runs (it places nothing
            on an accelerator): the backend is then gloo, no device is bound, and
            :func:`device`/:func:`device_ids` answer ``cpu``/``None`` even on a GPU machine.
            Default: ``$DDP_MIGRATE_DEVICE``, else this machine's accelerator.

    Raises:
        DistributedEnvironmentError: the environment is partial or inconsistent (the message names
            the missing variables), the backend does not fit the machine, or ``device`` is not one
            a program can choose.
    """
    if not dist.is_available():
        raise DistributedEnvironmentError(
            "torch.distributed is not available in this PyTorch build; install a build with "
            "distributed support"
        )
    previous = selected_device_type()
    if device is not None:
        select_device_type(device)  # the backend and the device binding follow the choice
    if dist.is_initialized():
        return
    try:
        _create_group(backend, timeout)
    except BaseException:
        select_device_type(previous)
        raise


def _create_group(backend: str | None, timeout: float | datetime.timedelta | None) -> None:
    """Bind this process's device and create the default group (``setup()``'s work)."""
    launched = launched_by_torchrun()
    chosen = _choose_backend(backend)
    options: dict[str, Any] = {"backend": chosen}
    resolved_timeout = _resolve_timeout(timeout)
    if resolved_timeout is not None:
        options["timeout"] = resolved_timeout
    _select_device(chosen)
    if launched:
        dist.init_process_group(store=_attempt_store(resolved_timeout), **_launched_ranks(), **options)
    else:
        # An in-memory store: a world of one needs no port, file or network.
        store = dist.HashStore()  # type: ignore[attr-defined]
        dist.init_process_group(store=store, rank=0, world_size=1, **options)


#: Set by torchrun in every worker: how many times the agent has restarted its workers.
RESTART_VARIABLE = "TORCHELASTIC_RESTART_COUNT"


def _launched_ranks() -> dict[str, int]:
    """``rank`` and ``world_size`` of this worker, from torchrun's environment."""
    return {"rank": int(os.environ["RANK"]), "world_size": int(os.environ["WORLD_SIZE"])}


def _attempt_store(timeout: datetime.timedelta | None) -> dist.Store:
    """torchrun's store (``env://``), its keys kept apart for each restart of the workers.

    Since torch shares the rendezvous store with the workers (torch 2.5 and later, unless
    ``TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1``), the keys a process group writes there outlive the
    workers that wrote them. After a restart (``torchrun --max-restarts``) a new worker may then read
    the address a dead worker published and fail with "Gloo connectFullMesh failed ... Connection
    refused" (pytorch/pytorch#135712; seen with torch 2.13, about 1 restart in 2 on a busy machine).
    A prefix with ``$TORCHELASTIC_RESTART_COUNT`` gives every restart keys of its own, as torch
    itself did before sharing the store. (The count is each agent's own: on several nodes it agrees
    as long as no agent was replaced.)
    """
    kwargs = {} if timeout is None else {"timeout": timeout}
    store, _, _ = next(dist.rendezvous("env://", **kwargs))
    attempt = os.environ.get(RESTART_VARIABLE, "").strip() or "0"
    return dist.PrefixStore(f"ddp_migrate/attempt_{attempt}", store)


def cleanup() -> None:
    """Destroy the default process group; safe to call twice or when :func:`setup` never ran.

    On gloo under Linux, then wait until gloo's worker threads are idle (usually about 20 ms, at
    most :data:`GLOO_IDLE_TIMEOUT` seconds): otherwise the process may abort at exit with
    "terminate called without an active exception" (SIGABRT), after all its work, when a worker
    still has a Python object to release (see :func:`_wait_for_idle_gloo_workers`). Other backends
    (nccl, xccl) and other systems: ``destroy_process_group()`` only.

    Which torch versions need the wait: measured with torch 2.13.0 (CPU build, 2 processes under
    torchrun, the DDP training script of ``tests/test_runtime_teardown.py``): without any clean-up
    5 of 30 launches aborted, with ``destroy_process_group()`` alone 2 of 30, with this wait 0 of
    90; a script that ends while a gloo worker runs a Python future callback aborts every time
    without the wait and never with it (the deterministic test in that file). Other versions were
    not measured; that test fails on the first torch that no longer aborts, which is the signal to
    remove the wait.

    A device type chosen with ``setup(device=...)`` stays: code after the clean-up (an evaluation that
    loads a checkpoint onto ``runtime.device()``) still runs where the training ran.
    """
    if not is_initialized():
        return
    uses_gloo = "gloo" in str(dist.get_backend()).lower()  # also "cpu:gloo,cuda:nccl"
    dist.destroy_process_group()
    if uses_gloo and sys.platform.startswith("linux"):
        _wait_for_idle_gloo_workers()


def _gloo_workers() -> dict[str, tuple[bytes, bytes]] | None:
    """Each gloo worker thread of this process: thread id -> (``/proc`` state such as ``R`` or
    ``S``, scheduler statistics); ``None`` where threads cannot be observed (no ``/proc``).

    The statistics (``schedstat``: CPU time, times scheduled) change whenever the thread runs;
    empty where the kernel does not keep them.
    """
    try:
        threads = os.listdir("/proc/self/task")
    except OSError:
        return None
    workers: dict[str, tuple[bytes, bytes]] = {}
    for thread in threads:
        folder = f"/proc/self/task/{thread}"
        try:
            with open(f"{folder}/stat", "rb") as file:
                stat = file.read()
        except OSError:  # the thread has just ended
            continue
        name_end = stat.rfind(b")")  # "tid (name) state ..."
        if stat[stat.find(b"(") + 1 : name_end] != _GLOO_WORKER_NAME:
            continue
        try:
            with open(f"{folder}/schedstat", "rb") as file:
                ran = file.read()
        except OSError:
            ran = b""
        workers[thread] = (stat[name_end + 2 : name_end + 3], ran)
    return workers


def _wait_for_idle_gloo_workers(timeout: float = GLOO_IDLE_TIMEOUT) -> None:
    """Wait until no gloo worker thread may still need the GIL, at most ``timeout`` seconds.

    Why: gloo runs each collective on a worker thread, which drops the work object only after the
    caller has been released: microseconds later, or much later when the machine is loaded and
    the thread is preempted. A collective started during ``backward()`` (DDP's gradient
    all_reduce) holds a Python object in the thread-local state it captured (torch 2.13 stashes
    a ``contextvars.Context`` there for the backward pass; Python tensors and Python comm hooks
    are held the same way), and dropping it takes the GIL. If the script has ended meanwhile, the
    interpreter is shutting down: Python ends the thread inside that C++ destructor and the
    process aborts with "terminate called without an active exception" (SIGABRT), so torchrun
    reports a failed job. ``destroy_process_group()`` cannot prevent it: a live DDP model keeps
    the process group and its threads, which cannot be joined from here, and torch does not
    report when they are done.

    How: a worker with nothing left to do sleeps on its empty queue and does not run at all. One
    preempted before dropping its work is runnable (state ``R``); one waiting for the GIL gets it
    while this thread sleeps in ``time.sleep`` (which releases the GIL), so it runs. Hence once
    every worker has been found not runnable and not to have run since the previous look,
    :data:`_GLOO_QUIET_POLLS` times in a row (about 20 ms), all of them have finished with their
    last collective. (Not seen: a worker blocked for longer than that, on something other than
    the GIL, before it drops its work.) The thread state alone is not enough: a worker waiting for
    the GIL sleeps (state ``S``), but it runs, and its ``schedstat`` changes, as soon as this thread
    sleeps. Linux only (``/proc``); called once, at clean-up: nothing is added to a training step.
    """
    deadline = time.monotonic() + timeout
    quiet = 0
    previous = None
    while quiet < _GLOO_QUIET_POLLS and time.monotonic() < deadline:
        time.sleep(_GLOO_POLL_INTERVAL)
        workers = _gloo_workers()
        if workers is None:  # no /proc to look at (a container without it)
            return
        asleep = all(state not in _BUSY_STATES for state, _ in workers.values())
        quiet = quiet + 1 if asleep and workers == previous else 0
        previous = workers


def is_initialized() -> bool:
    """Whether the default process group exists."""
    return dist.is_available() and dist.is_initialized()


def barrier() -> None:
    """Wait until every process reaches this point; nothing to wait for without a group or alone.

    Every rank must call it (never inside a rank-0-only branch), or the others wait forever.
    """
    if not is_initialized() or dist.get_world_size() == 1:
        return
    here = device()
    if here.type != "cpu" and "gloo" not in str(dist.get_backend()).lower():
        # Name the device explicitly: NCCL / XCCL otherwise guess it (and warn).
        dist.barrier(device_ids=[here.index])
    else:
        dist.barrier()
