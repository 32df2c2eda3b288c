"""Pools on the control plane (PostgreSQL, the real dispatch code): packing of pooled runs
into pool jobs, membership from join to leave, shares counted in quotas, and the pool job's
two doors (bootstrap, members) with their refusals."""

import time

import pytest

from paddock.clusters.bootstrap_tokens import bootstrap_exchange, bootstrap_token_for
from paddock.clusters.dispatch import dispatch_prepare, quota_refusal
from paddock.clusters.models import Pool, PoolMember
from paddock.clusters.pools import bootstrap_token_for as pool_bootstrap_token
from paddock.clusters.pools import current_members, members_settle
from paddock.clusters.subscribers import run_state_changed
from paddock.experiments.models import Run
from paddock.experiments.states import run_transition
from paddock.teams.models import AuditEvent, Role, TeamQuota
from tests.platform.conftest import TINY_SPEC, launch

pytestmark = pytest.mark.usefixtures("quiet_hooks")


def pooled(pool="auto", weight=1.0, **over):
    spec = {**TINY_SPEC, "resources": {"pool": pool, "pool_weight": weight}}
    spec.update(over)
    return spec


def _run(world, client_as, spec, team="a"):
    users, t = (world.users_a, world.team_a) if team == "a" else (world.users_b, world.team_b)
    reply = launch(client_as(users[Role.MEMBER]), t, spec=spec)
    assert reply.status_code == 201, reply.json()
    return Run.objects.get(pk=reply.json()["runs"][0]["id"])


def _dispatched(run):
    order = dispatch_prepare(run_id=run.pk)
    run.refresh_from_db()
    return order


def test_compatible_runs_share_one_pool_and_others_get_their_own(world, client_as):
    first, second = (_run(world, client_as, pooled()) for _ in range(2))
    o1, o2 = _dispatched(first), _dispatched(second)
    assert first.state == second.state == "dispatching"
    (pool,) = Pool.objects.all()
    assert o1.submission_id == o2.submission_id == f"paddock-pool-{pool.pk}-d1"
    assert o1.entrypoint == "python -m workers.pool.job"
    assert o1.env["PADDOCK_POOL_ID"] == str(pool.pk) and o1.env["PADDOCK_POOL_DISPATCH"] == "1"
    assert o1.env["PADDOCK_BOOTSTRAP_TOKEN"] == pool_bootstrap_token(pool_id=pool.pk, dispatch=1)
    assert "PADDOCK_RUN_ID" not in o1.env
    assert first.ray_submission_id == second.ray_submission_id == pool.ray_submission_id
    assert pool.key["cluster"] == "shared" and pool.name == f"auto_{pool.pk}"
    # another model: no fit, so a pool of its own
    other = _run(world, client_as, pooled(model={"tiny": {"hidden_size": 48}}))
    o3 = _dispatched(other)
    assert Pool.objects.count() == 2 and o3.submission_id != o1.submission_id
    # a run without `resources.pool` keeps its own job
    solo = _run(world, client_as, TINY_SPEC)
    assert _dispatched(solo).submission_id == f"paddock-run-{solo.pk}-d1"
    assert not PoolMember.objects.filter(run=solo).exists()


def test_a_full_pool_makes_the_next_run_start_another(world, client_as, settings):
    settings.PADDOCK_POOL_CAPACITY = 2
    runs = [_run(world, client_as, pooled()) for _ in range(3)]
    sids = [_dispatched(r).submission_id for r in runs]
    assert sids[0] == sids[1] != sids[2]
    assert sorted(p.capacity for p in Pool.objects.all()) == [2, 2]
    # the cluster's declared capacity wins over the setting
    world.cluster.capacity = {"pool_runs": 3}
    world.cluster.save()
    fourth = _run(world, client_as, pooled())
    assert _dispatched(fourth).submission_id == sids[2]  # the second pool still has room


