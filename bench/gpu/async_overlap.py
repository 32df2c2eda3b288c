"""Async against sync: wall clock per step of the real drivers (`train()`) on one host.

    python3 bench/gpu/async_overlap.py --batch 128 --new-tokens 128 --steps 4
    python3 bench/gpu/async_overlap.py --batch 64 --new-tokens 256 --prompt-chars 1024
                                       --micro-batch 16 --steps 4 [--engine-process]

--steps steps of --batch rollouts (--group a prompt) × --new-tokens new tokens, once with
the sync driver and once async (max_staleness 1); median step, generate, train and
weight-sync times from step 2 on, the speedup, and the ideal (G+T)/max(G,T). With one GPU
visible trainer and engine share it; with two the engine gets cuda:1 (--engine-process: in
a child process). --prompt-chars > 0 makes long JSONL prompts, so that training time can
match generation time; --checkpointing sets train.activation_checkpointing (the 8B shapes
at large micro-batches). multi.py runs it under each placement. Writes async.json under --out.
"""

from __future__ import annotations

import json
import statistics
import tempfile
import time
from pathlib import Path

import torch
from common import base_spec, long_prompt_task, parser, run, table


def part_async(model_dir: Path, args, out: Path) -> dict:
    from workers.train import train

    res: dict = {"prompt_chars": args.prompt_chars}
    data = {}
    if args.prompt_chars:  # long prompts: training grows with them, decoding barely does
        data = long_prompt_task(Path(tempfile.mkdtemp()), args.prompt_chars)
    for mode in ("sync", "async"):
        spec = base_spec(
            model_dir,
            **data,
            **{
                "rollout.max_new_tokens": args.new_tokens,
                "train.steps": args.steps,
                "train.prompts_per_step": args.batch // args.group,
                "train.micro_batch_size": args.micro_batch or args.batch,
                "algorithm.num_generations": args.group,
                "async.enabled": mode == "async",
                "async.max_staleness": 1,
                "resources.engine_process": args.engine_process,
                "train.activation_checkpointing": args.checkpointing,
            },
        )
        with tempfile.TemporaryDirectory() as tmp:
            t0 = time.perf_counter()
            train(spec, Path(tmp) / "run", progress=False)
            wall = time.perf_counter() - t0
            rows = [
                json.loads(x) for x in (Path(tmp) / "run/metrics.jsonl").read_text().splitlines()
            ]
        steps = [r for r in rows if r.get("step", 0) >= 2 and "time/step_s" in r]
        med = {
            k: statistics.median(r[k] for r in steps)
            for k in ("time/step_s", "time/generate_s", "time/train_s", "time/weight_sync_s")
        }
        res[mode] = dict(med, wall_s=wall, steps_timed=len(steps))
        print(mode, res[mode], flush=True)
    s, a = res["sync"], res["async"]
    g, t = s["time/generate_s"], s["time/train_s"]
    ideal = (g + t) / max(g, t)
    got = s["time/step_s"] / a["time/step_s"]
    res.update(
        ideal_speedup=ideal,
        speedup=got,
        of_ideal=(got - 1) / (ideal - 1) if ideal > 1 else float("nan"),
    )
    where = "two GPUs" if torch.cuda.device_count() > 1 else "one GPU for trainer and engine"
    print(f"\nasync overlap, {args.batch} rollouts × {args.new_tokens} new tokens a step, {where}")
    table([("what", "sync", "async")])
    for k in ("time/step_s", "time/generate_s", "time/train_s", "time/weight_sync_s"):
        table([(k, f"{s[k]:.3f}", f"{a[k]:.3f}")])
    print(
        f"speedup async/sync {got:.2f}x; ideal (G+T)/max(G,T) = {ideal:.2f}x; "
        f"share of the ideal gain {res['of_ideal']:.0%}"
    )
    return res


def main() -> None:
    ap = parser(__doc__)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--new-tokens", type=int, default=256)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--prompt-chars", type=int, default=0, help="long JSONL prompts")
    ap.add_argument("--micro-batch", type=int, default=0, help="0 = the whole batch")
    ap.add_argument("--engine-process", action="store_true", help="engine in a child process")
    ap.add_argument("--checkpointing", action="store_true", help="train.activation_checkpointing")
    run(part_async, ap.parse_args())


if __name__ == "__main__":
    main()
