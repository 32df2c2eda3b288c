"""Response-length metrics: a reasoning task's lengths are heavy-tailed, so the mean alone
hides what decides a step's time (the longest chains) and what the length limit cuts."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence


def length_metrics(lengths: Sequence[int], truncated: Sequence[bool]) -> dict[str, float]:
    """mean, std (population), p90 (nearest rank), max, and the share of samples that ran
    into max_new_tokens; `truncated[i]` says whether sample i did."""
    if not lengths:
        return {}
    ordered = sorted(lengths)
    p90 = ordered[max(math.ceil(0.9 * len(ordered)) - 1, 0)]
    return {
        "response_length/mean": statistics.fmean(lengths),
        "response_length/std": statistics.pstdev(lengths),
        "response_length/p90": float(p90),
        "response_length/max": float(ordered[-1]),
        "response_length/truncated_frac": statistics.fmean(map(float, truncated)),
    }
