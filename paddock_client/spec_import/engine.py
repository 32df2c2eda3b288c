"""The translation engine of `spec_import`: a source config read as flat dotted keys, its
OmegaConf interpolations followed, converters that check what the source framework accepts
(naming the key when a value is wrong), and the `Builder` that sets Paddock keys from rules
and remembers which source keys it carried over."""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from workers.spec import SpecError

# PEFT names of every linear layer of a llama / qwen2 / qwen3 / mistral decoder layer: what
# `target_modules: all-linear` (verl) or `match_all_linear: true` (NeMo-RL) selects there.
ALL_LINEAR = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


class SpecImportError(SpecError):
    """A source config that cannot be translated; `.errors[i]["field"]` is the source key."""

    def __init__(self, key: str, message: str):
        super().__init__([{"field": key, "message": message}])
        self.key = key


class Unmappable(Exception):
    """A valid value of the source framework with no Paddock equivalent: the key is listed."""


def unmappable() -> Any:
    raise Unmappable


class Unresolved(str):
    """A value holding a shell expansion the importer cannot know (`$HOME`, `$(( … ))`): the
    key holding it is left out and listed, with `why`."""

    why: str

    def __new__(cls, text: str, why: str) -> Unresolved:
        obj = super().__new__(cls, text)
        obj.why = why
        return obj


Convert = Callable[[str, Any], Any]


# --------------------------------------------------------------------------------------------
# reading the source: flattening and OmegaConf interpolations
# --------------------------------------------------------------------------------------------

INTERP = re.compile(r"^\$\{(?:oc\.select:)?([A-Za-z0-9_.]+)(?:,([^}]*))?\}$")
MISSING = "???"  # OmegaConf's mandatory-value marker: no value given


