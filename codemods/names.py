"""Qualified names of the torch APIs the rules recognise, whatever alias a script imports them under."""

from __future__ import annotations

DATA_PARALLEL = frozenset(
    {
        "torch.nn.DataParallel",
        "torch.nn.parallel.DataParallel",
        "torch.nn.parallel.data_parallel.DataParallel",
    }
)
DISTRIBUTED_DATA_PARALLEL = frozenset(
    {
        "torch.nn.parallel.DistributedDataParallel",
        "torch.nn.parallel.distributed.DistributedDataParallel",
        "torch.nn.DistributedDataParallel",
    }
)
MODEL_WRAPPERS = DATA_PARALLEL | DISTRIBUTED_DATA_PARALLEL

DATA_LOADER = frozenset({"torch.utils.data.DataLoader", "torch.utils.data.dataloader.DataLoader"})
DISTRIBUTED_SAMPLER = frozenset(
    {"torch.utils.data.DistributedSampler", "torch.utils.data.distributed.DistributedSampler"}
)

TORCH_SAVE = frozenset({"torch.save", "torch.serialization.save"})
TORCH_LOAD = frozenset({"torch.load", "torch.serialization.load"})
TORCH_DEVICE = frozenset({"torch.device"})
CUDA_SET_DEVICE = frozenset({"torch.cuda.set_device"})
CUDA_QUERIES = frozenset({"torch.cuda.is_available", "torch.cuda.device_count"})

INIT_PROCESS_GROUP = frozenset({"torch.distributed.init_process_group"})
DESTROY_PROCESS_GROUP = frozenset({"torch.distributed.destroy_process_group"})
GET_RANK = frozenset({"torch.distributed.get_rank"})

TQDM = frozenset(
    {
        "tqdm.tqdm",
        "tqdm.trange",
        "tqdm.auto.tqdm",
        "tqdm.auto.trange",
        "tqdm.notebook.tqdm",
        "tqdm.std.tqdm",
        "tqdm.autonotebook.tqdm",
    }
)
LOGGING_CALLS = frozenset(
    f"logging.{level}" for level in ("debug", "info", "warning", "warn", "error", "exception", "critical", "log")
)
GET_LOGGER = frozenset({"logging.getLogger"})

#: The module migrated code imports, and the qualified names of its helpers.
RUNTIME_MODULE = "ddp_migrate.runtime"


def runtime(name: str) -> str:
    """The qualified name of a runtime helper, e.g. ``runtime("setup")``."""
    return f"{RUNTIME_MODULE}.{name}"


RUNTIME_SETUP = frozenset({runtime("setup")})
RUNTIME_SAVE = frozenset({runtime("save")})
RUNTIME_PRINT = frozenset({runtime("print0")})
RUNTIME_SILENCE_LOGGING = frozenset({runtime("silence_non_main_logging")})
RUNTIME_MAIN_CHECK = frozenset({runtime("is_main_process")})
RUNTIME_RANK = frozenset({runtime("rank"), *GET_RANK})
