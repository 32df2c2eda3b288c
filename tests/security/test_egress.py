"""Outbound URLs from a spec (docs/security.md, "Outbound URLs"): the reward-service client
against a real listener on 127.0.0.1 that records every request reaching it. Loopback is
refused unless the operator allows it; with it allowed, a redirect to loopback or to the
cloud metadata address is refused, not followed; a reply's body never reaches the run's
error; a spec cannot make the job send a worker's environment variable anywhere."""

from __future__ import annotations

import ipaddress
import json

import pytest

from paddock.experiments.models import Run
from paddock.teams.models import Role
from tests.platform.conftest import TINY_SPEC, launch
from tests.security.listener import Listener, Reply, Seen
from workers.egress import EgressPolicy, EgressRefused
from workers.grants import Grants
from workers.rewards import RewardServiceError, ScoreItem, make_scorer
from workers.spec import RewardSpec, spec_errors

LOOPBACK = EgressPolicy(allow_networks=(ipaddress.ip_network("127.0.0.1/32"),))
BODY_MARK = "internal-body-7f3a"  # what an internal service answers; must not reach an error


def _reward_service(seen: Seen) -> Reply:
    base = f"http://127.0.0.1:{seen.headers['Host'].rpartition(':')[2]}"
    if seen.path == "/to-loopback":
        return Reply(307, headers={"Location": f"{base}/score"})
    if seen.path == "/to-metadata":
        return Reply(307, headers={"Location": "http://169.254.169.254/latest/meta-data/"})
    if seen.path == "/leak":
        return Reply(int(seen.query.removeprefix("status=")), BODY_MARK.encode())
    if seen.path == "/not-json":
        return Reply(200, BODY_MARK.encode())
    return Reply(200, {"rewards": [1.0] * len(json.loads(seen.body)["items"])})


@pytest.fixture
def listener():
    srv = Listener(_reward_service)
    yield srv
    srv.stop()


def service(url: str, grants: Grants, **kw):
    spec = RewardSpec.model_validate({"functions": [{"name": "service", "url": url, **kw}]})
    return make_scorer(spec, grants)


ITEMS = [ScoreItem("1+1?", "2", "2")]


async def test_loopback_is_refused_unless_the_operator_allows_it(listener):
    with pytest.raises(RewardServiceError, match=r"127\.0\.0\.1 is a loopback address"):
        service(f"{listener.base}/score", Grants(egress=EgressPolicy()))
    # a name that resolves to loopback is refused where it resolves, before any connection
    named = listener.base.replace("127.0.0.1", "localhost")
    scorer = service(f"{named}/score", Grants(egress=EgressPolicy()), max_retries=0)
    with pytest.raises(RewardServiceError, match=r"localhost resolves to .*loopback"):
        await scorer.score(ITEMS)
    assert listener.seen == []
    got = await service(f"{listener.base}/score", Grants(egress=LOOPBACK)).score(ITEMS)
    assert got[0].reward == 1.0 and [s.path for s in listener.seen] == ["/score"]


@pytest.mark.parametrize("hop", ["/to-loopback", "/to-metadata"])
async def test_a_redirect_is_refused_not_followed(listener, hop):
    scorer = service(f"{listener.base}{hop}", Grants(egress=LOOPBACK), max_retries=3)
    with pytest.raises(RewardServiceError, match=r"HTTP 307, a redirect; redirects are not"):
        await scorer.score(ITEMS)
    assert [s.path for s in listener.seen] == [hop]  # once: not retried, /score never reached


@pytest.mark.parametrize(("path", "status"), [("/leak?status=500", 500), ("/leak?status=403", 403),
                                              ("/not-json", 200)])  # fmt: skip
async def test_a_reply_body_never_reaches_the_error(listener, path, status):
    scorer = service(f"{listener.base}{path}", Grants(egress=LOOPBACK), max_retries=0)
    with pytest.raises(RewardServiceError) as err:
        await scorer.score(ITEMS)
    assert BODY_MARK not in str(err.value)
    assert "127.0.0.1" in str(err.value)
    if status != 200:
        assert f"HTTP {status}" in str(err.value)


