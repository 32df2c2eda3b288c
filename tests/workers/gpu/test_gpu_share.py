"""One GPU shared by trainer and engine (workers/gpu_share.py), on the GPU: a green
context's stream runs on its share of the SMs only and computes what the whole GPU does, an
async run on the split GPU keeps the engine's logprobs those of a trainer forward, and with
both sides compiled it compiles nothing once they overlap and frees its green contexts.

    python3 -m pytest -c /dev/null --noconftest -p no:cacheprovider -q tests/workers/gpu
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import torch

from workers.gpu_share import GreenContexts, open_share, plan_share
from workers.loop import setup
from workers.train import train

from .small_qwen3 import build_small_qwen3

pytestmark = pytest.mark.gpu


def matmul_ms(stream: torch.cuda.Stream, a: torch.Tensor, b: torch.Tensor, reps: int = 10):
    with torch.cuda.stream(stream):
        a @ b  # warm-up: cuBLAS picks its kernel
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(reps):
            out = a @ b
        end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / reps, out


def test_split_confines_the_engine_to_its_sms_and_computes_the_same():
    dev = torch.device("cuda", 0)
    sms = torch.cuda.get_device_properties(dev).multi_processor_count
    open_before = GreenContexts.alive
    share = open_share(plan_share("split", 0.25, sms), dev)
    assert share.green is not None and GreenContexts.alive == open_before + 2
    assert share.plan.engine_sms + share.plan.trainer_sms <= sms
    assert share.plan.engine_sms <= sms // 4 + 8
    a = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
    whole, ref = matmul_ms(torch.cuda.current_stream(dev), a, b)
    engine, out = matmul_ms(share.engine, a, b)
    trainer, out_t = matmul_ms(share.trainer, a, b)
    # a quarter of the SMs: a compute-bound product takes well over 1.5x as long
    assert engine > 1.5 * whole, (engine, whole)
    assert trainer < engine, (trainer, engine)
    for got in (out, out_t):
        assert float((got.float() - ref.float()).norm() / ref.float().norm()) < 1e-3
    share.close()
    share.close()  # a second close does nothing
    assert GreenContexts.alive == open_before


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    return build_small_qwen3(
        tmp_path_factory.mktemp("qwen3-share"), vocab_size=4096, hidden_size=256,
        num_hidden_layers=2, num_attention_heads=4, intermediate_size=512,
    )  # fmt: skip


def run_rows(model_dir: Path, out: Path, **over) -> list[dict]:
    spec = {
        "model": {"path": str(model_dir)},
        "lora": {"r": 16, "alpha": 32},
        "algorithm": {"num_generations": 4},
        "rollout": {"backend": "torch", "max_new_tokens": 24, "temperature": 1.0},
        "data": {"task": "arithmetic", "eval_size": 4},
        "train": {"steps": 3, "prompts_per_step": 4, "eval_every": 0, "lr": 1e-3},
        "resources": {"trainer_gpus": 1, "rollout_gpus": 1, **over.pop("resources", {})},
        **over,
    }
    train(spec, out, progress=False)
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    return [r for r in rows if "loss/total" in r]


def test_async_on_a_split_gpu_keeps_the_engine_honest(model_dir, tmp_path):
    split = {"gpu_share": "split", "engine_sm_share": 0.36}
    rows = run_rows(model_dir, tmp_path / "a1", resources=split, **{"async": {"enabled": True}})
    assert [r["adapter_version"] for r in rows] == [1.0, 2.0, 3.0]
    assert all(r["staleness/max"] <= 1 for r in rows)
    # the engine decodes on its green context: its logprobs are still the trainer's
    errors = [r["token_mult_prob_error"] for r in rows if "token_mult_prob_error" in r]
    assert errors and max(errors) <= 1.05, errors


def compiles() -> int:
    """Graphs compiled so far in this process: dynamo's (forwards) and inductor's (each
    forward and backward graph it compiles, cached or not)."""
    from torch._dynamo.utils import counters

    inductor = counters["inductor"]
    cache = ("fxgraph_cache_hit", "fxgraph_cache_miss", "fxgraph_cache_bypass")
    return counters["stats"]["unique_graphs"] + sum(inductor[k] for k in cache)


def test_async_compiled_on_a_split_gpu_compiles_before_the_sides_overlap(
    model_dir, tmp_path, monkeypatch
):
    seen = {}
    real = setup.warm_before_overlap

    def spy(*args):  # the real warm-up; what was compiled and open once it is done
        warmed = real(*args)
        seen.update(warmed=warmed, compiles=compiles(), open=GreenContexts.alive)
        return warmed

    monkeypatch.setattr(setup, "warm_before_overlap", spy)
    open_before = GreenContexts.alive
    split = {"gpu_share": "split", "engine_sm_share": 0.36}
    over = {"async": {"enabled": True}, "resources": split}
    t0 = time.perf_counter()
    rows = run_rows(
        model_dir, tmp_path / "c", train={"steps": 4, "prompts_per_step": 4, "eval_every": 0,
        "lr": 1e-3, "compile": True}, rollout={"backend": "torch", "max_new_tokens": 24,
        "temperature": 1.0, "decode": "static", "compile": True}, **over,
    )  # fmt: skip
    wall = time.perf_counter() - t0
    errors = [r["token_mult_prob_error"] for r in rows if "token_mult_prob_error" in r]
    steps = [r.get("time/step_s") for r in rows]
    print(
        f"compiled async on a split GPU: steps {steps}, wall {wall:.1f} s, errors {errors}, "
        f"{seen.get('compiles')} graphs at the warm-up's end, {compiles()} at the run's"
    )
    print(torch._dynamo.utils.compile_times())  # which functions compiled, how often
    assert [r["adapter_version"] for r in rows] == [1.0, 2.0, 3.0, 4.0]
    assert seen["warmed"] and seen["open"] == open_before + 2  # the split was made
    assert open_before == GreenContexts.alive  # released at the run's end
    assert errors and max(errors) <= 1.05, errors
    # nothing compiled while trainer and engine ran in their two threads
    assert compiles() == seen["compiles"]
