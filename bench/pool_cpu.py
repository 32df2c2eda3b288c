"""Four runs in one pool against one run alone and four runs alone one after the other, on
the CPU, measured side by side in one run.

Each run is examples/tiny-async.yaml (the tiny model's arithmetic task, async GRPO) with its
own seed, trained for `--steps` steps with eval/accuracy at the start and the end. Reported:
the wall-clock of one solo run, of four solo runs in sequence, and of the four runs in one
pool (workers/pool/driver.py, the torch pool engine), and each run's eval-accuracy gain
(end minus start) solo and pooled, with the pooled runs' mean `pool/share`.

    .venv/bin/python bench/pool_cpu.py [--steps 30] [--runs 4] [--torch-engine lanes|slots]

The pool's torch engine is time-sliced (one adapter decodes at a time) and on 2 cores the
trainer and the engine compete for the same cores, so the pool saves the base model's
memory and the start-up of K jobs, not compute; the GPU benchmark (bench/gpu/pool.py)
measures batched per-row decoding.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from pathlib import Path

import torch

from workers.loop.setup import model_dir_for
from workers.pool.driver import PoolDriver
from workers.spec import load_spec
from workers.train import train

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "tiny-async.yaml"


def spec_for(seed: int, steps: int):
    return load_spec(
        EXAMPLE,
        [f"seed={seed}", f"train.steps={steps}", f"train.eval_every={steps}", "checkpoint.every=0"],
    )


def gain(out: Path) -> tuple[float, float]:
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    evals = [r["eval/accuracy"] for r in rows if "eval/accuracy" in r]
    shares = [r["pool/share"] for r in rows if "pool/share" in r]
    return evals[-1] - evals[0], statistics.fmean(shares) if shares else float("nan")


def solo(seed: int, steps: int, out: Path) -> float:
    t0 = time.perf_counter()
    train(spec_for(seed, steps), out, progress=False)
    return time.perf_counter() - t0


async def pooled(seeds: list[int], steps: int, root: Path, torch_engine: str) -> float:
    t0 = time.perf_counter()
    pool = PoolDriver(capacity=len(seeds), torch_engine=torch_engine)
    for s in seeds:
        pool.admit(f"seed{s}", spec_for(s, steps), root / f"seed{s}")
    members = await pool.wait()
    await pool.close()
    wall = time.perf_counter() - t0
    failed = {r: m.error for r, m in members.items() if m.outcome is None}
    if failed:
        raise RuntimeError(f"pooled runs failed: {failed}")
    return wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--runs", type=int, default=4)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--torch-engine", choices=("lanes", "slots"), default="lanes")
    args = parser.parse_args()
    torch.set_num_threads(1)
    root = args.out or Path(tempfile.mkdtemp(prefix="pool-bench-"))
    seeds = list(range(args.runs))
    model_dir_for(spec_for(0, 1))  # the tiny model built (or found cached) before any timing
    pool_wall = asyncio.run(pooled(seeds, args.steps, root / "pool", args.torch_engine))
    solo_walls = [solo(s, args.steps, root / f"solo-seed{s}") for s in seeds]
    result = {
        "steps": args.steps,
        "runs": args.runs,
        "torch_engine": args.torch_engine,
        "one_solo_s": round(solo_walls[0], 1),
        "solo_in_sequence_s": round(sum(solo_walls), 1),
        "pool_s": round(pool_wall, 1),
        "pool_over_one_solo": round(pool_wall / solo_walls[0], 2),
        "pool_over_sequence": round(pool_wall / sum(solo_walls), 2),
        "per_run": {},
    }
    for s in seeds:
        g_solo, _ = gain(root / f"solo-seed{s}")
        g_pool, share = gain(root / "pool" / f"seed{s}")
        result["per_run"][f"seed{s}"] = {
            "eval_gain_solo": round(g_solo, 3),
            "eval_gain_pool": round(g_pool, 3),
            "pool_share_mean": round(share, 3),
        }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
