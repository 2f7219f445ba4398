"""The rules, one module each, and the registry the engine loads them from."""

from __future__ import annotations

from .base import BatchSizePolicy, Example, Finding, Options, Phase, Rule, Severity, Valid
from .data_parallel import DataParallel
from .distributed_sampler import MissingDistributedSampler
from .hardcoded_device import HardcodedDevice
from .load_map_location import LoadWithoutMapLocation
from .missing_ddp_wrap import MissingDdpWrap
from .process_group import MissingProcessGroup
from .set_epoch import MissingSetEpoch
from .unguarded_output import UnguardedOutput
from .unguarded_save import UnguardedSave
from .wrap_before_device import WrapBeforeDevice
from .wrapped_module_access import WrappedModuleAccess

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
