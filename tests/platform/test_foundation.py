"""The foundation's promises: layout, settings from the environment, health report."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from paddock.teams.models import Role

REPO = Path(__file__).resolve().parents[2]


def test_platform_dir_never_shadows_the_standard_library():
    out = subprocess.run(
        [sys.executable, "-c", "import platform; print(platform.system())"],
        cwd=REPO, capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert out.stdout.strip() == "Linux"


def test_check_deploy_is_clean_under_production_settings(tmp_path):
    env = {
        "PATH": os.environ["PATH"],
        "PADDOCK_HOME": str(tmp_path),
        "PADDOCK_SECRET_KEY": "x" * 20 + "production-secret-key-from-a-vault-0123456789",
        "PADDOCK_PUBLIC_URL": "https://paddock.example.com",
        "PADDOCK_ALLOWED_HOSTS": "paddock.example.com",
        "DATABASE_URL": "postgres://paddock@db.internal:5432/paddock",
        "REDIS_URL": "redis://redis.internal:6379/0",
        "RAY_ADDRESS": "http://ray-head.internal:8265",
    }
    out = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=REPO, env=env, capture_output=True, text=True,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    assert "no issues" in out.stdout


def test_debug_is_off_unless_asked():
    from django.conf import settings

    assert os.environ.get("PADDOCK_DEBUG") or settings.DEBUG is False


def test_embedded_mode_keeps_its_state_under_paddock_home(tmp_path):
    code = (
        "import json; from paddock.environment import read_environment as r, secret_key;"
        "e = r(); secret_key(e.home);"
        "print(json.dumps([e.database_url, e.redis_url, e.artifacts_uri, e.embedded_redis]))"
    )
    env = {"PATH": os.environ["PATH"], "PADDOCK_HOME": str(tmp_path / "home")}
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO / "platform", env=env,
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    database, redis, artifacts, embedded = json.loads(out.stdout)
    home = str(tmp_path / "home")
    assert database == f"sqlite:///{home}/paddock.sqlite3"
    assert redis == f"unix://{home}/redis/redis.sock"
    assert artifacts == f"file://{home}/artifacts"
    assert embedded is True
    # the generated secret key is readable by its owner only
    assert (tmp_path / "home" / "secret_key").stat().st_mode & 0o777 == 0o600


def test_processes_starting_at_once_on_a_new_home_read_one_secret_key(tmp_path):
    """`paddock up` starts its server and worker at once on a new home: all read one whole
    key. A key that appears between the check and the write (another process won) is kept,
    not an error: before, the loser's O_EXCL open raised, or it read a file still empty."""
    from paddock.environment import create_once

    home = tmp_path / "home"
    home.mkdir()
    code = (  # ready, then wait for the go, so that every one checks for the key at once
        "import sys, os, time; from pathlib import Path; from paddock.environment import "
        "secret_key; Path(sys.argv[1], f'ready-{os.getpid()}').touch()\n"
        "while not Path(sys.argv[1], 'go').exists(): time.sleep(0.0005)\n"
        "print(secret_key(Path(sys.argv[2])))"
    )
    gate = tmp_path / "gate"
    gate.mkdir()
    procs = [
        subprocess.Popen([sys.executable, "-c", code, str(gate), str(home)], cwd=REPO / "platform",
                         env={"PATH": os.environ["PATH"]}, stdout=subprocess.PIPE, text=True)
        for _ in range(6)
    ]  # fmt: skip
    deadline = time.monotonic() + 120
    while len(os.listdir(gate)) < len(procs) and time.monotonic() < deadline:
        time.sleep(0.05)
    (gate / "go").touch()
    keys = {p.communicate(timeout=60)[0].strip() for p in procs}
    assert all(p.returncode == 0 for p in procs)
    assert len(keys) == 1 and len(keys.pop()) > 40
    assert sorted(os.listdir(home)) == ["secret_key"]  # no part file left behind
    create_once(home / "secret_key", "another")  # the race's loser: no error, nothing replaced
    assert (home / "secret_key").read_text() != "another"


@pytest.mark.django_db
def test_healthz_reports_every_component(client):
    reply = client.get("/healthz")
    assert reply.status_code == 200
    body = reply.json()
    assert set(body["components"]) == {"database", "broker", "channel_layer", "celery", "ray"}
    assert body["components"]["database"]["ok"] is True
    assert body["components"]["broker"]["ok"] is True
    assert body["components"]["channel_layer"]["ok"] is True
    # no Ray address in this test session: reported, not hidden
    assert body["components"]["ray"]["ok"] is False
    assert "RAY_ADDRESS" in body["components"]["ray"]["error"]
    assert body["status"] == "degraded"
    assert client.get("/healthz?strict=1").status_code == 503


@pytest.mark.django_db
def test_healthz_says_only_ok_or_not_to_anyone_else(client, world, settings):
    """An anonymous caller off this machine learns whether the platform is healthy, not its
    addresses, versions or host names; an operator (this machine, the metrics token, a
    staff session) reads every component."""
    settings.PADDOCK_METRICS_TOKEN = "operator-secret"
    for meta in ({"REMOTE_ADDR": "203.0.113.9"},
                 {"REMOTE_ADDR": "127.0.0.1", "HTTP_X_FORWARDED_FOR": "203.0.113.9"},
                 {"REMOTE_ADDR": "203.0.113.9", "HTTP_AUTHORIZATION": "Bearer wrong"}):  # fmt: skip
        reply = client.get("/healthz", **meta)
        assert reply.status_code == 200 and reply.json() == {"status": "degraded"}, meta
        assert client.get("/healthz?strict=1", **meta).status_code == 503
    operator = client.get("/healthz", REMOTE_ADDR="203.0.113.9",
                          HTTP_AUTHORIZATION="Bearer operator-secret")  # fmt: skip
    assert set(operator.json()["components"]) >= {"database", "ray"}
    staff = world.users_a[Role.OWNER]
    staff.is_staff = True
    staff.save()
    client.force_login(staff)
    assert "components" in client.get("/healthz", REMOTE_ADDR="203.0.113.9").json()


def test_paddock_train_never_loads_django_and_up_never_loads_torch():
    code = (
        "import sys; from paddock_client import cli; import workers.spec;"
        "assert 'django' not in sys.modules, 'spec/cli loaded django';"
        "import paddock.embedded.up, paddock.ops.doctor;"
        "assert 'torch' not in sys.modules, 'the up verb loaded torch'; print('ok')"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True)
    assert out.stdout.strip() == "ok", out.stderr


def test_livez_answers_without_touching_dependencies(client):
    reply = client.get("/livez")
    assert reply.status_code == 200 and reply.json() == {"status": "ok"}


def test_the_ray_executor_job_reserves_no_gpu_of_its_own():
    from paddock.clusters.placement import entrypoint_resources
    from workers.spec import ResourcesSpec

    ray = ResourcesSpec(executor="ray", trainer_gpus=2, trainer_cpus=4)
    local = ResourcesSpec(executor="local", trainer_gpus=1, trainer_cpus=2)
    assert entrypoint_resources(ray) == {"num_cpus": 0.1, "num_gpus": 0.0}
    assert entrypoint_resources(local) == {"num_cpus": 2.0, "num_gpus": 1.0}
