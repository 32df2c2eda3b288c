"""Parts of the train step timed alone at the 16×1024 Qwen3-0.6B shape, forward and backward:

    python3 bench/gpu/train_parts.py            # attention backends; the head's chunk size

- attention: SDPA causal over q [16, 16, 1024, 128] and k, v [16, 8, 1024, 128] in bf16 (one
  layer), by each backend (cuDNN, flash, memory-efficient), with GQA inside SDPA
  (`enable_gqa`, what transformers passes without a mask) and with k, v repeated first;
- head (forward and backward together, in the fwd column): the fused logprob head
  (workers/policy/fused_logprobs.py, compiled chunk maths, its gradient in the forward) over
  the 14,336 response tokens, by chunk size.

Each is the median of CUDA-event timings after warm-up; ms a call, and for attention the
TFLOP/s of its causal FLOPs (forward 2 matmuls, backward 5, over half the score matrix).
"""

from __future__ import annotations

import statistics

import torch
from common import parser, table


def _time(fn, reps: int = 20, warmup: int = 3) -> float:
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return statistics.median(times)


def attention_rows(batch=16, heads=16, kv_heads=8, seq=1024, dim=128) -> list[tuple]:
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.functional import scaled_dot_product_attention as sdpa

    g = torch.Generator(device="cuda").manual_seed(0)

    def rand(h):
        t = torch.randn(batch, h, seq, dim, device="cuda", generator=g, dtype=torch.bfloat16)
        return t.requires_grad_()

    q, k, v = rand(heads), rand(kv_heads), rand(kv_heads)
    dout = torch.randn(batch, heads, seq, dim, device="cuda", dtype=torch.bfloat16)
    causal = 2 * 2 * batch * heads * seq * seq * dim / 2  # forward FLOPs, causal half
    rows = []
    backends = [("cudnn", SDPBackend.CUDNN_ATTENTION), ("flash", SDPBackend.FLASH_ATTENTION)]
    backends.append(("efficient", SDPBackend.EFFICIENT_ATTENTION))
    for name, backend in backends:
        for gqa in (True, False):

            def fwd(gqa=gqa):
                if gqa:
                    return sdpa(q, k, v, is_causal=True, enable_gqa=True)
                n = heads // kv_heads
                kk, vv = k.repeat_interleave(n, 1), v.repeat_interleave(n, 1)
                return sdpa(q, kk, vv, is_causal=True)

            def both(fwd=fwd):
                out = fwd()
                torch.autograd.grad(out, (q, k, v), dout)

            label = f"attention {name}, " + ("enable_gqa" if gqa else "k, v repeated")
            try:
                with sdpa_kernel([backend]):
                    f_ms = _time(lambda fwd=fwd: fwd())
                    fb_ms = _time(both)
            except RuntimeError as exc:
                rows.append((label, "n/a", str(exc).splitlines()[0][:40], "", ""))
                continue
            b_ms = fb_ms - f_ms
            rows.append((label, f"{f_ms:.3f}", f"{b_ms:.3f}", f"{causal / f_ms / 1e9:.0f}",
                         f"{2.5 * causal / b_ms / 1e9:.0f}"))  # fmt: skip
    return rows


def head_rows(n=14336, hidden=1024, vocab=151936) -> list[tuple]:
    from workers.policy.fused_logprobs import fused_token_logprobs

    g = torch.Generator(device="cuda").manual_seed(0)
    h = torch.randn(n, hidden, device="cuda", generator=g, dtype=torch.bfloat16)
    h.requires_grad_()
    w = (torch.randn(vocab, hidden, device="cuda", generator=g) * 0.02).to(torch.bfloat16)
    t = torch.randint(0, vocab, (n,), device="cuda", generator=g)
    flops = 2 * 2 * n * hidden * vocab  # the logits and (onehot − p)·W
    rows = []
    for chunk in (512, 1024, 2048, 4096):

        def both(chunk=chunk):
            lp, _ = fused_token_logprobs(h, t, w, 1.0, chunk, mode="compiled")
            lp.sum().backward()

        ms = _time(both, reps=10)
        rows.append((f"head, chunk {chunk}", f"{ms:.2f}", "", f"{flops / ms / 1e9:.0f}", ""))
    return rows


def main() -> None:
    ap = parser(__doc__)
    ap.add_argument("--parts", default="attention,head")
    args = ap.parse_args()
    parts = args.parts.split(",")
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}")
    table([("part", "fwd ms", "bwd ms", "fwd TFLOP/s", "bwd TFLOP/s")])
    if "attention" in parts:
        table(attention_rows())
    if "head" in parts:
        table(head_rows())


if __name__ == "__main__":
    main()
