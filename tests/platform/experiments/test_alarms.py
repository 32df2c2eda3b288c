"""The alarms on the platform (experiments/alarms.py): judged from a run's stored metrics,
logged when they begin and end, pausing the run through the usual pause when armed, told to
the viewers, read through the API and counted by Prometheus."""

from __future__ import annotations

import math

import pytest

from paddock.experiments import hooks
from paddock.experiments.alarms import run_alarms_judge, runs_alarms_due
from paddock.experiments.metrics import metric_points_store
from paddock.experiments.models import Run, RunAlarm, RunEvent
from paddock.experiments.states import run_transition
from paddock.monitoring.metrics import scrape
from paddock.teams.models import AuditEvent, Role

from ..conftest import TINY_SPEC, launch

pytestmark = pytest.mark.usefixtures("quiet_hooks")


@pytest.fixture
def changed(monkeypatch) -> list[int]:
    """The run ids of every run_alarms_changed the platform published."""
    seen: list[int] = []
    monkeypatch.setattr(hooks, "run_alarms_changed", seen.append)
    return seen


@pytest.fixture
def member(world, client_as):
    return client_as(world.users_a[Role.MEMBER])


def _run(member, team, spec=None) -> Run:
    answer = launch(member, team, spec={**TINY_SPEC, **(spec or {})})
    assert answer.status_code == 201, answer.json()
    run = Run.objects.get(pk=answer.json()["runs"][0]["id"])
    for state in ("dispatching", "starting", "running"):
        run_transition(run=run, to_state=state)
    return run


def _report(run: Run, first: int, last: int, entropy) -> None:
    """Steps first..last of a run whose entropy is entropy(step), as ingest stores them."""
    metric_points_store(
        run_id=run.pk,
        points=[("entropy", s, float(s), entropy(s)) for s in range(first, last + 1)]
        + [("reward/mean", s, float(s), 0.5) for s in range(first, last + 1)],
    )
    Run.objects.filter(pk=run.pk).update(step=last)
    run.refresh_from_db()


def _collapse(step: int) -> float:
    return 1.5 if step <= 40 else 1.5 * math.exp(-(step - 40) / 4)


def test_an_alarm_fires_once_says_since_when_and_clears(
    world, member, changed, django_capture_on_commit_callbacks
):
    run = _run(member, world.team_a)
    _report(run, 1, 40, _collapse)
    assert runs_alarms_due() == [run.pk]
    with django_capture_on_commit_callbacks(execute=True):
        rows = {r.name: r for r in run_alarms_judge(run_id=run.pk)}
    assert not any(r.firing for r in rows.values()) and changed == []
    assert runs_alarms_due() == []  # judged at its step

    _report(run, 41, 80, _collapse)
    with django_capture_on_commit_callbacks(execute=True):
        rows = {r.name: r for r in run_alarms_judge(run_id=run.pk)}
    fired = rows["entropy_collapse"]
    assert fired.firing and fired.step == 80 and 50 <= fired.since_step <= 60
    assert [n for n, r in rows.items() if r.firing] == ["entropy_collapse"]
    assert changed == [run.pk]
    logs = RunEvent.objects.filter(run=run, message__startswith="alarm ")
    assert [(e.level, e.message) for e in logs] == [("warning", f"alarm entropy_collapse: "
                                                                f"{fired.message}")]  # fmt: skip
    # judged again at the same step: nothing new
    with django_capture_on_commit_callbacks(execute=True):
        run_alarms_judge(run_id=run.pk)
    assert changed == [run.pk] and logs.count() == 1
    # unarmed, it does not touch the run
    run.refresh_from_db()
    assert (run.state, run.desired_state) == ("running", "running")

    _report(run, 81, 140, lambda s: 1.5)  # the entropy came back
    with django_capture_on_commit_callbacks(execute=True):
        rows = {r.name: r for r in run_alarms_judge(run_id=run.pk)}
    assert not rows["entropy_collapse"].firing and rows["entropy_collapse"].since_step is None
    assert logs.last().message == "alarm entropy_collapse cleared" and changed == [run.pk] * 2


