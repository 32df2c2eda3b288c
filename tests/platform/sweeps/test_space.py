"""A sweep's search space: checked values, the grid's members, seeded random draws."""

import pytest

from paddock.core.errors import DomainError
from paddock.sweeps.space import grid_size, members_grid, members_random, params_parse


def test_a_grid_is_the_product_of_the_value_lists_last_key_fastest():
    params = params_parse({"lora.r": [8, 16], "train.lr": [1e-3, 3e-3], "seed": [0, 1]},
                          method="grid")  # fmt: skip
    members = members_grid(params)
    assert grid_size(params) == len(members) == 8
    assert members[0] == {"lora.r": 8, "train.lr": 1e-3, "seed": 0}
    assert members[1] == {"lora.r": 8, "train.lr": 1e-3, "seed": 1}
    assert members[-1] == {"lora.r": 16, "train.lr": 3e-3, "seed": 1}
    assert len({tuple(m.values()) for m in members}) == 8


def test_random_draws_are_the_same_for_the_same_seed_and_stay_in_range():
    params = params_parse(
        {"train.lr": {"min": 1e-4, "max": 1e-2, "log": True},
         "lora.r": {"min": 4, "max": 32, "int": True}, "lora.alpha": [8, 16]},
        method="random",
    )  # fmt: skip
    a = members_random(params, count=20, seed=7)
    assert a == members_random(params, count=20, seed=7)
    assert a != members_random(params, count=20, seed=8)
    assert all(1e-4 <= m["train.lr"] <= 1e-2 for m in a)
    assert all(isinstance(m["lora.r"], int) and 4 <= m["lora.r"] <= 32 for m in a)
    assert {m["lora.alpha"] for m in a} == {8, 16}
    # log-uniform: about as many draws below 1e-3 as above (the middle in log space)
    assert 4 <= sum(m["train.lr"] < 1e-3 for m in a) <= 16


@pytest.mark.parametrize(
    ("raw", "method", "field", "says"),
    [
        ({}, "grid", "params", "at least one key"),
        ({"lora.r": []}, "grid", "params.lora.r", "1 to 64 values"),
        ({"lora.r": [8, 8]}, "grid", "params.lora.r", "listed twice"),
        ({"lora.r": {"min": 1, "max": 8}}, "grid", "params.lora.r", "needs method random"),
        ({"train.lr": {"min": 0, "max": 1, "log": True}}, "random", "params.train.lr", "min > 0"),
        ({"train.lr": {"min": 2, "max": 1}}, "random", "params.train.lr", "below max"),
        (
            {"lora.r": {"min": 1.2, "max": 1.8, "int": True}},
            "random",
            "params.lora.r",
            "no integer",
        ),
        ({"resources.pool": ["a", "b"]}, "grid", "params.resources.pool", "the sweep's own"),
        ({"Lora.R": [1]}, "grid", "params", "not a spec key"),
        ({"lora": [{"r": 1}]}, "grid", "params.lora", "each value"),
        ({"lora": [1], "lora.r": [2]}, "grid", "params.lora", "a key inside it"),
        ({"lora.r": {"values": [1], "min": 1}}, "random", "params.lora.r", "not both"),
        ({"lora.r": {"step": 1}}, "random", "params.lora.r", "unknown entry 'step'"),
    ],
)
def test_a_bad_space_is_refused_naming_the_key(raw, method, field, says):
    with pytest.raises(DomainError) as caught:
        params_parse(raw, method=method)
    assert caught.value.field == field and says in caught.value.message
