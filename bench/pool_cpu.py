"""Four runs in one pool against one run alone and four runs alone one after the other, on
the CPU, measured side by side in one run.

Each run is examples/tiny-async.yaml (the tiny model's arithmetic task, async GRPO) with its
own seed, trained for `--steps` steps with eval/accuracy at the start and the end. Reported:
the wall-clock of one solo run, of four solo runs in sequence, and of the four runs in one
pool (workers/pool/driver.py, the torch pool engine) once for each of `--pools`:
- `batched_process` (PoolDriver(engine_process=True)): the batched trainer (each trainer turn steps
  every run whose batch is waiting in one forward and backward) and the pool engine in a
  forked child process (workers/rollout/engine_process.py);
- `batched`: the same with the engine in the pool's own process (before engine processes);
- `per_run`, `per_run_process`: one run's step a trainer turn (the trainer before batching);
and each run's eval-accuracy gain (end minus start) solo and pooled, with the pooled runs'
mean `pool/share`. Beside each wall-clock, the CPU seconds (user + system) over it, of this
process and of its engine process: on a shared machine the wall-clock moves with the other
work's load, the CPU seconds much less. For each pool, the seconds it took to start (the
first member's admission: trainer and engine), the seconds its trainer and its engine's
generation turns were held (`busy_s`: what the two shared resources spent, against the
wall-clock), where batched the trainer thread's own CPU seconds in its turns
(`trainer_cpu`) and how many runs its turns took (the mean, and the count by size).

    .venv/bin/python bench/pool_cpu.py [--steps 30] [--runs 4] [--decode auto|static|dynamic]
        [--pools batched_process,batched,per_run] [--repeat 1]
    .venv/bin/python bench/pool_cpu.py --step-only 20 [--runs 4]   # the train step alone

The pool's torch engine on the CPU decodes with the PEFT forward (`rollout.decode: auto`),
one adapter's rows a batch; `--decode static` gives it the static decoder's slot table,
every run's rows in one batch (eager on the CPU). The GPU benchmark (bench/gpu/pool.py)
measures batched per-row decoding.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import statistics
import tempfile
import time
from collections import Counter
from pathlib import Path

import torch

from workers.loop.setup import model_dir_for
from workers.pool.driver import PoolDriver
from workers.spec import load_spec
from workers.train import train

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "tiny-async.yaml"


def spec_for(seed: int, steps: int, decode: str = "auto"):
    return load_spec(
        EXAMPLE,
        [f"seed={seed}", f"train.steps={steps}", f"train.eval_every={steps}",
         "checkpoint.every=0", f"rollout.decode={decode}"],
    )  # fmt: skip


def gain(out: Path) -> tuple[float, float]:
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    evals = [r["eval/accuracy"] for r in rows if "eval/accuracy" in r]
    shares = [r["pool/share"] for r in rows if "pool/share" in r]
    return evals[-1] - evals[0], statistics.fmean(shares) if shares else float("nan")


def cpu_s() -> float:
    """This process's CPU seconds and its ended children's (an engine process is waited for
    when its pool closes)."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def solo(seed: int, steps: int, out: Path, decode: str) -> tuple[float, float]:
    t0, c0 = time.perf_counter(), cpu_s()
    train(spec_for(seed, steps, decode), out, progress=False)
    return time.perf_counter() - t0, cpu_s() - c0


POOLS = {  # name: (batched trainer, engine in a child process)
    "batched": (True, False),
    "per_run": (False, False),
    "batched_process": (True, True),
    "per_run_process": (False, True),
}


async def pooled(
    seeds: list[int], steps: int, root: Path, decode: str, kind: str
) -> tuple[float, float, Counter, dict[str, float]]:
    batched, engine_process = POOLS[kind]
    t0, c0 = time.perf_counter(), cpu_s()
    pool = PoolDriver(capacity=len(seeds), batched_trainer=batched, engine_process=engine_process)
    for s in seeds:
        pool.admit(f"seed{s}", spec_for(s, steps, decode), root / f"seed{s}")
    start = time.perf_counter() - t0  # the trainer and the engine started (the first admit)
    members = await pool.wait()
    await pool.close()
    wall, cpu = time.perf_counter() - t0, cpu_s() - c0
    failed = {r: m.error for r, m in members.items() if m.outcome is None}
    if failed:
        raise RuntimeError(f"pooled runs failed: {failed}")
    sizes = pool.train_turns.sizes if pool.train_turns is not None else Counter()
    # the seconds the trainer and the engine's generation turns were held (charged to runs)
    busy = {"trainer": pool.trainer_gate.share.total_s, "generation": pool.gen_gate.share.total_s}
    if batched:  # the trainer thread's own CPU seconds in its turns
        busy["trainer_cpu"] = pool.trainer_cpu_s
    return wall, cpu, sizes, {"start": start, **busy}


