"""Qualified names of the torch APIs the rules recognise, whatever alias a script imports them under."""

from __future__ import annotations

DATA_PARALLEL = frozenset(
    {
        "torch.nn.DataParallel",
        "torch.nn.parallel.DataParallel",
        "torch.nn.parallel.data_parallel.DataParallel",
    }
)
#: The functional form: one forward spread over several GPUs by one process (DCGAN's ``forward``).
FUNCTIONAL_DATA_PARALLEL = frozenset({"torch.nn.parallel.data_parallel", "torch.nn.parallel.data_parallel.data_parallel"})
DISTRIBUTED_DATA_PARALLEL = frozenset(
    {
        "torch.nn.parallel.DistributedDataParallel",
        "torch.nn.parallel.distributed.DistributedDataParallel",
        "torch.nn.DistributedDataParallel",
    }
)
MODEL_WRAPPERS = DATA_PARALLEL | DISTRIBUTED_DATA_PARALLEL
#: A copy of a model with parameters of its own (``copy.deepcopy(model)``), and the averaging wrappers that
#: make one (``AveragedModel(model)``).
DEEP_COPY = frozenset({"copy.deepcopy"})
#: Calls that hand back a module running the model they are given (same parameters, same forward).
MODEL_COMPILERS = frozenset({"torch.compile"})
MODEL_COPIES = DEEP_COPY | {"torch.optim.swa_utils.AveragedModel"}
#: A trainable tensor (``nn.Parameter(torch.zeros(1))``): a module's own when assigned to its attribute.
PARAMETER = frozenset({"torch.nn.Parameter", "torch.nn.parameter.Parameter"})
#: What a file's code must spell for the analysis to call it a training script (``is_training_script``: a
#: ``.backward()`` call, whatever its receiver) or training code (``is_training_code``: that, or a model
#: wrap): the gate of the rules that act only there (``Rule.needs_names``).
TRAINING_SCRIPT_NAMES = frozenset({"backward", "zero_grad"})
#: What the text of a training step spells: ``.backward(``, or ``.zero_grad(`` beside a library's backward pass
#: (``loss_scaler(loss, optimizer)``: :attr:`ScriptAnalysis.backward_calls_out_of_sight`). The text gate
#: (``Rule.triggers`` / ``Rule.requires``) of the rules that act only on training code.
TRAINING_STEP_WORDS = (".backward(", ".zero_grad(")
TRAINING_CODE_NAMES = TRAINING_SCRIPT_NAMES | MODEL_WRAPPERS

#: ``itertools.cycle(loader)``: one pass over the loader, then its batches again in the same order.
ITERTOOLS_CYCLE = frozenset({"itertools.cycle"})
#: Gradients computed without ``.backward()`` (meta-learning, hand-written updates).
AUTOGRAD_GRADIENTS = frozenset({"torch.autograd.grad", "torch.autograd.backward"})
DATA_LOADER = frozenset({"torch.utils.data.DataLoader", "torch.utils.data.dataloader.DataLoader"})
#: ``Subset(dataset, indices)``: a data set cut by hand.
SUBSET = frozenset({"torch.utils.data.Subset", "torch.utils.data.dataset.Subset"})
#: Datasets that yield their samples in their own order (no indices): ``DataLoader`` refuses a sampler for them.
ITERABLE_DATASETS = frozenset(
    {
        "torch.utils.data.IterableDataset",
        "torch.utils.data.dataset.IterableDataset",
        "torch.utils.data.IterDataPipe",
        "torch.utils.data.datapipes.datapipe.IterDataPipe",
        "torch.utils.data.ChainDataset",
        "torch.utils.data.dataset.ChainDataset",
        "datasets.IterableDataset",
        "webdataset.WebDataset",
        "webdataset.DataPipeline",
        "streaming.StreamingDataset",  # MosaicML's
        "streaming.base.StreamingDataset",
        "streaming.base.dataset.StreamingDataset",
    }
)
#: Methods that turn a map-style data set into an iterable one (Hugging Face ``Dataset.to_iterable_dataset()``).
TO_ITERABLE_METHODS = frozenset({"to_iterable_dataset"})
#: ``load_dataset(..., streaming=True)`` hands back an iterable-style dataset.
STREAMING_LOADS = frozenset({"datasets.load_dataset"})
DISTRIBUTED_SAMPLER = frozenset(
    {"torch.utils.data.DistributedSampler", "torch.utils.data.distributed.DistributedSampler"}
)

