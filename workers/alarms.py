"""The alarms: the ways GRPO runs fail while they train, each one rule over the run's metric
series, defined once here (docs/alarms.md says them in words, from these constants).

A rule reads series of (step, value), steps increasing, and returns a `Finding` (what it
saw, since which step) or None. Rules are pure and smooth before they judge: a trailing
median (or mean) over `Limits.window` steps, and a condition that must hold for
`Limits.persist` smoothed points in a row up to the latest, so one noisy step neither
fires nor clears an alarm. The control plane evaluates them as a run's metrics arrive
(platform/paddock/experiments/alarms.py); anything else holding a run's series can too.

Light like spec.py: the standard library only (the control plane imports it)."""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from .names import ALARM_NAMES, AlarmName, HealthMetric, names_check

Point = tuple[int, float]  # (step, value)
Series = Sequence[Point]


@dataclass(frozen=True)
class Limits:
    """Every threshold of the rules (docs/alarms.md quotes these)."""

    window: int = 10  # steps each smoothed point covers
    persist: int = 5  # smoothed points in a row a condition must hold
    entropy_floor: float = 0.1  # entropy below this share of its first window's
    kl_limit: float = 0.1  # nats per token to the base model
    prob_error_limit: float = 1.05  # token_mult_prob_error ("above 1.05 worth a look")
    gen_kl_limit: float = 0.002  # gen_kl_error (NeMo-RL's test suites hold LoRA runs below it)
    reward_lost: float = 0.5  # share of the reward's rise lost again
    reward_noise: float = 3.0  # a rise and a fall must exceed this many standard errors
    spike_factor: float = 10.0  # grad_norm over this many times its recent median
    rank_floor: float = 0.5  # effective rank below this share of its peak
    rank_min_peak: float = 2.0  # an update of one direction cannot collapse
    zero_variance: float = 0.9  # share of groups whose rewards are all equal
    # a run whose trailing accuracy is at least this has solved its task: its groups agree
    # and its entropy is low because it knows the answers, which alarms nobody
    solved_accuracy: float = 0.95


LIMITS = Limits()


@dataclass(frozen=True)
class Finding:
    alarm: AlarmName
    since_step: int  # the first step of what it saw
    value: float  # the figure it judged, at the latest step
    message: str  # what it saw, for people


# ---------------------------------------------------------------------------------- helpers


def _finite(series: Series | None) -> list[Point]:
    return [(int(s), float(v)) for s, v in series or () if math.isfinite(v)]


def _trailing(points: list[Point], w: int, stat: Callable[[list[float]], float]) -> list[Point]:
    """stat over each window of the last `w` values, from the first full window on."""
    out = []
    for i in range(w - 1, len(points)):
        out.append((points[i][0], stat([v for _, v in points[i - w + 1 : i + 1]])))
    return out


def _held_since(points: list[Point], holds: Callable[[float], bool], lim: Limits) -> int | None:
    """The first step of the run of points up to the latest for which `holds`, when it is
    at least `lim.persist` long; None otherwise."""
    n = 0
    for _, v in reversed(points):
        if not holds(v):
            break
        n += 1
    return points[-n][0] if n >= lim.persist else None


def _pct(x: float) -> str:
    return f"{100 * x:.0f} %"


def _solved(s: Mapping[str, Series], lim: Limits) -> bool:
    """The trailing accuracy is at or above `solved_accuracy` (runs with a verifier term)."""
    acc = _finite(s.get("accuracy"))
    return (
        len(acc) >= lim.window
        and statistics.fmean(v for _, v in acc[-lim.window :]) >= lim.solved_accuracy
    )


# ------------------------------------------------------------------------------------ rules


def entropy_collapse(s: Mapping[str, Series], lim: Limits) -> Finding | None:
    """The policy's entropy fell below a tenth of where it started: sampling has become
    (nearly) deterministic, exploration stops and the reward with it. A run that has solved
    its task (accuracy at `solved_accuracy`) is sure of its answers, not collapsed."""
    pts = _finite(s.get("entropy"))
    if len(pts) < 2 * lim.window + lim.persist or _solved(s, lim):
        return None
    base = statistics.median(v for _, v in pts[: lim.window])
    if base <= 1e-9:
        return None
    smooth = _trailing(pts, lim.window, statistics.median)
    since = _held_since(smooth, lambda v: v < lim.entropy_floor * base, lim)
    if since is None:
        return None
    now = smooth[-1][1]
    return Finding("entropy_collapse", since, now,
                   f"entropy fell to {now:.3g} from {base:.3g} over the first {lim.window} "
                   f"steps ({_pct(1 - now / base)} lower): below {_pct(lim.entropy_floor)} "
                   f"of it since step {since}")  # fmt: skip


