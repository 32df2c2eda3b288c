"""The HTTP environment client against a real server process (examples/env_server/): a
session's tools, tool calls and verdict; retries of 500s; a slow, a malformed and a dead
server each fail the episode with an error naming the URL, never the run."""

from __future__ import annotations

import ipaddress

import pytest

from workers import http_json
from workers.data.examples import Example
from workers.egress import EgressPolicy
from workers.envs import EpisodeLimits, EpisodeRunner, GroupProgress, parse_tool_calls
from workers.envs.base import ModelTurn
from workers.envs.http_env import EnvServerError, HttpEnvironment
from workers.envs.registry import make_environment
from workers.grants import Grants
from workers.rollout import SamplingParams
from workers.spec import EnvServerSpec, EnvSpec

from ..helpers import EXAMPLES, server_fixture

SERVER = EXAMPLES / "env_server" / "server.py"
EXAMPLE = Example([{"role": "user", "content": "Add 48+39+12."}], "99")


server = server_fixture(SERVER)


@pytest.fixture(autouse=True)
def quick_backoff(monkeypatch):
    monkeypatch.setattr(http_json, "BACKOFF_S", 0.02)


# the reference server listens on loopback, which the egress policy refuses unless allowed
LOOPBACK = Grants(egress=EgressPolicy(allow_networks=(ipaddress.ip_network("127.0.0.0/8"),)))


async def env_for(url: str, **kw) -> HttpEnvironment:
    spec = EnvSpec(name="http", server=EnvServerSpec(url=url, **kw))
    return await make_environment(spec, LOOPBACK)  # type: ignore[return-value]


def turn(text: str, index: int) -> ModelTurn:
    parsed = parse_tool_calls(text, "hermes")
    return ModelTurn(text, parsed.content, parsed.calls, "stop", index)


def call(a: int, b: int) -> str:
    return f'<tool_call>{{"name": "add", "arguments": {{"a": {a}, "b": {b}}}}}</tool_call>'


async def test_a_session_calls_tools_and_is_verified(server):
    srv = server()
    env = await env_for(srv.url)
    assert [t["function"]["name"] for t in env.tools] == ["add"]
    s = await env.start(EXAMPLE, 7)
    assert s.prompt == EXAMPLE.prompt
    first = await s.step(turn(call(48, 39) + '<tool_call>{"name": "mul"}</tool_call>', 0))
    second = await s.step(turn(call(87, 12), 1))
    last = await s.step(turn("\\boxed{99}", 2))
    await s.close()
    await env.close()
    assert [m["content"] for m in first.messages] == [
        "87",
        "error: no tool named 'mul' (offered: add)",  # answered here, never sent
    ]
    assert (first.tool_calls, first.tool_errors, first.done) == (2, 1, False)
    assert second.messages[0]["content"] == "99"
    assert (last.done, last.reward, last.correct) == (True, 1.0, True)
    assert srv.counts()["closed"] == 1


async def test_500s_are_retried(server):
    srv = server("--fail-first", "2")
    env = await env_for(srv.url, max_retries=3)
    s = await env.start(EXAMPLE, 0)
    got = await s.step(turn("\\boxed{98}", 0))
    await env.close()
    assert (got.done, got.reward, got.correct) == (True, 0.0, False)
    assert srv.counts()["requests"] == 4  # two 500s, then seed_session and verify


@pytest.mark.parametrize(
    ("flags", "kw", "error"),
    [
        (("--status", "503"), {"max_retries": 1}, r"failed after 2 attempt\(s\): HTTP 503"),
        (
            ("--delay", "2"),
            {"timeout_s": 0.2, "max_retries": 0},
            r"no reply within timeout_s=0.2 s",
        ),
        (("--malformed",), {}, r"the reply is not JSON"),
        (("--status", "404"), {}, r"HTTP 404"),
    ],
)
async def test_a_bad_server_fails_the_call_naming_it(server, flags, kw, error):
    srv = server(*flags)
    env = await env_for(srv.url, **kw)
    try:
        with pytest.raises(EnvServerError, match=error) as err:
            await env.start(EXAMPLE, 0)
    finally:
        await env.close()
    assert srv.url in str(err.value)


async def test_a_server_dying_mid_episode_fails_the_episodes_not_the_run(server, calc_dir):
    from workers.adapters.update import AdapterUpdate
    from workers.envs import ChatRenderer
    from workers.policy import LoraPolicy
    from workers.rollout import make_backend
    from workers.spec import parse_spec

    spec = parse_spec({"model": {"path": str(calc_dir)}, "rollout": {"max_new_tokens": 40}})
    policy = LoraPolicy(spec, calc_dir)
    backend = make_backend(spec, calc_dir)
    await backend.load_adapter(AdapterUpdate(0, policy.adapter_tensors()))
    srv = server()

    class Dying(HttpEnvironment):
        async def start(self, example, seed):
            session = await super().start(example, seed)
            if srv.proc.poll() is None:
                srv.stop()  # dies once the first session is open
            return session

    env = Dying(EnvServerSpec(url=srv.url, max_retries=1), LOOPBACK)
    await env.load_tools()
    tok = policy.tokenizer
    runner = EpisodeRunner(
        backend, ChatRenderer(tok, [tok.eos_token_id], env.tools), env, EpisodeLimits(3, 100, 10.0)
    )
    group = await runner.run_group(GroupProgress("g", 3, 0, SamplingParams(1.0, 40)), EXAMPLE)
    await env.close()
    assert [s.finish for s in group.states] == ["failed"] * 3
    for state, sample in zip(group.states, group.result.samples, strict=True):
        assert "environment server" in state.error and srv.url in state.error
        assert not any(sample.loss_mask or [])  # no gradient of its own


async def test_the_egress_policy_and_the_secret_hold(server):
    srv = server()
    with pytest.raises(EnvServerError, match="environment server"):
        await make_environment(EnvSpec(name="http", server=EnvServerSpec(url=srv.url)), Grants())
    spec = EnvSpec(name="http", server=EnvServerSpec(url=srv.url, secret="ENV_TOKEN"))
    with pytest.raises(EnvServerError, match="the secret 'ENV_TOKEN' is not set"):
        await make_environment(spec, LOOPBACK)
    env = await make_environment(spec, Grants(secrets={"ENV_TOKEN": "t0k"}, egress=LOOPBACK.egress))
    assert env.headers["Authorization"] == "Bearer t0k"
    await env.close()
