"""``runtime.cleanup()`` as the last statement of a script on gloo: the process must exit cleanly.

On CPU/gloo (torch 2.13), a gloo worker thread may still have a Python object to release shortly
after a collective has returned: DDP's gradient all_reduce holds one. If the interpreter is already
shutting down when the thread gets to it, the process aborts with "terminate called without an
active exception" after all its work is done, and torchrun reports a failed job.
``runtime.cleanup()`` therefore waits until gloo's worker threads are idle
(``ddp_migrate.runtime.process_group._wait_for_idle_gloo_workers``).

With a training script the abort is a race (measured with torch 2.13 on 2 cores: 5 of 30 launches
without clean-up, 2 of 30 with a bare ``destroy_process_group()``, 0 of 90 with ``cleanup()``). The
first two tests make it deterministic: a Python callback keeps a gloo worker busy while the script
ends. With a bare ``destroy_process_group()`` the process aborts every time (the control: it fails
on the first torch version that no longer needs the work-around); with ``cleanup()`` it never does.
The third runs the common migrated-script shape a few times: it must always pass. Every launch here starts
new processes (``fresh=True``), not a child of a launch server: the interpreter's start and end are the
subject.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from launch import LaunchResult, run_torchrun, teardown_aborted, write_script

#: A gloo worker thread busy with Python after its collective's caller has been released.
LATE_WORKER = r'''
import json
import sys
import threading
import time
from pathlib import Path

import torch
import torch.distributed as dist

from ddp_migrate import runtime

OUT = Path(sys.argv[1])
MODE = sys.argv[2]
KEPT = []


def main():
    runtime.setup()
    rank = runtime.rank()
    group = dist.group.WORLD  # kept alive, as a DistributedDataParallel model keeps its group
    KEPT.append(group)  # until the interpreter ends, as a module-level model's
    attached = OUT / "attached"
    if rank == 1:  # join the all_reduce once rank 0's callback is attached: it cannot run early
        deadline = time.monotonic() + 60
        while not attached.exists() and time.monotonic() < deadline:
            time.sleep(0.01)
    finished = []
    ran_on = []

    def late_callback(future):
        # Runs on the gloo worker thread that completed the all_reduce, after future.wait() below
        # has returned: Python work still to do on that thread when the script wants to end.
        ran_on.append(threading.get_ident())
        end = time.monotonic() + 0.3
        while time.monotonic() < end:
            pass
        finished.append(True)

    future = dist.all_reduce(torch.ones(2), async_op=True).get_future()
    future.then(late_callback)
    if rank == 0:
        attached.touch()
    future.wait()
    if MODE == "destroy":  # without the work-around
        dist.destroy_process_group()
        (OUT / f"rank{rank}.done").write_text("all work done")
        return
    runtime.cleanup()
    result = {
        "callback_on_worker": bool(ran_on) and ran_on[0] != threading.get_ident(),
        "finished_when_cleanup_returned": bool(finished),
        "initialized_after_cleanup": runtime.is_initialized(),
    }
    runtime.cleanup()  # a second call does nothing
    (OUT / f"rank{rank}.json").write_text(json.dumps(result))


main()
'''

#: The common shape of a migrated script: DDP training, rank-0 save, cleanup() as the last call.
TRAINING = r'''
import sys

import torch
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

from ddp_migrate import runtime


def main():
    runtime.setup()
    device = runtime.device()
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(64, 8), torch.randn(64, 1))
    sampler = DistributedSampler(data)
    loader = DataLoader(data, batch_size=8, sampler=sampler)
    model = DistributedDataParallel(
        torch.nn.Linear(8, 1).to(device), device_ids=runtime.device_ids()
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for epoch in range(3):
        sampler.set_epoch(epoch)
        for x, y in loader:
            optimizer.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x.to(device)), y.to(device))
            loss.backward()
            optimizer.step()
        runtime.print0(f"epoch {epoch} loss {loss.item():.4f}")
    runtime.save({"model": runtime.unwrap(model).state_dict()}, sys.argv[1])
    print(f"DONE rank={runtime.rank()}", flush=True)
    runtime.cleanup()


if __name__ == "__main__":
    main()
'''

#: Launches of the training script; each takes a few seconds on two cores.
TRAINING_LAUNCHES = 3


@pytest.mark.distributed
def test_cleanup_waits_until_gloo_workers_are_idle(tmp_path: Path) -> None:
    script = write_script(tmp_path, "late_worker.py", LATE_WORKER)
    out = tmp_path / "out"
    out.mkdir()
    result = run_torchrun(
        script, out, "cleanup", nproc_per_node=2, cwd=tmp_path, timeout=120, retry_teardown_abort=False, fresh=True
    )
    assert not teardown_aborted(result.output), result.tail()
    ranks = [json.loads((out / f"rank{r}.json").read_text()) for r in range(2)]
    assert all(rank["initialized_after_cleanup"] is False for rank in ranks), result.tail()
    # Rank 0 attached its callback before the all_reduce could complete: it ran on a gloo worker.
    assert ranks[0]["callback_on_worker"] is True, ranks
    # cleanup() returned only once that worker was done (destroy_process_group() alone returns
    # at once, the group being kept alive).
    assert ranks[0]["finished_when_cleanup_returned"] is True, ranks


@pytest.mark.distributed
def test_without_the_wait_the_same_script_aborts_at_exit(tmp_path: Path) -> None:
    # The control: what cleanup() prevents. If this fails, this torch no longer aborts here, and
    # the wait in cleanup() may be removable (check the training-script test below as well).
    script = write_script(tmp_path, "late_worker.py", LATE_WORKER)
    out = tmp_path / "out"
    out.mkdir()
    result = run_torchrun(
        script, out, "destroy", nproc_per_node=2, cwd=tmp_path, timeout=120, check=False, fresh=True
    )
    assert (out / "rank0.done").exists(), result.tail()  # rank 0 did all its work first
    assert result.returncode != 0 and teardown_aborted(result.output), (
        f"torch {torch.__version__} no longer aborts without the wait:\n{result.tail()}"
    )


@pytest.mark.distributed
def test_training_script_ending_with_cleanup_exits_cleanly(tmp_path: Path) -> None:
    script = write_script(tmp_path, "train.py", TRAINING)
    failures: list[LaunchResult] = []
    for launch in range(TRAINING_LAUNCHES):
        checkpoint = tmp_path / f"checkpoint{launch}.pt"
        result = run_torchrun(
            script, checkpoint, nproc_per_node=2, cwd=tmp_path, timeout=120, check=False, fresh=True
        )
        if result.returncode != 0:
            failures.append(result)
            continue
        assert checkpoint.exists()
        assert "DONE rank=0" in result.stdout and "DONE rank=1" in result.stdout
    assert not failures, "\n".join(
        f"exit status {failure.returncode}\n{failure.tail()}" for failure in failures
    )