TORCH_SAVE = frozenset({"torch.save", "torch.serialization.save"})
TORCH_LOAD = frozenset({"torch.load", "torch.serialization.load"})
TORCH_DEVICE = frozenset({"torch.device"})
#: Calls that make a device index this process's current device: CUDA's, the accelerator-agnostic ones of recent
#: torch releases (``torch.accelerator.set_device_index(rank)``, as PyTorch's DDP examples now write it, and its
#: deprecated spelling ``set_device_idx``), XPU's.
SET_DEVICE_CALLS = frozenset(
    {"torch.cuda.set_device", "torch.accelerator.set_device_index", "torch.accelerator.set_device_idx", "torch.xpu.set_device"}
)
CUDA_IS_AVAILABLE = frozenset({"torch.cuda.is_available"})
CUDA_QUERIES = CUDA_IS_AVAILABLE | frozenset({"torch.cuda.device_count"})

INIT_PROCESS_GROUP = frozenset({"torch.distributed.init_process_group"})
#: Libraries (module prefixes) that distribute a model themselves: FSDP, tensor parallelism over a device mesh (which
#: sets up the process group too), DeepSpeed, Accelerate, Lightning, ...
SELF_DISTRIBUTING = (
    "torch.distributed.fsdp", "torch.distributed._composable", "torch.distributed.tensor", "torch.distributed.device_mesh",
    "torch.distributed.rpc", "torch.distributed.autograd", "torch.distributed.optim", "torch.distributed.pipelining",
    "deepspeed", "accelerate", "lightning", "pytorch_lightning", "horovod", "fairscale", "colossalai",
)
#: The calls by which a program hands its distribution to such a library (not any use of it: ``set_seed`` of
#: accelerate, a fused optimizer of DeepSpeed, ZeRO's optimizer beside DDP distribute nothing).
DISTRIBUTING_CALLS = frozenset(
    {
        "torch.distributed.fsdp.FullyShardedDataParallel", "torch.distributed.fsdp.fully_shard",
        "torch.distributed._composable.fsdp.fully_shard", "torch.distributed._composable.fully_shard",
        "torch.distributed.device_mesh.init_device_mesh", "torch.distributed.tensor.parallel.parallelize_module",
        "torch.distributed.pipelining.pipeline", "torch.distributed.pipelining.PipelineStage", "torch.distributed.rpc.init_rpc",
        "torch.distributed.optim.DistributedOptimizer", "torch.distributed.autograd.context",
        "deepspeed.initialize", "accelerate.Accelerator", "lightning.Trainer", "lightning.pytorch.Trainer",
        "pytorch_lightning.Trainer", "lightning.Fabric", "lightning.fabric.Fabric", "horovod.torch.init",
        "horovod.torch.DistributedOptimizer", "fairscale.nn.FullyShardedDataParallel",
        "fairscale.nn.data_parallel.FullyShardedDataParallel", "colossalai.launch", "colossalai.initialize",
    }
)
#: Words of a source that may set up a process group or distribute a model itself (a cheap text test).
DISTRIBUTING_WORDS = (
    "init_process_group", "DistributedDataParallel", "init_device_mesh", "fully_shard", "FullyShardedDataParallel",
    "deepspeed", "Accelerator(",
)
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
#: Methods of a ``logging.Logger`` that emit a record.
LOGGER_METHODS = frozenset({"debug", "info", "warning", "warn", "error", "exception", "critical", "log"})

#: The module migrated code imports, and the qualified names of its helpers.
RUNTIME_MODULE = "ddp_migrate.runtime"
#: The module ``--runtime vendor`` writes beside the migrated program; imports of it resolve to
#: :data:`RUNTIME_MODULE`, so the analysis recognises both spellings of the runtime.
VENDORED_RUNTIME = "ddp_runtime"


def runtime(name: str) -> str:
    """The qualified name of a runtime helper, e.g. ``runtime("setup")``."""
    return f"{RUNTIME_MODULE}.{name}"


#: Keyword arguments that take a device (``x.new_zeros(3, device=...)``, ``torch.load(map_location=...)``).
DEVICE_KEYWORDS = frozenset({"device", "map_location"})
RUNTIME_SETUP = frozenset({runtime("setup")})
RUNTIME_CLEANUP = frozenset({runtime("cleanup")})
RUNTIME_SAVE = frozenset({runtime("save")})
#: What a checkpoint the program saved comes back through: torch's loads and the runtime's.
CHECKPOINT_LOADS = TORCH_LOAD | {runtime("load")}
RUNTIME_PRINT = frozenset({runtime("print0")})
#: The runtime's calls that tell a loader's sampler its epoch (the loader is their first argument).
RUNTIME_EPOCH_CALLS = frozenset({runtime("set_epoch"), runtime("next_epoch")})
RUNTIME_SILENCE_LOGGING = frozenset({runtime("silence_non_main_logging")})
RUNTIME_MAIN_CHECK = frozenset({runtime("is_main_process")})
RUNTIME_RANK = frozenset({runtime("rank"), *GET_RANK})
#: The runtime's split of the global batch: ``batch_size=runtime.per_process_batch_size(B)``.
RUNTIME_PER_PROCESS_BATCH_SIZE = frozenset({runtime("per_process_batch_size")})


