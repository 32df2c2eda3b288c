"""Async against sync on heavy-tailed response lengths: wall clock per step of the real
drivers (`train()`) on one GPU, with partial rollouts and continuous batching and without.

    python3 bench/gpu/async_longtail.py --batch 256 --slots 64 --new-tokens 256
        --prompt-chars 256 --micro-batch 32 --steps 6 --trace
    python3 bench/gpu/async_longtail.py
        --variants sync,async,async-keep,async-wait,async-nocb,async-plain

The workload: --batch rollouts a step (--group a prompt), each row's response budget drawn
from Pareto(shape 1.2, scale 4) capped at --new-tokens (the draw of
bench/rollout_long_tail.py and bench/gpu/longtail.py), through --slots decode slots
(rollout.max_batch_size), after --prompt-chars-token prompts (0: the arithmetic task's).
The budgets are drawn from each request's seed, which the driver derives from the run's
seed, the step and the group, so every variant's rows get the same budgets and the same
tokens are generated and trained in every run. With random weights every response would
run to the token limit, and a whole run takes no per-row budget, so the engine's `generate`
is wrapped (`LongTail`): each request goes in as a partial one whose samples already hold
--new-tokens − budget filler tokens (the protocol's resubmission path), and each result
comes back with the filler cut off, so the driver, the scorer, the trainer and the metrics
see only the generated tokens. The engine prefills the filler and keeps its KV cache, as
longtail.py does: each row's context is prompt + --new-tokens, as if all were long.

Variants (--variants), each one run of --steps steps through `train()` (max_staleness 1,
`resources.gpu_share` as the spec defaults unless --share is given):

    sync         the sync driver (the engine's defaults: continuous batching on)
    sync-nocb    the sync driver, rollout.continuous off
    async        weight_update abort (partial rollouts: an adapter published mid-generation
                 aborts the in-flight rows, which are continued under the new adapter, not
                 restarted) and continuous batching: the defaults
    async-keep   weight_update keep (in-flight rows frozen, the adapter swapped, continued)
    async-wait   weight_update wait (in-flight rows finish under the old adapter; the
                 trainer publishes only once the step ahead is generated), continuous on
    async-nocb   abort, continuous batching off (batches of --slots rows, each to its end)
    async-plain  neither: weight_update wait, continuous off

Per run: the median step, generate, train and trainer-wait seconds over steps 2 … N − 1
(the first has the warm-up; in an async run the last trains with nothing left to generate)
less the profiled step; response tokens a step and tokens/s (response tokens over the step);
resubmitted groups (aborted and continued); each speedup against the same call's first sync
run. --trace profiles step N − 1 of every run (async_overlap.py's timeline: GPU busy, idle,
two kernels at once), so the medians are of steps 2 … N − 2. Writes async_longtail.json
under --out.
"""

from __future__ import annotations

import json
import math
import random
import statistics
import tempfile
import time
import traceback
from dataclasses import replace
from pathlib import Path

import torch
from async_overlap import StepTrace, print_trace, share_overrides
from common import base_spec, long_prompt_task, parser, run, table

VARIANTS = {
    "sync": {"async.enabled": False},
    "sync-nocb": {"async.enabled": False, "rollout.continuous": False},
    "async": {"async.enabled": True, "async.weight_update": "abort"},
    "async-keep": {"async.enabled": True, "async.weight_update": "keep"},
    "async-wait": {"async.enabled": True, "async.weight_update": "wait"},
    "async-nocb": {
        "async.enabled": True,
        "async.weight_update": "abort",
        "rollout.continuous": False,
    },
    "async-plain": {
        "async.enabled": True,
        "async.weight_update": "wait",
        "rollout.continuous": False,
    },
}
FILLER = 5  # a plain token id (the char tokenizer's specials are 0-2)


def budgets(seed: int, n: int, cap: int) -> list[int]:
    """The response budgets of one group's n rows: Pareto(1.2, scale 4), capped at cap, a
    pure function of the request's seed."""
    rng = random.Random(seed)
    return [min(cap, math.ceil(4 * (1 - rng.random()) ** (-1 / 1.2))) for _ in range(n)]


