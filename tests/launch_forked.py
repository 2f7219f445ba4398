"""Launches forked from a waiting server: ``python script`` and ``torchrun script`` without paying torch's import.

Every launch of a test program pays ``import torch`` once per process (about 2 s of CPU here), three times for
a torchrun launch of two workers, against a fraction of a second for the program. A launch server
(``launch_server.py``) pays it once: a plain ``python`` process, or a real ``torchrun --standalone
--nproc_per_node=N`` launch whose every worker is a server, waits on a Unix socket and forks a child per
program. The child is set up as the launch would set up a new interpreter (working folder, environment,
``sys.argv``, ``sys.path``, output files, fresh ``random``/numpy seeds) and, under torchrun, keeps its worker's
ranks and launcher variables, meeting its peers on a port of its own. A child that fails makes the others be
killed, as torchrun's agent does; the return code is the program's (plain) or torchrun's (0, or 1 when a
worker failed). A program with a module of its own named like one the server imported (``sys.modules`` would
shadow it) runs as new processes, as does every launch of a shape whose server failed to start.

What the interpreter reads when it starts is reproduced too: a launch that sets a start-up variable (``PYTHON*``
but ``PYTHONPATH``, ``TORCH*``, ``OMP_*``, ...) is forked from a server started with it, and a ``PYTHONPATH``
folder's ``sitecustomize`` is imported by the child before the program. The tests of teardown, signals and the
launchers themselves start new processes (``fresh=True``, or ``launch.run_command``);
``DDP_MIGRATE_TEST_FRESH_LAUNCHES=1`` sends every launch to new processes.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import select
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
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
from launch_server import Connection

__all__ = ["FRESH_LAUNCHES_VARIABLE", "SERVER_FAILURES", "SERVER_COUNTS", "ForkPlan", "fork_plan", "run_forked"]

#: Set to ``1`` to start every launch as a new process tree.
FRESH_LAUNCHES_VARIABLE = "DDP_MIGRATE_TEST_FRESH_LAUNCHES"
SERVER_SCRIPT = Path(__file__).resolve().with_name("launch_server.py")
#: Seconds a server may take to start and connect (torchrun and three imports of torch on a loaded machine).
SERVER_START_TIMEOUT = 120.0
#: Seconds a server may take to answer once its child was killed before it counts as broken.
SERVER_ANSWER_GRACE = KILL_GRACE + 10.0
#: Variables read when the interpreter, its C libraries or torch start: a launch is forked from a server started
#: with the same values.
STARTUP_VARIABLE_PREFIXES = (
    "PYTHON", "TORCH", "PYTORCH", "OMP_", "MKL_", "KMP_", "LD_", "CUDA", "NCCL", "GLOO", "MALLOC", "LANG", "LC_",
    "TZ", "TMPDIR",
)
#: Files ``site`` imports from a ``PYTHONPATH`` folder at start-up.
STARTUP_FILES = ("sitecustomize.py", "usercustomize.py")
#: What went wrong with a server: the launches it could not run (each then ran as new processes, or failed
#: when its children had started; reported by conftest).
SERVER_FAILURES: list[str] = []

#: Start-up variables of a server: ``((name, value or None), ...)``, ``None`` for one the launch removes.
Startup = tuple[tuple[str, "str | None"], ...]


@dataclass
class ServerCounts:
    """Per server shape (``"python"``, ``"torchrun --nproc_per_node=2"``, with its start-up variables): how
    many servers started and how many launches they forked."""

    servers: dict[str, int] = field(default_factory=dict)
    launches: dict[str, int] = field(default_factory=dict)


SERVER_COUNTS = ServerCounts()


class ServerFailed(RuntimeError):
    """A launch server did not start, or stopped answering; ``started`` once children of a job had started."""

    def __init__(self, message: str, started: bool = False) -> None:
        super().__init__(message)
        self.started = started


@dataclass(frozen=True)
class ForkPlan:
    """How a launch with a given environment is forked: the server's start-up variables (a server is started
    with them, as a new interpreter would be), the ``PYTHONPATH`` folders the child adds to ``sys.path`` and
    the start-up modules (``sitecustomize``) it imports from them before the program."""

    startup: Startup
    pythonpath: tuple[str, ...]
    site_modules: tuple[str, ...]


def _is_startup_variable(name: str) -> bool:
    return name != "PYTHONPATH" and name.startswith(STARTUP_VARIABLE_PREFIXES)


def fork_plan(env: EnvArg) -> ForkPlan | None:
    """How to fork a launch with ``env``, or ``None`` when it needs new processes (a ``PYTHONPATH`` folder of
    the caller taken away, or ``DDP_MIGRATE_TEST_FRESH_LAUNCHES=1``)."""
    if os.environ.get(FRESH_LAUNCHES_VARIABLE, "").strip() not in ("", "0"):
        return None
    wanted, server = launch_environment(env), launch_environment(None)
    startup = tuple(sorted((key, wanted.get(key)) for key in wanted.keys() | os.environ.keys() if _is_startup_variable(key)))
    had = [folder for folder in server.get("PYTHONPATH", "").split(os.pathsep) if folder]
    has = [folder for folder in wanted.get("PYTHONPATH", "").split(os.pathsep) if folder]
    if any(folder not in has for folder in had):
        return None  # the server's sys.path would still hold it
    added = tuple(folder for folder in has if folder not in had)
    site = tuple(name[:-3] for name in STARTUP_FILES if any((Path(folder) / name).exists() for folder in added))
    return ForkPlan(startup, added, site)


def _shadows(folders: list[str], modules: frozenset[str]) -> bool:
    """Whether one of ``folders`` holds a module or package of its own named like one of ``modules``."""
    for folder in folders:
        with contextlib.suppress(OSError):
            for entry in os.listdir(folder):
                name = entry[:-3] if entry.endswith(".py") else entry
                if name in modules and (entry.endswith(".py") or os.path.isfile(os.path.join(folder, entry, "__init__.py"))):
                    return True
    return False


class _Server:
    """A running launch server: one plain process (``nproc`` None) or torchrun's ``nproc`` workers, started
    with the ``startup`` variables."""

    def __init__(self, nproc: int | None, startup: Startup) -> None:
        self.key = (nproc, startup)
        self.nproc = nproc
        self.connections: dict[int, Connection] = {}
        self.modules: frozenset[str] = frozenset()
        name = f"ddp-migrate-launch-{uuid.uuid4().hex}"  # in Linux's abstract namespace: no file to clean up
        argv = [sys.executable, str(SERVER_SCRIPT), name]
        if nproc is not None:
            argv = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}", *argv[1:]]
        self.shape = "python" if nproc is None else f"torchrun --nproc_per_node={nproc}"
        self.shape += "".join(f" {key}={value}" for key, value in startup if os.environ.get(key) != value)
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
            listener.bind("\0" + name)
            listener.listen(8)
            self.process: _Running = _start(argv, None, dict(startup))
            try:
                self._accept(listener, time.monotonic() + SERVER_START_TIMEOUT)
            except BaseException:
                self.close()
                raise
        with _LOCK:
            SERVER_COUNTS.servers[self.shape] = SERVER_COUNTS.servers.get(self.shape, 0) + 1

    def _accept(self, listener: socket.socket, deadline: float) -> None:
        """Take every worker's connection and greeting."""
        listener.settimeout(0.2)
        while len(self.connections) < (self.nproc or 1):
            if time.monotonic() > deadline or self.process.process.poll() is not None:
                self.process.stderr.seek(0)
                tail = self.process.stderr.read()[-2000:].decode(errors="replace")
                raise ServerFailed(f"the launch server did not start: {' '.join(self.process.args)}\n{tail}")
            try:
                sock, _ = listener.accept()
            except socket.timeout:
                continue
            sock.setblocking(True)
            connection = Connection(sock)
            hello = _receive(connection, deadline)
            self.connections[int(hello["rank"])] = connection
            self.modules |= frozenset(hello["modules"])

    def run(self, job: dict, timeout: float) -> tuple[dict[int, int], bool]:
        """Run ``job`` in a child of every worker: the return code of each rank, and whether it timed out.
        Once one child fails, or at the timeout, the others are stopped (torchrun's agent stops a failed
        group). Raises :class:`ServerFailed` when a worker stops answering (its children killed)."""
        started = time.monotonic()
        for connection in self.connections.values():
            connection.send({"run": job})
        pids: dict[int, int] = {}
        try:
            for rank, connection in self.connections.items():
                pids[rank] = int(_receive(connection, started + SERVER_ANSWER_GRACE)["started"])
            return self._await_exits(pids, started + timeout)
        except ServerFailed as error:
            for pid in pids.values():
                _kill_tree(_process_tree(pid))
            raise ServerFailed(str(error), started=bool(pids)) from error

    def _await_exits(self, pids: dict[int, int], deadline: float) -> tuple[dict[int, int], bool]:
        """Collect each child's return code, stopping the rest once one fails or at ``deadline``."""
        codes: dict[int, int] = {}
        trees: list[dict[int, str]] = []
        stopped_at: float | None = None
        timed_out = False
        while len(codes) < len(pids):
            waiting = {self.connections[rank].sock: rank for rank in pids if rank not in codes}
            ready = [rank for rank in waiting.values() if self.connections[rank].pending]
            if not ready:
                readable, _, _ = select.select(list(waiting), [], [], 0.1)
                ready = [waiting[sock] for sock in readable]
            for rank in ready:
                codes[rank] = int(_receive(self.connections[rank], time.monotonic() + SERVER_ANSWER_GRACE)["exit"])
            now = time.monotonic()
            if stopped_at is None and (any(code != 0 for code in codes.values()) or now > deadline):
                timed_out = now > deadline and all(code == 0 for code in codes.values())
                trees = _stop_children([pid for rank, pid in pids.items() if rank not in codes])
                stopped_at = now
            elif stopped_at is not None and now > stopped_at + KILL_GRACE:
                for tree in trees:
                    _kill_tree(tree)
                trees = []
            if stopped_at is not None and now > stopped_at + SERVER_ANSWER_GRACE:
                raise ServerFailed("the launch server did not report the end of its children")
        for tree in trees:
            _kill_tree(tree)  # what a child stopped by SIGTERM left behind in sessions of their own
        return codes, timed_out

    def close(self) -> None:
        """Stop the server and everything it started."""
        for connection in self.connections.values():
            connection.sock.close()
        self.connections.clear()
        _stop(self.process)
        self.process.stdout.close()
        self.process.stderr.close()


