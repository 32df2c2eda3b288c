"""An experiment launched with a pre-flight check (experiments/preflight.py): a pre-flight run
per backend whose job reports the verdict through ingest, the runs held until it passes,
held on a failure until a member overrides, and a 409 with its own code for a run asked to
start meanwhile."""

from __future__ import annotations

import time

import pytest

from paddock.clusters.bootstrap_tokens import bootstrap_exchange, bootstrap_token_for
from paddock.clusters.dispatch import dispatch_prepare
from paddock.experiments import hooks
from paddock.experiments.models import Experiment, Run
from paddock.experiments.states import run_transition
from paddock.experiments.tokens import run_token_mint
from paddock.teams.models import AuditEvent, Role
from workers.events import PreflightCheck, PreflightEvent
from workers.names import PREFLIGHT_CHECKS

from ..conftest import TINY_SPEC, launch


@pytest.fixture
def enqueued(monkeypatch) -> list[int]:
    seen: list[int] = []
    for name in ("run_state_changed", "run_control_requested"):
        monkeypatch.setattr(hooks, name, lambda *a: None)
    monkeypatch.setattr(hooks, "run_enqueued", seen.append)
    return seen


@pytest.fixture
def member(world, client_as):
    return client_as(world.users_a[Role.MEMBER])


def _launched(member, team, mode="first", backends=("torch", "vllm")):
    answer = launch(member, team, backends=list(backends), seeds=2, preflight=mode)
    assert answer.status_code == 201, answer.json()
    body = answer.json()
    runs = Run.objects.filter(experiment_id=body["experiment"]["id"]).order_by("id")
    return (
        body,
        [r for r in runs if r.purpose == "preflight"],
        [r for r in runs if r.purpose == "train"],
    )


def _verdict(backend: str, failing: tuple[str, ...] = ()) -> dict:
    checks = [
        PreflightCheck(
            name=n,
            status="fail" if n in failing else "pass",
            figure=f"{n} figure",
            message=f"{n} failed" if n in failing else "",
        )  # fmt: skip
        for n in PREFLIGHT_CHECKS
    ]
    return PreflightEvent(time=time.time(), backend=backend, steps=3, checks=checks).model_dump()


def _report(client, run: Run, verdict: dict) -> None:
    """The pre-flight run's job: dispatched, running, its verdict, succeeded."""
    Run.objects.filter(pk=run.pk).update(dispatch_count=1)
    if run.state == "queued":
        run_transition(run=run, to_state="dispatching")
    token = run_token_mint(run=run, dispatch=1)
    body = {"dispatch": 1, "seq": 0, "events": [
        {"type": "status", "state": "running", "detail": "pre-flight check"},
        verdict,
        {"type": "status", "state": "succeeded", "detail": "pre-flight"},
    ]}  # fmt: skip
    reply = client.post(f"/api/v1/runs/{run.pk}/ingest", body, content_type="application/json",
                        HTTP_AUTHORIZATION=f"Bearer {token}")  # fmt: skip
    assert reply.status_code == 200, reply.json()


