"""GRPO maths: pure tensor functions, registered by name, returning (value, metrics)."""

from .. import names
from ..names import names_check
from .advantages import ADVANTAGES, dynamic_sampling_mask
from .correction import IS_LEVELS
from .loss import ADDITIVE_METRICS, LossInputs, grpo_loss
from .losses import AGGREGATIONS, KL_ESTIMATORS, AggNorm, clipped_policy_loss
from .metrics import gen_kl_error, token_mult_prob_error

# every registry holds exactly the names the spec lets a config choose
names_check("advantages of workers/grpo/advantages.py", ADVANTAGES.names(), names.ADVANTAGES)
names_check("loss aggregations of workers/grpo/losses.py", AGGREGATIONS.names(), names.LOSS_AGGS)
names_check("KL estimators of workers/grpo/losses.py", KL_ESTIMATORS.names(), names.KL_ESTIMATORS)
names_check("IS levels of workers/grpo/correction.py", IS_LEVELS.names(), names.IS_LEVELS)

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
