"""Async against sync: wall clock per step of the real drivers (`train()`) on one host.

    python3 bench/gpu/async_overlap.py --batch 128 --new-tokens 128 --steps 4
    python3 bench/gpu/async_overlap.py --batch 64 --new-tokens 256 --prompt-chars 1024
                                       --micro-batch 16 --steps 4 [--engine-process]
    python3 bench/gpu/async_overlap.py --batch 64 --new-tokens 256 --prompt-chars 1024
        --micro-batch 16 --steps 4 --shares streams,engine_first,trainer_first,split:32
        --trace

--steps steps of --batch rollouts (--group a prompt) × --new-tokens new tokens, once with
the sync driver and then async (max_staleness 1) once for each of --shares: how trainer and
engine share one GPU (`resources.gpu_share`, workers/gpu_share.py; `split:N` gives the
engine N SMs); median step, generate, train and weight-sync times from step 2 on, each
speedup against the same run's sync, and the ideal (G+T)/max(G,T). --sync-twice runs sync
again at the end (the run's noise). --trace profiles step 3 of every run (GPU kernels only)
and prints how busy each stream was, how long both ran at once, and how long the GPU sat
idle. With one GPU visible trainer and engine share it; with two the engine gets cuda:1
(--engine-process: in a child process). --prompt-chars > 0 makes long JSONL prompts, so
that training time can match generation time; --checkpointing sets
train.activation_checkpointing, --compile train.compile and rollout.compile. --backends
torch,vllm also runs the same spec on the vLLM backend, async and sync (--vllm-modes; its
engine in its own process beside the trainer, rollout.gpu_memory_utilization --vllm-memory
of the card: the memory split, checked at launch), each against the torch engine's sync
run. multi.py runs it under each placement. Writes async.json under --out.
"""

from __future__ import annotations

import json
import statistics
import tempfile
import time
from pathlib import Path

import torch
from common import base_spec, long_prompt_task, parser, run, table

TIMES = ("time/step_s", "time/generate_s", "time/train_s", "time/weight_sync_s")


def share_overrides(share: str) -> dict:
    """`streams`, `engine_first`, `trainer_first` or `split:N` (N of the GPU's SMs for the
    engine) as spec overrides."""
    mode, _, sms = share.partition(":")
    over = {"resources.gpu_share": mode}
    if sms:
        count = torch.cuda.get_device_properties(0).multi_processor_count
        over["resources.engine_sm_share"] = int(sms) / count
    return over


class StepTrace:
    """on_metrics hook: profiles the GPU (CUDA activity only) from the end of step
    `at - 1` to the end of step `at`, then summarises the kernels' timeline."""

    def __init__(self, at: int = 3):
        self.at, self.prof, self.summary = at, None, None

    def __call__(self, step: int, values: dict) -> None:
        from torch.profiler import ProfilerActivity, profile

        if not torch.cuda.is_available():
            self.summary = {"error": "no GPU to trace"}
        elif step == self.at - 1 and self.prof is None:
            self.prof = profile(activities=[ProfilerActivity.CUDA])
            self.prof.start()
        elif step == self.at and self.prof is not None:
            torch.cuda.synchronize()
            self.prof.stop()
            try:
                self.summary = timeline(self.prof, values.get("time/step_s", 0.0))
            except Exception as exc:  # a summary that fails is a note, not a lost run
                self.summary = {"error": f"{type(exc).__name__}: {exc}"}
            self.prof = None


