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
    return {"tok_s": rows, "ratio": multi / single, "times": times, "tokens": made}


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
    run(part_multiturn, ap.parse_args())
