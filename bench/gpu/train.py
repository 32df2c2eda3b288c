"""Train step on one GPU: the engine's LoraPolicy against plain transformers + PEFT.

    python3 bench/gpu/train.py --profile     # 16×1024 and 32×1024 tokens a step
    python3 bench/gpu/train.py --seqs 16 --micro-batches 16 --compile --no-cast-row --reps 3
    python3 bench/gpu/train.py --seqs 16 --micro-batches 16 --compile --peft-layers \
        --no-cast-row --no-baseline --reps 5
    python3 bench/gpu/train.py --shape llama-3.1-8b --seqs 16 --micro-batches 16 \
        --checkpointing --compile-checkpointed --no-cast-row

Tokens a second and peak memory of one step of --seqs sequences × --seq-len tokens
(--prompt-len of them prompt): plain PEFT in bf16 (full-vocabulary logits, mean token NLL;
--no-baseline leaves it out), then the engine at each of --micro-batches, each row against
the plain step of the same size (or the largest that fitted); an out-of-memory is a row.
On a GPU also the engine with PEFT's cast of LoRA inputs to fp32 (--no-cast-row leaves it
out) and with train.compile (--compile; --compile-checkpointed: with activation
checkpointing too); --peft-layers: each engine row also with PEFT's own LoRA layers and
foreach AdamW instead of the stacked LoRA and fused AdamW, the same run's baseline of the
"vs PEFT layers" column. --checkpointing adds each micro-batch size with
train.activation_checkpointing, and plain PEFT with transformers' gradient checkpointing,
the baseline of the checkpointed rows. Model and shapes
(--shape): common.py. Writes train.json (and train_profile.txt with --profile) under --out.
"""

from __future__ import annotations

import time
from pathlib import Path

import torch
from common import ISSUE, LORA_TARGETS, base_spec, measure, parser, peak_gb, run, sync, table


