"""CI runs the speed benchmark of issue 11 in its short mode and shows the figures; no timing is asserted."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parent / "bench_speed.py"


def test_quick_benchmark_runs_and_prints_the_table(tmp_path, bench_reports):
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--python", sys.executable],
        capture_output=True, text=True, timeout=600, cwd=tmp_path,
    )
    output = done.stdout + (f"\n(stderr tail)\n{done.stderr[-2000:]}" if done.returncode else "")
    (tmp_path / "bench_speed_quick.txt").write_text(output)
    print(output)
    bench_reports.append(output)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "| goal | measure | figure | target |" in done.stdout
    for goal in "12345":
        assert f"\n| {goal} |" in done.stdout
