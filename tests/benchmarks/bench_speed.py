"""Speed benchmark of issue 11: the five goals, each measured side by side in one run (run by hand).

    python tests/benchmarks/bench_speed.py              # full: ~60 torch files vs TorchFix, whole torch package
    python tests/benchmarks/bench_speed.py --quick      # ~10 files, no whole-package run, < 60 s
    python tests/benchmarks/bench_speed.py --python /tmp/before-venv/bin/python   # measure another ddp_migrate

The inputs are the INSTALLED torch package's own source (a deterministic selection copied into a temporary
folder) and the training fixtures of this repository (fixtures/scripts, fixtures/legacy). ``--python`` is the
interpreter whose ``ddp_migrate`` is measured (its ``ddp-migrate`` console script next to it when present,
``python -m ddp_migrate`` otherwise); the fixtures and the corpus are always those of this checkout and of the
current interpreter's torch, so two interpreters (e.g. an old checkout installed in a venv) see the same files.

TorchFix (``pip install torchfix``; it does not depend on torch) is installed by the script into its own venv
under ``~/.cache/ddp-migrate-bench/torchfix-venv`` (``$DDP_MIGRATE_BENCH_CACHE`` overrides the folder); it is
skipped with a message where it cannot be installed, and in ``--quick`` mode unless it is already there.

No figure here is asserted: timings on a shared machine are noisy. Wall times of command-line runs are the
best of ``--repeat`` runs (the least disturbed by other processes).
"""

from __future__ import annotations

import argparse
import ast
import importlib.metadata
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "fixtures"
CACHE = Path(os.environ.get("DDP_MIGRATE_BENCH_CACHE", Path.home() / ".cache" / "ddp-migrate-bench"))
TORCHFIX_VENV = CACHE / "torchfix-venv"
TORCHFIX_REQUIREMENT = "torchfix==0.7.0"
HEADER = "| goal | measure | figure | target |"

# ---------------------------------------------------------------------------------------------------------------
# Helpers run in the measured interpreter (``--inner-migrate``, ``--inner-rss``)
# ---------------------------------------------------------------------------------------------------------------


def inner_migrate(repeat: int, step: int) -> None:
    """Goal 3, in process of the measured interpreter: migration vs a bare libcst parse+codegen per fixture."""
    import hashlib

    import libcst
    from ddp_migrate.codemods import ALL_RULES
    from ddp_migrate.codemods.base import Options
    from ddp_migrate.engine import process

    rules = tuple(rule for rule in ALL_RULES if getattr(rule, "enabled_by_default", True))
    sources = sorted([*FIXTURES.glob("scripts/*.py"), *FIXTURES.glob("legacy/*.py")])[::step]
    rows = []
    digest = hashlib.sha256()
    warm = sources[0].read_bytes()
    process(str(sources[0]), warm, rules, Options(), True)  # warm-up (imports, caches)
    _ = libcst.parse_module(warm.decode("utf-8")).code
    for source in sources:
        data = source.read_bytes()
        text = data.decode("utf-8")
        migrate_times, parse_times = [], []
        for _ in range(repeat):
            start = time.perf_counter()
            result = process(str(source), data, rules, Options(), True)
            migrate_times.append(time.perf_counter() - start)
            start = time.perf_counter()
            _ = libcst.parse_module(text).code
            parse_times.append(time.perf_counter() - start)
        rows.append(
            {
                "name": source.name,
                "lines": data.count(b"\n"),
                "migrate_ms": statistics.median(migrate_times) * 1000,
                "parse_ms": statistics.median(parse_times) * 1000,
                "error": result.error,
            }
        )
        digest.update(source.name.encode() + b"\0" + (result.output or data) + b"\0")
    print(json.dumps({"rows": rows, "sha256": digest.hexdigest()}))


def inner_rss(timeout: float, command: list[str]) -> None:
    """Run ``command`` (output discarded), then print its wall time, exit code and the largest max RSS among it
    and the children it waited for (``RUSAGE_CHILDREN``: the wrapper's own memory is not counted)."""
    import resource

    start = time.perf_counter()
    child = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    try:
        _, err = child.communicate(timeout=timeout)
        code, timed_out = child.returncode, False
    except subprocess.TimeoutExpired:
        os.killpg(child.pid, signal.SIGKILL)
        _, err = child.communicate()
        code, timed_out = None, True
    wall = time.perf_counter() - start
    maxrss_kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    tail = err.decode("utf-8", "replace").strip().splitlines()[-1:] if err else []
    print(json.dumps({"wall": wall, "rc": code, "timed_out": timed_out, "maxrss_kb": maxrss_kb, "tail": tail}))


