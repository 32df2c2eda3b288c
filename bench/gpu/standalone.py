"""The FSDP2 trainer without Ray, under `torch.distributed.run`, from the repository root:

    python -m torch.distributed.run --nproc-per-node 2 -m bench.gpu.standalone \\
        --model-dir DIR --seqs 32 --seq-len 1024 --out OUT
    python -m bench.gpu.standalone compare OUT_1GPU OUT_2GPU

Each rank builds the policy a Ray trainer actor builds (`ShardedLoraPolicy` when there are
several ranks, the plain `LoraPolicy` of a one-GPU run otherwise) and trains `--steps`
optimizer steps on one fixed synthetic GRPO batch, the same batch for every world size (each
rank takes its share). Rank 0 writes `result.json` (step times, tokens/s, peak memory, each
step's metrics) and `adapter.safetensors`. `compare` prints how far two such runs are apart:
this is how the trainer's scaling and its equivalence across world sizes are measured on
machines without a Ray cluster.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

import torch
import torch.distributed as dist

from workers.adapters.lora import write_adapter_file
from workers.distributed.process_group import init_from_env
from workers.policy import LoraPolicy, TrainSample, collate
from workers.policy.fsdp import ShardedLoraPolicy
from workers.spec import parse_spec

ALL_LINEAR = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def synthetic_samples(
    seqs: int, prompt_len: int, resp_len: int, vocab: int, group: int, seed: int = 1
) -> list[TrainSample]:
    """`seqs` samples in groups of `group` that share a prompt, random tokens, advantages of
    both signs: a GRPO batch whose values do not matter but whose shapes do."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(seqs):
        if i % group == 0:
            prompt = torch.randint(3, vocab, (prompt_len,), generator=g).tolist()
        response = torch.randint(3, vocab, (resp_len,), generator=g).tolist()
        out.append(
            TrainSample(
                prompt_ids=prompt,
                response_ids=response,
                lp_roll=[-11.0] * resp_len,
                versions=[0] * resp_len,
                advantage=float(torch.randn((), generator=g)),
            )
        )
    return out


def build_spec(args: argparse.Namespace, on_gpu: bool):
    resp_len = args.seq_len - args.prompt_len
    return parse_spec(
        {
            "model": {"path": str(args.model_dir)},
            "lora": {"r": args.rank, "alpha": 2 * args.rank, "target_modules": ALL_LINEAR},
            "algorithm": {"num_generations": args.group},
            "rollout": {"backend": "torch", "max_new_tokens": resp_len},
            "train": {"micro_batch_size": args.micro_batch, "lr": args.lr, "steps": args.steps},
            "resources": {"trainer_gpus": 1 if on_gpu else 0},
        }
    )


def train(args: argparse.Namespace) -> None:
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = 0
    on_gpu = torch.cuda.is_available() and not args.cpu
    if world > 1:
        rank, world = init_from_env(on_gpu)
    elif on_gpu:
        torch.cuda.set_device(0)
    torch.manual_seed(args.seed)
    spec = build_spec(args, on_gpu)
    if world > 1:
        policy: LoraPolicy = ShardedLoraPolicy(spec, args.model_dir, shard_lora=args.shard_lora)
    else:
        policy = LoraPolicy(spec, args.model_dir)
    vocab = policy.model.get_base_model().config.vocab_size
    samples = synthetic_samples(
        args.seqs, args.prompt_len, args.seq_len - args.prompt_len, vocab, args.group
    )
    batch = collate(samples, policy.tokenizer.pad_token_id)
    if args.stale_check:  # the samples are labelled version 0: the adapter before training
        policy.adapter.history.keep = args.warmup + args.steps
        policy.adapter.history.record(0, policy.adapter_tensors())  # a collective under FSDP

    def sync() -> None:
        if on_gpu:
            torch.cuda.synchronize()
        if world > 1:
            dist.barrier()

    metrics, times = [], []
    for step in range(args.warmup + args.steps):
        sync()
        t0 = time.perf_counter()
        m = policy.train_step(policy.adapter, batch)
        sync()
        if step >= args.warmup:
            times.append(time.perf_counter() - t0)
            metrics.append(m)
        if rank == 0 and args.verbose:
            print(f"step {step}: {time.perf_counter() - t0:.3f} s {m}", flush=True)
    peak = torch.cuda.max_memory_allocated() / 1e9 if on_gpu else 0.0
    if world > 1:  # the worst rank's peak
        t = torch.tensor([peak], device="cuda" if on_gpu else "cpu")
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        peak = float(t)
    # token_mult_prob_error of the (now stale) version-0 tokens, each rank a share of them
    stale = policy.stale_sums(policy.adapter, batch, args.stale_check)
    tensors = policy.adapter_tensors()  # a collective under FSDP: every rank gathers
    if rank == 0:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        tokens = args.seqs * args.seq_len
        step_s = statistics.median(times)
        result = {
            "world": world,
            "policy": type(policy).__name__,
            "shard_lora": bool(getattr(policy.parallel, "shard_lora", False)),
            "device": torch.cuda.get_device_name() if on_gpu else "cpu",
            "seqs": args.seqs,
            "seq_len": args.seq_len,
            "micro_batch": args.micro_batch,
            "tokens_per_step": tokens,
            "step_s": times,
            "tok_s": tokens / step_s,
            "tok_s_per_gpu": tokens / step_s / world,
            "peak_gb": peak,
            "metrics": metrics,
            "stale_check": {"tokens": stale.tokens, "sums": stale.sums},
        }
        (out / "result.json").write_text(json.dumps(result, indent=1))
        write_adapter_file(tensors, out / "adapter.safetensors")
        print(
            f"world {world}: {tokens / step_s:,.0f} tokens/s ({tokens / step_s / world:,.0f} "
            f"a GPU), step {step_s:.3f} s, peak {peak:.1f} GB",
            flush=True,
        )
    if world > 1:
        dist.barrier()
        dist.destroy_process_group()


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.double(), b.double()
    return float((a - b).norm() / b.norm().clamp(min=1e-30))


