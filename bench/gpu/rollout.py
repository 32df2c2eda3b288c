"""Generation on one GPU: the engine's TorchBackend and vLLM against HF generate + PEFT;
logprob parity against the trainer; adapter sync.

    python3 bench/gpu/rollout.py        # static+compile, static, dynamic, HF generate + PEFT
    python3 bench/gpu/rollout.py --decodes static+compile,static --profile
    python3 bench/gpu/rollout.py --decodes static+compile,vllm --profile   # needs vLLM

Tokens a second at --batch rows (--batch / --group prompts of --prompt-len tokens, --group
samples each, --new-tokens each; LoRA r=16 unmerged) of the engine with each decode path of
--decodes after a warm-up (which captures the static path's CUDA graphs), the engine's model
alone (forward + greedy) beside the dynamic path, and HF generate + PEFT (--no-baseline
leaves it out), against that HF row and, on the Qwen3-0.6B shape, issue 10's figures
(HF + PEFT 2.0k, static-cache generate 9.6k). --shape picks the model (common.py);
`+compile` sets rollout.compile; `:sdpa`, `:bmm`, `:triton` pick the decoder's attention
(default: triton on a GPU); `%128x4` sets the Triton kernel's block and warps, `%64x4x128`
also the positions a program of its split kernel covers (`x0`: one program a row and KV
head); `@nocudnn` runs SDPA without cuDNN's kernel; `/overlap` and `/serial` turn the
engine's overlap on and off (the next decode step launched before the host records this
one's tokens). `vllm` is the vLLM backend (workers/rollout/vllm_backend.py: compiled, with
CUDA graphs; `vllm+eager` without either) at rollout.gpu_memory_utilization --vllm-memory.
--gen-reps times each variant's generate that many times (the median is its row). Every
row's samples are scored by the trainer (a bf16 LoraPolicy with the same adapter):
token_mult_prob_error of the engine's logprobs against that forward (NeMo-RL's guard: 1.05).
--profile profiles 16 decode steps of the last torch variant at the timed run's mean
context (prompt + half the new tokens), and of the vLLM engine (its own profiler, in its
engine process), each summarised by trace_gaps.py.
Then, for every engine, the adapter publication: LocalExecutor.adapter_update, the
engine's load and ack (vLLM's: its version handshake). Writes rollout.json (and
generate_profile.txt, generate_trace.json, *_kernels.txt with --profile) under --out.
"""

from __future__ import annotations

import asyncio
import functools
import gc
import importlib.metadata
import time
from pathlib import Path

import torch
from common import (
    ISSUE,
    LORA_TARGETS,
    base_spec,
    gen_requests,
    parser,
    peak_gb,
    random_adapter,
    reset_peak,
    run,
    sync,
    table,
    time_adapter_sync,
)


def forward_only_decode(model, batch: int, prompt_len: int, new: int, vocab: int) -> float:
    """The model's share of decoding: prefill + `new` cached steps of the engine's own
    model, greedy on the device, nothing else. Returns tokens/s."""
    dev = next(model.parameters()).device
    ids = torch.randint(3, vocab, (batch, prompt_len), device=dev)
    with torch.no_grad():
        sync()
        t0 = time.perf_counter()
        out = model(input_ids=ids, use_cache=True, logits_to_keep=1)
        past = out.past_key_values
        tok = out.logits[:, -1].argmax(-1, keepdim=True)
        for i in range(new - 1):
            pos = torch.full((batch, 1), prompt_len + i, device=dev)
            out = model(input_ids=tok, position_ids=pos, past_key_values=past, use_cache=True)
            past = out.past_key_values
            tok = out.logits[:, -1].argmax(-1, keepdim=True)
        sync()
    return batch * new / (time.perf_counter() - t0)


