"""Sync and async GRPO drivers, the trajectory buffer, staleness control, checkpoints."""

from .control import ControlSource, FileControl, StaticControl
from .driver import Driver, Outcome
from .setup import run_training

__all__ = ["ControlSource", "Driver", "FileControl", "Outcome", "StaticControl", "run_training"]