def test_a_named_pool_is_joined_by_name_and_waited_for_when_full(world, client_as, settings):
    settings.PADDOCK_POOL_CAPACITY = 1
    a, b = _run(world, client_as, pooled("sweep")), _run(world, client_as, pooled("sweep"))
    _dispatched(a)
    assert _dispatched(b) is None
    assert b.state == "queued" and b.queued_reason == "waiting for room in pool sweep (1 of 1 runs)"
    misfit = _run(world, client_as, pooled("sweep", model={"tiny": {"hidden_size": 48}}))
    settings.PADDOCK_POOL_CAPACITY = 4
    Pool.objects.filter(name="sweep").update(capacity=4)
    assert _dispatched(misfit) is None
    assert misfit.queued_reason.startswith("pool sweep hosts runs of another key: model.tiny is")
    assert _dispatched(b) is not None and Pool.objects.count() == 1


def test_membership_lifecycle_from_join_to_leave_is_audited(world, client_as):
    run = _run(world, client_as, pooled(weight=3.0))
    mate = _run(world, client_as, pooled(), team="b")
    _dispatched(run), _dispatched(mate)
    pool = Pool.objects.get()
    members = list(current_members(pool.pk))
    assert [(m.run_id, m.run_dispatch, m.weight) for m in members] == [
        (run.pk, 1, 3.0), (mate.pk, 1, 1.0)]  # fmt: skip
    run_transition(run=run, to_state="starting")
    run_transition(run=run, to_state="running")
    run_transition(run=run, to_state="succeeded")
    run_state_changed(run.pk, "succeeded")  # what the hook calls after the commit
    member = PoolMember.objects.get(run=run)
    assert member.left_at is not None and member.left_reason == "the run is succeeded"
    assert [m.run_id for m in current_members(pool.pk)] == [mate.pk]
    audit = AuditEvent.objects.filter(target_id=str(run.pk), action__startswith="pool.")
    assert [(e.action, e.team_id, e.data["pool"]) for e in audit.order_by("id")] == [
        ("pool.join", world.team_a.pk, pool.name),
        ("pool.leave", world.team_a.pk, pool.name),
    ]
    assert members_settle(run_id=run.pk) == 0  # closed once


def test_quota_counts_a_pooled_run_as_its_share_of_the_pool_gpus(world, client_as):
    gpu = {"trainer_gpus": 1, "rollout_gpus": 0}
    spec = {**TINY_SPEC, "resources": {"pool": "auto", **gpu}}
    world.cluster.resources = {}
    world.cluster.save()
    TeamQuota.objects.update_or_create(team=world.team_a, defaults={"max_gpus": 1})
    runs = [_run(world, client_as, spec) for _ in range(2)]
    for r in runs:
        Run.objects.filter(pk=r.pk).update(gpus=1)
        r.refresh_from_db()
    assert _dispatched(runs[0]) is not None
    # alone, the pooled run holds the pool's one GPU: a solo run of 1 GPU would not fit ...
    assert "waiting for GPUs: the team uses 1 of 1" in quota_refusal(run=runs[1])
    # ... but a second member halves it: 0.5 + 0.5 fits the quota of 1
    assert _dispatched(runs[1]) is not None
    assert runs[1].state == "dispatching" and Pool.objects.count() == 1
    # the two members count 0.5 each, 1 in all (not the 2 GPUs their specs ask for)
    solo = _run(world, client_as, {**TINY_SPEC, "resources": gpu})
    Run.objects.filter(pk=solo.pk).update(gpus=1)
    solo.refresh_from_db()
    assert "the team uses 1 of 1 and this run needs 1" in quota_refusal(run=solo)
    TeamQuota.objects.filter(team=world.team_a).update(max_gpus=2)
    assert quota_refusal(run=solo) is None


