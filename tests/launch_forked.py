"""Launches forked from a waiting server: ``python script`` and ``torchrun script`` without paying torch's import.

Every launch of a test program pays ``import torch`` once per process (about 2 s of CPU here), three times for
a torchrun launch of two workers, against a fraction of a second for the program. A launch server
(``launch_server.py``) pays it once: a plain ``python`` process, or a real ``torchrun --standalone
--nproc_per_node=N`` launch whose every worker is a server, waits on a Unix socket and forks a child per
program. The child is set up as the launch would set up a new interpreter (working folder, environment,
``sys.argv``, ``sys.path``, output files, fresh ``random``/numpy seeds) and, under torchrun, keeps its worker's
ranks and launcher variables, meeting its peers on a port of its own. A child that fails makes the others be
killed, as torchrun's agent does; the return code is the program's (plain) or torchrun's (0, or 1 when a
worker failed).

What the interpreter reads when it starts is reproduced too: a launch that sets a start-up variable (``PYTHON*``
but ``PYTHONPATH``, ``TORCH*``, ``OMP_*``, ...) is forked from a server started with it, and a ``PYTHONPATH``
folder's ``sitecustomize`` is imported by the child before the program. The tests of teardown, signals and the
launchers themselves start new processes (``fresh=True``, or ``launch.run_command``);
``DDP_MIGRATE_TEST_FRESH_LAUNCHES=1`` sends every launch to new processes.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import select
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from launch import (
    DISTRIBUTED_VARIABLES,
    KILL_GRACE,
    EnvArg,
    LaunchResult,
    PathArg,
    _kill_tree,
    _process_tree,
    _Running,
    _start,
    _stop,
    free_port,
    launch_environment,
)

__all__ = ["FRESH_LAUNCHES_VARIABLE", "SERVER_FAILURES", "SERVER_STARTS", "ForkPlan", "fork_plan", "run_forked"]

#: Set to ``1`` to start every launch as a new process tree.
FRESH_LAUNCHES_VARIABLE = "DDP_MIGRATE_TEST_FRESH_LAUNCHES"
SERVER_SCRIPT = Path(__file__).resolve().with_name("launch_server.py")
#: Seconds a server may take to start and connect (torchrun and three imports of torch on a loaded machine).
SERVER_START_TIMEOUT = 120.0
#: Seconds a server may take to answer once its child was killed before it counts as broken.
SERVER_ANSWER_GRACE = KILL_GRACE + 10.0
#: Variables read when the interpreter or torch starts: a launch that sets one is forked from a server started
#: with it.
STARTUP_VARIABLE_PREFIXES = ("PYTHON", "TORCH", "OMP_", "MKL_", "KMP_", "LD_", "CUDA", "NCCL", "GLOO", "MALLOC")
#: Files ``site`` imports from a ``PYTHONPATH`` folder at start-up.
STARTUP_FILES = ("sitecustomize.py", "usercustomize.py")
#: Launches whose server broke while running them (each then ran as a new process tree; reported by conftest).
SERVER_FAILURES: list[str] = []
#: ``"python"`` or ``"torchrun N"``: [servers started, launches forked] (reported by conftest).
SERVER_STARTS: dict[str, list[int]] = {}


class ServerFailed(RuntimeError):
    """A launch server did not start, or stopped answering."""


@dataclass(frozen=True)
class ForkPlan:
    """How a launch with a given environment is forked: the server's start-up variables (a server is started
    with them, as a new interpreter would be), the ``PYTHONPATH`` folders the child adds to ``sys.path`` and
    the start-up modules (``sitecustomize``) it imports from them before the program."""

    startup: tuple[tuple[str, str], ...]
    pythonpath: tuple[str, ...]
    site_modules: tuple[str, ...]


def fork_plan(env: EnvArg) -> ForkPlan | None:
    """How to fork a launch with ``env``, or ``None`` when it needs new processes (a ``PYTHONPATH`` folder of
    the caller taken away, or ``DDP_MIGRATE_TEST_FRESH_LAUNCHES=1``)."""
    if os.environ.get(FRESH_LAUNCHES_VARIABLE, "").strip() not in ("", "0"):
        return None
    wanted, server = launch_environment(env), launch_environment(None)
    startup = tuple(
        sorted((key, wanted.get(key, "")) for key in wanted.keys() | server.keys()
               if key != "PYTHONPATH" and key.startswith(STARTUP_VARIABLE_PREFIXES) and wanted.get(key) != server.get(key))
    )
    had = [folder for folder in server.get("PYTHONPATH", "").split(os.pathsep) if folder]
    has = [folder for folder in wanted.get("PYTHONPATH", "").split(os.pathsep) if folder]
    if any(folder not in has for folder in had):
        return None  # the server's sys.path would still hold it
    added = tuple(folder for folder in has if folder not in had)
    site = tuple(name[:-3] for name in STARTUP_FILES if any((Path(folder) / name).exists() for folder in added))
    return ForkPlan(startup, added, site)


class _Server:
    """A running launch server: one plain process (``nproc`` None) or torchrun's ``nproc`` workers, started
    with the ``startup`` variables."""

    def __init__(self, nproc: int | None, startup: tuple[tuple[str, str], ...]) -> None:
        self.key = (nproc, startup)
        self.nproc = nproc
        self.folder = Path(tempfile.mkdtemp(prefix="ddp-migrate-launch-"))
        self.sockets: dict[int, socket.socket] = {}
        self.buffers: dict[int, bytes] = {}
        path = str(self.folder / "socket")
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(path)
        listener.listen(8)
        argv = [sys.executable, str(SERVER_SCRIPT), path]
        if nproc is not None:
            argv = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}", *argv[1:]]
        self.shape = "python" if nproc is None else f"torchrun --nproc_per_node={nproc}"
        self.shape += "".join(f" {key}={value}" for key, value in startup)
        self.process: _Running = _start(argv, None, dict(startup))
        try:
            self._accept(listener, time.monotonic() + SERVER_START_TIMEOUT)
        except BaseException:
            self.close()
            raise
        finally:
            listener.close()
        SERVER_STARTS.setdefault(self.shape, [0, 0])[0] += 1

    def _accept(self, listener: socket.socket, deadline: float) -> None:
        """Take every worker's connection and greeting."""
        listener.settimeout(0.2)
        while len(self.sockets) < (self.nproc or 1):
            if time.monotonic() > deadline or self.process.process.poll() is not None:
                raise ServerFailed(f"the launch server did not start: {self.process.args}")
            try:
                connection, _ = listener.accept()
            except socket.timeout:
                continue
            connection.setblocking(True)
            self.buffers[-1] = b""
            self.sockets[-1] = connection
            hello = self._receive(-1, deadline)
            rank = int(hello["rank"])
            self.sockets[rank] = self.sockets.pop(-1)
            self.buffers[rank] = self.buffers.pop(-1)

    def _receive(self, rank: int, deadline: float) -> dict:
        """The next message of worker ``rank``, waiting until ``deadline``."""
        while b"\n" not in self.buffers[rank]:
            remaining = deadline - time.monotonic()
            ready, _, _ = select.select([self.sockets[rank]], [], [], max(remaining, 0))
            if not ready:
                raise ServerFailed(f"worker {rank} of the launch server did not answer")
            chunk = self.sockets[rank].recv(65536)
            if not chunk:
                raise ServerFailed(f"worker {rank} of the launch server closed its socket")
            self.buffers[rank] += chunk
        line, self.buffers[rank] = self.buffers[rank].split(b"\n", 1)
        return json.loads(line)

    def _send(self, rank: int, message: dict) -> None:
        self.sockets[rank].sendall(json.dumps(message).encode() + b"\n")

    def run(self, job: dict, timeout: float) -> tuple[dict[int, int], bool]:
        """Run ``job`` in a child of every worker: the return code of each rank, and whether it timed out.
        Once one child fails, or at the timeout, the others are killed: SIGTERM to their process groups, then
        SIGKILL to their process trees (torchrun's agent stops a failed group). Raises :class:`ServerFailed` when a worker stops answering."""
        started = time.monotonic()
        for rank in self.sockets:
            self._send(rank, {"run": job})
        pids = {rank: int(self._receive(rank, started + SERVER_ANSWER_GRACE)["started"]) for rank in self.sockets}
        codes: dict[int, int] = {}
        deadline, killed_at, timed_out = started + timeout, None, False
        trees: list[dict[int, str]] = []
        while len(codes) < len(self.sockets):
            pending = [rank for rank in self.sockets if rank not in codes]
            waiting = {self.sockets[rank]: rank for rank in pending}
            ready, _, _ = select.select(list(waiting), [], [], 0.1)
            for sock in ready:
                rank = waiting[sock]
                codes[rank] = int(self._receive(rank, time.monotonic() + SERVER_ANSWER_GRACE)["exit"])
            now = time.monotonic()
            failed = any(code != 0 for code in codes.values())
            if killed_at is None and (failed or now > deadline):
                timed_out = not failed
                trees = [_process_tree(pids[rank]) for rank in self.sockets if rank not in codes]
                for rank in self.sockets:
                    if rank not in codes:
                        with contextlib.suppress(ProcessLookupError, PermissionError):
                            os.killpg(pids[rank], signal.SIGTERM)
                killed_at = now
            elif killed_at is not None and trees and now > killed_at + KILL_GRACE:
                for tree in trees:
                    _kill_tree(tree)
                trees = []
            if killed_at is not None and now > killed_at + SERVER_ANSWER_GRACE:
                raise ServerFailed("the launch server did not report the end of its children")
        return codes, timed_out

    def close(self) -> None:
        """Stop the server and everything it started."""
        for connection in self.sockets.values():
            connection.close()
        self.sockets.clear()
        _stop(self.process)
        self.process.stdout.close()
        self.process.stderr.close()
        shutil.rmtree(self.folder, ignore_errors=True)


