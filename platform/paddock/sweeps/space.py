"""A sweep's search space and its members, as pure functions (no database).

A space maps spec keys (dotted paths: `lora.r`, `train.lr`, `seed`) to either a list of
values or, for random search only, a range (`{"min", "max", "log", "int"}`). A grid's
members are the product of the value lists, in the order the keys were given (the last key
varies fastest); a random search draws `count` members from the space with its own seeded
generator, so the same sweep always has the same members."""

from __future__ import annotations

import itertools
import math
import random
import re
from dataclasses import dataclass
from typing import Any

from paddock.core.errors import DomainError, ErrorCode

MAX_KEYS = 16
MAX_VALUES = 64
MAX_MEMBERS = 128
KEY_PATTERN = r"^[a-z_][a-z0-9_]*(\.[a-z_][a-z0-9_]*)*$"
# A sweep's keys are the spec's; these belong to the sweep itself (the pool its members
# share, what a member is told to resume from).
FORBIDDEN_KEYS = ("resources.pool", "checkpoint.resume_from")
Scalar = bool | int | float | str | None


@dataclass(frozen=True)
class Param:
    """One key of the space: `values` (choices), or a range `low`..`high` (random only),
    drawn uniformly or, with `log`, log-uniformly; `integer` rounds a draw."""

    key: str
    values: tuple[Scalar, ...] | None = None
    low: float | None = None
    high: float | None = None
    log: bool = False
    integer: bool = False

    def describe(self) -> dict[str, Any]:
        if self.values is not None:
            return {"values": list(self.values)}
        return {"min": self.low, "max": self.high, "log": self.log, "int": self.integer}


def _bad(key: str, message: str) -> DomainError:
    return DomainError(ErrorCode.INVALID, f"params.{key}: {message}", field=f"params.{key}")


def _number(key: str, raw: dict, name: str) -> float:
    value = raw.get(name)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise _bad(key, f"{name} must be a finite number")
    return float(value)


def _param(key: str, raw: Any, method: str) -> Param:
    if not isinstance(key, str) or not re.fullmatch(KEY_PATTERN, key) or len(key) > 100:
        raise DomainError(ErrorCode.INVALID, f"params: {key!r} is not a spec key (a.b.c)",
                          field="params")  # fmt: skip
    if key in FORBIDDEN_KEYS or key.startswith(tuple(f"{k}." for k in FORBIDDEN_KEYS)):
        raise _bad(key, "is the sweep's own, not a key to search over")
    if isinstance(raw, list):
        raw = {"values": raw}
    if not isinstance(raw, dict):
        raise _bad(key, "give a list of values, or {min, max} for a random search")
    unknown = sorted(set(raw) - {"values", "min", "max", "log", "int"})
    if unknown:
        raise _bad(key, f"unknown entry {unknown[0]!r}; one of values, min, max, log, int")
    if "values" in raw:
        if set(raw) != {"values"}:
            raise _bad(key, "give values, or a range (min, max), not both")
        values = raw["values"]
        if not isinstance(values, list) or not 1 <= len(values) <= MAX_VALUES:
            raise _bad(key, f"values must be a list of 1 to {MAX_VALUES} values")
        for value in values:
            if not isinstance(value, bool | int | float | str) and value is not None:
                raise _bad(key, "each value must be a number, a string, a boolean or null")
            if isinstance(value, float) and not math.isfinite(value):
                raise _bad(key, "each value must be finite")
            if isinstance(value, str) and len(value) > 200:
                raise _bad(key, "a string value is at most 200 characters")
        if len({repr(v) for v in values}) != len(values):
            raise _bad(key, "a value is listed twice")
        return Param(key, values=tuple(values))
    if method != "random":
        raise _bad(key, "a range (min, max) needs method random; give values for a grid")
    low, high = _number(key, raw, "min"), _number(key, raw, "max")
    log, integer = raw.get("log", False), raw.get("int", False)
    if not isinstance(log, bool) or not isinstance(integer, bool):
        raise _bad(key, "log and int are true or false")
    if not low < high:
        raise _bad(key, "min must be below max")
    if log and low <= 0:
        raise _bad(key, "a log range needs min > 0")
    if integer and math.ceil(low) > math.floor(high):
        raise _bad(key, "no integer lies between min and max")
    return Param(key, low=low, high=high, log=log, integer=integer)


def params_parse(raw: Any, *, method: str) -> list[Param]:
    """The space as given (`{"lora.r": [8, 16], "train.lr": {"min": 1e-4, "max": 1e-2,
    "log": true}}`), checked; DomainError naming `params.<key>` otherwise."""
    if not isinstance(raw, dict) or not raw:
        raise DomainError(ErrorCode.INVALID, "give at least one key to search over",
                          field="params")  # fmt: skip
    if len(raw) > MAX_KEYS:
        raise DomainError(ErrorCode.INVALID, f"at most {MAX_KEYS} keys", field="params")
    params = [_param(key, value, method) for key, value in raw.items()]
    keys = [p.key for p in params]
    for key in keys:  # `lora` and `lora.r` would set the same value twice
        if any(other.startswith(f"{key}.") for other in keys):
            raise _bad(key, "a key and a key inside it cannot both be searched")
    return params


def grid_size(params: list[Param]) -> int:
    return math.prod(len(p.values or ()) for p in params)


def members_grid(params: list[Param]) -> list[dict[str, Scalar]]:
    """Every combination of the value lists; the last key varies fastest."""
    keys = [p.key for p in params]
    return [dict(zip(keys, combo, strict=True)) for combo in
            itertools.product(*(p.values or () for p in params))]  # fmt: skip


def _draw(param: Param, rng: random.Random) -> Scalar:
    if param.values is not None:
        return param.values[rng.randrange(len(param.values))]
    assert param.low is not None and param.high is not None
    if param.log:
        value = math.exp(rng.uniform(math.log(param.low), math.log(param.high)))
    else:
        value = rng.uniform(param.low, param.high)
    if param.integer:
        return min(max(round(value), math.ceil(param.low)), math.floor(param.high))
    return float(f"{value:.6g}")  # a value people can read back and type


def members_random(params: list[Param], *, count: int, seed: int) -> list[dict[str, Scalar]]:
    """`count` members drawn from the space by a generator of its own seeded with `seed`
    (each key drawn in the order given, member after member)."""
    rng = random.Random(seed)
    return [{p.key: _draw(p, rng) for p in params} for _ in range(count)]
