"""Checkpoints: saved once by global rank 0, atomically, then a barrier; loaded onto this device."""

from __future__ import annotations

import contextlib
import copy
import os
import stat
import uuid
from typing import IO, Any, Union

import torch

from .environment import device, is_main_process
from .modules import WRAPPERS, unwrap
from .process_group import barrier

__all__ = ["load", "save"]

#: What ``torch.save`` / ``torch.load`` accept as a destination or source.
FileLike = Union[str, "os.PathLike[str]", IO[bytes]]

_NOT_GIVEN: Any = object()


def _unwrap_for_saving(obj: Any, depth: int = 0) -> Any:
    """``obj`` with DDP/DataParallel wrappers removed: at the top level and inside dicts, lists and tuples,
    however nested (``{"nets": {"main": model}}``).

    The caller's containers are never modified: a shallow copy (keeping its type, e.g. a state dict's
    ``OrderedDict`` with ``_metadata``) is made only where a value inside needs unwrapping. Tensors and
    other values are left as they are (a state dict's tensors are not walked one by one for nothing).
    """
    if isinstance(obj, WRAPPERS):
        return unwrap(obj)
    if depth > 8:
        return obj
    if isinstance(obj, dict):
        changed = {key: _unwrap_for_saving(value, depth + 1) for key, value in obj.items() if isinstance(value, (dict, list, tuple, *WRAPPERS))}
        changed = {key: value for key, value in changed.items() if value is not obj[key]}
        if not changed:
            return obj
        result = copy.copy(obj)
        for key, value in changed.items():
            result[key] = value
        return result
    if isinstance(obj, (list, tuple)) and not hasattr(obj, "_fields"):
        items = [_unwrap_for_saving(value, depth + 1) if isinstance(value, (dict, list, tuple, *WRAPPERS)) else value for value in obj]
        if all(new is old for new, old in zip(items, obj)):
            return obj
        return type(obj)(items)
    return obj


def _atomic_torch_save(obj: Any, path: str | os.PathLike[str], kwargs: dict[str, Any]) -> None:
    """``torch.save`` into a temporary file beside ``path``, then rename it over ``path``.

    A reader never sees a half-written checkpoint, and a crash leaves the previous one intact. An
    existing file's permissions are kept; a new file gets the usual ``0o666 & ~umask``.
    """
    target = os.fspath(path)
    if os.path.islink(target):
        target = os.path.realpath(target)  # write through the link, as torch.save would
    folder, name = os.path.split(os.path.abspath(target))
    temporary = os.path.join(folder, f".{name}.{os.getpid()}.{uuid.uuid4().hex[:12]}.tmp")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0)
    descriptor = os.open(temporary, flags, 0o666)
    try:
        with os.fdopen(descriptor, "wb") as stream:
            torch.save(obj, stream, **kwargs)
            stream.flush()
            os.fsync(stream.fileno())
        with contextlib.suppress(FileNotFoundError):
            os.chmod(temporary, stat.S_IMODE(os.stat(target).st_mode))
        os.replace(temporary, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


def save(obj: Any, path: FileLike, **torch_save_kwargs: Any) -> None:
    """Save ``obj`` like ``torch.save``, once for the whole job, then wait for every rank.

    - Only global rank 0 writes; the other ranks create nothing.
    - DistributedDataParallel / DataParallel wrappers are removed, both when ``obj`` is a wrapped
      model and when it is a dict holding wrapped models, so the checkpoint loads into the plain
      model. (A wrapped model's ``state_dict()`` itself still has ``module.`` keys: save
      ``runtime.unwrap(model).state_dict()`` instead.)
    - A path (str or ``os.PathLike``) is written atomically: a temporary file in the same folder,
      then ``os.replace``. A file-like object is handed to ``torch.save`` as it is.
    - Then every rank waits at a barrier, so a ``load`` right after never reads a half-written file.
      Call it on every rank (never inside an ``if rank == 0:`` branch), or the barrier deadlocks.

    Args:
        obj: what to save.
        path: destination path or binary file object.
        **torch_save_kwargs: passed to ``torch.save``.
    """
    try:
        if is_main_process():
            payload = _unwrap_for_saving(obj)
            if isinstance(path, (str, os.PathLike)):
                _atomic_torch_save(payload, path, torch_save_kwargs)
            else:
                torch.save(payload, path, **torch_save_kwargs)
    finally:
        # Also after a failed write: the other ranks then fail on the missing file instead of
        # waiting at the barrier until the collective timeout.
        barrier()


def load(path: FileLike, map_location: Any = _NOT_GIVEN, **kwargs: Any) -> Any:
    """``torch.load`` with ``map_location`` defaulting to this process's device.

    Every rank loads its own copy onto its own GPU (or the CPU), instead of all of them onto the
    device the checkpoint was saved from. A ``map_location`` given by the caller wins.

    Args:
        path: source path or binary file object.
        map_location: as for ``torch.load``; default :func:`ddp_migrate.runtime.device`.
        **kwargs: passed to ``torch.load`` (e.g. ``weights_only``).
    """
    if map_location is _NOT_GIVEN:
        map_location = device()
    return torch.load(path, map_location=map_location, **kwargs)
