"""Wall-clock to reach an accuracy, async over sync, both measured in one run.

Trains the tiny model on the arithmetic task with the sync and the async driver from the same
seed and spec (examples/tiny-async.yaml with async on and off), evaluating greedy held-out
accuracy every other step, and reports for each the training wall-clock until eval/accuracy
first reaches the target (evaluation time excluded), split into generation, training, weight
sync and the trainer's waiting for rollouts.

    .venv/bin/python bench/async_speedup.py [--target 0.85] [--steps 60] [--repeats 2]

On 2 CPU cores generation and training compete for the same cores, so the gain here is
small; the GPU benchmark measures the real one.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from workers.train import train

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "tiny-async.yaml"
PHASES = ("time/generate_s", "time/train_s", "time/weight_sync_s", "time/wait_s")


def run(mode: str, steps: int, target: float, out: Path) -> dict[str, float]:
    overrides = [
        f"train.steps={steps}",
        "train.eval_every=2",
        "checkpoint.every=0",
        f"async.enabled={'true' if mode == 'async' else 'false'}",
    ]
    t0 = time.perf_counter()
    train(EXAMPLE, out, overrides, progress=False)
    wall = time.perf_counter() - t0
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    base = rows[0]["eval/accuracy"]
    elapsed, phases, reached = 0.0, dict.fromkeys(PHASES, 0.0), None
    for r in rows[1:]:
        elapsed += r["time/step_s"]
        for k in PHASES:
            phases[k] += r[k]
        if r.get("eval/accuracy", -1.0) >= target:
            reached = r["step"]
            break
    step_s = statistics.median(r["time/step_s"] for r in rows[1:])
    return {
        "base": base,
        "reached_step": reached,
        "to_target_s": elapsed if reached else float("nan"),
        "run_wall_s": wall,
        "step_s": step_s,
        **phases,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", type=float, default=0.85)
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--repeats", type=int, default=2, help="runs per mode, interleaved")
    args = ap.parse_args()
    results: dict[str, list[dict]] = {"sync": [], "async": []}
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.repeats):
            for mode in ("sync", "async"):
                res = run(mode, args.steps, args.target, Path(tmp) / f"{mode}-{i}")
                results[mode].append(res)
                print(
                    f"{mode:5s} run {i}: base {res['base']:.3f}, reached {args.target} at step "
                    f"{res['reached_step']} after {res['to_target_s']:.2f} s "
                    f"(generate {res['time/generate_s']:.2f}, train {res['time/train_s']:.2f}, "
                    f"sync {res['time/weight_sync_s']:.2f}, wait {res['time/wait_s']:.2f})",
                    flush=True,
                )
    med = {m: statistics.median(r["to_target_s"] for r in rs) for m, rs in results.items()}
    print(
        f"median time to eval/accuracy >= {args.target}: sync {med['sync']:.2f} s, "
        f"async {med['async']:.2f} s"
    )
    step = {m: statistics.median(r["step_s"] for r in rs) for m, rs in results.items()}
    print(
        f"median step time: sync {step['sync']:.3f} s, async {step['async']:.3f} s "
        f"(throughput alone: async/sync = {step['async'] / step['sync']:.2f})"
    )
    print(f"async / sync wall-clock ratio to the target: {med['async'] / med['sync']:.2f}")


if __name__ == "__main__":
    main()
