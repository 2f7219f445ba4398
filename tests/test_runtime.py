"""ddp_migrate.runtime in this process: environment, errors, checkpoints, metrics, output.

The launched, multi-process behaviour is in test_runtime_distributed.py.
"""

from __future__ import annotations

import datetime
import inspect
import io
import logging
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist
from torch import nn

from ddp_migrate import runtime

#: The backend a world of one gets on this machine: NCCL (with gloo for CPU tensors) where CUDA is,
#: gloo on the CPU.
MACHINE_BACKEND = "cpu:gloo,cuda:nccl" if torch.cuda.is_available() else "gloo"

CONTRACT = {
    "setup",
    "cleanup",
    "is_initialized",
    "rank",
    "local_rank",
    "world_size",
    "local_world_size",
    "is_main_process",
    "device",
    "device_ids",
    "barrier",
    "save",
    "load",
    "unwrap",
    "call_through_ddp",
    "reduce_sum",
    "reduce_mean",
    "weighted_mean",
    "print0",
    "silence_non_main_logging",
    "convert_sync_batchnorm",
    "per_process_batch_size",
    "set_epoch",
    "next_epoch",
}
ENVIRONMENT = (
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
    "DDP_MIGRATE_BACKEND",
    "DDP_MIGRATE_TIMEOUT",
)
CPU_ONLY = pytest.mark.skipif(
    runtime.environment.accelerator_type() is not None, reason="checks the CPU behaviour"
)