def plain_peft_step_fn(model_dir: Path, seqs: int, seq_len: int, ckpt: bool = False):
    """The baseline: transformers + PEFT in bf16, full-vocabulary logits, mean token NLL;
    `ckpt`: with transformers' own gradient checkpointing (non-reentrant)."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    dev = "cuda" if torch.cuda.is_available() else "cpu"
    base = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.bfloat16).to(dev)
    model = get_peft_model(base, LoraConfig(r=16, lora_alpha=32, target_modules=LORA_TARGETS))
    if ckpt:  # transformers checkpoints a layer only in training mode
        base.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        model.train()
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-5)
    vocab = base.config.vocab_size
    ids = torch.randint(3, vocab, (seqs, seq_len), device=dev)

    def step() -> None:
        logits = model(input_ids=ids, use_cache=False).logits.float()  # [B, L, V]
        lp = torch.log_softmax(logits[:, :-1], -1).gather(-1, ids[:, 1:, None])
        (-lp.mean()).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return step, model


def engine_policy(
    model_dir: Path,
    resp_len: int,
    micro_batch: int,
    compile: bool = False,
    ckpt: bool = False,
    stack: bool | None = None,
    optimizer_graph: bool | None = None,
):
    from workers.policy import LoraPolicy
    from workers.spec import parse_spec

    over = {"rollout.max_new_tokens": resp_len, "train.micro_batch_size": micro_batch}
    over |= {"train.compile": compile, "train.activation_checkpointing": ckpt}
    spec = parse_spec(base_spec(model_dir, **over))
    return LoraPolicy(spec, model_dir, stack_lora=stack, optimizer_graph=optimizer_graph)


def train_batch(policy, seqs: int, prompt_len: int, resp_len: int, vocab: int):
    from workers.policy import TrainSample, collate

    g = torch.Generator().manual_seed(1)
    samples = []
    for i in range(seqs):  # distinct prompts: one plain forward, like the baseline
        ids = torch.randint(3, vocab, (prompt_len + resp_len,), generator=g).tolist()
        samples.append(
            TrainSample(
                prompt_ids=ids[:prompt_len],
                response_ids=ids[prompt_len:],
                lp_roll=[-11.0] * resp_len,
                versions=[0] * resp_len,
                advantage=1.0 if i % 2 else -1.0,
            )
        )
    return collate(samples, policy.tokenizer.pad_token_id)


COMPILE_VARIANTS = {
    # name: (the head's gradient in its forward, cuDNN attention)
    "head-recompute": (False, True),  # the step before the new head
    "default": (True, True),  # the default with train.compile on one GPU
    "flash": (True, False),  # attention by flash, not cuDNN
}


def compile_variant_row(model_dir, args, variant, seqs, prompt_len, resp_len, vocab) -> dict:
    """One train.compile row of --compile-variants (COMPILE_VARIANTS)."""
    import functools

    from workers.policy import fused_logprobs

    head_in_forward, cudnn = COMPILE_VARIANTS[variant]
    orig = fused_logprobs.fused_token_logprobs

    def make():
        # the head's old backward (logits recomputed) where the variant asks for it
        if not head_in_forward:
            fused_logprobs.fused_token_logprobs = functools.partial(orig, grad_in_forward=False)
        torch.backends.cuda.enable_cudnn_sdp(cudnn)
        policy = engine_policy(model_dir, resp_len, seqs, True)
        batch = train_batch(policy, seqs, prompt_len, resp_len, vocab)
        t0 = time.perf_counter()
        policy.train_step(policy.adapter, batch)  # the first step compiles
        sync()
        print(f"{variant}: first step {time.perf_counter() - t0:.1f} s", flush=True)
        return (lambda: policy.train_step(policy.adapter, batch)), policy

    try:
        name = f"engine {seqs}x{args.seq_len} micro-batch {seqs}, train.compile, {variant}"
        row = measure(name, make, seqs * args.seq_len, args.warmup, args.reps)
    finally:
        fused_logprobs.fused_token_logprobs = orig
        torch.backends.cuda.enable_cudnn_sdp(True)
    return row


# --interleave: train.compile policies (the engine's keyword arguments) built side by side and
# stepped in turns, so that the machine's drift (clocks, neighbours on the host) falls on
# every variant alike
INTERLEAVE = {
    "default": {},  # train.compile's defaults on one GPU
    "no-opt-graph": {"optimizer_graph": False},  # clip and AdamW eager, as before
    "eager": {"compile": False},
    # LoRA inputs uncast by PEFT's own switch, which walks the model on entry and exit
    "peft-uncast": {"peft_uncast": True},
}


def _peft_uncast(policy) -> None:
    """The policy's bf16 context as it was: PEFT's disable_input_dtype_casting."""
    import contextlib

    from peft.helpers import disable_input_dtype_casting

    @contextlib.contextmanager
    def autocast():
        with (
            torch.autocast("cuda", dtype=torch.bfloat16),
            disable_input_dtype_casting(policy.model),
        ):
            yield

    policy._autocast = autocast


class _GcClock:
    """Python's garbage collections and the time they take, since `take()`."""

    def __init__(self):
        import gc

        self.n, self.s, self._t0 = 0, 0.0, 0.0
        gc.callbacks.append(self._cb)

    def _cb(self, phase, info):
        if phase == "start":
            self._t0 = time.perf_counter()
        else:
            self.n += 1
            self.s += time.perf_counter() - self._t0

    def take(self) -> tuple[int, float]:
        out, self.n, self.s = (self.n, self.s), 0, 0.0
        return out


def _mallocs() -> int:
    """cudaMallocs so far (0 without a GPU)."""
    if not torch.cuda.is_available():
        return 0
    return torch.cuda.memory_stats().get("num_device_alloc", 0)


def _gpu_state() -> dict:
    """SM clock (MHz), power (mW) and temperature (C) where NVML answers; else empty."""
    try:
        return {
            "sm_mhz": torch.cuda.clock_rate(),
            "power_mw": torch.cuda.power_draw(),
            "temp_c": torch.cuda.temperature(),
        }
    except Exception:
        return {}


def _labelled(policy) -> None:
    """The step's phases as profiler ranges (for --profile only): the layers' forward, the
    head, the loss, the optimizer's end; backward is what the accumulation adds."""
    from torch.profiler import record_function

    from workers.policy import policy as policy_mod

    def wrap(fn, name):
        def call(*a, **k):
            with record_function(name):
                return fn(*a, **k)

        return call

    policy._hidden = wrap(policy._hidden, "phase: layers forward")
    policy.hidden_logprobs = wrap(policy.hidden_logprobs, "phase: head forward")
    policy._micro = wrap(policy._micro, "phase: forward+loss+backward")
    policy_mod.grpo_loss = wrap(policy_mod.grpo_loss, "phase: loss")
    adapter = policy.adapter
    adapter.optimizer_step = wrap(adapter.optimizer_step, "phase: optimizer")


