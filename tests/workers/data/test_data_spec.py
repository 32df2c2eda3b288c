"""The data section of the spec: older configs stay valid, bad settings name their path,
and the JSON Schema that drives the launcher form describes every data field."""

from __future__ import annotations

import pytest

from workers.spec import DataSpec, dataset_ref, parse_spec, spec_errors, spec_json_schema


def test_older_data_configs_stay_valid():
    spec = parse_spec({"data": {"task": "jsonl", "path": "/data/a.jsonl", "eval_size": 5}})
    assert (spec.data.task, spec.data.prompt_key, spec.data.answer_key) == (
        "jsonl", "prompt", "answer",
    )  # fmt: skip
    assert parse_spec({}).data.task == "arithmetic"


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"task": "dataset"}, "data.path"),
        ({"path": "/data/a.jsonl"}, "data.path"),  # only with task: dataset
        ({"eval_split": "test"}, "data.eval_split"),
        ({"task": "dataset", "path": "dataset://seven"}, "data.path"),
        ({"task": "dataset", "path": "/a", "answer_key": "reward_model..x"}, "data.answer_key"),
        ({"task": "dataset", "path": "/a", "prompt_key": ""}, "data.prompt_key"),
        ({"task": "dataset", "path": "/a", "max_prompt_tokens": 0}, "data.max_prompt_tokens"),
        ({"task": "dataset", "path": "/a", "overlong_prompts": "cut"}, "data.overlong_prompts"),
        ({"task": "jsonl", "path": "/a", "format": "parquet"}, "data.format"),
        ({"chat_template_kwargs": {"enable thinking": True}},
         "data.chat_template_kwargs.enable thinking"),
        ({"chat_template_kwargs": {"enable_thinking": [1]}},
         "data.chat_template_kwargs.enable_thinking"),
    ],
)  # fmt: skip
def test_bad_data_settings_name_their_path(data, field):
    fields = [e["field"] for e in spec_errors({"data": data})]
    assert field in fields, spec_errors({"data": data})


def test_dataset_refs():
    assert dataset_ref("dataset://12") == 12
    assert dataset_ref("/data/dataset://12") is None and dataset_ref(None) is None


def test_the_schema_describes_every_data_field():
    schema = spec_json_schema()
    props = schema["$defs"]["DataSpec"]["properties"]
    assert set(props) == set(DataSpec.model_fields)
    undescribed = [k for k, v in props.items() if not v.get("description")]
    assert not undescribed, undescribed
    assert set(props["task"]["enum"]) >= {"arithmetic", "reverse", "dataset", "jsonl"}
    assert set(props["overlong_prompts"]["enum"]) == {"drop", "error"}
