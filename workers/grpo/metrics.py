"""Health metrics comparing the engine's logprobs with the trainer's."""

from __future__ import annotations

import torch


def token_mult_prob_error(
    lp_roll: torch.Tensor, lp_trainer: torch.Tensor, mask: torch.Tensor
) -> float:
    """Σ_t m·exp(|lp_roll − lp_trainer|) / Σ_t m: 1.0 when engine and trainer agree; above
    ~1.05 worth a look. `lp_trainer` must be a trainer forward of the *same adapter version*
    that generated the tokens (callers mask out tokens of other versions), never the engine's
    logprobs themselves. NaN when no token qualifies."""
    n = mask.sum()
    if n.item() == 0:
        return float("nan")
    return ((torch.exp((lp_roll - lp_trainer).abs()) * mask).sum() / n).item()


def masked_mean(values: torch.Tensor, mask: torch.Tensor) -> float:
    return ((values * mask).sum() / mask.sum().clamp(min=1.0)).item()


def gen_kl_error(lp_roll: torch.Tensor, lp_trainer: torch.Tensor, mask: torch.Tensor) -> float:
    """k3 estimate of KL(π_rollout ‖ π_trainer) over the sampled tokens."""
    d = lp_trainer - lp_roll
    return masked_mean(torch.exp(d) - d - 1.0, mask)
