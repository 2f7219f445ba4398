"""The runtime on any accelerator: device, backend, device binding and DDP's ``device_ids``.

No CUDA or XPU device is needed: ``torch.accelerator`` (and, for torch < 2.6, ``torch.cuda``) is
replaced by a fake that reports the device type under test, and ``init_process_group`` by a recorder,
so each test sees exactly which device, backend and device index the runtime picks, and in which
order it binds the device and creates the group.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import torch
import torch.distributed as dist
from torch import nn

from ddp_migrate import runtime
from ddp_migrate.runtime import process_group

ENVIRONMENT = (
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
    "DDP_MIGRATE_BACKEND",
    "DDP_MIGRATE_TIMEOUT",
    "DDP_MIGRATE_DEVICE",
)


@pytest.fixture(autouse=True)
def clean_state(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No launcher environment and no process group, before and after each test."""
    for name in ENVIRONMENT:
        monkeypatch.delenv(name, raising=False)
    if dist.is_initialized():
        dist.destroy_process_group()
    runtime.environment.select_device_type(None)
    yield
    if dist.is_initialized():
        dist.destroy_process_group()
    runtime.environment.select_device_type(None)


class Events:
    """What the runtime did with the fake device and the recorded process group, in order."""

    def __init__(self) -> None:
        self.log: list[tuple[str, Any]] = []

    def names(self) -> list[str]:
        """The kinds of events, in order."""
        return [name for name, _ in self.log]

    def of(self, name: str) -> list[Any]:
        """The arguments of every event of one kind."""
        return [value for event, value in self.log if event == name]


def fake_accelerator(monkeypatch: pytest.MonkeyPatch, kind: str | None, count: int = 4) -> Events:
    """Make ``torch.accelerator`` report ``count`` devices of type ``kind`` (``None``: no
    accelerator), and record device binding and process-group creation without doing either."""
    events = Events()
    api = torch.accelerator
    monkeypatch.setattr(api, "is_available", lambda: kind is not None)
    monkeypatch.setattr(
        api, "current_accelerator", lambda *a, **k: None if kind is None else torch.device(kind)
    )
    monkeypatch.setattr(api, "device_count", lambda: 0 if kind is None else count)
    monkeypatch.setattr(api, "set_device_index", lambda index: events.log.append(("bind", index)))
    monkeypatch.setattr(
        dist, "init_process_group", lambda **kwargs: events.log.append(("init", kwargs))
    )
    monkeypatch.setattr(process_group, "_attempt_store", lambda timeout: dist.HashStore())
    return events


def fake_accelerator_only(monkeypatch: pytest.MonkeyPatch, kind: str, count: int = 4) -> None:
    """Make ``torch.accelerator`` report ``count`` devices of type ``kind``; binding a device fails
    the test (process groups are real)."""
    api = torch.accelerator
    monkeypatch.setattr(api, "is_available", lambda: True)
    monkeypatch.setattr(api, "current_accelerator", lambda *a, **k: torch.device(kind))
    monkeypatch.setattr(api, "device_count", lambda: count)

    def bind(index: int) -> None:
        raise AssertionError(f"device {index} bound")

    monkeypatch.setattr(api, "set_device_index", bind)


def torchrun_environment(monkeypatch: pytest.MonkeyPatch, rank: int, local: int) -> None:
    """The variables torchrun sets for global rank ``rank`` / local rank ``local`` of 4 processes."""
    values = {
        "RANK": rank,
        "LOCAL_RANK": local,
        "WORLD_SIZE": 4,
        "LOCAL_WORLD_SIZE": 2,
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": 29500,
    }
    for name, value in values.items():
        monkeypatch.setenv(name, str(value))


@pytest.mark.parametrize(
    ("kind", "backend", "expected_device", "expected_ids", "bound"),
    [
        ("cuda", "cpu:gloo,cuda:nccl", torch.device("cuda", 1), [1], [1]),
        ("xpu", "cpu:gloo,xpu:xccl", torch.device("xpu", 1), [1], [1]),
        (None, "gloo", torch.device("cpu"), None, []),
    ],
    ids=["cuda", "xpu", "cpu"],
)
def test_device_backend_and_binding_follow_the_accelerator(
    monkeypatch: pytest.MonkeyPatch,
    kind: str | None,
    backend: str,
    expected_device: torch.device,
    expected_ids: list[int] | None,
    bound: list[int],
) -> None:
    events = fake_accelerator(monkeypatch, kind)
    torchrun_environment(monkeypatch, rank=3, local=1)
    assert runtime.device() == expected_device
    assert runtime.device_ids() == expected_ids
    runtime.setup()
    # The device is bound to LOCAL_RANK before the process group (and any device work) exists.
    assert events.names() == ["bind"] * len(bound) + ["init"]
    assert events.of("bind") == bound
    (options,) = events.of("init")
    assert options["backend"] == backend
    assert (options["rank"], options["world_size"]) == (3, 4)


