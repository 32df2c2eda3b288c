"""Policy loss, aggregations, KL and rollout-correction weights on hand-built tensors."""

import math

import pytest
import torch

from workers.grpo import (
    AGGREGATIONS,
    IS_LEVELS,
    KL_ESTIMATORS,
    AggNorm,
    LossInputs,
    clipped_policy_loss,
    grpo_loss,
    token_mult_prob_error,
)
from workers.spec import AlgorithmSpec

D = torch.float64
LOG = math.log


def t(x):
    return torch.tensor(x, dtype=D)


def test_clip_higher_is_asymmetric():
    # One sequence, 4 tokens, ratios ρ = 1.5, 0.5, 1.1, 1.0; ε_lo = 0.2, ε_hi = 0.28.
    lp_old = t([[0.0, 0.0, 0.0, 0.0]])
    lp = t([[LOG(1.5), LOG(0.5), LOG(1.1), 0.0]])
    mask = t([[1.0, 1.0, 1.0, 1.0]])
    # A = +1: loss = max(−ρ, −clip(ρ)) → −min(ρ, clip(ρ)) = −1.28, −0.5, −1.1, −1.0
    loss, m = clipped_policy_loss(lp, lp_old, t([1.0]), mask, 0.2, 0.28)
    torch.testing.assert_close(loss, t([[-1.28, -0.5, -1.1, -1.0]]))
    assert m["clip_frac"] == pytest.approx(0.25) and m["clip_frac/high"] == pytest.approx(0.25)
    # A = −1: loss = max(ρ, clip(ρ)) = 1.5, 0.8, 1.1, 1.0 (0.5 is lifted to 1 − 0.2)
    loss, m = clipped_policy_loss(lp, lp_old, t([-1.0]), mask, 0.2, 0.28)
    torch.testing.assert_close(loss, t([[1.5, 0.8, 1.1, 1.0]]))
    assert m["clip_frac/low"] == pytest.approx(0.25) and m["clip_frac/high"] == 0.0


def test_clipped_tokens_have_no_gradient():
    lp = t([[LOG(1.5), LOG(1.1)]]).requires_grad_()
    loss, _ = clipped_policy_loss(lp, t([[0.0, 0.0]]), t([1.0]), t([[1.0, 1.0]]), 0.2, 0.28)
    loss.sum().backward()
    # d(−ρ)/d lp = −ρ for the unclipped token; 0 for the clipped one.
    torch.testing.assert_close(lp.grad, t([[0.0, -1.1]]))


VALUES = t([[1.0, 2.0, 3.0], [4.0, 0.0, 0.0]])  # [B=2, T=3]
MASK = t([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]])


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("token_mean", 10.0 / 4),  # (1+2+3+4) / 4 tokens
        ("seq_mean_token_mean", (2.0 + 4.0) / 2),  # seq means 2 and 4
        ("seq_mean_token_sum_norm", 10.0 / (2 * 5)),  # Σ / (B · L_max), L_max = 5
    ],
)
def test_aggregations(name, expected):
    out = AGGREGATIONS.get(name)(VALUES, MASK, AggNorm.of(MASK, max_len=5))
    assert out.item() == pytest.approx(expected)


@pytest.mark.parametrize("name", ["token_mean", "seq_mean_token_mean", "seq_mean_token_sum_norm"])
def test_micro_batches_sum_to_full_batch(name):
    agg, norm = AGGREGATIONS.get(name), AggNorm.of(MASK, max_len=5)
    parts = agg(VALUES[:1], MASK[:1], norm) + agg(VALUES[1:], MASK[1:], norm)
    assert parts.item() == pytest.approx(agg(VALUES, MASK, norm).item())


def test_kl_estimators():
    lp, ref = t([LOG(0.5), LOG(0.25)]), t([LOG(0.25), LOG(0.5)])
    # k1 = lp − ref = ±log 2
    torch.testing.assert_close(KL_ESTIMATORS.get("k1")(lp, ref), t([LOG(2), -LOG(2)]))
    # k3 = e^d − d − 1, d = ref − lp = −log2, +log2 → 0.5 + log2 − 1, 2 − log2 − 1
    k3 = t([0.5 + LOG(2) - 1, 1 - LOG(2)])
    torch.testing.assert_close(KL_ESTIMATORS.get("k3")(lp, ref), k3)
    assert (KL_ESTIMATORS.get("k3")(lp, ref) >= 0).all()