# ------------------------------------------------------------------ collectives (DDP033, DDP035, DDP037)


def distributed(name: str) -> frozenset[str]:
    """The qualified names of a ``torch.distributed`` function (``dist.x`` and the ``distributed_c10d`` module
    that defines it, for ``from torch.distributed.distributed_c10d import x``)."""
    return frozenset({f"torch.distributed.{name}", f"torch.distributed.distributed_c10d.{name}"})


#: Whether the process group is set up already (torch's question, and the runtime's).
GROUP_IS_INITIALIZED = distributed("is_initialized") | frozenset({runtime("is_initialized")})

#: ``torch.distributed`` operations every rank of the group must call, or the callers wait forever.
COLLECTIVE_FUNCTIONS = (
    "barrier",
    "monitored_barrier",
    "all_reduce",
    "reduce",
    "broadcast",
    "all_gather",
    "all_gather_into_tensor",
    "reduce_scatter",
    "reduce_scatter_tensor",
    "gather",
    "scatter",
    "all_to_all",
    "all_to_all_single",
    "broadcast_object_list",
    "all_gather_object",
    "gather_object",
    "scatter_object_list",
    "new_group",
)
#: Point-to-point operations: one rank sends, one receives, so they belong in rank branches.
POINT_TO_POINT_FUNCTIONS = ("send", "recv", "isend", "irecv")
#: Point-to-point operations that always run asynchronously and hand back a work handle.
ASYNC_POINT_TO_POINT_FUNCTIONS = ("isend", "irecv")

TORCH_COLLECTIVES = frozenset(q for name in COLLECTIVE_FUNCTIONS for q in distributed(name))
TORCH_ASYNC_POINT_TO_POINT = frozenset(q for name in ASYNC_POINT_TO_POINT_FUNCTIONS for q in distributed(name))
#: Runtime helpers that run a collective inside (``save`` ends with a barrier).
RUNTIME_COLLECTIVES = frozenset(
    runtime(name) for name in ("barrier", "save", "reduce_sum", "reduce_mean", "weighted_mean")
)
COLLECTIVES = TORCH_COLLECTIVES | RUNTIME_COLLECTIVES
#: Calls that combine a value across ranks, so what follows them is the whole job's number.
REDUCTIONS = frozenset(
    q
    for name in ("all_reduce", "reduce", "all_gather", "all_gather_into_tensor", "all_gather_object", "gather", "gather_object")
    for q in distributed(name)
) | frozenset(runtime(name) for name in ("reduce_sum", "reduce_mean", "weighted_mean"))

#: The base class of torch's modules, as programs spell it.
MODULE_BASES = frozenset({"torch.nn.Module", "torch.nn.modules.module.Module"})

# -------------------------------------------------------------------------- BatchNorm (DDP030)

BATCH_NORM = frozenset(
    f"{module}.{kind}BatchNorm{d}d"
    for module in ("torch.nn", "torch.nn.modules.batchnorm")
    for kind in ("", "Lazy")
    for d in (1, 2, 3)
)
CONVERT_SYNC_BATCHNORM = frozenset(
    {
        "torch.nn.SyncBatchNorm.convert_sync_batchnorm",
        "torch.nn.modules.batchnorm.SyncBatchNorm.convert_sync_batchnorm",
        runtime("convert_sync_batchnorm"),
    }
)

# -------------------------------------------------------------------------- metric logging (DDP038)

#: Calls that log a metric to an experiment tracker.
METRIC_LOGGING_CALLS = frozenset({"wandb.log", "mlflow.log_metric", "mlflow.log_metrics"})
SUMMARY_WRITER = frozenset({"torch.utils.tensorboard.SummaryWriter", "torch.utils.tensorboard.writer.SummaryWriter", "tensorboardX.SummaryWriter"})

# --------------------------------------------------------------- writers (DDP007, DDP012): one table

