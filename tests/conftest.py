"""Test session hooks: report the launches repeated because of torch's gloo teardown abort."""

from __future__ import annotations

import pytest

from launch import TEARDOWN_ABORT, TEARDOWN_RETRIES


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """List every launch that ``launch`` ran twice, so a rising count is seen, not hidden."""
    if not TEARDOWN_RETRIES:
        return
    terminalreporter.section("launches repeated after a gloo teardown abort")
    terminalreporter.write_line(f"{len(TEARDOWN_RETRIES)} launch(es) died of {TEARDOWN_ABORT!r} and were run again:")
    for command in TEARDOWN_RETRIES:
        terminalreporter.write_line(f"  {command}")
