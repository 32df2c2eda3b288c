"""The pre-flight check: a few steps of a run's own spec, on its own engine, that verify what
long runs silently get wrong, before the run starts (docs/preflight.md).

Three short runs of the spec, each through the one training loop (`workers.train.train`, or
`loop.setup.run_training` with an engine of the caller's), and a look at its data:

- **sync**: the spec as it is, sync, `STEPS` steps: the engine's logprobs against the
  trainer's (token_mult_prob_error, gen_kl_error), whether any group's rewards differ,
  whether responses end before `max_new_tokens`;
- **async**: the same, async at `max_staleness: 0` (the spec's `weight_update`), which the
  driver reproduces exactly: every sample must equal the sync run's;
- **update**: two sync steps, the first at `DELIBERATE_LR`, a deliberate update that moves
  the adapter far: the engine's logprobs must then match the trainer's for the version it
  acknowledged (an engine still serving the previous adapter cannot);
- and the training prompts, tokenized as the run will: none may be longer than
  `data.max_prompt_tokens` (Paddock never cuts a prompt: an overlong one is left out, or
  refused).

The verdict is a `PreflightEvent` (workers/events.py): every check with its figure, passed
when none failed. The thresholds are the alarms' (workers/alarms.py: LIMITS), defined once.
`judge` turns the figures into the verdict; it is pure."""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .adapters.lora import load_tokenizer
from .alarms import LIMITS, Limits
from .data import load_task
from .events import PreflightCheck, PreflightEvent, SamplesEvent
from .grants import Grants
from .loop.setup import model_dir_for, run_training
from .rollout.base import RolloutBackend
from .spec import RunSpec, parse_spec
from .train import train

STEPS = 3  # steps of the sync and async runs
UPDATE_STEPS = 2  # the deliberate update's run: the update, then the step that checks it
# Adam's first step moves every adapter parameter by about the learning rate: at 0.05 the
# update changes the model's token probabilities by far more than any engine's rounding
DELIBERATE_LR = 0.05
SAMPLES = 64  # per step compared between sync and async (a samples event's most)

BackendFactory = Callable[[RunSpec, Path], RolloutBackend]


@dataclass
class Phase:
    """What one short run reported: metrics and samples by step, or why it failed."""

    metrics: dict[int, dict[str, float]] = field(default_factory=dict)
    samples: dict[int, list[dict[str, Any]]] = field(default_factory=dict)
    error: str | None = None

    def series(self, key: str) -> list[float]:
        return [m[key] for _, m in sorted(self.metrics.items()) if key in m and _ > 0]

    def on_event(self, event: Any) -> None:
        if isinstance(event, SamplesEvent):
            self.samples[event.step] = [
                {k: item.get(k) for k in ("prompt", "completion", "reward")} for item in event.items
            ]

    def on_metrics(self, step: int, values: dict[str, float]) -> None:
        self.metrics.setdefault(step, {}).update(values)


@dataclass
class Prompts:
    """The training prompts against data.max_prompt_tokens."""

    total: int = 0
    over: int = 0
    limit: int | None = None
    error: str | None = None


@dataclass
class Figures:
    """Everything the verdict is judged from."""

    spec: RunSpec
    prompts: Prompts
    sync: Phase
    async_: Phase
    update: Phase
    steps: int = STEPS


# ---------------------------------------------------------------------------- the phases


def phase_spec(
    spec: RunSpec, *, steps: int, asynchronous: bool, lr: float | None = None
) -> RunSpec:
    """The run's spec cut to a short run that reports what the checks read: no mirrors
    (a pre-flight writes nothing to W&B), a checkpoint only at the end, one held-out
    prompt, up to SAMPLES samples of each step."""
    d = spec.to_dict()
    d["train"].update(steps=steps, eval_every=0, log_samples=SAMPLES)
    if lr is not None:
        d["train"]["lr"] = lr
    d["data"]["eval_size"] = 1
    d["checkpoint"].update(every=0, keep_last=1, resume_from=None)
    d["logging"] = {}
    d["async"]["enabled"] = asynchronous
    if asynchronous:
        d["async"]["max_staleness"] = 0
    return parse_spec(d)


def _run(
    spec: RunSpec,
    out: Path,
    phase: Phase,
    make_backend: BackendFactory | None,
    grants: Grants | None,
) -> Phase:
    """One short run through the training loop; its failure is recorded, not raised: the
    verdict says what failed."""
    try:
        if make_backend is None:
            train(
                spec,
                out_dir=out,
                on_metrics=phase.on_metrics,
                on_event=phase.on_event,
                progress=False,
                grants=grants,
            )
        else:
            guard = grants.paths if grants is not None else None
            backend = make_backend(spec, model_dir_for(spec, guard))
            asyncio.run(
                run_training(
                    spec,
                    out,
                    on_metrics=phase.on_metrics,
                    on_event=phase.on_event,
                    progress=False,
                    backend=backend,
                    grants=grants,
                )
            )
    except Exception as exc:  # the verdict reports it: a pre-flight's purpose is to say why
        phase.error = f"{type(exc).__name__}: {exc}"
    return phase


