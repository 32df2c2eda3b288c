"""Assembling a local run: model directory, task, policy, backend, buffer, resume."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import torch

from ..adapters.lora import load_tokenizer
from ..data import load_task
from ..envs import ChatRenderer, EpisodeLimits, format_for_template
from ..envs.base import Environment
from ..envs.registry import make_environment
from ..gpu_share import open_share, share_for, warm_before_overlap
from ..grants import Grants
from ..models import tiny_model_dir
from ..path_guard import PathGuard
from ..policy import LoraPolicy
from ..rewards import make_scorer
from ..rollout import RolloutBackend, SamplingParams, make_backend
from ..rollout.engine_process import EngineProcess
from ..rollout.eos import eos_token_ids
from ..spec import RunSpec
from .buffer import TrajectoryBuffer
from .checkpoint import latest_checkpoint, load_checkpoint
from .control import ControlSource, StaticControl
from .driver import Driver, Outcome
from .events import Emitter, EventHook, MetricsHook, early_log
from .executor import StreamExecutor
from .mirrors import open_mirrors
from .rollout_context import RolloutContext
from .scoring import STRICT_ACCURACY_TASKS
from .switch_interval import held_switch_interval
from .types import RunState, TrainerExecutor

# The GIL switch interval while a run is in flight (Python's default is 5 ms; the previous
# value comes back when the process's last run ends: switch_interval.py). The trainer's
# thread, the engine's and the event loop hand the GIL back and forth around every torch op;
# a thread back from a small op waits for one in pure Python (scoring, collating, the decode
# loop's rows) to give it up, up to the interval each time. On the tiny model, where a step
# is thousands of small ops, that wait was most of a pooled train step (bench/pool_cpu.py,
# docs/pools.md).
# Measured on the CPU only: a run with a GPU keeps Python's default until the GPU benchmarks
# (bench/gpu/async_overlap.py, whose figures were taken at 5 ms) have been run at this one.
SWITCH_INTERVAL_S = 0.0002


def model_dir_for(
    spec: RunSpec, guard: PathGuard | None = None, log: Callable[[str], None] | None = None
) -> Path:
    """The model's directory: `model.path` (with `guard`, under the platform: it and every
    file in it inside the run's roots), else the tiny model, built under PADDOCK_HOME (its
    build's progress to `log`: minutes, once, for the demos' chat models)."""
    if spec.model.path:
        path = Path(guard.check(spec.model.path, "model.path") if guard else spec.model.path)
        if not (path / "config.json").is_file():
            raise FileNotFoundError(
                f"model.path {path} is not a Hugging Face model directory (no config.json)"
            )
        return path
    return tiny_model_dir(spec.model.tiny, log=log)


def local_devices(spec: RunSpec, gpus: int) -> tuple[torch.device, torch.device]:
    """Where an in-process run puts (trainer, engine): on the CPU without GPUs or where the
    spec asks for none; on one GPU together; with two GPUs or more, the trainer on the first
    and the engine on the second (disaggregated: decoding never queues behind training's
    kernels, and the adapter crosses GPUs in one device-to-device copy)."""
    r = spec.resources
    trainer = torch.device("cuda:0") if r.trainer_gpus > 0 and gpus > 0 else torch.device("cpu")
    if r.rollout_gpus <= 0 or gpus == 0:
        return trainer, torch.device("cpu")
    both_on_gpu = trainer.type == "cuda" and gpus >= 2
    return trainer, torch.device("cuda:1" if both_on_gpu else "cuda:0")


def buffer_capacity(spec: RunSpec) -> int:
    if spec.async_.buffer_groups:
        return spec.async_.buffer_groups
    lookahead = spec.async_.max_staleness if spec.async_.enabled else 0
    return (lookahead + 2) * spec.train.prompts_per_step


async def episode_setup(
    spec: RunSpec, tokenizer, model_dir: Path, template_kwargs: dict, grants: Grants
) -> tuple[Environment | None, ChatRenderer, EpisodeLimits, str]:
    """The run's environment (None: one turn a sample), the renderer of its episodes (the
    model's template with the environment's tools), their budgets and tool-call format."""
    eos = eos_token_ids(model_dir, tokenizer.eos_token_id)
    if spec.env is None:
        return None, ChatRenderer(tokenizer, eos, (), template_kwargs), EpisodeLimits(), "hermes"
    if not getattr(tokenizer, "chat_template", None):
        raise ValueError(
            f"env: {spec.env.name} plays multi-turn episodes, which need the model's chat "
            "template; the tokenizer has none (a base model)"
        )
    env = await make_environment(spec.env, grants)
    e = spec.env
    limits = EpisodeLimits(e.max_turns, spec.response_tokens_max(), e.step_timeout_s)
    fmt = e.tool_format if e.tool_format != "auto" else format_for_template(tokenizer.chat_template)
    return env, ChatRenderer(tokenizer, eos, env.tools, template_kwargs), limits, fmt


def resume_path(spec: RunSpec, out: Path) -> Path | None:
    src = spec.checkpoint.resume_from
    if src is None:
        return None
    if src == "latest":  # the newest checkpoint of this output directory, if any
        return latest_checkpoint(out / "checkpoints")
    return Path(src)


async def run_training(
    spec: RunSpec,
    out: Path,
    control: ControlSource | None = None,
    on_metrics: MetricsHook | None = None,
    on_event: EventHook | None = None,
    progress: bool = True,
    executor: TrainerExecutor | None = None,
    backend: RolloutBackend | None = None,
    leave: Callable[[], bool] | None = None,
    grants: Grants | None = None,
) -> Outcome:
    """Run `spec` to its end, a pause (with `release_on_pause`) or an abort. `executor` and
    `backend` default to the in-process ones; the Ray driver passes its actors' instead, a
    pool (workers/pool/) its shared trainer's and engine's, with `leave` saying when the
    run is to leave the pool (checkpointed, no final status). `grants`: the run's secrets
    and egress policy (workers/grants.py; default: `paddock train`'s)."""
    cpu_only = spec.resources.trainer_gpus <= 0 and spec.resources.rollout_gpus <= 0
    with held_switch_interval(SWITCH_INTERVAL_S if cpu_only else None):
        return await _run_training(
            spec, out, control, on_metrics, on_event, progress, executor, backend, leave,
            grants if grants is not None else Grants.standalone(),
        )  # fmt: skip


async def _run_training(
    spec: RunSpec,
    out: Path,
    control: ControlSource | None,
    on_metrics: MetricsHook | None,
    on_event: EventHook | None,
    progress: bool,
    executor: TrainerExecutor | None,
    backend: RolloutBackend | None,
    leave: Callable[[], bool] | None,
    grants: Grants,
) -> Outcome:
    out.mkdir(parents=True, exist_ok=True)
    (out / "spec.yaml").write_text(spec.to_yaml())
    if spec.train.threads:
        torch.set_num_threads(spec.train.threads)
    torch.manual_seed(spec.seed)
    model_dir = model_dir_for(spec, grants.paths, early_log(on_event, progress))
    tokenizer = load_tokenizer(model_dir)
    env, renderer, limits, tool_format = await episode_setup(
        spec, tokenizer, model_dir, spec.data.chat_template_kwargs, grants
    )
    own = None
    if spec.data.task == "environment" and env is not None:
        made = env.examples(spec.data.eval_size)
        if made is None:
            raise ValueError(
                f"data.task: environment: {env.name} makes no episodes of its own; give it "
                "a data task"
            )
        own = (env.name, *made)
    task = load_task(spec.data, tokenizer, own, grants.paths)
    trainer_device, engine_device = local_devices(spec, torch.cuda.device_count())
    # async with trainer and torch engine on one GPU: each side its stream (workers/gpu_share.py)
    own = executor is None and backend is None
    plan = share_for(spec, trainer_device, engine_device) if own else None
    share = open_share(plan, trainer_device) if plan is not None else None
    trainer_stream = share.trainer if share is not None else None
    executor = executor or StreamExecutor(
        LoraPolicy(spec, model_dir, trainer_device), trainer_stream
    )
    if backend is None and spec.resources.engine_process:
        backend = EngineProcess(spec, model_dir, engine_device)
    backend = backend or make_backend(spec, model_dir, device=engine_device)
    if share is not None:
        backend.use_stream(share.engine)
    buffer = TrajectoryBuffer(buffer_capacity(spec))
    state = RunState()
    src = resume_path(spec, out)
    if src is not None:
        state = await load_checkpoint(src, executor, buffer)
    r = spec.rollout
    rollout = RolloutContext(
        task=task,
        tokenizer=tokenizer,
        backend=backend,
        scorer=make_scorer(spec.reward, grants),
        params=SamplingParams(r.temperature, r.max_new_tokens, tuple(r.stop)),
        seed=spec.seed,
        prompts_per_step=spec.train.prompts_per_step,
        group_size=spec.algorithm.num_generations,
        strict_accuracy=spec.data.task in STRICT_ACCURACY_TASKS,
        renderer=renderer,
        env=env,
        limits=limits,
        tool_format=tool_format,
    )
    # the spec's `logging:` mirrors (none: no thread, no import of their libraries)
    mirrors = open_mirrors(spec.logging, out, spec.to_dict(), grants.egress)
    on_metrics, on_event = mirrors.hooks(on_metrics, on_event)
    emitter = Emitter(out, spec.train.steps, state.step, on_metrics, on_event, progress)
    if share is not None:
        emitter.log(share.note, share.level)
    mirrors.warn = lambda message: emitter.log(message, level="warning")
    for split, n in task.dropped.items():
        if n:
            emitter.log(
                f"data: dropped {n} {split} prompts longer than data.max_prompt_tokens="
                f"{spec.data.max_prompt_tokens}"
            )
    driver = Driver(
        spec,
        executor,
        rollout,
        buffer,
        state,
        emitter,
        control or StaticControl(),
        out / "checkpoints",
        resumed=src is not None,
        leave=leave,
    )
    try:
        if src is not None:
            emitter.log(f"resumed from {src} at step {state.step}")
        # compiled graphs made before trainer and engine run in two threads (workers/gpu_share.py)
        if own and warm_before_overlap(spec, executor.policy, backend, share):
            emitter.log("compile: trainer and engine graphs compiled before they overlap")
        return await driver.run()
    except BaseException as exc:
        emitter.status("failed", f"{type(exc).__name__}: {exc}")
        raise
    finally:
        await driver.producer.stop()
        await backend.close()
        await rollout.scorer.close()  # the math_verify process, if one started
        if env is not None:
            await env.close()
        mirrors.close()  # done already when the final status went out
        emitter.close()
        if share is not None:  # after the last kernel of either side: the split's contexts
            share.close()