def flatten(data: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for raw_key, value in data.items():
        if not isinstance(raw_key, str):
            where = f"{prefix}{raw_key!r}"
            raise SpecImportError(where, "keys must be strings")
        # Hydra override prefixes (+key=, ++key=) name the same key
        key = prefix + raw_key.lstrip("+")
        if isinstance(value, Mapping):
            out.update(flatten(value, key + "."))
        else:
            out[key] = value
    return out


def absolute(key: str, target: str) -> str:
    """OmegaConf's relative interpolation: `${.x}` in a.b.c is a.b.x, `${..x}` is a.x."""
    if not target.startswith("."):
        return target
    dots = len(target) - len(target.lstrip("."))
    parents = key.split(".")[:-dots]
    return ".".join([*parents, target[dots:]])


def resolve(flat: dict[str, Any], key: str, trail: list[str]) -> Any:
    """The value of `key` with `${a.b}`, `${.b}` and `${oc.select:a.b,default}` followed (the
    forms these frameworks' shipped configs use between their own keys), each key followed
    appended to `trail`; any other interpolation (`${mul:…}`, `${oc.env:…}`) is an error
    when a mapped key holds it."""
    value = flat[key]
    if isinstance(value, Unresolved):
        return value
    if not isinstance(value, str) or not value.startswith("${"):
        return None if value == MISSING else value
    m = INTERP.match(value)
    if m is None or key in trail:
        raise SpecImportError(
            key, f"is an interpolation this importer cannot resolve ({value}): give the value"
        )
    target, default = absolute(key, m.group(1)), m.group(2)
    if target in flat:
        trail.append(key)
        return resolve(flat, target, trail)
    if default is None:
        raise SpecImportError(key, f"refers to {target}, which the config does not set")
    default = default.strip().strip("\"'")
    return None if default == "null" else scalar(default)


def scalar(text: str) -> Any:
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return {"true": True, "false": False}.get(text.lower(), text)


# --------------------------------------------------------------------------------------------
# converters: check the type the source framework accepts, name the key when it is wrong
# --------------------------------------------------------------------------------------------


def kind(v: Any) -> str:
    return f"{v!r} ({type(v).__name__})"


def as_int(key: str, v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, int | float) or not float(v).is_integer():
        raise SpecImportError(key, f"must be an integer, got {kind(v)}")
    return int(v)


def as_float(key: str, v: Any) -> float:
    if isinstance(v, str):  # YAML 1.1 reads 1e-6 (no dot) as a string
        try:
            v = float(v)
        except ValueError:
            pass
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
        raise SpecImportError(key, f"must be a number, got {kind(v)}")
    return float(v)


def as_bool(key: str, v: Any) -> bool:
    if not isinstance(v, bool):
        raise SpecImportError(key, f"must be true or false, got {kind(v)}")
    return v


def as_str(key: str, v: Any) -> str:
    if not isinstance(v, str) or not v:
        raise SpecImportError(key, f"must be a non-empty string, got {kind(v)}")
    return v


def as_str_list(key: str, v: Any) -> list[str]:
    if isinstance(v, str):
        v = [p.strip() for p in v.split(",") if p.strip()]
    if not isinstance(v, list) or not all(isinstance(p, str) and p for p in v):
        raise SpecImportError(key, f"must be a list of strings, got {kind(v)}")
    return v


def as_float_list(key: str, v: Any) -> list[float]:
    if not isinstance(v, list):
        raise SpecImportError(key, f"must be a list of numbers, got {kind(v)}")
    return [as_float(key, x) for x in v]


def as_mapping(key: str, v: Any) -> dict[str, Any]:
    if not isinstance(v, Mapping):
        raise SpecImportError(key, f"must be a mapping, got {kind(v)}")
    return dict(v)


def choice(table: Mapping[Any, Any], unmappable: tuple[Any, ...] = ()) -> Convert:
    """A value of `table` maps to its entry; one of `unmappable` is valid in the source but
    has no Paddock equivalent; anything else is an error listing what the source takes."""

    def convert(key: str, v: Any) -> Any:
        if isinstance(v, str | int | float | bool):  # bool before int: True is not 1 here
            for k, out in table.items():
                if k == v and type(k) is type(v):
                    return out
            if any(u == v and type(u) is type(v) for u in unmappable):
                raise Unmappable
        allowed = ", ".join(str(x) for x in (*table, *unmappable))
        raise SpecImportError(key, f"must be one of {allowed}; got {kind(v)}")

    return convert


def only(expected: Any, convert: Convert = lambda k, v: v) -> Convert:
    """A key Paddock has no setting for, but whose value here is what Paddock always does
    (one PPO epoch, one turn): consumed when it has that value, listed otherwise."""

    def check(key: str, v: Any) -> None:
        if convert(key, v) != expected:
            raise Unmappable

    return check


def steps_or_off(key: str, v: Any) -> int:
    n = as_int(key, v)
    return 0 if n <= 0 else n  # the frameworks write -1 (or null) for "never"


def one_path(key: str, v: Any) -> str:
    """Data files: a path, or a list holding one (several files are several datasets there;
    Paddock reads one path, or a pattern of shards, which a list cannot be turned into)."""
    if isinstance(v, list):
        if len(v) != 1:
            raise Unmappable
        v = v[0]
    return as_str(key, v)


def target_modules(key: str, v: Any) -> list[str]:
    if v == "all-linear":
        return list(ALL_LINEAR)
    return as_str_list(key, v)


def top_k(key: str, v: Any) -> int:
    k = as_int(key, v)
    return 0 if k <= 0 else k  # -1 (verl, vLLM) and 0 (NeMo-RL null) are both off


# --------------------------------------------------------------------------------------------
# the translation engine
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Rule:
    src: str
    dst: str | None  # dotted Paddock key; None: checked and consumed, nothing set
    convert: Convert = lambda k, v: v
    # only when the spec built so far satisfies this (a vLLM key needs backend: vllm)
    when: Callable[[dict[str, Any]], bool] | None = None


class Builder:
    def __init__(self, flat: dict[str, Any]):
        self.flat = flat
        self.spec: dict[str, Any] = {}
        self.origin: dict[str, str] = {}  # Paddock key -> source key it came from
        self.used: set[str] = set()
        self.notes: dict[str, str] = {}  # source key -> why it was not (or not whole) carried

    def value(self, src: str) -> Any:
        """The source key's value, interpolations followed; None when it is unset, null, or
        a shell expansion this importer cannot know (noted, and so listed)."""
        if src not in self.flat:
            return None
        return self._known(src, resolve(self.flat, src, []))

    def _known(self, src: str, value: Any) -> Any:
        if isinstance(value, Unresolved):
            self.note(src, value.why)
            return None
        return value

    def subtree(self, prefix: str) -> dict[str, Any] | None:
        """The keys under `prefix` as one mapping (flattening split it), or None if none."""
        n = len(prefix) + 1
        keys = [k for k in self.flat if k.startswith(prefix + ".")]
        return {k[n:]: self.value(k) for k in keys} if keys else None

    def get(self, dst: str) -> Any:
        node: Any = self.spec
        for part in dst.split("."):
            if not isinstance(node, dict) or part not in node:
                return None
            node = node[part]
        return node

    def set(self, dst: str, value: Any, src: str) -> None:
        node = self.spec
        *parents, leaf = dst.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
        self.origin[dst] = src

    def apply(self, rule: Rule) -> None:
        if rule.src not in self.flat:
            return
        trail: list[str] = []
        v = self._known(rule.src, resolve(self.flat, rule.src, trail))
        if v is None or (rule.when is not None and not rule.when(self.spec)):
            return
        try:
            out = rule.convert(rule.src, v)
        except Unmappable:
            return
        # a key whose value reached Paddock through an interpolation was carried over too
        self.consume(rule.src, *trail, *self._targets(trail))
        if rule.dst is not None:
            self.set(rule.dst, out, rule.src)

    def _targets(self, trail: list[str]) -> list[str]:
        out = []
        for key in trail:
            m = INTERP.match(str(self.flat[key]))
            if m:
                out.append(absolute(key, m.group(1)))
        return out

    def apply_mapping(self, src: str, dst: str) -> None:
        """A free-form mapping of the source (chat template keyword arguments)."""
        sub = self.subtree(src)
        if sub:
            self.set(dst, sub, src)
            self.consume(*(f"{src}.{k}" for k in sub))

    def consume(self, *srcs: str) -> None:
        # a key holding a shell expansion this importer could not resolve stays listed
        self.used.update(s for s in srcs if s in self.flat and not self._unresolved(s))

    def consume_under(self, prefix: str) -> None:
        self.consume(*(k for k in self.flat if k.startswith(prefix + ".")))

    def _unresolved(self, key: str) -> bool:
        return isinstance(self.flat[key], Unresolved)

    def note(self, src: str, text: str) -> None:
        """Why `src` stays listed (or was carried over only in part), for the user."""
        if src in self.flat:
            self.notes[src] = text

    def consume_disabled(self, *, keep: tuple[str, ...] = ()) -> None:
        """A section switched off (`enabled: false`, verl's `enable: false`) does nothing in
        the source framework, so its settings are not differences Paddock would drop: they
        are consumed with the switch. `keep` names sections whose switch is itself a
        difference (NeMo-RL's `lora_cfg.enabled: false` is full fine-tuning), left listed."""
        for key in list(self.flat):
            section, _, leaf = key.rpartition(".")
            if leaf not in ("enabled", "enable") or not section or section in keep:
                continue
            try:
                off = resolve(self.flat, key, []) is False
            except SpecImportError:
                continue  # an interpolation this importer cannot follow: stays listed
            if off:
                self.consume(key)
                self.consume_under(section)


def is_vllm(spec: dict[str, Any]) -> bool:
    return spec.get("rollout", {}).get("backend") == "vllm"


BACKENDS = choice({"vllm": "vllm", "hf": "torch"}, unmappable=("sglang", "megatron", "trtllm"))


def optimizer_rules(prefix: str) -> list[Rule]:
    """AdamW's settings, under `prefix` in both frameworks."""
    return [
        Rule(f"{prefix}.lr", "train.lr", as_float),
        Rule(f"{prefix}.weight_decay", "train.weight_decay", as_float),
        Rule(f"{prefix}.betas", "train.betas", as_float_list),
    ]


def sampling_rules(prefix: str, backend: str, vllm: str) -> list[Rule]:
    """The engine and its sampling settings under `prefix`; the vLLM engine's own settings
    under `vllm`, which map only when the engine is vLLM."""
    return [
        Rule(f"{prefix}.{backend}", "rollout.backend", BACKENDS),
        Rule(f"{prefix}.temperature", "rollout.temperature", as_float),
        Rule(f"{prefix}.top_p", "rollout.top_p", as_float),
        Rule(f"{prefix}.top_k", "rollout.top_k", top_k),
        Rule(f"{vllm}.gpu_memory_utilization", "rollout.gpu_memory_utilization", as_float, is_vllm),
        Rule(f"{vllm}.enforce_eager", "rollout.enforce_eager", as_bool, is_vllm),
    ]
