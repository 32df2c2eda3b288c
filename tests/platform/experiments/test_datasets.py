"""Uploaded datasets: JSONL or Parquet, named by a run as `dataset://<id>` (only the team's
own), and handed to the job as the upload's artifact URI at bootstrap."""

from __future__ import annotations

import io
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from paddock.clusters.bootstrap_tokens import bootstrap_token_for
from paddock.experiments.models import Dataset, Run
from paddock.experiments.states import run_transition
from paddock.teams.models import Role

from ..conftest import TINY_SPEC, launch

VERL_ROWS = [
    {
        "data_source": "gsm8k",
        "prompt": [{"role": "user", "content": f"{i}+{i}?"}],
        "reward_model": {"style": "rule", "ground_truth": str(2 * i)},
    }
    for i in range(5)
]


@pytest.fixture
def store(settings, tmp_path):
    root = tmp_path / "artifacts"
    root.mkdir()
    settings.PADDOCK_ARTIFACTS_URI = root.as_uri()
    return root


def parquet_bytes(rows) -> bytes:
    buf = io.BytesIO()
    pq.write_table(pa.Table.from_pylist(rows), buf)
    return buf.getvalue()


def upload(client, team, content: bytes, name="math"):
    payload = {"team": team.pk, "name": name, "file": io.BytesIO(content)}
    return client.post("/api/v1/datasets", payload, format="multipart")


def test_jsonl_of_any_columns_and_parquet_are_accepted(world, client_as, store):
    client = client_as(world.users_a[Role.MEMBER])
    jsonl = "".join(json.dumps(r) + "\n" for r in VERL_ROWS).encode()
    first = upload(client, world.team_a, jsonl)
    assert first.status_code == 201, first.json()
    assert first.json()["rows"] == 5 and first.json()["uri"].endswith(".jsonl")
    second = upload(client, world.team_a, parquet_bytes(VERL_ROWS))
    assert second.status_code == 201, second.json()
    body = second.json()
    assert body["rows"] == 5 and body["uri"].endswith(f"/datasets/{body['sha256']}.parquet")
    stored = store / "teams" / str(world.team_a.pk) / "datasets" / f"{body['sha256']}.parquet"
    assert pq.read_table(stored).to_pylist() == VERL_ROWS


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b'{"prompt": "a"}\n[1, 2]\n', "line 2: not a JSON object"),
        (b"PAR1" + b"\0" * 32 + b"PAR1", "not a readable Parquet file"),
        (b"\xff\xfe\x00", "UTF-8 JSONL text or a Parquet file"),
    ],
)
def test_bad_uploads_say_what_is_wrong(world, client_as, store, content, message):
    reply = upload(client_as(world.users_a[Role.MEMBER]), world.team_a, content)
    assert (reply.status_code, reply.json()["field"]) == (400, "file")
    assert message in reply.json()["message"]


def _spec(dataset_id: int) -> dict:
    return {
        **TINY_SPEC,
        "data": {
            "task": "dataset", "path": f"dataset://{dataset_id}",
            "answer_key": "reward_model.ground_truth",
        },
    }  # fmt: skip


def test_a_run_names_only_its_teams_datasets(world, client_as, store):
    a = client_as(world.users_a[Role.MEMBER])
    b = client_as(world.users_b[Role.MEMBER])
    theirs = upload(b, world.team_b, parquet_bytes(VERL_ROWS)).json()["id"]
    reply = launch(a, world.team_a, spec=_spec(theirs))
    assert reply.status_code == 400, reply.json()
    assert (reply.json()["code"], reply.json()["field"]) == ("path_not_allowed", "spec.data.path")
    assert f"no dataset {theirs}" in reply.json()["message"]
    ours = upload(a, world.team_a, parquet_bytes(VERL_ROWS)).json()["id"]
    assert launch(a, world.team_a, spec=_spec(ours)).status_code == 201


def test_the_job_gets_the_uploads_uri_at_bootstrap(world, client_as, client, store):
    a = client_as(world.users_a[Role.MEMBER])
    dataset = Dataset.objects.get(pk=upload(a, world.team_a, parquet_bytes(VERL_ROWS)).json()["id"])
    launched = launch(a, world.team_a, spec=_spec(dataset.pk)).json()
    run = Run.objects.get(pk=launched["runs"][0]["id"])
    Run.objects.filter(pk=run.pk).update(dispatch_count=1)
    run.refresh_from_db()
    run_transition(run=run, to_state="dispatching")
    reply = client.post(
        f"/api/v1/runs/{run.pk}/bootstrap", {"dispatch": 1}, content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {bootstrap_token_for(run_id=run.pk, dispatch=1)}",
    )  # fmt: skip
    assert reply.status_code == 200, reply.json()
    assert reply.json()["spec"]["data"]["path"] == dataset.uri
    assert run.config.spec["data"]["path"] == f"dataset://{dataset.pk}"  # the record names it