def _receive(connection: Connection, deadline: float) -> dict:
    """The next message on ``connection``, waiting until ``deadline``."""
    message = connection.receive(max(deadline - time.monotonic(), 0))
    if message is None:
        raise ServerFailed("a worker of the launch server closed its socket")
    if not message:
        raise ServerFailed("a worker of the launch server did not answer")
    return message


def _stop_children(pids: list[int]) -> list[dict[int, str]]:
    """SIGTERM to each child's process group; their process trees, taken first, for a SIGKILL later."""
    trees = [_process_tree(pid) for pid in pids]
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGTERM)
    return trees


_IDLE: dict[tuple[int | None, Startup], list[_Server]] = {}
#: Server shapes that failed to start: their launches go to new processes for the rest of the session.
_BROKEN: set[tuple[int | None, Startup]] = set()
_LOCK = threading.Lock()


def _take(nproc: int | None, startup: Startup) -> _Server:
    """An idle server of this shape, or a new one (a test running launches in threads gets one each)."""
    with _LOCK:
        if (nproc, startup) in _BROKEN:
            raise ServerFailed("a server of this shape failed to start earlier in the session")
        idle = _IDLE.setdefault((nproc, startup), [])
        if idle:
            return idle.pop()
    try:
        return _Server(nproc, startup)
    except (ServerFailed, OSError):
        with _LOCK:
            _BROKEN.add((nproc, startup))
        raise


