"""Training throughput of a pool on one GPU: K runs in one pool against K runs alone, one
after the other, measured side by side in one run.

    python3 bench/gpu/pool_runs.py                    # 8 runs, 3 steps, 8 groups × 8 × 128
    python3 bench/gpu/pool_runs.py --runs 4 --steps 4 --new-tokens 256

Each run is the arithmetic task on the --shape model (random init, LoRA r=16 on every
linear, torch backend), --steps steps of --groups prompts × --group rollouts × --new-tokens
new tokens, each run its own seed. Pooled: the K runs admitted together to one PoolDriver
(workers/pool/driver.py, the by-hand form of workers/pool/job.py) over the torch engine
with a slot per run (workers/rollout/torch_engine/, the static decoder's slot table on a
GPU: rows of every adapter in one CUDA-graph batch, rollout.max_batch_size K × groups ×
group; --decode picks rollout.decode) and one multi-adapter trainer. In sequence: the
same K specs through `train()` one after the other (each run its own trainer and engine,
batch groups × group).

Counted: tokens trained a second of wall clock, each side summed over its K runs: the
completion tokens of the groups each run trained on (the loop's `tokens/total`; each was
generated, then trained on). Wall clock: from the first run's start to the last run's end,
so each side includes loading the model and starting its trainer and engine (once for the
pool, K times in sequence) and every run's final eval; building the random-init model dir
is excluded from both. The pool runs first, so it also pays the process's CUDA warm-up.
--deadline-s bounds a run: no solo run starts past it, and the sequence's tokens/s is that
of the solo runs done (the runs differ only in their seed). Writes pool_runs.json under
--out.
"""

from __future__ import annotations

import asyncio
import json
import tempfile
import time
from pathlib import Path

import torch
from common import base_spec, parser, peak_gb, reset_peak, run, table


def spec_for(model_dir: Path, args, seed: int, batch: int) -> dict:
    return base_spec(
        model_dir,
        **{
            "seed": seed,
            "rollout.max_new_tokens": args.new_tokens,
            "rollout.max_batch_size": batch,
            "algorithm.num_generations": args.group,
            "train.steps": args.steps,
            "train.prompts_per_step": args.groups,
            "train.micro_batch_size": args.groups * args.group,
            "checkpoint.every": 0,
            "async.enabled": True,
            "async.max_staleness": 1,
            "rollout.decode": args.decode,
        },
    )


def trained_tokens(out: Path) -> tuple[int, int]:
    """(completion tokens trained on, steps) of a finished run's metrics.jsonl."""
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    rows = [r for r in rows if "tokens/total" in r]
    return int(rows[-1]["tokens/total"]), len(rows)


async def pooled(model_dir: Path, args, root: Path) -> float:
    from workers.pool.driver import PoolDriver

    batch = args.runs * args.groups * args.group
    t0 = time.perf_counter()
    pool = PoolDriver(capacity=args.runs)
    for s in range(args.runs):
        pool.admit(f"run{s}", spec_for(model_dir, args, s, batch), root / f"run{s}")
    members = await pool.wait()
    await pool.close()
    wall = time.perf_counter() - t0
    failed = {r: f"{type(m.error).__name__}: {m.error}" for r, m in members.items() if m.error}
    if failed:
        raise RuntimeError(f"pooled runs failed: {failed}")
    return wall


def solo(model_dir: Path, args, seed: int, out: Path) -> float:
    from workers.train import train

    t0 = time.perf_counter()
    train(spec_for(model_dir, args, seed, args.groups * args.group), out, progress=False)
    return time.perf_counter() - t0


def side(name: str, root: Path, runs: int, wall: float, peak: float) -> dict:
    counts = [trained_tokens(root / f"run{s}") for s in range(runs)]
    tokens = sum(c for c, _ in counts)
    row = {
        "name": name,
        "wall_s": wall,
        "tokens": tokens,
        "steps": [n for _, n in counts],
        "tok_s": tokens / wall,
        "peak_gb": peak,
    }
    print(row, flush=True)
    return row


def part_pool_runs(model_dir: Path, args, out: Path) -> dict:
    root = Path(tempfile.mkdtemp(prefix="pool-runs-"))
    k = args.runs
    res: dict = {
        "runs": k,
        "steps": args.steps,
        "groups": args.groups,
        "group": args.group,
        "new_tokens": args.new_tokens,
        "decode": args.decode,
    }
    reset_peak()
    pool_wall = asyncio.run(pooled(model_dir, args, root / "pool"))
    pool = side(f"{k} runs in one pool", root / "pool", k, pool_wall, peak_gb())
    reset_peak()
    walls: list[float] = []
    for s in range(k):  # with --deadline-s, the runs done by then (one at least) stand in
        if walls and args.deadline_s and pool_wall + sum(walls) > args.deadline_s:
            print(f"--deadline-s {args.deadline_s}: {s} of {k} solo runs measured", flush=True)
            break
        walls.append(solo(model_dir, args, s, root / "solo" / f"run{s}"))
        print(f"solo run{s}: {walls[-1]:.1f} s", flush=True)
    name = f"{k} runs in sequence" + ("" if len(walls) == k else f" ({len(walls)} measured)")
    seq = side(name, root / "solo", len(walls), sum(walls), peak_gb())
    seq["one_run_s"] = walls
    res.update(pool=pool, sequence=seq, speedup=pool["tok_s"] / seq["tok_s"])
    where = torch.cuda.get_device_name() if torch.cuda.is_available() else "CPU"
    print(
        f"\n{k} runs × {args.steps} steps × {args.groups} groups × {args.group} rollouts × "
        f"{args.new_tokens} new tokens, r16 LoRA, {args.shape}{' (small)' if args.small else ''}"
        f", {where}; wall clock includes model load and engine start, not the model build"
    )
    table([("what", "wall s", "tokens", "tokens/s", "peak GB", "vs sequence")])
    for r in (pool, seq):
        table([(r["name"], f"{r['wall_s']:.1f}", r["tokens"], f"{r['tok_s'] / 1e3:.2f}k",
                f"{r['peak_gb']:.1f}", f"{r['tok_s'] / seq['tok_s']:.2f}x")])  # fmt: skip
    return res


def main() -> None:
    ap = parser(__doc__)
    ap.add_argument("--runs", type=int, default=8)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--groups", type=int, default=8, help="prompts a step")
    ap.add_argument("--group", type=int, default=8, help="rollouts a prompt")
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument(
        "--deadline-s",
        type=float,
        default=0.0,
        help="start no further solo run after this many seconds of both sides: the sequence's "
        "tokens/s is then that of the solo runs done (identical but for the seed)",
    )
    ap.add_argument("--decode", choices=("auto", "static", "dynamic"), default="auto")
    run(part_pool_runs, ap.parse_args())


if __name__ == "__main__":
    main()
