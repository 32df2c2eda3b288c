"""The torch rollout backend: the protocol, determinism, temperature, pause modes, aborts."""

from __future__ import annotations

import asyncio

import pytest

from workers.adapters.update import AdapterUpdate
from workers.policy import LoraPolicy
from workers.rollout import (
    BACKENDS,
    GroupRequest,
    RolloutBackend,
    Sample,
    SamplingParams,
    make_backend,
)
from workers.rollout.registry import make_pool_engine
from workers.spec import parse_spec

from .helpers import Parked
from .rollout import trtllm_standin


@pytest.fixture
def setup(make_spec):
    spec = parse_spec(make_spec("rollout.max_new_tokens=8", "rollout.temperature=4.0"))
    policy = LoraPolicy(spec, spec.model.path)
    backend = make_backend(spec, spec.model.path)
    return spec, policy, backend


def _req(policy, rid, prompt, seed, n=4, temperature=4.0, max_new=8):
    return GroupRequest(rid, policy.tokenizer.encode(prompt), n, seed,
                        SamplingParams(temperature, max_new))  # fmt: skip


def test_refuses_to_generate_before_an_adapter_is_acknowledged(setup):
    _, policy, backend = setup
    assert isinstance(backend, RolloutBackend)
    with pytest.raises(RuntimeError, match="no adapter acknowledged"):
        asyncio.run(backend.generate([_req(policy, "a", "1+1=", 0)]))


def test_groups_do_not_depend_on_their_batch(setup):
    _, policy, backend = setup

    async def go():
        assert await backend.load_adapter(AdapterUpdate(7, policy.adapter_tensors())) == 7
        alone = await backend.generate([_req(policy, "a", "12+3=", 11)])
        mixed = await backend.generate(
            [_req(policy, "b", "4+5=", 5), _req(policy, "a", "12+3=", 11)]
        )
        return alone[0], mixed[1]

    alone, mixed = asyncio.run(go())
    assert [s.token_ids for s in alone.samples] == [s.token_ids for s in mixed.samples]
    assert all(v == 7 for s in alone.samples for v in s.versions)
    assert len({tuple(s.token_ids) for s in alone.samples}) > 1  # samples differ at T=4


@pytest.mark.parametrize("decode", ["dynamic", "static"])
def test_groups_of_other_sampling_params_share_a_batch_and_sample_as_alone(make_spec, decode):
    """One batch takes groups of any sampling params (a pool's runs, or eval's greedy rows
    beside the producer's): each row is sampled at its own group's temperature, greedy rows
    take the argmax, each its own budget, and every group gives what it gives alone."""
    spec = parse_spec(make_spec("rollout.max_new_tokens=8", f"rollout.decode={decode}"))
    policy = LoraPolicy(spec, spec.model.path)
    backend = make_backend(spec, spec.model.path)
    reqs = [
        _req(policy, "hot", "12+3=", 11, temperature=4.0),
        GroupRequest("greedy", policy.tokenizer.encode("4+5="), 2, 0,
                     SamplingParams(0.7, 6, greedy=True)),
        _req(policy, "cool", "40+41=", 5, temperature=0.7, max_new=5),
    ]  # fmt: skip

    async def go():
        await backend.load_adapter(AdapterUpdate(7, policy.adapter_tensors()))
        together = await backend.generate(reqs)
        return together, [(await backend.generate([r]))[0] for r in reqs]

    together, alone = asyncio.run(go())
    for t, a, req in zip(together, alone, reqs, strict=True):
        for s, s_alone in zip(t.samples, a.samples, strict=True):
            assert s.token_ids == s_alone.token_ids and s.finish_reason == s_alone.finish_reason
            assert s.logprobs == pytest.approx(s_alone.logprobs, abs=1e-5)
            assert len(s.token_ids) <= req.params.max_new_tokens
    greedy = together[1].samples
    assert greedy[0].token_ids == greedy[1].token_ids  # the argmax: both rows alike
    assert len({tuple(s.token_ids) for s in together[0].samples}) > 1  # sampled: they differ


def in_flight(backend, tokens: int = 4) -> Parked:
    """The decode held once `tokens` more tokens were made (every row of a group of 4 has
    its first), its rows then in flight until `release()`."""
    start = backend.tokens_streamed
    return Parked(backend, lambda: backend.tokens_streamed >= start + tokens)


