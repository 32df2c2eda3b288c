"""Where the time of bench/cpu_step.py's step goes, measured so that a loaded machine cancels
out: every part is timed in CPU seconds, interleaved with the others in one process, beside
a reference matmul of the training shapes; each part's rate is then a fraction of what the
same core does on one large matmul at that moment.

    .venv/bin/python bench/cpu_step_parts.py [--reps 5] [--threads 1] [--compiled-generate]

Parts: generation (torch backend, 64 rows × 16 tokens), the train step (forward + backward +
AdamW), the async check of stale tokens (`train.mult_prob_error_samples` samples under the
previous adapter), and a prototype of the one FLOP cut left: generating with autograd on
the trainer's model and back-propagating through the decode graph, so that no separate
training forward runs (exact for sync training in bypass mode). `--compiled-generate` also
times an engine whose model runs under torch.compile.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch
from cpu_step import build_model  # run as a script: bench/ is on sys.path

from workers.adapters.update import AdapterUpdate
from workers.policy import LoraPolicy, TrainSample, collate
from workers.rollout.base import GroupRequest, GroupResult, SamplingParams
from workers.rollout.torch_engine import TorchBackend
from workers.spec import parse_spec

PROMPTS = ["12+34=", "7+8=", "40+41=", "3+99=", "55+5=", "1+1=", "23+32=", "9+90="]
N_SAMPLES, NEW_TOKENS = 8, 16


def _generate(engine: TorchBackend, requests: list[GroupRequest]) -> list[GroupResult]:
    return asyncio.run(engine.generate(requests))


def cpu_seconds(fn: Callable[[], object]) -> float:
    t = time.process_time()
    fn()
    return time.process_time() - t


def matmul_params(model: torch.nn.Module) -> int:
    """Weights a token multiplies through (every Linear, LoRA and the tied head included):
    a forward costs 2 FLOPs per weight per token."""
    return sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear))


def fused_step(policy: LoraPolicy, prompt_ids: list[list[int]], seed: int) -> None:
    """Sample 8 × 16 tokens per prompt with autograd on, then one backward through the decode
    graph (a policy-gradient surrogate with ± advantages): the cost of a step that reuses
    the rollout's forward for training."""
    model = policy.model
    model.eval()
    width = max(map(len, prompt_ids))
    ids = torch.zeros(len(prompt_ids), width, dtype=torch.long)
    attn = torch.zeros_like(ids)
    for u, p in enumerate(prompt_ids):
        ids[u, width - len(p) :], attn[u, width - len(p) :] = torch.tensor(p), 1
    own = torch.arange(len(prompt_ids)).repeat_interleave(N_SAMPLES)
    pos = (attn.cumsum(-1) - 1).clamp(min=0)
    out = model(
        input_ids=ids, attention_mask=attn, position_ids=pos, use_cache=True, logits_to_keep=1
    )
    out.past_key_values.reorder_cache(own)
    past, attn, pos = out.past_key_values, attn[own], pos[own][:, -1:]
    logits = out.logits[:, -1][own]
    gen = torch.Generator().manual_seed(seed)
    lps = []
    for t in range(NEW_TOKENS):
        u = torch.rand(logits.shape, generator=gen).clamp(1e-20, 1 - 1e-7)
        tokens = (logits.detach() - torch.log(-torch.log(u))).argmax(-1)
        lps.append(torch.log_softmax(logits, -1).gather(1, tokens[:, None])[:, 0])
        if t == NEW_TOKENS - 1:
            break
        attn = torch.cat([attn, torch.ones(len(own), 1, dtype=attn.dtype)], 1)
        pos = pos + 1
        out = model(
            input_ids=tokens[:, None],
            attention_mask=attn,
            position_ids=pos,
            past_key_values=past,
            use_cache=True,
            logits_to_keep=1,
        )
        past, logits = out.past_key_values, out.logits[:, -1]
    lp = torch.stack(lps, 1)  # [R, T], with the decode graph behind it
    adv = torch.tensor([0.5, -0.5]).repeat(len(own) // 2)[:, None]
    loss = -(adv * torch.exp(lp - lp.detach())).mean()
    policy.adapter.optimizer.zero_grad(set_to_none=True)
    loss.backward()
    policy.adapter.optimizer.step()
    model.train()


def requests(prompt_ids: list[list[int]], params: SamplingParams, seed: int) -> list:
    return [GroupRequest(f"g{i}", p, N_SAMPLES, seed + i, params) for i, p in enumerate(prompt_ids)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=5, help="rounds; the first is warm-up")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument(
        "--compiled-generate",
        action="store_true",
        help="also time generation by a second engine whose model runs under "
        "torch.compile(dynamic=True) (its first call compiles: minutes on 2 cores)",
    )
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    tmp = tempfile.TemporaryDirectory()  # the model directory lives as long as the run
    model_dir = build_model(Path(tmp.name) / "model")
    spec = parse_spec(
        {
            "model": {"path": str(model_dir)},
            "lora": {
                "r": 8,
                "alpha": 16,
                "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj"],
            },
            "algorithm": {"num_generations": N_SAMPLES},
            "rollout": {"backend": "torch", "max_new_tokens": NEW_TOKENS},
            "train": {"prompts_per_step": len(PROMPTS), "micro_batch_size": 64, "lr": 1e-4},
            "async": {"enabled": True, "max_staleness": 1},
        }
    )
    policy, engine = LoraPolicy(spec, model_dir), TorchBackend(spec, model_dir)
    asyncio.run(engine.load_adapter(AdapterUpdate(0, policy.adapter_tensors())))
    policy.adapter.history.record(0, policy.adapter_tensors())
    tok = policy.tokenizer
    prompt_ids = [tok.encode(p, add_special_tokens=False) for p in PROMPTS]
    params = SamplingParams(temperature=1.0, max_new_tokens=NEW_TOKENS)
    n_params = matmul_params(policy.model)
    # the MLP's up-projection in training (960 token rows) and in a decode step (64 rows)
    a, b, a64 = torch.randn(960, 512), torch.randn(512, 1376), torch.randn(64, 512)

    results: list[GroupResult] = []

    compiled = None
    if args.compiled_generate:
        compiled = TorchBackend(spec, model_dir)
        asyncio.run(compiled.load_adapter(AdapterUpdate(0, policy.adapter_tensors())))
        compiled.source.model = torch.compile(compiled.source.model, dynamic=True)
        t0 = time.perf_counter()
        first = _generate(compiled, requests(prompt_ids, params, 0))
        print(f"compiled engine: first generate (compiling) {time.perf_counter() - t0:.0f} s wall")
        same = _generate(engine, requests(prompt_ids, params, 0))
        tokens = [[s.token_ids for s in r.samples] for r in (*first, *same)]
        print(f"compiled samples the same tokens as eager: {tokens[:8] == tokens[8:]}")

    def generate(seed: int) -> None:
        results[:] = _generate(engine, requests(prompt_ids, params, seed))

    def batch():
        samples = [
            TrainSample(r.prompt_ids, s.token_ids, s.logprobs, s.versions, 0.5 if j % 2 else -0.5)
            for r in results
            for j, s in enumerate(r.samples)
        ]
        return collate(samples, tok.pad_token_id)

    parts = ("ref", "ref64", "generate", "train", "check", "fused", "compiled")
    rows: dict[str, list[float]] = {k: [] for k in parts}
    gf: dict[str, list[float]] = {"generate": [], "train": []}
    for rep in range(args.reps):
        ref_s = cpu_seconds(lambda: [a @ b for _ in range(20)])
        rows["ref"].append(20 * 2 * a.shape[0] * a.shape[1] * b.shape[1] / ref_s / 1e9)
        ref64_s = cpu_seconds(lambda: [a64 @ b for _ in range(300)])
        rows["ref64"].append(300 * 2 * a64.shape[0] * a64.shape[1] * b.shape[1] / ref64_s / 1e9)
        rows["generate"].append(cpu_seconds(lambda rep=rep: generate(rep)))
        tb = batch()
        policy.adapter.version = 0  # the batch is of the current version: no check inside
        rows["train"].append(cpu_seconds(lambda tb=tb: policy.train_step(policy.adapter, tb)))
        # after the step the batch is one version old: what the async check does each step
        rows["check"].append(
            cpu_seconds(lambda tb=tb: policy.stale_sums(policy.adapter, tb, limit=8))
        )
        rows["fused"].append(cpu_seconds(lambda rep=rep: fused_step(policy, prompt_ids, rep)))
        if compiled is not None:
            reqs = requests(prompt_ids, params, rep)
            rows["compiled"].append(cpu_seconds(lambda reqs=reqs: _generate(compiled, reqs)))
        width = max(map(len, prompt_ids))
        steps = max(len(s.token_ids) for r in results for s in r.samples)
        # generation: the prefill of the distinct prompts, then 64 rows a decode step
        gf["generate"].append(2 * n_params * (len(PROMPTS) * width + 64 * (steps - 1)) / 1e9)
        # training: the same token rows forward, and about as much again backward (input
        # gradients through the frozen weights; the LoRA weight gradients add ~1 %)
        gf["train"].append(
            2 * 2 * n_params * (len(PROMPTS) * width + 64 * (tb.mask.shape[1] - 1)) / 1e9
        )

    med = {k: statistics.median(v[1:]) for k, v in rows.items() if len(v) > 1}
    ref = med["ref"]
    print(f"threads {args.threads}, rounds timed {args.reps - 1}; CPU seconds, median")
    print(f"reference matmul 960x512 @ 512x1376: {ref:.0f} GFLOP/s")
    print(f"decode-shape matmul 64x512 @ 512x1376: {med['ref64']:.0f} GFLOP/s")
    for k in ("generate", "train"):
        g = statistics.median(gf[k][1:])
        rate = g / med[k]
        print(
            f"{k:9s} {med[k]:.3f} s  {g:.1f} GFLOP  {rate:.0f} GFLOP/s = "
            f"{rate / ref:.0%} of the reference"
        )
    step = med["generate"] + med["train"]
    print(f"generate + train: {step:.3f} s = {64 / step:.1f} completions/s per core")
    print(
        f"async check (8 stale samples): {med['check']:.3f} s = "
        f"{med['check'] / med['train']:.0%} of train"
    )
    print(
        f"fused prototype (generate with grad + backward): {med['fused']:.3f} s = "
        f"{med['fused'] / step:.2f}x generate + train"
    )
    if compiled is not None:
        print(
            f"compiled generate: {med['compiled']:.3f} s = "
            f"{med['compiled'] / med['generate']:.2f}x eager generate"
        )
    tmp.cleanup()


if __name__ == "__main__":
    main()
