"""Team secrets (docs/security.md#secrets): named objects of one team, stored encrypted,
write-only through the API, shown masked, audited by name; a spec names one, the launch
checks the team has it, and a run's job receives at bootstrap the secrets its own spec names
and none other (a pooled run's, its own team's). End to end: a reward service on an allowed
host, behind a team secret, scores a run's samples through the job's own bootstrap."""

from __future__ import annotations

import asyncio

import pytest

from paddock.clusters.bootstrap_tokens import bootstrap_exchange, bootstrap_token_for
from paddock.clusters.dispatch import dispatch_prepare
from paddock.clusters.models import Pool
from paddock.core.errors import DomainError
from paddock.experiments.launch import experiment_launch
from paddock.teams.models import AuditEvent, Role, TeamSecret
from paddock.teams.secret_box import SecretUnreadable, secret_open
from paddock.teams.team_secrets import team_secret_set
from tests.platform.conftest import TINY_SPEC, launch
from tests.workers.helpers import EXAMPLES, ExampleServer
from workers.bootstrap import bootstrap
from workers.egress import EgressPolicy
from workers.rewards import ScoreItem, make_scorer
from workers.spec import parse_spec

VALUE = "tok-3f9a-very-secret-value-0042"
JUDGE = {"name": "service", "url": "https://rewards.example.com/score", "secret": "judge"}


def _spec(**resources) -> dict:
    return {**TINY_SPEC, "reward": {"functions": [JUDGE]},
            **({"resources": resources} if resources else {})}  # fmt: skip


def _put(client, team, name, value):
    return client.put(f"/api/v1/teams/{team.pk}/secrets/{name}", {"value": value}, format="json")


def test_a_secret_is_write_only_masked_and_audited_by_name(world, client_as):
    admin = client_as(world.users_a[Role.ADMIN])
    reply = _put(admin, world.team_a, "judge", VALUE)
    assert reply.status_code == 201, reply.json()
    assert reply.json()["masked"] == "••••0042" and VALUE not in reply.content.decode()
    assert _put(admin, world.team_a, "judge", VALUE + "x").status_code == 200  # replaced
    for role in (Role.VIEWER, Role.MEMBER, Role.ADMIN):
        listed = client_as(world.users_a[role]).get(f"/api/v1/teams/{world.team_a.pk}/secrets")
        assert [s["name"] for s in listed.json()] == ["judge"]
        assert VALUE not in listed.content.decode()
    # only admins write; another team finds nothing
    assert _put(client_as(world.users_a[Role.MEMBER]), world.team_a, "x", "v").status_code == 403
    other = client_as(world.users_b[Role.OWNER])
    assert other.get(f"/api/v1/teams/{world.team_a.pk}/secrets").status_code == 404
    assert _put(other, world.team_a, "judge", "mine now").status_code == 404
    assert other.delete(f"/api/v1/teams/{world.team_a.pk}/secrets/judge").status_code == 404
    # at rest: sealed, not the value; in the audit log: the name, not the value
    row = TeamSecret.objects.get(team=world.team_a, name="judge")
    assert VALUE not in row.sealed
    events = AuditEvent.objects.filter(team=world.team_a, target_type="secret")
    assert [e.action for e in events.order_by("id")] == ["secret.create", "secret.update"]
    assert all(e.data == {"name": "judge"} for e in events)
    assert admin.delete(f"/api/v1/teams/{world.team_a.pk}/secrets/judge").status_code == 204
    assert AuditEvent.objects.filter(action="secret.delete").count() == 1


@pytest.mark.parametrize("name", ["1abc", "a b", "a" * 65, "RAY_AUTH_TOKEN/x"])
def test_a_bad_name_is_refused_naming_the_field(world, client_as, name):
    reply = _put(client_as(world.users_a[Role.ADMIN]), world.team_a, name, "v")
    assert reply.status_code in (400, 404), reply.content
    if reply.status_code == 400:
        assert reply.json()["field"] == "name"


def test_the_sealed_value_is_bound_to_its_team_name_and_key(world, settings):
    secret, _ = team_secret_set(actor=world.actor(world.users_a[Role.ADMIN]),
                                team=world.team_a, name="judge", value=VALUE)  # fmt: skip
    assert secret_open(team_id=world.team_a.pk, name="judge", sealed=secret.sealed) == VALUE
    for team_id, name in ((world.team_b.pk, "judge"), (world.team_a.pk, "other")):
        with pytest.raises(SecretUnreadable):
            secret_open(team_id=team_id, name=name, sealed=secret.sealed)
    settings.SECRET_KEY = "another deployment key"
    with pytest.raises(SecretUnreadable):
        secret_open(team_id=world.team_a.pk, name="judge", sealed=secret.sealed)


def test_a_launch_names_only_secrets_of_its_own_team(world, client_as):
    team_secret_set(actor=world.actor(world.users_b[Role.ADMIN]), team=world.team_b,
                    name="judge", value=VALUE)  # fmt: skip
    member = client_as(world.users_a[Role.MEMBER])
    reply = launch(member, world.team_a, spec=_spec())
    assert reply.status_code == 400, reply.json()
    assert reply.json()["code"] == "secret_missing"
    assert reply.json()["field"] == "spec.reward.functions.0.secret"
    team_secret_set(actor=world.actor(world.users_a[Role.ADMIN]), team=world.team_a,
                    name="judge", value="a's own")  # fmt: skip
    assert launch(member, world.team_a, spec=_spec()).status_code == 201