@pytest.fixture(autouse=True)
def clean_state(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No launcher environment, no process group and logging enabled, before and after each test."""
    for name in ENVIRONMENT:
        monkeypatch.delenv(name, raising=False)
    if dist.is_initialized():
        dist.destroy_process_group()
    yield
    if dist.is_initialized():
        dist.destroy_process_group()
    logging.disable(logging.NOTSET)


def torchrun_environment(monkeypatch: pytest.MonkeyPatch, **values: str) -> None:
    """Set launcher variables as torchrun would (only those given)."""
    for name, value in values.items():
        monkeypatch.setenv(name, value)


class Spy:
    """Records the calls of a function and forwards them to it."""

    def __init__(self, function: Any) -> None:
        self.function = function
        self.calls: list[tuple[tuple[Any, ...], dict[str, Any]]] = []

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.calls.append((args, kwargs))
        return self.function(*args, **kwargs)


# --- the public API ------------------------------------------------------------------------------


def test_public_api_is_the_contract_typed_and_documented() -> None:
    assert CONTRACT <= set(runtime.__all__)
    assert set(runtime.__all__) - CONTRACT == {
        "BatchSizeError",
        "DistributedEnvironmentError",
        "Snapshot",
    }
    for name in ("__init__", "exists", "resume", "done", "save"):
        method = getattr(runtime.Snapshot, name)
        assert inspect.getdoc(method), f"Snapshot.{name} has no docstring"
        signature = inspect.signature(method)
        assert signature.return_annotation is not inspect.Signature.empty, name
        for parameter in list(signature.parameters.values())[1:]:
            assert parameter.annotation is not inspect.Parameter.empty, (name, parameter)
    for name in runtime.__all__:
        obj = getattr(runtime, name)
        assert inspect.getdoc(obj), f"{name} has no docstring"
        if name in CONTRACT:
            signature = inspect.signature(obj)
            assert signature.return_annotation is not inspect.Signature.empty, name
            for parameter in signature.parameters.values():
                assert parameter.annotation is not inspect.Parameter.empty, (name, parameter)
    assert issubclass(runtime.DistributedEnvironmentError, RuntimeError)
    assert issubclass(runtime.BatchSizeError, ValueError)


def test_runtime_imports_only_torch_and_the_standard_library() -> None:
    import ast
    import sys

    if not hasattr(sys, "stdlib_module_names"):  # Python < 3.10
        pytest.skip("needs sys.stdlib_module_names")
    allowed = set(sys.stdlib_module_names) | {"torch", "__future__"}
    for path in Path(runtime.__file__).parent.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [node.module or ""]
            else:
                continue
            for name in names:
                assert name.split(".")[0] in allowed, (path.name, name)


# --- environment ---------------------------------------------------------------------------------


@CPU_ONLY
def test_without_a_launcher_everything_describes_a_world_of_one() -> None:
    assert runtime.rank() == 0
    assert runtime.local_rank() == 0
    assert runtime.world_size() == 1
    assert runtime.local_world_size() == 1
    assert runtime.is_main_process() is True
    assert runtime.device() == torch.device("cpu")
    assert runtime.device_ids() is None
    assert runtime.is_initialized() is False


def test_accessors_read_torchrun_environment_before_setup(monkeypatch: pytest.MonkeyPatch) -> None:
    torchrun_environment(
        monkeypatch, RANK="3", LOCAL_RANK="1", WORLD_SIZE="8", LOCAL_WORLD_SIZE="4"
    )
    assert (runtime.rank(), runtime.local_rank()) == (3, 1)
    assert (runtime.world_size(), runtime.local_world_size()) == (8, 4)
    assert runtime.is_main_process() is False
    monkeypatch.delenv("LOCAL_WORLD_SIZE")
    assert runtime.local_world_size() == 8


def fake_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make ``torch.accelerator`` report CUDA (test_runtime_accelerator.py covers the others)."""
    monkeypatch.setattr(torch.accelerator, "is_available", lambda: True)
    monkeypatch.setattr(torch.accelerator, "current_accelerator", lambda *a: torch.device("cuda"))


def test_device_is_the_local_rank_on_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    torchrun_environment(monkeypatch, RANK="5", LOCAL_RANK="1", WORLD_SIZE="8")
    fake_cuda(monkeypatch)
    assert runtime.device() == torch.device("cuda", 1)
    assert runtime.device_ids() == [1]


def test_non_integer_environment_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RANK", "zero")
    with pytest.raises(runtime.DistributedEnvironmentError, match="RANK='zero'"):
        runtime.rank()


@pytest.mark.parametrize(
    ("present", "missing"),
    [
        ({"RANK": "0"}, ["LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"]),
        ({"LOCAL_RANK": "0"}, ["RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"]),
        ({"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0"}, ["MASTER_ADDR", "MASTER_PORT"]),
        (
            {"RANK": "1", "LOCAL_RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1"},
            ["MASTER_PORT"],
        ),
    ],
)
def test_partial_environment_names_the_missing_variables(
    monkeypatch: pytest.MonkeyPatch, present: dict[str, str], missing: list[str]
) -> None:
    torchrun_environment(monkeypatch, **present)
    with pytest.raises(runtime.DistributedEnvironmentError) as raised:
        runtime.setup()
    message = str(raised.value)
    assert isinstance(raised.value, RuntimeError)
    named_missing = message.split(" but ")[1].split(" missing")[0].rsplit(" ", 1)[0]
    assert named_missing.split(", ") == missing
    assert "torchrun" in message
    assert runtime.is_initialized() is False


def test_inconsistent_environment_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    torchrun_environment(
        monkeypatch, RANK="2", LOCAL_RANK="0", WORLD_SIZE="2", MASTER_ADDR="x", MASTER_PORT="1"
    )
    with pytest.raises(runtime.DistributedEnvironmentError, match="RANK=2 and WORLD_SIZE=2"):
        runtime.setup()


# --- process group -------------------------------------------------------------------------------


def test_setup_forms_a_world_of_one_without_a_port_or_file(monkeypatch: pytest.MonkeyPatch) -> None:
    # A stray MASTER_ADDR / MASTER_PORT alone is no launch environment.
    torchrun_environment(monkeypatch, MASTER_ADDR="203.0.113.1", MASTER_PORT="1")
    runtime.cleanup()  # before setup: nothing to do
    runtime.setup(timeout=20)  # were that address used, this would fail instead of hanging
    group = dist.group.WORLD
    runtime.setup()  # idempotent
    assert dist.group.WORLD is group
    assert runtime.is_initialized() is True
    assert (dist.get_rank(), dist.get_world_size(), dist.get_backend()) == (0, 1, MACHINE_BACKEND)
    model = nn.parallel.DistributedDataParallel(
        nn.Linear(3, 1).to(runtime.device()), device_ids=runtime.device_ids()
    )
    model(torch.ones(2, 3, device=runtime.device())).sum().backward()
    assert model.module.weight.grad is not None
    runtime.barrier()
    runtime.cleanup()
    runtime.cleanup()
    assert runtime.is_initialized() is False
    runtime.setup()  # again after clean-up
    assert runtime.is_initialized() is True


def test_a_model_kept_on_the_cpu_wraps_and_trains_beside_the_accelerator() -> None:
    """The user's ``--no-cuda`` on a GPU machine: the group binds this process's GPU, the model stays on
    the CPU. ``device_ids(model)`` gives DDP none, gloo carries the CPU gradients and a CPU metric,
    and a model on the GPU still gets its device (where there is one)."""
    runtime.setup()
    try:
        kept = nn.Linear(3, 1)
        on_cpu = nn.parallel.DistributedDataParallel(kept, device_ids=runtime.device_ids(kept))
        on_cpu(torch.ones(2, 3)).sum().backward()
        assert on_cpu.module.weight.grad is not None
        total = torch.tensor([2.0])
        dist.all_reduce(total)
        assert total.item() == 2.0 and runtime.reduce_sum(torch.tensor(3.0)).item() == 3.0
        placed = nn.Linear(3, 1).to(runtime.device())
        here = runtime.device()
        assert runtime.device_ids(placed) == (None if here.type == "cpu" else [here.index])
        runtime.barrier()
    finally:
        runtime.cleanup()


def test_setup_timeout_and_backend_choices(monkeypatch: pytest.MonkeyPatch) -> None:
    spy = Spy(dist.init_process_group)
    monkeypatch.setattr(dist, "init_process_group", spy)
    runtime.setup(timeout=12.5)
    runtime.cleanup()
    runtime.setup(backend="gloo", timeout=datetime.timedelta(minutes=2))
    runtime.cleanup()
    monkeypatch.setenv("DDP_MIGRATE_TIMEOUT", "30")
    monkeypatch.setenv("DDP_MIGRATE_BACKEND", "gloo")
    runtime.setup()
    runtime.cleanup()
    timeouts = [kwargs["timeout"] for _, kwargs in spy.calls]
    assert timeouts == [
        datetime.timedelta(seconds=12.5),
        datetime.timedelta(minutes=2),
        datetime.timedelta(seconds=30),
    ]
    assert [kwargs["backend"] for _, kwargs in spy.calls] == [MACHINE_BACKEND, "gloo", "gloo"]
    assert all(kwargs["world_size"] == 1 and kwargs["rank"] == 0 for _, kwargs in spy.calls)


def test_setup_rejects_bad_timeouts_and_backends(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ValueError, match="positive"):
        runtime.setup(timeout=0)
    with pytest.raises(TypeError):
        runtime.setup(timeout="10")  # type: ignore[arg-type]
    monkeypatch.setenv("DDP_MIGRATE_TIMEOUT", "soon")
    with pytest.raises(runtime.DistributedEnvironmentError, match="DDP_MIGRATE_TIMEOUT"):
        runtime.setup()
    monkeypatch.delenv("DDP_MIGRATE_TIMEOUT")
    if not torch.cuda.is_available():
        monkeypatch.setenv("DDP_MIGRATE_BACKEND", "nccl")
        with pytest.raises(runtime.DistributedEnvironmentError, match="gloo"):
            runtime.setup()
        runtime.setup(backend="gloo")  # the argument wins over the environment
        assert dist.get_backend() == "gloo"


# --- batch size ----------------------------------------------------------------------------------


def test_per_process_batch_size(monkeypatch: pytest.MonkeyPatch) -> None:
    assert runtime.per_process_batch_size(7) == 7
    monkeypatch.setenv("WORLD_SIZE", "4")
    assert runtime.per_process_batch_size(32) == 8
    assert runtime.per_process_batch_size(4) == 1
    assert runtime.per_process_batch_size(None) is None  # no automatic batching: the sampler shares the samples
    with pytest.raises(runtime.BatchSizeError) as raised:
        runtime.per_process_batch_size(10)
    message = str(raised.value)
    for text in ("10", "world size 4", "multiple", "--batch-size per-process"):
        assert text in message
    with pytest.raises(runtime.BatchSizeError, match="smaller than the world size 4"):
        runtime.per_process_batch_size(2)
    with pytest.raises(ValueError, match="positive"):
        runtime.per_process_batch_size(0)
    with pytest.raises(TypeError):
        runtime.per_process_batch_size(8.0)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        runtime.per_process_batch_size(True)


def test_set_epoch_reaches_the_sampler_of_a_loader_or_of_the_loader_a_wrapper_holds() -> None:
    from torch.utils.data import BatchSampler, DataLoader, TensorDataset
    from torch.utils.data.distributed import DistributedSampler

    data = TensorDataset(torch.arange(8))
    sampler = DistributedSampler(data, num_replicas=2, rank=0)
    loader = DataLoader(data, batch_size=2, sampler=sampler)
    runtime.set_epoch(loader, 3)
    assert sampler.epoch == 3

    class DeviceLoader:  # what a fastai-style wrapper holds: the loader, the device
        def __init__(self, inner: DataLoader, device: str) -> None:
            self.inner, self.device = inner, device

    class Prefetcher:
        def __init__(self, loader: object) -> None:
            self.loader = loader

    runtime.set_epoch(Prefetcher(DeviceLoader(loader, "cpu")), 5)
    assert sampler.epoch == 5
    by_batches = DataLoader(data, batch_sampler=BatchSampler(DistributedSampler(data, num_replicas=2, rank=1), 2, False))
    runtime.set_epoch(by_batches, 7)
    assert by_batches.batch_sampler.sampler.epoch == 7  # type: ignore[union-attr]
    import warnings

    from ddp_migrate.runtime import batch as batch_module

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a RandomSampler takes no epoch: nothing to say
        runtime.set_epoch(DataLoader(data, batch_size=2, shuffle=True), 1)

    class Buckets(BatchSampler):  # a batch sampler that shuffles its own buckets
        def set_epoch(self, epoch: int) -> None:
            self.epoch = epoch

    bucketed = DataLoader(data, batch_sampler=Buckets(range(8), 2, False))
    runtime.set_epoch(bucketed, 4)
    assert bucketed.batch_sampler.epoch == 4  # type: ignore[union-attr]
    batch_module._WARNED.discard(list)
    with pytest.warns(RuntimeWarning, match="no sampler with set_epoch.* in this list"):
        runtime.set_epoch([loader], 9)  # not a loader nor an object holding one (a list is not looked into)
    assert sampler.epoch == 5


def test_next_epoch_counts_the_passes_of_each_sampler_once() -> None:
    """An endless generator's passes: epoch 0 first (or the epoch the sampler was last given), then one more
    each call; a loader's ``batch_sampler.sampler`` is its ``sampler`` (told once, not twice)."""
    import warnings

    from torch.utils.data import DataLoader, Sampler, TensorDataset
    from torch.utils.data.distributed import DistributedSampler

    data = TensorDataset(torch.arange(8))
    sampler = DistributedSampler(data, num_replicas=2, rank=0)
    loader = DataLoader(data, batch_size=2, sampler=sampler)
    assert loader.batch_sampler.sampler is sampler  # type: ignore[union-attr]
    epochs = []
    for _ in range(3):
        runtime.next_epoch(loader)
        epochs.append(sampler.epoch)
    assert epochs == [0, 1, 2]
    given = DistributedSampler(data, num_replicas=2, rank=1)
    given.set_epoch(5)
    runtime.next_epoch(DataLoader(data, batch_size=2, sampler=given))
    assert given.epoch == 5
    runtime.next_epoch(DataLoader(data, batch_size=2, sampler=given))
    assert given.epoch == 6

    class Told(Sampler[int]):  # a sampler with set_epoch but no epoch attribute
        def __init__(self) -> None:
            self.told: list[int] = []

        def __iter__(self):  # type: ignore[no-untyped-def]
            return iter(range(8))

        def __len__(self) -> int:
            return 8

        def set_epoch(self, epoch: int) -> None:
            self.told.append(epoch)

    told = Told()
    for _ in range(3):
        runtime.next_epoch(DataLoader(data, batch_size=2, sampler=told))
    assert told.told == [0, 1, 2]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a RandomSampler takes no epoch: nothing to say
        runtime.next_epoch(DataLoader(data, batch_size=2, shuffle=True))
        from ddp_migrate.runtime import batch as batch_module

        batch_module._WARNED.discard(list)  # (an earlier test's warning would hide this one)
        runtime.next_epoch([torch.zeros(2)] * 3)  # a generator may go over a plain list too


def test_next_epoch_gives_a_batch_sampler_and_the_sampler_it_forwards_to_one_epoch() -> None:
    """A bucketing batch sampler whose ``set_epoch`` passes the epoch on to its inner sampler: both start
    epochs 0, 1, 2 (the inner sampler is not moved on a second time by its own count)."""
    from torch.utils.data import BatchSampler, DataLoader, TensorDataset
    from torch.utils.data.distributed import DistributedSampler

    class Buckets(BatchSampler):
        def __init__(self, sampler: DistributedSampler) -> None:
            super().__init__(sampler, 2, False)
            self.epoch = 0

        def set_epoch(self, epoch: int) -> None:
            self.epoch = epoch
            self.sampler.set_epoch(epoch)  # type: ignore[attr-defined]

    data = TensorDataset(torch.arange(8))
    inner = DistributedSampler(data, num_replicas=2, rank=0)
    loader = DataLoader(data, batch_sampler=Buckets(inner))
    seen = []
    for _ in range(3):
        runtime.next_epoch(loader)
        seen.append((loader.batch_sampler.epoch, inner.epoch))  # type: ignore[union-attr]
    assert seen == [(0, 0), (1, 1), (2, 2)]


# --- models --------------------------------------------------------------------------------------


def test_unwrap_removes_every_layer_of_wrappers() -> None:
    model = nn.Linear(2, 2)
    assert runtime.unwrap(model) is model
    assert runtime.unwrap(nn.DataParallel(nn.DataParallel(model))) is model


@CPU_ONLY
def test_convert_sync_batchnorm_is_a_no_op_off_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    model = nn.Sequential(nn.Conv2d(1, 2, 3), nn.BatchNorm2d(2))
    assert runtime.convert_sync_batchnorm(model) is model
    assert isinstance(model[1], nn.BatchNorm2d) and not isinstance(model[1], nn.SyncBatchNorm)
    # A model still on the CPU of a CUDA process is converted before it moves to its GPU.
    fake_cuda(monkeypatch)
    converted = runtime.convert_sync_batchnorm(model)
    assert isinstance(converted[1], nn.SyncBatchNorm)


# --- checkpoints ---------------------------------------------------------------------------------


def test_save_unwraps_models_and_leaves_the_callers_dict_alone(tmp_path: Path) -> None:
    model = nn.Linear(3, 2)
    wrapped = nn.DataParallel(model)
    checkpoint = {"model": wrapped, "epoch": 4}
    runtime.save(checkpoint, tmp_path / "dict.pt")
    assert checkpoint["model"] is wrapped
    loaded = runtime.load(tmp_path / "dict.pt", weights_only=False)
    assert type(loaded["model"]) is nn.Linear and loaded["epoch"] == 4
    assert sorted(loaded["model"].state_dict()) == ["bias", "weight"]
    runtime.save(wrapped, str(tmp_path / "module.pt"))
    assert type(runtime.load(str(tmp_path / "module.pt"), weights_only=False)) is nn.Linear


def test_save_unwraps_models_nested_in_dicts_and_lists(tmp_path: Path) -> None:
    """``{"nets": {"main": model}, "ema": [model]}``: a pickled wrapper loads nowhere without a process group
    (a trial: the migrated program crashed reading its own checkpoint back as plain python)."""
    wrapped = nn.DataParallel(nn.Linear(3, 2))
    checkpoint = {"nets": {"main": wrapped, "steps": 3}, "history": [wrapped, 1], "pair": (wrapped,)}
    runtime.save(checkpoint, tmp_path / "nested.pt")
    assert checkpoint["nets"]["main"] is wrapped and checkpoint["history"][0] is wrapped
    loaded = runtime.load(tmp_path / "nested.pt", weights_only=False)
    assert type(loaded["nets"]["main"]) is nn.Linear and loaded["nets"]["steps"] == 3
    assert type(loaded["history"][0]) is nn.Linear and loaded["history"][1] == 1
    assert type(loaded["pair"]) is tuple and type(loaded["pair"][0]) is nn.Linear


def test_save_passes_other_objects_through_unchanged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spy = Spy(torch.save)
    monkeypatch.setattr(torch, "save", spy)
    state = nn.Linear(3, 2).state_dict()
    runtime.save(state, tmp_path / "state.pt", pickle_protocol=4)
    (saved, _), kwargs = spy.calls[0]
    assert saved is state
    assert kwargs == {"pickle_protocol": 4}
    buffer = io.BytesIO()
    runtime.save(state, buffer)
    assert spy.calls[1][0][1] is buffer
    buffer.seek(0)
    assert torch.equal(runtime.load(buffer)["weight"].cpu(), state["weight"])


def test_save_is_atomic(tmp_path: Path) -> None:
    target = tmp_path / "checkpoint.pt"
    runtime.save({"step": 1}, target)
    target.chmod(0o600)
    runtime.save({"step": 2}, target)
    assert stat.S_IMODE(target.stat().st_mode) == 0o600  # an existing file keeps its permissions
    with pytest.raises(Exception):
        runtime.save({"step": 3, "unpicklable": lambda: None}, target)
    assert runtime.load(target) == {"step": 2}  # the failed save left the old checkpoint intact
    assert [path.name for path in tmp_path.iterdir()] == ["checkpoint.pt"]  # no temporary files


def test_save_writes_nothing_on_other_ranks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    runtime.save({"step": 1}, tmp_path / "checkpoint.pt")
    buffer = io.BytesIO()
    runtime.save({"step": 1}, buffer)
    assert list(tmp_path.iterdir()) == [] and buffer.getvalue() == b""


def test_load_maps_onto_this_process_device_unless_told_otherwise(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runtime.save({"x": torch.ones(2)}, tmp_path / "c.pt")
    spy = Spy(torch.load)
    monkeypatch.setattr(torch, "load", spy)
    loaded = runtime.load(tmp_path / "c.pt")["x"]
    assert loaded.device == runtime.device() and torch.equal(loaded.cpu(), torch.ones(2))
    runtime.load(tmp_path / "c.pt", "cpu")
    runtime.load(tmp_path / "c.pt", map_location=None, weights_only=True)
    locations = [kwargs["map_location"] for _, kwargs in spy.calls]
    assert locations == [runtime.device(), "cpu", None]
    assert spy.calls[2][1]["weights_only"] is True


# --- metrics -------------------------------------------------------------------------------------


@pytest.mark.parametrize("initialised", [False, True], ids=["no-group", "world-of-one"])
def test_reductions_in_a_world_of_one_return_the_value(initialised: bool) -> None:
    if initialised:
        runtime.setup()
    assert runtime.reduce_sum(3) == 3.0 and type(runtime.reduce_sum(3)) is float
    assert runtime.reduce_mean(2) == 2.0 and type(runtime.reduce_mean(2)) is float
    value = torch.tensor([1.0, 2.0], requires_grad=True)
    for reduced in (runtime.reduce_sum(value), runtime.reduce_mean(value)):
        assert isinstance(reduced, torch.Tensor) and reduced is not value
        assert torch.equal(reduced, value.detach())
    assert runtime.weighted_mean(3, 4) == 0.75
    assert runtime.weighted_mean(torch.tensor(3), torch.tensor([4.0])) == 0.75
    with pytest.raises(ZeroDivisionError):
        runtime.weighted_mean(0, 0)
    with pytest.raises(ValueError, match="one-element"):
        runtime.weighted_mean(torch.ones(2), 2)


# --- output --------------------------------------------------------------------------------------


def test_print0_prints_on_rank_zero_only(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    runtime.print0("from", "rank", 0, sep="-")
    monkeypatch.setenv("RANK", "1")
    runtime.print0("from rank 1")
    assert capsys.readouterr().out == "from-rank-0\n"


def test_silence_non_main_logging(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    runtime.silence_non_main_logging()  # rank 0: nothing changes
    logging.getLogger("rank0").info("kept")
    monkeypatch.setenv("RANK", "1")
    runtime.silence_non_main_logging()
    runtime.silence_non_main_logging()
    logging.getLogger("rank1").info("dropped")
    logging.getLogger("created.after.silencing.%d" % os.getpid()).warning("dropped too")
    # A rank that fails alone still says why (a trial's logger.exception on rank 1 vanished).
    logging.getLogger("rank1").error("an error of rank 1")
    logging.log(60, "a custom level above CRITICAL")
    assert [record.getMessage() for record in caplog.records] == ["kept", "an error of rank 1", "a custom level above CRITICAL"]