def test_abort_returns_partials_and_resubmission_keeps_token_versions(setup):
    _, policy, backend = setup
    request = _req(policy, "a", "1+2=", 3)

    async def go():
        await backend.load_adapter(AdapterUpdate(0, policy.adapter_tensors()))
        held = in_flight(backend)
        task = asyncio.create_task(backend.generate([request]))
        await held.reached()
        await backend.pause("abort")
        held.release()
        partial = (await task)[0]
        assert partial.aborted and all(s.finish_reason == "abort" for s in partial.samples
                                       if not s.done)  # fmt: skip
        assert await backend.load_adapter(AdapterUpdate(1, policy.adapter_tensors())) == 1
        await backend.resume()
        return partial, (await backend.generate([partial.resubmission(request)]))[0]

    partial, done = asyncio.run(go())
    assert not done.aborted
    for before, after in zip(partial.samples, done.samples, strict=True):
        assert after.token_ids[: len(before.token_ids)] == before.token_ids
        assert after.versions[: len(before.versions)] == before.versions
        if not before.done:
            assert after.versions[len(before.versions) :] == [1] * (
                len(after.versions) - len(before.versions)
            )
    assert done.min_version == 0


def test_keep_freezes_and_wait_drains(setup):
    _, policy, backend = setup

    async def go():
        await backend.load_adapter(AdapterUpdate(0, policy.adapter_tensors()))
        held = in_flight(backend)
        task = asyncio.create_task(backend.generate([_req(policy, "a", "1+2=", 3)]))
        await held.reached()
        await backend.pause("keep")
        held.release()
        await backend.load_adapter(AdapterUpdate(1, policy.adapter_tensors()))
        await backend.resume()
        kept = (await task)[0]
        held = in_flight(backend)
        task = asyncio.create_task(backend.generate([_req(policy, "b", "3+4=", 4)]))
        await held.reached()
        pausing = asyncio.create_task(backend.pause("wait"))
        gate = backend._gate
        await gate.wait(lambda: not gate.open)  # the pause has begun, the request in flight
        assert not pausing.done() and not task.done()
        held.release()
        await pausing
        assert task.done()  # wait returned only after the in-flight request finished
        await backend.resume()
        return kept

    kept = asyncio.run(go())
    assert not kept.aborted
    versions = {v for s in kept.samples for v in s.versions}
    assert versions == {0, 1}


def test_missing_engine_names_its_package(make_spec, monkeypatch):
    # Stands for an engine this machine lacks (whether vLLM is installed here varies).
    missing = ("workers.rollout._no_such_engine", "TrtllmBackend")
    monkeypatch.setitem(BACKENDS, "trtllm", {"solo": missing, "pool": missing})
    spec = parse_spec(make_spec("rollout.backend=trtllm"))
    with pytest.raises(RuntimeError, match="needs the 'tensorrt_llm' package"):
        make_backend(spec, spec.model.path)


def test_a_run_alone_and_a_pool_take_the_specs_max_loras(make_spec):
    """`rollout.max_loras` has one default, the spec's: a run alone's engine allocates that
    many adapter slots, a pool's engine as many unless the pool says. (TensorRT-LLM's
    engine, on its stand-in, starts on first use: nothing loads here.)"""
    trtllm_standin.install()
    try:
        for over, want in (((), 2), (("rollout.max_loras=5",), 5)):
            spec = parse_spec(make_spec("rollout.backend=trtllm", *over))
            assert spec.rollout.max_loras == want
            solo = make_backend(spec, spec.model.path)
            pool = make_pool_engine(spec, spec.model.path)
            assert solo.engine.max_loras == pool.capacity == pool.engine.max_loras == want
            assert make_pool_engine(spec, spec.model.path, capacity=3).engine.max_loras == 3
    finally:
        trtllm_standin.uninstall()


