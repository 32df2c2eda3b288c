"""The torch engine with a slot per run (a pool) on a GPU in bf16: rows of three runs'
adapters (ranks 8, 16 and 32, padded to the pool's 32) decode in one batch with CUDA graphs,
and each run's sampled logprobs match a trainer forward of that run's own adapter
(token_mult_prob_error ≤ 1.05, as for the single-adapter engine). The
version handshake's probe (a bf16 trainer forward) passes for each run.

Self-contained (no conftest fixtures), so the GPU machine runs them as they are:
    python3 -m pytest -c /dev/null --noconftest -p no:cacheprovider -q tests/workers/gpu
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import torch

from workers.grpo import token_mult_prob_error
from workers.loop.executor import LocalExecutor
from workers.policy import LoraPolicy, TrainSample, collate
from workers.rollout import GroupRequest, SamplingParams
from workers.rollout.pool_engine import PoolRequest
from workers.rollout.torch_engine import TorchPool
from workers.spec import parse_spec

from .small_qwen3 import build_small_qwen3

pytestmark = pytest.mark.gpu
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
VOCAB = 4096
RANKS = {"r8": 8, "r16": 16, "r32": 32}


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    return build_small_qwen3(
        tmp_path_factory.mktemp("qwen3-small"), vocab_size=VOCAB, hidden_size=256,
        num_hidden_layers=2, num_attention_heads=4, intermediate_size=512,
    )  # fmt: skip


def make_spec(model_dir: Path, r: int):
    return parse_spec({
        "model": {"path": str(model_dir)},
        "lora": {"r": r, "alpha": 2 * r, "target_modules": TARGETS},
        "rollout": {"backend": "torch", "max_new_tokens": 24, "temperature": 0.9},
        "train": {"micro_batch_size": 8, "logprob_chunk_size": 64},
        "resources": {"trainer_gpus": 1, "rollout_gpus": 1},
    })  # fmt: skip


def test_each_runs_rows_match_its_own_adapters_trainer_forward(model_dir):
    asyncio.run(_check(model_dir))


async def _check(model_dir: Path) -> None:
    pool = TorchPool(make_spec(model_dir, 32), model_dir, capacity=3)
    decoder = pool.engine.decoder  # the static decoder, its slot table of rank 32
    assert decoder.graphs and decoder.max_rank == 32
    assert pool.batches_adapters
    policies = {}
    for k, (run, r) in enumerate(RANKS.items()):
        policy = LoraPolicy(make_spec(model_dir, r), model_dir)
        g = torch.Generator().manual_seed(k)
        with torch.no_grad():
            for name, p in policy.model.named_parameters():
                if "lora_B" in name:
                    p.copy_(torch.randn(p.shape, generator=g).to(p.dtype) * 0.05)
        policy.adapter.version = 1
        update = await LocalExecutor(policy).adapter_update(with_probe=True)
        assert await pool.load_adapter(run, update, policy.spec.lora) == 1
        assert pool.lanes[run].handshakes[-1]["probe_err"] <= pool.engine.probe_atol
        policies[run] = policy
    params = SamplingParams(temperature=0.9, max_new_tokens=24)
    g = torch.Generator().manual_seed(5)
    reqs = [
        PoolRequest(run, GroupRequest(f"{run}-{i}", torch.randint(3, VOCAB, (10 + i,),
                    generator=g).tolist(), 4, 100 + i, params))
        for i in range(4)
        for run in RANKS
    ]  # fmt: skip
    results = await pool.generate(reqs)
    for run, policy in policies.items():
        mine = [res for q, res in zip(reqs, results, strict=True) if q.run_id == run]
        batch = collate(
            [
                TrainSample(r.prompt_ids, s.token_ids, s.logprobs, s.versions, 0.0)
                for r in mine
                for s in r.samples
            ],
            policy.tokenizer.pad_token_id,
        ).to(torch.device("cuda"))
        assert int(batch.mask.sum()) > 100
        policy.model.eval()
        with torch.no_grad():
            lp_trainer, _ = policy.token_logprobs(batch)
        err = token_mult_prob_error(batch.lp_roll, lp_trainer, batch.mask)
        print(f"{run}: token_mult_prob_error {err:.4f}")
        assert err <= 1.05, f"run {run}: token_mult_prob_error {err:.4f}"
        # and not another run's adapter: the rows would then be far off
        other = policies["r8" if run != "r8" else "r32"]
        with torch.no_grad():
            lp_other, _ = other.token_logprobs(batch)
        assert token_mult_prob_error(batch.lp_roll, lp_other, batch.mask) > err
    await pool.close()