def part_interleave(model_dir: Path, args, out: Path) -> dict:
    """--interleave A,B,...: one policy a variant (INTERLEAVE), all alive at once, each
    compiled and warmed; then --reps rounds of one step each, the order rotated every round.
    Per step: wall time, Python GC time, cudaMallocs, the GPU's clock, power, temperature."""
    import statistics

    names = args.interleave.split(",")
    seqs, seq_len, prompt_len = args.seqs[0], args.seq_len, args.prompt_len
    resp_len, tokens = seq_len - prompt_len, args.seqs[0] * args.seq_len
    policies, res = {}, {"tokens": tokens, "variants": names, "first_step_s": {}}
    batch = None
    for name in names:
        kw = {"compile": True} | INTERLEAVE[name]
        peft_uncast = kw.pop("peft_uncast", False)
        policy = engine_policy(model_dir, resp_len, seqs, **kw)
        if peft_uncast:
            _peft_uncast(policy)
        batch = batch or train_batch(policy, seqs, prompt_len, resp_len, args.vocab)
        t0 = time.perf_counter()
        policy.train_step(policy.adapter, batch)  # compiles (the first variant from cold)
        sync()
        res["first_step_s"][name] = time.perf_counter() - t0
        for _ in range(1 + args.warmup):  # the optimizer graph's capture, then warm
            policy.train_step(policy.adapter, batch)
        sync()
        policies[name] = policy
        print(f"{name}: first step {res['first_step_s'][name]:.1f} s", flush=True)
    gc_clock, steps = _GcClock(), []
    for r in range(args.reps):
        k = r % len(names)
        for pos, name in enumerate(names[k:] + names[:k]):
            gc_clock.take()
            allocs = _mallocs()
            state = _gpu_state()
            wall, t0 = time.time(), time.perf_counter()
            policies[name].train_step(policies[name].adapter, batch)
            sync()
            dt = time.perf_counter() - t0
            n_gc, gc_s = gc_clock.take()
            new_allocs = _mallocs() - allocs
            steps.append(
                dict(state, variant=name, round=r, pos=pos, t=wall, s=dt)
                | dict(gc_n=n_gc, gc_s=gc_s, mallocs=new_allocs)
            )
    res["steps"], res["rows"] = steps, []
    first = names[0]
    by_round = {(s["variant"], s["round"]): s["s"] for s in steps}
    print(f"\ntrain step, {seqs}x{seq_len}, {args.reps} rounds, variants in turn (rotated)")
    table([("variant", "median tok/s", "best tok/s", "worst tok/s", f"vs {first} (paired)")])
    for name in names:
        ts = sorted(s["s"] for s in steps if s["variant"] == name)
        ratios = [by_round[(first, r)] / by_round[(name, r)] for r in range(args.reps)]
        row = {
            "name": name,
            "median_s": statistics.median(ts),
            "min_s": ts[0],
            "max_s": ts[-1],
            "tok_s": tokens / statistics.median(ts),
            "paired_ratio": statistics.median(ratios),
            "peak_gb": peak_gb(),
        }
        res["rows"].append(row)
        table([(name, f"{row['tok_s'] / 1e3:.1f}k", f"{tokens / ts[0] / 1e3:.1f}k",
                f"{tokens / ts[-1] / 1e3:.1f}k", f"{row['paired_ratio']:.3f}x")])  # fmt: skip
    gcs = [s for s in steps if s["gc_n"]]
    print(f"steps with a Python GC: {len(gcs)} of {len(steps)}, "
          f"{sum(s['gc_s'] for s in gcs) * 1e3:.1f} ms in all; "
          f"steps with a cudaMalloc: {sum(1 for s in steps if s['mallocs'])}")  # fmt: skip
    clocks = [s["sm_mhz"] for s in steps if "sm_mhz" in s]
    if clocks:
        print(f"SM clock before a step: {min(clocks)}-{max(clocks)} MHz; power "
              f"{min(s['power_mw'] for s in steps) / 1e3:.0f}-"
              f"{max(s['power_mw'] for s in steps) / 1e3:.0f} W; temperature "
              f"{min(s['temp_c'] for s in steps)}-{max(s['temp_c'] for s in steps)} C")  # fmt: skip
    if args.profile:
        from torch.profiler import ProfilerActivity, profile
        from trace_gaps import summarize

        policy = policies[first]
        _labelled(policy)
        out.mkdir(parents=True, exist_ok=True)
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(2):
                policy.train_step(policy.adapter, batch)
                sync()
        (out / "train_profile.txt").write_text(
            prof.key_averages().table(sort_by="cuda_time_total", row_limit=60)
        )
        trace = out / "train_trace.json"
        prof.export_chrome_trace(str(trace))
        summary = summarize(trace)
        (out / "trace_summary.txt").write_text(summary)
        print(summary)
        import gzip
        import shutil

        with open(trace, "rb") as f, gzip.open(str(trace) + ".gz", "wb") as g:
            shutil.copyfileobj(f, g)
        trace.unlink()
    return res