def mult_prob_error(policy, results) -> float:
    """token_mult_prob_error of the engine's logprobs against the trainer's forward."""
    from workers.grpo import token_mult_prob_error
    from workers.policy import TrainSample, collate

    samples = [
        TrainSample(r.prompt_ids, s.token_ids, s.logprobs, s.versions, 0.0)
        for r in results
        for s in r.samples
        if s.token_ids
    ]
    batch = collate(samples, policy.tokenizer.pad_token_id).to(policy.device)
    policy.model.eval()
    with torch.no_grad():
        lp, _ = policy.token_logprobs(batch)
    return float(token_mult_prob_error(batch.lp_roll, lp, batch.mask))


def start_vllm(model_dir: Path, args, variant: str, out: Path):
    """The vLLM backend as a run starts it; with --profile, its engine process profiles
    what `engine.start_profile()` .. `stop_profile()` encloses into out/vllm_trace."""
    import vllm

    from workers.rollout.vllm_backend import VllmBackend
    from workers.spec import parse_spec

    over = {
        "rollout.backend": "vllm",
        "rollout.max_new_tokens": args.new_tokens,
        "rollout.gpu_memory_utilization": args.vllm_memory,
        "rollout.enforce_eager": variant.endswith("+eager"),
    }
    make_args = vllm.AsyncEngineArgs
    if args.profile:  # the backend takes no profiler settings: added to its engine args here
        from vllm.config import ProfilerConfig

        vllm.AsyncEngineArgs = functools.partial(
            make_args,
            profiler_config=ProfilerConfig(
                profiler="torch",
                torch_profiler_dir=str((out / "vllm_trace").resolve()),
                torch_profiler_with_stack=False,
                torch_profiler_use_gzip=False,
                ignore_frontend=True,  # our own process: the trainer's, not the engine's
            ),
        )
    t0 = time.perf_counter()
    try:
        backend = VllmBackend(parse_spec(base_spec(model_dir, **over)), model_dir)
    finally:
        vllm.AsyncEngineArgs = make_args
    return backend, time.perf_counter() - t0


def torch_variant(model_dir: Path, spec, variant: str, defaults: dict):
    """decode[:attention][+compile][@nocudnn][%BLOCKxWARPS[xCHUNK]][/overlap|/serial]:
    static:bmm+compile; @nocudnn: SDPA without cuDNN's kernel (torch picks another, the
    memory-efficient one with a mask); %: the Triton decode attention's launch
    (decode_attention.CONFIG); /overlap, /serial: backend.overlap on, off (the next step
    launched before the host records this one's tokens, or after)."""
    from workers.rollout import decode_attention
    from workers.rollout.torch_engine import TorchBackend

    variant_, _, flags = variant.partition("/")
    variant_, _, config = variant_.partition("%")
    decode_attention.CONFIG.update(defaults)
    if config:
        block, warps, *chunk = config.split("x")
        decode_attention.CONFIG.update(BLOCK=int(block), num_warps=int(warps))
        if chunk:
            decode_attention.CONFIG.update(CHUNK=int(chunk[0]))
    base_variant, _, sdpa = variant_.partition("@")
    torch.backends.cuda.enable_cudnn_sdp(sdpa != "nocudnn")
    decode, _, attention = base_variant.partition("+")[0].partition(":")
    over = {"decode": decode, "compile": base_variant.endswith("+compile")}
    spec = spec.model_copy(update={"rollout": spec.rollout.model_copy(update=over)})
    backend = TorchBackend(spec, model_dir)
    if attention:  # graphs are captured on first use: the choice holds from the start
        backend.decoder.attention = attention
    if flags in ("serial", "overlap"):
        backend.overlap = flags == "overlap"
    return backend, decode


