"""Upper bounds of a spec's sizes (docs/security.md#limits): every number, list and text
that costs a cluster memory or time, or the platform room, has one.

A spec over a bound fails validation naming the field. An operator raises (or lowers) a bound
with PADDOCK_SPEC_LIMITS, e.g. `rollout.max_new_tokens=65536,algorithm.num_generations=512`,
set on the platform; dispatch hands the same variable to its jobs, so a job accepts the spec
its platform did. Read once, at import: the bounds are in the JSON Schema too (`bound`).

The bounds hold for a spec a user writes (a launch, `paddock spec validate`, a job), not for
one the platform stored earlier (`workers.spec.stored_spec`): a run launched under a higher
bound still dispatches, and its job, which checks again, fails naming the field.
Light: the standard library only.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from typing import Any

SPEC_LIMITS_ENV = "PADDOCK_SPEC_LIMITS"
# key: a dotted path of the spec (`*`: every item of a list); the bound is the largest value
# of a number, the most items of a list or keys of a mapping, the most characters of a text
DEFAULT_LIMITS: dict[str, int] = {
    "rollout.max_new_tokens": 32768,
    "rollout.max_batch_size": 4096,
    "rollout.stop": 32,
    "rollout.stop.*": 256,
    "rollout.max_loras": 256,
    "rollout.max_cpu_loras": 1024,
    "rollout.cpu_kvcache_space_gib": 4096,
    "algorithm.num_generations": 256,
    "train.prompts_per_step": 4096,
    "train.micro_batch_size": 4096,
    "train.logprob_chunk_size": 1 << 20,
    "train.mult_prob_error_samples": 4096,
    "train.log_samples": 256,
    "train.threads": 4096,
    "data.max_prompt_tokens": 131072,
    "data.eval_size": 100_000,
    "data.system_prompt": 100_000,
    "data.chat_template_kwargs": 32,
    "lora.r": 1024,
    "lora.target_modules": 64,
    "lora.target_modules.*": 200,
    "reward.functions": 16,
    "reward.functions.*.pattern": 2000,
    "reward.functions.*.url": 2000,
    "async.buffer_groups": 65536,
    "async.max_staleness": 1000,
    "model.tiny.hidden_size": 1024,
    "model.tiny.num_layers": 24,
    "model.tiny.num_heads": 32,
    "model.tiny.intermediate_size": 4096,
    "model.tiny.warmup_steps": 100_000,
    "model.tiny.warmup_bias_steps": 100_000,
    "resources.trainer_actors": 1024,
    "resources.rollout_replicas": 1024,
    "resources.max_restarts": 100,
}
# paths bounded by another key's bound (an overlong penalty spans at most the new tokens)
SAME_BOUND = {
    "reward.functions.*.buffer": "rollout.max_new_tokens",
    "reward.functions.*.max_new_tokens": "rollout.max_new_tokens",
}


def spec_limits(environ: Mapping[str, str] | None = None) -> dict[str, int]:
    """DEFAULT_LIMITS with the operator's PADDOCK_SPEC_LIMITS applied; a bad entry raises
    ValueError naming it (a typo must not leave a bound where it was in silence)."""
    environ = os.environ if environ is None else environ
    limits = dict(DEFAULT_LIMITS)
    for part in (p.strip() for p in (environ.get("PADDOCK_SPEC_LIMITS") or "").split(",")):
        if not part:
            continue
        key, sep, value = (s.strip() for s in part.partition("="))
        if key not in DEFAULT_LIMITS:
            raise ValueError(
                f"{SPEC_LIMITS_ENV}: {key!r} is not a limit; one of {sorted(DEFAULT_LIMITS)}"
            )
        if not sep or not value.isdigit() or int(value) < 1:
            raise ValueError(f"{SPEC_LIMITS_ENV}: {part!r} is not {key}=<a whole number >= 1>")
        limits[key] = int(value)
    return limits


LIMITS = spec_limits()


def limit_of(key: str) -> int:
    return LIMITS[SAME_BOUND.get(key, key)]


def bound(key: str, kind: str = "maximum") -> dict[str, int]:
    """The JSON Schema keyword of a bound, for a field's `json_schema_extra` (`maximum`,
    `maxItems`, `maxLength`), so the launcher form knows it."""
    return {kind: limit_of(key)}


def _nodes(value: Any, parts: list[str], path: list[str]) -> Iterator[tuple[str, Any]]:
    if not parts:
        yield ".".join(path), value
        return
    head, rest = parts[0], parts[1:]
    if head == "*" and isinstance(value, list):
        for i, item in enumerate(value):
            yield from _nodes(item, rest, [*path, str(i)])
    elif isinstance(value, dict) and head in value:
        yield from _nodes(value[head], rest, [*path, head])


def limit_errors(spec: dict[str, Any]) -> list[tuple[str, str]]:
    """(field, message) for every value of `spec` (a RunSpec dumped with its public names)
    over its bound."""
    errors = []
    hint = f" (the deployment's limit; an operator raises it with {SPEC_LIMITS_ENV})"
    for key in [*LIMITS, *SAME_BOUND]:
        limit = limit_of(key)
        for field, value in _nodes(spec, key.split("."), []):
            if isinstance(value, bool) or value is None:
                continue
            if isinstance(value, int | float) and value > limit:
                errors.append((field, f"must be <= {limit}{hint}"))
            elif isinstance(value, str) and len(value) > limit:
                errors.append((field, f"must be at most {limit} characters{hint}"))
            elif isinstance(value, list | dict) and len(value) > limit:
                errors.append((field, f"must have at most {limit} item(s){hint}"))
    return errors
