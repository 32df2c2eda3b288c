"""The pool key: which spec values runs must share to be hosted by one pool job.

One base model is held once, by one trainer and one engine, so the runs of a pool share what
fixes them: the model (path, or the tiny model's recipe) and its dtype, what the trainer
sets up for every adapter (activation checkpointing, compilation), the rollout backend and
the engine's own settings (memory, cache, decode mode: everything of `rollout` that is not a
request's sampling), and where the pool's model lives (trainer and rollout GPUs). The cluster
is the control plane's: it adds its own entry to the key it stores.

Everything else may differ per run: data, reward, algorithm, LoRA rank/alpha/dropout/targets
(ranks padded to the pool's; docs/pools.md), sampling (temperature, lengths, stop strings),
async settings, train settings, checkpoints, seed and the run's `resources.pool_weight`.

Light like spec.py (stdlib and workers.spec only): the control plane imports it.
"""

from __future__ import annotations

from typing import Any

from .spec import RunSpec, _RolloutBase

KEY_VERSION = 1  # bump when the key's entries change: a stored key of another version never fits

# The rollout settings a request carries (each run its own) and `max_loras` (the pool's
# capacity, chosen by whoever starts the pool); the rest of `rollout` is the engine's.
_PER_REQUEST = frozenset(_RolloutBase.model_fields)


def trainer_key(spec: RunSpec) -> dict[str, Any]:
    """What every run of one trainer (workers/policy/policy.py) must share: the base model
    and what the host sets up for every adapter."""
    return {
        "model.path": spec.model.path,
        "model.tiny": spec.model.tiny.model_dump(mode="json") if spec.model.path is None else None,
        "model.dtype": spec.model.dtype,
        "train.activation_checkpointing": spec.train.activation_checkpointing,
        "train.compile": spec.train.compile,
    }


def engine_key(spec: RunSpec) -> dict[str, Any]:
    """What every run of one engine must share: the backend and its engine-wide settings."""
    r = spec.rollout.model_dump(mode="json")
    key = {"rollout.backend": r.pop("backend")}
    key.update({f"rollout.{k}": v for k, v in sorted(r.items()) if k not in _PER_REQUEST})
    return key


def pool_key(spec: RunSpec) -> dict[str, Any]:
    """The pool key of a run: JSON-able, equal for runs that may share a pool."""
    return {
        "key_version": KEY_VERSION,
        **trainer_key(spec),
        **engine_key(spec),
        "resources.trainer_gpus": spec.resources.trainer_gpus,
        "resources.rollout_gpus": spec.resources.rollout_gpus,
    }


def unpoolable(spec: RunSpec) -> str | None:
    """Why a run cannot be pooled at all (a setting a pool job does not host), or None."""
    r = spec.resources
    refusals = [
        (r.executor != "local", f"resources.executor is {r.executor!r}"),
        (r.trainer_actors != 1, f"resources.trainer_actors is {r.trainer_actors}"),
        (r.rollout_replicas != 1, f"resources.rollout_replicas is {r.rollout_replicas}"),
        (r.engine_process, "resources.engine_process is true"),
        (r.release_on_pause, "resources.release_on_pause is true"),
    ]
    found = [why for bad, why in refusals if bad]
    if not found:
        return None
    return (
        f"{'; '.join(found)}: a pooled run trains and generates inside the pool's one "
        "process (executor local, one trainer, one engine replica, and a pause that keeps "
        "the job); unset resources.pool or change these"
    )


def misfit(spec: RunSpec, key: dict[str, Any], cluster: str | None = None) -> str | None:
    """Why the run does not fit the pool of `key` (naming each setting that differs, with
    the run's value and the pool's), or None when it fits. `cluster`, when given, is
    compared with the key's `cluster` entry (the control plane's)."""
    why = unpoolable(spec)
    if why:
        return why
    mine = pool_key(spec)
    if cluster is not None or "cluster" in key:
        mine["cluster"] = cluster
    if key.get("key_version") != mine["key_version"]:
        return (
            f"the pool's key is of version {key.get('key_version')!r}, this worker's "
            f"{mine['key_version']}: the pool was started by another release"
        )
    names = sorted(n for n in set(mine) | set(key) if mine.get(n) != key.get(n))
    if "rollout.backend" in names:  # another engine: its settings are not comparable
        names = [n for n in names if not n.startswith("rollout.") or n == "rollout.backend"]
    differ = [f"{n} is {_show(mine.get(n))}, the pool's is {_show(key.get(n))}" for n in names]
    if not differ:
        return None
    return f"{'; '.join(differ)}: the runs of one pool share one base model, trainer and engine"


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
