"""Headroom on one GPU: the engine's model (bf16 + unmerged LoRA) on a static KV cache.

    python3 bench/gpu/probe.py            # each decode step eager
    python3 bench/gpu/probe.py --graph    # each decode step replayed from one CUDA graph

Not the engine: a prefill of --batch × --prompt-len tokens, then --new-tokens greedy steps
on transformers' StaticCache (rollout.py's static_decode), forward + argmax only; tokens a
second. Run it last and alone: a failed capture can leave the CUDA context unusable.
--graph needs CUDA. Writes probe.json (probe-graph.json with --graph) under --out.
"""

from __future__ import annotations

from pathlib import Path

from common import base_spec, parser, run
from rollout import static_decode


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


def main() -> None:
    ap = parser(__doc__)
    ap.add_argument("--graph", action="store_true", help="capture a CUDA graph")
    ap.add_argument("--prompt-len", type=int, default=128)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--new-tokens", type=int, default=256)
    args = ap.parse_args()
    run(part_probe, args, "probe" + ("-graph" if args.graph else ""))


if __name__ == "__main__":
    main()