def test_an_environment_servers_secret_and_url_are_checked_like_a_reward_services(world, client_as):
    env = {"name": "http", "server": {"url": "https://env.example.com/", "secret": "env-key"}}
    spec = {**TINY_SPEC, "env": env}
    member = client_as(world.users_a[Role.MEMBER])
    reply = launch(member, world.team_a, spec=spec)
    assert (reply.json()["code"], reply.json()["field"]) == (
        "secret_missing", "spec.env.server.secret")  # fmt: skip
    team_secret_set(actor=world.actor(world.users_a[Role.ADMIN]), team=world.team_a,
                    name="env-key", value=VALUE)  # fmt: skip
    inside = {**env, "server": {**env["server"], "url": "http://169.254.169.254/"}}
    reply = launch(member, world.team_a, spec={**spec, "env": inside})
    assert (reply.json()["code"], reply.json()["field"]) == (
        "url_not_allowed", "spec.env.server.url")  # fmt: skip
    assert launch(member, world.team_a, spec=spec).status_code == 201


def _dispatched(world, team, users, spec):
    run = experiment_launch(actor=world.actor(users[Role.OWNER]), team=team, name="e",
                            spec=spec).runs[0]  # fmt: skip
    assert dispatch_prepare(run_id=run.pk) is not None
    run.refresh_from_db()
    return run


def _bootstrap(run):
    raw = bootstrap_token_for(run_id=run.pk, dispatch=run.dispatch_count)
    return bootstrap_exchange(run_id=run.pk, dispatch=run.dispatch_count, raw=raw)


@pytest.mark.usefixtures("quiet_hooks")
def test_a_job_receives_its_runs_secrets_only_and_a_pool_mate_its_own(world):
    for team, users, value in ((world.team_a, world.users_a, "value of a"),
                               (world.team_b, world.users_b, "value of b")):  # fmt: skip
        actor = world.actor(users[Role.ADMIN])
        team_secret_set(actor=actor, team=team, name="judge", value=value)
        team_secret_set(actor=actor, team=team, name="unused", value=f"{value}, unnamed")
    mine = _dispatched(world, world.team_a, world.users_a, _spec(pool="auto"))
    theirs = _dispatched(world, world.team_b, world.users_b, _spec(pool="auto"))
    assert Pool.objects.count() == 1  # one pool job hosts both
    assert _bootstrap(mine).secrets == {"judge": "value of a"}
    assert _bootstrap(theirs).secrets == {"judge": "value of b"}
    plain = _dispatched(world, world.team_a, world.users_a, TINY_SPEC)
    assert _bootstrap(plain).secrets == {}


@pytest.mark.usefixtures("quiet_hooks")
def test_a_secret_deleted_since_the_launch_refuses_the_bootstrap_naming_it(world):
    actor = world.actor(world.users_a[Role.ADMIN])
    secret, _ = team_secret_set(actor=actor, team=world.team_a, name="judge", value=VALUE)
    run = _dispatched(world, world.team_a, world.users_a, _spec())
    secret.delete()
    with pytest.raises(DomainError) as refused:
        _bootstrap(run)
    assert refused.value.code == "secret_missing" and "'judge'" in refused.value.message
    # the bootstrap token was not spent: once the secret is set again, the job starts
    team_secret_set(actor=actor, team=world.team_a, name="judge", value=VALUE)
    assert _bootstrap(run).secrets == {"judge": VALUE}


@pytest.mark.integration
@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("quiet_hooks")
def test_a_reward_service_behind_a_team_secret_works_end_to_end(
    paddock_server, world, settings, monkeypatch
):
    """The reference reward service on loopback (allowed by the operator), requiring the
    team's token: the job's own bootstrap (workers.bootstrap) over HTTP gives it the secret, its
    environment the policy dispatch set, and its scorer gets rewards back."""
    srv = ExampleServer(EXAMPLES / "reward_service" / "server.py", "--token", VALUE)
    try:
        settings.PADDOCK_EGRESS = EgressPolicy.from_env(
            {"PADDOCK_EGRESS_ALLOW_NETWORKS": "127.0.0.1/32"}
        )
        team_secret_set(actor=world.actor(world.users_a[Role.ADMIN]), team=world.team_a,
                        name="judge", value=VALUE)  # fmt: skip
        spec = {**TINY_SPEC, "reward": {"functions": [{**JUDGE, "url": srv.url}]}}
        run = experiment_launch(actor=world.actor(world.users_a[Role.MEMBER]),
                                team=world.team_a, name="e", spec=spec).runs[0]  # fmt: skip
        order = dispatch_prepare(run_id=run.pk)
        for key, value in order.env.items():  # the job's environment, as dispatch set it
            monkeypatch.setenv(key, value)
        job = bootstrap(
            paddock_server.url, run.pk, order.dispatch, order.env["PADDOCK_BOOTSTRAP_TOKEN"]
        )
        scorer = make_scorer(parse_spec(job.spec).reward, job.grants)
        items = [ScoreItem("1+1?", r"\boxed{2}", "2"), ScoreItem("2+2?", r"\boxed{5}", "4")]
        got = asyncio.run(scorer.score(items))
        assert [g.reward for g in got] == [1.0, 0.0]
        assert srv.requests() == 1
    finally:
        srv.stop()
