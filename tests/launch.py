"""Launch Python scripts the ways users launch training, for tests that must run the real thing.

- :func:`run_python`: ``python script.py args...`` (a world of one for ``ddp_migrate.runtime``);
- :func:`run_torchrun`: ``python -m torch.distributed.run --standalone --nproc_per_node=N
  script.py args...``; these two fork the program from a waiting launch server unless told otherwise
  (``launch_forked``: torch imported once per session, not three times per launch);
- :func:`run_two_nodes`: two torchrun agents on this machine, ``--nnodes=2 --nproc_per_node=1``,
  meeting through a c10d rendezvous on ``127.0.0.1:<free port>``, so global and local ranks differ;
- :func:`run_command`: any command line, with the same guarantees.

Every launch runs in its own process session with ``OMP_NUM_THREADS=1`` and
``PYTHONUNBUFFERED=1``, a clean distributed environment (no inherited ``RANK``, ``MASTER_PORT``,
... from the caller) and a hard timeout: when it passes, the whole process group (torchrun
agent and workers alike) is killed and :class:`LaunchTimeout` is raised with the tail of the
output, so a deadlock fails a test instead of hanging it. Output goes to temporary files, never
pipes, so a chatty process cannot block.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Union

__all__ = [
    "DEFAULT_TIMEOUT",
    "LaunchError",
    "LaunchResult",
    "LaunchTimeout",
    "TEARDOWN_ABORT",
    "TEARDOWN_FATAL_ERROR",
    "TEARDOWN_RETRIES",
    "free_port",
    "launch_environment",
    "run_command",
    "run_python",
    "run_torchrun",
    "run_two_nodes",
    "teardown_aborted",
    "torchrun_command",
    "write_script",
]

#: Seconds a launch may take before its process group is killed.
DEFAULT_TIMEOUT = 120.0
#: Seconds the other processes of a multi-process launch get to finish once one has failed.
FAILURE_GRACE = 10.0
#: Seconds between SIGTERM and SIGKILL when a process group is stopped.
KILL_GRACE = 3.0
#: Characters of output quoted in error messages.
TAIL_CHARS = 6000
#: What a process prints when it aborts in gloo's teardown at exit (torch 2.13 CPU, a race inside
#: torch, see ``runtime.cleanup``): about 1 launch in 30 of a script that ends with a bare
#: ``destroy_process_group()``, more on a loaded machine.
TEARDOWN_ABORT = "terminate called without an active exception"
#: The same race seen from Python: a gloo worker releasing a Python object once the interpreter is finalizing
#: ("Fatal Python error: PyThreadState_Get: ... the GIL is released", CI 2026-11-27, the control test).
TEARDOWN_FATAL_ERROR = "Python runtime state: finalizing"
#: A file to append one line per launch to (how it ran, its seconds, its command); unset: no log.
LAUNCH_LOG_VARIABLE = "DDP_MIGRATE_TEST_LAUNCH_LOG"
#: Launches retried once because a process died of :data:`TEARDOWN_ABORT` (reported by conftest).
TEARDOWN_RETRIES: list[str] = []
#: How many times a launch that died only of :data:`TEARDOWN_ABORT` runs again. Twice: one CI run of a
#: loaded machine saw a two-node launch abort twice in a row (2026-11-23), after its training had ended.
MAX_TEARDOWN_RETRIES = 2

#: Variables a launcher sets; removed from the inherited environment so a launch starts clean.
DISTRIBUTED_VARIABLES = (
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "GROUP_WORLD_SIZE",
    "ROLE_RANK",
    "ROLE_WORLD_SIZE",
    "ROLE_NAME",
    "MASTER_ADDR",
    "MASTER_PORT",
    "TORCHELASTIC_RESTART_COUNT",
    "TORCHELASTIC_MAX_RESTARTS",
    "TORCHELASTIC_RUN_ID",
    "TORCHELASTIC_USE_AGENT_STORE",
    "TORCHELASTIC_ERROR_FILE",
    "TORCHELASTIC_SIGNALS_TO_HANDLE",
    "TORCH_NCCL_ASYNC_ERROR_HANDLING",
)

PathArg = Union[str, "os.PathLike[str]"]
#: Extra environment: a value of ``None`` removes the variable.
EnvArg = Union[Mapping[str, Union[str, None]], None]


@dataclass
class LaunchResult:
    """A finished process: its command line, exit status, output and duration in seconds."""

    args: list[str]
    returncode: int
    stdout: str
    stderr: str
    duration: float
    timed_out: bool = False
    #: Run by a child of a launch server (``launch_forked``) rather than by new processes.
    forked: bool = False

    @property
    def output(self) -> str:
        """stdout followed by stderr."""
        return self.stdout + self.stderr

    def tail(self, chars: int = TAIL_CHARS) -> str:
        """The end of stdout and of stderr, for error messages."""
        return (
            ("(forked by a launch server; DDP_MIGRATE_TEST_FRESH_LAUNCHES=1 starts new processes)\n" if self.forked else "")
            + f"--- stdout (tail) ---\n{self.stdout[-chars:]}\n"
            f"--- stderr (tail) ---\n{self.stderr[-chars:]}"
        )


class LaunchError(AssertionError):
    """A launch exited with a non-zero status (an AssertionError: pytest reports a failure).

    ``results`` holds every process of the launch.
    """

    def __init__(self, message: str, results: list[LaunchResult]) -> None:
        super().__init__(message)
        self.results = results


class LaunchTimeout(LaunchError):
    """A launch ran past its timeout; its whole process group was killed."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (the OS picks it; a race is possible)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def launch_environment(env: EnvArg = None) -> dict[str, str]:
    """The environment for a launched process.

    The caller's environment without launcher variables (``RANK``, ``MASTER_PORT``, ...), plus
    ``OMP_NUM_THREADS=1`` and ``PYTHONUNBUFFERED=1``, then ``env`` on top (``None`` values remove).
    """
    result = {key: value for key, value in os.environ.items() if key not in DISTRIBUTED_VARIABLES}
    result["OMP_NUM_THREADS"] = "1"
    result["PYTHONUNBUFFERED"] = "1"
    for key, value in (env or {}).items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = str(value)
    return result