def test_an_accelerator_group_carries_cpu_tensors_with_gloo_unless_told_otherwise(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """nccl alone refuses CPU tensors: a model the user keeps on the CPU (``--no-cuda``) or a metric
    summed on the CPU crashed the migrated program on a GPU machine. The default group has gloo beside
    the accelerator's backend, as torch's own default; a backend the user names is taken as it is."""
    events = fake_accelerator(monkeypatch, "cuda")
    torchrun_environment(monkeypatch, rank=0, local=0)
    monkeypatch.setattr(dist, "is_gloo_available", lambda: False)
    runtime.setup()
    monkeypatch.setattr(dist, "is_gloo_available", lambda: True)
    runtime.setup(backend="nccl")
    assert [options["backend"] for options in events.of("init")] == ["nccl", "nccl"]


def test_device_ids_follow_the_module_about_to_be_wrapped(monkeypatch: pytest.MonkeyPatch) -> None:
    """``device_ids(model)``: a model on the CPU takes no device ids even where CUDA is, nor does one
    spread over several devices; a module with no tensors answers as ``device_ids()``."""
    fake_accelerator(monkeypatch, "cuda")
    monkeypatch.setenv("LOCAL_RANK", "1")
    spread = nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2, device="meta"))
    assert runtime.device_ids(nn.Linear(2, 1)) is None
    assert runtime.device_ids(nn.BatchNorm1d(2, affine=False)) is None  # buffers alone count
    assert runtime.device_ids(spread) is None
    assert runtime.device_ids(nn.ReLU()) == runtime.device_ids() == [1]


