"""The names both halves use, defined once: rollout backends, the algorithm's pieces, run
states. Everything else takes them from here: the spec's `Literal`s, the registries of
`workers/rollout/` and `workers/grpo/` (which check at import that their keys are these),
the control plane's model choices, `paddock doctor`, and the browser's unions (generated
into frontend/src/api/names.gen.ts by frontend/scripts/names_ts.py).

Light like spec.py: the standard library only, so the control plane and the API client may
import it.
"""

from __future__ import annotations

import importlib.metadata
import re
from collections.abc import Iterable
from typing import Literal, get_args

Backend = Literal["torch", "vllm", "trtllm"]
Advantage = Literal["grpo", "dr_grpo", "rloo"]
LossAgg = Literal["token_mean", "seq_mean_token_mean", "seq_mean_token_sum_norm"]
KlEstimator = Literal["k1", "k3"]
IsLevel = Literal["none", "token", "sequence"]

# The run state machine's states (platform/paddock/experiments/states.py), in its order.
RunState = Literal[
    "queued", "dispatching", "starting", "running", "pausing", "paused", "resuming",
    "succeeded", "aborting", "aborted", "failed",
]  # fmt: skip
TerminalRunState = Literal["succeeded", "aborted", "failed"]
# What a user may want a run to do (the ingest reply's `desired_state`).
DesiredState = Literal["running", "paused", "aborted"]
# What a job may report in a `status` event: the states a job itself brings about.
ReportedState = Literal["starting", "running", "paused", "succeeded", "aborted", "failed"]
LogLevel = Literal["debug", "info", "warning", "error"]
# What a user may ask of a run (REST /runs/<id>/<action>, a websocket control message).
RunAction = Literal["pause", "resume", "abort"]

BACKENDS: tuple[Backend, ...] = get_args(Backend)
ADVANTAGES: tuple[Advantage, ...] = get_args(Advantage)
LOSS_AGGS: tuple[LossAgg, ...] = get_args(LossAgg)
KL_ESTIMATORS: tuple[KlEstimator, ...] = get_args(KlEstimator)
IS_LEVELS: tuple[IsLevel, ...] = get_args(IsLevel)
RUN_STATES: tuple[RunState, ...] = get_args(RunState)
TERMINAL_RUN_STATES: tuple[TerminalRunState, ...] = get_args(TerminalRunState)
DESIRED_STATES: tuple[DesiredState, ...] = get_args(DesiredState)
REPORTED_STATES: tuple[ReportedState, ...] = get_args(ReportedState)
LOG_LEVELS: tuple[LogLevel, ...] = get_args(LogLevel)
RUN_ACTIONS: tuple[RunAction, ...] = get_args(RunAction)

# The metrics a pooled run reports besides a solo run's (docs/pools.md): its fraction of the
# trainer's time and of the engine's generation turns since its last step, and how long its
# last batch waited for each.
PoolMetric = Literal["pool/share", "pool/wait_s", "pool/gen_share", "pool/gen_wait_s"]
POOL_METRICS: tuple[PoolMetric, ...] = get_args(PoolMetric)
# The metrics of a run with an environment (docs/environments.md#metrics), per step: model
# turns per episode, tool calls and those answered with an error (malformed, unknown, the
# tool raised), seconds spent waiting on the environment summed over episodes and their
# share of the episodes' lifetimes, the share of episodes cut by a budget, and the episodes
# an environment failed (raised, hung, replayed differently).
EpisodeMetric = Literal[
    "episode/turns_mean", "episode/tool_calls", "episode/tool_errors", "episode/env_s",
    "episode/env_share", "episode/truncated_frac", "episode/failed",
]  # fmt: skip
EPISODE_METRICS: tuple[EpisodeMetric, ...] = get_args(EpisodeMetric)
# Environments (docs/environments.md): those every worker has, and the entry-point group
# through which an installed package declares more. A cluster advertises the names it can
# run (`installed_environments()` where the job runs), as it advertises its engines.
BUILTIN_ENVIRONMENTS: tuple[str, ...] = ("calculator", "http")
ENVIRONMENT_GROUP = "paddock.environments"
ENV_NAME = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,63}$")  # what a spec's env.name may be


def installed_environments() -> list[str]:
    """Every `env.name` this Python environment can run: the built-ins and each name an
    installed package declares in the entry-point group (read from its metadata; nothing
    is imported)."""
    declared = {
        ep.name
        for ep in importlib.metadata.entry_points(group=ENVIRONMENT_GROUP)
        if ENV_NAME.fullmatch(ep.name)
    }
    return sorted({*BUILTIN_ENVIRONMENTS, *declared})


# The pool job's memory, reported with each member's steps (the pool page shows them): the
# process's resident memory and, with CUDA, what torch holds on its GPUs, in GB.
MemoryMetric = Literal["memory/cpu_gb", "memory/gpu_gb"]
MEMORY_METRICS: tuple[MemoryMetric, ...] = get_args(MemoryMetric)

# The metrics the alarms read (workers/alarms.py), as the loop reports them: the field's own
# names, and two of Paddock's: `lora/effective_rank`, the mean over the adapter's modules of
# exp(entropy of the normalized singular values of the update B·A (workers/loop/adapter_rank
# .py), and `groups/zero_variance_frac`, the share of a step's groups whose rewards were all
# equal (no learning signal: zero advantage).
HealthMetric = Literal[
    "reward/mean", "accuracy", "entropy", "kl", "token_mult_prob_error", "gen_kl_error",
    "grad_norm", "lora/effective_rank", "groups/zero_variance_frac",
]  # fmt: skip
HEALTH_METRICS: tuple[HealthMetric, ...] = get_args(HealthMetric)
# The alarms, each one rule of workers/alarms.py over those metrics (docs/alarms.md).
AlarmName = Literal[
    "entropy_collapse", "kl_drift", "prob_error_drift", "reward_collapse", "grad_norm_spike",
    "lora_rank_collapse", "zero_variance_groups",
]  # fmt: skip
ALARM_NAMES: tuple[AlarmName, ...] = get_args(AlarmName)

# The pre-flight check's checks (workers/preflight.py, docs/preflight.md), in the order it
# reports them.
PreflightCheckName = Literal[
    "prompts_fit", "adapter_reaches_engine", "prob_error", "async_equals_sync",
    "reward_signal", "responses_finish",
]  # fmt: skip
PREFLIGHT_CHECKS: tuple[PreflightCheckName, ...] = get_args(PreflightCheckName)
PreflightStatus = Literal["pass", "fail", "skipped"]

# The Python modules each backend's engine needs, the first one its own: what `paddock doctor`
# looks for and what a job whose engine is missing names.
BACKEND_MODULES: dict[Backend, tuple[str, ...]] = {
    "torch": ("torch", "transformers", "peft"),
    "vllm": ("vllm",),
    "trtllm": ("tensorrt_llm",),
}


def names_check(what: str, found: Iterable[str], expected: tuple[str, ...]) -> None:
    """Raise at import when a registry (or a list of choices) holds other names than these:
    a backend or an algorithm added in one place only fails loudly, not at a run's launch."""
    found = set(found)
    if found != set(expected):
        missing, extra = sorted(set(expected) - found), sorted(found - set(expected))
        raise RuntimeError(
            f"{what} disagree with workers/names.py: missing {missing}, not declared {extra}"
        )


names_check("backend modules", BACKEND_MODULES, BACKENDS)
if not set(TERMINAL_RUN_STATES) <= set(RUN_STATES) or not set(REPORTED_STATES) <= set(RUN_STATES):
    raise RuntimeError("terminal and reported run states must be run states")
