"""Instrumentation for the end-to-end suite (tests/test_e2e.py); inactive unless asked for.

The suite puts this folder first on ``PYTHONPATH`` of the processes it launches, so Python imports this
module at start-up (``site`` imports ``sitecustomize``). When ``DDP_MIGRATE_E2E_RECORD_DIR`` names a
folder, every process appends JSON lines to ``<folder>/record-<pid>.jsonl``:

- ``{"kind": "save", ...}`` for every ``torch.save`` call, with the target path (for a file object, its
  name, or for one made by ``os.fdopen`` the path its descriptor points to, on Linux;
  ``ddp_migrate.runtime.save`` writes into ``.<name>.<pid>.<hex>.tmp`` and renames it, so the final
  target is derived from that name) and the process's ranks;
- ``{"kind": "open", ...}`` for every ``open()`` of a file for writing (modes with ``w``, ``a``, ``x`` or
  ``+``), with its absolute path;
- ``{"kind": "mkdir", ...}`` for every direct ``os.mkdir`` call (not those made by ``os.makedirs``),
  which ``DDP_MIGRATE_E2E_MKDIR_DELAY`` can slow down (see below);
- ``{"kind": "batch", ...}`` for every batch of indices a ``DataLoader`` draws: the loader (a number in
  the order loaders were first iterated), its sampler's class, the length of its dataset, the epoch
  (how many times that loader has been iterated before) and the indices.

Ranks come from the environment torchrun sets (``RANK``, ``LOCAL_RANK``, ``GROUP_RANK``); a process
without them (plain ``python``, or the torchrun agent itself) records ``null``.

Without the variable nothing is imported or patched, so the ddp-migrate command line (which must not
import torch) is unaffected.
"""

from __future__ import annotations

import os

_RECORD_DIR = os.environ.get("DDP_MIGRATE_E2E_RECORD_DIR", "").strip()


