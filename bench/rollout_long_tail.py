"""Torch-backend generation with heavy-tailed response lengths: finished rows leaving the
decode batch (`TorchBackend.compact_below`, the default) against a batch that keeps every
row to the end, side by side in one run, alternating rounds.

Reasoning rollouts end at very different lengths: most responses are short, a few run to the
token limit, and a batch that decodes every row until the longest is done spends most of its
late steps on rows that have finished. Here each row's remaining budget is drawn from a
Pareto distribution (shape 1.2, scale 4 tokens, capped at --tokens); the budget is set by
handing the row in as a partial sample that already holds the rest of its tokens (the
protocol's resubmission path), so both variants prefill and decode exactly the same tokens.

    .venv/bin/python bench/rollout_long_tail.py [--rounds 3] [--prompts 8] [--n 8] [--tokens 64]
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import random
import statistics
import tempfile
import time
from pathlib import Path

import torch

# the same 25.4M Qwen2 as the CPU step benchmark (run as a script, bench/ is on sys.path)
from cpu_step import build_model  # noqa: E402

from workers.loop.executor import LocalExecutor
from workers.policy import LoraPolicy
from workers.rollout import GroupRequest, Sample, SamplingParams, make_backend
from workers.spec import parse_spec

PROMPTS = ["12+34=", "7+8=", "40+41=", "3+99=", "55+5=", "61+17=", "8+80=", "23+32="]


def budgets(rows: int, cap: int, seed: int) -> list[int]:
    """Heavy-tailed response lengths: Pareto(shape 1.2, scale 4), capped."""
    rng = random.Random(seed)
    return [min(cap, math.ceil(4 * (1 - rng.random()) ** (-1 / 1.2))) for _ in range(rows)]


async def run(args: argparse.Namespace, model_dir: Path) -> None:
    spec = parse_spec(
        {
            "model": {"path": str(model_dir)},
            "lora": {"r": 8, "alpha": 16, "target_modules": ["q_proj", "k_proj", "v_proj"]},
            "rollout": {"backend": "torch", "max_new_tokens": args.tokens},
            "seed": 0,
        }
    )
    policy = LoraPolicy(spec, model_dir)
    update = await LocalExecutor(policy).adapter_update()
    tok = policy.tokenizer
    params = SamplingParams(temperature=1.0, max_new_tokens=args.tokens)
    lengths = budgets(args.prompts * args.n, args.tokens, seed=1)
    filler = tok.encode("0")[-1]

    def requests() -> list[GroupRequest]:
        out = []
        for g in range(args.prompts):
            mine = lengths[g * args.n : (g + 1) * args.n]
            held = [args.tokens - b for b in mine]
            partial = [Sample([filler] * h, [-1.0] * h, [0] * h) for h in held]
            prompt = tok.encode(PROMPTS[g % len(PROMPTS)])
            out.append(GroupRequest(f"g{g}", prompt, args.n, g, params, partial=partial))
        return out

    engines = {}
    for name, compact_below in (("rows leave the batch", 0.75), ("every row to the end", 0.0)):
        backend = make_backend(spec, model_dir)
        backend.compact_below = compact_below
        await backend.load_adapter(update)
        await backend.generate(requests())  # warm-up
        engines[name] = backend
    times: dict[str, list[float]] = {name: [] for name in engines}
    made: dict[str, set[int]] = {name: set() for name in engines}
    for _ in range(args.rounds):
        for name, backend in engines.items():
            t0 = time.perf_counter()
            results = await backend.generate(requests())
            times[name].append(time.perf_counter() - t0)
            made[name].add(sum(len(s.token_ids) for r in results for s in r.samples))
    # both variants sample the same tokens (the same seeds), so they make the same number
    assert len(set.union(*made.values())) == 1, made
    generated = made[next(iter(made))].pop() - sum(args.tokens - b for b in lengths)
    print(f"{args.prompts} prompts × {args.n} samples, budgets Pareto(1.2, 4) capped at "
          f"{args.tokens}: mean {sum(lengths) / len(lengths):.1f}, median "
          f"{statistics.median(lengths)}, max {max(lengths)} tokens ({generated} made: EOS "
          f"ends some sooner); threads {torch.get_num_threads()}, load average "
          f"{os.getloadavg()[0]:.2f}")  # fmt: skip
    base = statistics.median(times["every row to the end"])
    for name, ts in times.items():
        t = statistics.median(ts)
        print(f"{name:>22}: {t:.3f} s a round (median of {len(ts)}), "
              f"{generated / t:,.0f} tokens/s, {base / t:.2f}x")  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--n", type=int, default=8, help="samples per prompt")
    ap.add_argument("--tokens", type=int, default=64, help="max new tokens")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = Path(tmp) / "model"
        build_model(model_dir)
        asyncio.run(run(args, model_dir))


if __name__ == "__main__":
    main()
