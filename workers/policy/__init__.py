"""The LoRA policy: model + adapter, chunked logprobs, the GRPO train step, adapter I/O."""

from .batch import TrainBatch, TrainSample, collate
from .logprobs import chunked_token_logprobs
from .policy import LoraPolicy, pick_device

__all__ = [
    "LoraPolicy",
    "TrainBatch",
    "TrainSample",
    "chunked_token_logprobs",
    "collate",
    "pick_device",
]
