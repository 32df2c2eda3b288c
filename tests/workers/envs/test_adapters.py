"""Environments written for Gymnasium and for verifiers (PyPI packages, installed) run
unchanged: declared by a package's entry points, found by name, played by the local chat
model on the torch engine."""

from __future__ import annotations

import asyncio

import pytest

from workers.adapters.update import AdapterUpdate
from workers.envs import ChatRenderer, EpisodeLimits, EpisodeRunner, GroupProgress
from workers.envs.gym import GymEnvironment
from workers.envs.registry import make_environment
from workers.envs.verifiers_env import VerifiersEnvironment
from workers.names import installed_environments
from workers.policy import LoraPolicy
from workers.rollout import SamplingParams, make_backend
from workers.rollout.eos import eos_token_ids
from workers.spec import EnvSpec, parse_spec


@pytest.fixture(scope="module")
def engine(calc_dir):
    spec = parse_spec({"model": {"path": str(calc_dir)}, "rollout": {"max_new_tokens": 40}})
    policy = LoraPolicy(spec, calc_dir)
    backend = make_backend(spec, calc_dir)
    asyncio.run(backend.load_adapter(AdapterUpdate(0, policy.adapter_tensors())))
    return policy.tokenizer, backend, eos_token_ids(calc_dir, policy.tokenizer.eos_token_id)


def play(engine, env, examples, group_size=4, max_turns=3):
    tok, backend, eos = engine
    runner = EpisodeRunner(
        backend, ChatRenderer(tok, eos, env.tools), env, EpisodeLimits(max_turns, 300, 30.0)
    )

    async def go():
        got = await asyncio.gather(
            *(
                runner.run_group(GroupProgress(f"g{i}", group_size, i, SamplingParams(1.0, 40)), ex)
                for i, ex in enumerate(examples)
            )
        )
        await env.close()
        return got

    return asyncio.run(go())


def test_installed_environments_are_found_by_name(installed_envs):
    names = installed_environments()
    assert {"calculator", "http", "guess-digit", "vf-sums"} <= set(names)
    with pytest.raises(ValueError, match="no environment 'nope' is installed here"):
        asyncio.run(make_environment(EnvSpec(name="nope")))


def test_a_gymnasium_env_runs_unchanged(installed_envs, engine):
    env = asyncio.run(make_environment(EnvSpec(name="guess-digit", args={"tries": 2})))
    assert isinstance(env, GymEnvironment) and env.tools == ()
    train, held = env.examples(3)
    assert len(held) == 3
    groups = play(engine, env, held, max_turns=2)
    tok = engine[0]
    for group in groups:
        first = tok.decode(group.result.prompt_ids)
        assert "Guess my digit (0-9). You have 2 tries." in first
        for state in group.states:
            assert state.finish in ("stop", "truncated")
            assert state.model_turns <= 2
            if state.model_turns == 2:  # the game's hint came back as a user message
                env_turn = [t for t in state.turns if t["role"] == "env"][0]
                assert env_turn["messages"][0]["role"] == "user"
                assert env_turn["messages"][0]["content"].startswith("No. Try ")
            if state.finish == "stop":  # the game ended it: its reward, its verdict
                assert state.reward in (0.0, 1.0) and state.correct == (state.reward == 1.0)


def test_a_verifiers_taskset_runs_unchanged(installed_envs, engine):
    env = asyncio.run(make_environment(EnvSpec(name="vf-sums")))
    assert isinstance(env, VerifiersEnvironment)
    assert [t["function"]["name"] for t in env.tools] == ["add"]
    train, held = env.examples(10)
    assert (len(train), len(held)) == (54, 6)
    groups = play(engine, env, held[:3])
    tools = 0
    for ex, group in zip(held, groups, strict=False):
        for sample, state in zip(group.result.samples, group.states, strict=True):
            tools += state.tool_calls
            for t in state.turns:  # the verifiers tool's answers, or the errors
                for m in t.get("messages", []):
                    assert m["role"] == "tool"
                    assert m["name"] == "add" or m["content"].startswith("error: ")
            if state.finish == "stop":  # scored by the task's own @vf.reward
                boxed = sample.text.split("\\boxed{")[-1].rstrip("}").strip()
                assert state.reward == float(boxed == ex.answer)
    assert tools > 0  # the model called the verifiers tool, which answered
