"""Activation checkpointing of decoder layers (train.activation_checkpointing).

A checkpointed layer keeps only its inputs for backward and runs its forward again there, so
training holds one layer's activations at a time instead of every layer's: on the
Llama-3.1-8B shape at 16×1024 tokens a micro-batch, the difference between running out of an
H200's memory and fitting in it (docs/performance.md).

The layer's own `forward` is replaced on the instance, not the module wrapped: parameter
names (and so the adapter's file keys) stay the same, FSDP's hooks stay around the call, and
under `train.compile` (which compiles each layer's call) the checkpoint is traced into the
compiled graph. Every layer gets the same bound function, so one compiled graph still serves
them all.
"""

from __future__ import annotations

import types

import torch
from torch.utils.checkpoint import checkpoint


def _checkpointed_forward(self: torch.nn.Module, *args, **kwargs):
    """The class's forward under a non-reentrant checkpoint when it builds a graph for
    backward (training, grad enabled); as it is otherwise (no-grad and eval forwards)."""
    forward = type(self).forward
    if self.training and torch.is_grad_enabled():
        # non-reentrant: kwargs pass through, inputs need not require grad (the first
        # layer's input is an embedding of a frozen table), autocast is restored in the
        # recompute, and so is the RNG (dropout draws the same mask twice)
        return checkpoint(forward, self, *args, use_reentrant=False, **kwargs)
    return forward(self, *args, **kwargs)


def checkpoint_layers(layers: torch.nn.ModuleList) -> None:
    """Checkpoint each of `layers` (a model body's decoder layers) from now on."""
    for layer in layers:
        layer.forward = types.MethodType(_checkpointed_forward, layer)


def is_checkpointed(layer: torch.nn.Module) -> bool:
    fwd = layer.__dict__.get("forward")
    return isinstance(fwd, types.MethodType) and fwd.__func__ is _checkpointed_forward
