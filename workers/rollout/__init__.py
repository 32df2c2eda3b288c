"""Rollout backends behind one protocol, chosen by `rollout.backend`."""

from .base import (
    GroupRequest,
    GroupResult,
    PauseMode,
    RolloutBackend,
    Sample,
    SamplingParams,
)
from .registry import BACKENDS, make_backend

__all__ = [
    "BACKENDS",
    "GroupRequest",
    "GroupResult",
    "PauseMode",
    "RolloutBackend",
    "Sample",
    "SamplingParams",
    "make_backend",
]
