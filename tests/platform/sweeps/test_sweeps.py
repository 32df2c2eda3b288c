"""Sweeps on the control plane (PostgreSQL, the real launch, dispatch and control code):
every member checked before anything is created, members launched `parallel` at a time
into the sweep's own pool, a slot freed by a member's end taken by the next, the early
stopping rule's pause then abort, the GPU-hour budget, a stop, quotas and permissions."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from paddock.clusters.dispatch import dispatch_prepare
from paddock.clusters.models import Pool, PoolMember
from paddock.experiments.models import ConfigVersion, Experiment, MetricPoint, Run
from paddock.experiments.states import run_transition
from paddock.sweeps.controller import sweep_advance
from paddock.sweeps.models import Sweep, SweepMember
from paddock.teams.models import AuditEvent, Role, TeamQuota
from tests.platform.conftest import TINY_SPEC, launch

pytestmark = pytest.mark.usefixtures("quiet_hooks")
GRID = {"lora.r": [8, 16], "train.lr": [1e-3, 3e-3], "seed": [0, 1]}


def create(client, team, **extra):
    body = {"team": team.pk, "name": "rank x lr", "spec": TINY_SPEC, "method": "grid",
            "params": GRID, "parallel": 2, **extra}  # fmt: skip
    return client.post("/api/v1/sweeps", body, format="json")


def _made(world, client_as, **extra) -> Sweep:
    reply = create(client_as(world.users_a[Role.MEMBER]), world.team_a, **extra)
    assert reply.status_code == 201, reply.json()
    return Sweep.objects.get(pk=reply.json()["id"])


def _members(sweep) -> list[SweepMember]:
    return list(sweep.members.select_related("run").order_by("index"))


def _to(run, *states):
    for state in states:
        run_transition(run=run, to_state=state)


def _report(run, key, values, first_step=1):
    for i, value in enumerate(values):
        MetricPoint.objects.create(run=run, key=key, step=first_step + i, time=0.0, value=value)
    Run.objects.filter(pk=run.pk).update(step=first_step + len(values) - 1)


def test_a_grid_sweep_checks_every_member_and_launches_parallel_of_them(world, client_as):
    reply = create(client_as(world.users_a[Role.MEMBER]), world.team_a)
    assert reply.status_code == 201, reply.json()
    body = reply.json()
    sweep = Sweep.objects.get(pk=body["id"])
    assert (body["state"], body["parallel"], body["budget"]) == (
        "running", 2, {"members": 8, "gpu_hours": None})  # fmt: skip
    assert [m["state"] for m in body["members"]] == ["active"] * 2 + ["pending"] * 6
    assert body["members"][1]["settings"] == {"lora.r": 8, "train.lr": 1e-3, "seed": 1}
    runs = list(Run.objects.filter(experiment=sweep.experiment).order_by("id"))
    assert [r.state for r in runs] == ["queued", "queued"]
    assert [m["run"]["id"] for m in body["members"][:2]] == [r.pk for r in runs]
    for member in _members(sweep):  # each member's own spec, in the sweep's own pool
        spec = member.config.spec
        assert spec["lora"]["r"] == member.settings["lora.r"]
        assert spec["train"]["lr"] == member.settings["train.lr"]
        assert spec["seed"] == member.settings["seed"]
        assert spec["resources"]["pool"] == f"sweep-{sweep.pk}"
        assert member.config.parent_id == sweep.experiment.config_id
    assert runs[1].seed == 1 and runs[1].config.spec["seed"] == 1
    assert sweep.experiment.config.spec["resources"]["pool"] is None  # the base as given
    actions = AuditEvent.objects.filter(team=world.team_a, action__startswith="sweep.")
    assert sorted(actions.values_list("action", flat=True)) == [
        "sweep.create", "sweep.member_launch", "sweep.member_launch"]  # fmt: skip


def test_a_member_that_does_not_validate_is_refused_naming_the_key_and_the_member(world, client_as):
    client = client_as(world.users_a[Role.MEMBER])
    reply = create(client, world.team_a, params={"lora.r": [8, 0], "train.lr": [1e-3]})
    assert reply.status_code == 400
    body = reply.json()
    assert (body["code"], body["field"]) == ("sweep_member_invalid", "params.lora.r")
    assert body["message"].startswith("params.lora.r: member 1 (lora.r=0, train.lr=0.001):")
    assert [e["member"] for e in body["errors"]] == [1]
    # nothing was created: no experiment, no config version, no run, no sweep
    assert not (Experiment.objects.exists() or ConfigVersion.objects.exists()
                or Run.objects.exists() or Sweep.objects.exists())  # fmt: skip
    # a key that would split the members over base models
    reply = create(client, world.team_a, params={"model.dtype": ["float32", "bfloat16"]})
    assert reply.status_code == 400
    body = reply.json()
    assert (body["code"], body["field"]) == ("sweep_member_invalid", "params.model.dtype")
    assert "changes model.dtype, part of the pool key" in body["message"]
    # an unknown key is the spec's refusal, named as the swept key
    reply = create(client, world.team_a, params={"lora.rank": [8, 16]})
    assert (reply.status_code, reply.json()["field"]) == (400, "params.lora.rank")


def test_a_swept_path_is_held_to_the_allowed_roots_member_by_member(
    world, client_as, settings, tmp_path
):
    settings.PADDOCK_DATA_ROOTS = [str(tmp_path)]
    spec = {**TINY_SPEC, "data": {"task": "jsonl", "path": str(tmp_path / "a.jsonl")}}
    params = {"data.path": [str(tmp_path / "b.jsonl"), "/etc/elsewhere.jsonl"]}
    reply = create(client_as(world.users_a[Role.MEMBER]), world.team_a, spec=spec,
                   params=params)  # fmt: skip
    assert reply.status_code == 400
    body = reply.json()
    assert (body["code"], body["field"]) == ("sweep_member_invalid", "params.data.path")
    assert [(e["member"], e["code"]) for e in body["errors"]] == [(1, "path_not_allowed")]
    assert not Sweep.objects.exists()


@pytest.mark.parametrize(
    ("extra", "code", "field"),
    [
        ({"budget": {"members": 4}}, "invalid", "budget.members"),
        ({"method": "random"}, "required", "budget.members"),
        (
            {"early_stopping": {"rule": "median", "min_steps": 5}},
            "invalid",
            "early_stopping.min_steps",
        ),  # TINY_SPEC trains 5 steps: it could never stop one
        (
            {"early_stopping": {"rule": "threshold", "min_steps": 2}},
            "invalid",
            "early_stopping.threshold",
        ),
        ({"metric": "reward mean"}, "invalid", "metric"),
        ({"params": {"lora.r": {"min": 4, "max": 8}}}, "invalid", "params.lora.r"),
        (
            {"spec": {**TINY_SPEC, "resources": {"pool": "auto", "release_on_pause": True}}},
            "invalid",
            "spec.resources.pool",
        ),
        ({"parallel": 0}, "invalid", "parallel"),
    ],
)
def test_a_bad_sweep_is_refused_naming_the_field(world, client_as, extra, code, field):
    reply = create(client_as(world.users_a[Role.MEMBER]), world.team_a, **extra)
    assert reply.status_code == 400, reply.json()
    assert (reply.json()["code"], reply.json()["field"]) == (code, field)
    assert not Sweep.objects.exists()


def test_validate_only_reports_the_members_and_creates_nothing(world, client_as):
    client = client_as(world.users_a[Role.MEMBER])
    reply = create(client, world.team_a, method="random", budget={"members": 3},
                   params={"train.lr": {"min": 1e-4, "max": 1e-2, "log": True}},
                   validate_only=True)  # fmt: skip
    assert reply.status_code == 200
    body = reply.json()
    assert body["valid"] and body["parallel"] == 2 and len(body["members"]) == 3
    again = create(client, world.team_a, method="random", budget={"members": 3},
                   params={"train.lr": {"min": 1e-4, "max": 1e-2, "log": True}},
                   validate_only=True).json()  # fmt: skip
    assert again["members"] == body["members"]  # the same draws for the same seed
    bad = create(client, world.team_a, params={"lora.r": [0]}, validate_only=True).json()
    assert not bad["valid"] and bad["errors"][0]["field"] == "params.lora.r"
    assert not (Sweep.objects.exists() or Experiment.objects.exists())


def test_members_share_the_sweeps_pool_and_a_slot_freed_is_taken_by_the_next(
    world, client_as, settings
):
    settings.PADDOCK_POOL_CAPACITY = 1
    sweep = _made(world, client_as, parallel=2, params={"lora.r": [8, 16, 32]})
    first, second, third = _members(sweep)
    assert dispatch_prepare(run_id=first.run_id) is not None
    # the pool has one place: the second member's run waits for it, through placement
    assert dispatch_prepare(run_id=second.run_id) is None
    second.run.refresh_from_db()
    assert second.run.queued_reason == f"waiting for room in pool sweep-{sweep.pk} (1 of 1 runs)"
    (pool,) = Pool.objects.all()
    assert pool.name == f"sweep-{sweep.pk}" and pool.team_id == world.team_a.pk
    _to(first.run, "starting", "running", "succeeded")
    sweep = sweep_advance(sweep_id=sweep.pk)
    first, second, third = _members(sweep)
    assert (first.state, second.state, third.state) == ("done", "active", "active")
    assert third.run is not None and third.run.state == "queued"
    PoolMember.objects.filter(run_id=first.run_id).update(left_at=timezone.now())
    assert dispatch_prepare(run_id=second.run_id) is not None  # the freed place
    for m in (second, third):
        Run.objects.filter(pk=m.run_id).update(state="aborted")
    assert sweep_advance(sweep_id=sweep.pk).state == "finished"
    assert AuditEvent.objects.filter(action="sweep.finish", target_id=str(sweep.pk)).exists()


def test_early_stopping_pauses_then_aborts_the_member_and_launches_the_next(world, client_as):
    rule = {"rule": "threshold", "min_steps": 2, "threshold": 0.5}
    sweep = _made(world, client_as, parallel=2, params={"lora.r": [8, 16, 32]},
                  early_stopping=rule)  # fmt: skip
    low, high, waiting = _members(sweep)
    for m in (low, high):
        _to(m.run, "dispatching", "starting", "running")
    _report(low.run, "reward/mean", [0.1, 0.2])  # never reached 0.5 by step 2
    _report(high.run, "reward/mean", [0.3, 0.7])
    sweep_advance(sweep_id=sweep.pk)
    low, high, waiting = _members(sweep)
    assert (low.state, high.state, waiting.state) == ("stopping", "active", "pending")
    assert low.reason == "reward/mean: threshold at step 2: its best 0.2 is still below 0.5"
    assert low.stopped_step == 2
    # the normal control path: a pause first (the job checkpoints), audited with the reason
    assert (low.run.state, low.run.desired_state) == ("pausing", "paused")
    pause = AuditEvent.objects.get(action="run.pause", target_id=str(low.run_id))
    assert pause.actor is None and pause.data["why"].startswith("sweep: reward/mean: threshold")
    sweep_advance(sweep_id=sweep.pk)  # nothing new: it waits for the pause
    assert Run.objects.get(pk=low.run_id).desired_state == "paused"
    _to(low.run, "paused")  # the job reported paused after its checkpoint
    sweep_advance(sweep_id=sweep.pk)
    low.run.refresh_from_db()
    assert (low.run.state, low.run.desired_state) == ("aborting", "aborted")
    _to(low.run, "aborted")
    sweep_advance(sweep_id=sweep.pk)
    low, high, waiting = _members(sweep)
    assert (low.state, high.state, waiting.state) == ("stopped", "active", "active")
    stop = AuditEvent.objects.get(action="sweep.member_stop")
    assert stop.data == {"member": 0, "run": low.run_id, "reason": low.reason}
    # the rule judged high once at step 2; without a new step it is not read again
    assert high.evaluated_step == 2
    detail = client_as(world.users_a[Role.VIEWER]).get(f"/api/v1/sweeps/{sweep.pk}").json()
    assert [m["is_best"] for m in detail["members"]] == [False, True, False]
    assert [(m["best"], m["last"]) for m in detail["members"]] == [
        (0.2, 0.2), (0.7, 0.7), (None, None)]  # fmt: skip
    assert detail["counts"] == {"pending": 0, "active": 2, "stopping": 0, "stopped": 1,
                                "done": 0, "skipped": 0}  # fmt: skip


def test_a_pause_that_never_comes_is_followed_by_an_abort_after_the_grace(
    world, client_as, settings
):
    """A job that stopped answering (its run stuck in pausing) must not hold the slot."""
    rule = {"rule": "threshold", "min_steps": 1, "threshold": 0.5}
    sweep = _made(world, client_as, parallel=1, params={"lora.r": [8, 16]}, early_stopping=rule)
    stuck, waiting = _members(sweep)
    _to(stuck.run, "dispatching", "starting", "running")
    _report(stuck.run, "reward/mean", [0.1])
    sweep_advance(sweep_id=sweep.pk)
    stuck.run.refresh_from_db()
    assert stuck.run.state == "pausing"
    sweep_advance(sweep_id=sweep.pk)  # within the grace: it waits for the job
    stuck.run.refresh_from_db()
    assert stuck.run.desired_state == "paused"
    settings.PADDOCK_ABORT_GRACE_S = 5
    Run.objects.filter(pk=stuck.run_id).update(state_since=timezone.now() - timedelta(seconds=6))
    sweep_advance(sweep_id=sweep.pk)
    stuck.run.refresh_from_db()
    assert (stuck.run.state, stuck.run.desired_state) == ("aborting", "aborted")
    abort = AuditEvent.objects.get(action="run.abort", target_id=str(stuck.run_id))
    assert abort.data["why"].endswith("the pause did not come within 5 s")
    _to(stuck.run, "aborted")  # what reconcile does to a job that does not answer either
    sweep_advance(sweep_id=sweep.pk)
    stuck, waiting = _members(sweep)
    assert (stuck.state, waiting.state) == ("stopped", "active")


def test_the_gpu_hour_budget_stops_the_sweep_counting_pool_shares(world, client_as):
    gpu = {**TINY_SPEC, "resources": {"trainer_gpus": 1}}
    sweep = _made(world, client_as, spec=gpu, parallel=2, params={"lora.r": [8, 16, 32]},
                  budget={"gpu_hours": 1.0})  # fmt: skip
    first, second, _ = _members(sweep)
    for m in (first, second):
        assert dispatch_prepare(run_id=m.run_id) is not None  # both in the sweep's pool
        _to(m.run, "starting", "running")
    sweep = sweep_advance(sweep_id=sweep.pk)
    assert sweep.gpus_now == pytest.approx(1.0)  # two halves of the pool's one GPU
    # an hour and a half at that rate: the budget is spent
    Sweep.objects.filter(pk=sweep.pk).update(accounted_at=timezone.now() - timedelta(hours=1.5))
    sweep = sweep_advance(sweep_id=sweep.pk)
    assert sweep.state == "stopping" and sweep.gpu_seconds >= 1.5 * 3600
    assert sweep.end_reason.startswith("its budget of 1 GPU-hours is spent")
    assert [m.state for m in _members(sweep)] == ["stopping", "stopping", "skipped"]
    assert {r.desired_state for r in Run.objects.filter(experiment=sweep.experiment)} == {"paused"}


def test_a_stop_skips_the_pending_and_stops_the_runs(world, client_as):
    sweep = _made(world, client_as, parallel=2, params={"lora.r": [8, 16, 32]})
    viewer = client_as(world.users_a[Role.VIEWER])
    assert viewer.post(f"/api/v1/sweeps/{sweep.pk}/stop").status_code == 403
    member = client_as(world.users_a[Role.MEMBER])
    reply = member.post(f"/api/v1/sweeps/{sweep.pk}/stop")
    assert reply.status_code == 200 and reply.json()["state"] == "stopping"
    assert reply.json()["end_reason"] == "stopped by a-member"
    # queued runs had nothing to checkpoint: aborted at once
    assert {r.state for r in Run.objects.filter(experiment=sweep.experiment)} == {"aborted"}
    sweep = sweep_advance(sweep_id=sweep.pk)
    assert sweep.state == "finished"
    assert [m.state for m in _members(sweep)] == ["stopped", "stopped", "skipped"]
    again = member.post(f"/api/v1/sweeps/{sweep.pk}/stop")
    assert (again.status_code, again.json()["code"]) == (409, "sweep_finished")


def test_a_sweep_is_held_to_the_teams_quota(world, client_as):
    TeamQuota.objects.filter(team=world.team_a).update(max_concurrent_runs=1, max_queued_runs=1)
    client = client_as(world.users_a[Role.MEMBER])
    reply = create(client, world.team_a, parallel=3, params={"lora.r": [8, 16, 32]})
    assert (reply.status_code, reply.json()["code"]) == (409, "quota_exceeded")
    sweep = _made(world, client_as, parallel=2, params={"lora.r": [8, 16, 32]})
    first, _, third = _members(sweep)
    assert launch(client, world.team_a).status_code == 409  # the sweep's 2 runs fill it
    _to(first.run, "aborted")
    other = launch(client, world.team_a)  # another launch takes the freed place first
    assert other.status_code == 201
    sweep_advance(sweep_id=sweep.pk)
    third.refresh_from_db()
    assert third.state == "pending" and third.run is None
    assert third.reason.startswith("the team has 2 active runs; 1 more would pass its limit")
    Run.objects.filter(pk=other.json()["runs"][0]["id"]).update(state="aborted")
    sweep_advance(sweep_id=sweep.pk)
    third.refresh_from_db()
    assert third.state == "active" and third.reason == ""


def test_a_sweep_is_held_to_its_launching_users_quota_too(world, client_as, settings):
    settings.PADDOCK_USER_MAX_CONCURRENT_RUNS = 1
    settings.PADDOCK_USER_MAX_QUEUED_RUNS = 1
    client = client_as(world.users_a[Role.MEMBER])
    reply = create(client, world.team_a, parallel=3, params={"lora.r": [8, 16, 32]})
    assert (reply.status_code, reply.json()["code"]) == (409, "quota_exceeded")
    assert "over all your teams" in reply.json()["message"]
    assert create(client, world.team_a, parallel=2, params={"lora.r": [8, 16]}).status_code == 201


def test_another_team_sees_nothing_of_a_sweep(world, client_as):
    sweep = _made(world, client_as)
    other = client_as(world.users_b[Role.OWNER])
    for method, path in [("get", f"/api/v1/sweeps/{sweep.pk}"),
                         ("post", f"/api/v1/sweeps/{sweep.pk}/stop")]:  # fmt: skip
        reply = getattr(other, method)(path)
        assert (reply.status_code, reply.json()["code"]) == (404, "not_found")
    assert other.get("/api/v1/sweeps").json()["results"] == []
    mine = client_as(world.users_a[Role.VIEWER]).get("/api/v1/sweeps").json()["results"]
    assert [s["id"] for s in mine] == [sweep.pk]
    # creating in a team one is not in: not found; as a viewer: forbidden
    assert create(other, world.team_a).status_code == 404
    assert create(client_as(world.users_a[Role.VIEWER]), world.team_a).status_code == 403
    assert Sweep.objects.get().state == "running"