class LongTail:
    """Wraps an engine's `generate` (on the instance, so that the engine stays what it is
    for the driver and the GPU share) to give each row its budget: a request goes in with
    cap − budget filler tokens prepended to each sample (its partial tokens, if it is a
    resubmission), and each result comes back with them cut off."""

    def __init__(self, backend, cap: int):
        self.backend, self.cap, self.inner = backend, cap, backend.generate
        self.calls = self.resubmitted = 0
        self.sized = False
        backend.generate = self.generate

    def size_cache(self, requests: list) -> None:
        """Give the static decoder's cache, before its first capture, the most positions a
        row can need (its prompt, cap − 1 filler tokens, cap new ones), so that no later
        batch grows it. A growth drops every captured decode graph and captures the next
        into the same memory-pool handle, which the caching allocator refuses once all of
        that pool's graphs are gone (`use_count > 0`): the likely cause of the assert
        that failed the sync runs of the first H200 call (docs/performance.md)."""
        decoder = getattr(self.backend, "decoder", None)
        if decoder is not None and hasattr(decoder, "reserve"):
            decoder.reserve(max(len(r.prompt_ids) for r in requests) + 2 * self.cap)
        self.sized = True

    async def generate(self, requests: list) -> list:
        from workers.rollout import Sample

        if not self.sized:
            self.size_cache(requests)
        held, sent = {}, []
        for r in requests:
            held[r.request_id] = h = [self.cap - b for b in budgets(r.seed, r.n, self.cap)]
            self.resubmitted += r.partial is not None
            samples = r.partial or [Sample() for _ in range(r.n)]
            partial = [
                Sample(
                    [FILLER] * k + s.token_ids,
                    [0.0] * k + s.logprobs,
                    [0] * k + s.versions,
                    s.finish_reason,
                    s.text,
                )
                for k, s in zip(h, samples, strict=True)
            ]
            sent.append(replace(r, partial=partial))
        self.calls += 1
        results = await self.inner(sent)
        for res in results:
            for k, s in zip(held[res.request_id], res.samples, strict=True):
                del s.token_ids[:k], s.logprobs[:k], s.versions[:k]
        return results


def one_run(model_dir: Path, args, data: dict, name: str) -> dict:
    import workers.loop.setup as setup
    from workers.train import train

    over = dict(VARIANTS[name.removesuffix(" again")])
    if args.share:
        over.update(share_overrides(args.share))
    spec = base_spec(
        model_dir,
        **data,
        **{
            "rollout.max_new_tokens": args.new_tokens,
            "rollout.max_batch_size": args.slots or args.batch,
            "train.steps": args.steps,
            "train.prompts_per_step": args.batch // args.group,
            "train.micro_batch_size": args.micro_batch or args.batch,
            "algorithm.num_generations": args.group,
            "async.max_staleness": 1,
            "train.activation_checkpointing": args.checkpointing,
            "rollout.decode": args.decode,
            **over,
        },
    )
    wrapped: list[LongTail] = []
    make = setup.make_backend

    def long_tail_backend(*a, **kw):
        backend = make(*a, **kw)
        wrapped.append(LongTail(backend, args.new_tokens))
        return backend

    trace = StepTrace(args.steps - 1) if args.trace else None
    setup.make_backend = long_tail_backend
    try:
        with tempfile.TemporaryDirectory() as tmp:
            t0 = time.perf_counter()
            train(spec, Path(tmp) / "run", progress=False, on_metrics=trace)
            wall = time.perf_counter() - t0
            lines = (Path(tmp) / "run/metrics.jsonl").read_text().splitlines()
    finally:
        setup.make_backend = make
    rows = [json.loads(x) for x in lines]
    rows = [r for r in rows if "time/step_s" in r]
    last = max(r["step"] for r in rows)
    skip = {args.steps - 1} if args.trace else set()
    timed = [r for r in rows if 2 <= r["step"] < last and r["step"] not in skip]
    timed = timed or [r for r in rows if r["step"] >= 2] or rows  # a short run: what there is
    med = lambda key: statistics.median(r.get(key, 0.0) for r in timed)  # noqa: E731
    res = {
        "step_s": med("time/step_s"),
        "generate_s": med("time/generate_s"),
        "train_s": med("time/train_s"),
        "wait_s": med("time/wait_s"),
        "sync_s": med("time/weight_sync_s"),
        "tok_s": med("throughput/tokens_per_s"),
        "tokens_step": statistics.median(
            r["throughput/tokens_per_s"] * r["time/step_s"] for r in timed
        ),
        "len_mean": med("response_length/mean"),
        "len_max": max(r.get("response_length/max", 0.0) for r in timed),
        "steps_timed": [r["step"] for r in timed],
        "all_steps": {r["step"]: r["time/step_s"] for r in rows},
        "tokens_total": rows[-1].get("tokens/total", 0.0),
        "wall_s": wall,
    }
    tail = wrapped[0]
    res.update(resubmitted=tail.resubmitted, generate_calls=tail.calls)
    show = (
        "step_s",
        "generate_s",
        "train_s",
        "wait_s",
        "sync_s",
        "tok_s",
        "tokens_total",
        "wall_s",
    )
    print(name, {k: round(res[k], 3) for k in show}, f"resubmitted {tail.resubmitted}", flush=True)
    if trace is not None and trace.summary is not None:
        res["trace"] = trace.summary
        print_trace(name, trace.summary)
    torch.cuda.empty_cache() if torch.cuda.is_available() else None
    return res