# ---------------------------------------------------------------------------------------------------------------
# Corpus
# ---------------------------------------------------------------------------------------------------------------


def torch_root() -> Path:
    import torch

    return Path(torch.__file__).resolve().parent


def count_lines(path: Path) -> int:
    return path.read_bytes().count(b"\n")


def select_corpus(root: Path, files: int, min_lines: int = 100) -> list[Path]:
    """The first ``files`` of every k-th of the sorted .py files under torch/ of at least ``min_lines`` lines
    (k = such files // ``files``): ~60 files give ~40k lines of torch 2.x."""
    every = [path for path in sorted(root.rglob("*.py")) if count_lines(path) >= min_lines]
    step = max(1, len(every) // files)
    return every[::step][:files]


def copy_files(paths: list[Path], root: Path, target: Path) -> None:
    for path in paths:
        dest = target / path.relative_to(root)
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, dest)


# ---------------------------------------------------------------------------------------------------------------
# Runners
# ---------------------------------------------------------------------------------------------------------------


def tool_command(python: str) -> list[str]:
    script = Path(python).parent / "ddp-migrate"
    return [str(script)] if script.exists() else [python, "-m", "ddp_migrate"]


def timed(command: list[str], cwd: Path | None = None, timeout: float = 1800) -> tuple[float, int, str]:
    start = time.perf_counter()
    done = subprocess.run(command, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=timeout)
    wall = time.perf_counter() - start
    tail = done.stderr.decode("utf-8", "replace").strip().splitlines()
    return wall, done.returncode, tail[-1] if tail else ""


def best_of(command: list[str], repeat: int, cwd: Path | None = None) -> tuple[float, int, str]:
    runs = [timed(command, cwd) for _ in range(repeat)]
    return min(runs, key=lambda run: run[0])


def venv_python(venv: Path) -> Path:
    return venv / ("Scripts" if os.name == "nt" else "bin") / "python"


