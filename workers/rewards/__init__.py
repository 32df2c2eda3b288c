"""Rewards: built-in verifiers registered by name, the math_verify child process, the
reward-service client, and the scorer that sums them. A config can only *name* one of these
(or give a service URL): nothing in a spec makes a worker import or evaluate code."""

from .base import RewardError, SampleScore, ScoreItem, TermScore
from .scorer import TERMS, Scorer, make_scorer
from .service import RewardServiceError
from .verifiers import ROLES, VERIFIERS, overlong_penalty_value, think_structure

__all__ = [
    "ROLES",
    "TERMS",
    "VERIFIERS",
    "RewardError",
    "RewardServiceError",
    "SampleScore",
    "ScoreItem",
    "Scorer",
    "TermScore",
    "make_scorer",
    "overlong_penalty_value",
    "think_structure",
]
