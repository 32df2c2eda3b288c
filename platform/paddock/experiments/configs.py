"""Immutable config versions: canonical hashing, the effective spec of a run, edits, diffs.

A stored spec is always the normalized one (`RunSpec(...).to_dict()`: every default
filled in), so what a run ran is exactly what is stored, and two versions diff key by key."""

from __future__ import annotations

import hashlib
import json
from functools import cache
from typing import Any

from paddock.core.errors import DomainError, ErrorCode
from paddock.experiments.models import ConfigVersion
from workers import names
from workers.spec import RunSpec, apply_overrides, parse_spec, spec_errors, spec_json_schema

_ABSENT = object()


def spec_canonical_json(spec: dict) -> str:
    return json.dumps(spec, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def spec_hash(spec: dict) -> str:
    return hashlib.sha256(spec_canonical_json(spec).encode()).hexdigest()


def spec_parse(*, spec: Any, field: str = "spec") -> RunSpec:
    """The validated spec (stored as its `to_dict()`: every default filled in);
    DomainError(ErrorCode.SPEC_INVALID) naming every bad field as `spec.<path>` otherwise."""
    if not isinstance(spec, dict):
        raise DomainError(ErrorCode.SPEC_INVALID, "must be an object of sections", field=field)
    errors = spec_errors(spec)
    if errors:
        errors = [{"field": f"{field}.{e['field']}", "message": e["message"]} for e in errors]
        first = errors[0]
        raise DomainError(
            ErrorCode.SPEC_INVALID,
            f"{first['field']}: {first['message']}",
            field=first["field"],
            errors=errors,
        )
    return parse_spec(spec)


@cache
def _rollout_keys() -> dict[str, frozenset[str]]:
    """The keys each rollout backend accepts, read from the spec's JSON Schema."""
    schema = spec_json_schema()
    mapping = schema["properties"]["rollout"]["discriminator"]["mapping"]
    return {
        backend: frozenset(schema["$defs"][ref.rsplit("/", 1)[1]]["properties"])
        for backend, ref in mapping.items()
    }


def rollout_backends() -> list[str]:
    """The spec's rollout backends in workers/names.py's order (the API schema's one union)."""
    keys = _rollout_keys()
    return [b for b in names.BACKENDS if b in keys]


def spec_for_run(*, spec: dict, backend: str, seed: int) -> RunSpec:
    """The effective spec of one run of a launch: the launched (normalized) spec on
    `backend` with `seed`. Rollout keys that belong to another backend (e.g. vLLM's
    gpu_memory_utilization on the torch run) are dropped; shared ones are kept."""
    accepted = _rollout_keys()[backend]
    rollout = {k: v for k, v in spec["rollout"].items() if k in accepted}
    rollout["backend"] = backend
    return spec_parse(spec={**spec, "rollout": rollout, "seed": seed})


def spec_gpus(spec: RunSpec) -> float:
    """The GPUs a run of `spec` asks for: its trainer's and its rollout replicas'."""
    r = spec.resources
    return r.trainer_gpus + r.rollout_replicas * r.rollout_gpus


def spec_apply_edits(*, spec: dict, edits: dict[str, Any]) -> dict:
    """`spec` with each dotted path of `edits` set to its (JSON) value."""
    overrides = [f"{path}={json.dumps(value)}" for path, value in edits.items()]
    try:
        return apply_overrides(spec, overrides)
    except ValueError as exc:
        raise DomainError(ErrorCode.INVALID, str(exc), field="edits") from None


def config_version_create(
    *, team_id: int, spec: dict, parent: ConfigVersion | None, created_by
) -> ConfigVersion:
    """Store a normalized spec as a new immutable version."""
    return ConfigVersion.objects.create(
        team_id=team_id, spec=spec, hash=spec_hash(spec), parent=parent, created_by=created_by
    )


def _flatten(value: Any, prefix: str, out: dict[str, Any]) -> dict[str, Any]:
    if isinstance(value, dict) and value:
        for key, child in value.items():
            _flatten(child, f"{prefix}.{key}" if prefix else str(key), out)
    else:
        out[prefix] = value
    return out


def spec_diff(*, a: dict, b: dict) -> list[dict[str, Any]]:
    """The keys that differ, as dotted paths, sorted: [{"path", "a", "b"}]; a key missing
    on one side has the value null there and `"only_in": "a" | "b"`."""
    flat_a, flat_b = _flatten(a, "", {}), _flatten(b, "", {})
    changes = []
    for path in sorted(flat_a.keys() | flat_b.keys()):
        va, vb = flat_a.get(path, _ABSENT), flat_b.get(path, _ABSENT)
        if va == vb and type(va) is type(vb):
            continue
        change: dict[str, Any] = {
            "path": path,
            "a": None if va is _ABSENT else va,
            "b": None if vb is _ABSENT else vb,
        }
        if va is _ABSENT or vb is _ABSENT:
            change["only_in"] = "b" if va is _ABSENT else "a"
        changes.append(change)
    return changes
