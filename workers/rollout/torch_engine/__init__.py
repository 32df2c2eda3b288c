"""The torch rollout engine (PyTorch + PEFT), a small package:

- engine.py: `TorchEngine`, the model, its adapters and the decode thread;
- backend.py: a lane per adapter (the rollout protocol), `TorchBackend` (a run alone: the
  engine with one adapter) and `TorchPool` (a pool: a slot per run);
- loop.py: the one decode loop (admission, sampling, recording, compaction);
- sources.py: what the loop's steps run on: the PEFT forward with its cache, or the static
  decoder of static_decode.py; each holds the engine's adapters;
- rows.py: the batch's bookkeeping (groups, positions, each group's random stream);
- sampling.py: sampling a step's tokens (pure functions).
"""

from .backend import TorchBackend, TorchLane, TorchPool
from .sampling import draw

__all__ = ["TorchBackend", "TorchLane", "TorchPool", "draw"]