class RowCounter:
    """Delegates to an engine's model and records the rows of each forward."""

    def __init__(self, model):
        self._model, self.rows = model, []

    def __call__(self, *args, **kwargs):
        self.rows.append(kwargs["input_ids"].shape[0])
        return self._model(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(self._model, name)


def test_finished_rows_leave_the_batch_and_the_others_sample_as_before(make_spec):
    spec = parse_spec(make_spec("rollout.max_new_tokens=8", "rollout.temperature=4.0"))
    policy = LoraPolicy(spec, spec.model.path)
    ids = policy.tokenizer.encode("12+3=")
    held = [0, 0, 6, 6]  # two of the four rows already hold 6 of their 8 tokens

    def request():
        partial = [Sample([5] * n, [-1.0] * n, [7] * n) for n in held]
        return GroupRequest("a", ids, 4, 11, SamplingParams(4.0, 8), partial=partial)

    async def run(compact_below: float):
        backend = make_backend(spec, spec.model.path)
        backend.compact_below = compact_below
        backend.source.model = RowCounter(backend.source.model)
        await backend.load_adapter(AdapterUpdate(7, policy.adapter_tensors()))
        (result,) = await backend.generate([request()])
        return result, backend.source.model.rows

    compacted, rows = asyncio.run(run(0.75))
    full, full_rows = asyncio.run(run(0.0))  # never compacts
    for a, b in zip(compacted.samples, full.samples, strict=True):
        assert a.token_ids == b.token_ids and a.finish_reason == b.finish_reason
        assert a.logprobs == pytest.approx(b.logprobs, abs=1e-5)
    # The rows of each forward: the prefill of the 2 distinct prompts, then the batch shrinks
    # to the rows still going whenever a quarter of it or more has finished (EOS or length).
    new = [len(s.token_ids) - n for s, n in zip(full.samples, held, strict=True)]
    expected, live = [2], 4
    for made in range(1, max(new)):  # tokens each row has made before the next forward
        going = sum(n > made for n in new)
        live = going if going <= 0.75 * live else live
        expected.append(live)
    assert rows == expected and full_rows == [2] + [4] * (max(new) - 1)
    assert sum(rows) < sum(full_rows)  # the held rows finish after 2 steps, at least


def test_static_and_dynamic_decode_sample_the_same_tokens(make_spec):
    """The static cache (the GPU default) is a faster way to the same draws: each group's
    tokens, finish reasons and logprobs equal the PEFT forward's, partial rows and
    compaction included (float32 on the CPU, so ties are the only way to differ)."""
    spec = parse_spec(make_spec("rollout.max_new_tokens=8", "rollout.temperature=2.0"))
    policy = LoraPolicy(spec, spec.model.path)
    partial = [Sample([5] * n, [-1.0] * n, [7] * n) for n in (0, 6, 0, 3)]
    reqs = [
        GroupRequest("a", policy.tokenizer.encode("12+3="), 4, 11, SamplingParams(2.0, 8),
                     partial=partial),
        _req(policy, "b", "4+5=", 5, temperature=2.0),
        _req(policy, "c", "40+41=", 6, temperature=2.0),
    ]  # fmt: skip

    async def run(decode: str):
        over = spec.rollout.model_copy(update={"decode": decode})
        backend = make_backend(spec.model_copy(update={"rollout": over}), spec.model.path)
        assert (backend.decoder is not None) == (decode == "static")
        await backend.load_adapter(AdapterUpdate(7, policy.adapter_tensors()))
        return await backend.generate(reqs)

    static, dynamic = asyncio.run(run("static")), asyncio.run(run("dynamic"))
    for a, b in zip(static, dynamic, strict=True):
        for s, d in zip(a.samples, b.samples, strict=True):
            assert s.token_ids == d.token_ids and s.finish_reason == d.finish_reason
            assert s.logprobs == pytest.approx(d.logprobs, abs=1e-4)
    assert_rows_continue(reqs, static, 8, policy.tokenizer.eos_token_id)


def assert_rows_continue(reqs, results, max_new: int, eos_id: int) -> None:
    """What holds for any model: a resubmitted row keeps its partial tokens as its prefix,
    no row outgrows its budget, a row ends by `length` exactly at the budget, and a row that
    ends by `stop` ends with EOS. (Which tokens a locally built tiny model samples is not
    asserted: that differs between machines.)"""
    for req, res in zip(reqs, results, strict=True):
        for i, s in enumerate(res.samples):
            held = req.partial[i].token_ids if req.partial else []
            assert s.token_ids[: len(held)] == held
            assert len(held) < len(s.token_ids) <= max_new
            assert len(s.token_ids) == len(s.versions) == len(s.logprobs)
            if s.finish_reason == "length":
                assert len(s.token_ids) == max_new
            else:
                assert s.finish_reason == "stop" and s.token_ids[-1] == eos_id


class DecoderLog:
    """Delegates to the static decoder and records its steps and admissions."""

    def __init__(self, decoder):
        self._decoder, self.steps, self.admitted = decoder, 0, []

    def step(self, tokens):
        self.steps += 1
        return self._decoder.step(tokens)

    def prefill(self, *args, slots=None, **kwargs):
        self.admitted.append(slots)
        return self._decoder.prefill(*args, slots=slots, **kwargs)

    def __getattr__(self, name):
        return getattr(self._decoder, name)


def _held_group(policy, rid, prompt, seed, held):
    """A group of 4 whose samples already hold `held` tokens (a resubmitted partial)."""
    partial = [Sample([5] * held, [-1.0] * held, [7] * held) for _ in range(4)]
    ids = policy.tokenizer.encode(prompt)
    return GroupRequest(rid, ids, 4, seed, SamplingParams(2.0, 8), partial=partial)


def test_freed_slots_take_the_next_groups_and_every_group_samples_as_before(make_spec):
    """Continuous batching on the static decoder: 16 rows through 8 slots. Two groups have
    2 tokens left, two have 8: the short group's slots go to the next group while the long
    one decodes on, so the whole takes 8 decode steps instead of two batches' 14, and each
    group's tokens equal the PEFT forward's, which decodes the groups in two batches."""
    spec = parse_spec(
        make_spec("rollout.max_new_tokens=8", "rollout.temperature=2.0",
                  "rollout.max_batch_size=8")
    )  # fmt: skip
    policy = LoraPolicy(spec, spec.model.path)

    def group(rid, prompt, seed, held):
        return _held_group(policy, rid, prompt, seed, held)

    reqs = [group("b", "4+5=", 5, 6), group("a", "12+3=", 11, 0),
            group("c", "40+41=", 6, 0), group("d", "7+8=", 3, 6)]  # fmt: skip

    async def run(decode: str):
        over = spec.rollout.model_copy(update={"decode": decode})
        backend = make_backend(spec.model_copy(update={"rollout": over}), spec.model.path)
        if backend.decoder is not None:
            backend.source.decoder = DecoderLog(backend.decoder)
        await backend.load_adapter(AdapterUpdate(7, policy.adapter_tensors()))
        return await backend.generate(reqs), backend.source

    (static, source), (dynamic, _) = asyncio.run(run("static")), asyncio.run(run("dynamic"))
    log = source.decoder
    for a, b in zip(static, dynamic, strict=True):
        for s, d in zip(a.samples, b.samples, strict=True):
            assert s.token_ids == d.token_ids and s.finish_reason == d.finish_reason
            assert s.logprobs == pytest.approx(d.logprobs, abs=1e-4)
            assert len(s.token_ids) == len(s.versions) == len(s.logprobs)
    # b and a start; c takes b's four slots after b's two tokens; d takes a's after eight
    assert log.admitted[:2] == [list(range(8)), [0, 1, 2, 3]]
    assert log.admitted[2] == [4, 5, 6, 7] or 0 in log.admitted[2]
    assert log.steps <= 8
    assert_rows_continue(reqs, static, 8, policy.tokenizer.eos_token_id)


@pytest.mark.parametrize("overlap", [False, True])
def test_an_adapter_change_mid_decode_recomputes_rows_of_every_age(make_spec, overlap):
    """An adapter load takes the rows in flight out of the batch and re-prefills them under
    the new adapter. With continuous batching they were admitted at different times, so
    they have made different counts of tokens: padded to the longest, each still needs room
    for its own budget. The budget is chosen so the first reservation is exactly full (a
    40-token prompt + 24 = 64 positions); the load is of the same weights as a new version,
    so the tokens must equal an uninterrupted decode's. `overlap`: the step run ahead of
    the host (the GPU's loop) is dropped at the change, and the rows' last steps run ahead
    fit the exactly full cache."""
    long = "12345678+87654321=1234567+7654321=123456"
    spec = parse_spec(make_spec("rollout.temperature=2.0", "rollout.max_batch_size=4",
                                "rollout.decode=static"))  # fmt: skip
    policy = LoraPolicy(spec, spec.model.path)
    budget = 64 - len(policy.tokenizer.encode(long))
    assert budget > 12
    params = SamplingParams(2.0, budget)

    def group(rid, prompt, seed, held=0):
        partial = [Sample([5] * held, [-1.0] * held, [7] * held) for _ in range(2)]
        return GroupRequest(rid, policy.tokenizer.encode(prompt), 2, seed, params, partial)

    # r0 ends after 4 tokens and r2 takes its slots, 4 tokens behind r1's long prompt
    reqs = [group("r0", "1+1=", 0, held=budget - 4), group("r1", long, 1), group("r2", "4+5=", 2)]

    async def run(bump: bool):
        backend = make_backend(spec, spec.model.path)
        backend.overlap = overlap
        backend.eos_ids = frozenset()  # every row makes its whole budget
        log = backend.source.decoder = DecoderLog(backend.decoder)
        await backend.load_adapter(AdapterUpdate(7, policy.adapter_tensors()))
        if not bump:
            return await backend.generate(reqs)
        # after 10 steps: rows of two ages, r1 11 tokens made, r2 7
        held = Parked(backend, lambda: log.steps == 10)
        task = asyncio.create_task(backend.generate(reqs))
        await held.reached()
        await backend.load_adapter(AdapterUpdate(8, policy.adapter_tensors()))
        held.release()
        return await task

    plain, bumped = asyncio.run(run(False)), asyncio.run(run(True))
    for a, b in zip(plain, bumped, strict=True):
        for s, d in zip(a.samples, b.samples, strict=True):
            assert s.token_ids == d.token_ids and len(s.token_ids) == budget
            assert s.logprobs == pytest.approx(d.logprobs, abs=1e-4)
    assert {v for r in bumped for s in r.samples for v in s.versions} >= {7, 8}


@pytest.mark.parametrize("slots", [8, 16])
def test_steps_run_ahead_of_the_host_sample_as_the_serial_loop(make_spec, slots):
    """backend.overlap (on by default on a GPU) launches the next step before the host has
    recorded this one's tokens. Each group's tokens, finish reasons, logprobs and versions
    equal the serial loop's: rows of four budgets through 8 slots (continuous batching: no
    step runs ahead while a group waits) or 16 (finished rows retire, then leave the batch),
    and at most one step more in all (the last, where every row ends by EOS)."""
    spec = parse_spec(
        make_spec("rollout.max_new_tokens=8", "rollout.temperature=2.0",
                  f"rollout.max_batch_size={slots}", "rollout.decode=static")
    )  # fmt: skip
    policy = LoraPolicy(spec, spec.model.path)

    def group(rid, prompt, seed, held):
        return _held_group(policy, rid, prompt, seed, held)

    reqs = [group("b", "4+5=", 5, 6), group("a", "12+3=", 11, 0),
            group("c", "40+41=", 6, 3), group("d", "7+8=", 3, 5)]  # fmt: skip

    async def run(overlap: bool):
        backend = make_backend(spec, spec.model.path)
        backend.overlap = overlap
        log = backend.source.decoder = DecoderLog(backend.decoder)
        await backend.load_adapter(AdapterUpdate(7, policy.adapter_tensors()))
        return await backend.generate(reqs), log.steps

    (serial, steps), (ahead, ahead_steps) = asyncio.run(run(False)), asyncio.run(run(True))
    for a, b in zip(ahead, serial, strict=True):
        for s, d in zip(a.samples, b.samples, strict=True):
            assert s.token_ids == d.token_ids and s.finish_reason == d.finish_reason
            assert s.logprobs == pytest.approx(d.logprobs, abs=1e-5)
            assert s.versions == d.versions
    assert steps <= ahead_steps <= steps + 1
    assert_rows_continue(reqs, ahead, 8, policy.tokenizer.eos_token_id)


def test_a_group_wider_than_the_static_batch_is_refused_with_the_setting_to_change(make_spec):
    spec = parse_spec(make_spec("rollout.decode=static", "rollout.max_batch_size=4"))
    policy = LoraPolicy(spec, spec.model.path)
    backend = make_backend(spec, spec.model.path)

    async def go():
        await backend.load_adapter(AdapterUpdate(1, policy.adapter_tensors()))
        small, wide = _req(policy, "a", "1+1=", 0, n=2), _req(policy, "b", "2+2=", 1, n=6)
        with pytest.raises(ValueError, match=r"group of 6 samples exceeds rollout.max_batch"):
            await backend.generate([small, wide])
        return await backend.generate([small])  # the engine is still usable

    (result,) = asyncio.run(go())
    assert len(result.samples) == 2 and all(s.token_ids for s in result.samples)