def kl_drift(s: Mapping[str, Series], lim: Limits) -> Finding | None:
    """The KL to the base model keeps growing past a limit: the adapter has walked far from
    the model it started from (the KL term is too weak for the learning rate)."""
    pts = _finite(s.get("kl"))
    if len(pts) < lim.window + lim.persist:
        return None
    smooth = _trailing(pts, lim.window, statistics.median)
    since = _held_since(smooth, lambda v: v > lim.kl_limit, lim)
    if since is None:
        return None
    now, first = smooth[-1][1], smooth[0][1]
    return Finding("kl_drift", since, now,
                   f"kl to the base model is {now:.3g} per token (it was {first:.3g} at "
                   f"first), above {lim.kl_limit:g} since step {since}")  # fmt: skip


def prob_error_drift(s: Mapping[str, Series], lim: Limits) -> Finding | None:
    """The engine's logprobs drifted from the trainer's for the same adapter version: the
    engine serves something else than the trainer trains (a stale or merged adapter, other
    sampling settings), and every importance weight is off. Judged on
    token_mult_prob_error and on gen_kl_error, each against its limit."""
    worst: Finding | None = None
    for key, limit in (("token_mult_prob_error", lim.prob_error_limit),
                       ("gen_kl_error", lim.gen_kl_limit)):  # fmt: skip
        pts = _finite(s.get(key))
        if len(pts) < lim.window + lim.persist:
            continue
        smooth = _trailing(pts, lim.window, statistics.median)
        since = _held_since(smooth, lambda v, limit=limit: v > limit, lim)
        if since is None or (worst and worst.since_step <= since):
            continue
        now = smooth[-1][1]
        worst = Finding("prob_error_drift", since, now,
                        f"{key} is {now:.4g}, above {limit:g} since step {since}: the "
                        f"engine's logprobs no longer match the trainer's")  # fmt: skip
    return worst


def reward_collapse(s: Mapping[str, Series], lim: Limits) -> Finding | None:
    """After rising, the reward fell back and lost most of its gain: something changed (a
    learning rate too high for where the run is, a collapse of the policy)."""
    pts = _finite(s.get("reward/mean"))
    if len(pts) < 3 * lim.window:
        return None
    smooth = _trailing(pts, lim.window, statistics.fmean)
    peak_i = max(range(len(smooth)), key=lambda i: smooth[i][1])
    peak_step, peak = smooth[peak_i]
    first = smooth[0][1]
    # the noise of a window's mean: a rise or a fall smaller than a few of these is chance
    se = statistics.pstdev(v for _, v in pts[-lim.window :]) / math.sqrt(lim.window)
    noise = lim.reward_noise * se
    gain = peak - first
    if gain <= noise:
        return None
    floor = peak - max(lim.reward_lost * gain, noise)
    since = _held_since(smooth[peak_i + 1 :], lambda v: v < floor, lim)
    if since is None:
        return None
    now = smooth[-1][1]
    return Finding("reward_collapse", since, now,
                   f"reward/mean fell to {now:.3g} from its peak {peak:.3g} at step "
                   f"{peak_step} (it had risen from {first:.3g}): more than "
                   f"{_pct(lim.reward_lost)} of its gain lost since step {since}")  # fmt: skip


def grad_norm_spike(s: Mapping[str, Series], lim: Limits) -> Finding | None:
    """A gradient norm many times its recent median, within the last window of steps: one
    batch pulled the adapter hard (an outlier reward, a numerical blow-up)."""
    pts = _finite(s.get("grad_norm"))
    w = lim.window
    if len(pts) <= w:
        return None
    spikes = []
    for i in range(max(w, len(pts) - w), len(pts)):
        ref = statistics.median(v for _, v in pts[i - w : i])
        if ref > 0 and pts[i][1] > lim.spike_factor * ref:
            spikes.append((pts[i][0], pts[i][1], pts[i][1] / ref, ref))
    if not spikes:
        return None
    step, value, ratio, ref = max(spikes, key=lambda x: x[2])
    more = f"; {len(spikes)} spikes since step {spikes[0][0]}" if len(spikes) > 1 else ""
    return Finding("grad_norm_spike", spikes[0][0], value,
                   f"grad_norm spiked to {value:.3g} at step {step}, {ratio:.0f}× the median "
                   f"of the {w} steps before it ({ref:.3g}){more}")  # fmt: skip


