"""POST /api/v1/spec/import: a verl or NeMo-RL config pasted in the launcher, translated with
the client's importer; a dataset of the caller's team takes the data files' place."""

from __future__ import annotations

from pathlib import Path

import pytest

from paddock.teams.models import Role

from ..client.test_config_import import NEMO_RECIPE, VERL_SCRIPT
from .test_datasets import VERL_ROWS, parquet_bytes, store, upload  # noqa: F401 (fixture)

URL = "/api/v1/spec/import"


def test_a_recipe_and_a_script_import_through_the_api(world, client_as):
    client = client_as(world.users_a[Role.VIEWER])  # reading is enough: nothing is stored
    answer = client.post(URL, {"config": NEMO_RECIPE.read_text()}, format="json")
    assert answer.status_code == 200, answer.json()
    body = answer.json()
    assert body["source"] == "nemo-rl"
    assert body["files"] == ["nemo-rl: examples/configs/grpo_math_1B.yaml", "config"]
    assert body["spec"]["train"]["lr"] == 5e-6 and body["spec"]["lora"]["r"] == 128
    unmapped = {u["key"]: u for u in body["unmapped"]}
    assert unmapped["logger.log_dir"]["origin"] == "config"
    assert "dataset's size" in unmapped["grpo.max_num_epochs"]["note"]

    verl = client.post(URL, {"command": VERL_SCRIPT.read_text()}, format="json").json()
    assert verl["source"] == "verl" and verl["spec"]["algorithm"]["num_generations"] == 5


@pytest.mark.usefixtures("store")
def test_a_dataset_of_the_team_replaces_the_files_and_sizes_the_epochs(world, client_as):
    client = client_as(world.users_a[Role.MEMBER])
    rows = VERL_ROWS * 10  # 50 rows
    dataset = upload(client, world.team_a, parquet_bytes(rows)).json()
    answer = client.post(URL, {"command": VERL_SCRIPT.read_text(), "dataset": dataset["id"]},
                         format="json")  # fmt: skip
    spec = answer.json()["spec"]
    assert spec["data"]["path"] == f"dataset://{dataset['id']}"
    assert spec["data"]["answer_key"] == "reward_model.ground_truth"
    assert spec["train"]["steps"] == (50 // 16) * 15  # total_epochs=15, 16 prompts a step
    # another team's dataset is not found, as if it did not exist
    other = client_as(world.users_b[Role.OWNER])
    refused = other.post(URL, {"command": VERL_SCRIPT.read_text(), "dataset": dataset["id"]},
                         format="json")  # fmt: skip
    assert refused.status_code == 404 and refused.json()["code"] == "not_found"


def test_bad_input_is_a_4xx_naming_the_field(world, client_as, tmp_path: Path):
    client = client_as(world.users_a[Role.MEMBER])
    cases = [
        ({}, 400, "invalid", "config"),
        ({"config": "policy: {model_name: /m}", "colour": 1}, 400, "unknown_field", "colour"),
        ({"config": "a: [1, 2"}, 400, "import_invalid", "config"),
        ({"command": "python3 -m verl.trainer.main_ppo actor_rollout_ref.rollout.n=five"},
         400, "import_invalid", "actor_rollout_ref.rollout.n"),
        ({"config": "x: 1", "source": "trl"}, 400, "invalid", "source"),
        ({"config": "x" * (256 * 1024 + 1)}, 400, "invalid", "config"),
    ]  # fmt: skip
    for payload, status, code, field in cases:
        answer = client.post(URL, payload, format="json")
        assert (answer.status_code, answer.json()["code"], answer.json()["field"]) == (
            status,
            code,
            field,
        ), payload
    # a path the config names is matched against the vendored bases, never opened
    secret = tmp_path / "secret.yaml"
    secret.write_text("policy: {model_name: leaked}\n")
    answer = client.post(URL, {"config": f"defaults: {secret}\ngrpo: {{seed: 1}}\n"},
                         format="json")  # fmt: skip
    assert answer.status_code == 400 and "leaked" not in answer.content.decode()
    assert client_as(None).post(URL, {"config": "x: 1"}, format="json").status_code in (401, 403)
