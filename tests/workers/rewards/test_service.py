"""The reward-service client against a real server process: the reference service of
examples/reward_service/, started on a free port with its fault-injection flags."""

from __future__ import annotations

import ipaddress
import socket
import time

import pytest

from workers import http_json
from workers.egress import EgressPolicy
from workers.grants import Grants
from workers.rewards import RewardServiceError, ScoreItem, make_scorer
from workers.rewards import service as service_mod
from workers.spec import RewardSpec, spec_errors

from ..helpers import EXAMPLES, server_fixture

SERVER = EXAMPLES / "reward_service" / "server.py"


server = server_fixture(SERVER)


@pytest.fixture(autouse=True)
def quick_backoff(monkeypatch):
    monkeypatch.setattr(http_json, "BACKOFF_S", 0.05)


# the reference server listens on loopback, which the egress policy refuses unless allowed
LOOPBACK = EgressPolicy(allow_networks=(ipaddress.ip_network("127.0.0.0/8"),))


def scorer(url: str, secrets: dict[str, str] | None = None, **kw):
    spec = {"functions": [{"name": "service", "url": url, **kw}]}
    grants = Grants(secrets=secrets or {}, egress=LOOPBACK)
    return make_scorer(RewardSpec.model_validate(spec), grants)


def items(n: int) -> list[ScoreItem]:
    # even items right (\boxed{i}), odd ones wrong
    return [
        ScoreItem(f"{i}?", rf"so \boxed{{{i if i % 2 == 0 else i + 1}}}", str(i), {"i": i})
        for i in range(n)
    ]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def test_batches_rewards_and_details(server):
    srv = server()
    s = scorer(srv.url, batch_size=3)
    got = await s.score(items(7))
    assert [g.reward for g in got] == [1.0, 0.0, 1.0, 0.0, 1.0, 0.0, 1.0]
    assert [g.correct for g in got] == [True, False, True, False, True, False, True]
    assert got[2].details["service"] == {"extracted": "2"}
    assert srv.requests() == 3  # 7 items in batches of 3


async def test_500s_then_success_are_retried(server):
    srv = server("--fail-first", "2")
    s = scorer(srv.url, max_retries=3)
    got = await s.score(items(2))
    assert [g.reward for g in got] == [1.0, 0.0]
    assert srv.requests() == 3


async def test_always_500_fails_naming_the_service_and_the_status(server):
    srv = server("--status", "503")
    s = scorer(srv.url, max_retries=2)
    with pytest.raises(RewardServiceError) as err:
        await s.score(items(2))
    msg = str(err.value)
    assert srv.url in msg and "HTTP 503" in msg and "3 attempt(s)" in msg
    assert srv.requests() == 3


async def test_a_4xx_is_not_retried(server):
    srv = server("--status", "422")
    with pytest.raises(RewardServiceError, match=r"HTTP 422"):
        await scorer(srv.url, max_retries=5).score(items(1))
    assert srv.requests() == 1


async def test_a_slow_answer_hits_the_deadline(server):
    srv = server("--delay", "3")
    s = scorer(srv.url, timeout_s=0.3, max_retries=1)
    t0 = time.monotonic()
    with pytest.raises(RewardServiceError, match=r"no reply within timeout_s=0.3 s") as err:
        await s.score(items(1))
    assert time.monotonic() - t0 < 2.5  # two attempts of 0.3 s, not the server's 3 s
    assert srv.url in str(err.value)


async def test_a_malformed_body_is_an_error(server):
    srv = server("--malformed")
    with pytest.raises(RewardServiceError, match=r"not JSON") as err:
        await scorer(srv.url).score(items(2))
    assert srv.url in str(err.value)


async def test_a_wrong_number_of_rewards_is_an_error(server):
    srv = server("--wrong-length")
    with pytest.raises(RewardServiceError, match=r"1 rewards for a batch of 2 items"):
        await scorer(srv.url).score(items(2))