#: What a call does to the file system or the outside world, so only one rank should do it. Kinds:
#: ``checkpoint`` (``torch.save``: DDP007), ``open`` (a writing mode decides), ``folder`` (safe on every rank
#: with ``exist_ok=True``), ``file`` (writes or changes a file), ``handle`` (writes to a file object it is
#: given: guarded with the ``open`` that made the object), ``event-log`` (a ``SummaryWriter``: created on
#: rank 0 only), ``tracker`` (``wandb.init``: disabled off rank 0), ``download`` (rank 0 first, the others
#: wait on a path all ranks take).
WRITERS: dict[str, str] = {
    **{name: "checkpoint" for name in TORCH_SAVE},
    "builtins.open": "open",
    **{name: "open" for name in ("io.open", "gzip.open", "bz2.open", "lzma.open", "codecs.open")},
    "os.mkdir": "folder",
    "os.makedirs": "folder",
    **{
        name: "file"
        for name in (
            "torchvision.utils.save_image",
            "matplotlib.pyplot.savefig",
            "matplotlib.pyplot.imsave",
            "numpy.save",
            "numpy.savetxt",
            "numpy.savez",
            "numpy.savez_compressed",
            "shutil.copy",
            "shutil.copy2",
            "shutil.copyfile",
            "shutil.copytree",
            "shutil.move",
            "shutil.rmtree",
            "os.remove",
            "os.unlink",
            "os.rename",
            "os.replace",
            "os.symlink",
            "imageio.imwrite",
            "cv2.imwrite",
            "torch.jit.save",
        )
    },
    **{name: "handle" for name in ("json.dump", "pickle.dump", "yaml.dump", "yaml.safe_dump", "csv.writer", "csv.DictWriter")},
    **{name: "event-log" for name in SUMMARY_WRITER},
    "wandb.init": "tracker",
    **{
        name: "download"
        for name in (
            "torch.hub.load",
            "torch.hub.download_url_to_file",
            "torch.hub.load_state_dict_from_url",
            "torch.utils.model_zoo.load_url",
            "torchvision.datasets.utils.download_url",
            "torchvision.datasets.utils.download_and_extract_archive",
            "urllib.request.urlretrieve",
        )
    },
}
#: Methods that write whatever object they are called on (``fig.savefig``, ``path.write_text``,
#: ``model.save_pretrained``, ``df.to_csv``); ``mkdir`` is ``pathlib.Path.mkdir``. (A path's ``open(mode)`` is an
#: ``open`` whose mode decides, read apart.)
WRITER_METHODS: dict[str, str] = {
    "savefig": "file",
    "write_text": "file",
    "write_bytes": "file",
    "save_pretrained": "file",
    "to_csv": "file",
    "to_json": "file",
    "to_parquet": "file",
    "mkdir": "folder",
    "from_pretrained": "download",
}
#: Calls that create a PIL image: ``.save(path)`` on their result writes a file.
PIL_IMAGES = frozenset({"PIL.Image.open", "PIL.Image.fromarray", "PIL.Image.new", "PIL.Image.frombytes"})
#: Calls that make a TorchScript module: ``.save(path)`` on their result writes a file.
TORCHSCRIPT_MODULES = frozenset({"torch.jit.trace", "torch.jit.script", "torch.jit.trace_module", "torch.jit.freeze"})
#: Keyword arguments that make any call a download (``datasets.MNIST(..., download=True)``,
#: ``models.resnet18(pretrained=True)``).
DOWNLOAD_KEYWORDS = frozenset({"download", "pretrained"})


def writer_kind(qualified: "set[str] | frozenset[str]") -> str | None:
    """The kind of writer (see :data:`WRITERS`) a call to one of these qualified names is."""
    return next((WRITERS[q] for q in sorted(qualified) if q in WRITERS), None)

#: Wrappers that hand back the items of what they wrap as they are (a progress bar, an iterator), by their last name.
ITEM_KEEPING_WRAPPERS = frozenset({"tqdm", "trange", "iter"})

#: Builtins whose value does not depend on the order of the items they are given (``sum`` does, for floats).
ORDER_FREE_BUILTINS = frozenset({f"builtins.{name}" for name in ("sorted", "set", "frozenset", "len", "min", "max", "any", "all")})

#: Clocks: a value read from one differs between processes.
CLOCKS = frozenset(
    {"time.time", "time.time_ns", "time.perf_counter", "time.perf_counter_ns", "time.monotonic", "time.monotonic_ns", "datetime.datetime.now"}
)

#: Random generator objects of numpy and Python, seeded (or not) when built: ``np.random.default_rng(seed)``.
RANDOM_GENERATORS = frozenset({"numpy.random.default_rng", "numpy.random.RandomState", "random.Random"})