def test_the_runs_wait_then_go_when_every_engine_passes(
    world, member, client, enqueued, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        body, checks, runs = _launched(member, world.team_a)
    assert body["experiment"]["preflight"] == "pending"
    assert [(r.backend, r.seed) for r in checks] == [("torch", 0), ("vllm", 0)]
    assert [(r.backend, r.seed) for r in runs] == [("torch", 0), ("torch", 1), ("vllm", 0),
                                                   ("vllm", 1)]  # fmt: skip
    assert checks[0].config.spec["resources"]["pool"] is None and checks[0].total_steps == 0
    # dispatch holds the runs, starts the checks; a check's job is told what it is
    assert dispatch_prepare(run_id=runs[0].pk) is None
    runs[0].refresh_from_db()
    assert runs[0].state == "queued" and runs[0].queued_reason == "waiting for the pre-flight check"
    resume = member.post(f"/api/v1/runs/{runs[0].pk}/resume")
    assert (resume.status_code, resume.json()["code"]) == (409, "preflight_pending")
    Run.objects.filter(pk=checks[0].pk).update(dispatch_count=1, state="dispatching")
    token = bootstrap_token_for(run_id=checks[0].pk, dispatch=1)
    assert bootstrap_exchange(run_id=checks[0].pk, dispatch=1, raw=token).purpose == "preflight"

    enqueued.clear()
    with django_capture_on_commit_callbacks(execute=True):
        _report(client, checks[1], _verdict("vllm"))
    assert Experiment.objects.get(pk=body["experiment"]["id"]).preflight == "pending"
    with django_capture_on_commit_callbacks(execute=True):
        _report(client, Run.objects.get(pk=checks[0].pk), _verdict("torch"))
    assert Experiment.objects.get(pk=body["experiment"]["id"]).preflight == "passed"
    assert sorted(enqueued) == [r.pk for r in runs]  # released
    view = member.get(f"/api/v1/experiments/{body['experiment']['id']}/preflight").json()
    assert view["state"] == "passed" and [r["backend"] for r in view["runs"]] == ["torch", "vllm"]
    assert [c["status"] for c in view["runs"][0]["verdict"]["checks"]] == ["pass"] * 6


def test_a_failed_check_holds_the_runs_until_a_member_overrides(
    world, member, client, client_as, enqueued, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        body, checks, runs = _launched(member, world.team_a, backends=("torch",))
    experiment_id = body["experiment"]["id"]
    enqueued.clear()
    with django_capture_on_commit_callbacks(execute=True):
        _report(client, checks[0], _verdict("torch", failing=("adapter_reaches_engine",)))
    assert Experiment.objects.get(pk=experiment_id).preflight == "failed" and enqueued == []
    held = Run.objects.get(pk=runs[0].pk)
    assert held.queued_reason == ("held: the pre-flight check failed (adapter_reaches_engine); "
                                  "a member may override it")  # fmt: skip
    resume = member.post(f"/api/v1/runs/{held.pk}/resume")
    assert (resume.status_code, resume.json()["code"]) == (409, "preflight_failed")
    view = member.get(f"/api/v1/experiments/{experiment_id}/preflight").json()
    failed = [c for c in view["runs"][0]["verdict"]["checks"] if c["status"] == "fail"]
    assert [(c["name"], c["message"]) for c in failed] == [
        ("adapter_reaches_engine", "adapter_reaches_engine failed")
    ]

    url = f"/api/v1/experiments/{experiment_id}/preflight/override"
    assert client_as(world.users_a[Role.VIEWER]).post(url).status_code == 403
    assert client_as(world.users_b[Role.OWNER]).post(url).status_code == 404
    with django_capture_on_commit_callbacks(execute=True):
        answer = member.post(url)
    assert answer.status_code == 200 and answer.json()["state"] == "overridden"
    assert sorted(enqueued) == [r.pk for r in runs]
    audit = AuditEvent.objects.get(action="experiment.preflight_override")
    assert audit.data == {"was": "failed", "failed": ["adapter_reaches_engine"]}
    again = member.post(url)
    assert (again.status_code, again.json()["code"]) == (400, "invalid")


def test_a_check_whose_job_died_fails_the_preflight(
    world, member, django_capture_on_commit_callbacks
):
    body, checks, _ = _launched(member, world.team_a, backends=("torch",))
    for state in ("dispatching", "starting", "running"):
        run_transition(run=checks[0], to_state=state)
    with django_capture_on_commit_callbacks(execute=True):
        run_transition(run=checks[0], to_state="failed", reason="the job vanished")
    assert Experiment.objects.get(pk=body["experiment"]["id"]).preflight == "failed"


def test_the_check_alone_and_bad_input(world, member):
    body, checks, runs = _launched(member, world.team_a, mode="only", backends=("torch",))
    assert len(checks) == 1 and runs == [] and body["experiment"]["preflight"] == "pending"
    bad = launch(member, world.team_a, preflight="sometimes")
    assert (bad.status_code, bad.json()["code"], bad.json()["field"]) == (
        400,
        "invalid",
        "preflight",
    )
    plain = launch(member, world.team_a, spec=TINY_SPEC)
    assert plain.json()["experiment"]["preflight"] == ""
    assert {r["purpose"] for r in plain.json()["runs"]} == {"train"}
