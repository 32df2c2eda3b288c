"""Every engine decodes after the data module's prompt ids: the torch and vLLM backends are
given a chat prompt's ids (as the producer makes them) and what each engine actually
conditioned on is recorded at its own boundary (the torch backend's batch of prompts; the
prompt ids vLLM reports in its outputs), and compared with `prompt_ids`.

The vLLM engine is the session's single-adapter one on the tiny model
(rollout/conftest.py's borrow_tiny_vllm; a start takes 20-60 s on 2 cores): the chat copy
of the tiny model differs from it only by the chat template in its tokenizer config, which
the data module renders into ids here; the engine is given those ids, never a template."""

from __future__ import annotations

from pathlib import Path

import pytest
import pytest_asyncio

from workers.adapters.lora import load_tokenizer
from workers.data import prompt_ids, prompt_text
from workers.loop.executor import LocalExecutor
from workers.policy import LoraPolicy
from workers.rollout.base import GroupRequest, SamplingParams
from workers.rollout.torch_engine import TorchBackend, sources

from ..rollout.conftest import borrow_tiny_vllm, engine_spec

pytestmark = pytest.mark.asyncio(loop_scope="session")  # the shared vLLM engine's loop

CHATS = [
    [{"role": "system", "content": "add."}, {"role": "user", "content": "12+3="}],
    [{"role": "user", "content": "7+8="}],
]


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def adapter(chat_tiny_dir: Path):
    policy = LoraPolicy(engine_spec(chat_tiny_dir, "torch"), chat_tiny_dir)
    return await LocalExecutor(policy).adapter_update()


async def _serve(engine, update) -> None:
    await engine.pause("wait")
    try:
        assert await engine.load_adapter(update) == update.version
    finally:
        await engine.resume()


async def _generate(engine, ids: list[list[int]]):
    params = SamplingParams(temperature=1.0, max_new_tokens=3)
    requests = [GroupRequest(f"chat-{i}", p, 2, 11 + i, params) for i, p in enumerate(ids)]
    return await engine.generate(requests)


@pytest.fixture(scope="module")
def expected(chat_tiny_dir: Path) -> list[list[int]]:
    tok = load_tokenizer(chat_tiny_dir)
    ids = [prompt_ids(tok, chat) for chat in CHATS]
    # the ids are the template's rendering, not the bare content
    assert prompt_text(tok, CHATS[1]) == "user: 7+8=; assistant: "
    assert ids[1] == tok.encode("user: 7+8=; assistant: ", add_special_tokens=False)
    return ids


async def test_torch_backend_decodes_after_the_data_modules_ids(
    chat_tiny_dir, adapter, expected, monkeypatch
):
    engine = TorchBackend(engine_spec(chat_tiny_dir, "torch"), chat_tiny_dir)
    seen: list[list[int]] = []
    batch = sources.shared_prompts  # where the engine turns its rows' prompts into one tensor

    def record(row_prompts, *args):
        seen.extend(list(p) for p in row_prompts)
        return batch(row_prompts, *args)

    try:
        await _serve(engine, adapter)
        monkeypatch.setattr(sources, "shared_prompts", record)
        results = await _generate(engine, expected)
    finally:
        await engine.close()
    assert [r.prompt_ids for r in results] == expected
    assert seen == [ids for ids in expected for _ in range(2)]  # n = 2 rows per prompt


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def tiny_vllm(tiny_dir: Path):
    """Held for the session, so that the later packages' tests find the engine still up."""
    async with borrow_tiny_vllm(tiny_dir) as backend:
        yield backend


async def test_vllm_backend_decodes_after_the_data_modules_ids(
    tiny_vllm, adapter, expected, monkeypatch
):
    engine = tiny_vllm
    given: list[list[int]] = []
    reported: list[list[int]] = []
    llm = engine.llm  # vLLM's AsyncLLM, which the lane hands each group's ids
    generate = llm.generate

    async def record(prompt, params, request_id, **kw):
        given.append(list(prompt["prompt_token_ids"]))
        async for out in generate(prompt, params, request_id, **kw):
            reported.append(list(out.prompt_token_ids))  # what vLLM says it prefilled
            yield out

    try:
        await _serve(engine, adapter)  # its version handshake is a request of its own
        monkeypatch.setattr(llm, "generate", record)  # undone after the test
        results = await _generate(engine, expected)
    finally:
        await engine.abort()  # the engine is shared: nothing of this test's left running
    assert [r.prompt_ids for r in results] == expected
    assert given == expected  # one engine request per group, the ids as they are
    assert reported and all(ids in expected for ids in reported)
    assert {tuple(ids) for ids in reported} == {tuple(ids) for ids in expected}
