"""Launches forked from a launch server (``launch_forked``) behave as new processes would for the programs.

Each check compares with what ``python script`` or ``torchrun`` gives a program in a new interpreter: its own
``__main__``, ``sys.argv``, ``sys.path`` and modules, fresh draws of ``random``, torchrun's ranks and
variables with a store of its own, a failed rank stopping the launch, and the start-up environment
(``PYTHONPATH``, ``sitecustomize``, ``PYTHONHASHSEED``).
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest

from launch import LaunchError, run_python, run_torchrun, write_script
from launch_forked import fork_plan

pytestmark = pytest.mark.distributed

REPORT = '''
import json, os, random, sys
import helper
os.write(1, json.dumps({
    "name": __name__, "file": __file__, "argv": sys.argv, "path0": sys.path[0], "cwd": os.getcwd(),
    "helper": helper.VALUE, "draw": random.random(), "rank": os.environ.get("RANK"),
    "world": os.environ.get("WORLD_SIZE"), "local": os.environ.get("LOCAL_RANK"),
    "agent_store": os.environ.get("TORCHELASTIC_USE_AGENT_STORE"), "run_id": os.environ.get("TORCHELASTIC_RUN_ID"),
}).encode() + b"\\n")  # one write: the ranks share the output
'''


def _reports(output: str) -> list[dict]:
    return [json.loads(line) for line in output.splitlines() if line.startswith("{")]


def test_a_forked_python_launch_is_set_up_as_a_new_interpreter(tmp_path: Path) -> None:
    for folder, value in (("one", 1), ("two", 2)):  # same module name, other folders: each sees its own
        (tmp_path / folder).mkdir()
        write_script(tmp_path / folder, "helper.py", f"VALUE = {value}\n")
        write_script(tmp_path / folder, "report.py", REPORT)
    first = run_python(tmp_path / "one" / "report.py", "x", cwd=tmp_path)
    second = run_python("report.py", cwd=tmp_path / "two")
    assert first.forked and second.forked
    [one], [two] = _reports(first.output), _reports(second.output)
    assert one["name"] == "__main__" and one["argv"] == [str(tmp_path / "one" / "report.py"), "x"]
    assert one["path0"] == str(tmp_path / "one") and one["cwd"] == str(tmp_path)
    assert (one["helper"], two["helper"]) == (1, 2) and two["cwd"] == str(tmp_path / "two")
    assert two["argv"] == ["report.py"] and two["file"] == str(tmp_path / "two" / "report.py")  # absolute, as Python gives
    assert one["draw"] != two["draw"]  # a new interpreter seeds random afresh
    assert one["rank"] is None and one["world"] is None


def test_a_forked_torchrun_launch_has_torchruns_ranks_and_a_store_of_its_own(tmp_path: Path) -> None:
    write_script(tmp_path, "helper.py", "VALUE = 0\n")
    script = write_script(
        tmp_path,
        "train.py",
        REPORT.replace("import helper", "import helper\nimport torch.distributed as dist\ndist.init_process_group('gloo')")
        + "import torch\nt = torch.ones(1) * (dist.get_rank() + 1)\ndist.all_reduce(t)\nos.write(1, f'sum {t.item()}\\n'.encode())\n"
        "dist.destroy_process_group()\n",
    )
    launches = [run_torchrun(script, nproc_per_node=2, cwd=tmp_path) for _ in range(2)]  # the same server twice
    for launch in launches:
        assert launch.forked
        reports = sorted(_reports(launch.output), key=lambda report: report["rank"])
        assert [(r["rank"], r["world"], r["local"]) for r in reports] == [("0", "2", "0"), ("1", "2", "1")]
        assert all(r["agent_store"] is None and r["run_id"] for r in reports), reports
        assert launch.output.count("sum 3.0") == 2, launch.output


def test_a_failed_rank_stops_the_other_and_fails_the_launch(tmp_path: Path) -> None:
    script = write_script(
        tmp_path,
        "train.py",
        "import sys, torch, torch.distributed as dist\n"
        "dist.init_process_group('gloo')\n"
        "if dist.get_rank() == 1:\n"
        "    sys.exit('rank 1 gives up')\n"
        "dist.all_reduce(torch.ones(1))  # rank 0 waits here for a peer that is gone\n",
    )
    started = time.monotonic()
    with pytest.raises(LaunchError, match="rank 1 gives up") as raised:
        run_torchrun(script, nproc_per_node=2, cwd=tmp_path, timeout=100)
    assert raised.value.results[0].returncode == 1 and not raised.value.results[0].timed_out
    assert time.monotonic() - started < 60


def test_the_start_up_environment_is_the_one_a_new_interpreter_would_see(tmp_path: Path) -> None:
    """``PYTHONPATH`` folders come after the script's, their ``sitecustomize`` runs before the program, and a
    variable read at start-up (``PYTHONHASHSEED``) gives what a new process with it gives."""
    (tmp_path / "lib").mkdir()
    write_script(tmp_path / "lib", "helper.py", "VALUE = 5\n")
    write_script(tmp_path / "lib", "sitecustomize.py", "import os\nos.environ['CUSTOMIZED'] = os.environ.get('MARK', '')\n")
    script = write_script(
        tmp_path, "report.py", REPORT + "os.write(1, f\"hash {hash('ddp')} customized {os.environ.get('CUSTOMIZED')}\\n\".encode())\n"
    )
    env = {"PYTHONPATH": str(tmp_path / "lib"), "PYTHONHASHSEED": "0"}
    forked = [run_python(script, cwd=tmp_path, env={**env, "MARK": mark}) for mark in ("a", "b")]
    fresh = run_python(script, cwd=tmp_path, env={**env, "MARK": "c"}, fresh=True)
    assert forked[0].forked and forked[1].forked and not fresh.forked
    assert [_reports(launch.output)[0]["helper"] for launch in (*forked, fresh)] == [5, 5, 5]
    hashes = [re.search(r"hash (-?\d+) customized (\w+)", launch.output).groups() for launch in (*forked, fresh)]  # type: ignore[union-attr]
    assert [customized for _, customized in hashes] == ["a", "b", "c"], hashes
    assert len({value for value, _ in hashes}) == 1, hashes  # the seed the server started with
    plan = fork_plan({"PYTHONHASHSEED": "0"})
    assert plan is not None and dict(plan.startup)["PYTHONHASHSEED"] == "0" and (plan.pythonpath, plan.site_modules) == ((), ())
    assert "PYTHONHASHSEED" not in dict(fork_plan(None).startup)  # type: ignore[union-attr]


def test_a_program_with_a_module_named_like_one_the_server_holds_runs_as_a_new_process(tmp_path: Path) -> None:
    write_script(tmp_path, "helper.py", "VALUE = 7\n")
    write_script(tmp_path, "queue.py", "MINE = True\n")  # the server imported the standard library's queue
    script = write_script(tmp_path, "report.py", REPORT + "import queue\nos.write(1, f'mine {queue.MINE}\\n'.encode())\n")
    launch = run_python(script, cwd=tmp_path)
    assert not launch.forked and "mine True" in launch.output, launch.output


def test_a_program_that_ends_at_once_is_seen_to_end(tmp_path: Path) -> None:
    """Its exit can reach the client in the same read as its start: the launch still ends at once."""
    script = write_script(tmp_path, "quick.py", "import sys\nsys.exit(int(sys.argv[1]))\n")
    for code in (0, 2, 0, 2, 0):
        launch = run_torchrun(script, code, nproc_per_node=2, cwd=tmp_path, timeout=30, check=False)
        assert launch.forked and not launch.timed_out and launch.duration < 10, launch
        assert launch.returncode == (1 if code else 0)
