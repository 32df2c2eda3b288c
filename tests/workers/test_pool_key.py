"""The pool key (workers/pool_key.py): what runs must share to be pooled, and the reason a
run does not fit a pool, naming the setting. Pure functions: no model, no engine (that it
loads without torch, as the control plane imports it: tests/test_import_graph.py)."""

from __future__ import annotations

import json

from workers.pool_key import misfit, pool_key, trainer_key, unpoolable
from workers.spec import parse_spec


def test_runs_that_differ_only_per_run_share_a_key():
    base = parse_spec({"seed": 1})
    other = parse_spec(
        {
            "seed": 7,
            "lora": {"r": 16, "alpha": 8, "dropout": 0.1},
            "algorithm": {"advantage": "rloo", "num_generations": 4},
            "rollout": {"temperature": 0.7, "max_new_tokens": 12},
            "async": {"enabled": True, "max_staleness": 2},
            "data": {"task": "reverse"},
            "train": {"lr": 3e-4, "steps": 9, "prompts_per_step": 2},
            "resources": {"pool": "auto", "pool_weight": 3},
        }
    )
    assert pool_key(base) == pool_key(other)
    assert misfit(other, pool_key(base)) is None
    # what the platform stores and returns is JSON: the key survives the round trip
    assert misfit(other, json.loads(json.dumps(pool_key(base)))) is None


def test_a_misfit_names_each_setting_with_both_values():
    key = pool_key(parse_spec({}))
    why = misfit(parse_spec({"model": {"dtype": "bfloat16"}, "train": {"compile": True}}), key)
    assert "model.dtype is 'bfloat16', the pool's is 'auto'" in why
    assert "train.compile is True, the pool's is False" in why
    why = misfit(parse_spec({"model": {"tiny": {"hidden_size": 64}}}), key)
    assert why.startswith("model.tiny is")
    # the engine's own settings must match; another backend is named alone
    assert "rollout.max_batch_size is 64" in misfit(
        parse_spec({"rollout": {"max_batch_size": 64}}), key
    )
    why = misfit(parse_spec({"rollout": {"backend": "vllm"}}), key)
    assert why.startswith("rollout.backend is 'vllm', the pool's is 'torch':"), why


def test_the_cluster_is_the_platforms_entry():
    key = {**pool_key(parse_spec({})), "cluster": "east"}
    assert misfit(parse_spec({}), key, cluster="east") is None
    assert "cluster is 'west', the pool's is 'east'" in misfit(parse_spec({}), key, "west")


def test_settings_a_pool_cannot_host_are_refused_by_name():
    assert unpoolable(parse_spec({})) is None
    why = unpoolable(parse_spec({"resources": {"executor": "ray", "trainer_actors": 2}}))
    assert "resources.executor is 'ray'" in why and "resources.trainer_actors is 2" in why
    assert misfit(parse_spec({"resources": {"engine_process": True}}), pool_key(parse_spec({})))


def test_the_pool_key_holds_the_trainers_part():
    # what the runs of one policy share is checked at admission, as part of the pool key
    assert set(trainer_key(parse_spec({}))) <= set(pool_key(parse_spec({})))
