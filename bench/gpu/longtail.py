"""Heavy-tailed response lengths on one GPU: continuous batching, finished rows leaving
the batch, or every row decoded to the end of its batch.

    python3 bench/gpu/longtail.py --decodes static+compile --batch 1024 --slots 256 --reps 3
    python3 bench/gpu/longtail.py --decodes static --reps 3      # one batch: no refills

bench/rollout_long_tail.py's workload at this shape: --batch rows (--group samples a
prompt), each row's budget Pareto(1.2, scale 4) capped at --new-tokens, through --slots
decode slots (rollout.max_batch_size; default --batch). For each decode path of --decodes
(decode[:attention][+compile]): the engine in batches of --slots rows, each decoded to its
end with finished rows leaving the batch (compact_below 0.75, the default) or every row kept
to the end; and on the static decoder, continuous batching (rollout.continuous: freed slots
take the next groups). Alternating over --reps rounds: seconds a round, tokens/s, and the
ratio against every row to the end. Writes longtail.json under --out.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from pathlib import Path

import torch
from common import base_spec, parser, random_adapter, run, sync, table


def part_longtail(model_dir: Path, args, out: Path) -> dict:
    """Heavy-tailed response lengths on the GPU (bench/rollout_long_tail.py's workload at
    this shape): each row's budget is Pareto(1.2, scale 4) capped at --new-tokens, set by
    handing the row in as a partial sample that holds the rest. Finished rows leaving the
    batch (compact_below 0.75, the default) against every row to the end, alternating."""
    import math
    import random

    from workers.adapters.update import AdapterUpdate
    from workers.rollout import GroupRequest, Sample, SamplingParams
    from workers.rollout.torch_engine import TorchBackend
    from workers.spec import parse_spec

    groups, n, cap = args.batch // args.group, args.group, args.new_tokens
    rng = random.Random(1)
    lengths = [min(cap, math.ceil(4 * (1 - rng.random()) ** (-1 / 1.2))) for _ in range(groups * n)]
    prompts = torch.randint(
        3, args.vocab, (groups, args.prompt_len), generator=torch.Generator().manual_seed(0)
    )
    params = SamplingParams(temperature=1.0, max_new_tokens=cap)

    def requests() -> list:
        out = []
        for g in range(groups):
            held = [cap - b for b in lengths[g * n : (g + 1) * n]]
            partial = [Sample([5] * h, [-1.0] * h, [0] * h) for h in held]
            out.append(GroupRequest(f"g{g}", prompts[g].tolist(), n, g, params, partial=partial))
        return out

    res: dict = {"batch": args.batch, "cap": cap, "mean_budget": sum(lengths) / len(lengths)}
    res["slots"] = slots = args.slots or args.batch
    over = {"rollout.max_new_tokens": cap, "rollout.max_batch_size": slots}
    engines = {}
    for variant in args.decodes.split(","):
        decode, _, attention = variant.partition("+")[0].partition(":")
        over["rollout.compile"] = variant.endswith("+compile")
        spec = parse_spec(base_spec(model_dir, **over, **{"rollout.decode": decode}))
        ways = [("rows leave the batch", 0.75, False), ("every row to the end", 0.0, False)]
        if decode == "static":
            ways.insert(0, ("continuous batching", 0.75, True))
        for name, below, continuous in ways:
            backend = TorchBackend(spec, model_dir)
            backend.compact_below = below
            if backend.decoder is not None:  # freed slots take new groups, or not
                backend.source.refill = continuous
            if attention:
                backend.decoder.attention = attention
            asyncio.run(
                backend.load_adapter(AdapterUpdate(1, tensors=random_adapter(backend.model)))
            )
            asyncio.run(backend.generate(requests()))  # warm-up (and graph capture)
            engines[f"{variant}, {name}"] = backend
    times: dict[str, list[float]] = {k: [] for k in engines}
    made = 0
    for _ in range(args.reps):
        for name, backend in engines.items():
            sync()
            t0 = time.perf_counter()
            results = asyncio.run(backend.generate(requests()))
            sync()
            times[name].append(time.perf_counter() - t0)
            made = sum(len(s.token_ids) for r in results for s in r.samples) - sum(
                cap - b for b in lengths
            )
    res["made"] = made
    mean = res["mean_budget"]
    print(
        f"\nlong tail: {groups} groups × {n} through {slots} slots, budgets Pareto(1.2, 4) "
        f"capped at {cap} (mean {mean:.1f}, max {max(lengths)}); {made} tokens a round"
    )
    table([("what", "s a round", "tokens/s", "vs every row to the end")])
    rows = []
    for name, ts in times.items():
        base = statistics.median(times[name.split(",")[0] + ", every row to the end"])
        t = statistics.median(ts)
        rows.append({"name": name, "s": t, "tok_s": made / t, "vs_full": base / t})
        table([(name, f"{t:.3f}", f"{made / t / 1e3:.2f}k", f"{base / t:.2f}x")])
    res["rows"] = rows
    return res


def main() -> None:
    ap = parser(__doc__, "reps")
    ap.add_argument("--prompt-len", type=int, default=128)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument(
        "--decodes",
        default="static,dynamic",
        help="decode paths to run (static[:bmm|sdpa][+compile], dynamic)",
    )
    ap.add_argument("--slots", type=int, default=0, help="decode slots (0: --batch)")
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--new-tokens", type=int, default=256)
    run(part_longtail, ap.parse_args())


if __name__ == "__main__":
    main()
