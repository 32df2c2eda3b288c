"""The torch rollout backend: the protocol, determinism, temperature, pause modes, aborts."""

from __future__ import annotations

import asyncio

import pytest

from workers.policy import LoraPolicy
from workers.rollout import (
    BACKENDS,
    AdapterUpdate,
    GroupRequest,
    RolloutBackend,
    SamplingParams,
    make_backend,
)
from workers.spec import parse_spec

from .helpers import SlowModel


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


def test_abort_returns_partials_and_resubmission_keeps_token_versions(setup):
    _, policy, backend = setup
    backend.model = SlowModel(backend.model, 0.05)
    request = _req(policy, "a", "1+2=", 3)

    async def go():
        await backend.load_adapter(AdapterUpdate(0, policy.adapter_tensors()))
        task = asyncio.create_task(backend.generate([request]))
        await asyncio.sleep(0.2)
        await backend.pause("abort")
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
    backend.model = SlowModel(backend.model, 0.05)

    async def go():
        await backend.load_adapter(AdapterUpdate(0, policy.adapter_tensors()))
        task = asyncio.create_task(backend.generate([_req(policy, "a", "1+2=", 3)]))
        await asyncio.sleep(0.15)
        await backend.pause("keep")
        await backend.load_adapter(AdapterUpdate(1, policy.adapter_tensors()))
        await backend.resume()
        kept = (await task)[0]
        task = asyncio.create_task(backend.generate([_req(policy, "b", "3+4=", 4)]))
        await asyncio.sleep(0.1)
        await backend.pause("wait")
        assert task.done()  # wait returned only after the in-flight request finished
        await backend.resume()
        return kept

    kept = asyncio.run(go())
    assert not kept.aborted
    versions = {v for s in kept.samples for v in s.versions}
    assert versions == {0, 1}


def test_missing_engine_names_its_package(make_spec, monkeypatch):
    # Stands for an engine this machine lacks (whether vLLM is installed here varies).
    monkeypatch.setitem(
        BACKENDS, "trtllm", ("workers.rollout._no_such_engine", "TrtllmBackend", "tensorrt_llm")
    )
    spec = parse_spec(make_spec("rollout.backend=trtllm"))
    with pytest.raises(RuntimeError, match="needs the 'tensorrt_llm' package"):
        make_backend(spec, spec.model.path)