def test_backend_comes_from_torchs_device_backend_map(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_accelerator(monkeypatch, "xpu")
    monkeypatch.setitem(dist.Backend.default_device_backend_map, "xpu", "made-up-ccl")
    assert runtime.environment.default_backend() == "made-up-ccl"
    assert runtime.environment.default_backend("cpu") == "gloo"
    assert runtime.environment.default_backend("cuda") == "nccl"


def test_an_accelerator_without_a_distributed_backend_is_not_used(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake_accelerator(monkeypatch, "xpu")
    monkeypatch.delitem(dist.Backend.default_device_backend_map, "xpu")
    assert runtime.device() == torch.device("cpu") and runtime.device_ids() is None
    assert runtime.environment.default_backend() == "gloo"


def test_the_backend_variable_still_overrides(monkeypatch: pytest.MonkeyPatch) -> None:
    events = fake_accelerator(monkeypatch, "cuda")
    torchrun_environment(monkeypatch, rank=0, local=0)
    monkeypatch.setenv("DDP_MIGRATE_BACKEND", "gloo")
    runtime.setup()
    assert events.of("init")[0]["backend"] == "gloo"
    assert events.of("bind") == [0]  # the CUDA device is still bound: gloo then runs on it


def test_a_program_that_trains_on_the_cpu_keeps_it_on_a_gpu_machine(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    events = fake_accelerator(monkeypatch, "cuda")
    torchrun_environment(monkeypatch, rank=3, local=1)
    assert runtime.device_ids() == [1]
    runtime.setup(device="cpu")
    assert events.names() == ["init"]  # no CUDA device bound
    assert events.of("init")[0]["backend"] == "gloo"  # nccl cannot carry the CPU model's gradients
    assert runtime.device() == torch.device("cpu") and runtime.device_ids() is None
    runtime.cleanup()  # code after the clean-up still runs on the CPU (an evaluation's loads)
    assert runtime.device() == torch.device("cpu")


def test_the_device_variable_keeps_every_process_on_the_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    events = fake_accelerator(monkeypatch, "cuda")
    torchrun_environment(monkeypatch, rank=0, local=0)
    monkeypatch.setenv("DDP_MIGRATE_DEVICE", " CPU ")
    assert runtime.device() == torch.device("cpu") and runtime.device_ids() is None
    runtime.setup()
    assert events.names() == ["init"] and events.of("init")[0]["backend"] == "gloo"


@pytest.mark.parametrize("where", ["argument", "variable"])
def test_a_device_type_no_program_can_choose_is_a_clear_error(
    monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    events = fake_accelerator(monkeypatch, "cuda")
    if where == "argument":
        with pytest.raises(runtime.DistributedEnvironmentError, match=r"device='tpu'.*'cpu'"):
            runtime.setup(device="tpu")
        assert runtime.device() == torch.device("cuda", 0)
    else:
        monkeypatch.setenv("DDP_MIGRATE_DEVICE", "cuda:1")
        with pytest.raises(runtime.DistributedEnvironmentError, match=r"DDP_MIGRATE_DEVICE='cuda:1'"):
            runtime.setup()
    assert events.log == []


def test_a_set_up_that_fails_leaves_no_device_choice_behind(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_accelerator(monkeypatch, "cuda")
    monkeypatch.setenv("RANK", "0")  # half a launch environment
    with pytest.raises(runtime.DistributedEnvironmentError, match="incomplete"):
        runtime.setup(device="cpu")
    monkeypatch.delenv("RANK")
    assert runtime.device() == torch.device("cuda", 0)


def test_a_cpu_model_wraps_on_a_gpu_machine_once_the_cpu_is_chosen(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake_accelerator_only(monkeypatch, "cuda")  # a real group of one, on gloo
    runtime.setup(device="cpu")
    try:
        model = nn.parallel.DistributedDataParallel(nn.Linear(2, 1), device_ids=runtime.device_ids())
        model(torch.ones(3, 2)).sum().backward()
        assert dist.get_backend() == "gloo"
    finally:
        runtime.cleanup()


@pytest.mark.parametrize(
    ("kind", "backend", "message"),
    [(None, "nccl", "needs a CUDA device"), ("xpu", "nccl", "only 'xpu'"), ("cuda", "xccl", "XPU")],
)
def test_an_accelerator_backend_without_its_device_is_a_clear_error(
    monkeypatch: pytest.MonkeyPatch, kind: str | None, backend: str, message: str
) -> None:
    events = fake_accelerator(monkeypatch, kind)
    with pytest.raises(runtime.DistributedEnvironmentError, match=message):
        runtime.setup(backend=backend)
    assert events.log == []


def test_more_local_ranks_than_devices_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    events = fake_accelerator(monkeypatch, "xpu", count=2)
    torchrun_environment(monkeypatch, rank=2, local=2)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "3")
    with pytest.raises(runtime.DistributedEnvironmentError, match="only 2 XPU device"):
        runtime.setup()
    assert events.log == []


def test_torch_without_the_accelerator_api_falls_back_to_cuda(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # torch < 2.6 has no torch.accelerator: CUDA through torch.cuda.
    bound: list[int] = []
    monkeypatch.delattr(torch, "accelerator")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "set_device", bound.append)
    created: list[dict[str, Any]] = []
    monkeypatch.setattr(dist, "init_process_group", lambda **kwargs: created.append(kwargs))
    monkeypatch.setattr(process_group, "_attempt_store", lambda timeout: dist.HashStore())
    torchrun_environment(monkeypatch, rank=1, local=1)
    assert runtime.device() == torch.device("cuda", 1) and runtime.device_ids() == [1]
    runtime.setup()
    assert bound == [1] and created[0]["backend"] == "cpu:gloo,cuda:nccl"


def test_torch_without_the_accelerator_api_and_without_cuda_is_the_cpu(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delattr(torch, "accelerator")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    if hasattr(torch, "xpu"):
        monkeypatch.setattr(torch.xpu, "is_available", lambda: False)
    assert runtime.device() == torch.device("cpu") and runtime.device_ids() is None
    assert runtime.environment.default_backend() == "gloo"


@pytest.mark.parametrize(("kind", "converts"), [("cuda", True), ("xpu", False), (None, False)])
def test_sync_batchnorm_conversion_stays_cuda_only(
    monkeypatch: pytest.MonkeyPatch, kind: str | None, converts: bool
) -> None:
    fake_accelerator(monkeypatch, kind)
    model = nn.Sequential(nn.Conv2d(1, 2, 3), nn.BatchNorm2d(2))
    converted = runtime.convert_sync_batchnorm(model)
    assert isinstance(converted[1], nn.SyncBatchNorm) is converts
    if not converts:
        assert converted is model


@pytest.mark.parametrize(
    ("kind", "backend", "expected"),
    [("cuda", "nccl", {"device_ids": [1]}), ("xpu", "xccl", {"device_ids": [1]}),
     ("cuda", "gloo", {}), ("cuda", "cpu:gloo,cuda:nccl", {}), (None, "gloo", {})],
)
def test_barrier_names_the_device_on_accelerator_backends(
    monkeypatch: pytest.MonkeyPatch, kind: str | None, backend: str, expected: dict[str, Any]
) -> None:
    fake_accelerator(monkeypatch, kind)
    monkeypatch.setenv("LOCAL_RANK", "1")
    calls: list[dict[str, Any]] = []
    monkeypatch.setattr(process_group, "is_initialized", lambda: True)
    monkeypatch.setattr(dist, "get_world_size", lambda *a, **k: 2)
    monkeypatch.setattr(dist, "get_backend", lambda *a, **k: backend)
    monkeypatch.setattr(dist, "barrier", lambda **kwargs: calls.append(kwargs))
    runtime.barrier()
    assert calls == [expected]


@pytest.mark.parametrize("restarts", ["", "3"], ids=["first-run", "third-restart"])
def test_each_restart_keeps_its_own_keys_in_torchruns_store(
    monkeypatch: pytest.MonkeyPatch, restarts: str
) -> None:
    # torchrun shares its rendezvous store with the workers: keys of dead workers stay there.
    from launch import free_port

    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(free_port()))
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "1")
    monkeypatch.delenv("TORCHELASTIC_USE_AGENT_STORE", raising=False)
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", restarts)
    store = process_group._attempt_store(None)
    store.set("address", "here")
    raw = store.underlying_store
    assert raw.get(f"ddp_migrate/attempt_{restarts or 0}/address") == b"here"
    assert not raw.check(["address"])
