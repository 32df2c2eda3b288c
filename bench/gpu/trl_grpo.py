"""Paddock against TRL's GRPOTrainer on the same card, in one process (issue 34: an end-to-end
GRPO step ≥ 3× TRL's):

    python3 bench/gpu/trl_grpo.py                       # 0.6B shape, 32 prompts × 8, 256 tokens
    python3 bench/gpu/trl_grpo.py --small --prompts 4 --new-tokens 16 --steps 3   # CPU check

The same model (built at --model-dir), the same work a step on both sides: --prompts
prompts × --group samples of up to --new-tokens tokens, generated, scored by an
arithmetic check (Paddock's `arithmetic` task and its reward; TRL's `correct` below, as
cheap), and one optimizer step of LoRA r=16 (alpha 32, every linear layer) on
them, with the same loss settings (no KL term, clip 0.2 / 0.28, the token mean: TRL's
`loss_type="dapo"`). Paddock runs its sync driver (`train()`: the torch engine, the
trainer); TRL runs `GRPOTrainer` with PEFT and its own generation (`generate` on the
training model; `use_vllm` off), --micro-batch completions a forward. Each side's row is
the median over steps from the second on (the first pays compiles and warm-ups): seconds a
step and the response tokens it made a second. Their ratio ends the output. Needs `trl`
and `datasets` importable (on the GPU machine: carried as wheels). Writes trl_grpo.json.
"""

from __future__ import annotations

import json
import statistics
import tempfile
import time
from pathlib import Path

import torch
from common import LORA_TARGETS, base_spec, jsonl_without_datasets, parser, run, table

PROMPT = "{a}+{b}="


def prompts(n: int) -> list[tuple[str, int]]:
    """n sums as the arithmetic task writes them, each with its answer."""
    g = torch.Generator().manual_seed(0)
    pairs = torch.randint(10, 100, (n, 2), generator=g).tolist()
    return [(PROMPT.format(a=a, b=b), a + b) for a, b in pairs]


def correct(completion: str, answer: int) -> float:
    """TRL's reward: the completion's leading digits against the sum."""
    digits = ""
    for ch in completion.strip():
        if not ch.isdigit():
            break
        digits += ch
    return float(digits == str(answer))


def part_paddock(model_dir: Path, args) -> dict:
    from workers.train import train

    jsonl_without_datasets()
    spec = base_spec(
        model_dir,
        **{
            "rollout.max_new_tokens": args.new_tokens,
            "train.steps": args.steps,
            "train.prompts_per_step": args.prompts,
            "train.micro_batch_size": args.micro_batch,
            "algorithm.num_generations": args.group,
            "async.enabled": False,
        },
    )
    with tempfile.TemporaryDirectory() as tmp:
        train(spec, Path(tmp) / "run", progress=False)
        rows = [json.loads(x) for x in (Path(tmp) / "run/metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if "time/step_s" in r]
    timed = steps[1:] or steps
    step_s = statistics.median(r["time/step_s"] for r in timed)
    tokens = statistics.median(r["throughput/tokens_per_s"] * r["time/step_s"] for r in timed)
    return {"step_s": step_s, "tokens": tokens, "steps": [r["time/step_s"] for r in steps]}


def part_trl(model_dir: Path, args) -> dict:
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    rows = prompts(args.prompts * args.steps)
    data = Dataset.from_list([{"prompt": p, "answer": a} for p, a in rows])

    def reward(completions, answer, **_):
        return [correct(c, a) for c, a in zip(completions, answer, strict=True)]

    class Clock(TrainerCallback):
        def __init__(self):
            self.ends: list[float] = []

        def on_step_begin(self, *_, **__):
            if not self.ends:
                self.ends.append(time.perf_counter())

        def on_step_end(self, *_, **__):
            self.ends.append(time.perf_counter())

    gpu = torch.cuda.is_available()
    completions = args.prompts * args.group
    config = GRPOConfig(
        output_dir=tempfile.mkdtemp(),
        per_device_train_batch_size=args.micro_batch,
        gradient_accumulation_steps=completions // args.micro_batch,
        num_generations=args.group,
        max_completion_length=args.new_tokens,
        max_steps=args.steps,
        learning_rate=1e-5,
        beta=0.0,
        epsilon=0.2,
        epsilon_high=0.28,
        loss_type="dapo",
        temperature=1.0,
        bf16=gpu,
        use_cpu=not gpu,
        logging_steps=1,
        report_to=[],
        save_strategy="no",
        shuffle_dataset=False,
        seed=0,
    )
    dtype = torch.bfloat16 if gpu else torch.float32
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype)
    tok = AutoTokenizer.from_pretrained(model_dir)
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    lora = LoraConfig(r=16, lora_alpha=32, target_modules=LORA_TARGETS, task_type="CAUSAL_LM")
    clock = Clock()
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=reward,
        args=config,
        train_dataset=data,
        processing_class=tok,
        peft_config=lora,
        callbacks=[clock],
    )
    trainer.train()
    steps = [b - a for a, b in zip(clock.ends, clock.ends[1:], strict=False)]
    logs = [x for x in trainer.state.log_history if "completions/mean_length" in x]
    timed = steps[1:] or steps
    tokens = statistics.median(x["completions/mean_length"] * completions for x in logs[1:] or logs)
    return {"step_s": statistics.median(timed), "tokens": tokens, "steps": steps}


def part_trl_grpo(model_dir: Path, args, out: Path) -> dict:
    res = {"paddock": part_paddock(model_dir, args)}
    torch.cuda.empty_cache() if torch.cuda.is_available() else None
    res["trl"] = part_trl(model_dir, args)
    rows = [("side", "s a step", "tokens a step", "tokens/s")]
    for side, r in res.items():
        rows.append((side, f"{r['step_s']:.3f}", f"{r['tokens']:,.0f}",
                     f"{r['tokens'] / r['step_s']:,.0f}"))  # fmt: skip
    table(rows)
    p, t = res["paddock"], res["trl"]
    res["speedup_step"] = t["step_s"] / p["step_s"]
    res["speedup_tokens_per_s"] = (p["tokens"] / p["step_s"]) / (t["tokens"] / t["step_s"])
    print(f"paddock / trl: {res['speedup_step']:.2f}x a step, "
          f"{res['speedup_tokens_per_s']:.2f}x tokens/s")  # fmt: skip
    return res


if __name__ == "__main__":
    ap = parser(__doc__)
    ap.add_argument("--prompts", type=int, default=32)
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--new-tokens", type=int, default=256)
    ap.add_argument("--micro-batch", type=int, default=32, help="completions a forward")
    ap.add_argument("--steps", type=int, default=4)
    run(part_trl_grpo, ap.parse_args())
