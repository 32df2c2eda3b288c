"""The engine on one GPU against plain transformers + PEFT, measured side by side in one run.

A Qwen3-0.6B-shaped model (hidden 1024, 28 layers, 16 heads, 8 KV heads, head_dim 128,
intermediate 3072, vocabulary 151936, tied embeddings) at random init in bf16, LoRA r=16 on
every linear layer. Each part runs the engine's own classes (LoraPolicy, TorchBackend,
LocalExecutor, the drivers behind `train()`), the ones the Ray actors hold:

    python3 bench/gpu.py train     # train step tokens/s and peak memory vs plain PEFT
    python3 bench/gpu.py rollout   # generation tokens/s vs HF generate; adapter sync time
    python3 bench/gpu.py async     # async vs sync wall clock per step (real drivers)
    python3 bench/gpu.py probe [--graph]  # headroom: the engine's model, static KV cache
    python3 bench/gpu.py sync      # adapter publication: same GPU, second GPU, engine process

Each part prints a table and writes PART.json under --out. Parts run in separate processes
so that one's memory (or an out-of-memory) cannot skew the next. Baseline figures quoted by
issue 10 for this shape: train 37.1k tokens/s and 88.7 GB at 16×1024, OOM at 32×1024;
generation at batch 256, 128 prompt + 256 new tokens: HF generate + PEFT 2.0k tokens/s,
static-cache generate with LoRA 9.6k tokens/s.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import statistics
import tempfile
import time
import traceback
from pathlib import Path

import torch

LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
SHAPE = dict(
    vocab_size=151936,
    hidden_size=1024,
    num_hidden_layers=28,
    num_attention_heads=16,
    num_key_value_heads=8,
    head_dim=128,
    intermediate_size=3072,
    max_position_embeddings=4096,
    tie_word_embeddings=True,
)
# Llama-3.1-8B's shape (issue 14): untied head, GQA 32/8, vocabulary 128256
LLAMA_8B = dict(
    vocab_size=128256,
    hidden_size=4096,
    num_hidden_layers=32,
    num_attention_heads=32,
    num_key_value_heads=8,
    head_dim=128,
    intermediate_size=14336,
    max_position_embeddings=4096,
    tie_word_embeddings=False,
    arch="llama",
)
SHAPES = {"qwen3-0.6b": SHAPE, "llama-3.1-8b": LLAMA_8B}
ISSUE = {"train_tok_s_16k": 37.1e3, "gen_hf_peft": 2.0e3, "gen_hf_static_lora": 9.6e3}


def small_shape() -> dict:
    """A tiny model with the same structure, for checking this script on a CPU."""
    return dict(
        SHAPE,
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        intermediate_size=128,
        vocab_size=512,
    )


# ------------------------------------------------------------------------------ helpers


def sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def reset_peak() -> None:
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def peak_gb() -> float:
    return torch.cuda.max_memory_allocated() / 1e9 if torch.cuda.is_available() else 0.0


def build_model(out: Path, shape: dict) -> Path:
    """Random-init bf16 weights and the char tokenizer (the vocabulary sizes differ on
    purpose: token ids above the tokenizer's are valid model inputs and decode to '')."""
    if (out / "config.json").is_file():
        return out
    from transformers import AutoModelForCausalLM

    from workers.models.tokenizer import build_char_tokenizer

    shape = dict(shape)
    if shape.pop("arch", "qwen3") == "llama":
        from transformers import LlamaConfig as Config
    else:
        try:
            from transformers import Qwen3Config as Config
        except ImportError:  # older transformers: the same shape as Qwen2 (no q/k norm)
            from transformers import Qwen2Config as Config
    tok = build_char_tokenizer()
    config = Config(
        **shape,
        eos_token_id=tok.eos_token_id,
        bos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
    )
    torch.manual_seed(0)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    model.save_pretrained(out)
    tok.save_pretrained(out)
    n = sum(p.numel() for p in model.parameters())
    print(f"model: {type(config).__name__}, {n / 1e6:.0f}M parameters, bf16, in {out}")
    del model
    return out


def base_spec(model_dir: Path, **over) -> dict:
    spec = {
        "model": {"path": str(model_dir)},
        "lora": {"r": 16, "alpha": 32, "target_modules": LORA_TARGETS},
        "algorithm": {"num_generations": 8},
        "rollout": {"backend": "torch", "max_new_tokens": 256, "temperature": 1.0},
        "data": {"task": "arithmetic", "eval_size": 8},
        "train": {"steps": 1, "prompts_per_step": 32, "eval_every": 0, "lr": 1e-5},
        "resources": {"trainer_gpus": 1, "rollout_gpus": 1},
    }
    for path, value in over.items():
        node = spec
        *head, last = path.split(".")
        for k in head:
            node = node.setdefault(k, {})
        node[last] = value
    return spec


def write(out: Path, part: str, result: dict) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{part}.json").write_text(json.dumps(result, indent=1))


def table(rows: list[tuple]) -> None:
    for r in rows:
        print("  ".join(f"{c:>14}" if i else f"{c:<44}" for i, c in enumerate(r)))


# ------------------------------------------------------------------------------ train


def plain_peft_step_fn(model_dir: Path, seqs: int, seq_len: int):
    """The baseline: transformers + PEFT in bf16, full-vocabulary logits, mean token NLL."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    dev = "cuda" if torch.cuda.is_available() else "cpu"
    base = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.bfloat16).to(dev)
    model = get_peft_model(base, LoraConfig(r=16, lora_alpha=32, target_modules=LORA_TARGETS))
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


def engine_policy(model_dir: Path, resp_len: int, micro_batch: int, compile: bool = False):
    from workers.policy import LoraPolicy
    from workers.spec import parse_spec

    over = {"rollout.max_new_tokens": resp_len, "train.micro_batch_size": micro_batch}
    spec = parse_spec(base_spec(model_dir, **over, **{"train.compile": compile}))
    return LoraPolicy(spec, model_dir)


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


def time_steps(step, warmup: int, reps: int) -> list[float]:
    for _ in range(warmup):
        step()
    sync()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        step()
        sync()
        times.append(time.perf_counter() - t0)
    return times


def measure(name: str, make, tokens: int, warmup: int, reps: int) -> dict:
    """Build with `make()` → (step, keepalive), time it; an OOM is a result, not a crash."""
    reset_peak()
    held = None
    try:
        step, held = make()
        times = time_steps(step, warmup, reps)
        med = statistics.median(times)
        row = {
            "name": name,
            "tokens": tokens,
            "step_s": med,
            "tok_s": tokens / med,
            "peak_gb": peak_gb(),
            "times": times,
        }
    except torch.OutOfMemoryError as exc:
        row = {
            "name": name,
            "tokens": tokens,
            "oom": True,
            "peak_gb": peak_gb(),
            "error": str(exc).splitlines()[0],
        }
    del held
    reset_peak()
    return row


def part_train(model_dir: Path, args, out: Path) -> dict:
    vocab = args.vocab
    seq_len, prompt_len = args.seq_len, args.prompt_len
    resp_len = seq_len - prompt_len
    rows, res = [], {"seq_len": seq_len, "prompt_len": prompt_len}
    for seqs in args.seqs:
        tokens = seqs * seq_len
        if args.baseline:
            rows.append(
                measure(
                    f"plain PEFT bf16 {seqs}x{seq_len}",
                    lambda s=seqs: plain_peft_step_fn(model_dir, s, seq_len),
                    tokens,
                    args.warmup,
                    args.reps,
                )
            )
            print(
                rows[-1]["name"],
                {k: rows[-1].get(k) for k in ("tok_s", "peak_gb", "oom")},
                flush=True,
            )
        for mb in sorted({min(m, seqs) for m in args.micro_batches}):

            def make(seqs=seqs, mb=mb):
                policy = engine_policy(model_dir, resp_len, mb)
                batch = train_batch(policy, seqs, prompt_len, resp_len, vocab)
                return (lambda: policy.train_step(batch)), policy

            rows.append(
                measure(
                    f"engine {seqs}x{seq_len} micro-batch {mb}",
                    make,
                    tokens,
                    args.warmup,
                    args.reps,
                )
            )
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
            return (lambda: policy.train_step(batch)), policy

        name = f"engine {seqs}x{seq_len}, PEFT casts LoRA inputs to fp32"
        rows.append(measure(name, make_cast, seqs * seq_len, args.warmup, args.reps))
        print(rows[-1]["name"], {k: rows[-1].get(k) for k in ("tok_s", "peak_gb")}, flush=True)
    if args.compile and torch.cuda.is_available():  # train.compile, same run
        seqs = args.seqs[0]

        def make_compiled(seqs=seqs):
            policy = engine_policy(model_dir, resp_len, seqs, compile=True)
            batch = train_batch(policy, seqs, prompt_len, resp_len, vocab)
            t0 = time.perf_counter()
            policy.train_step(batch)  # the first step compiles
            sync()
            res["compile_s"] = time.perf_counter() - t0
            return (lambda: policy.train_step(batch)), policy

        name = f"engine {seqs}x{seq_len} micro-batch {seqs}, train.compile"
        rows.append(measure(name, make_compiled, seqs * seq_len, args.warmup, args.reps))
        print(rows[-1]["name"], {k: rows[-1].get(k) for k in ("tok_s", "peak_gb")}, flush=True)
        print(f"first step (compiling): {res['compile_s']:.1f} s", flush=True)
    if args.profile and torch.cuda.is_available():
        policy = engine_policy(model_dir, resp_len, args.seqs[0], compile=args.compile)
        batch = train_batch(policy, args.seqs[0], prompt_len, resp_len, vocab)
        policy.train_step(batch)
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            policy.train_step(batch)
            sync()
        (out / "train_profile.txt").write_text(
            prof.key_averages().table(sort_by="cuda_time_total", row_limit=40)
        )
        del policy
    res["rows"] = rows
    print("\ntrain step (tokens = sequences × seq_len; engine trains on the response tokens)")
    plain = [r for r in rows if r["name"].startswith("plain") and "tok_s" in r]
    table([("what", "tokens/s", "peak GB", "vs plain")])
    for r in rows:
        if r.get("oom"):
            table([(r["name"], "OOM", f"{r['peak_gb']:.1f}", "")])
            continue
        # against the plain step of the same size, or the largest that fitted
        same = [b for b in plain if b["tokens"] == r["tokens"]] or plain[-1:]
        ratio = f"{r['tok_s'] / same[0]['tok_s']:.2f}x" if same else ""
        table([(r["name"], f"{r['tok_s'] / 1e3:.1f}k", f"{r['peak_gb']:.1f}", ratio)])
    print(
        f"(issue 10's plain PEFT figure: {ISSUE['train_tok_s_16k'] / 1e3:.1f}k tokens/s at "
        "16x1024, 88.7 GB; OOM at 32x1024)"
    )
    return res


# ------------------------------------------------------------------------------ rollout


def gen_requests(groups: int, n: int, prompt_len: int, new: int, vocab: int, seed: int = 0):
    from workers.rollout import GroupRequest, SamplingParams

    g = torch.Generator().manual_seed(seed)
    params = SamplingParams(temperature=1.0, max_new_tokens=new)
    # ids ≥ 3 avoid pad/eos/unk in prompts; a sampled EOS (1 in 151936) may end a row early
    return [
        GroupRequest(
            f"g{i}",
            torch.randint(3, vocab, (prompt_len,), generator=g).tolist(),
            n,
            seed + i,
            params,
        )
        for i in range(groups)
    ]


def random_adapter(model) -> dict[str, torch.Tensor]:
    from workers.policy import lora as lora_io

    tensors = lora_io.adapter_tensors(model)
    g = torch.Generator().manual_seed(3)
    return {
        k: (torch.randn(v.shape, generator=g) * 0.01).to(v.dtype) if "lora_B" in k else v
        for k, v in tensors.items()
    }


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


def static_decode(model, batch: int, prompt_len: int, new: int, vocab: int, graph: bool) -> float:
    """Headroom probe, not the engine: the same model with a static KV cache, each decode
    step eager or replayed from one captured CUDA graph (greedy, forward only). tokens/s."""
    from transformers import StaticCache

    dev = next(model.parameters()).device
    cache = StaticCache(config=model.config, max_cache_len=prompt_len + new)
    ids = torch.randint(3, vocab, (batch, prompt_len), device=dev)
    pos = torch.zeros(1, dtype=torch.long, device=dev)
    with torch.no_grad():
        out = model(
            input_ids=ids,
            past_key_values=cache,
            use_cache=True,
            logits_to_keep=1,
            cache_position=torch.arange(prompt_len, device=dev),
        )
        tok = out.logits[:, -1].argmax(-1, keepdim=True)

        def step() -> torch.Tensor:
            return model(
                input_ids=tok,
                position_ids=pos.view(1, 1).expand(batch, 1),
                cache_position=pos,
                past_key_values=cache,
                use_cache=True,
            ).logits

        pos.fill_(prompt_len)
        if not graph:
            sync()
            t0 = time.perf_counter()
            for i in range(new - 1):
                pos.fill_(prompt_len + i)
                tok.copy_(step()[:, -1].argmax(-1, keepdim=True))
            sync()
            return batch * new / (time.perf_counter() - t0)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(2):
                step()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            logits = step()
        sync()
        t0 = time.perf_counter()
        for i in range(new - 1):
            pos.fill_(prompt_len + i)
            graph.replay()
            tok.copy_(logits[:, -1].argmax(-1, keepdim=True))
        sync()
    return batch * new / (time.perf_counter() - t0)


def time_adapter_sync(executor, backend, reps: int) -> dict:
    """The driver's publication, timed: the trainer's adapter_update (with the handshake
    probe only if the engine checks it), then the engine's load and acknowledgement."""
    pub, load = [], []
    for v in range(2, 2 + reps + 1):
        executor.policy.adapter_version = v
        sync()
        t0 = time.perf_counter()
        update = asyncio.run(executor.adapter_update(with_probe=backend.needs_probe))
        t1 = time.perf_counter()
        acked = asyncio.run(backend.load_adapter(update))
        sync()
        t2 = time.perf_counter()
        assert acked == v, (acked, v)
        pub.append(t1 - t0)
        load.append(t2 - t1)
    return {
        "adapter_params": sum(t.numel() for t in update.tensors.values()),
        "publish_s": statistics.median(pub[1:]),
        "load_s": statistics.median(load[1:]),
        "publish_all": pub,
        "load_all": load,
    }


def part_sync(model_dir: Path, args, out: Path) -> dict:
    """Adapter publication with the engine on the trainer's GPU, on a second GPU, and on a
    second GPU in a child process (resources.engine_process)."""
    from workers.loop.executor import LocalExecutor
    from workers.policy import LoraPolicy
    from workers.rollout import AdapterUpdate
    from workers.rollout.process_backend import ProcessBackend
    from workers.rollout.torch_backend import TorchBackend
    from workers.spec import parse_spec

    spec = parse_spec(base_spec(model_dir))
    gpus = torch.cuda.device_count()
    trainer_dev = torch.device("cuda:0" if gpus else "cpu")
    other = torch.device("cuda:1" if gpus > 1 else trainer_dev)
    executor = LocalExecutor(LoraPolicy(spec, model_dir, trainer_dev))
    res = {}
    engines = [
        ("engine on the trainer's GPU", lambda: TorchBackend(spec, model_dir, trainer_dev)),
        (f"engine on {other}", lambda: TorchBackend(spec, model_dir, other)),
        (f"engine process on {other}", lambda: ProcessBackend(spec, model_dir, other)),
    ]
    for name, make in engines:
        backend = make()
        first = asyncio.run(executor.adapter_update(with_probe=False))
        asyncio.run(backend.load_adapter(AdapterUpdate(1, tensors=first.tensors)))
        res[name] = time_adapter_sync(executor, backend, args.reps)
        asyncio.run(backend.close())
        del backend
        r = res[name]
        print(
            f"{name:<36} publish {r['publish_s'] * 1e3:6.1f} ms  load+ack "
            f"{r['load_s'] * 1e3:6.1f} ms  total {(r['publish_s'] + r['load_s']) * 1e3:6.1f} ms",
            flush=True,
        )
    return res


def part_rollout(model_dir: Path, args, out: Path) -> dict:
    from workers.loop.executor import LocalExecutor
    from workers.policy import LoraPolicy
    from workers.rollout import AdapterUpdate
    from workers.rollout.torch_backend import TorchBackend
    from workers.spec import parse_spec

    vocab, groups, n = args.vocab, args.batch // args.group, args.group
    p_len, new = args.prompt_len, args.new_tokens
    spec = parse_spec(
        base_spec(
            model_dir, **{"rollout.max_new_tokens": new, "rollout.max_batch_size": args.batch}
        )
    )
    res: dict = {"batch": args.batch, "prompt_len": p_len, "new_tokens": new}
    rows = []
    adapter = None
    # the engine with each decode path, side by side (static: the default on a GPU)
    for variant in args.decodes.split(","):  # decode[:attention], e.g. static:sdpa
        decode, _, attention = variant.partition(":")
        spec = spec.model_copy(
            update={"rollout": spec.rollout.model_copy(update={"decode": decode})}
        )
        backend = TorchBackend(spec, model_dir)
        if attention:  # graphs are captured on first use: the choice holds from the start
            backend.decoder.attention = attention
        adapter = adapter or random_adapter(backend.model)
        asyncio.run(backend.load_adapter(AdapterUpdate(1, tensors=adapter)))
        # warm-up: kernels, allocator, cache shapes, and (static) the CUDA graphs of every
        # batch bucket and attention extent the timed run meets
        asyncio.run(backend.generate(gen_requests(groups, n, p_len, new, vocab, seed=99)))
        sync()
        t0 = time.perf_counter()
        results = asyncio.run(backend.generate(gen_requests(groups, n, p_len, new, vocab)))
        sync()
        dt = time.perf_counter() - t0
        toks = sum(len(s.token_ids) for r in results for s in r.samples)
        rows.append(
            {
                "name": f"engine TorchBackend, decode {variant}, LoRA r16, batch {args.batch}",
                "tok_s": toks / dt,
                "tokens": toks,
                "s": dt,
                "peak_gb": peak_gb(),
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
        if variant != args.decodes.split(",")[-1]:
            asyncio.run(backend.close())
            del backend
            gc.collect()
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
    if args.profile and torch.cuda.is_available():
        from torch.profiler import ProfilerActivity, profile

        reqs = gen_requests(groups, n, p_len, 16, vocab, seed=5)
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            asyncio.run(backend.generate(reqs))
            sync()
        (out / "generate_profile.txt").write_text(
            prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=40)
            + "\n\n"
            + prof.key_averages().table(sort_by="cuda_time_total", row_limit=25)
        )

    # adapter sync: the trainer publishes (LocalExecutor.adapter_update), the engine loads
    policy = LoraPolicy(spec, model_dir)
    policy.load_adapter_tensors(adapter, 1)
    executor = LocalExecutor(policy)
    res["sync"] = time_adapter_sync(executor, backend, args.reps)
    t0 = time.perf_counter()
    for _ in range(5):
        policy.adapter_tensors()
    sync()
    res["sync"]["tensors_only_s"] = (time.perf_counter() - t0) / 5
    del policy, executor
    asyncio.run(backend.close())
    del backend
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
    table([("what", "tokens/s", "vs HF+PEFT 2.0k", "vs static 9.6k")])
    for r in rows:
        table(
            [
                (
                    r["name"],
                    f"{r['tok_s'] / 1e3:.2f}k",
                    f"{r['tok_s'] / ISSUE['gen_hf_peft']:.2f}x",
                    f"{r['tok_s'] / ISSUE['gen_hf_static_lora']:.2f}x",
                )
            ]
        )
    s = res["sync"]
    print(
        f"\nadapter sync ({s['adapter_params'] / 1e6:.1f}M parameters): publish "
        f"{s['publish_s'] * 1e3:.1f} ms (tensors alone {s['tensors_only_s'] * 1e3:.1f} ms), "
        f"engine load + ack {s['load_s'] * 1e3:.1f} ms, total "
        f"{(s['publish_s'] + s['load_s']) * 1e3:.1f} ms (goal ≤ 50)"
    )
    return res


def part_longtail(model_dir: Path, args, out: Path) -> dict:
    """Heavy-tailed response lengths on the GPU (bench/rollout_long_tail.py's workload at
    this shape): each row's budget is Pareto(1.2, scale 4) capped at --new-tokens, set by
    handing the row in as a partial sample that holds the rest. Finished rows leaving the
    batch (compact_below 0.75, the default) against every row to the end, alternating."""
    import math
    import random

    from workers.rollout import AdapterUpdate, GroupRequest, Sample, SamplingParams
    from workers.rollout.torch_backend import TorchBackend
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
    over = {"rollout.max_new_tokens": cap, "rollout.max_batch_size": args.batch}
    engines = {}
    for variant in args.decodes.split(","):
        decode, _, attention = variant.partition(":")
        spec = parse_spec(base_spec(model_dir, **over, **{"rollout.decode": decode}))
        for name, below in (("rows leave the batch", 0.75), ("every row to the end", 0.0)):
            backend = TorchBackend(spec, model_dir)
            backend.compact_below = below
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
    print(f"\nlong tail: {groups} groups × {n}, budgets Pareto(1.2, 4) capped at {cap} "
          f"(mean {mean:.1f}, max {max(lengths)}); {made} tokens made a round")  # fmt: skip
    table([("what", "s a round", "tokens/s", "vs every row to the end")])
    rows = []
    for name, ts in times.items():
        base = statistics.median(times[name.split(",")[0] + ", every row to the end"])
        t = statistics.median(ts)
        rows.append({"name": name, "s": t, "tok_s": made / t, "vs_full": base / t})
        table([(name, f"{t:.3f}", f"{made / t / 1e3:.2f}k", f"{base / t:.2f}x")])
    res["rows"] = rows
    return res


def part_probe(model_dir: Path, args, out: Path) -> dict:
    """Run last and alone: a failed capture can leave the CUDA context unusable."""
    from workers.rollout.torch_backend import TorchBackend
    from workers.spec import parse_spec

    spec = parse_spec(base_spec(model_dir))
    model = TorchBackend(spec, model_dir).model
    name = "static cache + CUDA graph" if args.graph else "static cache, eager"
    tok_s = static_decode(
        model, args.batch, args.prompt_len, args.new_tokens, args.vocab, args.graph
    )
    print(
        f"probe, engine's model (bf16 + unmerged LoRA), {name}, batch {args.batch}: "
        f"{tok_s / 1e3:.2f}k tokens/s (forward + greedy only)"
    )
    return {"name": name, "tok_s": tok_s}


# ------------------------------------------------------------------------------ async


def long_prompt_task(root: Path, chars: int) -> dict:
    """A JSONL task whose prompts are `chars` characters (= tokens: the char tokenizer), so
    that a step's training time can be made to match its generation time."""
    rng = torch.Generator().manual_seed(0)
    for name in ("train", "eval"):
        with open(root / f"{name}.jsonl", "w") as f:
            for _ in range(64):
                digits = torch.randint(0, 10, (chars,), generator=rng).tolist()
                text = "".join(map(str, digits))
                f.write(json.dumps({"prompt": text, "answer": text[-1]}) + "\n")
    return {
        "data.task": "jsonl",
        "data.path": str(root / "train.jsonl"),
        "data.eval_path": str(root / "eval.jsonl"),
    }


def part_async(model_dir: Path, args, out: Path) -> dict:
    from workers.train import train

    res: dict = {"prompt_chars": args.prompt_chars}
    data = {}
    if args.prompt_chars:  # long prompts: training grows with them, decoding barely does
        data = long_prompt_task(Path(tempfile.mkdtemp()), args.prompt_chars)
    for mode in ("sync", "async"):
        spec = base_spec(
            model_dir,
            **data,
            **{
                "rollout.max_new_tokens": args.new_tokens,
                "train.steps": args.steps,
                "train.prompts_per_step": args.batch // args.group,
                "train.micro_batch_size": args.micro_batch or args.batch,
                "algorithm.num_generations": args.group,
                "async.enabled": mode == "async",
                "async.max_staleness": 1,
                "resources.engine_process": args.engine_process,
            },
        )
        with tempfile.TemporaryDirectory() as tmp:
            t0 = time.perf_counter()
            train(spec, Path(tmp) / "run", progress=False)
            wall = time.perf_counter() - t0
            rows = [
                json.loads(x) for x in (Path(tmp) / "run/metrics.jsonl").read_text().splitlines()
            ]
        steps = [r for r in rows if r.get("step", 0) >= 2 and "time/step_s" in r]
        med = {
            k: statistics.median(r[k] for r in steps)
            for k in ("time/step_s", "time/generate_s", "time/train_s", "time/weight_sync_s")
        }
        res[mode] = dict(med, wall_s=wall, steps_timed=len(steps))
        print(mode, res[mode], flush=True)
    s, a = res["sync"], res["async"]
    g, t = s["time/generate_s"], s["time/train_s"]
    ideal = (g + t) / max(g, t)
    got = s["time/step_s"] / a["time/step_s"]
    res.update(
        ideal_speedup=ideal,
        speedup=got,
        of_ideal=(got - 1) / (ideal - 1) if ideal > 1 else float("nan"),
    )
    where = "two GPUs" if torch.cuda.device_count() > 1 else "one GPU for trainer and engine"
    print(f"\nasync overlap, {args.batch} rollouts × {args.new_tokens} new tokens a step, {where}")
    table([("what", "sync", "async")])
    for k in ("time/step_s", "time/generate_s", "time/train_s", "time/weight_sync_s"):
        table([(k, f"{s[k]:.3f}", f"{a[k]:.3f}")])
    print(
        f"speedup async/sync {got:.2f}x; ideal (G+T)/max(G,T) = {ideal:.2f}x; "
        f"share of the ideal gain {res['of_ideal']:.0%}"
    )
    return res


# ------------------------------------------------------------------------------ main


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("part", choices=["train", "rollout", "async", "probe", "sync", "longtail"])
    ap.add_argument("--graph", action="store_true", help="probe: capture a CUDA graph")
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "bench-gpu-out")))
    ap.add_argument("--model-dir", type=Path, default=Path(tempfile.gettempdir()) / "qwen3-06b")
    ap.add_argument("--small", action="store_true", help="tiny shapes: check the script on CPU")
    ap.add_argument("--no-baseline", dest="baseline", action="store_false")
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--compile", action="store_true", help="train: also with train.compile")
    ap.add_argument("--no-cast-row", dest="cast_row", action="store_false")
    ap.add_argument("--seqs", type=int, nargs="+", default=[16, 32])
    ap.add_argument("--micro-batches", type=int, nargs="+", default=[16, 32])
    ap.add_argument("--seq-len", type=int, default=1024)
    ap.add_argument("--prompt-len", type=int, default=128)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument(
        "--decodes",
        default="static,static:sdpa,dynamic",
        help="rollout, longtail: decode paths to run (static[:bmm|sdpa], dynamic)",
    )
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--new-tokens", type=int, default=256)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--prompt-chars", type=int, default=0, help="async: long JSONL prompts")
    ap.add_argument("--micro-batch", type=int, default=0, help="async: 0 = the whole batch")
    ap.add_argument("--engine-process", action="store_true", help="async: engine in a child")
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    shape = small_shape() if args.small else SHAPE
    args.vocab = shape["vocab_size"]
    torch.manual_seed(0)
    model_dir = build_model(args.model_dir, shape)
    if torch.cuda.is_available():
        print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}")
    parts = {"train": part_train, "rollout": part_rollout, "async": part_async, "probe": part_probe}
    parts["sync"], parts["longtail"] = part_sync, part_longtail
    part = parts[args.part]
    try:
        result = part(model_dir, args, args.out)
    except Exception:
        traceback.print_exc()
        raise
    write(args.out, args.part + ("-graph" if args.graph else ""), result)


if __name__ == "__main__":
    main()
