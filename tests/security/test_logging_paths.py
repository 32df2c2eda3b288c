"""The metric mirrors of `logging:` write only where the platform allows: TensorBoard's
directory inside the run's own output (a relative path) or PADDOCK_LOG_ROOTS, MLflow only to
an http(s) tracking server; anything else is refused at launch, naming the field."""

from __future__ import annotations

import pytest

from paddock.experiments.models import Run
from paddock.teams.models import Role
from tests.platform.conftest import TINY_SPEC, launch


@pytest.fixture
def log_roots(settings, tmp_path):
    settings.PADDOCK_LOG_ROOTS = [str(tmp_path / "logs")]
    return tmp_path


def _launch(world, client_as, logging: dict):
    client = client_as(world.users_a[Role.OWNER])
    return launch(client, world.team_a, spec={**TINY_SPEC, "logging": logging})


@pytest.mark.parametrize(
    ("logging", "field"),
    [
        ({"tensorboard": {"dir": "/etc/cron.d"}}, "spec.logging.tensorboard.dir"),
        ({"tensorboard": {"dir": "{root}/logs-evil/tb"}}, "spec.logging.tensorboard.dir"),
        ({"tensorboard": {"dir": "~/.ssh"}}, "spec.logging.tensorboard.dir"),
        ({"tensorboard": {"dir": "../../other-run"}}, "spec.logging.tensorboard.dir"),
        ({"tensorboard": {"dir": "tb\\..\\..\\x"}}, "spec.logging.tensorboard.dir"),
        ({"mlflow": {"tracking_uri": "file:///etc"}}, "spec.logging.mlflow.tracking_uri"),
        ({"mlflow": {"tracking_uri": "sqlite:////tmp/x.db"}}, "spec.logging.mlflow.tracking_uri"),
        ({"mlflow": {"tracking_uri": "/var/mlruns"}}, "spec.logging.mlflow.tracking_uri"),
        ({"mlflow": {"tracking_uri": "http://[::1"}}, "spec.logging.mlflow.tracking_uri"),
    ],
)
def test_a_mirror_that_would_write_elsewhere_is_refused(
    world, client_as, log_roots, logging, field
):
    if "tensorboard" in logging:
        logging["tensorboard"]["dir"] = logging["tensorboard"]["dir"].format(root=log_roots)
    before = Run.objects.count()
    reply = _launch(world, client_as, logging)
    assert reply.status_code == 400, reply.json()
    assert reply.json()["field"] == field, reply.json()
    assert Run.objects.count() == before


def test_mirrors_inside_the_run_or_the_roots_launch(world, client_as, log_roots):
    for logging in (
        {"tensorboard": {}},  # the default: OUT/tensorboard
        {"tensorboard": {"dir": "tb/nested"}},
        {"tensorboard": {"dir": str(log_roots / "logs" / "team-a")}},
        {"mlflow": {"tracking_uri": "https://mlflow.example.com", "experiment": "x"}},
        {"wandb": {"project": "p", "mode": "online"}},
    ):
        reply = _launch(world, client_as, logging)
        assert reply.status_code == 201, (logging, reply.json())
