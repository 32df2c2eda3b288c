"""Where a profiled step's GPU time goes, and where the GPU waits: a Chrome trace's summary.

    python3 bench/gpu/trace_gaps.py train_trace.json[.gz]

From torch.profiler's exported trace (CPU and CUDA activities): the GPU's busy time (the
union of its kernels, copies and memsets) against the span of the profiled steps; the
kernels' time by kind; the time in each "phase: …" range (bench/gpu/train.py --interleave
--profile labels them) on the host and on the GPU (kernels launched inside it); and the
longest idle gaps with the host op that launched the kernel after each one.
"""

from __future__ import annotations

import bisect
import gzip
import json
import re
import sys
from collections import defaultdict
from pathlib import Path

# kernel name → kind, first match wins
KINDS = [
    ("gemm", re.compile(r"gemm|cutlass|sm90_xmma|nvjet|cublas|wgmma", re.I)),
    ("attention", re.compile(r"flash|fmha|cudnn|sdpa|attention", re.I)),
    ("triton", re.compile(r"^triton_", re.I)),
    ("optimizer", re.compile(r"adam|multi_tensor|foreach", re.I)),
    ("copy/cat", re.compile(r"copy|cat|memcpy|memset", re.I)),
    ("reduce", re.compile(r"reduce", re.I)),
    ("elementwise", re.compile(r"elementwise|vectorized", re.I)),
]


def _kind(name: str) -> str:
    for kind, pat in KINDS:
        if pat.search(name):
            return kind
    return "other"


def _union(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[list[float]] = []
    for s, e in sorted(intervals):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return [(s, e) for s, e in out]


def _load(path: Path) -> list[dict]:
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt") as f:
        data = json.load(f)
    return data["traceEvents"] if isinstance(data, dict) else data


def summarize(path: str | Path, top: int = 12) -> str:
    events = [e for e in _load(Path(path)) if e.get("ph") == "X"]
    gpu = [e for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    if not gpu:
        return "no GPU events in the trace"
    runtime = {
        e["args"]["correlation"]: e
        for e in events
        if e.get("cat") == "cuda_runtime" and "correlation" in e.get("args", {})
    }
    ops = sorted(
        (e for e in events if e.get("cat") in ("cpu_op", "user_annotation", "python_function")),
        key=lambda e: e["ts"],
    )
    busy = _union([(e["ts"], e["ts"] + e["dur"]) for e in gpu])
    phases = [e for e in ops if e["name"].startswith("phase: ")]
    steps = [e for e in ops if e["name"].startswith("ProfilerStep")] or phases
    t0 = min(e["ts"] for e in (steps or gpu))
    t1 = max(e["ts"] + e["dur"] for e in gpu)
    span = t1 - t0
    busy_us = sum(e - s for s, e in busy)
    lines = [
        f"span {span / 1e3:.1f} ms (first op to last kernel), GPU busy {busy_us / 1e3:.1f} ms "
        f"({100 * busy_us / span:.0f} %), idle {(span - busy_us) / 1e3:.1f} ms; "
        f"{len(gpu)} GPU events"
    ]
    by_kind: dict[str, list[float]] = defaultdict(lambda: [0.0, 0])
    by_name: dict[str, list[float]] = defaultdict(lambda: [0.0, 0])
    for e in gpu:
        k = by_kind[_kind(e["name"]) if e.get("cat") == "kernel" else "copy/cat"]
        k[0] += e["dur"]
        k[1] += 1
        n = by_name[e["name"][:90]]
        n[0] += e["dur"]
        n[1] += 1
    kinds = sorted(by_kind.items(), key=lambda x: -x[1][0])
    lines.append(
        "GPU time by kind: " + ", ".join(f"{k} {v[0] / 1e3:.1f} ms ({v[1]})" for k, v in kinds)
    )
    lines.append("top kernels:")
    for name, (us, n) in sorted(by_name.items(), key=lambda x: -x[1][0])[:top]:
        lines.append(f"  {us / 1e3:7.2f} ms {n:5d}x  {name}")
    # phases: host time, and the GPU time of the kernels their host ops launched
    starts = [e["ts"] for e in ops]
    if phases:
        lines.append("phases (host ms / GPU ms of the kernels launched inside):")
        gpu_of: dict[str, float] = defaultdict(float)
        host_of: dict[str, float] = defaultdict(float)
        count: dict[str, int] = defaultdict(int)
        for p in phases:
            host_of[p["name"]] += p["dur"]
            count[p["name"]] += 1
        for e in gpu:
            r = runtime.get(e.get("args", {}).get("correlation"))
            if r is None:
                continue
            inside = [p["name"] for p in phases if p["ts"] <= r["ts"] <= p["ts"] + p["dur"]]
            for name in set(inside):
                gpu_of[name] += e["dur"]
        for name in host_of:
            lines.append(f"  {name:36s} x{count[name]}: host {host_of[name] / 1e3:7.1f}  "
                         f"GPU {gpu_of[name] / 1e3:7.1f}")  # fmt: skip
    # the longest idle gaps, with the op that launched the kernel ending each
    first_after = {}
    for e in gpu:
        first_after.setdefault(e["ts"], e)
    gaps = []
    for (_, e0), (s1, _) in zip(busy, busy[1:], strict=False):
        gaps.append((s1 - e0, e0, first_after.get(s1)))
    lead = busy[0][0] - t0
    lines.append(f"idle before the first kernel: {lead / 1e3:.1f} ms")
    hist = defaultdict(float)
    for g, _, _ in gaps:
        hist[
            "<10us" if g < 10 else "10-100us" if g < 100 else "0.1-1ms" if g < 1e3 else ">1ms"
        ] += g
    lines.append(
        "idle between kernels by gap length: "
        + ", ".join(f"{k} {v / 1e3:.1f} ms" for k, v in hist.items())
    )
    lines.append("longest gaps (ms, at ms from the start, the op launching the next kernel):")
    for g, at, nxt in sorted(gaps, key=lambda x: -x[0])[:top]:
        who = "?"
        r = runtime.get(nxt.get("args", {}).get("correlation")) if nxt else None
        if r is not None:
            i = bisect.bisect_right(starts, r["ts"]) - 1
            while i >= 0 and ops[i]["ts"] + ops[i]["dur"] < r["ts"]:
                i -= 1
            enclosing = [
                o["name"] for o in ops[max(0, i - 400) : i + 1]
                if o["ts"] <= r["ts"] <= o["ts"] + o["dur"]
            ]  # fmt: skip
            who = " > ".join(n[:40] for n in enclosing[-3:])
        lines.append(f"  {g / 1e3:6.2f} at {(at - t0) / 1e3:7.1f}: {who}")
    return "\n".join(lines)


if __name__ == "__main__":
    print(summarize(sys.argv[1]))
