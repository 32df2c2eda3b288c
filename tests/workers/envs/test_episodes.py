"""Episodes on the torch engine with the calculator environment: their tokens are the
model's template turn by turn, the environment's tokens are masked (no gradient, the loss a
hand-built reference), and a stop between turns resumes the same episode."""

from __future__ import annotations

import asyncio
import math
import pickle

import pytest
import torch

from workers.adapters.update import AdapterUpdate
from workers.envs import ChatRenderer, EpisodeLimits, EpisodeRunner, GroupProgress
from workers.envs.calculator import Calculator
from workers.grpo.loss import LossInputs, grpo_loss
from workers.policy import LoraPolicy, TrainSample, collate
from workers.rollout import SamplingParams, make_backend
from workers.rollout.eos import eos_token_ids
from workers.spec import parse_spec

PARAMS = SamplingParams(1.0, 40)
LIMITS = EpisodeLimits(max_turns=5, max_episode_tokens=240, step_timeout_s=30.0)


@pytest.fixture(scope="module")
def world(calc_dir):
    spec = parse_spec(
        {
            "model": {"path": str(calc_dir)},
            "lora": {"r": 8, "alpha": 16, "target_modules": ["q_proj", "v_proj"]},
            "rollout": {"backend": "torch", "max_new_tokens": 40},
            "env": {"name": "calculator", "max_turns": 5},
            "data": {"task": "environment"},
            "reward": {"functions": [{"name": "boxed_match"}]},
            "train": {"micro_batch_size": 64, "threads": 1},
        }
    )
    policy = LoraPolicy(spec, calc_dir)
    backend = make_backend(spec, calc_dir)
    asyncio.run(backend.load_adapter(AdapterUpdate(0, policy.adapter_tensors())))
    env = Calculator()
    tok = policy.tokenizer
    renderer = ChatRenderer(tok, eos_token_ids(calc_dir, tok.eos_token_id), env.tools)
    train, _ = env.examples(8)
    return spec, policy, backend, env, renderer, train


def run_groups(world, n_groups=4, group_size=4, env=None, stopping=lambda: False):
    _, _, backend, calc, renderer, train = world
    runner = EpisodeRunner(backend, renderer, env or calc, LIMITS, "hermes", stopping)
    progress = [GroupProgress(f"g{i}", group_size, 100 + i, PARAMS) for i in range(n_groups)]

    async def go():
        return await asyncio.gather(
            *(runner.run_group(p, train[i]) for i, p in enumerate(progress))
        )

    return asyncio.run(go()), progress


@pytest.fixture(scope="module")
def episodes(world):
    groups, _ = run_groups(world)
    return groups


def test_an_episode_is_the_template_turn_by_turn_with_the_environment_masked(world, episodes):
    *_, renderer, train = world
    multi = 0
    for g, group in enumerate(episodes):
        assert group.result.prompt_ids == renderer.prompt_ids(train[g].prompt)
        for sample, state in zip(group.result.samples, group.states, strict=True):
            mask = sample.loss_mask or [1] * len(sample.token_ids)
            assert len(mask) == len(sample.token_ids) == len(sample.logprobs)
            spans = state.turns
            assert spans[0]["start"] == 0 and spans[-1]["end"] == len(sample.token_ids)
            for turn, after in zip(spans, spans[1:], strict=False):
                assert turn["end"] == after["start"]  # the turns tile the episode
            for k, turn in enumerate(spans):
                toks = sample.token_ids[turn["start"] : turn["end"]]
                span = mask[turn["start"] : turn["end"]]
                if turn["role"] == "model":
                    assert set(span) <= {1}
                    continue
                assert set(span) <= {0}  # the environment's tokens: no loss
                assert sample.logprobs[turn["start"] : turn["end"]] == [0.0] * len(toks)
                assert sample.versions[turn["start"] : turn["end"]] == [-1] * len(toks)
                if toks:  # exactly what the template puts after the model's turn
                    prev = spans[k - 1]
                    ended = renderer.ended_on_eos(sample.token_ids[prev["start"] : prev["end"]])
                    assert toks == renderer.answer_ids(turn["messages"], ended)
                    text = renderer.tokenizer.decode(toks)
                    assert text.endswith("<|im_start|>assistant\n")
                    for m in turn["messages"]:
                        assert f"<|im_start|>tool\n{m['content']}<|im_end|>" in text
            if state.model_turns > 1:
                multi += 1
                assert state.tool_calls >= 1 and sample.loss_mask is not None
            # the last model reply is what rewards read
            last = [t for t in spans if t["role"] == "model"][-1]
            assert sample.text == last["text"]
    assert multi > 0  # the sampled model calls the tool in some episodes


def test_the_calculator_answers_with_the_sums_and_counts_errors(episodes):
    for group in episodes:
        for state in group.states:
            for turn in state.turns:
                if turn["role"] != "env":
                    continue
                assert turn["tool_calls"] == len(turn["messages"])
                errors = sum(m["content"].startswith("error:") for m in turn["messages"])
                assert errors == turn["tool_errors"]