def test_pool_doors_bootstrap_once_then_list_members_with_their_run_tokens(world, client_as):
    run = _run(world, client_as, pooled())
    _dispatched(run)
    pool = Pool.objects.get()
    api = client_as()
    url = f"/api/v1/pools/{pool.pk}"
    good = {"HTTP_AUTHORIZATION": f"Bearer {pool_bootstrap_token(pool_id=pool.pk, dispatch=1)}"}
    assert api.post(f"{url}/bootstrap", {"dispatch": 1}, format="json").status_code == 401
    wrong = {"HTTP_AUTHORIZATION": f"Bearer {pool_bootstrap_token(pool_id=pool.pk, dispatch=2)}"}
    assert api.post(f"{url}/bootstrap", {"dispatch": 1}, format="json", **wrong).status_code == 401
    assert api.post(f"{url}/bootstrap", {"dispatch": "x"}, format="json", **good).json()[
        "field"] == "dispatch"  # fmt: skip
    reply = api.post(f"{url}/bootstrap", {"dispatch": 1}, format="json", **good)
    assert reply.status_code == 200, reply.json()
    body = reply.json()
    assert body["capacity"] == 4 and body["key"] == pool.key
    assert not Pool.objects.filter(token_hashed=body["token"]).exists()  # only its hash
    again = api.post(f"{url}/bootstrap", {"dispatch": 1}, format="json", **good)
    assert (again.status_code, again.json()["code"]) == (401, "token_spent")
    auth = {"HTTP_AUTHORIZATION": f"Bearer {body['token']}"}
    assert api.get(f"{url}/members?dispatch=1").status_code == 401
    assert api.get(f"{url}/members?dispatch=1", **good).status_code == 401  # not the pool token
    assert api.get(f"{url}/members", **auth).json()["field"] == "dispatch"
    stale = api.get(f"{url}/members?dispatch=2", **auth)
    assert (stale.status_code, stale.json()["code"]) == (409, "dispatch_superseded")
    listed = api.get(f"{url}/members?dispatch=1", **auth).json()
    raw = bootstrap_token_for(run_id=run.pk, dispatch=1)
    assert listed == {"members": [{"run_id": run.pk, "dispatch": 1, "bootstrap_token": raw,
                                   "weight": 1.0}], "stop": False}  # fmt: skip
    bootstrap_exchange(run_id=run.pk, dispatch=1, raw=raw)  # what the job then does
    listed = api.get(f"{url}/members?dispatch=1", **auth).json()
    assert listed["members"][0]["bootstrap_token"] is None
    # the run ends: no member left, the job is told to stop and the pool takes nobody new
    run_transition(run=run, to_state="aborting")
    run_transition(run=run, to_state="aborted")
    assert api.get(f"{url}/members?dispatch=1", **auth).json() == {"members": [], "stop": True}
    assert Pool.objects.get().state == "stopping"
    late = _run(world, client_as, pooled())
    _dispatched(late)
    assert late.ray_submission_id != pool.ray_submission_id and Pool.objects.count() == 2
    Pool.objects.filter(pk=pool.pk).update(state="ended")
    gone = api.get(f"{url}/members?dispatch=1", **auth)
    assert (gone.status_code, gone.json()["code"]) == (409, "pool_ended")


def test_a_run_the_pool_job_cannot_host_is_refused_at_launch(world, client_as):
    spec = {**TINY_SPEC, "resources": {"pool": "auto", "executor": "ray"}}
    reply = launch(client_as(world.users_a[Role.MEMBER]), world.team_a, spec=spec)
    assert reply.status_code == 400
    assert reply.json()["field"] == "spec.resources.pool"
    assert "resources.executor is 'ray'" in reply.json()["message"]


def test_a_pool_job_counts_once_against_the_clusters_free_cpus(world, client_as):
    # the cluster's last report: 2 free CPUs; what was dispatched since is not in it yet
    now = time.time()
    world.cluster.resources = {"nodes": [{"total": {"CPU": 2, "GPU": 0},
                                          "free": {"CPU": 2, "GPU": 0}}],
                               "reported_at": now, "observed_at": now}  # fmt: skip
    world.cluster.save()
    TeamQuota.objects.update_or_create(team=world.team_a, defaults={"max_concurrent_runs": 10})
    members = [_run(world, client_as, pooled()) for _ in range(3)]
    assert all(_dispatched(r) is not None for r in members)  # one pool job: 1 CPU
    solo = _run(world, client_as, TINY_SPEC)
    assert _dispatched(solo) is not None  # the second CPU
    late = _run(world, client_as, TINY_SPEC)
    assert _dispatched(late) is None
    late.refresh_from_db()
    assert late.queued_reason == "waiting for 1 CPU; the cluster shared has 0 free"