def part_rollout(model_dir: Path, args, out: Path) -> dict:
    from trace_gaps import summarize

    from workers.loop.executor import LocalExecutor
    from workers.policy import LoraPolicy
    from workers.rollout import decode_attention
    from workers.spec import parse_spec

    vocab, groups, n = args.vocab, args.batch // args.group, args.group
    p_len, new = args.prompt_len, args.new_tokens
    spec = parse_spec(
        base_spec(
            model_dir, **{"rollout.max_new_tokens": new, "rollout.max_batch_size": args.batch}
        )
    )
    res: dict = {"batch": args.batch, "prompt_len": p_len, "new_tokens": new, "sync": {}}
    rows = []
    # one event loop for every engine: vLLM's is bound to the loop it first ran on
    loop = asyncio.new_event_loop()
    arun = loop.run_until_complete
    # the trainer: the adapter every engine serves, the forward that scores their
    # logprobs, and the publisher of the adapter sync
    policy = LoraPolicy(spec, model_dir)
    adapter = random_adapter(policy.model)
    policy.load_adapter_tensors(adapter, 1)
    executor = LocalExecutor(policy)
    update = arun(executor.adapter_update(with_probe=True))  # the probe: vLLM checks it
    default_config = dict(decode_attention.CONFIG)
    variants = args.decodes.split(",")
    out.mkdir(parents=True, exist_ok=True)
    # --profile: the last variant of each engine
    last = {v.startswith("vllm"): i for i, v in enumerate(variants)}
    profiled = set(last.values())
    for i, variant in enumerate(variants):
        startup = None
        if variant.startswith("vllm"):
            backend, startup = start_vllm(model_dir, args, variant, out)
            name = f"vLLM {importlib.metadata.version('vllm')}, {variant}"
            decode = "vllm"
        else:
            backend, decode = torch_variant(model_dir, spec, variant, default_config)
            name = f"engine TorchBackend, decode {variant}"
        policy.adapter.version = 1
        arun(backend.load_adapter(update))
        # warm-up: kernels, allocator, cache shapes, and (static) the CUDA graphs of every
        # batch bucket and attention extent the timed run meets
        arun(backend.generate(gen_requests(groups, n, p_len, new, vocab, seed=99)))
        sync()
        times = []
        for _ in range(args.gen_reps):
            t0 = time.perf_counter()
            results = arun(backend.generate(gen_requests(groups, n, p_len, new, vocab)))
            sync()
            times.append(time.perf_counter() - t0)
        dt = sorted(times)[len(times) // 2]
        toks = sum(len(s.token_ids) for r in results for s in r.samples)
        rows.append(
            {
                "name": f"{name}, LoRA r16, batch {args.batch}",
                "tok_s": toks / dt,
                "tokens": toks,
                "s": dt,
                "all_tok_s": [toks / x for x in times],
                "ms_per_step": dt / new * 1e3,
                "peak_gb": peak_gb(),
                "mult_prob_error": mult_prob_error(policy, results),
                **({"startup_s": startup} if startup is not None else {}),
            }
        )
        print(rows[-1], flush=True)
        if decode == "dynamic":
            rows.append(
                {
                    "name": "  engine's model, forward only (greedy)",
                    "tok_s": forward_only_decode(backend.model, args.batch, p_len, new, vocab),
                }
            )
            print(rows[-1], flush=True)
        if args.profile and torch.cuda.is_available() and i in profiled:
            # at the timed run's mean context: its average step
            reqs = gen_requests(groups, n, p_len + new // 2, 16, vocab, seed=5)
            arun(backend.generate(reqs))  # graphs of these extents captured first
            if decode == "vllm":
                arun(backend.llm.start_profile())
                arun(backend.generate(reqs))
                arun(backend.llm.stop_profile())
                traces = sorted(
                    (out / "vllm_trace").rglob("*.json*"), key=lambda f: f.stat().st_size
                )
                if traces:  # the engine process's: the larger one
                    (out / "vllm_kernels.txt").write_text(summarize(traces[-1]))
            else:
                from torch.profiler import ProfilerActivity, profile

                with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
                    arun(backend.generate(reqs))
                    sync()
                (out / "generate_profile.txt").write_text(
                    prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=40)
                    + "\n\n"
                    + prof.key_averages().table(sort_by="cuda_time_total", row_limit=60)
                )
                prof.export_chrome_trace(str(out / "generate_trace.json"))
                (out / "torch_kernels.txt").write_text(summarize(out / "generate_trace.json"))
        # adapter sync: the trainer publishes (LocalExecutor.adapter_update), the engine loads
        res["sync"][name] = time_adapter_sync(executor, backend, args.reps, loop)
        arun(backend.close())
        del backend
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    t0 = time.perf_counter()
    for _ in range(5):
        policy.adapter_tensors()
    sync()
    tensors_only_s = (time.perf_counter() - t0) / 5
    del policy, executor
    reset_peak()

    if args.baseline:
        from peft import LoraConfig, get_peft_model, set_peft_model_state_dict
        from transformers import AutoModelForCausalLM

        dev = "cuda" if torch.cuda.is_available() else "cpu"
        base = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.bfloat16).to(dev)
        model = get_peft_model(base, LoraConfig(r=16, lora_alpha=32, target_modules=LORA_TARGETS))
        set_peft_model_state_dict(model, adapter)
        model.eval()
        ids = torch.randint(3, vocab, (args.batch, p_len), device=dev)
        kw = dict(
            attention_mask=torch.ones_like(ids),
            do_sample=True,
            max_new_tokens=new,
            min_new_tokens=new,
            pad_token_id=0,
            top_k=None,
            top_p=None,
        )
        with torch.no_grad():
            model.generate(input_ids=ids, **dict(kw, max_new_tokens=4, min_new_tokens=4))
            sync()
            t0 = time.perf_counter()
            model.generate(input_ids=ids, **kw)
            sync()
        rows.append(
            {
                "name": f"HF generate + PEFT bf16, batch {args.batch}",
                "tok_s": args.batch * new / (time.perf_counter() - t0),
            }
        )
        print(rows[-1], flush=True)
    res["rows"] = rows
    print(f"\ngeneration, batch {args.batch}, {p_len} prompt + {new} new tokens, LoRA unmerged")
    hf = rows[-1]["tok_s"] if args.baseline else None  # measured above, in this run
    issue = args.shape == "qwen3-0.6b"  # issue 10's figures are of that shape
    head = ("what", "tokens/s", "vs HF+PEFT, this run")
    table([head + (("vs HF+PEFT 2.0k", "vs static 9.6k") if issue else ())])
    for r in rows:
        if hf and r is not rows[-1]:  # kept in the row: bench/gpu/spread.py reads it
            r["vs_hf"] = r["tok_s"] / hf
        row = (r["name"], f"{r['tok_s'] / 1e3:.2f}k", f"{r['vs_hf']:.2f}x" if "vs_hf" in r else "")
        if issue:
            row += (
                f"{r['tok_s'] / ISSUE['gen_hf_peft']:.2f}x",
                f"{r['tok_s'] / ISSUE['gen_hf_static_lora']:.2f}x",
            )
        table([row])
    for r in rows:
        if "mult_prob_error" in r:
            print(f"token_mult_prob_error against the trainer, {r['name']}: "
                  f"{r['mult_prob_error']:.4f} (guard 1.05)")  # fmt: skip
    for name, s in res["sync"].items():
        s["tensors_only_s"] = tensors_only_s
        print(
            f"adapter sync, {name} ({s['adapter_params'] / 1e6:.1f}M parameters): publish "
            f"{s['publish_s'] * 1e3:.1f} ms (tensors alone {tensors_only_s * 1e3:.1f} ms), "
            f"engine load + ack {s['load_s'] * 1e3:.1f} ms, total "
            f"{(s['publish_s'] + s['load_s']) * 1e3:.1f} ms"
        )
    return res


def main() -> None:
    ap = parser(__doc__, "baseline", "profile", "reps")
    ap.add_argument("--prompt-len", type=int, default=128)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument(
        "--decodes",
        default="static+compile,static,dynamic",
        help="decode paths to run (static[:bmm|sdpa][+compile], dynamic)",
    )
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--new-tokens", type=int, default=256)
    ap.add_argument("--gen-reps", type=int, default=1, help="timed generates a variant")
    ap.add_argument(
        "--vllm-memory", type=float, default=0.5, help="vllm: rollout.gpu_memory_utilization"
    )
    run(part_rollout, ap.parse_args())


if __name__ == "__main__":
    main()