def test_token_is_truncate_and_mask():
    # w = π_old / π_roll = 3, 1, 0.25 on three tokens.
    lp_old = t([[LOG(0.6), LOG(0.5), LOG(0.1)]])
    lp_roll = t([[LOG(0.2), LOG(0.5), LOG(0.4)]])
    mask = t([[1.0, 1.0, 1.0]])
    w, m = IS_LEVELS.get("token")(lp_old, lp_roll, mask, "truncate", 2.0, 0.5)
    torch.testing.assert_close(w, t([[2.0, 1.0, 0.25]]))  # TIS: min(w, 2)
    assert m["is_weight/mean"] == pytest.approx(3.25 / 3)
    w, m = IS_LEVELS.get("token")(lp_old, lp_roll, mask, "mask", 2.0, 0.5)
    torch.testing.assert_close(w, t([[0.0, 1.0, 0.0]]))  # outside [0.5, 2] → 0
    assert m["is_weight/bounded_frac"] == pytest.approx(2 / 3)


def test_sequence_is_uses_the_product():
    lp_old = t([[LOG(0.6), LOG(0.5)], [LOG(0.5), 0.0]])
    lp_roll = t([[LOG(0.3), LOG(0.5)], [LOG(0.4), 0.0]])
    mask = t([[1.0, 1.0], [1.0, 0.0]])
    # seq 0: 2 · 1 = 2 → truncated at 1.5; seq 1: 1.25 (the padded position is ignored)
    w, _ = IS_LEVELS.get("sequence")(lp_old, lp_roll, mask, "truncate", 1.5, 0.5)
    torch.testing.assert_close(w, t([[1.5, 1.5], [1.25, 0.0]]))


def test_token_mult_prob_error():
    # |Δ| = log 2 and 0 on response tokens; the padded token is ignored → (2 + 1) / 2
    lp_roll = t([[LOG(0.5), LOG(0.3), 5.0]])
    lp_tr = t([[LOG(0.25), LOG(0.3), 0.0]])
    assert token_mult_prob_error(lp_roll, lp_tr, t([[1.0, 1.0, 0.0]])) == pytest.approx(1.5)


def _inputs(**kw):
    base = dict(
        lp=t([[LOG(0.5), LOG(0.5)]]).requires_grad_(),
        lp_roll=t([[LOG(0.25), LOG(0.5)]]),
        advantages=t([1.0]),
        mask=t([[1.0, 1.0]]),
    )
    base.update(kw)
    return LossInputs(**base)


def test_bypass_mode_ratios_against_the_engine():
    # ρ = 0.5/0.25 = 2 → clipped to 1.28, and 1; token_mean of −1.28, −1 = −1.14.
    loss, m = grpo_loss(_inputs(), AlgorithmSpec())
    assert loss.item() == pytest.approx(-1.14)
    # Trainer (lp) vs engine: exp(log 2) = 2 and 1 → 1.5
    assert m["token_mult_prob_error"] == pytest.approx(1.5)
    assert m["is_weight/mean"] == pytest.approx(1.0)


def test_decoupled_mode_weights_tokens():
    algo = AlgorithmSpec(bypass_mode=False, rollout_is="token", rollout_is_threshold=1.5)
    inp = _inputs(lp_old=t([[LOG(0.5), LOG(0.5)]]))
    # ρ = 1 both; w = 2 → 1.5 (TIS) and 1 → loss = mean(−1.5, −1) = −1.25
    loss, m = grpo_loss(inp, algo)
    assert loss.item() == pytest.approx(-1.25)
    assert m["is_weight/mean"] == pytest.approx(1.25)
    with pytest.raises(ValueError, match="lp_old"):
        grpo_loss(_inputs(), algo)


def test_kl_term_and_version_mask():
    algo = AlgorithmSpec(kl_coef=0.1, kl_estimator="k1")
    inp = _inputs(lp_ref=t([[LOG(0.25), LOG(0.5)]]), same_version=t([[0.0, 1.0]]))
    loss, m = grpo_loss(inp, algo)
    # policy −1.14; k1 = log 2, 0 → token mean log2/2; total −1.14 + 0.1 · 0.34657
    assert m["kl"] == pytest.approx(LOG(2) / 2)
    assert loss.item() == pytest.approx(-1.14 + 0.1 * LOG(2) / 2)
    # only the second token shares the trainer's version: error exp(0) = 1
    assert m["token_mult_prob_error"] == pytest.approx(1.0)
