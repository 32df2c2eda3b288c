"""Generation of a pool on one GPU: 8 adapters in one torch engine against one adapter.

    python3 bench/gpu/pool.py                 # 8 adapters vs 1 adapter
    python3 bench/gpu/pool.py --adapters 4

Tokens a second at --batch rows (--batch / --group prompts of --prompt-len tokens, --group
samples each, --new-tokens each; LoRA r=16 unmerged on every linear), side by side in one
run: the single-adapter engine (TorchBackend, static decode with CUDA graphs) serving one
adapter, and the pool engine (TorchPool, the same engine with a slot per run) serving
--adapters adapters of the same shape,
the prompts dealt round-robin to the runs (the gathered LoRA kernel: every slot's x·A
masked to the row's; rows keep the kernel's name, as older trees named theirs, so that
bench/gpu/ab.sh compares them). Then the same pool with slots of rank 64 holding the
rank-16 adapters (what padding costs), and
the decoder alone: one decode step at --batch rows (graph replay), single adapter vs slot
table. Neither side is compiled (rollout.compile off): the comparison is of the LoRA paths.
Writes pool.json under --out.
"""

from __future__ import annotations

import asyncio
import gc
import statistics
import time
from pathlib import Path

import torch
from common import base_spec, gen_requests, parser, peak_gb, random_adapter, run, sync, table


def _free() -> None:
    """Give back what the engine just deleted held (its model, cache and graphs)."""
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def step_time(decoder, batch: int, prompt_len: int, vocab: int, adapters=None) -> float:
    """Median seconds of one decode step at `batch` rows (after a prefill of `prompt_len`
    tokens; the first steps capture the graph)."""
    ids = torch.randint(3, vocab, (batch, prompt_len), device=decoder.device)
    decoder.reserve(prompt_len + 64)
    logits = decoder.prefill(ids, torch.ones_like(ids), adapters=adapters)
    tokens = logits.argmax(-1)
    times = []
    for i in range(40):
        sync()
        t0 = time.perf_counter()
        tokens = decoder.step(tokens).argmax(-1)
        sync()
        if i >= 8:
            times.append(time.perf_counter() - t0)
    decoder.reset()
    return statistics.median(times)


def part_pool(model_dir: Path, args, out: Path) -> dict:
    from workers.adapters.update import AdapterUpdate
    from workers.rollout.pool_engine import PoolRequest
    from workers.rollout.registry import make_backend
    from workers.rollout.torch_engine import TorchPool
    from workers.spec import LoraSpec, parse_spec

    vocab, groups, n = args.vocab, args.batch // args.group, args.group
    p_len, new, k = args.prompt_len, args.new_tokens, args.adapters
    over = {
        "rollout.max_new_tokens": new,
        "rollout.max_batch_size": args.batch,
        "rollout.decode": "static",
    }
    spec = parse_spec(base_spec(model_dir, **over))
    lora = LoraSpec(**spec.lora.model_dump())
    res: dict = {"batch": args.batch, "prompt_len": p_len, "new_tokens": new, "adapters": k}
    rows, steps = [], []

    def timed(name: str, generate) -> dict:
        asyncio.run(generate(seed=99))  # warm-up: kernels, cache shapes, every graph
        sync()
        t0 = time.perf_counter()
        results = asyncio.run(generate(seed=0))
        sync()
        dt = time.perf_counter() - t0
        toks = sum(len(s.token_ids) for r in results for s in r.samples)
        row = {"name": name, "tok_s": toks / dt, "tokens": toks, "s": dt, "peak_gb": peak_gb()}
        if torch.cuda.is_available():
            torch.cuda.reset_peak_memory_stats()
        print(row, flush=True)
        rows.append(row)
        return row

    # one adapter: the single-adapter engine
    single = make_backend(spec, model_dir)
    adapter = random_adapter(single.model)
    asyncio.run(single.load_adapter(AdapterUpdate(1, tensors=adapter)))
    base = timed(
        f"1 adapter, TorchBackend static, batch {args.batch}",
        lambda seed, e=single: e.generate(gen_requests(groups, n, p_len, new, vocab, seed=seed)),
    )
    steps.append(("1 adapter (folded)", step_time(single.decoder, args.batch, p_len, vocab)))
    asyncio.run(single.close())
    del single
    _free()

    adapters = []
    for i in range(k):  # each its own B (A is PEFT's seeded init, shared: it does not matter)
        g = torch.Generator().manual_seed(100 + i)
        adapters.append(
            {
                key: (torch.randn(v.shape, generator=g) * 0.01).to(v.dtype)
                if "lora_B" in key
                else v
                for key, v in adapter.items()
            }
        )
    for rank in (lora.r, 64):
        name = f"{k} adapters, pool gathered, slots r{rank}, batch {args.batch}"
        try:
            pool = TorchPool(spec, model_dir, capacity=k, max_lora_rank=rank)
            for i, tensors in enumerate(adapters):
                asyncio.run(pool.load_adapter(f"run{i}", AdapterUpdate(1, tensors=tensors), lora))

            def generate(seed: int, pool=pool):
                reqs = gen_requests(groups, n, p_len, new, vocab, seed=seed)
                return pool.generate([PoolRequest(f"run{j % k}", r) for j, r in enumerate(reqs)])

            row = timed(name, generate)
            row["vs_single"] = row["tok_s"] / base["tok_s"]
            with pool.engine.between_turns():  # no decode turn runs: the decoder alone
                slots = torch.arange(args.batch, device=pool.device) % k
                steps.append((f"{k} adapters gathered r{rank}", step_time(
                    pool.engine.decoder, args.batch, p_len, vocab, adapters=slots
                )))  # fmt: skip
            asyncio.run(pool.close())
            del pool, generate
            _free()
        except Exception as exc:  # a variant that fails is a row; the others still run
            import traceback

            traceback.print_exc()
            rows.append({"name": name, "failed": f"{type(exc).__name__}: {exc}"[:300]})
    res["rows"] = rows
    res["steps"] = [{"name": s, "step_s": t, "vs_single": steps[0][1] / t} for s, t in steps[1:]]
    res["steps"].insert(0, {"name": steps[0][0], "step_s": steps[0][1]})
    print(f"\npool generation, batch {args.batch}, {p_len} prompt + {new} new tokens, r16 LoRA")
    table([("what", "tokens/s", "vs 1 adapter")])
    for r in rows:
        if "failed" in r:
            table([(r["name"], "failed", r["failed"][:40])])
        else:
            table([(r["name"], f"{r['tok_s'] / 1e3:.2f}k", f"{r['tok_s'] / base['tok_s']:.1%}")])
    print(f"\none decode step at {args.batch} rows (CUDA graph replay)")
    table([("what", "ms", "vs 1 adapter")])
    for s, t in steps:
        table([(s, f"{t * 1e3:.2f}", f"{steps[0][1] / t:.1%}")])
    return res


def main() -> None:
    ap = parser(__doc__)
    ap.add_argument("--prompt-len", type=int, default=128)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--new-tokens", type=int, default=256)
    ap.add_argument("--adapters", type=int, default=8)
    run(part_pool, ap.parse_args())


if __name__ == "__main__":
    main()