async def test_a_dead_port_fails_after_the_retries():
    url = f"http://127.0.0.1:{free_port()}/score"
    with pytest.raises(RewardServiceError) as err:
        await scorer(url, max_retries=2).score(items(1))
    msg = str(err.value)
    assert url in msg and "3 attempt(s)" in msg and "Connect" in msg


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b'{"rewards": [1.0, NaN]}', r"rewards\[1\] is nan"),
        (b'{"rewards": [1.0, "1"]}', r"rewards\[1\] is '1'"),
        (b'{"rewards": [true, 1]}', r"rewards\[0\] is True"),
        (b'{"scores": [1, 1]}', r'no "rewards" list'),
        (b'{"rewards": [1, 1], "details": [{}]}', r'"details" must be a list of 2'),
        (b'{"rewards": [1, 1], "details": [{}, 3]}', r"details\[1\] is not an object"),
    ],
)
def test_bad_replies_are_named(body, message):
    with pytest.raises(RewardServiceError, match=message):
        service_mod.parse_reply("http://x", body, 2)


async def test_the_token_comes_from_the_named_team_secret(server, monkeypatch):
    srv = server("--token", "s3cret")
    monkeypatch.setenv("rm_token", "s3cret")  # an environment variable is never read
    with pytest.raises(RewardServiceError, match=r"the secret 'rm_token' is not set"):
        scorer(srv.url, secret="rm_token")  # at the start, not at step 1
    with pytest.raises(RewardServiceError, match=r"HTTP 401"):
        await scorer(srv.url, {"rm_token": "wrong"}, secret="rm_token").score(items(1))
    got = await scorer(srv.url, {"rm_token": "s3cret"}, secret="rm_token").score(items(1))
    assert got[0].reward == 1.0
    headers = {"rm_token": '{"Authorization": "Bearer s3cret"}'}
    got = await scorer(srv.url, headers, secret="rm_token").score(items(1))
    assert got[0].reward == 1.0


def test_paddock_train_reads_a_secret_from_its_own_variable_only(monkeypatch):
    spec = RewardSpec.model_validate(
        {"functions": [{"name": "service", "url": "http://127.0.0.1:8123", "secret": "rm-key"}]}
    )
    monkeypatch.setenv("PADDOCK_EGRESS_ALLOW_NETWORKS", "127.0.0.1/32")
    monkeypatch.setenv("rm-key", "x")
    with pytest.raises(RewardServiceError, match=r"PADDOCK_SECRET_RM_KEY"):
        make_scorer(spec)
    monkeypatch.setenv("PADDOCK_SECRET_RM_KEY", "s3cret")
    assert make_scorer(spec).terms[0].headers["Authorization"] == "Bearer s3cret"


def test_a_bad_secret_value_is_not_echoed():
    with pytest.raises(RewardServiceError) as err:
        scorer("http://127.0.0.1:1", {"rm": '{"X-Key": 12345}'}, secret="rm")
    assert "12345" not in str(err.value)


@pytest.mark.parametrize(
    ("term", "field"),
    [
        ({"url": "file:///etc/passwd"}, "reward.functions.0.url"),
        ({"url": "http://x", "timeout_s": 0}, "reward.functions.0.timeout_s"),
        ({"url": "http://x", "batch_size": 0}, "reward.functions.0.batch_size"),
        ({"url": "http://x", "max_retries": -1}, "reward.functions.0.max_retries"),
        ({"url": "http://x", "secret": "Bearer abc"}, "reward.functions.0.secret"),
        ({"url": "http://x", "headers_secret": "TOKEN"}, "reward.functions.0.headers_secret"),
        ({}, "reward.functions.0.url"),
    ],
)
def test_bad_service_settings_are_reported_by_path(term, field):
    errors = spec_errors({"reward": {"functions": [{"name": "service", **term}]}})
    assert [e["field"] for e in errors] == [field]
