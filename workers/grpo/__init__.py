"""GRPO maths: pure tensor functions, registered by name, returning (value, metrics)."""

from .advantages import ADVANTAGES, dynamic_sampling_mask
from .correction import IS_LEVELS
from .loss import ADDITIVE_METRICS, LossInputs, grpo_loss
from .losses import AGGREGATIONS, KL_ESTIMATORS, AggNorm, clipped_policy_loss
from .metrics import gen_kl_error, token_mult_prob_error

__all__ = [
    "ADDITIVE_METRICS",
    "ADVANTAGES",
    "AGGREGATIONS",
    "IS_LEVELS",
    "KL_ESTIMATORS",
    "AggNorm",
    "LossInputs",
    "clipped_policy_loss",
    "dynamic_sampling_mask",
    "gen_kl_error",
    "grpo_loss",
    "token_mult_prob_error",
]