async def test_a_spec_cannot_send_a_worker_environment_variable(listener, monkeypatch):
    # the worker's own credentials: Compose and the KubeRay chart put them on every node
    monkeypatch.setenv("RAY_AUTH_TOKEN", "ray-token-of-the-cluster")
    monkeypatch.setenv("REWARD_TOKEN", "operator-variable")
    errors = spec_errors({"reward": {"functions": [
        {"name": "service", "url": f"{listener.base}/score", "headers_secret": "RAY_AUTH_TOKEN"}
    ]}})  # fmt: skip
    assert [e["field"] for e in errors] == ["reward.functions.0.headers_secret"]
    assert "secret: NAME" in errors[0]["message"]
    # under the platform a run has the secrets of its bootstrap, none of the environment's
    for name in ("RAY_AUTH_TOKEN", "REWARD_TOKEN"):
        with pytest.raises(RewardServiceError, match=rf"the secret '{name}' is not set"):
            service(f"{listener.base}/score", Grants(egress=LOOPBACK), secret=name)
    team = Grants(secrets={"judge": "team-secret-value"}, egress=LOOPBACK)
    await service(f"{listener.base}/score", team, secret="judge").score(ITEMS)
    sent = json.dumps([s.headers for s in listener.seen])
    assert "team-secret-value" in sent
    assert "ray-token-of-the-cluster" not in sent and "operator-variable" not in sent


@pytest.mark.parametrize(
    ("url", "rule"),
    [
        ("http://169.254.169.254/latest/meta-data/", "cloud metadata"),
        ("http://[fd00:ec2::254]/", "cloud metadata"),
        ("http://10.1.2.3:8080/", "private"),
        ("http://192.168.0.10/", "private"),
        ("http://100.64.0.1/", "private"),  # shared (CGNAT) space
        ("http://[::ffff:127.0.0.1]:8080/", "loopback"),
        ("http://[fe80::1]/", "link-local"),
        ("http://0.0.0.0:8080/", "not a unicast"),
        ("http://224.0.0.1/", "not a unicast"),
        ("http://93.184.215.14:22/", "port 22 is not allowed"),
        ("ftp://93.184.215.14/", "only http and https"),
        ("http://user:pw@93.184.215.14/", "credentials"),
    ],
)
def test_the_policy_refuses(url, rule):
    with pytest.raises(EgressRefused, match=rule):
        EgressPolicy().check_url(url)


def test_the_operator_setting():
    policy = EgressPolicy.from_env({
        "PADDOCK_EGRESS_ALLOW_NETWORKS": "10.0.0.0/8, 169.254.0.0/16",
        "PADDOCK_EGRESS_PORTS": "443,8000-8999",
    })  # fmt: skip
    assert policy.check_url("https://10.1.2.3/").host == "10.1.2.3"
    assert policy.check_url("http://10.1.2.3:8123/").port == 8123
    with pytest.raises(EgressRefused, match="port 80"):
        policy.check_url("http://10.1.2.3/")
    # a metadata address stays refused inside an allowed network unless named on its own
    with pytest.raises(EgressRefused, match="cloud metadata"):
        policy.check_url("https://169.254.169.254/")
    named = EgressPolicy.from_env({"PADDOCK_EGRESS_ALLOW_NETWORKS": "169.254.169.254"})
    assert named.check_url("http://169.254.169.254/").host == "169.254.169.254"
    assert EgressPolicy.from_env(policy.to_env()) == policy  # what dispatch hands a job
    for bad in ({"PADDOCK_EGRESS_ALLOW_NETWORKS": "10.0.0.0/33"}, {"PADDOCK_EGRESS_PORTS": "0"}):
        with pytest.raises(ValueError, match="PADDOCK_EGRESS"):
            EgressPolicy.from_env(bad)


@pytest.mark.parametrize(
    ("terms", "field"),
    [
        ([{"name": "service", "url": "http://169.254.169.254/latest/meta-data/"}],
         "spec.reward.functions.0.url"),
        ([{"name": "exact_match"}, {"name": "service", "url": "http://10.0.0.8:8080/score"}],
         "spec.reward.functions.1.url"),
        ([{"name": "service", "url": "https://rewards.example.com:22/"}],
         "spec.reward.functions.0.url"),
    ],
)  # fmt: skip
def test_a_launch_naming_a_refused_url_fails_naming_the_field(world, client_as, terms, field):
    before = Run.objects.count()
    spec = {**TINY_SPEC, "reward": {"functions": terms}}
    reply = launch(client_as(world.users_a[Role.MEMBER]), world.team_a, spec=spec)
    assert reply.status_code == 400, reply.json()
    assert (reply.json()["code"], reply.json()["field"]) == ("url_not_allowed", field)
    assert Run.objects.count() == before


def test_an_allowed_network_launches(world, client_as, settings):
    settings.PADDOCK_EGRESS = EgressPolicy.from_env({"PADDOCK_EGRESS_ALLOW_NETWORKS": "10.0.0.0/8"})
    spec = {
        **TINY_SPEC,
        "reward": {"functions": [{"name": "service", "url": "http://10.0.0.8:8080/"}]},
    }
    reply = launch(client_as(world.users_a[Role.MEMBER]), world.team_a, spec=spec)
    assert reply.status_code == 201, reply.json()
