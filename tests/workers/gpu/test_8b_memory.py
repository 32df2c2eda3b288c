"""The Llama-3.1-8B shape's memory plan on one GPU: trainer and engine on the same GPU, the
engine decoding batch 256 with LoRA unmerged, then a train step of 16×1024 tokens in one
micro-batch with train.activation_checkpointing: no out-of-memory, and the step's peak under
the card's capacity with room to spare. Without checkpointing that step keeps every layer's
activations (bench/gpu/train.py measures both; docs/performance.md).

The model (random init in bf16, the real config's sizes, 16 GB) is built once into the temp
directory and reused, as bench/gpu/ does with `--model-dir`:

    python3 -m pytest -c /dev/null --noconftest -p no:cacheprovider -q tests/workers/gpu
"""

from __future__ import annotations

import asyncio
import json
import tempfile
from pathlib import Path

import pytest
import torch

from workers.adapters.update import AdapterUpdate
from workers.policy import LoraPolicy, TrainSample, collate
from workers.rollout import GroupRequest, SamplingParams
from workers.rollout.torch_engine import TorchBackend
from workers.spec import parse_spec

pytestmark = pytest.mark.gpu
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
LLAMA_8B = dict(  # Llama-3.1-8B's config.json sizes
    vocab_size=128256,
    hidden_size=4096,
    num_hidden_layers=32,
    num_attention_heads=32,
    num_key_value_heads=8,
    head_dim=128,
    intermediate_size=14336,
    max_position_embeddings=4096,
    tie_word_embeddings=False,
)
SEQS, SEQ_LEN, PROMPT = 16, 1024, 128
GEN_BATCH, GEN_NEW = 256, 256


@pytest.fixture(scope="module")
def model_dir() -> Path:
    if not torch.cuda.is_available():
        pytest.skip("needs a GPU")
    out = Path(tempfile.gettempdir()) / "paddock-gpu-llama-3.1-8b"
    if (out / "config.json").is_file():
        held = json.loads((out / "config.json").read_text())
        if all(held.get(k) == v for k, v in LLAMA_8B.items()):
            return out
    from transformers import LlamaConfig, LlamaForCausalLM

    from workers.models.tokenizer import build_char_tokenizer

    tok = build_char_tokenizer()
    config = LlamaConfig(
        **LLAMA_8B,
        eos_token_id=tok.eos_token_id,
        bos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
    )
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = LlamaForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(out)
    tok.save_pretrained(out)
    del model
    torch.cuda.empty_cache()
    return out


def make_spec(model_dir: Path) -> object:
    return parse_spec({
        "model": {"path": str(model_dir)},
        "lora": {"r": 16, "alpha": 32, "target_modules": TARGETS},
        "algorithm": {"num_generations": 8},
        "rollout": {"backend": "torch", "max_new_tokens": SEQ_LEN - PROMPT,
                    "max_batch_size": GEN_BATCH},
        "train": {"micro_batch_size": SEQS, "activation_checkpointing": True},
        "resources": {"trainer_gpus": 1, "rollout_gpus": 1},
    })  # fmt: skip


def test_8b_trains_16x1024_beside_its_engine_on_one_gpu(model_dir):
    spec = make_spec(model_dir)
    dev = torch.device("cuda", 0)
    capacity = torch.cuda.get_device_properties(dev).total_memory
    policy = LoraPolicy(spec, model_dir, dev)
    engine = TorchBackend(spec, model_dir, dev)
    vocab = policy.model.config.vocab_size
    g = torch.Generator().manual_seed(0)

    # the engine decodes a batch of 256 (32 groups of 8) under the trainer's adapter
    asyncio.run(engine.load_adapter(AdapterUpdate(0, tensors=policy.adapter_tensors())))
    params = SamplingParams(temperature=1.0, max_new_tokens=GEN_NEW)
    reqs = [
        GroupRequest(
            f"g{i}", torch.randint(3, vocab, (PROMPT,), generator=g).tolist(), 8, i, params
        )
        for i in range(GEN_BATCH // 8)
    ]
    results = asyncio.run(engine.generate(reqs))
    assert sum(len(r.samples) for r in results) == GEN_BATCH
    assert all(len(s.token_ids) >= 1 for r in results for s in r.samples)

    # then the trainer, with the engine's weights and cache still resident
    samples = []
    for i in range(SEQS):
        ids = torch.randint(3, vocab, (SEQ_LEN,), generator=g).tolist()
        resp = SEQ_LEN - PROMPT
        samples.append(
            TrainSample(ids[:PROMPT], ids[PROMPT:], [-11.0] * resp, [0] * resp, (-1.0) ** i)
        )
    batch = collate(samples, policy.tokenizer.pad_token_id)
    torch.cuda.synchronize()
    resident = torch.cuda.memory_allocated(dev)
    torch.cuda.reset_peak_memory_stats(dev)
    for _ in range(2):  # the second step holds the optimizer's state as well
        metrics = policy.train_step(policy.adapter, batch)
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated(dev)
    print(
        f"\n8B plan: capacity {capacity / 1e9:.1f} GB, resident before the step "
        f"{resident / 1e9:.1f} GB, peak in the steps {peak / 1e9:.1f} GB"
    )
    assert torch.isfinite(torch.tensor(metrics["loss/total"])) and metrics["grad_norm"] > 0
    assert peak < 0.9 * capacity
    # what the step itself adds over the weights and the engine's cache: the checkpointed
    # layers' inputs (32 × 16 × 1024 × 4096 bf16 = 4.3 GB) and one layer's recompute, not
    # every layer's activations
    assert peak - resident < 40e9