def count_prompts(
    spec: RunSpec, grants: Grants | None = None, log: Callable[[str], None] | None = None
) -> Prompts:
    """The training prompts tokenized as the run will, against data.max_prompt_tokens (its
    files read within the run's roots, under the platform; the tiny model's build, if it
    is the first use, logged to `log`)."""
    guard = grants.paths if grants is not None else None
    prompts = Prompts(limit=spec.data.max_prompt_tokens)
    if spec.data.task == "environment":
        return prompts  # the environment makes its prompts: nothing to count here
    try:
        model_dir = model_dir_for(spec, guard, log)  # a tiny model is built here if need be
        task = load_task(spec.data, load_tokenizer(model_dir), guard=guard)
    except ValueError as exc:  # overlong_prompts: error refuses the data at its first one
        prompts.error = str(exc)
        return prompts
    prompts.over = task.dropped.get("train", 0)
    prompts.total = len(task.train) + prompts.over
    return prompts


def preflight(
    spec: RunSpec | dict,
    out: str | Path,
    *,
    make_backend: BackendFactory | None = None,
    steps: int = STEPS,
    grants: Grants | None = None,
    log: Callable[[str], None] | None = None,
) -> PreflightEvent:
    """The pre-flight verdict of `spec` on its engine. `out` holds the short runs' files.
    `make_backend(spec, model_dir)`: the engine each run uses (default: the one
    `rollout.backend` names, placed as a run of the spec places it)."""
    spec = spec if isinstance(spec, RunSpec) else parse_spec(spec)
    out = Path(out)
    say = log or (lambda _: None)
    say("pre-flight: the training prompts")
    prompts = count_prompts(spec, grants, say)
    sync, async_, update = Phase(), Phase(), Phase()
    if prompts.error is None and not (prompts.total and prompts.over == prompts.total):
        say(f"pre-flight: {steps} sync steps")
        _run(
            phase_spec(spec, steps=steps, asynchronous=False),
            out / "sync",
            sync,
            make_backend,
            grants,
        )
        say(f"pre-flight: {steps} async steps at max_staleness 0")
        _run(
            phase_spec(spec, steps=steps, asynchronous=True),
            out / "async",
            async_,
            make_backend,
            grants,
        )
        say("pre-flight: a deliberate adapter update")
        _run(
            phase_spec(spec, steps=UPDATE_STEPS, asynchronous=False, lr=DELIBERATE_LR),
            out / "update",
            update,
            make_backend,
            grants,
        )
    else:
        for phase in (sync, async_, update):
            phase.error = "not run: no training prompt fits (prompts_fit)"
    return judge(Figures(spec, prompts, sync, async_, update, steps))


# ----------------------------------------------------------------------------- the verdict


def _check(name: str, ok: bool, figure: str, value: float | None = None, message: str = ""):
    return PreflightCheck(
        name=name,
        status="pass" if ok else "fail",
        figure=figure,
        value=value,
        message="" if ok else message,
    )


def _skipped(name: str, why: str) -> PreflightCheck:
    return PreflightCheck(name=name, status="skipped", figure="", message=why)


def _pct(x: float) -> str:
    return f"{100 * x:.0f} %"


def prompts_fit(p: Prompts) -> PreflightCheck:
    if p.error is not None:
        return _check("prompts_fit", False, "the data was refused", None, p.error)
    if p.total == 0 and p.limit is None:
        return PreflightCheck(
            name="prompts_fit", status="pass", figure="the environment makes its prompts"
        )
    limit = "none set" if p.limit is None else str(p.limit)
    figure = f"{p.over} of {p.total} training prompts over data.max_prompt_tokens ({limit})"
    return _check(
        "prompts_fit",
        p.over == 0,
        figure,
        float(p.over),
        f"{p.over} of {p.total} training prompts ({_pct(p.over / p.total)}) are longer "
        f"than data.max_prompt_tokens ({p.limit} tokens): they are left out of "
        f"training (Paddock never cuts a prompt); raise the limit or shorten them",
    )


def adapter_reaches_engine(update: Phase, lim: Limits) -> PreflightCheck:
    name = "adapter_reaches_engine"
    if update.error is not None:
        return _check(name, False, "the update's run failed", None, update.error)
    tmpe = update.metrics.get(UPDATE_STEPS, {}).get("token_mult_prob_error")
    moved = update.metrics.get(1, {}).get("grad_norm", 0.0)
    if tmpe is None or not moved:
        return _skipped(
            name,
            "the deliberate step had no gradient to apply (every group's "
            "rewards were equal): see reward_signal",
        )
    figure = (
        f"after a deliberate update (one step at lr {DELIBERATE_LR:g}), engine vs "
        f"trainer token_mult_prob_error {tmpe:.4f} (limit {lim.prob_error_limit:g})"
    )
    return _check(
        name,
        tmpe <= lim.prob_error_limit,
        figure,
        tmpe,
        f"after a deliberate adapter update, the engine's logprobs differ from the "
        f"trainer's for the version the engine acknowledged (token_mult_prob_error "
        f"{tmpe:.4f}): the engine does not serve the adapter the trainer published",
    )