_IDLE: dict[tuple[int | None, tuple[tuple[str, str], ...]], list[_Server]] = {}
_LOCK = threading.Lock()


def _take(nproc: int | None, startup: tuple[tuple[str, str], ...]) -> _Server:
    """An idle server of this shape, or a new one (a test running launches in threads gets one each)."""
    with _LOCK:
        idle = _IDLE.setdefault((nproc, startup), [])
        if idle:
            return idle.pop()
    return _Server(nproc, startup)


def _give_back(server: _Server) -> None:
    with _LOCK:
        _IDLE.setdefault(server.key, []).append(server)


@atexit.register
def _close_all() -> None:
    with _LOCK:
        servers = [server for idle in _IDLE.values() for server in idle]
        _IDLE.clear()
    for server in servers:
        server.close()


def run_forked(
    argv: list[str], script: PathArg, args: tuple[object, ...], *, nproc: int | None, cwd: PathArg | None,
    env: EnvArg, plan: ForkPlan, timeout: float
) -> LaunchResult | None:
    """Run ``script args`` in children of a launch server (``nproc`` None: plain python; else a torchrun
    launch of ``nproc`` workers). ``argv`` is the command line it stands for, kept in the result. ``None``
    when no server could run it (recorded in :data:`SERVER_FAILURES`): the caller starts new processes."""
    output = Path(tempfile.mkdtemp(prefix="ddp-migrate-forked-"))
    job = {
        "script": str(script),
        "args": [str(arg) for arg in args],
        "cwd": str(cwd if cwd is not None else os.getcwd()),
        "env": launch_environment(env),
        "pythonpath": list(plan.pythonpath),
        "site_modules": list(plan.site_modules),
        "stdout": str(output / "stdout"),
        "stderr": str(output / "stderr"),
        "master_port": free_port() if nproc is not None else 0,
        "launcher_variables": list(DISTRIBUTED_VARIABLES),
    }
    started = time.monotonic()
    try:
        server = _take(nproc, plan.startup)
    except ServerFailed as error:
        SERVER_FAILURES.append(f"{' '.join(argv)}: {error}")
        return None
    try:
        codes, timed_out = server.run(job, timeout)
    except (ServerFailed, OSError) as error:
        server.close()
        SERVER_FAILURES.append(f"{' '.join(argv)}: {error}")
        shutil.rmtree(output, ignore_errors=True)
        return None
    _give_back(server)
    SERVER_STARTS[server.shape][1] += 1
    duration = time.monotonic() - started
    texts = [(output / name).read_text(errors="replace") if (output / name).exists() else "" for name in ("stdout", "stderr")]
    shutil.rmtree(output, ignore_errors=True)
    if nproc is None:
        returncode = codes[0]
    else:
        returncode = 0 if all(code == 0 for code in codes.values()) else 1
    return LaunchResult(args=argv, returncode=returncode, stdout=texts[0], stderr=texts[1], duration=duration, timed_out=timed_out, forked=True)
