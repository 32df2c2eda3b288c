"""The trainer: the LoRA policy with its adapters, chunked logprobs, the GRPO train step of one
adapter or several, adapter I/O."""

from .adapter import Adapter
from .batch import TrainBatch, TrainSample, collate
from .logprobs import chunked_token_logprobs
from .policy import LoraPolicy, pick_device

__all__ = [
    "Adapter",
    "LoraPolicy",
    "TrainBatch",
    "TrainSample",
    "chunked_token_logprobs",
    "collate",
    "pick_device",
]
