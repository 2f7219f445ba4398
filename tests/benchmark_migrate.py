"""Benchmark: how long migration and linting take per file (run by hand, not by pytest).

    python tests/benchmark_migrate.py            # in-process engine timings per fixture
    python tests/benchmark_migrate.py --tree 200 # the command line on a tree of 200 files, -j 1 vs -j N

Performance is measured here rather than asserted in tests, where timings would be flaky.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ddp_migrate.codemods import ALL_RULES
from ddp_migrate.codemods.base import Options
from ddp_migrate.engine import process

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


def engine_timings(repeat: int) -> None:
    """Time the engine (fix and lint) on every legacy fixture, in process."""
    sources = sorted([*FIXTURES.glob("scripts/*.py"), *FIXTURES.glob("cases/*.py"), *FIXTURES.glob("legacy/*.py")])
    print(f"{'fixture':<28} {'lines':>6} {'migrate ms':>11} {'lint ms':>8}")
    totals = []
    for source in sources:
        data = source.read_bytes()
        fix_times, lint_times = [], []
        for _ in range(repeat):
            start = time.perf_counter()
            process(source.name, data, ALL_RULES, Options(), fix=True)
            fix_times.append(time.perf_counter() - start)
            start = time.perf_counter()
            process(source.name, data, ALL_RULES, Options(), fix=False)
            lint_times.append(time.perf_counter() - start)
        fix_ms, lint_ms = statistics.median(fix_times) * 1000, statistics.median(lint_times) * 1000
        totals.append(fix_ms)
        lines = data.count(b"\n")
        print(f"{source.name:<28} {lines:>6} {fix_ms:>11.1f} {lint_ms:>8.1f}")
    print(f"median migrate time per file: {statistics.median(totals):.1f} ms")


def tree_timings(copies: int, jobs: int) -> None:
    """Time the command line on a tree of copies of the fixtures, serial and parallel."""
    sources = sorted(FIXTURES.glob("scripts/*.py"))
    with tempfile.TemporaryDirectory() as tmp:
        for run_jobs in (1, jobs):
            tree = Path(tmp) / f"tree-j{run_jobs}"
            tree.mkdir()
            for i in range(copies):
                shutil.copy(sources[i % len(sources)], tree / f"script_{i:04d}.py")
            start = time.perf_counter()
            subprocess.run([sys.executable, "-m", "ddp_migrate", "-q", "-j", str(run_jobs), str(tree)], check=False)
            elapsed = time.perf_counter() - start
            print(f"migrate {copies} files with -j {run_jobs}: {elapsed:.2f} s ({copies / elapsed:.1f} files/s)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=3, help="runs per fixture (the median is reported)")
    parser.add_argument("--tree", type=int, default=0, help="also time the CLI on a tree of this many files")
    parser.add_argument("--jobs", type=int, default=2, help="parallel jobs for the tree timing")
    args = parser.parse_args()
    engine_timings(args.repeat)
    if args.tree:
        tree_timings(args.tree, args.jobs)


if __name__ == "__main__":
    main()