def part_train(model_dir: Path, args, out: Path) -> dict:
    vocab = args.vocab
    seq_len, prompt_len = args.seq_len, args.prompt_len
    resp_len = seq_len - prompt_len
    rows, res = [], {"seq_len": seq_len, "prompt_len": prompt_len}
    for seqs in args.seqs:
        tokens = seqs * seq_len
        for ckpt in [False, True][: 1 + args.checkpointing] if args.baseline else []:
            name = f"plain PEFT bf16 {seqs}x{seq_len}" + (", checkpointed" if ckpt else "")
            rows.append(
                measure(
                    name,
                    lambda s=seqs, c=ckpt: plain_peft_step_fn(model_dir, s, seq_len, c),
                    tokens,
                    args.warmup,
                    args.reps,
                )
            )
            rows[-1]["ckpt"] = ckpt
            print(name, {k: rows[-1].get(k) for k in ("tok_s", "peak_gb", "oom")}, flush=True)
        variants = [(mb, False) for mb in sorted({min(m, seqs) for m in args.micro_batches})]
        if args.checkpointing:
            variants += [(mb, True) for mb, _ in variants]
        stacks = [False, None] if args.peft_layers else [None]
        for mb, ckpt, stack in [(m, c, s) for m, c in variants for s in stacks]:

            def make(seqs=seqs, mb=mb, ckpt=ckpt, stack=stack):
                policy = engine_policy(model_dir, resp_len, mb, ckpt=ckpt, stack=stack)
                batch = train_batch(policy, seqs, prompt_len, resp_len, vocab)
                return (lambda: policy.train_step(policy.adapter, batch)), policy

            name = f"engine {seqs}x{seq_len} micro-batch {mb}" + (", checkpointed" if ckpt else "")
            name += ", PEFT layers + foreach AdamW" if stack is False else ""
            rows.append(dict(measure(name, make, tokens, args.warmup, args.reps), ckpt=ckpt))
            print(
                rows[-1]["name"],
                {k: rows[-1].get(k) for k in ("tok_s", "peak_gb", "oom")},
                flush=True,
            )
    if args.cast_row and torch.cuda.is_available():  # keeping LoRA inputs bf16, same run
        seqs = args.seqs[0]

        def make_cast(seqs=seqs):
            policy = engine_policy(model_dir, resp_len, seqs)
            policy._autocast = lambda: torch.autocast("cuda", dtype=torch.bfloat16)
            batch = train_batch(policy, seqs, prompt_len, resp_len, vocab)
            return (lambda: policy.train_step(policy.adapter, batch)), policy

        name = f"engine {seqs}x{seq_len}, PEFT casts LoRA inputs to fp32"
        rows.append(measure(name, make_cast, seqs * seq_len, args.warmup, args.reps))
        print(rows[-1]["name"], {k: rows[-1].get(k) for k in ("tok_s", "peak_gb")}, flush=True)
    compiled = [False] * args.compile + [True] * args.compile_checkpointed
    # --peft-layers: each engine row also with PEFT's own LoRA layers and foreach AdamW (what
    # the engine ran before the stacked LoRA), first, as the same run's baseline
    for ckpt, stack in (
        [(c, s) for c in compiled for s in stacks] if torch.cuda.is_available() else []
    ):
        seqs = args.seqs[0]
        key = ("compile_ckpt_s" if ckpt else "compile_s") + ("_peft" if stack is False else "")

        def make_compiled(seqs=seqs, ckpt=ckpt, key=key, stack=stack):
            policy = engine_policy(model_dir, resp_len, seqs, True, ckpt, stack)
            batch = train_batch(policy, seqs, prompt_len, resp_len, vocab)
            t0 = time.perf_counter()
            policy.train_step(policy.adapter, batch)  # the first step compiles
            sync()
            res[key] = time.perf_counter() - t0
            return (lambda: policy.train_step(policy.adapter, batch)), policy

        name = f"engine {seqs}x{seq_len} micro-batch {seqs}, train.compile"
        name += ", checkpointed" if ckpt else ""
        name += ", PEFT layers + foreach AdamW" if stack is False else ""
        rows.append(measure(name, make_compiled, seqs * seq_len, args.warmup, args.reps))
        rows[-1]["ckpt"] = ckpt
        print(rows[-1]["name"], {k: rows[-1].get(k) for k in ("tok_s", "peak_gb")}, flush=True)
        if key in res:
            print(f"first step (compiling): {res[key]:.1f} s", flush=True)
    # --compile-variants: train.compile with parts of the step switched back, side by side
    for variant in args.compile_variants.split(",") if args.compile_variants else []:
        seqs = args.seqs[0]
        row = compile_variant_row(model_dir, args, variant, seqs, prompt_len, resp_len, vocab)
        rows.append(row)
        print(row["name"], {k: row.get(k) for k in ("tok_s", "peak_gb")}, flush=True)
    if args.profile and torch.cuda.is_available():
        compiled = args.compile or bool(args.compile_variants)
        policy = engine_policy(model_dir, resp_len, args.seqs[0], compiled, args.checkpointing)
        batch = train_batch(policy, args.seqs[0], prompt_len, resp_len, vocab)
        for _ in range(3):  # compiles, then the optimizer's graph captures at the second step
            policy.train_step(policy.adapter, batch)
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            policy.train_step(policy.adapter, batch)
            sync()
        (out / "train_profile.txt").write_text(
            prof.key_averages().table(sort_by="cuda_time_total", row_limit=40)
        )
        prof.export_chrome_trace(str(out / "train_trace.json"))  # where the GPU waits
        del policy
    res["rows"] = rows
    print("\ntrain step (tokens = sequences × seq_len; engine trains on the response tokens)")
    plain = [r for r in rows if r["name"].startswith("plain") and "tok_s" in r]
    table([("what", "tokens/s", "peak GB", "vs plain", "vs PEFT layers")])
    for r in rows:
        if r.get("oom") or r.get("failed"):
            table([(r["name"], "OOM" if r.get("oom") else "failed", f"{r['peak_gb']:.1f}", "", "")])
            continue
        # against the plain step of the same size and checkpointing, else of the same size,
        # else the largest that fitted
        same = [b for b in plain if b["tokens"] == r["tokens"]]
        same = [b for b in same if b["ckpt"] == r.get("ckpt", False)] or same or plain[-1:]
        if same and r is not same[0]:  # kept in the row: bench/gpu/spread.py reads it
            r["vs_plain"] = r["tok_s"] / same[0]["tok_s"]
        ratio = f"{r['vs_plain']:.2f}x" if "vs_plain" in r else ""
        # a stacked compiled row against the same run's PEFT-layers row of its checkpointing
        twin = [
            b
            for b in rows
            if b["name"] == r["name"] + ", PEFT layers + foreach AdamW" and "tok_s" in b
        ]
        if twin:
            r["vs_peft_layers"] = r["tok_s"] / twin[0]["tok_s"]
        vs = f"{r['vs_peft_layers']:.2f}x" if twin else ""
        table([(r["name"], f"{r['tok_s'] / 1e3:.1f}k", f"{r['peak_gb']:.1f}", ratio, vs)])
    if args.shape == "qwen3-0.6b":
        print(
            f"(issue 10's plain PEFT figure: {ISSUE['train_tok_s_16k'] / 1e3:.1f}k tokens/s at "
            "16x1024, 88.7 GB; OOM at 32x1024)"
        )
    return res