def prob_error(sync: Phase, lim: Limits) -> PreflightCheck:
    name = "prob_error"
    if sync.error is not None:
        return _check(name, False, "the sync run failed", None, sync.error)
    tmpe, gen_kl = sync.series("token_mult_prob_error"), sync.series("gen_kl_error")
    if not tmpe:
        return _skipped(name, "no step trained on a sample: nothing to compare")
    worst, worst_kl = max(tmpe), max(gen_kl, default=0.0)
    figure = (
        f"token_mult_prob_error max {worst:.4f} (limit {lim.prob_error_limit:g}), "
        f"gen_kl_error max {worst_kl:.2g} (limit {lim.gen_kl_limit:g}) over "
        f"{len(tmpe)} steps"
    )
    ok = worst <= lim.prob_error_limit and worst_kl <= lim.gen_kl_limit
    return _check(
        name,
        ok,
        figure,
        worst,
        f"the engine's logprobs are off the trainer's for the same adapter version "
        f"({figure}): importance weights and the clip would be wrong; check the "
        f"engine's sampling settings and its dtype",
    )


def async_equals_sync(sync: Phase, async_: Phase, spec: RunSpec) -> PreflightCheck:
    name = "async_equals_sync"
    for which, phase in (("sync", sync), ("async", async_)):
        if phase.error is not None:
            return _check(name, False, f"the {which} run failed", None, phase.error)
    steps = sorted(set(sync.samples) | set(async_.samples))
    total = same = 0
    first: str | None = None
    for step in steps:
        a, b = sync.samples.get(step, []), async_.samples.get(step, [])
        total += max(len(a), len(b))
        for x, y in zip(a, b, strict=False):
            if x == y:
                same += 1
            elif first is None:
                first = (
                    f"step {step}: prompt {str(x['prompt'])[:80]!r}, sync "
                    f"{str(x['completion'])[:60]!r} but async {str(y['completion'])[:60]!r}"
                    f" (prompt {str(y['prompt'])[:80]!r})"
                )
    mode = spec.async_.weight_update
    figure = (
        f"{same} of {total} samples equal over {len(steps)} steps (async at "
        f"max_staleness 0, weight_update {mode})"
    )
    return _check(
        name,
        total > 0 and same == total,
        figure,
        float(total - same),
        f"async at max_staleness 0 generated other samples than sync: {figure}; first: {first}"
        if first
        else f"async reported other steps than sync: {figure}",
    )


def reward_signal(sync: Phase) -> PreflightCheck:
    name = "reward_signal"
    if sync.error is not None:
        return _check(name, False, "the sync run failed", None, sync.error)
    equal = sync.series("groups/zero_variance_frac")
    if not equal:
        return _skipped(name, "no step scored a group")
    reward = sync.series("reward/mean")
    mean_reward = statistics.fmean(reward) if reward else float("nan")
    figure = (
        f"{_pct(statistics.fmean(equal))} of groups with all rewards equal over "
        f"{len(equal)} steps (reward/mean {mean_reward:.3g})"
    )
    return _check(
        name,
        min(equal) < 1.0,
        figure,
        statistics.fmean(equal),
        f"every group's rewards were all equal in every step ({figure}): zero "
        f"advantage, no learning signal; check the reward functions against the "
        f"data's answers",
    )


def responses_finish(sync: Phase, spec: RunSpec) -> PreflightCheck:
    name = "responses_finish"
    if sync.error is not None:
        return _check(name, False, "the sync run failed", None, sync.error)
    cut = sync.series("response_length/truncated_frac")
    if not cut:
        return _skipped(name, "no step generated a response")
    limit = spec.rollout.max_new_tokens
    figure = f"{_pct(statistics.fmean(cut))} of responses cut at max_new_tokens ({limit})"
    return _check(
        name,
        min(cut) < 1.0,
        figure,
        statistics.fmean(cut),
        f"every response was cut at rollout.max_new_tokens ({limit}) in every step: "
        f"no response ends, so no reward can tell a right one; raise it",
    )


def judge(f: Figures, lim: Limits = LIMITS) -> PreflightEvent:
    """The verdict from the figures: every check, in PREFLIGHT_CHECKS order."""
    checks = [
        prompts_fit(f.prompts),
        adapter_reaches_engine(f.update, lim),
        prob_error(f.sync, lim),
        async_equals_sync(f.sync, f.async_, f.spec),
        reward_signal(f.sync),
        responses_finish(f.sync, f.spec),
    ]
    return PreflightEvent(
        time=time.time(), backend=f.spec.rollout.backend, steps=f.steps, checks=checks
    )


def verdict_lines(verdict: PreflightEvent) -> list[str]:
    """The verdict for people, a line a check: `PASS prob_error: token_mult_prob_error …`."""
    out = []
    for c in verdict.checks:
        line = f"{c.status.upper():7} {c.name}: {c.figure or c.message}"
        if c.status != "pass" and c.message and c.figure:
            line += f"\n        {c.message}"
        out.append(line)
    return out
