"""The FSDP2 trainer outside Ray (`torch.distributed.run` → bench/gpu/standalone.py),
on the CPU with gloo: two data-parallel ranks train on the same batch as one process and end
with the same metrics and adapter, to fp32 rounding. The batch of 5 splits 3 + 2 and the
micro-batch is 2, so the second rank runs a weight-0 micro-batch to keep the ranks' gathers
in step; a rank that skipped it would hang the group (the test's timeout catches that)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench.gpu.standalone import compare

ROOT = Path(__file__).resolve().parents[3]
ARGS = ["--cpu", "--seqs", "5", "--group", "2", "--micro-batch", "2", "--seq-len", "20",
        "--prompt-len", "8", "--rank", "4", "--lr", "1e-2", "--steps", "2",
        "--warmup", "0"]  # fmt: skip


def run(nproc: int, tiny_dir: Path, out: Path, *flags: str) -> dict:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
           f"--nproc-per-node={nproc}", "-m", "bench.gpu.standalone",
           "--model-dir", str(tiny_dir), "--out", str(out), *ARGS, *flags]  # fmt: skip
    # from the repository root: `-m bench.gpu.standalone` is found there
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=180, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads((out / "result.json").read_text())


LAYOUTS = {"lora-replicated": False, "lora-sharded": True}


# Three launches in all, not eight: the one-process reference takes no layout flag, so one run
# of it serves both layouts, and each run trains and then does the staleness check (which
# restores the trained adapter before the run writes it: the comparisons below see it too).
@pytest.fixture(scope="module")
def one(tiny_dir, tmp_path_factory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("one")
    return out, run(1, tiny_dir, out, "--stale-check", "5")


@pytest.fixture(scope="module", params=list(LAYOUTS.values()), ids=list(LAYOUTS))
def two(request, tiny_dir, tmp_path_factory) -> tuple[Path, dict, bool]:
    shard_lora = request.param
    out = tmp_path_factory.mktemp("two")
    flags = ["--stale-check", "5", *(["--shard-lora"] if shard_lora else [])]
    return out, run(2, tiny_dir, out, *flags), shard_lora


def test_two_gloo_ranks_match_one_process(one, two):
    (one_dir, one), (two_dir, two, shard_lora) = one, two
    assert (one["world"], one["policy"]) == (1, "LoraPolicy")
    assert (two["world"], two["policy"], two["shard_lora"]) == (2, "ShardedLoraPolicy", shard_lora)
    assert len(two["metrics"]) == 2

    diff = compare(one_dir, two_dir)
    assert diff["lora_B_norm"] > 0  # it trained
    # the gradient itself agrees to fp32 rounding (grad_norm: a missing loss scale would
    # halve it, a rank that trained on the wrong share would move the loss) ...
    for key in ("loss/policy", "grad_norm", "entropy", "clip_frac"):
        assert diff["metric_rel_diff"][key] < 1e-5, (key, diff)
    # ... and the adapter to what Adam makes of that rounding (its first steps are about
    # sign(gradient), so entries whose gradient is near zero carry the rounding further)
    assert diff["lora_B_rel_err_max"] < 2e-3, diff
    assert diff["adapter_rel_err"] < 1e-4, diff


def test_the_staleness_check_splits_over_ranks_and_adds_up(one, two):
    """The stale-token check (LoraPolicy.stale_sums) on two ranks: 5 stale samples split
    3 + 2 (micro-batch 2, so the second rank runs a repeat to keep its gathers in step),
    each under the version-0 adapter swapped in (into DTensor shards when LoRA is sharded);
    the summed result is one process's."""
    one, two = one[1]["stale_check"], two[1]["stale_check"]
    assert one["tokens"] == two["tokens"] == 5 * (20 - 8)  # every response token, once
    for key, value in one["sums"].items():
        assert value > 0 and two["sums"][key] == pytest.approx(value, rel=1e-5), key
