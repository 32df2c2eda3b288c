"""Decode throughput of multi-turn episodes against single-turn rollouts at the same batch,
in one process (issue 36's acceptance: ≥ 85 % on one H200, 0.6B shape, a 50 ms tool).

    python3 bench/gpu/multiturn.py                      # torch engine (static decode on a GPU)
    python3 bench/gpu/multiturn.py --backend vllm
    python3 bench/gpu/multiturn.py --small --groups 4 --decode static   # check it on a CPU

The same rows (--groups prompts × --group samples, --prompt-len tokens) make --turns ×
--turn-tokens model tokens each, both through EpisodeRunner (workers/envs/episode.py): once
as one turn of that many tokens (the single-turn path: no environment), once as --turns
turns of --turn-tokens tokens, each turn answered after --tool-ms by a tool environment
with --answer-tokens tokens (loss mask 0). The model is random, so turns end at their
budget (an EOS may end a row early: the tokens counted are those made). On the torch
engine the multi-turn episodes run twice: with each turn's cache kept for the next (the
engine's default: a turn prefills the answer only) and prefilled whole each turn (the
engine before it kept them). The variants alternate, --reps times after a warm-up round;
each row is the median of the model's tokens a second (the environment's not counted),
and each ratio is a multi-turn variant's over single-turn.
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

    def __init__(self, source, rows):
        self.rows = rows  # the engine's batch (its live rows, counted each step)
        self.variant: str | None = None  # None while warming up
        self.calls: dict[str, list[int]] = {}  # variant → rows of each generate call
        self.prefill: dict[str, list[float]] = {}  # variant → [tokens, seconds]
        prefill = source.prefill

        def timed(prompts, positions, adapters, reuse=None):
            sync()
            t0 = time.perf_counter()
            logits = prefill(prompts, positions, adapters, reuse)
            sync()
            if self.variant is not None:  # the tokens computed (a kept cache's are not)
                made = self.prefill.setdefault(self.variant, [0, 0.0])
                made[0] += sum(map(len, prompts)) - sum(reuse or ())
                made[1] += time.perf_counter() - t0
            return logits

        source.prefill = timed
        step = source.step
        self.steps: dict[str, list[int]] = {}  # variant → [steps, live rows summed over them]

        def counted(tokens):
            if self.variant is not None:
                made = self.steps.setdefault(self.variant, [0, 0])
                made[0] += 1
                made[1] += sum(r is not None for r in self.rows.live)
            return step(tokens)

        source.step = counted

    def queue(self, queue) -> None:
        run = queue._run

        async def counted(batch):
            if self.variant is not None:
                self.calls.setdefault(self.variant, []).append(sum(r.n for r, _ in batch))
            await run(batch)

        queue._run = counted

    def report(self, rounds: int, times: dict[str, list[float]]) -> dict:
        rows = [("variant", "calls/round", "rows/call", "prefill tok/round", "prefill s/round",
                 "of the round", "steps/round", "live rows/step")]  # fmt: skip
        out = {}
        for name, calls in self.calls.items():
            tokens, seconds = self.prefill.get(name, [0, 0.0])
            share = seconds / sum(times[name])
            per_call = statistics.median(calls)
            steps, live = self.steps.get(name, [0, 0])
            cells = (len(calls) / rounds, per_call, tokens / rounds, seconds / rounds, share,
                     steps / rounds, live / max(1, steps))  # fmt: skip
            formats = (".1f", ".0f", ",.0f", ".3f", ".0%", ".0f", ".0f")
            rows.append((name, *(f"{v:{f}}" for v, f in zip(cells, formats, strict=True))))
            out[name] = {"calls": calls, "prefill_tokens": tokens, "prefill_s": seconds,
                         "steps": steps, "live_rows": live}  # fmt: skip
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
        base_spec(
            model_dir,
            **{
                "rollout.backend": args.backend,
                "rollout.max_new_tokens": budget,
                **({"rollout.decode": args.decode} if args.decode else {}),
            },
        )  # fmt: skip
    )
    backend = make_backend(spec, model_dir)
    loop = asyncio.new_event_loop()
    policy = LoraPolicy(spec, model_dir)
    update = loop.run_until_complete(
        LocalExecutor(policy).adapter_update(with_probe=backend.needs_probe)
    )
    loop.run_until_complete(backend.load_adapter(update))
    del policy
    trace = Trace(backend.engine.source, backend.engine.rows) if args.trace else None
    g = torch.Generator().manual_seed(0)
    examples = [
        Example(torch.randint(3, args.vocab, (args.prompt_len,), generator=g).tolist(), "")
        for _ in range(args.groups)
    ]
    renderer = FixedAnswers([5] * args.answer_tokens)
    tool = SlowTool(args.tool_ms / 1000)
    multi = f"{args.turns} turns, {args.tool_ms:g} ms tool"
    variants = {  # name → (environment, turns, tokens a turn, caches kept)
        "single-turn": (None, 1, budget, True),
        multi: (tool, args.turns, args.turn_tokens, True),
    }
    if args.backend == "torch":
        variants[f"{multi}, prefilled whole"] = (tool, args.turns, args.turn_tokens, False)

    def episodes(env, turns: int, tokens: int, keeps: bool, rep: int) -> int:
        if args.backend == "torch":
            backend.engine.rows.keeps = keeps and backend.engine.source.keeps
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
        for name, (env, turns, tokens, keeps) in variants.items():
            if trace is not None:
                trace.variant = name if rep else None
            sync()
            t0 = time.perf_counter()
            n = episodes(env, turns, tokens, keeps, rep)
            sync()
            if rep:  # the first round warms up (compiles, captures graphs)
                times[name].append(time.perf_counter() - t0)
                made[name].append(n)
    loop.run_until_complete(backend.close())
    rows = {
        k: statistics.median(n / t for n, t in zip(made[k], times[k], strict=True))
        for k in variants
    }
    single = rows["single-turn"]
    table(
        [("variant", "model tokens/s", "of single-turn"),
         *((k, f"{v:,.0f}", f"{v / single:.3f}") for k, v in rows.items())]
    )  # fmt: skip
    print(
        f"multi-turn / single-turn: {rows[multi] / single:.3f} at {args.groups * args.group} rows"
    )
    ratios = {k: v / single for k, v in rows.items() if k != "single-turn"}
    result = {"tok_s": rows, "ratio": rows[multi] / single, "ratios": ratios, "times": times,
              "tokens": made}  # fmt: skip
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
    ap.add_argument("--decode", choices=["static", "dynamic"], help="torch: rollout.decode")
    ap.add_argument("--trace", action="store_true", help="generate calls and prefills a round")
    args = ap.parse_args()
    if args.trace and args.backend != "torch":
        ap.error("--trace reads the torch engine's prefills: --backend torch")
    run(part_multiturn, args)