def main() -> None:
    ap = parser(__doc__, "baseline", "profile", "warmup", "reps")
    ap.add_argument("--compile", action="store_true", help="also with train.compile")
    ap.add_argument(
        "--compile-checkpointed",
        action="store_true",
        help="also with train.compile and train.activation_checkpointing",
    )
    ap.add_argument("--no-cast-row", dest="cast_row", action="store_false")
    ap.add_argument(
        "--peft-layers",
        action="store_true",
        help="each engine row also with PEFT's LoRA layers and foreach AdamW (no stacking)",
    )
    ap.add_argument(
        "--checkpointing",
        action="store_true",
        help="also with train.activation_checkpointing (and plain PEFT with its own)",
    )
    ap.add_argument(
        "--compile-variants",
        default="",
        help=f"train.compile rows, comma-separated, of {', '.join(COMPILE_VARIANTS)}",
    )
    ap.add_argument(
        "--interleave",
        default="",
        help=f"instead of the rows: train.compile variants stepped in turns, of "
        f"{', '.join(INTERLEAVE)} (the first is the paired ratios' reference)",
    )
    ap.add_argument("--seqs", type=int, nargs="+", default=[16, 32])
    ap.add_argument("--micro-batches", type=int, nargs="+", default=[16, 32])
    ap.add_argument("--seq-len", type=int, default=1024)
    ap.add_argument("--prompt-len", type=int, default=128)
    args = ap.parse_args()
    if args.interleave:
        run(part_interleave, args, "train_interleave")
    else:
        run(part_train, args)


if __name__ == "__main__":
    main()
