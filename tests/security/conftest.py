"""The platform fixtures (two teams with a user per role, a shared cluster, clients) and
team B's objects, named with markers that must never appear in an answer to team A."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from paddock.clusters.models import RayCluster
from paddock.experiments.artifacts import dataset_upload
from paddock.experiments.launch import experiment_launch
from paddock.experiments.metrics import metric_points_store
from paddock.experiments.models import Checkpoint
from paddock.teams.models import Role
from paddock.teams.services import api_token_create
from paddock.teams.team_secrets import team_secret_set
from tests.platform.conftest import (  # noqa: F401  (fixtures, shared)
    TINY_SPEC,
    World,
    client_as,
    launched,
    quiet_hooks,
    world,
)

SECRET = "bravo-secret"  # in every name of team B; must never reach team A


@dataclass
class TeamB:
    team: int
    experiment: int
    config: int
    run: int
    checkpoint: int
    dataset: int
    user: int
    token: int
    raw_token: str
    cluster: int
    secret: str  # a team secret's name (its value carries the marker too)


@pytest.fixture
def team_b(world: World, settings, tmp_path) -> TeamB:  # noqa: F811
    settings.PADDOCK_ARTIFACTS_URI = (tmp_path / "artifacts").as_uri()
    world.team_b.name = f"{SECRET} team"
    world.team_b.save()
    owner = world.users_b[Role.OWNER]
    actor = world.actor(owner)
    result = experiment_launch(
        actor=actor, team=world.team_b, name=f"{SECRET} experiment", spec=TINY_SPEC,
        description=f"{SECRET} description", tags=[f"{SECRET}-tag"],
    )  # fmt: skip
    run = result.runs[0]
    ckpt = tmp_path / "artifacts" / "runs" / str(run.pk) / "adapter.bin"
    ckpt.parent.mkdir(parents=True)
    ckpt.write_bytes(b"weights of " + SECRET.encode())
    checkpoint = Checkpoint.objects.create(run=run, step=1, uri=ckpt.as_uri(), size_bytes=7)
    metric_points_store(run_id=run.pk, points=[(f"{SECRET}/metric", 1, 0.0, 0.5)])
    line = b'{"prompt": "' + SECRET.encode() + b' prompt", "answer": "1"}\n'
    dataset = dataset_upload(actor=actor, team=world.team_b, name=f"{SECRET} data", data=line)
    token, raw = api_token_create(actor=actor, team=world.team_b, name=f"{SECRET} token")
    cluster = RayCluster.objects.create(
        team=world.team_b, name=f"{SECRET} cluster", address=f"http://{SECRET}.invalid:8265"
    )
    team_secret_set(actor=actor, team=world.team_b, name=SECRET, value=f"{SECRET} value")
    return TeamB(
        team=world.team_b.pk, experiment=result.experiment.pk, config=run.config_id,
        run=run.pk, checkpoint=checkpoint.pk, dataset=dataset.pk,
        user=world.users_b[Role.VIEWER].pk, token=token.pk, raw_token=raw,
        cluster=cluster.pk, secret=SECRET,
    )  # fmt: skip


@pytest.fixture
def paddock_server(django_db_setup, django_db_blocker):
    """The ASGI server as `paddock up` runs it (uvicorn with its WEB_SERVER_FLAGS), on a free
    port and the test database: what a black-box probe of the platform talks to."""
    from django.conf import settings

    from paddock.embedded.up import WEB_SERVER_FLAGS
    from tests.conftest import AsgiServer, free_port, service_env

    class PaddockUpServer(AsgiServer):
        def start(self) -> None:
            import subprocess
            import sys

            import requests

            from tests.conftest import REPO, wait_for

            self.proc = subprocess.Popen(
                [sys.executable, "-m", "uvicorn", "paddock.asgi:application", "--host",
                 "127.0.0.1", "--port", str(self.port), *WEB_SERVER_FLAGS,
                 "--log-level", "warning"],
                env=self.env, cwd=REPO, start_new_session=True,
            )  # fmt: skip

            def up():
                try:
                    return requests.get(f"{self.url}/livez", timeout=5).status_code == 200
                except requests.RequestException:
                    return False

            wait_for(up, 60, "the ASGI server")

    db_name = str(settings.DATABASES["default"]["NAME"])
    server = PaddockUpServer(port=free_port(), env=service_env(PADDOCK_TEST_DB_NAME=db_name))
    server.start()
    try:
        yield server
    finally:
        server.stop()