def _samples(episodes) -> list[TrainSample]:
    out = []
    for g, group in enumerate(episodes):
        for s, sample in enumerate(group.result.samples):
            adv = (-1.0) ** (g + s) * (0.5 + 0.1 * s)
            out.append(
                TrainSample(
                    group.result.prompt_ids,
                    sample.token_ids,
                    sample.logprobs,
                    sample.versions,
                    adv,
                    sample.loss_mask,
                )  # fmt: skip
            )
    return out


def test_environment_tokens_get_no_gradient(world, episodes):
    spec, policy, *_ = world
    batch = collate(_samples(episodes), policy.tokenizer.pad_token_id)
    lp, _ = policy.token_logprobs(batch, share_prompts=False)
    lp.retain_grad()
    loss, _ = grpo_loss(LossInputs(lp, batch.lp_roll, batch.advantages, batch.mask), spec.algorithm)
    loss.backward()
    env = (batch.resp_attn == 1) & (batch.mask == 0)
    assert env.any()
    assert torch.all(lp.grad[env] == 0)
    assert torch.all(lp.grad[batch.mask == 0] == 0)
    assert (lp.grad[batch.mask == 1] != 0).float().mean() > 0.5
    policy.model.zero_grad(set_to_none=True)


def test_the_loss_is_the_hand_built_reference_over_the_model_tokens(world, episodes):
    """The trainer's step (prompt-sharing forward, environment tokens attended but not
    scored) reports the loss a plain forward and a loop over the model's own spans give."""
    spec, policy, *_ = world
    samples = _samples(episodes)
    model = policy.model
    lo, hi = 1 - spec.algorithm.clip_eps_low, 1 + spec.algorithm.clip_eps_high
    total, count = 0.0, 0
    with torch.no_grad():
        for g, group in enumerate(episodes):
            for s, state in enumerate(group.states):
                ts = samples[g * len(group.states) + s]
                ids = torch.tensor([ts.prompt_ids + ts.response_ids])
                logits = model(input_ids=ids).logits[0].float() / spec.rollout.temperature
                logp = torch.log_softmax(logits, dim=-1)
                p = len(ts.prompt_ids)
                for turn in state.turns:
                    if turn["role"] != "model":
                        continue
                    for t in range(turn["start"], turn["end"]):
                        lp = logp[p + t - 1, ts.response_ids[t]].item()
                        ratio = math.exp(lp - ts.lp_roll[t])
                        a = ts.advantage
                        total += max(-a * ratio, -a * min(max(ratio, lo), hi))
                        count += 1
    reference = total / count  # token_mean over the model's tokens only
    batch = collate(samples, policy.tokenizer.pad_token_id)
    assert policy.shares_prompts(batch)  # the forward that attends through resp_attn
    metrics = policy.train_step(policy.adapter, batch)
    assert metrics["loss/policy"] == pytest.approx(reference, rel=1e-4, abs=1e-6)


class GatedCalculator(Calculator):
    """The calculator, whose answer to turn 0 of one episode waits for the test."""

    def __init__(self):
        super().__init__()
        self.entered, self.gate = asyncio.Event(), asyncio.Event()

    async def start(self, example, seed):
        session = await super().start(example, seed)
        env = self

        class Gated(type(session)):
            async def step(self, turn):
                if turn.index == 0 and turn.calls and not env.gate.is_set():
                    env.entered.set()
                    await env.gate.wait()
                return await super().step(turn)

        session.__class__ = Gated
        return session


def test_a_stop_between_turns_resumes_the_same_episode(world):
    """Stopped while an episode waits on its environment, the group keeps its progress
    (picklable: it is checkpointed with the buffer); a fresh session replays the recorded
    replies and the episodes end as an uninterrupted run's."""
    whole, _ = run_groups(world, n_groups=1, group_size=10)
    assert any(s.model_turns > 1 for s in whole[0].states)  # a tool call in turn 0

    gated, stop = GatedCalculator(), []

    async def stop_when_waiting():
        await gated.entered.wait()
        stop.append(True)
        gated.gate.set()

    *_, backend, _, renderer, train = world
    runner = EpisodeRunner(backend, renderer, gated, LIMITS, "hermes", lambda: bool(stop))
    progress = GroupProgress("g0", 10, 100, PARAMS)

    async def cut():
        watcher = asyncio.ensure_future(stop_when_waiting())
        got = await runner.run_group(progress, train[0])
        watcher.cancel()
        return got

    assert asyncio.run(cut()) is None  # stopped: nothing to score yet
    assert any(not s.done for s in progress.episodes)
    kept = pickle.loads(pickle.dumps(progress))
    resumed = EpisodeRunner(backend, renderer, Calculator(), LIMITS, "hermes")
    done = asyncio.run(resumed.run_group(kept, train[0]))
    assert done is not None
    assert [s.token_ids for s in done.result.samples] == [
        s.token_ids for s in whole[0].result.samples
    ]
    assert [s.loss_mask for s in done.result.samples] == [
        s.loss_mask for s in whole[0].result.samples
    ]
