"""The thin client and the CLI verbs against a live server (real HTTP, real auth)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from paddock.experiments.models import Run
from paddock.experiments.states import run_transition
from paddock.teams.models import Role
from paddock.teams.services import api_token_create
from paddock_client.cli import main
from paddock_client.client import PaddockAPIError, PaddockClient
from tests.platform.conftest import TINY_SPEC

REPO = Path(__file__).resolve().parents[3]

pytestmark = pytest.mark.usefixtures("quiet_hooks")


def test_the_client_imports_neither_django_nor_torch():
    code = ("import sys, paddock_client.client, paddock_client.cli;"
            "print([m for m in ('django', 'torch') if m in sys.modules])")  # fmt: skip
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                         text=True, check=True)  # fmt: skip
    assert out.stdout.strip() == "[]"


@pytest.fixture
def client(world, live_server):
    member = world.users_a[Role.MEMBER]
    _, secret = api_token_create(actor=world.actor(member), team=world.team_a, name="cli")
    return PaddockClient(live_server.url, secret)


@pytest.mark.django_db(transaction=True)
def test_launch_list_control_and_follow_logs(client, world):
    with pytest.raises(PaddockAPIError) as err:
        client.launch(team=None, name="bad", spec={"train": {"steps": 0}})
    assert (err.value.code, err.value.field) == ("spec_invalid", "spec.train.steps")
    reply = client.launch(team="team-a", name="sweep", spec=TINY_SPEC, backends=["torch", "vllm"])
    run_ids = [r["id"] for r in reply["runs"]]
    assert [r["id"] for r in client.runs(backend="vllm")] == [run_ids[1]]
    run = Run.objects.get(pk=run_ids[0])
    for state in ("dispatching", "starting", "running"):
        run_transition(run=run, to_state=state)
    assert client.pause(run.pk)["state"] == "pausing"
    assert client.abort(run.pk)["state"] == "aborting"
    run_transition(run=run, to_state="aborted")
    messages = [e["message"] for e in client.follow_events(run.pk, poll_s=0.05)]
    assert messages[0] == "queued → dispatching" and messages[-1] == "aborting → aborted"


@pytest.mark.django_db(transaction=True)
def test_cli_verbs(client, world, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))

    def paddock(*argv):
        return main(list(argv))

    token = client.session.headers["Authorization"].split()[1]
    assert paddock("login", "--url", client.url, "--token", token) == 0
    saved = tmp_path / "paddock" / "credentials.json"
    assert json.loads(saved.read_text())["token"] == token
    assert saved.stat().st_mode & 0o777 == 0o600
    spec = tmp_path / "tiny.yaml"
    spec.write_text("train:\n  steps: 5\n")
    assert (
        paddock("experiments", "launch", str(spec), "--backends", "torch,vllm", "--set", "seed=3")
        == 0
    )
    assert "seed 3" in capsys.readouterr().out
    assert paddock("runs", "list", "--backend", "torch") == 0
    listed = capsys.readouterr().out.splitlines()
    assert len(listed) == 2 and "queued" in listed[1] and "tiny" in listed[1]
    run_id = Run.objects.get(backend="torch").pk
    assert paddock("runs", "abort", str(run_id)) == 0
    assert "aborted" in capsys.readouterr().out
    assert paddock("runs", "logs", str(run_id)) == 0
    assert "queued → aborted" in capsys.readouterr().out
    assert paddock("runs", "resume", str(run_id)) == 1
    assert "run_finished" in capsys.readouterr().err
