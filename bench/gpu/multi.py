"""The engine on two GPUs of one host, against one GPU, measured in one run.

    python3 bench/gpu/multi.py train   # FSDP2 trainer: tokens/s on 1 and 2 GPUs; equivalence
    python3 bench/gpu/multi.py async   # sync vs async, engine on the trainer's GPU vs its own
    python3 bench/gpu/multi.py run --gpus 4 --replicas 4 [--shape llama-3.1-8b]
                                       # a whole run without Ray: sync, then async

`--gpus N` sets the trainer's world size (train: 1 against N), so the same script scales to
a 4- or 8-GPU host by configuration alone.

`train` launches the trainer without Ray (`torch.distributed.run` → bench/gpu/
standalone.py: the ShardedLoraPolicy that Ray trainer actors hold, the plain LoraPolicy on
one GPU) on the model of --shape (common.py), LoRA r=16 on every linear layer, at the
same tokens per GPU (16×1024 a rank), then once more at one global batch on both world sizes
to compare losses and adapters. `async` runs async_overlap.py (the real drivers)
with one GPU visible (trainer and engine share it), with two (trainer on cuda:0, engine on
cuda:1; workers/loop/setup.py `local_devices`), and with two and the engine in a child
process (`resources.engine_process`). Results land in --out as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from common import SHAPES, base_spec, build_model, long_prompt_task, model_shape, table

HERE = Path(__file__).resolve().parent  # bench/gpu
ROOT = HERE.parents[1]  # the repository, the subprocesses' working directory


def torchrun(nproc: int, out: Path, model_dir: Path, extra: list[str]) -> dict:
    cmd = [
        sys.executable, "-m", "torch.distributed.run", "--standalone",
        f"--nproc-per-node={nproc}", "-m", "bench.gpu.standalone",
        "--model-dir", str(model_dir), "--out", str(out), *extra,
    ]  # fmt: skip
    print("$", " ".join(cmd[1:]), flush=True)
    subprocess.run(cmd, check=True, cwd=ROOT)
    return json.loads((out / "result.json").read_text())


def part_train(model_dir: Path, args, out: Path) -> dict:
    out = Path(tempfile.mkdtemp())  # adapters are 40 MB each: keep them off --out
    shape = ["--seq-len", str(args.seq_len), "--prompt-len", str(args.prompt_len)]
    timing = ["--steps", str(args.reps), "--warmup", str(args.warmup)]
    per_rank = args.seqs_per_gpu
    res: dict = {"runs": {}}
    n = args.gpus
    runs = [(1, "1gpu", []), (n, f"{n}gpu", []), (n, f"{n}gpu-shard-lora", ["--shard-lora"])]
    for n, name, flags in runs:
        extra = [*shape, *timing, "--seqs", str(per_rank * n), "--micro-batch", str(per_rank)]
        res["runs"][name] = torchrun(n, out / name, model_dir, [*extra, *flags])
    one, two = res["runs"]["1gpu"], res["runs"][f"{n}gpu"]
    res["scaling"] = two["tok_s"] / one["tok_s"]
    res["scaling_shard_lora"] = res["runs"][f"{n}gpu-shard-lora"]["tok_s"] / one["tok_s"]
    # equivalence: the same batch (and micro-batch per rank) on one GPU and on two
    eq = [*shape, "--steps", "3", "--warmup", "0", "--seqs", str(args.eq_seqs)]
    eq += ["--micro-batch", str(args.eq_seqs // 2)]
    torchrun(1, out / "eq-1", model_dir, eq)
    torchrun(n, out / f"eq-{n}", model_dir, eq)
    from standalone import compare

    res["equivalence"] = compare(out / "eq-1", out / f"eq-{n}")
    print(f"\nFSDP2 trainer, {args.seq_len}-token sequences, {per_rank} a GPU a step")
    table([("what", "tokens/s", "a GPU", "step s", "peak GB")])
    for name, r in res["runs"].items():
        step = sorted(r["step_s"])[len(r["step_s"]) // 2]
        row = (name, f"{r['tok_s']:,.0f}", f"{r['tok_s_per_gpu']:,.0f}", f"{step:.3f}")
        table([(*row, f"{r['peak_gb']:.1f}")])
    shard = res["scaling_shard_lora"]
    print(f"{n} GPUs over 1: {res['scaling']:.2f}x (LoRA sharded with the base: {shard:.2f}x)")
    print(f"equivalence, same batch on 1 and {n} GPUs:", json.dumps(res["equivalence"], indent=1))
    return res


def part_async(model_dir: Path, args, out: Path) -> dict:
    res = {}
    child = ["--engine-process"]
    placements = [("one GPU shared", "0", []), ("one GPU, engine process", "0", child)]
    placements += [("two GPUs", "0,1", []), ("two GPUs, engine process", "0,1", child)]
    for label, visible, flags in placements:
        sub = Path(tempfile.mkdtemp())
        cmd = [
            sys.executable, str(HERE / "async_overlap.py"), "--model-dir", str(model_dir),
            "--out", str(sub), "--batch", str(args.batch), "--new-tokens", str(args.new_tokens),
            "--steps", str(args.steps), "--prompt-chars", str(args.prompt_chars),
            "--micro-batch", str(args.micro_batch), "--shape", args.shape, *flags,
            *(["--small"] if args.small else []),
        ]  # fmt: skip
        env = dict(os.environ, CUDA_VISIBLE_DEVICES=visible)
        print(f"$ CUDA_VISIBLE_DEVICES={visible}", " ".join(cmd[1:]), flush=True)
        subprocess.run(cmd, check=True, env=env, cwd=ROOT)
        res[label] = json.loads((sub / "async.json").read_text())
    print(f"\nasync over sync, {args.batch} rollouts × {args.new_tokens} new tokens a step")
    table([("placement", "sync step s", "async step s", "speedup", "ideal", "weight sync")])
    for label, r in res.items():
        s, a = r["sync"], r["async"]
        row = (label, f"{s['time/step_s']:.2f}", f"{a['time/step_s']:.2f}")
        row += (f"{r['speedup']:.2f}x", f"{r['ideal_speedup']:.2f}x")
        table([(*row, f"{a['time/weight_sync_s'] * 1e3:.0f} ms")])
    return res


def part_run(model_dir: Path, args, out: Path) -> dict:
    """A whole run under torchrun (workers/distributed/torchrun_train.py): the trainer on
    --gpus GPUs, --replicas engine processes on the GPUs after them; sync, then async."""
    work = Path(tempfile.mkdtemp())
    data = long_prompt_task(work, args.prompt_chars) if args.prompt_chars else {}
    res: dict = {"trainer_gpus": args.gpus, "replicas": args.replicas}
    for mode in ("sync", "async"):
        spec = base_spec(
            model_dir,
            **data,
            **{
                "rollout.max_new_tokens": args.new_tokens,
                "train.steps": args.steps,
                "train.prompts_per_step": args.batch // 8,
                "train.micro_batch_size": args.micro_batch or args.batch,
                "async.enabled": mode == "async",
                "async.max_staleness": 1,
                "resources.trainer_gpus": args.gpus,
                "resources.rollout_replicas": args.replicas,
                "resources.rollout_gpus": 1,
            },
        )
        (work / f"{mode}.json").write_text(json.dumps(spec))
        cmd = [
            sys.executable, "-m", "torch.distributed.run", "--standalone",
            f"--nproc-per-node={args.gpus}", "-m", "workers.distributed.torchrun_train",
            str(work / f"{mode}.json"), "--out", str(work / mode), "--no-progress",
        ]  # fmt: skip
        print("$", " ".join(cmd[1:]), flush=True)
        subprocess.run(cmd, check=True, cwd=ROOT)
        lines = (work / mode / "metrics.jsonl").read_text().splitlines()
        steps = [r for r in map(json.loads, lines) if r.get("step", 0) >= 2 and "time/step_s" in r]
        keys = ("time/step_s", "time/generate_s", "time/train_s", "time/weight_sync_s")
        res[mode] = {k: sorted(r[k] for r in steps)[len(steps) // 2] for k in keys}
        res[mode]["tokens_per_s"] = sorted(r["throughput/tokens_per_s"] for r in steps)[
            len(steps) // 2
        ]
        print(mode, res[mode], flush=True)
    res["async_over_sync"] = res["sync"]["time/step_s"] / res["async"]["time/step_s"]
    print(f"async over sync: {res['async_over_sync']:.2f}x")
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("part", choices=["train", "async", "run"])
    ap.add_argument("--gpus", type=int, default=2, help="train/run: trainer GPUs")
    ap.add_argument("--replicas", type=int, default=1, help="run: engine processes")
    ap.add_argument("--shape", choices=sorted(SHAPES), default="qwen3-0.6b")
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "bench-gpu-out")))
    ap.add_argument("--model-dir", type=Path, help="default: the shape's name in the temp dir")
    ap.add_argument("--small", action="store_true", help="tiny shapes: check the script on CPU")
    ap.add_argument("--seqs-per-gpu", type=int, default=16)
    ap.add_argument("--eq-seqs", type=int, default=16)
    ap.add_argument("--seq-len", type=int, default=1024)
    ap.add_argument("--prompt-len", type=int, default=128)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--prompt-chars", type=int, default=0)
    ap.add_argument("--micro-batch", type=int, default=0, help="async: 0 = the whole batch")
    args = ap.parse_args()
    model_dir = build_model(args.model_dir, model_shape(args))
    args.out.mkdir(parents=True, exist_ok=True)
    part = {"train": part_train, "async": part_async, "run": part_run}[args.part]
    result = part(model_dir, args, args.out)
    (args.out / f"multi-{args.part}.json").write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
