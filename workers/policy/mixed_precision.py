"""The trainer's bf16 context on a GPU.

Under autocast every matmul runs in bf16, yet PEFT's LoRA layer first casts its input to the
adapter's dtype (float32, kept so for the optimizer): a full copy of the activation per LoRA
layer in forward, and another in backward, that autocast then casts back for the matmul. On
the Qwen3-0.6B shape of issue 10 these copies were a fifth of the train step's GPU time.
Inside this context the input stays bf16 and only the small adapter weights are cast.

PEFT's own switch (`peft.helpers.disable_input_dtype_casting`) walks the model's named
modules on entry and again on exit: 2,389 modules at the Qwen3-0.6B shape, about 5 ms each
way on the host, twice a forward, while the GPU waits (the profile of a compiled train step
on an H200 showed a 6 ms idle gap at each). `uncast_inputs` sets the same flag on a list of
the PEFT layers made once (`tuner_layers`), writing the instance attribute directly.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence

import torch
from peft.tuners.tuners_utils import BaseTunerLayer

_FLAG = "cast_input_dtype_enabled"  # what PEFT's _cast_input_dtype reads (default True)


def tuner_layers(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The model's PEFT layers (those whose input cast the contexts switch off)."""
    return [m for m in model.modules() if isinstance(m, BaseTunerLayer)]


@contextlib.contextmanager
def uncast_inputs(layers: Sequence[torch.nn.Module]) -> Iterator[None]:
    """PEFT's disable_input_dtype_casting over `layers`: the flag off inside, each layer's
    own value back after (a plain attribute, so written past nn.Module's __setattr__)."""
    saved = [vars(m).get(_FLAG, True) for m in layers]
    for m in layers:
        vars(m)[_FLAG] = False
    try:
        yield
    finally:
        for m, value in zip(layers, saved, strict=True):
            vars(m)[_FLAG] = value


@contextlib.contextmanager
def bf16_autocast(
    model: torch.nn.Module, layers: Sequence[torch.nn.Module] | None = None
) -> Iterator[None]:
    """bf16 autocast with the LoRA inputs uncast; `layers`: the model's `tuner_layers`,
    made once by the caller (else walked here)."""
    layers = tuner_layers(model) if layers is None else layers
    with torch.autocast("cuda", dtype=torch.bfloat16), uncast_inputs(layers):
        yield
