"""Decode throughput of multi-turn episodes against single-turn rollouts at the same batch,
in one process (issue 36's acceptance: ≥ 85 % on one H200, 0.6B shape, a 50 ms tool).

    python3 bench/gpu/multiturn.py                      # torch engine (static decode on a GPU)
    python3 bench/gpu/multiturn.py --backend vllm
    python3 bench/gpu/multiturn.py --small --groups 4   # check the script on a CPU

The same rows (--groups prompts × --group samples, --prompt-len tokens) make --turns ×
--turn-tokens model tokens each, both through EpisodeRunner (workers/envs/episode.py): once
as one turn of that many tokens (the single-turn path: no environment), once as --turns
turns of --turn-tokens tokens, each turn answered after --tool-ms by a tool environment
with --answer-tokens tokens (loss mask 0). The model is random, so turns end at their
budget (an EOS may end a row early: the tokens counted are those made). The two variants
alternate, --reps times after a warm-up round; each row is the median of the model's
tokens a second (the environment's not counted), and the ratio is multi over single.
--trace (torch engine) also prints, for each variant's timed rounds, the `generate` calls a
round made and their rows, and the engine's prefills: tokens and seconds a round (each
prefill timed between two device synchronisations, which slows the round a little).
Writes multiturn.json under --out.
"""

from __future__ import annotations

import asyncio
import statistics
import time

import torch
from common import base_spec, parser, run, sync, table

from workers.data.examples import Example
from workers.envs import EpisodeLimits, EpisodeRunner, GroupProgress, Observation
from workers.loop.executor import LocalExecutor
from workers.policy import LoraPolicy
from workers.rollout import SamplingParams, make_backend
from workers.spec import parse_spec


class Trace:
    """Where a round's time goes (--trace): the turn queue's `generate` calls and the step
    source's prefills, counted per variant from the first timed round on."""

    def __init__(self, source):
        self.variant: str | None = None  # None while warming up
        self.calls: dict[str, list[int]] = {}  # variant → rows of each generate call
        self.prefill: dict[str, list[float]] = {}  # variant → [tokens, seconds]
        prefill = source.prefill

        def timed(prompts, *a, **kw):
            sync()
            t0 = time.perf_counter()
            logits = prefill(prompts, *a, **kw)
            sync()
            if self.variant is not None:
                made = self.prefill.setdefault(self.variant, [0, 0.0])
                made[0] += sum(map(len, prompts))
                made[1] += time.perf_counter() - t0
            return logits

        source.prefill = timed

    def queue(self, queue) -> None:
        run = queue._run

        async def counted(batch):
            if self.variant is not None:
                self.calls.setdefault(self.variant, []).append(sum(r.n for r, _ in batch))
            await run(batch)

        queue._run = counted

    def report(self, rounds: int, times: dict[str, list[float]]) -> dict:
        rows = [("variant", "calls/round", "rows/call", "prefill tok/round", "prefill s/round",
                 "of the round")]  # fmt: skip
        out = {}
        for name, calls in self.calls.items():
            tokens, seconds = self.prefill.get(name, [0, 0.0])
            share = seconds / sum(times[name])
            per_call = statistics.median(calls)
            cells = (len(calls) / rounds, per_call, tokens / rounds, seconds / rounds, share)
            formats = (".1f", ".0f", ",.0f", ".3f", ".0%")
            rows.append((name, *(f"{v:{f}}" for v, f in zip(cells, formats, strict=True))))
            out[name] = {"calls": calls, "prefill_tokens": tokens, "prefill_s": seconds}
        table(rows)
        return out


class FixedAnswers:
    """The renderer of a model without a chat template: a prompt's ids as they are, and each
    environment answer as a fixed run of token ids."""

    def __init__(self, answer: list[int]):
        self.answer = answer

    def prompt_ids(self, prompt) -> list[int]:
        return list(prompt)

    def answer_ids(self, messages, ended_on_eos: bool) -> list[int]:
        return list(self.answer)

    def ended_on_eos(self, token_ids) -> bool:
        return False


class SlowToolSession:
    def __init__(self, prompt, latency_s: float):
        self.prompt, self.latency_s = prompt, latency_s

    async def step(self, turn) -> Observation:
        await asyncio.sleep(self.latency_s)  # the tool's round trip
        return Observation([{"role": "tool", "name": "t", "content": "x"}])

    async def close(self) -> None:
        pass


