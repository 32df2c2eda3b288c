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

from workers.spec import spec_errors, spec_json_schema, stored_spec
from workers.spec_limits import DEFAULT_LIMITS, LIMITS

# the keys whose value is not a plain number: how to write n of it
SIZED = {
    "reward.functions": lambda n: [{"name": "exact_match", "label": f"t{i}"} for i in range(n)],
    "rollout.stop": lambda n: [f"s{i}" for i in range(n)],
    "lora.target_modules": lambda n: [f"m{i}" for i in range(n)],
    "data.chat_template_kwargs": lambda n: {f"k{i}": i for i in range(n)},
    "data.system_prompt": lambda n: "x" * n,
}
BACKEND = {"rollout.max_loras": "vllm", "rollout.max_cpu_loras": "trtllm",
           "rollout.cpu_kvcache_space_gib": "vllm"}  # fmt: skip


def _at(key: str, n: int) -> dict:
    """A spec with `key` (a limit's dotted path) holding n (items, characters)."""
    spec: dict = {}
    node = spec
    *parents, leaf = key.split(".")
    for part in parents:
        node = node.setdefault(part, {})
    node[leaf] = SIZED[key](n) if key in SIZED else n
    if key in BACKEND:
        spec["rollout"]["backend"] = BACKEND[key]
    return spec


def test_the_defaults_are_in_force_here():
    assert LIMITS == DEFAULT_LIMITS  # the suite runs without PADDOCK_SPEC_LIMITS


@pytest.mark.parametrize("key", sorted(k for k in DEFAULT_LIMITS if "*" not in k))
def test_every_size_has_an_upper_bound(key):
    limit = LIMITS[key]
    assert spec_errors(_at(key, limit)) == []
    over = limit + 2 if key == "model.tiny.hidden_size" else limit + 1  # it must be even
    errors = spec_errors(_at(key, over))
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
        ({"rollout": {"stop": ["x", "x" * 257]}}, "rollout.stop.1"),
        ({"lora": {"target_modules": ["q_proj", "q" * 201]}}, "lora.target_modules.1"),
        ({"reward": {"functions": [{"name": "format_regex", "pattern": "a" * 2001}]}},
         "reward.functions.0.pattern"),
        ({"reward": {"functions": [{"name": "overlong_penalty", "buffer": 10**9,
                                           "max_new_tokens": 10**9}]}},
         "reward.functions.0.buffer"),
        ({"reward": {"functions": [{"name": "service", "url": "http://x/" + "a" * 2000}]}},
         "reward.functions.0.url"),
        ({"data": {"system_prompt": "x" * 100_001}}, "data.system_prompt"),
        ({"data": {"chat_template_kwargs": {f"k{i}": i for i in range(33)}}},
         "data.chat_template_kwargs"),
    ],
)  # fmt: skip
def test_oversize_values_fail_naming_the_field(spec, field):
    assert [e["field"] for e in spec_errors(spec)] == [field]
    # a spec stored before a bound was lowered still reads on the platform (dispatch, quotas);
    # its job validates it as written and fails naming the field
    stored_spec(spec)


def test_a_stored_spec_with_headers_secret_reads_and_its_job_says_what_to_do():
    term = {"name": "service", "url": "http://x/", "headers_secret": "RAY_AUTH_TOKEN"}
    assert stored_spec({"reward": {"functions": [term]}}).secret_names() == []
    (error,) = spec_errors({"reward": {"functions": [term]}})
    assert error["field"] == "reward.functions.0.headers_secret"
    assert "secret: NAME" in error["message"] and "paddock secrets set" in error["message"]


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
