"""ddp_migrate.runtime under real launches: plain python (a world of one), torchrun with 2
processes, and a two-node job on one machine (two torchrun agents), all on gloo / CPU.

One worker script exercises the whole runtime per launch and writes each rank's observations to
``rank<N>.json``; the tests below check those files, the files the job saved and its output. Each
launch runs once per module (fixtures), so the suite stays fast on two cores.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from launch import LaunchResult, run_python, run_torchrun, run_two_nodes, write_script

WORKER = r'''
"""Exercise ddp_migrate.runtime once and write this rank's observations to OUT/rank<N>.json."""
import io
import json
import logging
import os
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from ddp_migrate import runtime

OUT = Path(sys.argv[1])

# Module level, before setup(): migrated code may compute these first.
BEFORE_SETUP = {
    "rank": runtime.rank(),
    "local_rank": runtime.local_rank(),
    "world_size": runtime.world_size(),
    "local_world_size": runtime.local_world_size(),
    "is_main_process": runtime.is_main_process(),
    "device": str(runtime.device()),
    "is_initialized": runtime.is_initialized(),
}

logging.basicConfig(level=logging.INFO, format="%(name)s %(message)s", stream=sys.stderr)


def main():
    runtime.setup()
    runtime.setup()  # a second call is a no-op
    r = runtime.rank()
    w = runtime.world_size()
    res = {
        "before_setup": BEFORE_SETUP,
        "is_initialized": runtime.is_initialized(),
        "backend": str(dist.get_backend()),
        "rank": r,
        "local_rank": runtime.local_rank(),
        "world_size": w,
        "local_world_size": runtime.local_world_size(),
        "is_main_process": runtime.is_main_process(),
        "device": str(runtime.device()),
        "device_ids": runtime.device_ids(),
        "env": {k: os.environ.get(k) for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "GROUP_RANK")},
    }
    logging.getLogger("worker.early").info("EARLY-LOG rank=%d", r)

    # One training step through DDP: rank r trains on inputs filled with r + 1.
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2).to(runtime.device())
    ddp = DistributedDataParallel(model, device_ids=runtime.device_ids())
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.1)
    ddp(torch.full((3, 4), float(r + 1))).pow(2).sum().backward()
    optimizer.step()
    res["weight"] = model.weight.detach().cpu().flatten().tolist()
    res["bias"] = model.bias.detach().cpu().tolist()

    # BatchNorm where SyncBatchNorm does not run (the CPU): after a DDP forward in training mode the running
    # statistics are the average of what each rank's own share gave (0.1 x its batch mean, from zero).
    bn_model = runtime.convert_sync_batchnorm(torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.BatchNorm1d(3)))
    bn_ddp = DistributedDataParallel(bn_model, device_ids=runtime.device_ids())
    shard = torch.randn(8, 4, generator=torch.Generator().manual_seed(r)) + r
    bn_ddp(shard)
    with torch.no_grad():
        res["bn_own_update"] = (0.1 * bn_model[0](shard).mean(0)).tolist()
    res["bn_running_mean"] = bn_model[1].running_mean.tolist()
    res["bn_running_var"] = bn_model[1].running_var.tolist()
    bn_model(shard)  # the model alone, on each rank at its own time: no collective (the job would hang)
    if r == 0:
        bn_model(shard)
    with torch.no_grad():  # a preview on rank 0 alone, in training mode, after a forward without gradients on
        bn_ddp(shard)  # every rank: DDP then broadcasts no buffers, and the runtime averages nothing either
        if r == 0:
            bn_ddp(shard)
    with bn_ddp.join():  # uneven inputs: join shadows DDP's own collectives only, so none of the runtime's runs
        for _ in range(1 + r):
            bn_ddp(shard).sum().backward()

    # Checkpoints. Rank 0 arrives late: without save()'s barrier the others would load too early.
    if r == 0:
        time.sleep(0.5)
    runtime.save({"model": ddp, "epoch": 3}, OUT / "checkpoint.pt")
    loaded = runtime.load(OUT / "checkpoint.pt", weights_only=False)
    res["loaded_type"] = type(loaded["model"]).__name__
    res["loaded_keys"] = sorted(loaded["model"].state_dict())
    res["loaded_epoch"] = loaded["epoch"]
    res["loaded_matches"] = torch.equal(loaded["model"].weight.cpu(), model.weight.detach().cpu())
    kept = {"model": ddp}
    runtime.save(kept, OUT / "kept.pt")
    res["caller_dict_untouched"] = kept["model"] is ddp
    runtime.save(ddp, OUT / "module.pt")
    res["module_keys"] = sorted(runtime.load(OUT / "module.pt", weights_only=False).state_dict())
    runtime.save(runtime.unwrap(ddp).state_dict(), OUT / "state.pt")
    state = runtime.load(OUT / "state.pt")
    res["state_keys"] = sorted(state)
    res["state_device"] = str(state["weight"].device)
    runtime.save({"rank": r}, OUT / f"only-rank-{r}.pt")
    buffer = io.BytesIO()
    runtime.save({"rank": r}, buffer)
    res["buffer_bytes"] = len(buffer.getvalue())

    # Metrics.
    res["reduce_sum_number"] = runtime.reduce_sum(r + 1)
    values = torch.tensor([float(r), 1.0])
    summed = runtime.reduce_sum(values)
    res["reduce_sum_tensor"] = summed.tolist()
    res["reduce_sum_tensor_type"] = type(summed).__name__
    res["input_after_reduce"] = values.tolist()
    # gloo's threads have let go of the tensors when a reduction returns (else: abort at exit).
    # (The same number of reductions on every rank: a collective is never skipped on one.)
    res["reduced_use_counts"] = [runtime.reduce_sum(torch.ones(2))._use_count() for _ in range(20)]
    res["reduce_mean_number"] = runtime.reduce_mean(r)
    res["reduce_mean_number_type"] = type(res["reduce_mean_number"]).__name__
    res["reduce_mean_tensor"] = runtime.reduce_mean(torch.tensor([2.0 * r])).tolist()
    if r == 0:
        res["weighted_mean"] = runtime.weighted_mean(3, 4)
    else:
        res["weighted_mean"] = runtime.weighted_mean(torch.tensor(1), torch.tensor(6.0))

    # Batch size.
    res["per_process_batch_size"] = runtime.per_process_batch_size(4 * w)
    try:
        runtime.per_process_batch_size(4 * w + 1)
    except runtime.BatchSizeError as error:
        res["batch_error"] = str(error)

    # Output.
    runtime.print0(f"PRINT0 rank={r}")
    print(f"PLAIN rank={r}")
    runtime.silence_non_main_logging()
    runtime.silence_non_main_logging()
    logging.getLogger("worker.late").warning("LATE-LOG rank=%d", r)
    logging.getLogger("created.after.silencing").warning("NEW-LOGGER-LOG rank=%d", r)
    logging.getLogger("worker.failing").error("ERROR-LOG rank=%d", r)

    runtime.barrier()
    runtime.cleanup()
    runtime.cleanup()
    res["initialized_after_cleanup"] = runtime.is_initialized()
    (OUT / f"rank{r}.json").write_text(json.dumps(res))


