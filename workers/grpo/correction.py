"""Rollout correction: importance weights w = π_old / π_rollout between trainer and engine.

The engine and the trainer never agree exactly (kernels, precision, sampling code); in async
training π_rollout is also an older adapter. Each token's loss is multiplied by w (no grad).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from .registry import Registry

Metrics = dict[str, float]
IsFn = Callable[..., tuple[torch.Tensor, Metrics]]
IS_LEVELS: Registry[IsFn] = Registry("rollout_is level")


def _bound(
    w: torch.Tensor, mode: str, high: float, low: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Returns (bounded weights, bool tensor of entries the bound changed)."""
    if mode == "truncate":  # TIS: min(w, C)
        return w.clamp(max=high), w > high
    if mode == "mask":  # IcePop / MIS: zero outside [low, high]
        outside = (w < low) | (w > high)
        return torch.where(outside, torch.zeros_like(w), w), outside
    raise ValueError(f"unknown rollout_is_mode {mode!r}; known: mask, truncate")


@IS_LEVELS.register("none")
def is_none(lp_old, lp_roll, mask, mode="truncate", high=2.0, low=0.5):
    return torch.ones_like(lp_old), {}


@IS_LEVELS.register("token")
def is_token(
    lp_old: torch.Tensor,  # [B, T]
    lp_roll: torch.Tensor,  # [B, T]
    mask: torch.Tensor,  # [B, T]
    mode: str = "truncate",
    high: float = 2.0,
    low: float = 0.5,
) -> tuple[torch.Tensor, Metrics]:
    """Per-token w_t = exp(lp_old − lp_roll), bounded per token."""
    w = torch.exp(lp_old - lp_roll) * mask  # [B, T]
    bounded, hit = _bound(w, mode, high, low)
    n = mask.sum().clamp(min=1.0)
    return bounded * mask, {
        "is_weight/mean": ((bounded * mask).sum() / n).item(),
        "is_weight/bounded_frac": ((hit.to(mask.dtype) * mask).sum() / n).item(),
    }


@IS_LEVELS.register("sequence")
def is_sequence(
    lp_old: torch.Tensor,
    lp_roll: torch.Tensor,
    mask: torch.Tensor,
    mode: str = "truncate",
    high: float = 2.0,
    low: float = 0.5,
) -> tuple[torch.Tensor, Metrics]:
    """One weight per sequence, the product Π_t w_t = exp(Σ_t (lp_old − lp_roll)), bounded,
    then broadcast to the sequence's tokens."""
    log_w = ((lp_old - lp_roll) * mask).sum(dim=1)  # [B]
    w = torch.exp(log_w)
    bounded, hit = _bound(w, mode, high, low)  # [B]
    return bounded.unsqueeze(1) * mask, {
        "is_weight/mean": bounded.mean().item(),
        "is_weight/bounded_frac": hit.float().mean().item(),
    }
