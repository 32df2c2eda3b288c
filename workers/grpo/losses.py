"""Per-token policy losses, their aggregations, and KL estimators.

Shapes: B sequences × T response positions; `mask` is 1.0 on response tokens, 0.0 on padding.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from .registry import Registry

Metrics = dict[str, float]


@dataclass(frozen=True)
class AggNorm:
    """Denominators of the *whole* batch. Micro-batches divide by these rather than by their
    own counts, so accumulating micro-batch gradients equals one full-batch step."""

    num_tokens: float  # Σ mask over the full batch
    num_seqs: float  # B of the full batch
    max_len: float  # L_max: the response length budget (max_new_tokens)

    @staticmethod
    def of(mask: torch.Tensor, max_len: int | None = None) -> AggNorm:
        return AggNorm(
            num_tokens=float(mask.sum().item()),
            num_seqs=float(mask.shape[0]),
            max_len=float(max_len if max_len is not None else mask.shape[1]),
        )


AggFn = Callable[[torch.Tensor, torch.Tensor, AggNorm], torch.Tensor]
AGGREGATIONS: Registry[AggFn] = Registry("loss aggregation")


@AGGREGATIONS.register("token_mean")
def token_mean(values: torch.Tensor, mask: torch.Tensor, norm: AggNorm) -> torch.Tensor:
    """Σ l·m / Σ m (DAPO): every token weighs the same, long answers weigh more."""
    return (values * mask).sum() / max(norm.num_tokens, 1.0)


@AGGREGATIONS.register("seq_mean_token_mean")
def seq_mean_token_mean(values: torch.Tensor, mask: torch.Tensor, norm: AggNorm) -> torch.Tensor:
    """Mean over sequences of each sequence's token mean (original GRPO)."""
    per_seq = (values * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1.0)  # [B]
    return per_seq.sum() / max(norm.num_seqs, 1.0)


@AGGREGATIONS.register("seq_mean_token_sum_norm")
def seq_mean_token_sum_norm(
    values: torch.Tensor, mask: torch.Tensor, norm: AggNorm
) -> torch.Tensor:
    """Σ l·m / (B · L_max) (Dr.GRPO): a constant denominator, so no length bias."""
    return (values * mask).sum() / max(norm.num_seqs * norm.max_len, 1.0)


def clipped_policy_loss(
    lp: torch.Tensor,  # [B, T] trainer logprobs, with grad
    lp_old: torch.Tensor,  # [B, T] π_old logprobs, no grad
    advantages: torch.Tensor,  # [B] one advantage per sequence
    mask: torch.Tensor,  # [B, T]
    clip_eps_low: float,
    clip_eps_high: float,
) -> tuple[torch.Tensor, Metrics]:
    """Per-token max(−A·ρ, −A·clip(ρ, 1−ε_lo, 1+ε_hi)), ρ = exp(lp − lp_old). Returns the
    unaggregated `[B, T]` loss and clip fractions over response tokens."""
    ratio = torch.exp(lp - lp_old)  # [B, T]
    adv = advantages.unsqueeze(1)  # [B, 1]
    unclipped = -adv * ratio
    clipped = -adv * ratio.clamp(1.0 - clip_eps_low, 1.0 + clip_eps_high)
    loss = torch.maximum(unclipped, clipped)  # [B, T]
    with torch.no_grad():
        n = mask.sum().clamp(min=1.0)
        # A token is clipped when the clipped branch is the one that binds (and differs).
        is_clipped = (clipped > unclipped).to(mask.dtype) * mask
        low = (ratio < 1.0 - clip_eps_low).to(mask.dtype) * (adv < 0) * is_clipped
        high = (ratio > 1.0 + clip_eps_high).to(mask.dtype) * (adv > 0) * is_clipped
        metrics = {
            "clip_frac": (is_clipped.sum() / n).item(),
            "clip_frac/low": (low.sum() / n).item(),
            "clip_frac/high": (high.sum() / n).item(),
            "ratio/mean": ((ratio * mask).sum() / n).item(),
        }
    return loss, metrics


KlFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
KL_ESTIMATORS: Registry[KlFn] = Registry("kl estimator")


@KL_ESTIMATORS.register("k1")
def kl_k1(lp: torch.Tensor, lp_ref: torch.Tensor) -> torch.Tensor:
    """lp − lp_ref: unbiased, high variance, can be negative per token."""
    return lp - lp_ref


@KL_ESTIMATORS.register("k3")
def kl_k3(lp: torch.Tensor, lp_ref: torch.Tensor) -> torch.Tensor:
    """exp(lp_ref − lp) − (lp_ref − lp) − 1: unbiased for KL(π‖ref), always ≥ 0."""
    d = lp_ref - lp
    return torch.exp(d) - d - 1.0
