"""The far end of ``launch``'s forking launches: a process that imports torch once and forks a child per program.

Started by ``launch`` as ``python launch_server.py NAME`` (a world of one) or under ``torchrun --standalone
--nproc_per_node=N`` (one server per worker, each with the environment torchrun gave it). Every server connects
to the Unix socket ``NAME`` of Linux's abstract namespace and obeys JSON lines:

- ``{"run": {...}}``: fork a child that becomes the program: its own session, the job's working folder,
  environment, ``sys.argv``, ``sys.path`` and ``sitecustomize`` of a ``PYTHONPATH`` folder, its stdout and stderr appended to the job's files, fresh seeds for
  ``random`` and numpy (a new interpreter would draw its own), then the script runs as a new ``__main__``
  and the child exits as the interpreter ends a program (a traceback and 1 for an exception). A torchrun
  worker's child keeps the worker's ranks and launcher variables but meets its peers on the job's own
  ``MASTER_PORT``, rank 0 hosting the store (the agent's store serves one group only). The server answers ``{"exit": returncode}`` (``-signal`` for a signal, as ``subprocess`` does);
- end of the socket: kill any child and exit.

The client kills a child itself (its process tree, as ``launch`` kills a launch): the server only reports the
exit and kills what the child left behind in its process group.

Only the standard library and torch are imported here. The greeting names every top-level module the server
holds: a program with a module of its own by one of those names (shadowed by ``sys.modules`` in a child) is
launched as new processes by the client. The server never runs a torch operation or starts a
thread, so a fork is as clean as a new interpreter that imported torch.
"""

from __future__ import annotations

import builtins
import importlib
import json
import os
import random
import select
import signal
import socket
import sys
import traceback
import types


class Connection:
    """JSON lines over a connected socket (both ends use it), with a buffer of its own: a line already read
    into it is :attr:`pending`, which ``select`` on the socket would not show."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buffer = b""

    @property
    def pending(self) -> bool:
        """Whether a whole message waits in the buffer."""
        return b"\n" in self.buffer

    def send(self, message: dict) -> None:
        """Write one message."""
        self.sock.sendall(json.dumps(message).encode() + b"\n")

    def receive(self, timeout: float | None) -> dict | None:
        """The next message, ``{}`` when none came within ``timeout`` seconds, ``None`` once the socket ended."""
        while b"\n" not in self.buffer:
            ready, _, _ = select.select([self.sock], [], [], timeout)
            if not ready:
                return {}
            chunk = self.sock.recv(65536)
            if not chunk:
                return None
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        return json.loads(line)


def _become_program(job: dict, started_with: dict[str, str]) -> int:
    """In the child: set the process up as ``python script`` would be, run it, and
    return its exit status. ``started_with`` is the server's environment: its launcher variables (those the
    job names) are the child's."""
    launcher = {name: started_with[name] for name in job["launcher_variables"] if name in started_with}
    os.chdir(job["cwd"])
    os.environ.clear()
    os.environ.update(job["env"])
    os.environ.update(launcher)
    if launcher:
        os.environ["MASTER_PORT"] = str(job["master_port"])
        os.environ.pop("TORCHELASTIC_USE_AGENT_STORE", None)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    for fd, path in ((1, job["stdout"]), (2, job["stderr"])):
        target = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        os.dup2(target, fd)
        os.close(target)
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, signal.default_int_handler if signum == signal.SIGINT else signal.SIG_DFL)
    random.seed()
    if "numpy" in sys.modules:
        sys.modules["numpy"].random.seed()
    script = os.path.abspath(job["script"])
    sys.path[0:1] = [os.path.dirname(os.path.realpath(script)), *job["pythonpath"]]
    sys.argv = [job["script"], *job["args"]]
    try:
        for name in job["site_modules"]:  # as site imports them when an interpreter starts
            sys.modules.pop(name, None)
            importlib.import_module(name)
        _run_as_main(script)
        return 0
    except SystemExit as exit_:
        return _exit_status(exit_.code)
    except BaseException:
        sys.excepthook(*sys.exc_info())
        return 1


def _run_as_main(script: str) -> None:
    """Run ``script`` as ``python script`` runs it: in a new ``__main__`` module that stays in ``sys.modules``
    until the interpreter ends (its globals, a DDP model or a process group, are freed at shutdown, not when
    the script returns), with the absolute ``__file__`` Python gives a script."""
    main = types.ModuleType("__main__")
    main.__file__ = script
    main.__builtins__ = builtins  # type: ignore[attr-defined]
    sys.modules["__main__"] = main
    with open(script, "rb") as source:
        code = compile(source.read(), script, "exec")
    exec(code, main.__dict__)


def _exit_status(code: object) -> int:
    """The status ``sys.exit(code)`` gives a process."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def _fork(job: dict, started_with: dict[str, str], connection: Connection) -> int:
    """Start the job's child; its pid (also its session and process group). The child never returns: it
    leaves through ``SystemExit``, so the interpreter ends it as it ends any program (waits for its threads,
    runs the ``atexit`` functions, tears the modules down)."""
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid:
        return pid
    status = 1
    try:
        connection.sock.close()
        os.setsid()
        status = _become_program(job, started_with)
    except BaseException:
        traceback.print_exc()
    raise SystemExit(status)


def _kill(pid: int, signum: int) -> None:
    """Send ``signum`` to the child's process group."""
    try:
        os.killpg(pid, signum)
    except (ProcessLookupError, PermissionError):
        pass


def _supervise(pid: int, connection: Connection) -> int | None:
    """Wait for the child; its return code, or ``None`` when the socket ended (the child is then killed)."""
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            _kill(pid, signal.SIGKILL)  # what it left behind in its group (a loader's workers)
            return os.waitstatus_to_exitcode(status)
        if connection.receive(0.02) is None:
            _kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return None


def main(socket_name: str) -> None:
    """Connect, then run the jobs the client sends until it closes the socket."""
    import torch  # noqa: F401  (the import every launch would otherwise pay)
    import torch.distributed  # noqa: F401

    # Not torch._dynamo, which DistributedDataParallel's constructor imports (1.5-2.5 s): with it imported
    # before the fork, a program ending with a bare destroy_process_group() deadlocked in about 1 launch of 10
    # (the Reducer's destructor joins a gloo worker that waits for the GIL to free its work's thread-local
    # state; 0 of 70 without, measured 2026-11-27 with torch 2.13). sympy, a third of that import, is safe
    # to take in advance (0 of 40).
    try:
        import sympy  # noqa: F401
    except ImportError:
        pass

    started_with = dict(os.environ)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect("\0" + socket_name)
    connection = Connection(sock)
    imported = sorted({name.split(".")[0] for name in sys.modules})
    connection.send({"rank": int(os.environ.get("RANK", "0")), "pid": os.getpid(), "modules": imported})
    while True:
        message = connection.receive(None)
        if message is None:
            return
        if "run" not in message:
            continue
        pid = _fork(message["run"], started_with, connection)
        connection.send({"started": pid})
        code = _supervise(pid, connection)
        if code is None:
            return
        connection.send({"exit": code})


if __name__ == "__main__":
    main(sys.argv[1])