def step_only(runs: int, repeats: int) -> dict:
    """The trainer's step alone (no engine, no loop): `runs` runs of the example's spec as
    adapters of one policy (as a pool holds them), each with a batch of the example's shape
    (16 prompts x 8 samples, made up), stepped together (`train_steps`, one forward and
    backward) and one after the other (`train_step` each), alternately, `repeats` times
    each; the medians, wall-clock and CPU seconds of the thread."""
    import random

    from workers.policy import LoraPolicy, TrainSample, collate

    specs = [spec_for(s, 1) for s in range(runs)]
    host = specs[0].model_copy(update={"lora": specs[0].lora.model_copy(update={"r": 1})})
    trainer = LoraPolicy(host, model_dir_for(specs[0]))
    tok = trainer.tokenizer
    rng = random.Random(0)
    steps = []
    for spec in specs:
        adapter = trainer.add_adapter(spec)
        samples = []
        for _ in range(spec.train.prompts_per_step):
            a, b = rng.randint(0, 50), rng.randint(0, 50)
            prompt = tok.encode(f"{a}+{b}=", add_special_tokens=False)
            for j in range(spec.algorithm.num_generations):
                resp = tok.encode(str(a + b + j % 2), add_special_tokens=False)
                resp.append(tok.eos_token_id)
                samples.append(
                    TrainSample(prompt, resp, [-0.5] * len(resp), [0] * len(resp), j % 2 - 0.5)
                )
        steps.append((adapter, collate(samples, tok.pad_token_id)))
    times: dict[str, list[tuple[float, float]]] = {"together": [], "one_by_one": []}
    for i in range(repeats + 1):  # the first round warms up
        for kind in ("together", "one_by_one"):
            t0, c0 = time.perf_counter(), time.thread_time()
            if kind == "together":
                trainer.train_steps(steps)
            else:
                for adapter, batch in steps:
                    trainer.train_step(adapter, batch)
            if i:
                times[kind].append((time.perf_counter() - t0, time.thread_time() - c0))
    assert trainer.together[runs] == repeats + 1, trainer.together
    out = {
        kind: {
            "wall_s": round(statistics.median(w for w, _ in t), 3),
            "cpu_s": round(statistics.median(c for _, c in t), 3),
        }
        for kind, t in times.items()
    }
    out["speedup"] = round(out["one_by_one"]["wall_s"] / out["together"]["wall_s"], 2)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--runs", type=int, default=4)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument(
        "--decode",
        choices=("auto", "static", "dynamic"),
        default="auto",
        help="rollout.decode of every run: auto (the PEFT forward on the CPU) or static",
    )
    parser.add_argument(
        "--pools",
        default="batched_process,batched,per_run",
        help=f"the pools to measure, in this order, comma-separated, of {', '.join(POOLS)}",
    )
    parser.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="run the pools this many times, alternating (each one's wall-clock, CPU seconds "
        "and trainer figures listed); the first run's details are reported",
    )
    parser.add_argument(
        "--step-only",
        type=int,
        default=0,
        metavar="REPEATS",
        help="time the trainer's step alone instead: --runs runs stepped together and one "
        "after the other, alternately, REPEATS times each",
    )
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.step_only:
        model_dir_for(spec_for(0, 1))
        print(json.dumps({"runs": args.runs, **step_only(args.runs, args.step_only)}, indent=2))
        return
    root = args.out or Path(tempfile.mkdtemp(prefix="pool-bench-"))
    seeds = list(range(args.runs))
    model_dir_for(spec_for(0, 1))  # the tiny model built (or found cached) before any timing
    pools, repeats = {}, {}
    kinds = args.pools.split(",")
    for kind in kinds:
        if kind not in POOLS:
            parser.error(f"--pools: {kind!r} is not one of {', '.join(POOLS)}")
    for rep in range(args.repeat):  # the pools alternate: each repeat runs every one once
        for kind in kinds:
            out = root / (kind if rep == 0 else f"{kind}-{rep}")
            got = asyncio.run(pooled(seeds, args.steps, out, args.decode, kind))
            pools.setdefault(kind, got)
            wall, cpu, _, busy = got
            repeats.setdefault(kind, []).append(
                {"wall_s": round(wall, 1), "cpu_s": round(cpu, 1)}
                | {f"{k}_s": round(v, 1) for k, v in busy.items() if k.startswith("trainer")}
            )
    solos = [solo(s, args.steps, root / f"solo-seed{s}", args.decode) for s in seeds]
    solo_walls, solo_cpus = [w for w, _ in solos], [c for _, c in solos]
    result = {
        "steps": args.steps,
        "runs": args.runs,
        "decode": args.decode,
        "one_solo_s": round(solo_walls[0], 1),
        "solo_in_sequence_s": round(sum(solo_walls), 1),
        "cpu_s": {
            "one_solo": round(solo_cpus[0], 1),
            "solo_in_sequence": round(sum(solo_cpus), 1),
        },
    }
    for kind, (wall, cpu, sizes, busy) in pools.items():
        result[f"pool_{kind}_s"] = round(wall, 1)
        result[f"pool_{kind}_busy_s"] = {k: round(v, 1) for k, v in busy.items()}
        result[f"pool_{kind}_over_one_solo"] = round(wall / solo_walls[0], 2)
        result[f"pool_{kind}_over_sequence"] = round(wall / sum(solo_walls), 2)
        result["cpu_s"][f"pool_{kind}"] = round(cpu, 1)
        if sizes:
            result[f"pool_{kind}_runs_per_turn"] = {
                "mean": round(sum(n * k for n, k in sizes.items()) / sum(sizes.values()), 2),
                "turns_by_size": dict(sorted(sizes.items())),
            }
    if args.repeat > 1:
        result["pool_repeats"] = repeats
    result["per_run"] = {}
    for s in seeds:
        g_solo, _ = gain(root / f"solo-seed{s}")
        row = {"eval_gain_solo": round(g_solo, 3)}
        for kind in pools:
            g_pool, share = gain(root / kind / f"seed{s}")
            row[f"eval_gain_pool_{kind}"] = round(g_pool, 3)
            row[f"pool_share_mean_{kind}"] = round(share, 3)
        result["per_run"][f"seed{s}"] = row
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
