"""The GRPO objective assembled from the registered pieces."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..spec import AlgorithmSpec
from .correction import IS_LEVELS
from .losses import AGGREGATIONS, KL_ESTIMATORS, AggNorm, clipped_policy_loss
from .metrics import gen_kl_error, masked_mean, token_mult_prob_error

# Metrics that are additive over micro-batches (each is already divided by full-batch
# denominators); every other metric is a token-weighted mean.
ADDITIVE_METRICS = ("loss/total", "loss/policy", "loss/kl")


@dataclass
class LossInputs:
    lp: torch.Tensor  # [B, T] trainer logprobs of the sampled tokens, with grad
    lp_roll: torch.Tensor  # [B, T] the engine's logprobs (after temperature)
    advantages: torch.Tensor  # [B]
    mask: torch.Tensor  # [B, T] 1.0 on response tokens
    lp_old: torch.Tensor | None = None  # [B, T] trainer π_old; None in bypass mode
    lp_ref: torch.Tensor | None = None  # [B, T] base model (adapter disabled); for KL
    entropy: torch.Tensor | None = None  # [B, T] trainer entropy per position
    # [B, T] 1.0 where the token came from the adapter version the trainer holds now: only
    # those tokens compare like with like in token_mult_prob_error here (the executor adds
    # the older ones from a forward under their own version: policy/version_check.py).
    same_version: torch.Tensor | None = None


def grpo_loss(
    inp: LossInputs, algo: AlgorithmSpec, norm: AggNorm | None = None
) -> tuple[torch.Tensor, dict[str, float]]:
    """Scalar loss of one (micro-)batch and its metrics. `norm` holds full-batch denominators
    (defaults to this batch's own)."""
    mask = inp.mask
    norm = norm or AggNorm.of(mask)
    if algo.bypass_mode:
        # π_old := π_rollout; the trainer's view of the same tokens is this forward itself.
        lp_old, lp_trainer = inp.lp_roll, inp.lp.detach()
    else:
        if inp.lp_old is None:
            raise ValueError("bypass_mode is false but no lp_old (π_old forward) was given")
        lp_old = lp_trainer = inp.lp_old
    per_token, metrics = clipped_policy_loss(
        inp.lp, lp_old, inp.advantages, mask, algo.clip_eps_low, algo.clip_eps_high
    )
    if not algo.bypass_mode:
        low = algo.rollout_is_threshold_low or 1.0 / algo.rollout_is_threshold
        w, is_metrics = IS_LEVELS.get(algo.rollout_is)(
            lp_old, inp.lp_roll, mask, algo.rollout_is_mode, algo.rollout_is_threshold, low
        )
        per_token = per_token * w.detach()
        metrics.update(is_metrics)
    agg = AGGREGATIONS.get(algo.loss_agg)
    policy = agg(per_token, mask, norm)
    total = policy
    metrics["loss/policy"] = policy.item()
    if algo.kl_coef > 0:
        if inp.lp_ref is None:
            raise ValueError("kl_coef > 0 but no lp_ref (base-model forward) was given")
        kl_tok = KL_ESTIMATORS.get(algo.kl_estimator)(inp.lp, inp.lp_ref)  # [B, T]
        kl = agg(kl_tok, mask, norm)
        total = total + algo.kl_coef * kl
        metrics["loss/kl"] = kl.item()
        metrics["kl"] = masked_mean(kl_tok.detach(), mask)
    metrics["loss/total"] = total.item()
    if inp.entropy is not None:
        metrics["entropy"] = masked_mean(inp.entropy, mask)
    metrics.setdefault("is_weight/mean", masked_mean(torch.exp(lp_old - inp.lp_roll), mask))
    same = mask if inp.same_version is None else mask * inp.same_version
    if same.sum().item() > 0:
        metrics["token_mult_prob_error"] = token_mult_prob_error(inp.lp_roll, lp_trainer, same)
        metrics["gen_kl_error"] = gen_kl_error(inp.lp_roll, lp_trainer, same)
    return total, metrics
