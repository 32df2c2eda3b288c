"""What the GPU benchmarks in bench/gpu/ share: shapes, the model on disk, the spec, timing.

A model of one of four real shapes (--shape: qwen3-0.6b, the default, llama-3.2-3b,
llama-3.1-8b, qwen3-8b; SHAPES below) at random init in bf16, LoRA r=16 on every linear
layer. Each script runs the engine's own classes (LoraPolicy, TorchBackend,
LocalExecutor, the drivers behind `train()`), the ones the Ray actors hold:

    python3 bench/gpu/train.py          # train step tokens/s and peak memory vs plain PEFT
    python3 bench/gpu/rollout.py        # generation tokens/s vs HF generate; adapter sync time
    python3 bench/gpu/longtail.py       # heavy-tailed lengths: continuous batching, compaction
    python3 bench/gpu/async_overlap.py  # async vs sync wall clock per step (real drivers)
    python3 bench/gpu/sync.py           # adapter publication: same GPU, second GPU, process
    python3 bench/gpu/multi.py train|async|run  # two or more GPUs of one host

Each script prints a table and writes PART.json under --out. They run in separate processes
so that one's memory (or an out-of-memory) cannot skew the next. Baseline figures quoted by
issue 10 for the Qwen3-0.6B shape: train 37.1k tokens/s and 88.7 GB at 16×1024, OOM at 32×1024;
generation at batch 256, 128 prompt + 256 new tokens: HF generate + PEFT 2.0k tokens/s,
static-cache generate with LoRA 9.6k tokens/s.

Not a script: the others import it as `common` (a script run as a file has its own
directory first on sys.path); the repository's `workers` package comes from the editable
install.
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
from collections.abc import Callable
from pathlib import Path

import torch

LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
# The real models' sizes (their config.json: hidden, layers, heads, KV heads, head_dim,
# intermediate, vocabulary, tied head); RoPE settings are left at the defaults, which change
# no shape. max_position_embeddings is cut to 4096: nothing here runs longer sequences.
SHAPE = dict(  # Qwen3-0.6B
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
LLAMA_3B = dict(  # Llama-3.2-3B: GQA 24/8, tied head, vocabulary 128256
    vocab_size=128256,
    hidden_size=3072,
    num_hidden_layers=28,
    num_attention_heads=24,
    num_key_value_heads=8,
    head_dim=128,
    intermediate_size=8192,
    max_position_embeddings=4096,
    tie_word_embeddings=True,
    arch="llama",
)
LLAMA_8B = dict(  # Llama-3.1-8B: untied head, GQA 32/8, vocabulary 128256
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
QWEN3_8B = dict(  # Qwen3-8B: untied head, GQA 32/8, q/k norms, vocabulary 151936
    vocab_size=151936,
    hidden_size=4096,
    num_hidden_layers=36,
    num_attention_heads=32,
    num_key_value_heads=8,
    head_dim=128,
    intermediate_size=12288,
    max_position_embeddings=4096,
    tie_word_embeddings=False,
)
SHAPES = {
    "qwen3-0.6b": SHAPE,
    "llama-3.2-3b": LLAMA_3B,
    "llama-3.1-8b": LLAMA_8B,
    "qwen3-8b": QWEN3_8B,
}
ISSUE = {"train_tok_s_16k": 37.1e3, "gen_hf_peft": 2.0e3, "gen_hf_static_lora": 9.6e3}


def small_shape(shape: dict = SHAPE) -> dict:
    """A tiny model with the structure of `shape` (architecture, tied head), for checking a
    script on a CPU."""
    return dict(
        shape,
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,  # vLLM's CPU build has no attention kernel for 16
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
        held = json.loads((out / "config.json").read_text())
        sizes = ("hidden_size", "num_hidden_layers", "intermediate_size", "vocab_size")
        if any(held.get(k) != shape[k] for k in sizes):
            raise SystemExit(f"{out} holds a model of another shape: pass another --model-dir")
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


def table(rows: list[tuple], first: int = 44) -> None:
    """Rows of cells: the first left-aligned in `first` characters, the others right in 14."""
    for r in rows:
        print("  ".join(f"{c:>14}" if i else f"{c:<{first}}" for i, c in enumerate(r)))


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
    """Build with `make()` → (step, keepalive), time it; an OOM (or another failure, with
    its traceback printed) is a result, not a crash."""
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
    except Exception as exc:  # a variant that fails is a row too: the others still run
        traceback.print_exc()
        row = {"name": name, "tokens": tokens, "failed": True, "peak_gb": peak_gb()}
        row["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    del held
    reset_peak()
    return row


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
    from workers.adapters import lora as lora_io

    tensors = lora_io.adapter_tensors(model)
    g = torch.Generator().manual_seed(3)
    return {
        k: (torch.randn(v.shape, generator=g) * 0.01).to(v.dtype) if "lora_B" in k else v
        for k, v in tensors.items()
    }


def time_adapter_sync(executor, backend, reps: int, loop=None) -> dict:
    """The driver's publication, timed: the trainer's adapter_update (with the handshake
    probe only if the engine checks it), then the engine's load and acknowledgement. `loop`:
    the event loop an engine is bound to (vLLM's), else each call runs on a fresh one."""
    arun = loop.run_until_complete if loop is not None else asyncio.run
    pub, load = [], []
    for v in range(2, 2 + reps + 1):
        executor.adapter.version = v
        sync()
        t0 = time.perf_counter()
        update = arun(executor.adapter_update(with_probe=backend.needs_probe))
        t1 = time.perf_counter()
        # as a run publishes: behind a pause (an engine that cannot label its tokens with
        # versions, vLLM 0.26, refuses a load while its gate is open)
        arun(backend.pause("wait"))
        acked = arun(backend.load_adapter(update))
        arun(backend.resume())
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


def jsonl_without_datasets() -> None:
    """The GPU machine has no `datasets` package: where it is missing, the data loader reads
    the benchmarks' own JSONL files (flat rows of prompt and answer) with `json` instead."""
    try:
        import datasets  # noqa: F401
    except ImportError:
        from workers.data import sources

        class Rows(list):
            column_names = ("prompt", "answer")

        def read_table(path: Path, fmt: str, split: str, field: str) -> Rows:
            lines = Path(path).read_text().splitlines()
            return Rows(json.loads(x) for x in lines if x.strip())

        sources.read_table = read_table


def long_prompt_task(root: Path, chars: int) -> dict:
    """A JSONL task whose prompts are `chars` characters (= tokens: the char tokenizer), so
    that a step's training time can be made to match its generation time."""
    jsonl_without_datasets()
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


# ------------------------------------------------------------------------------ running a part


def parser(doc: str, *optional: str) -> argparse.ArgumentParser:
    """The flags of every script (--out, --shape, --model-dir, --small), and those of
    `optional` that the script's part uses: "baseline" (--no-baseline), "profile", "warmup",
    "reps"."""
    unknown = set(optional) - {"baseline", "profile", "warmup", "reps"}
    assert not unknown, unknown
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "bench-gpu-out")))
    ap.add_argument("--shape", choices=list(SHAPES), default="qwen3-0.6b")
    ap.add_argument("--model-dir", type=Path, help="default: the shape's name in the temp dir")
    ap.add_argument("--small", action="store_true", help="tiny shapes: check the script on CPU")
    if "baseline" in optional:
        ap.add_argument("--no-baseline", dest="baseline", action="store_false")
    if "profile" in optional:
        ap.add_argument("--profile", action="store_true")
    if "warmup" in optional:
        ap.add_argument("--warmup", type=int, default=1)
    if "reps" in optional:
        ap.add_argument("--reps", type=int, default=3)
    return ap


def model_shape(args: argparse.Namespace) -> dict:
    """The shape of --shape (tiny with --small); fills in the default --model-dir, the
    shape's name in the temp dir (with --small, that name and "-small")."""
    shape = small_shape(SHAPES[args.shape]) if args.small else SHAPES[args.shape]
    if args.model_dir is None:
        name = args.shape + ("-small" if args.small else "")
        args.model_dir = Path(tempfile.gettempdir()) / name
    return shape


def run(
    part: Callable[[Path, argparse.Namespace, Path], dict],
    args: argparse.Namespace,
    name: str | None = None,
) -> None:
    """A script's main after parsing: build (or reuse) the model at --model-dir, run the
    part, print its traceback if it fails, write NAME.json under --out (NAME: the part's
    function name without `part_`, unless given)."""
    shape = model_shape(args)
    args.vocab = shape["vocab_size"]
    torch.manual_seed(0)
    model_dir = build_model(args.model_dir, shape)
    if torch.cuda.is_available():
        print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}")
    try:
        result = part(model_dir, args, args.out)
    except Exception:
        traceback.print_exc()
        raise
    write(args.out, name or part.__name__.removeprefix("part_"), result)
