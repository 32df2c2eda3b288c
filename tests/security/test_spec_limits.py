"""Sizes in a spec (docs/security.md, "Limits"): every size that costs a cluster memory or
time has an upper bound in the schema, named in the error with the setting that raises it;
and the web tier reads a URL with a parser, in bounded time whatever its length."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from workers.spec import DEFAULT_LIMITS, LIMITS, spec_errors, spec_json_schema


def _at(key: str, value: int) -> dict:
    """A spec with `key` (a limit's dotted path) at `value`."""
    if key == "reward.functions":
        return {"reward": {"functions": [{"name": "exact_match", "label": f"t{i}"}
                                         for i in range(value)]}}  # fmt: skip
    spec: dict = {}
    node = spec
    *parents, leaf = key.split(".")
    for part in parents:
        node = node.setdefault(part, {})
    node[leaf] = value
    return spec


def test_the_defaults_are_in_force_here():
    assert LIMITS == DEFAULT_LIMITS  # the suite runs without PADDOCK_SPEC_LIMITS


@pytest.mark.parametrize("key", sorted(DEFAULT_LIMITS))
def test_every_size_has_an_upper_bound(key):
    limit = LIMITS[key]
    assert spec_errors(_at(key, limit)) == []
    errors = spec_errors(_at(key, limit + 1))
    assert [e["field"] for e in errors] == [key]
    assert "PADDOCK_SPEC_LIMITS" in errors[0]["message"]


def test_the_bounds_are_in_the_schema():
    schema = spec_json_schema()
    rollout = schema["$defs"]["TorchRolloutSpec"]["properties"]
    assert rollout["max_new_tokens"]["maximum"] == LIMITS["rollout.max_new_tokens"]
    assert schema["$defs"]["LoraSpec"]["properties"]["r"]["maximum"] == LIMITS["lora.r"]


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"rollout": {"max_new_tokens": 10**9}}, "rollout.max_new_tokens"),
        ({"algorithm": {"num_generations": 10**6}}, "algorithm.num_generations"),
        ({"train": {"prompts_per_step": 10**6}}, "train.prompts_per_step"),
        ({"lora": {"r": 10**6}}, "lora.r"),
        ({"rollout": {"stop": ["x"] * 33}}, "rollout.stop"),
        ({"rollout": {"stop": ["x" * 257]}}, "rollout.stop.0"),
        ({"lora": {"target_modules": ["q"] * 65}}, "lora.target_modules"),
        ({"reward": {"functions": [{"name": "format_regex", "pattern": "a" * 2001}]}},
         "reward.functions.0.pattern"),
        ({"reward": {"functions": [{"name": "overlong_penalty", "buffer": 10**9}]}},
         "reward.functions.0.buffer"),
        ({"data": {"system_prompt": "x" * 100_001}}, "data.system_prompt"),
    ],
)  # fmt: skip
def test_oversize_values_fail_naming_the_field(spec, field):
    assert [e["field"] for e in spec_errors(spec)] == [field]


def test_an_operator_raises_a_limit_for_the_platform_and_its_jobs():
    probe = (
        "import json, workers.spec as s\n"
        "print(json.dumps([s.spec_errors({'rollout': {'max_new_tokens': n}}) "
        "for n in (40000, 70000)]))"
    )
    env = {**os.environ, "PADDOCK_SPEC_LIMITS": "rollout.max_new_tokens=65536"}
    out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True,
                         check=True)  # fmt: skip
    raised, over = json.loads(out.stdout)
    assert raised == [] and [e["field"] for e in over] == ["rollout.max_new_tokens"]
    env["PADDOCK_SPEC_LIMITS"] = "rollout.max_new_token=65536"  # a typo stops the start
    bad = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True)
    assert bad.returncode != 0 and "'rollout.max_new_token' is not a limit" in bad.stderr


def test_a_pathological_url_is_read_in_bounded_time():
    # the regular expression this replaced took seconds on 40k characters (quadratic)
    hostile = "http://" + "a" * 40_000 + " "
    t0 = time.perf_counter()
    for url in (hostile, hostile.strip() + "\n", "http://" + "a" * 1990 + "!"):
        spec_errors({"reward": {"functions": [{"name": "service", "url": url}]}})
    assert time.perf_counter() - t0 < 0.5
