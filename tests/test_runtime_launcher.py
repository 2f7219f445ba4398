"""The launch helpers in tests/launch.py, which the runtime and end-to-end suites rely on."""

from __future__ import annotations

import os
import signal
import socket
import time
from pathlib import Path

import pytest

from launch import (
    LaunchError,
    LaunchTimeout,
    free_port,
    launch_environment,
    run_python,
    write_script,
)


def _alive(pid: int) -> bool:
    """Whether ``pid`` is a running (not zombie) process."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except FileNotFoundError:
        return False


def test_free_port_can_be_bound() -> None:
    port = free_port()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))


def test_launch_environment_is_clean(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("MASTER_PORT", "1234")
    monkeypatch.setenv("KEEP_ME", "yes")
    monkeypatch.setenv("DROP_ME", "yes")
    env = launch_environment({"DROP_ME": None, "EXTRA": "1", "OMP_NUM_THREADS": "2"})
    assert "RANK" not in env and "MASTER_PORT" not in env and "DROP_ME" not in env
    assert env["KEEP_ME"] == "yes" and env["EXTRA"] == "1"
    assert env["OMP_NUM_THREADS"] == "2" and env["PYTHONUNBUFFERED"] == "1"
    assert launch_environment()["OMP_NUM_THREADS"] == "1"


@pytest.mark.parametrize("fresh", [False, True], ids=["forked", "new process"])
def test_run_python_returns_output_and_honours_cwd_and_env(tmp_path: Path, fresh: bool) -> None:
    script = write_script(
        tmp_path,
        "echo.py",
        "import os, sys\n"
        "print('args', sys.argv[1:], 'cwd', os.getcwd(), 'extra', os.environ['EXTRA'])\n"
        "print('to stderr', file=sys.stderr)\n",
    )
    result = run_python(script, "a", 2, cwd=tmp_path, env={"EXTRA": "x"}, fresh=fresh)
    assert result.forked is not fresh
    assert result.returncode == 0 and not result.timed_out
    assert f"args ['a', '2'] cwd {tmp_path} extra x" in result.stdout
    assert result.stderr == "to stderr\n"


@pytest.mark.parametrize("fresh", [False, True], ids=["forked", "new process"])
def test_a_failing_launch_reports_its_output(tmp_path: Path, fresh: bool) -> None:
    script = write_script(tmp_path, "fail.py", "print('last words')\nraise SystemExit(3)\n")
    with pytest.raises(LaunchError, match="last words") as raised:
        run_python(script, fresh=fresh)
    assert raised.value.results[0].returncode == 3
    assert run_python(script, check=False, fresh=fresh).returncode == 3


@pytest.mark.parametrize("fresh", [False, True], ids=["forked", "new process"])
def test_a_timeout_kills_every_process_the_launch_started(tmp_path: Path, fresh: bool) -> None:
    # One child in the same process group, one in a session of its own (as torchrun's workers).
    pid_file = tmp_path / "children.pid"
    script = write_script(
        tmp_path,
        "hang.py",
        "import signal, subprocess, sys, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a launcher that ignores SIGTERM\n"
        "sleeper = [sys.executable, '-c', 'import time; time.sleep(120)']\n"
        "same = subprocess.Popen(sleeper)\n"
        "own = subprocess.Popen(sleeper, start_new_session=True)\n"
        f"open({str(pid_file)!r}, 'w').write(f'{{same.pid}} {{own.pid}}')\n"
        "print('hanging', flush=True)\n"
        "time.sleep(120)\n",
    )
    started = time.monotonic()
    with pytest.raises(LaunchTimeout, match="hanging"):
        run_python(script, timeout=3, fresh=fresh)
    assert time.monotonic() - started < 20
    children = [int(pid) for pid in pid_file.read_text().split()]
    deadline = time.monotonic() + 5
    while any(map(_alive, children)) and time.monotonic() < deadline:
        time.sleep(0.05)
    try:
        assert not any(map(_alive, children)), "a child outlived the timeout"
    finally:
        for pid in filter(_alive, children):
            os.kill(pid, signal.SIGKILL)


@pytest.mark.parametrize("aborts, fails", [(0, False), (1, False), (2, False), (3, True)])
def test_a_launch_that_dies_of_the_teardown_abort_runs_again_twice(aborts: int, fails: bool) -> None:
    """torch's gloo teardown race (``TEARDOWN_ABORT``) after the training ended: the launch runs again,
    up to ``MAX_TEARDOWN_RETRIES`` times, each retry recorded; an abort past them fails."""
    import launch as launcher

    calls: list[int] = []

    def attempt() -> list[launcher.LaunchResult]:
        calls.append(1)
        died = len(calls) <= aborts
        return [launcher.LaunchResult(["x"], 1 if died else 0, "", launcher.TEARDOWN_ABORT if died else "", 0.1)]

    before = len(launcher.TEARDOWN_RETRIES)
    if fails:
        with pytest.raises(launcher.LaunchError):
            launcher._launch_checked(attempt, "label", 10.0, True, True)
    else:
        launcher._launch_checked(attempt, "label", 10.0, True, True)
    assert len(calls) == min(aborts, launcher.MAX_TEARDOWN_RETRIES) + 1
    assert len(launcher.TEARDOWN_RETRIES) - before == min(aborts, launcher.MAX_TEARDOWN_RETRIES)
    del launcher.TEARDOWN_RETRIES[before:]  # not real launches: keep them out of the session's summary
