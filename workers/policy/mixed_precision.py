"""The trainer's bf16 context on a GPU.

Under autocast every matmul runs in bf16, yet PEFT's LoRA layer first casts its input to the
adapter's dtype (float32, kept so for the optimizer): a full copy of the activation per LoRA
layer in forward, and another in backward, that autocast then casts back for the matmul. On
the Qwen3-0.6B shape of issue 10 these copies were a fifth of the train step's GPU time.
Inside this context the input stays bf16 and only the small adapter weights are cast.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
from peft.helpers import disable_input_dtype_casting


@contextlib.contextmanager
def bf16_autocast(model: torch.nn.Module) -> Iterator[None]:
    with torch.autocast("cuda", dtype=torch.bfloat16), disable_input_dtype_casting(model):
        yield