@dataclass
class _Running:
    """A started process and the files its output goes to."""

    args: list[str]
    process: subprocess.Popen[bytes]
    stdout: IO[bytes]
    stderr: IO[bytes]
    started: float
    finished: float | None = None
    timed_out: bool = False


def _start(args: Sequence[str], cwd: PathArg | None, env: EnvArg) -> _Running:
    """Start ``args`` in a new process session, its output going to temporary files."""
    stdout = tempfile.TemporaryFile()
    stderr = tempfile.TemporaryFile()
    argv = [str(arg) for arg in args]
    process = subprocess.Popen(
        argv,
        cwd=None if cwd is None else str(cwd),
        env=launch_environment(env),
        stdin=subprocess.DEVNULL,
        stdout=stdout,
        stderr=stderr,
        start_new_session=True,
    )
    return _Running(argv, process, stdout, stderr, time.monotonic())


def _signal_group(running: _Running, signum: int) -> None:
    """Send ``signum`` to the process group of ``running`` (its leader's pid is the group id)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(running.process.pid, signum)


def _process_table() -> dict[int, tuple[int, str]]:
    """``pid -> (parent pid, start time)`` of every process, read from /proc (empty without it)."""
    table: dict[int, tuple[int, str]] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return table
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as stat:
                data = stat.read()
        except OSError:
            continue
        fields = data[data.rfind(b")") + 2 :].split()  # from field 3 (state) on
        table[int(entry)] = (int(fields[1]), fields[19].decode())  # ppid, starttime
    return table


def _process_tree(root: int) -> dict[int, str]:
    """``root`` and all its descendants, as ``pid -> start time``."""
    table = _process_table()
    children: dict[int, list[int]] = {}
    for pid, (parent, _) in table.items():
        children.setdefault(parent, []).append(pid)
    tree: dict[int, str] = {}
    stack = [root]
    while stack:
        pid = stack.pop()
        if pid in table and pid not in tree:
            tree[pid] = table[pid][1]
            stack.extend(children.get(pid, []))
    return tree


def _kill_tree(tree: dict[int, str]) -> None:
    """SIGKILL each process of ``tree`` that is still the same process (same start time)."""
    table = _process_table()
    for pid, started in tree.items():
        if table.get(pid, (0, ""))[1] == started:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)


def _stop(running: _Running) -> None:
    """Stop everything the launch started: SIGTERM to its process group, then SIGKILL after
    :data:`KILL_GRACE` seconds to the group and to every descendant. torchrun starts each worker in
    a session of its own, so the process group alone would miss the workers."""
    tree = _process_tree(running.process.pid)  # before anything dies and orphans are re-parented
    if running.process.poll() is None:
        _signal_group(running, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            running.process.wait(timeout=KILL_GRACE)
    for pid in list(tree):
        tree.update(_process_tree(pid))  # children started meanwhile by processes still alive
    tree.pop(running.process.pid, None)  # the leader: killed through its group, reaped below
    _signal_group(running, signal.SIGKILL)
    _kill_tree(tree)
    running.process.wait()


def _read(stream: IO[bytes]) -> str:
    """Everything written to ``stream``, decoded as UTF-8 (undecodable bytes replaced)."""
    stream.flush()
    stream.seek(0)
    text = stream.read().decode("utf-8", errors="replace")
    stream.close()
    return text


def _wait(launched: list[_Running], timeout: float) -> list[LaunchResult]:
    """Wait for all processes; kill them all at the timeout, and the rest soon after one fails."""
    deadline = time.monotonic() + timeout
    first_failure: float | None = None
    try:
        while True:
            now = time.monotonic()
            pending = []
            for running in launched:
                code = running.process.poll()
                if code is None:
                    pending.append(running)
                    continue
                if running.finished is None:
                    running.finished = now
                if code != 0 and first_failure is None:
                    first_failure = now
            if not pending:
                break
            failure_grace_over = first_failure is not None and now - first_failure > FAILURE_GRACE
            if now > deadline or failure_grace_over:
                for running in pending:
                    running.timed_out = now > deadline
                    _stop(running)
                    running.finished = time.monotonic()
                break
            time.sleep(0.05)
    finally:
        for running in launched:
            # Also reaps grandchildren left behind by a process that exited normally.
            _stop(running)
    return [
        LaunchResult(
            args=running.args,
            returncode=running.process.returncode,
            stdout=_read(running.stdout),
            stderr=_read(running.stderr),
            duration=(running.finished or time.monotonic()) - running.started,
            timed_out=running.timed_out,
        )
        for running in launched
    ]


def _check(results: list[LaunchResult], timeout: float, check: bool) -> None:
    """Raise :class:`LaunchTimeout` / :class:`LaunchError` with the output tails when needed."""
    if any(result.timed_out for result in results):
        details = "\n".join(f"$ {' '.join(r.args)}\n{r.tail()}" for r in results)
        message = f"launch timed out after {timeout:.0f} s and was killed\n{details}"
        raise LaunchTimeout(message, results)
    failed = [result for result in results if result.returncode != 0]
    if check and failed:
        details = "\n".join(
            f"$ {' '.join(r.args)}\nexit status {r.returncode}\n{r.tail()}" for r in results
        )
        raise LaunchError(f"{len(failed)} of {len(results)} process(es) failed\n{details}", results)


def run_command(
    args: Sequence[str],
    *,
    cwd: PathArg | None = None,
    env: EnvArg = None,
    timeout: float = DEFAULT_TIMEOUT,
    check: bool = True,
    retry_teardown_abort: bool = True,
) -> LaunchResult:
    """Run one command line with the launch guarantees (clean environment, timeout kills the group).

    With ``check``, a launch that failed only because a process aborted in gloo's teardown
    (:data:`TEARDOWN_ABORT`, a torch race at exit, not the program's doing) is run again, up to
    :data:`MAX_TEARDOWN_RETRIES` times, and recorded in :data:`TEARDOWN_RETRIES`;
    ``retry_teardown_abort=False`` turns that off for tests about the teardown itself. An abort past the
    retries fails.

    Raises:
        LaunchTimeout: it ran past ``timeout`` seconds (always raised, whatever ``check`` says).
        LaunchError: it exited with a non-zero status and ``check`` is true.
    """
    launch = lambda: _wait([_start(args, cwd, env)], timeout)  # noqa: E731
    results = _launch_checked(launch, " ".join(str(arg) for arg in args), timeout, check, retry_teardown_abort)
    return results[0]


def _launch_checked(
    launch: Callable[[], list[LaunchResult]], label: str, timeout: float, check: bool, retry_teardown_abort: bool
) -> list[LaunchResult]:
    """Run ``launch()``, again (up to :data:`MAX_TEARDOWN_RETRIES` times) when ``check`` and it failed only
    of :data:`TEARDOWN_ABORT` (each retry recorded as ``label`` in :data:`TEARDOWN_RETRIES`), then raise as
    :func:`_check` says."""
    results = _logged(launch(), label)
    for _ in range(MAX_TEARDOWN_RETRIES):
        if not (check and retry_teardown_abort and _teardown_abort(results)):
            break
        TEARDOWN_RETRIES.append(label)
        results = _logged(launch(), label)
    _check(results, timeout, check)
    return results


def _logged(results: list[LaunchResult], label: str) -> list[LaunchResult]:
    """``results``, after a line for each in the file :data:`LAUNCH_LOG_VARIABLE` names (when it does): how
    it ran, its seconds and ``label``, to see where a suite's launch time goes."""
    log = os.environ.get(LAUNCH_LOG_VARIABLE, "").strip()
    if log:
        with open(log, "a", encoding="utf-8") as stream:
            for result in results:
                stream.write(f"{'forked' if result.forked else 'new'}\t{result.duration:.2f}\t{label}\n")
    return results


def _teardown_abort(results: list[LaunchResult]) -> bool:
    """Whether a launch failed, not by timeout, with a process aborting in gloo's teardown."""
    return any(
        result.returncode != 0 and not result.timed_out and teardown_aborted(result.stderr)
        for result in results
    )


def teardown_aborted(output: str) -> bool:
    """Whether ``output`` shows a process dying of gloo's teardown race (:data:`TEARDOWN_ABORT` or
    :data:`TEARDOWN_FATAL_ERROR`)."""
    return TEARDOWN_ABORT in output or TEARDOWN_FATAL_ERROR in output


def run_python(
    script: PathArg,
    *args: object,
    cwd: PathArg | None = None,
    env: EnvArg = None,
    timeout: float = DEFAULT_TIMEOUT,
    check: bool = True,
    retry_teardown_abort: bool = True,
    fresh: bool = False,
) -> LaunchResult:
    """``python script args...`` with this interpreter: a script run without torchrun.

    It runs in a child forked by a waiting launch server (``launch_forked``: torch is imported once, not per
    launch) unless ``fresh``, ``DDP_MIGRATE_TEST_FRESH_LAUNCHES=1`` or ``env`` drops a folder of the caller's
    ``PYTHONPATH`` (then :func:`run_command`).
    """
    argv = [sys.executable, str(script), *map(str, args)]
    return _run_script(
        argv, script, args, nproc=None, cwd=cwd, env=env, timeout=timeout, check=check,
        retry_teardown_abort=retry_teardown_abort, fresh=fresh,
    )


def _run_script(
    argv: list[str], script: PathArg, args: Sequence[object], *, nproc: int | None, cwd: PathArg | None, env: EnvArg,
    timeout: float, check: bool, retry_teardown_abort: bool, fresh: bool,
) -> LaunchResult:
    """Run ``argv`` (the launch of ``script args`` by python, or by torchrun with ``nproc`` workers) forked
    from a launch server when it can be, else as new processes."""
    from launch_forked import fork_plan, run_forked  # it builds on this module

    plan = None if fresh else fork_plan(env)
    if plan is None:
        return run_command(argv, cwd=cwd, env=env, timeout=timeout, check=check, retry_teardown_abort=retry_teardown_abort)

    def launch() -> list[LaunchResult]:
        forked = run_forked(argv, script, tuple(args), nproc=nproc, cwd=cwd, env=env, plan=plan, timeout=timeout)
        return [forked] if forked is not None else _wait([_start(argv, cwd, env)], timeout)

    return _launch_checked(launch, " ".join(argv), timeout, check, retry_teardown_abort)[0]


def torchrun_command(*launcher_args: str) -> list[str]:
    """The argv that starts torchrun with this interpreter (``python -m torch.distributed.run``)."""
    return [sys.executable, "-m", "torch.distributed.run", *launcher_args]


def run_torchrun(
    script: PathArg,
    *args: object,
    nproc_per_node: int = 2,
    cwd: PathArg | None = None,
    env: EnvArg = None,
    timeout: float = DEFAULT_TIMEOUT,
    check: bool = True,
    retry_teardown_abort: bool = True,
    fresh: bool = False,
) -> LaunchResult:
    """``torchrun --standalone --nproc_per_node=N script args...`` on this machine.

    The workers' output is the agent's output (torchrun does not redirect it by default). Forked from the
    workers of a waiting torchrun launch server unless ``fresh`` or the environment asks for new processes
    (see :func:`run_python`).
    """
    argv = torchrun_command(
        "--standalone", f"--nproc_per_node={nproc_per_node}", str(script), *map(str, args)
    )
    return _run_script(
        argv, script, args, nproc=nproc_per_node, cwd=cwd, env=env, timeout=timeout, check=check,
        retry_teardown_abort=retry_teardown_abort, fresh=fresh,
    )


def run_two_nodes(
    script: PathArg,
    *args: object,
    cwd: PathArg | None = None,
    env: EnvArg = None,
    timeout: float = DEFAULT_TIMEOUT,
    check: bool = True,
    port: int | None = None,
    retry_teardown_abort: bool = True,
) -> list[LaunchResult]:
    """A two-node job on one machine: two torchrun agents with one worker each.

    Each agent runs ``--nnodes=2 --nproc_per_node=1 --node_rank=<0|1> --rdzv-backend=c10d
    --rdzv-endpoint=127.0.0.1:<port>``. Both workers get ``LOCAL_RANK=0`` while their global ranks
    are 0 and 1. With the c10d rendezvous the agents' order is decided at the rendezvous, so either
    agent may host global rank 0.

    Returns:
        The results of agent 0 and agent 1, in that order.
    """
    ports = iter([port])  # the given port for the first launch; a fresh one for a repeat
    launch = lambda: _two_nodes_once(script, args, cwd, env, timeout, next(ports, None))  # noqa: E731
    return _launch_checked(launch, f"two nodes: {script}", timeout, check, retry_teardown_abort)


def _two_nodes_once(
    script: PathArg, args: Sequence[object], cwd: PathArg | None, env: EnvArg, timeout: float, port: int | None
) -> list[LaunchResult]:
    """Start both agents of :func:`run_two_nodes` and wait for them."""
    endpoint = f"127.0.0.1:{port or free_port()}"
    launched: list[_Running] = []
    try:
        for node_rank in (0, 1):
            argv = torchrun_command(
                "--nnodes=2",
                "--nproc_per_node=1",
                f"--node_rank={node_rank}",
                "--rdzv-backend=c10d",
                f"--rdzv-endpoint={endpoint}",
                "--rdzv-id=ddp-migrate-two-nodes",
                str(script),
                *map(str, args),
            )
            launched.append(_start(argv, cwd, env))
    except BaseException:
        for running in launched:
            _stop(running)
        raise
    return _wait(launched, timeout)


def write_script(folder: PathArg, name: str, source: str) -> Path:
    """Write ``source`` to ``folder/name`` and return the path (a convenience for tests)."""
    path = Path(folder) / name
    path.write_text(source, encoding="utf-8")
    return path
