"""workers/alarms.py: each alarm fires on a hand-made run that shows its failure, says since
which step, and stays quiet on the demo runs (real recorded series: fixtures/demo_series/,
the health metrics of `paddock train examples/tiny-async.yaml` on torch and vLLM's CPU build
and of examples/chat-reasoning.yaml, recorded with the command in their README)."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import pytest

from workers.alarms import ALARM_METRICS, ALARMS, LIMITS, Limits, evaluate
from workers.names import ALARM_NAMES, HEALTH_METRICS

DEMOS = Path(__file__).parent / "fixtures" / "demo_series"
STEPS = 120


def _demo(name: str) -> dict[str, list[tuple[int, float]]]:
    """A recorded metrics.jsonl (health metrics only) as series."""
    series: dict[str, list[tuple[int, float]]] = {}
    for line in (DEMOS / name).read_text().splitlines():
        row = json.loads(line)
        for key, value in row.items():
            if key != "step":
                series.setdefault(key, []).append((row["step"], value))
    return series


def _noisy(values, sd: float, seed: int = 0) -> list[tuple[int, float]]:
    rng = random.Random(seed)
    return [(i + 1, v + rng.gauss(0, sd)) for i, v in enumerate(values)]


def _healthy(**replace) -> dict[str, list[tuple[int, float]]]:
    """A run that learns: reward rising and holding, entropy easing, engine and trainer
    agreeing, an even adapter, some groups of equal rewards."""
    n = STEPS
    series = {
        "reward/mean": _noisy([0.3 + 0.5 * (1 - math.exp(-i / 30)) for i in range(n)], 0.05),
        "entropy": _noisy([1.2 * math.exp(-i / 200) for i in range(n)], 0.03, 1),
        "kl": _noisy([0.002 + 0.0002 * i for i in range(n)], 0.0005, 2),
        "token_mult_prob_error": _noisy([1.002] * n, 0.0005, 3),
        "gen_kl_error": _noisy([0.0008] * n, 0.0001, 4),
        "grad_norm": [(s, abs(v)) for s, v in _noisy([0.4] * n, 0.08, 5)],
        "lora/effective_rank": _noisy([12 - 2 * (1 - math.exp(-i / 40)) for i in range(n)], 0.1),
        "groups/zero_variance_frac": _noisy([0.2 + 0.3 * i / n for i in range(n)], 0.05, 6),
        "accuracy": _noisy([0.3 + 0.5 * (1 - math.exp(-i / 30)) for i in range(n)], 0.05, 7),
    }
    series.update(replace)
    return series


def _fired(series) -> dict:
    return {name: f for name, f in evaluate(series).items() if f is not None}


def test_the_table_covers_every_alarm_and_reads_registered_metrics():
    assert tuple(ALARMS) == ALARM_NAMES
    assert set(ALARM_METRICS) <= set(HEALTH_METRICS)
    for alarm in ALARMS.values():
        assert alarm.summary.endswith(".") and len(alarm.summary) < 120


def test_a_healthy_run_is_quiet():
    assert _fired(_healthy()) == {}


@pytest.mark.parametrize(
    "demo", ["tiny-async-torch.jsonl", "tiny-async-vllm.jsonl", "chat-reasoning-torch.jsonl"]
)
def test_the_demo_runs_are_quiet(demo: str):
    series = _demo(demo)
    assert set(ALARM_METRICS) - {"kl"} <= set(series)  # the demos train without a KL term
    assert len(series["reward/mean"]) >= 80
    assert _fired(series) == {}, demo


# -------------------------------------------------------------- each failure, constructed


def test_entropy_collapse():
    n = STEPS
    entropy = _noisy([1.2 if i < 50 else 1.2 * math.exp(-(i - 50) / 6) for i in range(n)], 0.01)
    found = _fired(_healthy(entropy=[(s, max(v, 1e-4)) for s, v in entropy]))
    assert list(found) == ["entropy_collapse"]
    f = found["entropy_collapse"]
    # 1.2·e^(−(i−50)/6) < 0.12 from i ≈ 64; its trailing median of 10 a few steps later
    assert 64 <= f.since_step <= 72
    assert "entropy fell to" in f.message and f"since step {f.since_step}" in f.message


def test_kl_drift():
    kl = _noisy([0.002 * math.exp(i / 20) for i in range(STEPS)], 0.001)
    f = _fired(_healthy(kl=kl))["kl_drift"]
    # 0.002·e^(i/20) > 0.1 from i ≈ 79 (step 80); the median of 10 crosses 5 steps later
    assert 82 <= f.since_step <= 88 and f.value > LIMITS.kl_limit
    assert list(_fired(_healthy(kl=kl))) == ["kl_drift"]


def test_prob_error_drift_names_the_engine_mismatch():
    drift = _noisy([1.002 if i < 60 else 1.002 + 0.004 * (i - 60) for i in range(STEPS)], 0.002)
    found = _fired(_healthy(token_mult_prob_error=drift))
    assert list(found) == ["prob_error_drift"]
    f = found["prob_error_drift"]
    assert 72 <= f.since_step <= 82 and f.message.startswith("token_mult_prob_error is")
    # gen_kl_error alone past its limit is the same drift, said on its own figure
    gen_kl = _noisy([0.0008 if i < 70 else 0.01 for i in range(STEPS)], 0.0001)
    g = _fired(_healthy(gen_kl_error=gen_kl))["prob_error_drift"]
    assert 71 <= g.since_step <= 80 and g.message.startswith("gen_kl_error is")


def test_reward_collapse_after_it_rose():
    n = STEPS
    reward = _noisy([0.2 + 0.6 * min(i, 60) / 60 if i < 80 else 0.25 for i in range(n)], 0.05)
    found = _fired(_healthy(**{"reward/mean": reward}))
    assert list(found) == ["reward_collapse"]
    f = found["reward_collapse"]
    assert 82 <= f.since_step <= 90 and "from its peak" in f.message
    # a reward that never rose cannot collapse: flat noise stays quiet
    assert _fired(_healthy(**{"reward/mean": _noisy([0.3] * n, 0.05)})) == {}


def test_grad_norm_spike_and_it_clears():
    spiked = dict(_healthy()["grad_norm"])
    spiked[STEPS - 3] = 30.0  # a batch that pulled hard, three steps ago
    f = _fired(_healthy(grad_norm=sorted(spiked.items())))["grad_norm_spike"]
    assert f.since_step == STEPS - 3 and f.value == 30.0 and "× the median" in f.message
    old = dict(_healthy()["grad_norm"])
    old[40] = 30.0  # long ago: the window has moved past it
    assert "grad_norm_spike" not in _fired(_healthy(grad_norm=sorted(old.items())))


def test_lora_rank_collapse():
    rank = _noisy([12.0 if i < 60 else max(1.2, 12.0 - 0.6 * (i - 60)) for i in range(STEPS)], 0.1)
    found = _fired(_healthy(**{"lora/effective_rank": rank}))
    assert list(found) == ["lora_rank_collapse"]
    f = found["lora_rank_collapse"]
    # 12 − 0.6·(i − 60) < 6 from i = 70; the trailing median a few steps later
    assert 71 <= f.since_step <= 78 and f.value < 6
    # a rank-1 adapter has no directions to lose
    assert _fired(_healthy(**{"lora/effective_rank": _noisy([1.0] * STEPS, 0.01)})) == {}


def test_zero_variance_groups_says_the_reward():
    constant = [(s, 1.0) for s in range(1, STEPS + 1)]
    zero = _noisy([0.0] * STEPS, 0.0)
    found = _fired(_healthy(**{"groups/zero_variance_frac": constant, "reward/mean": zero,
                               "accuracy": zero}))  # fmt: skip
    assert list(found) == ["zero_variance_groups"]
    f = found["zero_variance_groups"]
    assert f.since_step == LIMITS.window and "100 % of groups" in f.message
    assert "reward/mean 0" in f.message


def test_a_solved_task_agrees_and_is_sure_without_alarm():
    """Every group right and the entropy gone: the run knows its answers (the chat demo's
    last hundred steps), which neither zero_variance_groups nor entropy_collapse calls."""
    n = STEPS
    solved = {
        "groups/zero_variance_frac": [(s, 1.0) for s in range(1, n + 1)],
        "entropy": _noisy([1.2 * math.exp(-i / 10) + 1e-3 for i in range(n)], 0.0),
        "accuracy": _noisy([0.99] * n, 0.005),
        "reward/mean": _noisy([0.99] * n, 0.005),
    }
    assert _fired(_healthy(**solved)) == {}
    unsolved = {**solved, "accuracy": _noisy([0.5] * n, 0.02)}
    assert set(_fired(_healthy(**unsolved))) == {"entropy_collapse", "zero_variance_groups"}


def test_too_few_steps_is_quiet_and_limits_are_the_rules_own():
    short = {k: v[:12] for k, v in _healthy(kl=_noisy([5.0] * STEPS, 0.1)).items()}
    assert _fired(short) == {}  # 12 steps: not yet a window and a streak
    strict = Limits(kl_limit=0.001)
    assert evaluate(_healthy(), strict)["kl_drift"] is not None
