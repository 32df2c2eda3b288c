"""How one GPU's two streams share it, on plain kernels: a compute-bound matmul (the train
step's kind) beside a memory-bound copy (the decode step's kind), alone and at once, under
each `resources.gpu_share` plan (workers/gpu_share.py).

    python3 bench/gpu/share_probe.py [--sms 16,32,48,64] [--reps 20]

For each plan: the matmul's TFLOP/s on the trainer's stream alone, the copy's TB/s (bytes
read + written) on the engine's stream alone, then both enqueued together, each one's rate
while the other runs. Also prints which green-context API this torch has. No model; about
half a minute. Writes share_probe.json under --out.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import torch

from workers.gpu_share import open_share, plan_share


def gemm_work(n: int = 8192):
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    return (lambda: a @ b), 2 * n**3


def copy_work(gb: float = 2.0):
    src = torch.randn(int(gb * 1e9 / 2), device="cuda", dtype=torch.bfloat16)
    dst = torch.empty_like(src)
    return (lambda: dst.copy_(src)), 2 * src.numel() * 2


def timed(stream, fn, reps: int) -> tuple[torch.cuda.Event, torch.cuda.Event]:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    with torch.cuda.stream(stream):
        start.record()
        for _ in range(reps):
            fn()
        end.record()
    return start, end


def rates(share, reps: int) -> dict:
    gemm, flops = gemm_work()
    copy, nbytes = copy_work()
    for s, f in ((share.trainer, gemm), (share.engine, copy)):  # warm-up (cuBLAS, caches)
        timed(s, f, 2)
    torch.cuda.synchronize()
    out, alone = {}, []
    for label, s, f, unit in (
        ("matmul_alone_tflops", share.trainer, gemm, flops),
        ("copy_alone_tbs", share.engine, copy, nbytes),
    ):
        a, b = timed(s, f, reps)
        torch.cuda.synchronize()
        alone.append(a.elapsed_time(b) / 1e3)
        out[label] = unit * reps / alone[-1] / 1e12
    # both at once, the copies as many as take the matmuls' time alone, so that the two
    # spans coincide (a rate is then the one it had beside the other, not alone after it)
    n_copy = max(1, round(reps * alone[0] / alone[1]))
    ga, gb = timed(share.trainer, gemm, reps)
    ca, cb = timed(share.engine, copy, n_copy)
    torch.cuda.synchronize()
    out["matmul_together_tflops"] = flops * reps / (ga.elapsed_time(gb) / 1e3) / 1e12
    out["copy_together_tbs"] = nbytes * n_copy / (ca.elapsed_time(cb) / 1e3) / 1e12
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "bench-gpu-out")))
    ap.add_argument("--sms", default="16,32,48,64", help="engine SMs of the split plans")
    ap.add_argument("--reps", type=int, default=20)
    args = ap.parse_args()
    import torch.cuda.green_contexts as gc

    api = [m for m in dir(gc.GreenContext) if not m.startswith("_")]
    props = torch.cuda.get_device_properties(0)
    print(f"device {props.name}, {props.multi_processor_count} SMs, torch {torch.__version__}")
    print(f"torch.cuda.green_contexts: SUPPORTED={gc.SUPPORTED}, GreenContext has {api}")
    res: dict = {"torch": torch.__version__, "sms": props.multi_processor_count, "plans": {}}
    plans = ["streams", "engine_first", "trainer_first"]
    plans += [f"split:{n}" for n in args.sms.split(",") if n]
    head = ("SMs e/t", "mm alone", "copy alone", "mm both", "copy both")
    print(f"{'plan':<16}" + "".join(f"{h:>11}" for h in head))
    for name in plans:
        mode, _, n = name.partition(":")
        t0 = time.perf_counter()
        try:
            sms = props.multi_processor_count
            plan = plan_share(mode, int(n or 48) / sms, sms)
            share = open_share(plan, torch.device("cuda:0"))
            r = rates(share, args.reps)
        except Exception as exc:  # a plan this machine cannot make is a row
            res["plans"][name] = {"error": f"{type(exc).__name__}: {exc}"}
            print(f"{name:<16} failed: {res['plans'][name]['error']}")
            continue
        r["engine_sms"], r["trainer_sms"] = share.plan.engine_sms, share.plan.trainer_sms
        r["seconds"] = time.perf_counter() - t0
        res["plans"][name] = r
        sms = f"{r['engine_sms'] or '-'}/{r['trainer_sms'] or '-'}"
        print(
            f"{name:<16}{sms:>11}{r['matmul_alone_tflops']:>11.0f}{r['copy_alone_tbs']:>11.2f}"
            f"{r['matmul_together_tflops']:>11.0f}{r['copy_together_tbs']:>11.2f}"
        )
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "share_probe.json").write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
