"""The rules, one module each, and the registry the engine loads them from."""

from __future__ import annotations

from .base import BatchSizePolicy, Example, Finding, Options, Phase, Rule, Severity, Valid
from .batch_compared_with_itself import BatchComparedWithItself
from .data_parallel import DataParallel
from .distributed_sampler import MissingDistributedSampler
from .elastic_snapshot import RestartableTraining
from .explicit_rank import ExplicitRankAndWorldSize
from .hardcoded_device import HardcodedDevice
from .hardcoded_rendezvous import HardcodedRendezvous
from .load_map_location import LoadWithoutMapLocation
from .local_rank_argument import LocalRankArgument
from .local_rank_guard import LocalRankGuard
from .missing_ddp_wrap import MissingDdpWrap
from .process_group import MissingProcessGroup
from .rank_as_device import RankAsDevice
from .set_epoch import MissingSetEpoch
from .spawn_launcher import SpawnLauncher
from .unguarded_file_write import UnguardedFileWrite
from .unguarded_output import UnguardedOutput
from .unguarded_save import UnguardedSave
from .wrap_before_device import WrapBeforeDevice
from .wrapped_module_access import WrappedModuleAccess
from .accumulation_no_sync import AccumulationWithoutNoSync
from .async_collective import UnwaitedAsyncCollective
from .batchnorm_sync import BatchNormWithoutSync
from .checkpoint_keys import DataParallelCheckpointKeys
from .sum_reduction_loss import SumReductionLoss
from .wrap_after_structure import LayerAddedAfterWrap
from .collective_arguments import InvalidCollectiveArgument
from .collective_in_rank_branch import CollectiveInRankBranch
from .find_unused_parameters import FindUnusedParameters
from .padded_eval_sampler import PaddedEvalSampler
from .sampler_shuffle import SamplerWithShuffle
from .unsynced_metric_logging import UnsyncedMetricLogging
from .unseeded_random_split import UnseededRandomSplit
from .unsharded_training_data import UnshardedTrainingData
from .requires_grad_after_wrap import RequiresGradAfterWrap
from .same_draws_on_every_rank import SameDrawsOnEveryRank
from .shard_metric_decision import ShardMetricDecision
from .pass_over_sharded_loader import PassOverShardedLoader
from .buffer_written_from_batch import BufferWrittenFromBatch
from .per_process_batch_reads import PerProcessBatchReads
from .set_order_data import SetOrderData
from .step_skipped_on_error import StepSkippedOnError
from .shard_sum_over_whole_set import ShardSumOverWholeSet
from .reentrant_checkpoint import ReentrantCheckpointReused

#: Every rule, in code order. The engine runs their fixes in phase order.
ALL_RULES: tuple[type[Rule], ...] = tuple(
    sorted(
        (
            DataParallel,
            WrapBeforeDevice,
            MissingProcessGroup,
            HardcodedDevice,
            MissingDistributedSampler,
            MissingSetEpoch,
            UnguardedSave,
            WrappedModuleAccess,
            LoadWithoutMapLocation,
            UnguardedOutput,
            MissingDdpWrap,
            UnguardedFileWrite,
            RestartableTraining,
            SpawnLauncher,
            HardcodedRendezvous,
            ExplicitRankAndWorldSize,
            LocalRankArgument,
            RankAsDevice,
            LocalRankGuard,
            BatchNormWithoutSync,
            AccumulationWithoutNoSync,
            FindUnusedParameters,
            CollectiveInRankBranch,
            PaddedEvalSampler,
            UnwaitedAsyncCollective,
            SamplerWithShuffle,
            InvalidCollectiveArgument,
            UnsyncedMetricLogging,
            DataParallelCheckpointKeys,
            SumReductionLoss,
            LayerAddedAfterWrap,
            UnshardedTrainingData,
            ShardMetricDecision,
            RequiresGradAfterWrap,
            UnseededRandomSplit,
            ShardSumOverWholeSet,
            PassOverShardedLoader,
            BufferWrittenFromBatch,
            PerProcessBatchReads,
            SetOrderData,
            StepSkippedOnError,
            BatchComparedWithItself,
            SameDrawsOnEveryRank,
            ReentrantCheckpointReused,
        ),
        key=lambda rule: rule.code,
    )
)


def rule_for_code(code: str) -> type[Rule] | None:
    """The rule with this exact code (case-insensitive), or ``None``."""
    wanted = code.strip().upper()
    return next((rule for rule in ALL_RULES if rule.code == wanted), None)


__all__ = [
    "ALL_RULES",
    "BatchSizePolicy",
    "Example",
    "Finding",
    "Options",
    "Phase",
    "Rule",
    "Severity",
    "Valid",
    "rule_for_code",
]
