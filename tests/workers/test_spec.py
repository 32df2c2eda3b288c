"""The run spec: validation errors name field paths; the module stays free of torch."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from workers.spec import (
    RunSpec,
    SpecError,
    apply_overrides,
    load_spec,
    spec_errors,
    spec_json_schema,
)

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_defaults_are_valid():
    spec = RunSpec.model_validate({})
    assert spec.rollout.backend == "torch"
    assert spec.async_.enabled is False
    assert spec.to_dict()["async"]["max_staleness"] == 1


def test_vllm_refuses_a_temperature_above_2_at_launch_not_at_its_first_rollout():
    vllm = {"backend": "vllm", "temperature": 2.5}
    assert spec_errors({"rollout": vllm}) == [
        {"field": "rollout.temperature", "message": "must be <= 2"}
    ]
    assert spec_errors({"rollout": {**vllm, "temperature": 2.0}}) == []
    assert spec_errors({"rollout": {**vllm, "backend": "torch"}}) == []  # torch takes any > 0


def test_error_names_the_path():
    assert spec_errors({"algorithm": {"clip_eps_high": 0}}) == [
        {"field": "algorithm.clip_eps_high", "message": "must be > 0"}
    ]


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"algorithm": {"bogus": 1}}, "algorithm.bogus"),
        ({"nonsense": {}}, "nonsense"),
        ({"rollout": {"backend": "nope"}}, "rollout.backend"),
        (
            {"rollout": {"backend": "vllm", "gpu_memory_utilization": 1.5}},
            "rollout.gpu_memory_utilization",
        ),
        (
            {"rollout": {"backend": "torch", "gpu_memory_utilization": 0.5}},
            "rollout.gpu_memory_utilization",
        ),
        ({"rollout": {"top_p": 0.9}}, "rollout.top_p"),
        ({"rollout": {"top_k": 20}}, "rollout.top_k"),
        ({"async": {"max_staleness": -1}}, "async.max_staleness"),
        ({"async": {"weight_update": "drop"}}, "async.weight_update"),
        ({"algorithm": {"rollout_is": "token"}}, "algorithm.rollout_is"),
        ({"algorithm": {"advantage": "ppo"}}, "algorithm.advantage"),
        ({"data": {"task": "jsonl"}}, "data.path"),
        (
            {"reward": {"functions": [{"name": "format_regex"}]}},
            "reward.functions.0.pattern",
        ),
        (
            {"reward": {"functions": [{"name": "format_regex", "pattern": "("}]}},
            "reward.functions.0.pattern",
        ),
        (
            {"reward": {"functions": [{"name": "python_eval"}]}},
            "reward.functions.0.name",
        ),
        ({"model": {"trust_remote_code": True}}, "model.trust_remote_code"),
        ({"resources": {"max_attempts": 0}}, "resources.max_attempts"),
    ],
)
def test_bad_values_are_reported_by_path(data, field):
    fields = [e["field"] for e in spec_errors(data)]
    assert fields == [field]


def test_mask_bounds_are_ordered():
    errs = spec_errors(
        {
            "algorithm": {
                "bypass_mode": False,
                "rollout_is": "token",
                "rollout_is_mode": "mask",
                "rollout_is_threshold": 2.0,
                "rollout_is_threshold_low": 3.0,
            }
        }
    )
    assert errs == [
        {
            "field": "algorithm.rollout_is_threshold_low",
            "message": "must be < rollout_is_threshold (2.0)",
        }
    ]


def test_load_spec_from_text_file_and_overrides(tmp_path):
    text = "async:\n  enabled: true\nrollout:\n  backend: vllm\n  max_loras: 3\n"
    spec = load_spec(text, ["async.max_staleness=2", "train.betas=[0.9, 0.99]"])
    assert spec.async_.enabled and spec.async_.max_staleness == 2
    assert spec.rollout.backend == "vllm" and spec.rollout.max_loras == 3
    assert spec.train.betas == (0.9, 0.99)
    path = tmp_path / "s.json"
    path.write_text(json.dumps(spec.to_dict()))
    assert load_spec(path) == spec
    with pytest.raises(SpecError, match=r"algorithm\.clip_eps_low: must be < 1"):
        load_spec(path, ["algorithm.clip_eps_low=1"])


def test_apply_overrides_does_not_mutate_and_rejects_garbage():
    data = {"train": {"steps": 3}}
    out = apply_overrides(data, ["train.steps=5", "seed=7", "algorithm.kl_coef=0.01"])
    assert data == {"train": {"steps": 3}}
    assert out == {"train": {"steps": 5}, "seed": 7, "algorithm": {"kl_coef": 0.01}}
    with pytest.raises(ValueError, match="key.path=value"):
        apply_overrides({}, ["train.steps"])
    with pytest.raises(ValueError, match="seed is not a section"):
        apply_overrides({"seed": 1}, ["seed.x=2"])


def test_json_schema_uses_public_names():
    schema = spec_json_schema()
    assert "async" in schema["properties"] and "async_" not in schema["properties"]
    assert "discriminator" in json.dumps(schema)


def test_examples_validate():
    for path in sorted(EXAMPLES.glob("*.yaml")):
        load_spec(path)


def test_spec_module_imports_no_torch():
    code = (
        "import sys, workers.spec as s; s.spec_json_schema(); s.spec_errors({});"
        "heavy = ('torch', 'transformers', 'peft', 'ray', 'vllm', 'tensorrt_llm', 'django');"
        "bad = [m for m in heavy if m in sys.modules];"
        "assert not bad, bad"
    )
    subprocess.run(
        [sys.executable, "-c", code],
        check=True,
        cwd=Path(__file__).resolve().parents[2],
    )


def _leaf_paths(model: type, prefix: str):
    from pydantic import BaseModel

    for name, field in model.model_fields.items():
        key, ann = field.alias or name, field.annotation
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            yield from _leaf_paths(ann, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}"


def test_every_key_is_in_the_config_reference():
    from workers.spec import TorchRolloutSpec, TrtllmRolloutSpec, VllmRolloutSpec

    doc = (EXAMPLES.parent / "docs" / "config-reference.md").read_text()
    paths = [p for p in _leaf_paths(RunSpec, "") if not p.startswith(("rollout", "reward"))]
    for member in (TorchRolloutSpec, VllmRolloutSpec, TrtllmRolloutSpec):
        paths += _leaf_paths(member, "rollout.")
    missing = sorted({p for p in paths if f"`{p}`" not in doc})
    assert not missing, f"document these keys in docs/config-reference.md: {missing}"


def test_a_samples_response_bound_is_a_turn_or_an_episodes_budget():
    """What seq_mean_token_sum_norm divides by (L_max) and what bounds an episode: one
    turn's max_new_tokens without an environment; with one, its episode budget, by default
    max_turns turns."""
    spec = load_spec(EXAMPLES / "calculator-tools.yaml")
    turn, turns = spec.rollout.max_new_tokens, spec.env.max_turns
    assert RunSpec.model_validate({"rollout": {"max_new_tokens": 7}}).response_tokens_max() == 7
    for budget, bound in ((None, turns * turn), (123, 123)):
        env = spec.env.model_copy(update={"max_episode_tokens": budget})
        assert spec.model_copy(update={"env": env}).response_tokens_max() == bound