def part_async_longtail(model_dir: Path, args, out: Path) -> dict:
    names = args.variants.split(",")
    unknown = [n for n in names if n.removesuffix(" again") not in VARIANTS]
    if unknown:
        raise SystemExit(f"unknown variants {unknown}; known: {', '.join(VARIANTS)}")
    data = {}
    if args.prompt_chars:  # long prompts: training grows with them, decoding barely does
        data = long_prompt_task(Path(tempfile.mkdtemp()), args.prompt_chars)
    cap, slots = args.new_tokens, args.slots or args.batch
    res: dict = {"batch": args.batch, "slots": slots, "cap": cap, "variants": names}
    runs: dict = {}
    for name in names:
        key = name if name not in runs else f"{name} again"  # a variant twice: its noise
        try:
            runs[key] = one_run(model_dir, args, data, key)
        except Exception as exc:  # a variant that cannot run is a row; the others go on
            traceback.print_exc()
            runs[key] = {"error": f"{type(exc).__name__}: {exc}"}
            print(f"{key}: {runs[key]['error']}", flush=True)
    res["runs"] = runs
    ok = {k: r for k, r in runs.items() if "error" not in r}
    base = next((r for k, r in ok.items() if k.startswith("sync")), None)
    same = len({r["tokens_total"] for r in ok.values()}) == 1
    res["same_tokens"] = same
    print(
        f"\nasync on the long tail: {args.batch} rollouts a step ({args.batch // args.group} "
        f"groups × {args.group}) through {slots} slots, budgets Pareto(1.2, 4) capped at {cap}, "
        f"{args.prompt_chars or 'arithmetic'}-token prompts, micro-batch "
        f"{args.micro_batch or args.batch}; one GPU; medians of steps "
        f"{next(iter(ok.values()))['steps_timed'] if ok else []}"
    )
    print(f"response tokens of the whole run the same in every run: {same}")
    if base is not None:
        g, t = base["generate_s"], base["train_s"]
        res["ideal_speedup"] = ideal = (g + t) / max(g, t)
        print(f"ideal (G+T)/max(G,T) = {ideal:.2f}x from the sync run's G {g:.3f} s, T {t:.3f} s")
    head = ("run", "step s", "generate s", "train s", "wait s", "sync s", "tokens/s", "resubmitted")
    traced = any("trace" in r for r in ok.values())
    table([(*head, "speedup", *(("GPU busy s", "GPU idle s", "both s") if traced else ()))])
    for name, r in runs.items():
        if "error" in r:
            table([(name, "failed")])
            continue
        r["speedup"] = base["step_s"] / r["step_s"] if base else float("nan")
        cells = [f"{r[k]:.3f}" for k in ("step_s", "generate_s", "train_s", "wait_s", "sync_s")]
        cells += [f"{r['tok_s'] / 1e3:.2f}k", str(r["resubmitted"]), f"{r['speedup']:.2f}x"]
        tr = r.get("trace", {})
        if traced:
            keys = ("busy_s", "idle_s", "both_s")
            cells += [f"{tr[k]:.3f}" for k in keys] if "idle_s" in tr else [""] * 3
        table([(name, *cells)])
    return res


def main() -> None:
    ap = parser(__doc__)
    ap.add_argument("--batch", type=int, default=256, help="rollouts a step")
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--slots", type=int, default=64, help="rollout.max_batch_size (0: --batch)")
    ap.add_argument("--new-tokens", type=int, default=256, help="the budgets' cap")
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--prompt-chars", type=int, default=256, help="JSONL prompts (0: arithmetic)")
    ap.add_argument("--micro-batch", type=int, default=32, help="0 = the whole batch")
    ap.add_argument("--checkpointing", action="store_true", help="train.activation_checkpointing")
    ap.add_argument("--decode", default="auto", help="rollout.decode (static on a CPU check)")
    ap.add_argument("--share", default="", help="resources.gpu_share (split:N); default: spec's")
    ap.add_argument("--variants", default="sync,async,async-plain", help=", ".join(VARIANTS))
    ap.add_argument("--trace", action="store_true", help="profile step N - 1 of each run")
    run(part_async_longtail, ap.parse_args())


if __name__ == "__main__":
    main()