def _install(record_dir: str) -> None:
    import builtins
    import io
    import itertools
    import json
    import re
    import threading
    import time

    import torch
    import torch.utils.data.dataloader as dataloader

    lock = threading.Lock()
    path = os.path.join(record_dir, f"record-{os.getpid()}.jsonl")
    # The real open, captured before it is wrapped, so writing a record is not itself recorded.
    stream = builtins.open(path, "a", encoding="utf-8", buffering=1)

    def env_int(name: str) -> int | None:
        value = os.environ.get(name, "").strip()
        return int(value) if value.lstrip("-").isdigit() else None

    def emit(record: dict) -> None:
        record.update(
            pid=os.getpid(),
            rank=env_int("RANK"),
            local_rank=env_int("LOCAL_RANK"),
            group_rank=env_int("GROUP_RANK"),
        )
        line = json.dumps(record)
        with lock:
            try:
                stream.write(line + "\n")
            except ValueError:  # the stream was closed at interpreter shutdown
                pass

    # -- torch.save -------------------------------------------------------------------------------
    temporary_name = re.compile(r"^\.(?P<name>.+)\.\d+\.[0-9a-f]+\.tmp$")
    real_save = torch.save

    def target_of(f: object) -> tuple[str | None, str | None]:
        """(path as given or the file object's name, the final target after runtime's rename)."""
        if isinstance(f, (str, bytes, os.PathLike)):
            raw = os.path.abspath(os.fsdecode(os.fspath(f)))
        else:
            name = getattr(f, "name", None)
            if isinstance(name, int):  # os.fdopen(descriptor): ask the kernel for the path
                try:
                    name = os.readlink(f"/proc/self/fd/{name}")
                except OSError:
                    name = None
            raw = os.path.abspath(os.fsdecode(name)) if isinstance(name, (str, bytes)) else None
        if raw is None:
            return None, None
        folder, base = os.path.split(raw)
        match = temporary_name.match(base)
        return raw, os.path.join(folder, match.group("name")) if match else raw

    def save(obj, f, *args, **kwargs):
        raw, target = target_of(f)
        emit({"kind": "save", "path": raw, "target": target})
        return real_save(obj, f, *args, **kwargs)

    save.__wrapped__ = real_save  # type: ignore[attr-defined]
    torch.save = save
    torch.serialization.save = save

    # -- open() for writing -----------------------------------------------------------------------
    real_open = builtins.open

    def recording_open(file, mode="r", *args, **kwargs):
        if isinstance(mode, str) and any(flag in mode for flag in "wax+"):
            if isinstance(file, (str, bytes, os.PathLike)):
                emit({"kind": "open", "path": os.path.abspath(os.fsdecode(os.fspath(file))),
                      "mode": mode})
        return real_open(file, mode, *args, **kwargs)

    builtins.open = recording_open
    io.open = recording_open

    # -- os.mkdir: recorded, and (optionally) slowed down to expose check-then-create races ------------
    # ``if not os.path.isdir(d): os.mkdir(d)`` run by every rank is a race: when both ranks check before
    # either creates, one of them dies of FileExistsError. On one machine that happens now and then (on
    # a shared filesystem, often). With DDP_MIGRATE_E2E_MKDIR_DELAY=<seconds>, a direct os.mkdir of a
    # folder under the working directory that does not exist yet waits that long before creating it,
    # so ranks that reach the check together always collide: a flaky failure becomes a reproducible
    # one. os.makedirs (which tolerates an existing folder with exist_ok=True) is neither delayed nor
    # recorded as a direct call.
    delay = float(os.environ.get("DDP_MIGRATE_E2E_MKDIR_DELAY", "0") or 0)
    start_folder = os.path.join(os.getcwd(), "")  # only the script's own folders are delayed
    real_mkdir = os.mkdir
    real_makedirs = os.makedirs
    inside_makedirs = threading.local()

    def mkdir(path, mode=0o777, *, dir_fd=None):
        if not getattr(inside_makedirs, "depth", 0) and dir_fd is None and isinstance(
            path, (str, bytes, os.PathLike)
        ):
            target = os.path.abspath(os.fsdecode(os.fspath(path)))
            emit({"kind": "mkdir", "path": target})
            if delay > 0 and target.startswith(start_folder) and not os.path.exists(target):
                time.sleep(delay)
        return real_mkdir(path, mode, dir_fd=dir_fd)

    def makedirs(name, mode=0o777, exist_ok=False):
        inside_makedirs.depth = getattr(inside_makedirs, "depth", 0) + 1
        try:
            return real_makedirs(name, mode, exist_ok)
        finally:
            inside_makedirs.depth -= 1

    os.mkdir = mkdir
    os.makedirs = makedirs

    # -- DistributedDataParallel: the backend it reduces with, the devices its module is on ------------
    ddp_class = torch.nn.parallel.DistributedDataParallel
    real_ddp_init = ddp_class.__init__

    def ddp_init(self, module, *args, **kwargs):
        real_ddp_init(self, module, *args, **kwargs)
        emit({"kind": "ddp", "backend": str(torch.distributed.get_backend(self.process_group)),
              "devices": sorted({str(p.device) for p in module.parameters()}),
              "device_ids": self.device_ids})

    ddp_class.__init__ = ddp_init

    # -- DataLoader indices -------------------------------------------------------------------------
    loader_numbers = itertools.count()
    base_iter = dataloader._BaseDataLoaderIter
    real_init = base_iter.__init__
    real_next_index = base_iter._next_index

    def init(self, loader, *args, **kwargs):
        real_init(self, loader, *args, **kwargs)
        state = loader.__dict__.setdefault("_ddp_migrate_e2e", {"number": next(loader_numbers),
                                                                 "epochs": 0})
        try:
            dataset_size = len(loader.dataset)
        except TypeError:
            dataset_size = None
        self._ddp_migrate_e2e = {
            "loader": state["number"],
            "epoch": state["epochs"],
            "sampler": type(loader.sampler).__name__,
            "dataset_size": dataset_size,
            "batch": 0,
        }
        state["epochs"] += 1

    def next_index(self):
        indices = real_next_index(self)
        info = getattr(self, "_ddp_migrate_e2e", None)
        if info is not None:
            batch = indices if isinstance(indices, (list, tuple)) else [indices]
            emit({"kind": "batch", "loader": info["loader"], "epoch": info["epoch"],
                  "batch": info["batch"], "sampler": info["sampler"],
                  "dataset_size": info["dataset_size"], "indices": [int(i) for i in batch]})
            info["batch"] += 1
        return indices

    base_iter.__init__ = init
    base_iter._next_index = next_index


if _RECORD_DIR:
    _install(_RECORD_DIR)