def lora_rank_collapse(s: Mapping[str, Series], lim: Limits) -> Finding | None:
    """The LoRA update's effective rank (from its singular values) fell to less than half
    its peak: the update squeezes into fewer directions than the rank gives it, which is
    how large-batch or high-rank GRPO runs have been seen to collapse."""
    pts = _finite(s.get("lora/effective_rank"))
    if len(pts) < 2 * lim.window + lim.persist:
        return None
    smooth = _trailing(pts, lim.window, statistics.median)
    peak_step, peak = max(smooth, key=lambda p: p[1])
    if peak < lim.rank_min_peak:
        return None
    since = _held_since(smooth, lambda v: v < lim.rank_floor * peak, lim)
    if since is None:
        return None
    now = smooth[-1][1]
    return Finding("lora_rank_collapse", since, now,
                   f"the LoRA update's effective rank fell to {now:.2f} from {peak:.2f} at "
                   f"step {peak_step}: below {_pct(lim.rank_floor)} of it since step "
                   f"{since}")  # fmt: skip


def zero_variance_groups(s: Mapping[str, Series], lim: Limits) -> Finding | None:
    """Nearly every group's rewards are all equal: their advantages are zero, so the steps
    teach nothing (a constant reward, a task far too hard or too easy). A run that has
    solved its task (accuracy at `solved_accuracy`) agrees because it is right."""
    pts = _finite(s.get("groups/zero_variance_frac"))
    if len(pts) < lim.window + lim.persist or _solved(s, lim):
        return None
    smooth = _trailing(pts, lim.window, statistics.fmean)
    since = _held_since(smooth, lambda v: v >= lim.zero_variance, lim)
    if since is None:
        return None
    now = smooth[-1][1]
    reward = _finite(s.get("reward/mean"))
    also = f" (reward/mean {reward[-1][1]:.3g})" if reward else ""
    return Finding("zero_variance_groups", since, now,
                   f"{_pct(now)} of groups had rewards all equal{also} since step {since}: "
                   f"zero advantage, no learning signal")  # fmt: skip


# ------------------------------------------------------------------------------- the table


@dataclass(frozen=True)
class Alarm:
    name: AlarmName
    metrics: tuple[HealthMetric, ...]  # what it reads
    rule: Callable[[Mapping[str, Series], Limits], Finding | None]

    @property
    def summary(self) -> str:
        """What it watches, in a sentence (the rule's own docstring's first)."""
        doc = " ".join((self.rule.__doc__ or "").split())
        return doc.split(": ")[0].split(". ")[0].rstrip(".") + "."


ALARMS: dict[AlarmName, Alarm] = {
    a.name: a
    for a in (
        Alarm("entropy_collapse", ("entropy", "accuracy"), entropy_collapse),
        Alarm("kl_drift", ("kl",), kl_drift),
        Alarm("prob_error_drift", ("token_mult_prob_error", "gen_kl_error"), prob_error_drift),
        Alarm("reward_collapse", ("reward/mean",), reward_collapse),
        Alarm("grad_norm_spike", ("grad_norm",), grad_norm_spike),
        Alarm("lora_rank_collapse", ("lora/effective_rank",), lora_rank_collapse),
        Alarm(
            "zero_variance_groups",
            ("groups/zero_variance_frac", "reward/mean"),
            zero_variance_groups,
        ),  # fmt: skip
    )
}
names_check("alarms of workers/alarms.py", ALARMS, ALARM_NAMES)
# every metric a rule reads is a registered one (workers/names.py: HealthMetric)
ALARM_METRICS: tuple[HealthMetric, ...] = tuple(
    dict.fromkeys(m for a in ALARMS.values() for m in a.metrics)
)


def evaluate(
    series: Mapping[str, Series], limits: Limits = LIMITS
) -> dict[AlarmName, Finding | None]:
    """Every alarm's finding on a run's series (None: quiet, or not enough steps yet)."""
    return {name: alarm.rule(series, limits) for name, alarm in ALARMS.items()}