def _give_back(server: _Server, launched: bool) -> None:
    with _LOCK:
        _IDLE.setdefault(server.key, []).append(server)
        if launched:
            SERVER_COUNTS.launches[server.shape] = SERVER_COUNTS.launches.get(server.shape, 0) + 1


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
    when no server could start it (recorded in :data:`SERVER_FAILURES`) or the program has a module the server
    would shadow: the caller starts new processes. A server that broke once the children had started fails
    the launch (its output so far, exit status 1): running it again could repeat what it had done."""
    folder = str(cwd if cwd is not None else os.getcwd())
    try:
        server = _take(nproc, plan.startup)
    except (ServerFailed, OSError) as error:
        SERVER_FAILURES.append(f"{' '.join(argv)}: {error}")
        return None
    script_folder = os.path.dirname(os.path.realpath(os.path.join(folder, str(script))))
    if _shadows([script_folder, *plan.pythonpath], server.modules):
        _give_back(server, launched=False)
        return None
    output = Path(tempfile.mkdtemp(prefix="ddp-migrate-forked-"))
    job = {
        "script": str(script),
        "args": [str(arg) for arg in args],
        "cwd": folder,
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
        codes, timed_out = server.run(job, timeout)
    except ServerFailed as error:
        server.close()
        SERVER_FAILURES.append(f"{' '.join(argv)}: {error}")
        if not error.started:
            shutil.rmtree(output, ignore_errors=True)
            return None
        codes, timed_out = {0: 1}, False
    except BaseException:
        server.close()
        shutil.rmtree(output, ignore_errors=True)
        raise
    else:
        _give_back(server, launched=True)
    duration = time.monotonic() - started
    texts = [(output / name).read_text(errors="replace") if (output / name).exists() else "" for name in ("stdout", "stderr")]
    shutil.rmtree(output, ignore_errors=True)
    if nproc is None:
        returncode = codes[0]
    else:
        returncode = 0 if all(code == 0 for code in codes.values()) else 1
    return LaunchResult(args=argv, returncode=returncode, stdout=texts[0], stderr=texts[1], duration=duration, timed_out=timed_out, forked=True)
