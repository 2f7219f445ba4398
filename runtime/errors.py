"""Exceptions raised by the runtime, each with a message that says how to fix the problem."""

from __future__ import annotations

__all__ = ["BatchSizeError", "DistributedEnvironmentError"]


class DistributedEnvironmentError(RuntimeError):
    """The launch environment is incomplete or invalid.

    Raised, for example, when ``RANK`` is set but ``WORLD_SIZE`` is not: the process was started by
    something that looks like a distributed launcher, but not with everything ``torchrun`` provides.
    """


class BatchSizeError(ValueError):
    """A global batch size cannot be split evenly across the processes of the job."""