def union(intervals: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[list[int]] = []
    for s, e in sorted(intervals):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return [(s, e) for s, e in out]


def length(intervals: list[tuple[int, int]]) -> int:
    return sum(e - s for s, e in intervals)


def timeline(prof, step_s: float) -> dict:
    """Per CUDA stream: kernels, busy seconds (the union of its kernels' spans) and the top
    kernels by time; the GPU's busy and idle seconds in the profiled window, and the seconds
    two kernels ran at once (the streams' busy seconds less the GPU's: each side issues one
    kernel after another, the trainer on one stream, a replayed decode graph on one or
    several, so no more than two overlap)."""
    by_stream: dict[int, list[tuple[int, int]]] = {}
    names: dict[int, dict[str, int]] = {}
    for e in prof.profiler.kineto_results.events():
        if e.device_type() != torch.autograd.DeviceType.CUDA:
            continue
        s, d = e.start_ns(), e.duration_ns()
        if d <= 0:
            continue
        sid = e.device_resource_id()
        by_stream.setdefault(sid, []).append((s, s + d))
        top = names.setdefault(sid, {})
        top[e.name()[:60]] = top.get(e.name()[:60], 0) + d
    if not by_stream:
        return {"error": "no GPU activity recorded"}
    merged = {sid: union(iv) for sid, iv in by_stream.items()}
    every = union([x for iv in merged.values() for x in iv])
    window = (every[-1][1] - every[0][0]) / 1e9
    streams = sorted(merged, key=lambda sid: -length(merged[sid]))
    res = {
        "step_s": step_s,
        "window_s": window,
        "busy_s": length(every) / 1e9,
        "idle_s": window - length(every) / 1e9,
        "streams": [
            {
                "stream": sid,
                "kernels": len(by_stream[sid]),
                "busy_s": length(merged[sid]) / 1e9,
                "top": sorted(names[sid].items(), key=lambda kv: -kv[1])[:5],
            }
            for sid in streams[:8]
        ],
        "both_s": (sum(length(iv) for iv in merged.values()) - length(every)) / 1e9,
    }
    return res


def print_trace(name: str, tr: dict) -> None:
    if "error" in tr:
        print(f"trace {name}: {tr['error']}")
        return
    print(
        f"trace {name}: window {tr['window_s']:.3f} s, GPU busy {tr['busy_s']:.3f} s, "
        f"idle {tr['idle_s']:.3f} s, two kernels at once {tr['both_s']:.3f} s"
    )
    for s in tr["streams"][:4]:
        top = ", ".join(f"{n} {t / 1e9:.3f}" for n, t in s["top"][:3])
        print(f"  stream {s['stream']}: {s['kernels']} kernels, busy {s['busy_s']:.3f} s; {top}")


def one_run(model_dir: Path, args, data: dict, name: str, over: dict) -> dict:
    from workers.train import train

    if over.get("rollout.backend") == "vllm":  # compiled with CUDA graphs by default
        engine = {"rollout.gpu_memory_utilization": args.vllm_memory}
    else:
        engine = {"rollout.compile": args.compile}
    spec = base_spec(
        model_dir,
        **data,
        **{
            "rollout.max_new_tokens": args.new_tokens,
            "train.steps": args.steps,
            "train.prompts_per_step": args.batch // args.group,
            "train.micro_batch_size": args.micro_batch or args.batch,
            "algorithm.num_generations": args.group,
            "async.max_staleness": 1,
            "resources.engine_process": args.engine_process,
            "train.activation_checkpointing": args.checkpointing,
            "train.compile": args.compile,
            **engine,
            **over,
        },
    )
    trace = StepTrace() if args.trace else None
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        train(spec, Path(tmp) / "run", progress=False, on_metrics=trace)
        wall = time.perf_counter() - t0
        lines = (Path(tmp) / "run/metrics.jsonl").read_text().splitlines()
    rows = [json.loads(x) for x in lines]
    steps = [r for r in rows if r.get("step", 0) >= 2 and "time/step_s" in r]
    res = {k: statistics.median(r[k] for r in steps) for k in TIMES}
    res.update(wall_s=wall, steps_timed=len(steps), all_steps=[r["time/step_s"] for r in steps])
    print(name, {k: round(v, 3) for k, v in res.items() if isinstance(v, float)}, flush=True)
    if trace is not None and trace.summary is not None:
        res["trace"] = trace.summary
        print_trace(name, trace.summary)
    torch.cuda.empty_cache() if torch.cuda.is_available() else None
    return res


def part_async(model_dir: Path, args, out: Path) -> dict:
    res: dict = {"prompt_chars": args.prompt_chars, "shares": args.shares}
    data = {}
    if args.prompt_chars:  # long prompts: training grows with them, decoding barely does
        data = long_prompt_task(Path(tempfile.mkdtemp()), args.prompt_chars)
    runs = {"sync": one_run(model_dir, args, data, "sync", {"async.enabled": False})}
    for share in args.shares.split(","):
        over = {"async.enabled": True, **share_overrides(share)}
        name = share if share not in runs else f"{share} again"  # a variant twice: its noise
        try:
            runs[name] = one_run(model_dir, args, data, f"async {name}", over)
        except Exception as exc:  # a variant that cannot run is a row; the others go on
            runs[name] = {"error": f"{type(exc).__name__}: {exc}"}
            print(f"async {name}: {runs[name]['error']}", flush=True)
    if args.sync_twice:
        runs["sync again"] = one_run(model_dir, args, data, "sync again", {"async.enabled": False})
    if "vllm" in args.backends.split(","):
        for mode in args.vllm_modes.split(","):
            over = {"async.enabled": mode == "async", "rollout.backend": "vllm"}
            try:
                runs[f"vllm {mode}"] = one_run(model_dir, args, data, f"vllm {mode}", over)
            except Exception as exc:
                runs[f"vllm {mode}"] = {"error": f"{type(exc).__name__}: {exc}"}
                print(f"vllm {mode}: {runs[f'vllm {mode}']['error']}", flush=True)
    res["runs"] = runs
    s = runs["sync"]
    g, t = s["time/generate_s"], s["time/train_s"]
    res["ideal_speedup"] = ideal = (g + t) / max(g, t)
    where = "two GPUs" if torch.cuda.device_count() > 1 else "one GPU for trainer and engine"
    print(f"\nasync overlap, {args.batch} rollouts × {args.new_tokens} new tokens a step, {where}")
    print(f"ideal (G+T)/max(G,T) = {ideal:.2f}x from the sync run's G {g:.3f} s and T {t:.3f} s")
    table([("run", "step s", "generate s", "train s", "sync s", "speedup")])
    for name, r in runs.items():
        if "error" in r:
            table([(name, "failed", "", "", "", "")])
            continue
        r["speedup"] = s["time/step_s"] / r["time/step_s"]
        table([(name, *(f"{r[k]:.3f}" for k in TIMES), f"{r['speedup']:.2f}x")])
    # the headline of earlier runs (multi.py reads it): the first async variant against sync
    first = runs[args.shares.split(",")[0]]
    res.update(sync=s, **{"async": first})
    if "speedup" in first:
        res.update(speedup=first["speedup"], of_ideal=(first["speedup"] - 1) / (ideal - 1))
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
    ap.add_argument("--compile", action="store_true", help="train.compile and rollout.compile")
    ap.add_argument(
        "--shares", default="streams", help="async variants: resources.gpu_share, split:N"
    )
    ap.add_argument("--sync-twice", action="store_true", help="sync again at the end")
    ap.add_argument("--trace", action="store_true", help="profile step 3 of each run")
    ap.add_argument("--backends", default="torch", help="torch, or torch,vllm: vLLM runs too")
    ap.add_argument("--vllm-modes", default="async,sync", help="vllm: which runs, in order")
    ap.add_argument(
        "--vllm-memory", type=float, default=0.5, help="vllm: rollout.gpu_memory_utilization"
    )
    run(part_async, ap.parse_args())


if __name__ == "__main__":
    main()