def compare(a: Path, b: Path) -> dict:
    """How far run `b` is from run `a`: per step, the relative difference of each metric;
    the relative error of every LoRA B matrix (A keeps its seeded init; B starts at zero, so
    it holds everything training did) and of all LoRA tensors together."""
    from safetensors.torch import load_file

    ra = json.loads((a / "result.json").read_text())
    rb = json.loads((b / "result.json").read_text())
    metric_diff: dict[str, float] = {}
    for ma, mb in zip(ra["metrics"], rb["metrics"], strict=True):
        for k in ma.keys() & mb.keys():
            d = abs(ma[k] - mb[k]) / max(abs(ma[k]), 1e-6)
            metric_diff[k] = max(metric_diff.get(k, 0.0), d)
    ta, tb = load_file(str(a / "adapter.safetensors")), load_file(str(b / "adapter.safetensors"))
    if ta.keys() != tb.keys():
        raise ValueError("the two adapters have different keys")
    b_keys = [k for k in ta if "lora_B" in k]
    return {
        "metric_rel_diff": metric_diff,
        "lora_B_rel_err_max": max(rel_err(tb[k], ta[k]) for k in b_keys),
        "adapter_rel_err": rel_err(
            torch.cat([tb[k].flatten() for k in ta]), torch.cat([ta[k].flatten() for k in ta])
        ),
        "lora_B_norm": float(torch.cat([ta[k].flatten() for k in b_keys]).norm()),
    }


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description="the FSDP2 trainer under torch.distributed.run")
    sub = ap.add_subparsers(dest="cmd")
    c = sub.add_parser("compare", help="how far two runs' metrics and adapters are apart")
    c.add_argument("a", type=Path)
    c.add_argument("b", type=Path)
    ap.add_argument("--model-dir", type=Path)
    ap.add_argument("--out", type=Path, default=Path("standalone-out"))
    ap.add_argument("--seqs", type=int, default=16, help="sequences a step, all ranks together")
    ap.add_argument("--seq-len", type=int, default=1024)
    ap.add_argument("--prompt-len", type=int, default=128)
    ap.add_argument("--group", type=int, default=8, help="samples sharing a prompt")
    ap.add_argument("--micro-batch", type=int, default=16)
    ap.add_argument("--rank", type=int, default=16, help="LoRA rank")
    ap.add_argument("--lr", type=float, default=1e-4)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--cpu", action="store_true", help="gloo on the CPU even with GPUs")
    ap.add_argument("--shard-lora", action="store_true", help="shard LoRA with the base")
    ap.add_argument("--stale-check", type=int, default=0,
                    help="after training, the staleness check (LoraPolicy.stale_sums) on "
                         "this many samples (their version, 0, is stale by then)")  # fmt: skip
    ap.add_argument("--verbose", action="store_true")
    args = ap.parse_args(argv)
    if args.cmd == "compare":
        print(json.dumps(compare(args.a, args.b), indent=1))
        return
    if args.model_dir is None:
        ap.error("--model-dir is required")
    train(args)


if __name__ == "__main__":
    main()
