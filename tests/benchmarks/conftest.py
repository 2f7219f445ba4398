"""Shows the figures of the quick speed benchmark in pytest's terminal summary (passing tests' prints are hidden
without -s or -rP)."""

from __future__ import annotations

import pytest

#: Outputs of the benchmark runs of this session, filled by test_bench_quick.py.
REPORTS: list[str] = []


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    for report in REPORTS:
        terminalreporter.section("ddp-migrate speed benchmark (--quick, figures only, not asserted)")
        terminalreporter.write(report if report.endswith("\n") else report + "\n")


@pytest.fixture
def bench_reports() -> list[str]:
    """Append a benchmark output here to have it shown in the terminal summary."""
    return REPORTS
