"""Restartable training: a snapshot of the training state, written by rank 0, read back at start.

torchrun restarts every worker of a job when one fails (``--max-restarts``) or when the membership
changes (``--nnodes=1:2``). A script that keeps a snapshot continues where the job was instead of
starting from epoch 0, as in the PyTorch DDP tutorial's torchrun step::

    snapshot = runtime.Snapshot("snapshot.pt", model=model, optimizer=optimizer)
    for epoch in range(snapshot.resume(), epochs):      # 0, or the epoch to continue with
        loader.sampler.set_epoch(epoch)
        for step, (x, y) in enumerate(loader):
            if snapshot.done(epoch, step):              # already trained before the restart
                continue
            ...
        snapshot.save(epoch + 1)                         # the next epoch starts from here

A snapshot holds the ``state_dict()`` of every object given (the model unwrapped from DDP, so its
keys have no ``module.`` prefix; optimizer, LR scheduler, GradScaler, ...) and where to continue: an
epoch and a step inside it. Nothing in it depends on the world size, so a job may resume with more
or fewer processes (with the global batch kept, a step is one global batch whatever the world size).
Random number generator states are not kept: a script that shuffles with ``DistributedSampler``
gets the same order after a restart (it is seeded by the epoch), other randomness does not repeat.

Delete the snapshot file to start a training from scratch: a finished job's snapshot says that
every epoch is done.
"""

from __future__ import annotations

import os
from typing import Any, Protocol

import torch

from .checkpoint import _atomic_torch_save
from .environment import device, is_main_process
from .modules import unwrap

__all__ = ["SNAPSHOT_VARIABLE", "Snapshot"]

#: Environment variable that, when set, replaces the path given to :class:`Snapshot`.
SNAPSHOT_VARIABLE = "DDP_MIGRATE_SNAPSHOT"
#: Marks a file written by :meth:`Snapshot.save`, with the layout version.
_FORMAT = "ddp-migrate-snapshot"
_VERSION = 1


class Stateful(Protocol):
    """What a snapshot can hold: a model, optimizer, scheduler, GradScaler, ..."""

    def state_dict(self) -> Any:  # pragma: no cover - a protocol
        """The object's state."""

    def load_state_dict(self, state: Any) -> Any:  # pragma: no cover - a protocol
        """Restore the object's state."""


class Snapshot:
    """The training state of a restartable job, kept in one file.

    Args:
        path: the snapshot file (``$DDP_MIGRATE_SNAPSHOT`` wins when set). Every node of a
            multi-node job must see the same file (a shared file system), or each node resumes
            from its own.
        **objects: what to keep, by name: anything with ``state_dict()`` and
            ``load_state_dict()``. A DDP / DataParallel model is kept unwrapped. ``None`` values
            are left out (``scaler=None`` when mixed precision is off).

    Attributes:
        epoch: the epoch to continue with (0 until :meth:`resume` found a snapshot).
        step: the step inside :attr:`epoch` to continue with (0: the epoch starts from its first
            batch).
    """

    def __init__(self, path: str | os.PathLike[str], /, **objects: Stateful | None) -> None:
        override = os.environ.get(SNAPSHOT_VARIABLE, "").strip()
        self.path: str = override or os.fspath(path)
        self.objects: dict[str, Stateful] = {
            name: value for name, value in objects.items() if value is not None
        }
        for name, value in self.objects.items():
            if not callable(getattr(value, "state_dict", None)) or not callable(
                getattr(value, "load_state_dict", None)
            ):
                raise TypeError(
                    f"Snapshot: {name}={type(value).__name__} has no state_dict() and "
                    "load_state_dict(), so it cannot be kept"
                )
        self.epoch: int = 0
        self.step: int = 0

    def exists(self) -> bool:
        """Whether a snapshot file is there to resume from."""
        return os.path.isfile(self.path)

    def resume(self, start_epoch: int = 0) -> int:
        """Load the snapshot, when there is one, into every object; return the epoch to start with.

        Every rank calls it at start and loads the same file onto its own device, so all ranks
        continue from the same state (no collective is needed). Without a snapshot nothing is
        loaded, :attr:`epoch` becomes ``start_epoch`` and :attr:`step` 0.

        Args:
            start_epoch: the epoch the script starts with when there is no snapshot.

        Raises:
            ValueError: the file is not a snapshot, or it holds other objects than this one.
        """
        if not self.exists():
            self.epoch, self.step = start_epoch, 0
            return self.epoch
        saved = torch.load(self.path, map_location=device(), weights_only=True)
        if not isinstance(saved, dict) or saved.get("format") != _FORMAT:
            raise ValueError(f"{self.path} is not a snapshot written by ddp_migrate.runtime.Snapshot")
        states: dict[str, Any] = saved["states"]
        if set(states) != set(self.objects):
            raise ValueError(
                f"the snapshot {self.path} holds {sorted(states)}, but this script keeps "
                f"{sorted(self.objects)}: delete the file to start from scratch"
            )
        for name, value in self.objects.items():
            target = unwrap(value) if isinstance(value, torch.nn.Module) else value
            target.load_state_dict(states[name])
        self.epoch, self.step = int(saved["epoch"]), int(saved["step"])
        return self.epoch

    def done(self, epoch: int, step: int) -> bool:
        """Whether step ``step`` of epoch ``epoch`` was trained before the snapshot was taken,
        i.e. comes before (:attr:`epoch`, :attr:`step`). Such a step is skipped after a resume."""
        return (epoch, step) < (self.epoch, self.step)

    def save(self, epoch: int, step: int = 0) -> None:
        """Keep the current state, to continue at step ``step`` of epoch ``epoch`` after a restart.

        At the end of epoch ``e`` call ``save(e + 1)``; after step ``s`` (counted from 0) of epoch
        ``e``, ``save(e, s + 1)``. Call it on every rank, at the same point: global rank 0 writes
        the file atomically (a temporary file, then ``os.replace``), so a restart never finds half
        a snapshot; the other ranks do nothing. There is no collective: it cannot deadlock, and a
        rank that dies meanwhile stops the others at their next gradient all-reduce, so the
        snapshot always holds a state that every rank reached.
        """
        self.epoch, self.step = epoch, step
        if not is_main_process():
            return
        states = {
            name: (unwrap(value) if isinstance(value, torch.nn.Module) else value).state_dict()
            for name, value in self.objects.items()
        }
        payload = {
            "format": _FORMAT,
            "version": _VERSION,
            "epoch": int(epoch),
            "step": int(step),
            "states": states,
        }
        folder = os.path.dirname(os.path.abspath(self.path))
        os.makedirs(folder, exist_ok=True)
        _atomic_torch_save(payload, self.path, {})

    def __repr__(self) -> str:
        return (
            f"Snapshot({self.path!r}, objects={sorted(self.objects)}, epoch={self.epoch}, "
            f"step={self.step})"
        )
