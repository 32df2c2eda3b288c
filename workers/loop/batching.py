"""From scored groups to training samples: advantages, dynamic sampling."""

from __future__ import annotations

import torch

from ..grpo import ADVANTAGES, dynamic_sampling_mask
from ..names import HealthMetric
from ..policy import TrainSample
from ..spec import AlgorithmSpec
from .types import ScoredGroup

ZERO_VARIANCE: HealthMetric = "groups/zero_variance_frac"


def groups_to_samples(
    groups: list[ScoredGroup], algo: AlgorithmSpec
) -> tuple[list[TrainSample], list[list[float]], dict[str, float]]:
    """Returns the samples to train on, the advantages of every group (for the sample
    inspector) and metrics."""
    if not groups:
        return [], [], {}
    rewards = torch.tensor([g.rewards for g in groups], dtype=torch.float64)  # [N, G]
    adv, metrics = ADVANTAGES.get(algo.advantage)(rewards, eps=algo.advantage_eps)
    differ, ds = dynamic_sampling_mask(rewards)
    # groups whose rewards are all equal carry no learning signal (the alarm
    # zero_variance_groups); dynamic sampling drops them
    metrics[ZERO_VARIANCE] = ds["dynamic_sampling/dropped_frac"]
    keep = torch.ones(len(groups), dtype=torch.bool)
    if algo.dynamic_sampling:
        keep = differ
        metrics.update(ds)
    samples = []
    for g, group in enumerate(groups):
        if not keep[g]:
            continue
        for s, sample in enumerate(group.result.samples):
            samples.append(
                TrainSample(
                    group.result.prompt_ids,
                    sample.token_ids,
                    sample.logprobs,
                    sample.versions,
                    float(adv[g, s]),
                    sample.loss_mask,
                )
            )
    return samples, adv.tolist(), metrics