def test_an_armed_alarm_pauses_the_run_through_the_usual_pause(world, member):
    run = _run(member, world.team_a, {"alarms": {"pause_on": ["entropy_collapse"]}})
    _report(run, 1, 80, _collapse)
    run_alarms_judge(run_id=run.pk)
    run.refresh_from_db()
    assert (run.state, run.desired_state) == ("pausing", "paused")  # the job checkpoints next
    audit = AuditEvent.objects.get(action="run.pause", target_id=str(run.pk))
    assert audit.actor is None and audit.data["why"].startswith("alarm entropy_collapse: ")
    # a resumed run is not paused again by the same firing
    run_transition(run=run, to_state="paused")
    assert member.post(f"/api/v1/runs/{run.pk}/resume").status_code == 200
    run_transition(run=run, to_state="running")
    _report(run, 81, 82, _collapse)
    run_alarms_judge(run_id=run.pk)
    run.refresh_from_db()
    assert (run.state, run.desired_state) == ("running", "running")


def test_arming_through_the_api_pauses_a_run_whose_alarm_fires(world, member, client_as):
    run = _run(member, world.team_a)
    _report(run, 1, 80, _collapse)
    run_alarms_judge(run_id=run.pk)
    url = f"/api/v1/runs/{run.pk}/alarms"
    body = member.get(url).json()
    assert body["run_id"] == run.pk
    assert [a["name"] for a in body["alarms"]][:2] == ["entropy_collapse", "kl_drift"]
    entropy = body["alarms"][0]
    assert entropy["firing"] and entropy["pause"] is False and entropy["about"]
    # a viewer may read, not arm; another team sees nothing; a name must be an alarm's
    viewer = client_as(world.users_a[Role.VIEWER])
    assert viewer.get(url).status_code == 200
    assert viewer.post(f"{url}/entropy_collapse", {"pause": True}, format="json").status_code == 403
    other = client_as(world.users_b[Role.OWNER])
    assert other.get(url).status_code == 404
    assert other.post(f"{url}/entropy_collapse", {"pause": True}, format="json").status_code == 404
    bad = member.post(f"{url}/no_such", {"pause": True}, format="json")
    assert (bad.status_code, bad.json()["code"], bad.json()["field"]) == (400, "invalid", "alarm")
    bad = member.post(f"{url}/kl_drift", {"pause": "sometimes"}, format="json")
    assert (bad.status_code, bad.json()["field"]) == (400, "pause")

    armed = member.post(f"{url}/entropy_collapse", {"pause": True}, format="json").json()
    assert armed["alarms"][0]["pause"] is True
    run.refresh_from_db()
    assert run.desired_state == "paused"  # it fires already: paused at once
    assert AuditEvent.objects.filter(action="run.alarm_arm", target_id=str(run.pk)).count() == 1


def test_the_compare_read_and_prometheus(world, member, client_as, launched):
    run = _run(member, world.team_a)
    quiet = _run(member, world.team_a)
    for r, curve in ((run, _collapse), (quiet, lambda s: 1.5)):
        _report(r, 1, 80, curve)
        run_alarms_judge(run_id=r.pk)
    body = member.get("/api/v1/alarms", {"runs": f"{run.pk},{quiet.pk}"}).json()
    assert [r["run_id"] for r in body["runs"]] == [run.pk, quiet.pk]
    firing = {r["run_id"]: [a["name"] for a in r["alarms"] if a["firing"]] for r in body["runs"]}
    assert firing == {run.pk: ["entropy_collapse"], quiet.pk: []}
    by_experiment = member.get("/api/v1/alarms", {"experiment": run.experiment_id}).json()
    assert [r["run_id"] for r in by_experiment["runs"]] == [run.pk]
    theirs = launched[1]["runs"][0]["id"]
    assert member.get("/api/v1/alarms", {"runs": str(theirs)}).status_code == 404
    text = scrape().decode()
    assert 'paddock_alarms_firing{alarm="entropy_collapse"} 1.0' in text
    assert 'paddock_alarms_firing{alarm="kl_drift"} 0.0' in text
    RunAlarm.objects.filter(run=run).update(firing=False)
    assert 'paddock_alarms_firing{alarm="entropy_collapse"} 0.0' in scrape().decode()