class SlowTool:
    """An environment whose every answer takes `latency_s`; never done (max_turns ends)."""

    name, tools = "slow-tool", ()

    def __init__(self, latency_s: float):
        self.latency_s = latency_s

    async def start(self, example, seed) -> SlowToolSession:
        return SlowToolSession(example.prompt, self.latency_s)

    def examples(self, eval_size):
        return None

    async def close(self) -> None:
        pass


def part_multiturn(model_dir, args, out) -> dict:
    budget = args.turns * args.turn_tokens
    spec = parse_spec(
        base_spec(model_dir, **{"rollout.backend": args.backend, "rollout.max_new_tokens": budget})
    )
    backend = make_backend(spec, model_dir)
    loop = asyncio.new_event_loop()
    policy = LoraPolicy(spec, model_dir)
    update = loop.run_until_complete(
        LocalExecutor(policy).adapter_update(with_probe=backend.needs_probe)
    )
    loop.run_until_complete(backend.load_adapter(update))
    del policy
    trace = Trace(backend.engine.source) if args.trace else None
    g = torch.Generator().manual_seed(0)
    examples = [
        Example(torch.randint(3, args.vocab, (args.prompt_len,), generator=g).tolist(), "")
        for _ in range(args.groups)
    ]
    renderer = FixedAnswers([5] * args.answer_tokens)
    variants = {  # name → (environment, turns, tokens a turn)
        "single-turn": (None, 1, budget),
        f"{args.turns} turns, {args.tool_ms:g} ms tool": (
            SlowTool(args.tool_ms / 1000), args.turns, args.turn_tokens,
        ),
    }  # fmt: skip

    def episodes(env, turns: int, tokens: int, rep: int) -> int:
        runner = EpisodeRunner(backend, renderer, env, EpisodeLimits(turns, None, 600.0))
        if trace is not None:
            trace.queue(runner.queue)
        params = SamplingParams(1.0, tokens)

        async def go():
            return await asyncio.gather(
                *(
                    runner.run_group(GroupProgress(f"r{rep}-g{i}", args.group, i, params), ex)
                    for i, ex in enumerate(examples)
                )
            )

        groups = loop.run_until_complete(go())
        return sum(s.model_tokens for grp in groups for s in grp.result.samples)

    times: dict[str, list[float]] = {k: [] for k in variants}
    made: dict[str, list[int]] = {k: [] for k in variants}
    for rep in range(args.reps + 1):
        for name, (env, turns, tokens) in variants.items():
            if trace is not None:
                trace.variant = name if rep else None
            sync()
            t0 = time.perf_counter()
            n = episodes(env, turns, tokens, rep)
            sync()
            if rep:  # the first round warms up (compiles, captures graphs)
                times[name].append(time.perf_counter() - t0)
                made[name].append(n)
    loop.run_until_complete(backend.close())
    rows = {
        k: statistics.median(n / t for n, t in zip(made[k], times[k], strict=True))
        for k in variants
    }
    single, multi = rows.values()
    table([("variant", "model tokens/s"), *((k, f"{v:,.0f}") for k, v in rows.items())])
    print(f"multi-turn / single-turn: {multi / single:.3f} at {args.groups * args.group} rows")
    result = {"tok_s": rows, "ratio": multi / single, "times": times, "tokens": made}
    if trace is not None:
        result["trace"] = trace.report(args.reps, times)
    return result


if __name__ == "__main__":
    ap = parser(__doc__, "reps")
    ap.add_argument("--backend", choices=["torch", "vllm"], default="torch")
    ap.add_argument("--groups", type=int, default=32)
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--prompt-len", type=int, default=128)
    ap.add_argument("--turns", type=int, default=4)
    ap.add_argument("--turn-tokens", type=int, default=64)
    ap.add_argument("--answer-tokens", type=int, default=32)
    ap.add_argument("--tool-ms", type=float, default=50.0)
    ap.add_argument("--trace", action="store_true", help="generate calls and prefills a round")
    args = ap.parse_args()
    if args.trace and args.backend != "torch":
        ap.error("--trace reads the torch engine's prefills: --backend torch")
    run(part_multiturn, args)