main()
'''


@dataclass
class Job:
    """One launch of the worker: its output folder, per-rank observations and process results."""

    out: Path
    ranks: list[dict]
    results: list[LaunchResult]

    @property
    def stdout(self) -> str:
        return "".join(result.stdout for result in self.results)

    @property
    def stderr(self) -> str:
        return "".join(result.stderr for result in self.results)


def _job(out: Path, results: list[LaunchResult], world: int) -> Job:
    files = sorted(out.glob("rank*.json"))
    assert [f.name for f in files] == [f"rank{r}.json" for r in range(world)], (
        [f.name for f in files],
        results[0].tail(),
    )
    return Job(out, [json.loads(f.read_text()) for f in files], results)


def _worker(folder: Path) -> tuple[Path, Path]:
    out = folder / "out"
    out.mkdir()
    return write_script(folder, "worker.py", WORKER), out


@pytest.fixture(scope="module")
def single(tmp_path_factory: pytest.TempPathFactory) -> Job:
    """The worker run as plain ``python worker.py``: a world of one."""
    folder = tmp_path_factory.mktemp("single")
    script, out = _worker(folder)
    result = run_python(script, out, cwd=folder)
    return _job(out, [result], 1)


@pytest.fixture(scope="module")
def torchrun2(tmp_path_factory: pytest.TempPathFactory) -> Job:
    """The worker under ``torchrun --standalone --nproc_per_node=2``."""
    folder = tmp_path_factory.mktemp("torchrun2")
    script, out = _worker(folder)
    result = run_torchrun(script, out, nproc_per_node=2, cwd=folder)
    return _job(out, [result], 2)


@pytest.fixture(scope="module")
def two_nodes(tmp_path_factory: pytest.TempPathFactory) -> Job:
    """The worker as a two-node job on this machine (one process per node)."""
    folder = tmp_path_factory.mktemp("two_nodes")
    script, out = _worker(folder)
    results = run_two_nodes(script, out, cwd=folder)
    return _job(out, results, 2)


def _expected_weights(world: int) -> tuple[list[float], list[float]]:
    """Weights after the worker's SGD step with gradients averaged over ``world`` ranks."""
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2)
    grads = []
    for r in range(world):
        model.zero_grad()
        model(torch.full((3, 4), float(r + 1))).pow(2).sum().backward()
        grads.append((model.weight.grad.clone(), model.bias.grad.clone()))
    with torch.no_grad():
        weight = model.weight - 0.1 * sum(g[0] for g in grads) / world
        bias = model.bias - 0.1 * sum(g[1] for g in grads) / world
    return weight.flatten().tolist(), bias.tolist()


def _check_common(job: Job, world: int) -> None:
    """Everything that must hold for any launch of ``world`` processes on CPU."""
    assert [res["rank"] for res in job.ranks] == list(range(world))
    weight, bias = _expected_weights(world)
    for r, res in enumerate(job.ranks):
        assert res["is_initialized"] is True
        assert res["initialized_after_cleanup"] is False
        assert res["backend"] == "gloo"
        assert res["world_size"] == world
        assert res["is_main_process"] is (r == 0)
        assert res["device"] == "cpu"
        assert res["device_ids"] is None
        # Before setup() the environment alone gives the same answers.
        before = res["before_setup"]
        assert before["rank"] == r and before["world_size"] == world
        assert before["local_rank"] == res["local_rank"]
        assert before["device"] == "cpu" and before["is_initialized"] is False
        # DDP averaged the gradients: every rank holds the same, expected weights.
        assert res["weight"] == pytest.approx(weight, rel=1e-5, abs=1e-6)
        assert res["bias"] == pytest.approx(bias, rel=1e-5, abs=1e-6)
        # Checkpoints: saved unwrapped, readable by every rank right after save().
        assert res["loaded_type"] == "Linear"
        assert res["loaded_keys"] == ["bias", "weight"]
        assert res["module_keys"] == ["bias", "weight"]
        assert res["state_keys"] == ["bias", "weight"]
        assert res["loaded_epoch"] == 3 and res["loaded_matches"] is True
        assert res["caller_dict_untouched"] is True
        assert res["state_device"] == "cpu"
        assert (res["buffer_bytes"] > 0) is (r == 0)
        # Metrics, reduced over all ranks.
        assert res["reduce_sum_number"] == sum(q + 1 for q in range(world))
        assert res["reduce_sum_tensor"] == [float(sum(range(world))), float(world)]
        assert res["reduce_sum_tensor_type"] == "Tensor"
        assert res["input_after_reduce"] == [float(r), 1.0]
        assert res["reduced_use_counts"] == [1] * 20
        assert res["reduce_mean_number"] == pytest.approx((world - 1) / 2)
        assert res["reduce_mean_number_type"] == "float"
        assert res["reduce_mean_tensor"] == pytest.approx([float(world - 1)])
        totals, counts = [3] + [1] * (world - 1), [4] + [6] * (world - 1)
        assert res["weighted_mean"] == pytest.approx(sum(totals) / sum(counts))
        assert res["per_process_batch_size"] == 4
        if world > 1:
            assert str(4 * world + 1) in res["batch_error"]
            assert "--batch-size per-process" in res["batch_error"]
    # BatchNorm's running statistics, averaged across ranks by a DDP forward: the same on every rank.
    own = [res["bn_own_update"] for res in job.ranks]
    for res in job.ranks:
        assert res["bn_running_mean"] == pytest.approx([sum(column) / world for column in zip(*own)], rel=1e-5, abs=1e-6)
        assert res["bn_running_var"] == pytest.approx(job.ranks[0]["bn_running_var"], rel=1e-6)
    # Only rank 0 wrote files, and no temporary file was left behind.
    names = sorted(path.name for path in job.out.iterdir())
    assert names == sorted(
        ["checkpoint.pt", "kept.pt", "module.pt", "state.pt", "only-rank-0.pt"]
        + [f"rank{r}.json" for r in range(world)]
    )
    # print0 printed once, from rank 0, while every rank's own print came through.
    assert job.stdout.count("PRINT0 rank=0") == 1
    assert "PRINT0 rank=1" not in job.stdout
    for r in range(world):
        assert f"PLAIN rank={r}" in job.stdout
        assert f"EARLY-LOG rank={r}" in job.stderr
    # Logging below ERROR is silenced on every rank but 0, also for loggers created afterwards; errors show on all.
    assert "LATE-LOG rank=0" in job.stderr and "NEW-LOGGER-LOG rank=0" in job.stderr
    for r in range(1, world):
        assert f"LATE-LOG rank={r}" not in job.stderr
        assert f"NEW-LOGGER-LOG rank={r}" not in job.stderr
    for r in range(world):
        assert f"ERROR-LOG rank={r}" in job.stderr


def test_plain_python_runs_a_world_of_one(single: Job) -> None:
    _check_common(single, 1)
    (res,) = single.ranks
    assert res["local_rank"] == 0 and res["local_world_size"] == 1
    assert res["env"] == {"RANK": None, "LOCAL_RANK": None, "WORLD_SIZE": None, "GROUP_RANK": None}


@pytest.mark.distributed
def test_torchrun_two_processes(torchrun2: Job) -> None:
    _check_common(torchrun2, 2)
    for r, res in enumerate(torchrun2.ranks):
        assert res["local_rank"] == r
        assert res["local_world_size"] == 2
        assert res["env"]["RANK"] == str(r) and res["env"]["LOCAL_RANK"] == str(r)


@pytest.mark.distributed
def test_two_nodes_on_one_machine(two_nodes: Job) -> None:
    _check_common(two_nodes, 2)
    for r, res in enumerate(two_nodes.ranks):
        # Global rank 1 is local rank 0 on its own node: rank and local rank are not confused.
        assert res["local_rank"] == 0 and res["before_setup"]["local_rank"] == 0
        assert res["local_world_size"] == 1
        assert res["env"]["RANK"] == str(r) and res["env"]["LOCAL_RANK"] == "0"
        assert res["env"]["GROUP_RANK"] == str(r)
    # Each agent ran exactly one of the two workers.
    outputs = sorted(result.stdout for result in two_nodes.results)
    assert sum("PLAIN rank=0" in out for out in outputs) == 1
    assert sum("PLAIN rank=1" in out for out in outputs) == 1
