"""An uploaded dataset trains through the real stack: upload a verl-layout Parquet over the
HTTP API, launch a run whose spec names it `dataset://<id>`, and the Ray job (bootstrapped
with the upload's URI) trains to `succeeded`."""

from __future__ import annotations

import io

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import requests

from paddock.clusters.models import RayCluster
from paddock.experiments.models import MetricPoint, Run
from paddock.teams.access import actor_for
from paddock.teams.models import Role
from paddock.teams.services import api_token_create
from tests.integration.test_dispatch import FAST_SPEC, _until, stack  # noqa: F401 (fixture)
from tests.platform.factories import MembershipFactory, TeamFactory, UserFactory

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def test_an_uploaded_parquet_trains_to_succeeded(stack):  # noqa: F811
    team, user = TeamFactory(), UserFactory()
    MembershipFactory(team=team, user=user, role=Role.MEMBER)
    RayCluster.objects.update_or_create(
        name="test-local",
        defaults={"address": stack["ray"]["jobs_address"], "backends": ["torch"],
                  "labels": {"embedded": True}, "healthy": True},
    )  # fmt: skip
    _, secret = api_token_create(actor=actor_for(user=user), team=team, name="ci")
    api = requests.Session()
    api.headers["Authorization"] = f"Bearer {secret}"
    base = f"{stack['server'].url}/api/v1"

    # verl's layout (string prompts: the tiny model's tokenizer has no chat template)
    rows = [
        {"data_source": "sums", "question": f"{a}+{b}=",
         "reward_model": {"style": "rule", "ground_truth": str(a + b)}}
        for a in range(6) for b in range(6)
    ]  # fmt: skip
    buf = io.BytesIO()
    pq.write_table(pa.Table.from_pylist(rows), buf)
    up = api.post(
        f"{base}/datasets",
        data={"team": team.pk, "name": "sums"},
        files={"file": ("sums.parquet", buf.getvalue())},
        timeout=30,
    )
    assert up.status_code == 201, up.text
    dataset = up.json()
    assert dataset["rows"] == 36 and dataset["uri"].endswith(".parquet")

    spec = {
        **FAST_SPEC,
        "train": {**FAST_SPEC["train"], "steps": 2},
        "data": {"task": "dataset", "path": f"dataset://{dataset['id']}",
                 "prompt_key": "question", "answer_key": "reward_model.ground_truth",
                 "eval_size": 4},
    }  # fmt: skip
    launched = api.post(
        f"{base}/experiments",
        json={"team": team.pk, "name": "uploaded", "spec": spec},
        timeout=30,
    )
    assert launched.status_code == 201, launched.text
    run = Run.objects.get(pk=launched.json()["runs"][0]["id"])
    _until(run, {"succeeded", "failed"})
    assert run.state == "succeeded", run.error
    assert MetricPoint.objects.filter(run=run, key="reward/mean").count() == 2
    assert run.config.spec["data"]["path"] == f"dataset://{dataset['id']}"
