"""One contract, every backend that runs here: torch, vLLM (its real CPU build) and the
TensorRT-LLM backend on its stand-in engine.

Adapters are the trainer's own (a LoraPolicy whose lora_B is set from a seed per version),
so "the engine's logprobs agree with a trainer forward of the same adapter" is checked the
way training uses it: token_mult_prob_error = mean exp(|lp_roll − lp_trainer|) ≤ 1.01.
tests/workers/gpu/test_vllm_backend.py runs the same tests against vLLM on a GPU, in bf16.
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
import pytest_asyncio
import torch

from workers.adapters.update import AdapterUpdate
from workers.loop.executor import LocalExecutor
from workers.policy import LoraPolicy, TrainSample, collate
from workers.rollout.base import GroupRequest, GroupResult, SamplingParams
from workers.rollout.engine_process import EngineProcess
from workers.rollout.torch_engine import TorchBackend

from ..helpers import Parked
from .conftest import engine_spec

pytestmark = pytest.mark.asyncio(loop_scope="session")

PROMPTS = ["12+34=", "7+8=", "40+41="]
# vLLM accepts temperatures up to 2; with the wild adapters of versions >= WILD the tiny model
# then rarely stops early, so a pause lands mid-generation (160 tokens: the static decoder
# makes 50 within the 50 ms `generating` waits on a quiet machine).
LONG = SamplingParams(temperature=2.0, max_new_tokens=160)
WILD = 4
# mean exp|Δ| a token, engine against trainer: fp32 here; the GPU run of these tests sets
# bf16's 1.05 (NeMo-RL's guard)
MULT_PROB_TOL = 1.01
LONG_N = {"torch": 48, "vllm": 48, "trtllm": 8}  # samples per prompt of the batches a pause
# must interrupt (the stand-in decodes one request at a time, without a KV cache: slow)


class Trainer:
    """The trainer side: a policy whose adapter for version v is a fixed function of v."""

    def __init__(self, tiny_dir: Path):
        self.spec = engine_spec(tiny_dir, "torch")
        self.policy = LoraPolicy(self.spec, tiny_dir)
        self.tok = self.policy.tokenizer

    def set_version(self, version: int) -> None:
        gen = torch.Generator().manual_seed(1000 + version)
        with torch.no_grad():
            for name, p in self.policy.model.named_parameters():
                if "lora_B" in name:
                    p.copy_(
                        torch.randn(p.shape, generator=gen) * (1.0 if version >= WILD else 0.05)
                    )
        self.policy.adapter.version = version

    async def update(self, version: int) -> AdapterUpdate:
        self.set_version(version)
        return await LocalExecutor(self.policy).adapter_update()

    def ids(self, text: str) -> list[int]:
        return self.tok.encode(text, add_special_tokens=False)

    @torch.no_grad()
    def logprobs(self, results: list[GroupResult], temperature: float) -> list[list[float]]:
        samples = [
            TrainSample(r.prompt_ids, s.token_ids, s.logprobs, s.versions, 0.0)
            for r in results
            for s in r.samples
            if s.token_ids
        ]
        batch = collate(samples, self.tok.pad_token_id).to(self.policy.device)
        spec = self.policy.spec.model_copy(
            update={
                "rollout": self.policy.spec.rollout.model_copy(update={"temperature": temperature})
            }
        )
        self.policy.model.eval()
        lp, _ = self.policy.token_logprobs(batch, spec=spec)
        return [lp[i, : len(s.response_ids)].tolist() for i, s in enumerate(samples)]


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def trainer(tiny_dir: Path) -> Trainer:
    return Trainer(tiny_dir)


async def serve(engine, trainer: Trainer, version: int) -> None:
    update = await trainer.update(version)
    await engine.pause("wait")
    try:
        assert await engine.load_adapter(update) == version
    finally:
        await engine.resume()
    assert engine.served_version == version


def requests(trainer: Trainer, params: SamplingParams, n: int = 4, seed: int = 0, tag: str = ""):
    return [
        GroupRequest(f"{tag}g{i}", trainer.ids(p), n, seed + i, params)
        for i, p in enumerate(PROMPTS)
    ]


def mult_prob_error(results: list[GroupResult], trainer_lp: list[list[float]]) -> float:
    engine_lp = [s.logprobs for r in results for s in r.samples if s.token_ids]
    diffs = [
        math.exp(abs(a - b))
        for e, t in zip(engine_lp, trainer_lp, strict=True)
        for a, b in zip(e, t, strict=True)
    ]
    return sum(diffs) / len(diffs)


def check_shapes(results: list[GroupResult], reqs: list[GroupRequest]) -> None:
    assert [r.request_id for r in results] == [q.request_id for q in reqs]
    for r, q in zip(results, reqs, strict=True):
        assert len(r.samples) == q.n
        for s in r.samples:
            assert len(s.token_ids) == len(s.logprobs) == len(s.versions)
            assert len(s.token_ids) <= q.params.max_new_tokens
            assert all(lp <= 0 for lp in s.logprobs)


async def until(made: Callable[[], Awaitable[int]], at_least: int) -> None:
    """Until `made()` reaches `at_least` (bounded, for a hang; not a delay)."""
    async with asyncio.timeout(120):
        while await made() < at_least:
            await asyncio.sleep(0.01)


async def generating(engine, reqs, monkeypatch) -> tuple[asyncio.Task, Callable[[], None]]:
    """Start a generate call and return once its rows are decoding, with the call and what
    lets the decode go on. The in-process torch engine is held between two decode steps
    once every row has its first token, and its rows ignore EOS, so every row is still in
    flight when the test's pause, abort or load lands (`release` lets it go on after);
    the other engines decode on their own (vLLM, the stand-in, the engine process) and are
    waited for until their first tokens, which leaves the rest of the 160-token budget."""
    n = sum(r.n for r in reqs)
    if isinstance(engine, TorchBackend):
        monkeypatch.setattr(engine, "eos_ids", frozenset())
        start = engine.tokens_streamed
        held = Parked(engine, lambda: engine.tokens_streamed >= start + n)
        task = asyncio.create_task(engine.generate(reqs))
        await held.reached()
        return task, held.release
    if isinstance(engine, EngineProcess):
        made = lambda: engine._channel.call("tokens")  # noqa: E731
    elif engine.name == "vllm":
        made = lambda: _now(engine.tokens_streamed)  # noqa: E731
    else:  # the stand-in decodes on this event loop
        made = lambda: _now(sum(engine.engine.llm.tokens_out.values()))  # noqa: E731
    start = await made()
    task = asyncio.create_task(engine.generate(reqs))
    await until(made, start + 1)
    assert not task.done(), "generation finished before the test could interrupt it"
    return task, lambda: None


async def _now(value: int) -> int:
    return value


# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("temperature", [1.0, 0.7])
async def test_logprobs_match_a_trainer_forward(engine, trainer, temperature):
    await serve(engine, trainer, 1)
    params = SamplingParams(temperature=temperature, max_new_tokens=8)
    reqs = requests(trainer, params, tag=f"lp{temperature}")
    results = await engine.generate(reqs)
    check_shapes(results, reqs)
    assert all(s.done for r in results for s in r.samples)
    assert {v for r in results for s in r.samples for v in s.versions} == {1}
    err = mult_prob_error(results, trainer.logprobs(results, temperature))
    assert err <= MULT_PROB_TOL, f"{engine.name}: token_mult_prob_error {err}"


async def test_n_samples_eos_and_max_new_tokens(engine, trainer):
    await serve(engine, trainer, 1)
    short = SamplingParams(temperature=2.0, max_new_tokens=2)
    reqs = requests(trainer, short, n=5, tag="short")
    results = await engine.generate(reqs)
    check_shapes(results, reqs)
    eos = trainer.tok.eos_token_id
    for s in (s for r in results for s in r.samples):
        if s.finish_reason == "length":
            assert len(s.token_ids) == 2
        else:
            assert s.finish_reason == "stop" and s.token_ids[-1] == eos  # EOS is kept
    assert any(s.finish_reason == "length" for r in results for s in r.samples)


async def test_stop_strings(engine, trainer):
    """A stop string ends a sample where it first appears, and changes nothing before it:
    the same seeded requests without the stop are the reference (the stop string is the
    character most reference samples hold, so that a random model stops some samples
    whatever it favours)."""
    await serve(engine, trainer, 1)
    free = SamplingParams(temperature=2.0, max_new_tokens=12)
    refs = [
        s for r in await engine.generate(requests(trainer, free, n=6, tag="ref")) for s in r.samples
    ]
    seen = Counter(c for s in refs for c in set(s.text))
    assert seen, "every reference sample is empty"
    stop = max(seen, key=lambda c: (seen[c], c))
    params = SamplingParams(temperature=2.0, max_new_tokens=12, stop=(stop,))
    got = [
        s
        for r in await engine.generate(requests(trainer, params, n=6, tag="stop"))
        for s in r.samples
    ]
    stopped = 0
    for ref, s in zip(refs, got, strict=True):
        cut = ref.text.find(stop)
        if cut < 0:
            assert (s.text, s.token_ids) == (ref.text, ref.token_ids)
            continue
        assert s.text == ref.text[: cut + 1] and s.finish_reason == "stop", (stop, ref, s)
        assert s.token_ids == ref.token_ids[: len(s.token_ids)]
        stopped += 1
    assert stopped == seen[stop] > 0


async def test_seeds_reproduce(engine, trainer):
    await serve(engine, trainer, 1)
    params = SamplingParams(temperature=2.0, max_new_tokens=8)
    a = await engine.generate(requests(trainer, params, seed=11, tag="seed-a"))
    b = await engine.generate(requests(trainer, params, seed=11, tag="seed-b"))
    c = await engine.generate(requests(trainer, params, seed=99, tag="seed-c"))

    def tokens(rs):
        return [s.token_ids for r in rs for s in r.samples]

    assert tokens(a) == tokens(b)
    assert tokens(a) != tokens(c)
    assert len({tuple(t) for t in tokens(a)}) > 1  # a group's samples differ from each other


async def test_version_handshake(engine, trainer):
    await serve(engine, trainer, 2)
    results = await engine.generate(requests(trainer, SamplingParams(max_new_tokens=4), tag="v2"))
    assert {v for r in results for s in r.samples for v in s.versions} == {2}
    # An adapter that does not produce the trainer's probe logprobs is never acknowledged
    # (the torch engine needs no probe, loading the trainer's tensors as they are, but
    # checks one that an update carries all the same).
    update = await trainer.update(3)
    wrong = dataclasses.replace(
        update,
        probe=dataclasses.replace(update.probe, logprobs=[x - 0.2 for x in update.probe.logprobs]),
    )
    await engine.pause("wait")
    with pytest.raises(RuntimeError, match="version handshake"):
        await engine.load_adapter(wrong)
    await engine.resume()
    assert engine.served_version == 2
    with pytest.raises(RuntimeError, match="unusable"):
        await engine.generate(requests(trainer, SamplingParams(max_new_tokens=4), tag="x"))
    await serve(engine, trainer, 3)  # a version that passes the handshake heals it
    if not isinstance(engine, EngineProcess):  # (the proxy keeps no record of them)
        assert engine.handshakes[-1]["version"] == 3


async def test_pause_abort_returns_partials_that_resubmit(engine, trainer, monkeypatch):
    await serve(engine, trainer, 4)
    reqs = requests(trainer, LONG, n=LONG_N[engine.name], tag="abort")
    task, release = await generating(engine, reqs, monkeypatch)
    await engine.pause("abort")
    release()
    results = await task
    check_shapes(results, reqs)
    cut = [s for r in results for s in r.samples if s.finish_reason == "abort"]
    assert cut, "the abort cut nothing short"
    # While paused in abort mode, a submission comes back at once, unfinished.
    again = await asyncio.wait_for(engine.generate(reqs[:1]), 5)
    assert again[0].aborted
    await engine.resume()
    resumed = await engine.generate([r.resubmission(q) for r, q in zip(results, reqs, strict=True)])
    check_shapes(resumed, reqs)
    for before, after in zip(results, resumed, strict=True):
        for s0, s1 in zip(before.samples, after.samples, strict=True):
            assert s1.done
            assert s1.token_ids[: len(s0.token_ids)] == s0.token_ids  # the partial is kept
            assert s1.logprobs[: len(s0.logprobs)] == s0.logprobs
    err = mult_prob_error(resumed, trainer.logprobs(resumed, LONG.temperature))
    assert err <= MULT_PROB_TOL


async def test_abort_returns_partials(engine, trainer, monkeypatch):
    await serve(engine, trainer, 4)
    reqs = requests(trainer, LONG, n=LONG_N[engine.name], tag="abort-call")
    task, release = await generating(engine, reqs, monkeypatch)
    partial = await engine.abort()
    release()
    results = await task
    assert partial and all(r.aborted for r in partial)
    assert {r.request_id for r in partial} == {r.request_id for r in results if r.aborted}
    # not paused: a new call runs normally
    done = await engine.generate(requests(trainer, SamplingParams(max_new_tokens=4), tag="after"))
    assert all(s.done for r in done for s in r.samples)


async def test_pause_keep_continues_in_flight_under_the_new_version(engine, trainer, monkeypatch):
    await serve(engine, trainer, 5)
    reqs = requests(trainer, LONG, n=LONG_N[engine.name], tag="keep")
    task, release = await generating(engine, reqs, monkeypatch)
    await engine.pause("keep")
    release()
    assert not task.done()  # frozen, not ended
    update = await trainer.update(6)
    assert await engine.load_adapter(update) == 6
    await engine.resume()
    results = await task
    check_shapes(results, reqs)
    assert all(s.done for r in results for s in r.samples)  # nothing was cut short
    versions = [s.versions for r in results for s in r.samples]
    assert all(v == sorted(v) and set(v) <= {5, 6} for v in versions)
    assert any(5 in v for v in versions) and any(6 in v for v in versions)
    # Each token's logprob is that of a trainer forward of the version that sampled it: the
    # engine recomputes a kept request's KV cache under the new adapter (torch re-prefills
    # the prefix, vLLM resets its prefix cache with running requests, the TensorRT-LLM
    # emulation resubmits). On the old KV cache the tokens after the switch would come from
    # neither version (mean exp|Δ| ≈ 2.4 here, with adapters far apart).
    trainer.set_version(5)
    lp5 = trainer.logprobs(results, LONG.temperature)
    trainer.set_version(6)
    lp6 = trainer.logprobs(results, LONG.temperature)
    samples = [s for r in results for s in r.samples if s.token_ids]
    diffs = [
        math.exp(abs(s.logprobs[t] - (lp5 if s.versions[t] == 5 else lp6)[i][t]))
        for i, s in enumerate(samples)
        for t in range(len(s.token_ids))
    ]
    assert sum(diffs) / len(diffs) <= MULT_PROB_TOL


async def test_pause_wait_lets_in_flight_finish_and_holds_new(engine, trainer, monkeypatch):
    await serve(engine, trainer, 7)
    reqs = requests(trainer, LONG, n=LONG_N[engine.name], tag="wait")
    task, release = await generating(engine, reqs, monkeypatch)
    release()  # wait lets the rows in flight finish: they must decode on
    await engine.pause("wait")
    assert task.done()
    reasons = Counter(s.finish_reason for r in task.result() for s in r.samples)
    assert set(reasons) <= {"stop", "length"}, reasons
    held = asyncio.create_task(engine.generate(requests(trainer, LONG, tag="held")))
    await asyncio.sleep(0.3)
    assert not held.done()  # submitted while paused: waits for resume
    await engine.resume()
    results = await held
    assert all(s.done for r in results for s in r.samples)
