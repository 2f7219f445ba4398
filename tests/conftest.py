"""Test session hooks: report the launches repeated because of torch's gloo teardown abort, and what the
launch servers did (``launch_forked``)."""

from __future__ import annotations

import pytest

from launch import TEARDOWN_ABORT, TEARDOWN_RETRIES
from launch_forked import SERVER_COUNTS, SERVER_FAILURES


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """List every launch that ``launch`` ran twice and every launch a broken launch server handed back to new
    processes, so a rising count is seen, not hidden."""
    if SERVER_COUNTS.servers:
        terminalreporter.section("launch servers")
        for shape, servers in sorted(SERVER_COUNTS.servers.items()):
            launches = SERVER_COUNTS.launches.get(shape, 0)
            terminalreporter.write_line(f"{shape}: {servers} server(s) started, {launches} launch(es) forked")
    for failure in SERVER_FAILURES:
        terminalreporter.write_line(f"  server failed, ran as new processes: {failure}")
    if not TEARDOWN_RETRIES:
        return
    terminalreporter.section("launches repeated after a gloo teardown abort")
    terminalreporter.write_line(f"{len(TEARDOWN_RETRIES)} launch(es) died of {TEARDOWN_ABORT!r} and were run again:")
    for command in TEARDOWN_RETRIES:
        terminalreporter.write_line(f"  {command}")
