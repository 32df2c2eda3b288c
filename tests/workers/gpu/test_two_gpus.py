"""The FSDP2 trainer on two GPUs (NCCL, bf16) against one GPU (issue 11): the same batch
trained by two data-parallel ranks and by one process ends with the same losses and adapter
within bf16 tolerance. Needs two GPUs:
    python3 -m pytest -c /dev/null --noconftest -p no:cacheprovider -q tests/workers/gpu
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from bench.gpu.standalone import compare

from .small_qwen3 import build_small_qwen3

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs"),
]
ROOT = Path(__file__).resolve().parents[3]
ARGS = ["--seqs", "16", "--group", "8", "--micro-batch", "8", "--seq-len", "256",
        "--prompt-len", "64", "--steps", "3", "--warmup", "0"]  # fmt: skip


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    """4 layers, hidden 512, 8 heads (4 KV heads)."""
    return build_small_qwen3(
        tmp_path_factory.mktemp("qwen3-small"), vocab_size=4096, hidden_size=512,
        num_hidden_layers=4, num_attention_heads=8, intermediate_size=1536,
    )  # fmt: skip


def run(nproc: int, model_dir: Path, out: Path) -> dict:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
           f"--nproc-per-node={nproc}", "-m", "bench.gpu.standalone",
           "--model-dir", str(model_dir), "--out", str(out), *ARGS]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads((out / "result.json").read_text())


def test_two_nccl_ranks_match_one_gpu_in_bf16(model_dir, tmp_path):
    run(1, model_dir, tmp_path / "one")
    two = run(2, model_dir, tmp_path / "two")
    assert two["policy"] == "ShardedLoraPolicy" and two["world"] == 2
    diff = compare(tmp_path / "one", tmp_path / "two")
    print(json.dumps(diff, indent=1))
    assert diff["lora_B_norm"] > 0
    # bf16 matmuls pick other kernels at other batch shapes; Adam's first steps are close to
    # sign(gradient), so a few near-zero gradient entries may flip: a few % on B, not more
    assert diff["adapter_rel_err"] < 2e-2, diff
    assert diff["lora_B_rel_err_max"] < 0.1, diff
    for key in ("loss/policy", "entropy"):
        assert diff["metric_rel_diff"][key] < 1e-2, (key, diff)
