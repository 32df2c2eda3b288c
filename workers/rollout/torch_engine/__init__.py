"""The torch rollout engine (PyTorch + PEFT), a small package:

- backend.py: `TorchBackend`, the protocol of base.py, the pause and abort state, the step lock;
- loop.py: the one decode loop (recompute on an adapter change, admission, compaction);
- sources.py: what the loop's steps run on: the PEFT forward with its cache, or the static
  decoder of static_decode.py;
- rows.py: a batch's row bookkeeping (slots, finished rows, each request's random stream);
- sampling.py: sampling a step's tokens (pure functions).
"""

from .backend import TorchBackend
from .sampling import draw

__all__ = ["TorchBackend", "draw"]
