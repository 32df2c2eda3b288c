"""Advantages on hand-built rewards, float64."""

import math

import pytest
import torch

from workers.grpo import ADVANTAGES, dynamic_sampling_mask

R = torch.tensor([[1.0, 0.0, 0.0, 1.0], [1.0, 1.0, 1.0, 0.0]], dtype=torch.float64)  # [N=2, G=4]


def test_grpo_uses_sample_std():
    adv, _ = ADVANTAGES.get("grpo")(R, eps=0.0)
    # group 0: mean 0.5, sample std = sqrt(4 * 0.25 / 3) = 0.57735 → ±0.5 / 0.57735 = ±0.866025
    s0 = 0.5 / math.sqrt(1 / 3)
    # group 1: mean 0.75, deviations .25,.25,.25,-.75; var = (3*.0625 + .5625)/3 = .25, std .5
    expected = torch.tensor([[s0, -s0, -s0, s0], [0.5, 0.5, 0.5, -1.5]], dtype=torch.float64)
    torch.testing.assert_close(adv, expected)


def test_dr_grpo_is_centred_only():
    adv, _ = ADVANTAGES.get("dr_grpo")(R)
    expected = torch.tensor(
        [[0.5, -0.5, -0.5, 0.5], [0.25, 0.25, 0.25, -0.75]], dtype=torch.float64
    )
    torch.testing.assert_close(adv, expected)


def test_rloo_leaves_one_out():
    adv, _ = ADVANTAGES.get("rloo")(R)
    # group 0, i=0: 1 − mean(0, 0, 1) = 2/3; i=1: 0 − mean(1, 0, 1) = −2/3
    # group 1, i=0: 1 − mean(1, 1, 0) = 1/3; i=3: 0 − 1 = −1
    t = 2 / 3
    expected = torch.tensor([[t, -t, -t, t], [1 / 3, 1 / 3, 1 / 3, -1.0]], dtype=torch.float64)
    torch.testing.assert_close(adv, expected)


@pytest.mark.parametrize("name", ["grpo", "dr_grpo", "rloo"])
def test_equal_rewards_give_zero_advantage(name):
    adv, _ = ADVANTAGES.get(name)(torch.ones(3, 4, dtype=torch.float64))
    assert torch.count_nonzero(adv) == 0


def test_dynamic_sampling_drops_flat_groups():
    rewards = torch.tensor([[1.0, 1.0], [0.0, 1.0], [0.0, 0.0]], dtype=torch.float64)
    keep, metrics = dynamic_sampling_mask(rewards)
    assert keep.tolist() == [False, True, False]
    assert metrics["dynamic_sampling/dropped_groups"] == 2.0
    assert metrics["dynamic_sampling/dropped_frac"] == pytest.approx(2 / 3)


def test_unknown_name_lists_known():
    with pytest.raises(KeyError, match="known: dr_grpo, grpo, rloo"):
        ADVANTAGES.get("ppo")