def torchfix_executable(install: bool) -> tuple[Path | None, str]:
    """The ``torchfix`` of the cache venv, installing it there when ``install``; (None, why) when unavailable."""
    exe = TORCHFIX_VENV / "bin" / "torchfix"
    if exe.exists():
        return exe, ""
    if not install:
        return None, f"not installed in {TORCHFIX_VENV} (--quick does not install it; run the full benchmark once)"
    try:
        CACHE.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory() as download:
            subprocess.run(
                [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", download, TORCHFIX_REQUIREMENT],
                check=True, capture_output=True, timeout=300,
            )
            wheel = next(Path(download).glob("*.whl"))
            with zipfile.ZipFile(wheel) as archive:
                metadata = next(name for name in archive.namelist() if name.endswith(".dist-info/METADATA"))
                requires = [
                    line.split(":", 1)[1].strip()
                    for line in archive.read(metadata).decode().splitlines()
                    if line.startswith("Requires-Dist:") and "extra ==" not in line
                ]
            subprocess.run([sys.executable, "-m", "venv", str(TORCHFIX_VENV)], check=True, capture_output=True)
            pip = [str(venv_python(TORCHFIX_VENV)), "-m", "pip", "install", "-q"]
            needs_torch = any(req.split()[0].split(";")[0].lower().startswith("torch") for req in requires
                              if not req.lower().startswith("torchfix"))
            if needs_torch:  # never pull torch into this venv: the package alone plus its small requirements
                small = [req for req in requires if not req.lower().startswith("torch")]
                subprocess.run(pip + small, check=True, capture_output=True, timeout=600)
                subprocess.run(pip + ["--no-deps", str(wheel)], check=True, capture_output=True, timeout=600)
            else:
                subprocess.run(pip + [str(wheel)], check=True, capture_output=True, timeout=600)
    except (subprocess.SubprocessError, OSError, StopIteration) as error:
        shutil.rmtree(TORCHFIX_VENV, ignore_errors=True)
        detail = getattr(error, "stderr", b"") or b""
        detail = detail.decode("utf-8", "replace").strip().splitlines()[-1:] if detail else []
        return None, f"could not be installed ({type(error).__name__}{': ' + detail[0] if detail else ''})"
    if not exe.exists():
        return None, "installed, but no torchfix executable in the venv"
    return exe, ""


def interrupt(command: list[str], after: float = 1.0, timeout: float = 300) -> tuple[str, str]:
    """Start ``command`` in its own process group, send SIGINT to the group (as Ctrl-C in a terminal does) after
    ``after`` seconds; return (time from the signal to the exit, exit code)."""
    child = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    time.sleep(after)
    if child.poll() is not None:
        return f"finished before the signal (in < {after:.0f} s)", str(child.returncode)
    sent = time.perf_counter()
    os.killpg(child.pid, signal.SIGINT)
    try:
        child.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(child.pid, signal.SIGKILL)
        child.wait()
        return f"> {timeout:.0f} s (killed)", "none"
    code = child.returncode
    return f"{time.perf_counter() - sent:.2f} s", f"{128 - code if code < 0 else code}"


# ---------------------------------------------------------------------------------------------------------------
# Main
# ---------------------------------------------------------------------------------------------------------------


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small corpus, no whole-package run, TorchFix only if installed")
    parser.add_argument("--python", default=sys.executable, help="interpreter whose ddp_migrate is measured")
    parser.add_argument("--repeat", type=int, default=None, help="runs per command-line figure (best kept)")
    parser.add_argument("--package-timeout", type=float, default=1200, help="seconds allowed for the whole-package lint")
    parser.add_argument("--no-torchfix", action="store_true", help="skip TorchFix")
    parser.add_argument("--inner-migrate", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--inner-rss", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.inner_migrate is not None:
        inner_migrate(args.inner_migrate, 3 if args.quick else 1)
        return 0
    if args.inner_rss is not None:
        inner_rss(float(args.inner_rss[0]), args.inner_rss[1:])
        return 0

    repeat = args.repeat or (1 if args.quick else 2)
    python = str(Path(args.python))
    tool = tool_command(python)
    rows: list[tuple[str, str, str, str]] = []
    notes: list[str] = []

    def row(goal: str, measure: str, figure: str, target: str = "") -> None:
        rows.append((goal, measure, figure, target))
        print(f"  [{goal}] {measure}: {figure}", file=sys.stderr, flush=True)

    version = subprocess.run(tool + ["--version"], capture_output=True, text=True).stdout.strip()
    where = subprocess.run(
        [python, "-c", "import ddp_migrate, os; print(os.path.dirname(ddp_migrate.__file__))"],
        capture_output=True, text=True,
    ).stdout.strip()
    root = torch_root()
    import libcst
    import torch

    with tempfile.TemporaryDirectory(prefix="ddp-bench-") as scratch_name:
        scratch = Path(scratch_name)
        # ---- Goal 1: lint vs TorchFix on ~60 torch files / ~40k lines ----
        corpus_files = select_corpus(root, 10) if args.quick else select_corpus(root, 60)
        corpus = scratch / "corpus"
        copy_files(corpus_files, root, corpus)
        corpus_lines = sum(count_lines(path) for path in corpus_files)
        label = f"{len(corpus_files)} torch files, {corpus_lines} lines"
        ours, code, _ = best_of(tool + ["lint", "."], repeat, cwd=corpus)
        row("1", f"ddp-migrate lint ({label}, default jobs, exit {code})", f"{ours:.2f} s")
        if args.no_torchfix:
            torchfix, why = None, "--no-torchfix"
        else:
            torchfix, why = torchfix_executable(install=not args.quick)
        if torchfix is not None:
            theirs, tf_code, _ = best_of([str(torchfix), "."], repeat, cwd=corpus)
            row("1", f"TorchFix ({label}, default jobs, exit {tf_code})", f"{theirs:.2f} s")
            row("1", "ratio ddp-migrate / TorchFix", f"{ours / theirs:.2f}", "<= 0.10")
        else:
            row("1", "TorchFix", f"skipped: {why}")
            row("1", "ratio ddp-migrate / TorchFix", "n/a (TorchFix skipped)", "<= 0.10")
        texts = [path.read_text(encoding="utf-8") for path in corpus_files]
        start = time.perf_counter()
        for text in texts:
            _ = libcst.parse_module(text).code
        row("1", f"reference: libcst parse+codegen, in process, 1 core ({label})", f"{time.perf_counter() - start:.2f} s")
        start = time.perf_counter()
        for text in texts:
            ast.parse(text)
        row("1", f"reference: ast.parse, in process, 1 core ({label})", f"{time.perf_counter() - start:.3f} s")

        # ---- Goals 2 and 5: the whole torch package, default jobs, max RSS ----
        package = scratch / "torch"
        every = sorted(root.rglob("*.py"))
        if not args.quick:
            copy_files(every, root, package)
            package_lines = sum(count_lines(path) for path in every)
            measured = subprocess.run(
                [sys.executable, __file__, "--inner-rss", str(args.package_timeout), *tool, "lint", "."],
                cwd=package, capture_output=True, text=True,
            )
            result = json.loads(measured.stdout.strip().splitlines()[-1])
            what = f"lint of the whole torch package ({len(every)} files, {package_lines} lines, default jobs)"
            if result["timed_out"]:
                rate = corpus_lines / ours
                row("2", what, f"> {args.package_timeout:.0f} s (stopped; ~{package_lines / rate:.0f} s at goal 1's lines/s)", "<= 15 s")
            else:
                row("2", what + f", exit {result['rc']}", f"{result['wall']:.1f} s", "<= 15 s")
                if result["tail"]:
                    notes.append(f"goal 2 summary line: {result['tail'][0]}")
            row(
                "5",
                "max RSS of the largest process (CLI or a worker) in that run" + (" (stopped early)" if result["timed_out"] else ""),
                f"{result['maxrss_kb'] / 1024:.0f} MB",
                "< 300 MB per worker",
            )
        else:
            row("2", "lint of the whole torch package", "skipped (--quick)", "<= 15 s")
            measured = subprocess.run(
                [sys.executable, __file__, "--inner-rss", "600", *tool, "lint", "-j", "1", "."],
                cwd=corpus, capture_output=True, text=True,
            )
            result = json.loads(measured.stdout.strip().splitlines()[-1])
            row("5", f"max RSS, lint -j 1 of the quick corpus ({label})", f"{result['maxrss_kb'] / 1024:.0f} MB", "< 300 MB per worker")

        # ---- Goal 3: migration vs bare libcst parse+codegen, in process ----
        measured = subprocess.run(
            [python, __file__, "--inner-migrate", str(1 if args.quick else 3), *(["--quick"] if args.quick else [])], capture_output=True, text=True
        )
        if measured.returncode != 0:
            row("3", "migration in process", f"failed: {measured.stderr.strip().splitlines()[-1:]}", "<= 2x")
        else:
            data = json.loads(measured.stdout.strip().splitlines()[-1])
            ratios = [r["migrate_ms"] / r["parse_ms"] for r in data["rows"]]
            row("3", f"migration / libcst parse+codegen, median over {len(ratios)} fixtures{' (every 3rd: --quick)' if args.quick else ''} (min-max)",
                f"{statistics.median(ratios):.1f}x ({min(ratios):.1f}x-{max(ratios):.1f}x)", "<= 2x")
            row("3", "median migration time per fixture", f"{statistics.median(r['migrate_ms'] for r in data['rows']):.0f} ms")
            row("3", "median libcst parse+codegen time per fixture", f"{statistics.median(r['parse_ms'] for r in data['rows']):.1f} ms")
            row("3", "sha256 of all migrated outputs (equal before/after = byte-identical)", data["sha256"][:16])
            errors = [r["name"] for r in data["rows"] if r["error"]]
            if errors:
                notes.append(f"goal 3: errors on {', '.join(errors)}")

        # ---- Goal 4: start-up and Ctrl-C ----
        for flag in ("--version", "--help"):
            times = [timed(tool + [flag])[0] for _ in range(5)]
            row("4", f"start-up: ddp-migrate {flag}, median of 5", f"{statistics.median(times):.2f} s", "<= 0.2 s")
        # The floor on this machine right now (interpreter and site start-up): judges the two lines above
        # when other work loads the machine.
        times = [timed([python, "-c", "pass"])[0] for _ in range(5)]
        row("4", "reference: the interpreter alone (python -c pass), median of 5", f"{statistics.median(times):.2f} s")
        target = package if not args.quick else corpus
        after, code = interrupt(tool + ["lint", str(target), "-j", "2"])
        row("4", f"Ctrl-C: SIGINT to lint -j 2 of {'the torch package' if not args.quick else 'the quick corpus'} after 1 s, time to exit",
            after, "<= 1 s")
        row("4", "Ctrl-C: exit code", code, "130")

    print()
    print(f"ddp-migrate speed benchmark ({'quick' if args.quick else 'full'}), {time.strftime('%Y-%m-%d %H:%M')}")
    print(f"measured: {version} from {where} (python {python})")
    print(f"torch {torch.__version__} at {root}; libcst {importlib.metadata.version('libcst')}; "
          f"{platform.python_implementation()} {platform.python_version()}; {os.cpu_count()} cores; {platform.platform()}")
    print(f"command-line wall times: best of {repeat}")
    print()
    print(HEADER)
    print("|---|---|---|---|")
    for goal, measure, figure, target in sorted(rows, key=lambda r: r[0]):
        print(f"| {goal} | {measure} | {figure} | {target} |")
    for note in notes:
        print(f"\n- {note}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
