"""Completions per second of one GRPO training step on CPU, fp32.

The shape of issue 3: a 25M-parameter Qwen2 (hidden 512, 8 layers, 8 heads, intermediate
1376, vocabulary 256), LoRA r=8 on q/k/v/o, 8 prompts × 8 samples × 16 new tokens. A step is
generate → score → train → publish the adapter, run by the real sync driver; the figure is
64 completions over the median step time, with the time split by phase.

    .venv/bin/python bench/cpu_step.py [--steps 6] [--threads 2]

Reference (issue 3): TRL 1.16 GRPOTrainer with these settings, 23 completions/s here
(2.76 s a step, 0.78 s of it in generate).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

from workers.models.tokenizer import build_char_tokenizer
from workers.train import train

TRL_COMPLETIONS_PER_S = 23.0


def build_model(out: Path) -> Path:
    tok = build_char_tokenizer()
    config = Qwen2Config(
        vocab_size=256,
        hidden_size=512,
        num_hidden_layers=8,
        num_attention_heads=8,
        num_key_value_heads=8,
        intermediate_size=1376,
        max_position_embeddings=128,
        tie_word_embeddings=True,
        eos_token_id=tok.eos_token_id,
        bos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
    )
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(config)
    n = sum(p.numel() for p in model.parameters())
    print(f"model: Qwen2, {n / 1e6:.1f}M parameters")
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=6, help="steps to run; the first is warm-up")
    ap.add_argument("--threads", type=int, default=torch.get_num_threads())
    ap.add_argument("--micro-batch", type=int, default=64)
    ap.add_argument(
        "--async",
        dest="is_async",
        action="store_true",
        help="the async driver (max_staleness 1): rollout overlaps training",
    )
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = build_model(Path(tmp) / "model")
        spec = {
            "model": {"path": str(model_dir)},
            "lora": {
                "r": 8,
                "alpha": 16,
                "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj"],
            },
            "algorithm": {"num_generations": 8},
            "rollout": {"backend": "torch", "max_new_tokens": 16, "temperature": 1.0},
            "data": {"task": "arithmetic", "eval_size": 8},
            "train": {
                "steps": args.steps,
                "prompts_per_step": 8,
                "micro_batch_size": args.micro_batch,
                "eval_every": 0,
                "threads": args.threads,
                "lr": 1e-4,
            },
            "async": {"enabled": args.is_async, "max_staleness": 1},
        }
        out = Path(tmp) / "run"
        t0 = time.perf_counter()
        train(spec, out, progress=False)
        wall = time.perf_counter() - t0
        rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if r["step"] >= 2]  # step 1 warms up allocators and caches
    med = {
        k: statistics.median(r[k] for r in steps)
        for k in (
            "time/step_s",
            "time/generate_s",
            "time/train_s",
            "time/weight_sync_s",
            "response_length/mean",
        )
    }
    completions = 8 * 8
    per_s = completions / med["time/step_s"]
    mode = "async (max_staleness 1)" if args.is_async else "sync"
    print(f"{mode}, threads: {args.threads}, steps timed: {len(steps)}, run wall {wall:.1f} s")
    print(f"mean response length: {med['response_length/mean']:.1f} tokens")
    gen, trn, sync = med["time/generate_s"], med["time/train_s"], med["time/weight_sync_s"]
    split = f"generate {gen:.3f} s, train {trn:.3f} s, weight sync {sync:.3f} s"
    if not args.is_async:  # in async mode generation overlaps the rest: no remainder
        other = statistics.median(
            r["time/step_s"] - r["time/generate_s"] - r["time/train_s"] - r["time/weight_sync_s"]
            for r in steps
        )
        split += f", other {other:.3f} s"
    print(f"step: {med['time/step_s']:.3f} s  ({split})")
    print(f"completions/s: {per_s:.1f}  ({per_s / TRL_COMPLETIONS_PER_S:.2f}x TRL's 23/s)")
    # In async runs most tokens are a version old: the metric then comes from the trainer's
    # check forward under that version (train.mult_prob_error_samples samples a step).
    errs = [r["token_mult_prob_error"] for r in steps if "token_mult_prob_error" in r]
    if errs:
        print(
            f"token_mult_prob_error: reported on {len(errs)} of {len(steps)} timed steps, "
            f"median {statistics.median(errs):.6f}"
        )
    # CPU seconds the process spent per step: what the step costs on cores nobody else uses
    # (on a shared machine wall time also counts the other tenants).
    cpu = statistics.median(r["time/cpu_s"] for r in steps)
    print(
        f"CPU time a step: {cpu:.3f} s; with {args.threads} idle core(s) that is about "
        f"{completions * args.threads / cpu:.1f} completions/s"
    )


if __name__ == "__main__":
    main()
