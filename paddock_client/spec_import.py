"""Translate a verl or NeMo-RL GRPO config into a Paddock run spec.

`import_spec(source, data)` reads the config as those frameworks write it (a nested mapping
as parsed from their YAML, or a flat mapping of dotted keys as given on their command lines)
and returns `(spec, unmapped)`: a spec dict that `workers.spec` validates, holding only the
keys it set, and the dotted source keys it could not carry over (sorted). A value that is
not what the framework itself accepts raises `SpecImportError` naming the source key; so
does a translated value Paddock refuses (`top_p: 0.9`), naming both keys.

The client's (`paddock spec import`), not the data plane's: a Ray job never needs it, so it
is not in the `workers/` package every job ships. Light like `workers.spec`: PyYAML-free
even, no torch. The key-by-key table with notes is in docs/config-reference.md ("Importing a
verl or NeMo-RL config").
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from workers.spec import SpecError, spec_errors

__all__ = ["SOURCES", "SpecImportError", "import_spec"]

SOURCES = ("verl", "nemo-rl")

# PEFT names of every linear layer of a llama / qwen2 / qwen3 / mistral decoder layer: what
# `target_modules: all-linear` (verl) or `match_all_linear: true` (NeMo-RL) selects there.
ALL_LINEAR = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


class SpecImportError(SpecError):
    """A source config that cannot be translated; `.errors[i]["field"]` is the source key."""

    def __init__(self, key: str, message: str):
        super().__init__([{"field": key, "message": message}])
        self.key = key


class _Unmappable(Exception):
    """A valid value of the source framework with no Paddock equivalent: the key is listed."""


Convert = Callable[[str, Any], Any]


# --------------------------------------------------------------------------------------------
# reading the source: flattening and OmegaConf interpolations
# --------------------------------------------------------------------------------------------

_INTERP = re.compile(r"^\$\{(?:oc\.select:)?([A-Za-z0-9_.]+)(?:,([^}]*))?\}$")
_MISSING = "???"  # OmegaConf's mandatory-value marker: no value given


def _flatten(data: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for raw_key, value in data.items():
        if not isinstance(raw_key, str):
            where = f"{prefix}{raw_key!r}"
            raise SpecImportError(where, "keys must be strings")
        # Hydra override prefixes (+key=, ++key=) name the same key
        key = prefix + raw_key.lstrip("+")
        if isinstance(value, Mapping):
            out.update(_flatten(value, key + "."))
        else:
            out[key] = value
    return out


def _resolve(flat: dict[str, Any], key: str, trail: list[str]) -> Any:
    """The value of `key` with `${a.b}` and `${oc.select:a.b,default}` followed (the forms
    these frameworks' shipped configs use between their own keys), each key followed
    appended to `trail`; any other interpolation (`${mul:…}`, `${oc.env:…}`) is an error
    when a mapped key holds it."""
    value = flat[key]
    if not isinstance(value, str) or not value.startswith("${"):
        return None if value == _MISSING else value
    m = _INTERP.match(value)
    if m is None or key in trail:
        raise SpecImportError(
            key, f"is an interpolation this importer cannot resolve ({value}): give the value"
        )
    target, default = m.group(1), m.group(2)
    if target in flat:
        trail.append(key)
        return _resolve(flat, target, trail)
    if default is None:
        raise SpecImportError(key, f"refers to {target}, which the config does not set")
    default = default.strip().strip("\"'")
    return None if default == "null" else _scalar(default)


def _scalar(text: str) -> Any:
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return {"true": True, "false": False}.get(text.lower(), text)


# --------------------------------------------------------------------------------------------
# converters: check the type the source framework accepts, name the key when it is wrong
# --------------------------------------------------------------------------------------------


def _kind(v: Any) -> str:
    return f"{v!r} ({type(v).__name__})"


def _int(key: str, v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, int | float) or not float(v).is_integer():
        raise SpecImportError(key, f"must be an integer, got {_kind(v)}")
    return int(v)


def _float(key: str, v: Any) -> float:
    if isinstance(v, str):  # YAML 1.1 reads 1e-6 (no dot) as a string
        try:
            v = float(v)
        except ValueError:
            pass
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
        raise SpecImportError(key, f"must be a number, got {_kind(v)}")
    return float(v)


def _bool(key: str, v: Any) -> bool:
    if not isinstance(v, bool):
        raise SpecImportError(key, f"must be true or false, got {_kind(v)}")
    return v


def _str(key: str, v: Any) -> str:
    if not isinstance(v, str) or not v:
        raise SpecImportError(key, f"must be a non-empty string, got {_kind(v)}")
    return v


def _str_list(key: str, v: Any) -> list[str]:
    if isinstance(v, str):
        v = [p.strip() for p in v.split(",") if p.strip()]
    if not isinstance(v, list) or not all(isinstance(p, str) and p for p in v):
        raise SpecImportError(key, f"must be a list of strings, got {_kind(v)}")
    return v


def _float_list(key: str, v: Any) -> list[float]:
    if not isinstance(v, list):
        raise SpecImportError(key, f"must be a list of numbers, got {_kind(v)}")
    return [_float(key, x) for x in v]


def _mapping(key: str, v: Any) -> dict[str, Any]:
    if not isinstance(v, Mapping):
        raise SpecImportError(key, f"must be a mapping, got {_kind(v)}")
    return dict(v)


def _choice(table: Mapping[Any, Any], unmappable: tuple[Any, ...] = ()) -> Convert:
    """A value of `table` maps to its entry; one of `unmappable` is valid in the source but
    has no Paddock equivalent; anything else is an error listing what the source takes."""

    def convert(key: str, v: Any) -> Any:
        if isinstance(v, str | int | float | bool):  # bool before int: True is not 1 here
            for k, out in table.items():
                if k == v and type(k) is type(v):
                    return out
            if any(u == v and type(u) is type(v) for u in unmappable):
                raise _Unmappable
        allowed = ", ".join(str(x) for x in (*table, *unmappable))
        raise SpecImportError(key, f"must be one of {allowed}; got {_kind(v)}")

    return convert


def _only(expected: Any, convert: Convert = lambda k, v: v) -> Convert:
    """A key Paddock has no setting for, but whose value here is what Paddock always does
    (one PPO epoch, one turn): consumed when it has that value, listed otherwise."""

    def check(key: str, v: Any) -> None:
        if convert(key, v) != expected:
            raise _Unmappable

    return check


def _steps_or_off(key: str, v: Any) -> int:
    n = _int(key, v)
    return 0 if n <= 0 else n  # the frameworks write -1 (or null) for "never"


def _one_path(key: str, v: Any) -> str:
    """Data files: a path, or a list holding one (several files are several datasets there;
    Paddock reads one path, or a pattern of shards, which a list cannot be turned into)."""
    if isinstance(v, list):
        if len(v) != 1:
            raise _Unmappable
        v = v[0]
    return _str(key, v)


def _target_modules(key: str, v: Any) -> list[str]:
    if v == "all-linear":
        return list(ALL_LINEAR)
    return _str_list(key, v)


def _top_k(key: str, v: Any) -> int:
    k = _int(key, v)
    return 0 if k <= 0 else k  # -1 (verl, vLLM) and 0 (NeMo-RL null) are both off


# --------------------------------------------------------------------------------------------
# the translation engine
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Rule:
    src: str
    dst: str | None  # dotted Paddock key; None: checked and consumed, nothing set
    convert: Convert = lambda k, v: v
    # only when the spec built so far satisfies this (a vLLM key needs backend: vllm)
    when: Callable[[dict[str, Any]], bool] | None = None


class _Builder:
    def __init__(self, flat: dict[str, Any]):
        self.flat = flat
        self.spec: dict[str, Any] = {}
        self.origin: dict[str, str] = {}  # Paddock key -> source key it came from
        self.used: set[str] = set()

    def value(self, src: str) -> Any:
        return _resolve(self.flat, src, []) if src in self.flat else None

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

    def apply(self, rule: _Rule) -> None:
        if rule.src not in self.flat:
            return
        trail: list[str] = []
        v = _resolve(self.flat, rule.src, trail)
        if v is None or (rule.when is not None and not rule.when(self.spec)):
            return
        try:
            out = rule.convert(rule.src, v)
        except _Unmappable:
            return
        # a key whose value reached Paddock through an interpolation was carried over too
        self.used.update([rule.src, *trail, *self._targets(trail)])
        if rule.dst is not None:
            self.set(rule.dst, out, rule.src)

    def _targets(self, trail: list[str]) -> list[str]:
        out = []
        for key in trail:
            m = _INTERP.match(str(self.flat[key]))
            if m:
                out.append(m.group(1))
        return out

    def apply_mapping(self, src: str, dst: str) -> None:
        """A free-form mapping of the source (chat template keyword arguments)."""
        sub = self.subtree(src)
        if sub:
            self.set(dst, sub, src)
            self.consume(*(f"{src}.{k}" for k in sub))

    def consume(self, *srcs: str) -> None:
        self.used.update(s for s in srcs if s in self.flat)


def _is_vllm(spec: dict[str, Any]) -> bool:
    return spec.get("rollout", {}).get("backend") == "vllm"


_BACKENDS = _choice({"vllm": "vllm", "hf": "torch"}, unmappable=("sglang", "megatron", "trtllm"))


def _optimizer_rules(prefix: str) -> list[_Rule]:
    """AdamW's settings, under `prefix` in both frameworks."""
    return [
        _Rule(f"{prefix}.lr", "train.lr", _float),
        _Rule(f"{prefix}.weight_decay", "train.weight_decay", _float),
        _Rule(f"{prefix}.betas", "train.betas", _float_list),
    ]


def _sampling_rules(prefix: str, backend: str, vllm: str) -> list[_Rule]:
    """The engine and its sampling settings under `prefix`; the vLLM engine's own settings
    under `vllm`, which map only when the engine is vLLM."""
    return [
        _Rule(f"{prefix}.{backend}", "rollout.backend", _BACKENDS),
        _Rule(f"{prefix}.temperature", "rollout.temperature", _float),
        _Rule(f"{prefix}.top_p", "rollout.top_p", _float),
        _Rule(f"{prefix}.top_k", "rollout.top_k", _top_k),
        _Rule(f"{vllm}.gpu_memory_utilization", "rollout.gpu_memory_utilization", _float, _is_vllm),
        _Rule(f"{vllm}.enforce_eager", "rollout.enforce_eager", _bool, _is_vllm),
    ]


# --------------------------------------------------------------------------------------------
# verl (ppo_trainer.yaml and its GRPO recipes)
# --------------------------------------------------------------------------------------------

_V_ACTOR = "actor_rollout_ref.actor"
_V_ROLL = "actor_rollout_ref.rollout"
_V_MODEL = "actor_rollout_ref.model"
_V_RC = "algorithm.rollout_correction"

_VERL_LOSS_AGG = _choice(
    {
        "token-mean": "token_mean",
        "seq-mean-token-mean": "seq_mean_token_mean",
        "seq-mean-token-sum-norm": "seq_mean_token_sum_norm",
    },
    unmappable=("seq-mean-token-sum",),
)
# k1 is `kl` in verl; k3 is `low_var_kl` (the same estimator, clamped)
_VERL_KL = _choice(
    {"kl": "k1", "k1": "k1", "low_var_kl": "k3", "k3": "k3"},
    unmappable=("abs", "mse", "k2", "full", "k1+", "k2+", "k3+", "low_var_kl+"),
)
_VERL_IS_LEVEL = _choice({"token": "token", "sequence": "sequence"}, unmappable=("geometric",))

_VERL_RULES = [
    _Rule(f"{_V_MODEL}.path", "model.path", _str),
    _Rule(f"{_V_MODEL}.lora_alpha", "lora.alpha", _float),
    _Rule(f"{_V_MODEL}.target_modules", "lora.target_modules", _target_modules),
    _Rule(f"{_V_MODEL}.enable_gradient_checkpointing", "train.activation_checkpointing", _bool),
    _Rule(f"{_V_MODEL}.trust_remote_code", None, _only(False, _bool)),
    _Rule(f"{_V_MODEL}.use_remove_padding", None, _bool),  # packing is Paddock's own choice
    *_optimizer_rules(f"{_V_ACTOR}.optim"),
    _Rule(f"{_V_ACTOR}.grad_clip", "train.grad_clip", _float),
    # clip_ratio is the symmetric default; clip_ratio_low / _high, when set, win (as in verl)
    _Rule(f"{_V_ACTOR}.clip_ratio", "algorithm.clip_eps_low", _float),
    _Rule(f"{_V_ACTOR}.clip_ratio", "algorithm.clip_eps_high", _float),
    _Rule(f"{_V_ACTOR}.clip_ratio_low", "algorithm.clip_eps_low", _float),
    _Rule(f"{_V_ACTOR}.clip_ratio_high", "algorithm.clip_eps_high", _float),
    _Rule(f"{_V_ACTOR}.loss_agg_mode", "algorithm.loss_agg", _VERL_LOSS_AGG),
    _Rule(f"{_V_ACTOR}.kl_loss_type", "algorithm.kl_estimator", _VERL_KL),
    _Rule(f"{_V_ACTOR}.ppo_micro_batch_size_per_gpu", "train.micro_batch_size", _int),
    _Rule(f"{_V_ACTOR}.ppo_epochs", None, _only(1, _int)),  # one optimizer step per batch
    _Rule(f"{_V_ACTOR}.entropy_coeff", None, _only(0.0, _float)),
    _Rule(f"{_V_ACTOR}.policy_loss.loss_mode", None, _only("vanilla")),
    *_sampling_rules(_V_ROLL, "name", _V_ROLL),
    _Rule(f"{_V_ROLL}.n", "algorithm.num_generations", _int),
    _Rule(f"{_V_ROLL}.do_sample", None, _only(True, _bool)),
    _Rule(f"{_V_ROLL}.multi_turn.enable", None, _only(False, _bool)),
    _Rule("data.train_batch_size", "train.prompts_per_step", _int),
    # rollout.response_length is what the engine uses; verl fills it from data's by default
    _Rule("data.max_response_length", "rollout.max_new_tokens", _int),
    _Rule(f"{_V_ROLL}.response_length", "rollout.max_new_tokens", _int),
    _Rule("data.max_prompt_length", "data.max_prompt_tokens", _int),
    _Rule(f"{_V_ROLL}.prompt_length", "data.max_prompt_tokens", _int),
    _Rule("data.train_files", "data.path", _one_path),
    _Rule("data.val_files", "data.eval_path", _one_path),
    _Rule("data.prompt_key", "data.prompt_key", _str),
    _Rule("data.seed", "seed", _int),
    _Rule("data.return_raw_chat", None, _bool),
    _Rule("algorithm.filter_groups.enable", "algorithm.dynamic_sampling", _bool),
    _Rule(f"{_V_RC}.rollout_is", "algorithm.rollout_is", _VERL_IS_LEVEL),
    _Rule(f"{_V_RC}.rollout_is_threshold", "algorithm.rollout_is_threshold", _float),
    _Rule(f"{_V_RC}.bypass_mode", "algorithm.bypass_mode", _bool),
    _Rule("trainer.total_training_steps", "train.steps", _int),
    _Rule("trainer.save_freq", "checkpoint.every", _steps_or_off),
    _Rule("trainer.max_actor_ckpt_to_keep", "checkpoint.keep_last", _int),
    _Rule("trainer.test_freq", "train.eval_every", _steps_or_off),
    _Rule("trainer.critic_warmup", None, _only(0, _int)),
    _Rule("critic.enable", None, _only(False, _bool)),
    _Rule("reward_model.enable", None, _only(False, _bool)),
]


def _verl(b: _Builder) -> None:
    for rule in _VERL_RULES:
        b.apply(rule)
    b.apply_mapping("data.apply_chat_template_kwargs", "data.chat_template_kwargs")
    _verl_overlong_prompts(b)
    # lora_rank 0 is verl's full fine-tuning: Paddock trains LoRA only, so it is listed
    b.apply(_Rule(f"{_V_MODEL}.lora_rank", "lora.r", lambda k, v: _int(k, v) or _unmappable()))
    # KL to the reference: a loss term (use_kl_loss) is Paddock's; KL in the reward is not
    use_kl = b.value(f"{_V_ACTOR}.use_kl_loss")
    if use_kl is not None:
        b.apply(_Rule(f"{_V_ACTOR}.use_kl_loss", None, _bool))
        if use_kl:
            b.apply(_Rule(f"{_V_ACTOR}.kl_loss_coef", "algorithm.kl_coef", _float))
        else:
            b.set("algorithm.kl_coef", 0.0, f"{_V_ACTOR}.use_kl_loss")
            b.consume(f"{_V_ACTOR}.kl_loss_coef")
    if b.value("algorithm.use_kl_in_reward") is False:  # then kl_ctrl has no effect in verl
        b.consume("algorithm.use_kl_in_reward", "algorithm.kl_penalty")
        b.consume(*(k for k in b.flat if k.startswith("algorithm.kl_ctrl.")))
    _verl_advantage(b)
    # Without rollout_correction verl recomputes π_old with the trainer: bypass_mode false
    if b.get("algorithm.bypass_mode") is None:
        b.set("algorithm.bypass_mode", False, _V_RC)
    # One optimizer step per batch: a mini-batch the size of the batch is what Paddock does
    mini, batch = b.value(f"{_V_ACTOR}.ppo_mini_batch_size"), b.get("train.prompts_per_step")
    if mini is not None and _int(f"{_V_ACTOR}.ppo_mini_batch_size", mini) == batch:
        b.consume(f"{_V_ACTOR}.ppo_mini_batch_size")
    # verl's files hold chat messages and the gold answer under reward_model.ground_truth
    if b.get("data.path") is not None:
        b.set("data.task", "dataset", "data.train_files")
        b.set("data.answer_key", "reward_model.ground_truth", "data.train_files")


def _verl_overlong_prompts(b: _Builder) -> None:
    # filter_overlong_prompts drops them before truncation could apply; without it
    # truncation: error refuses the dataset; left/right/middle cut prompts, which Paddock never does
    fkey, tkey = "data.filter_overlong_prompts", "data.truncation"
    filt, trunc = b.value(fkey), b.value(tkey)
    if filt is not None and _bool(fkey, filt):
        b.set("data.overlong_prompts", "drop", fkey)
        b.consume(fkey, tkey)
        return
    b.consume(fkey)
    if trunc is not None:
        b.apply(_Rule(tkey, "data.overlong_prompts", _choice(
            {"error": "error"}, unmappable=("left", "right", "middle"))))  # fmt: skip


def _verl_advantage(b: _Builder) -> None:
    key = "algorithm.adv_estimator"
    est = b.value(key)
    if est is None:
        return
    known = ("gae", "reinforce_plus_plus", "reinforce_plus_plus_baseline", "remax", "opo",
             "grpo_passk", "gpg", "cispo", "gdpo")  # fmt: skip
    if est not in ("grpo", "rloo", *known):
        raise SpecImportError(key, f"must be a verl advantage estimator, got {_kind(est)}")
    if est == "rloo":
        b.set("algorithm.advantage", "rloo", key)
    elif est == "grpo":
        std_key = "algorithm.norm_adv_by_std_in_grpo"
        by_std = b.value(std_key)
        by_std = True if by_std is None else _bool(std_key, by_std)
        b.set("algorithm.advantage", "grpo" if by_std else "dr_grpo", key)
        b.consume(std_key)
    else:
        return  # a critic or another estimator: listed
    b.consume(key, "algorithm.gamma", "algorithm.lam")  # no effect on an outcome reward


def _unmappable() -> Any:
    raise _Unmappable


# --------------------------------------------------------------------------------------------
# NeMo-RL (examples/configs/grpo_*.yaml)
# --------------------------------------------------------------------------------------------

_N_GEN = "policy.generation"
_N_LORA = "policy.dtensor_cfg.lora_cfg"
_N_KL = _choice({"k1": "k1", "k3": "k3"}, unmappable=("k2",))

_NEMO_RULES = [
    _Rule("policy.model_name", "model.path", _str),
    _Rule(
        "policy.precision",
        "model.dtype",
        _choice({"bfloat16": "bfloat16", "float32": "float32"}, unmappable=("float16",)),
    ),
    _Rule("policy.train_micro_batch_size", "train.micro_batch_size", _int),
    _Rule("policy.max_grad_norm", "train.grad_clip", _float),
    _Rule("policy.logprob_chunk_size", "train.logprob_chunk_size", _int),
    _Rule("policy.dtensor_cfg.activation_checkpointing", "train.activation_checkpointing", _bool),
    _Rule("policy.optimizer.name", None, _only("torch.optim.AdamW")),
    *_optimizer_rules("policy.optimizer.kwargs"),
    *_sampling_rules(_N_GEN, "backend", f"{_N_GEN}.vllm_cfg"),
    _Rule(f"{_N_GEN}.max_new_tokens", "rollout.max_new_tokens", _int),
    _Rule(f"{_N_GEN}.stop_strings", "rollout.stop", _str_list),
    _Rule("grpo.num_prompts_per_step", "train.prompts_per_step", _int),
    _Rule("grpo.num_generations_per_prompt", "algorithm.num_generations", _int),
    _Rule("grpo.max_num_steps", "train.steps", _int),
    _Rule("grpo.seed", "seed", _int),
    _Rule("grpo.val_period", "train.eval_every", _steps_or_off),
    _Rule("grpo.max_val_samples", "data.eval_size", _int),
    _Rule("grpo.use_dynamic_sampling", "algorithm.dynamic_sampling", _bool),
    _Rule("grpo.max_rollout_turns", None, _only(1, _int)),
    _Rule("grpo.overlong_filtering", None, _only(False, _bool)),
    _Rule("grpo.async_grpo.enabled", "async.enabled", _bool),
    _Rule("grpo.async_grpo.max_trajectory_age_steps", "async.max_staleness", _int),
    _Rule("loss_fn.reference_policy_kl_penalty", "algorithm.kl_coef", _float),
    _Rule("loss_fn.reference_policy_kl_type", "algorithm.kl_estimator", _N_KL),
    _Rule("loss_fn.ratio_clip_min", "algorithm.clip_eps_low", _float),
    _Rule("loss_fn.ratio_clip_max", "algorithm.clip_eps_high", _float),
    _Rule(
        "loss_fn.token_level_loss",
        "algorithm.loss_agg",
        _choice({True: "token_mean", False: "seq_mean_token_mean"}),
    ),
    _Rule("loss_fn.use_on_policy_kl_approximation", None, _only(False, _bool)),
    _Rule("loss_fn.force_on_policy_ratio", None, _only(False, _bool)),
    _Rule("checkpointing.save_period", "checkpoint.every", _steps_or_off),
    _Rule("data.max_input_seq_length", "data.max_prompt_tokens", _int),
]

# Where NeMo-RL's data layouts keep the dataset: the per-split sections of newer versions
# (data.train / data.validation, with data.default for both) and the flat keys of older ones.
_NEMO_DATA = {
    "data.path": ("data.train.data_path", "data.default.data_path", "data.train_data_path"),
    "data.eval_path": ("data.validation.data_path", "data.val_data_path"),
    "data.prompt_key": ("data.train.input_key", "data.default.input_key", "data.input_key"),
    "data.answer_key": ("data.train.output_key", "data.default.output_key", "data.output_key"),
    "data.eval_prompt_key": ("data.validation.input_key",),
    "data.eval_answer_key": ("data.validation.output_key",),
    "data.split": ("data.train.split", "data.train_split"),
    "data.eval_split": ("data.validation.split", "data.val_split"),
}


def _nemo(b: _Builder) -> None:
    for rule in _NEMO_RULES:
        b.apply(rule)
    for dst, srcs in _NEMO_DATA.items():
        for src in srcs:  # the first one set wins; the others stay listed
            if b.value(src) is not None:
                b.apply(_Rule(src, dst, _str))
                break
    if b.get("data.path") is not None:
        b.set("data.task", "dataset", b.origin["data.path"])
        for key in ("data.train.dataset_name", "data.default.dataset_name", "data.dataset_name"):
            # ResponseDataset is NeMo-RL's reader of a local file; a named one is a hub set
            if b.value(key) == "ResponseDataset":
                b.consume(key)
    b.apply_mapping("policy.tokenizer.chat_template_kwargs", "data.chat_template_kwargs")
    _nemo_lora(b)
    _nemo_advantage(b)
    _nemo_correction(b)
    # NeMo-RL's math environment scores with math-verify, as Paddock's math_verify term
    if b.value("env.math.math_verify_impl") in ("hf_math_verify", "math_verify"):
        b.set("reward.functions", [{"name": "math_verify"}], "env.math.math_verify_impl")
        b.consume("env.math.math_verify_impl")
    _nemo_overlong(b)
    # NeMo-RL generates with its own weights while in-flight updates are off: wait for them
    if b.get("async.enabled"):
        key = "grpo.async_grpo.in_flight_weight_updates"
        in_flight = b.value(key)
        mode = "keep" if in_flight is not None and _bool(key, in_flight) else "wait"
        b.set("async.weight_update", mode, key)
        b.consume(key)
    # one optimizer step per batch of num_prompts_per_step × num_generations sequences
    gbs = b.value("policy.train_global_batch_size")
    p, g = b.get("train.prompts_per_step"), b.get("algorithm.num_generations")
    key = "policy.train_global_batch_size"
    if gbs is not None and p is not None and g is not None and _int(key, gbs) == p * g:
        b.consume("policy.train_global_batch_size")
    if b.value("checkpointing.enabled") is False:
        b.set("checkpoint.every", 0, "checkpointing.enabled")
        b.consume("checkpointing.enabled")
    elif b.value("checkpointing.enabled") is True:
        b.consume("checkpointing.enabled")
    tok = b.value("policy.tokenizer.name")
    if tok is not None and tok == b.get("model.path"):
        b.consume("policy.tokenizer.name")


def _nemo_lora(b: _Builder) -> None:
    enabled = b.value(f"{_N_LORA}.enabled")
    if enabled is None:
        return
    b.apply(_Rule(f"{_N_LORA}.enabled", None, _bool))
    if not enabled:
        return
    b.apply(_Rule(f"{_N_LORA}.dim", "lora.r", _int))
    b.apply(_Rule(f"{_N_LORA}.alpha", "lora.alpha", _float))
    b.apply(_Rule(f"{_N_LORA}.dropout", "lora.dropout", _float))
    if b.value(f"{_N_LORA}.match_all_linear") is True:
        b.set("lora.target_modules", list(ALL_LINEAR), f"{_N_LORA}.match_all_linear")
        b.consume(f"{_N_LORA}.match_all_linear", f"{_N_LORA}.target_modules")
    else:
        b.apply(_Rule(f"{_N_LORA}.match_all_linear", None, _bool))
        b.apply(_Rule(f"{_N_LORA}.target_modules", "lora.target_modules", _str_list))


def _nemo_advantage(b: _Builder) -> None:
    loo_key, norm_key = "grpo.use_leave_one_out_baseline", "grpo.normalize_rewards"
    loo, norm = b.value(loo_key), b.value(norm_key)
    loo = False if loo is None else _bool(loo_key, loo)
    norm = True if norm is None else _bool(norm_key, norm)
    # Leave-one-out then divided by the std is G/(G−1) × GRPO's advantage: a constant factor,
    # which Adam's update does not see; without the std it is RLOO, without either Dr.GRPO.
    advantage = "grpo" if norm else ("rloo" if loo else "dr_grpo")
    b.set("algorithm.advantage", advantage, norm_key)
    b.consume(loo_key, norm_key)


def _nemo_correction(b: _Builder) -> None:
    # NeMo-RL computes π_old with the trainer (prev_logprobs): Paddock's bypass_mode: false
    b.set("algorithm.bypass_mode", False, "loss_fn")
    key = "loss_fn.use_importance_sampling_correction"
    on = b.value(key)
    if on is None:
        return
    b.apply(_Rule(key, None, _bool))
    if not on:
        return
    seq_key = "loss_fn.sequence_level_importance_ratios"
    seq = b.value(seq_key)
    level = "sequence" if seq is not None and _bool(seq_key, seq) else "token"
    b.set("algorithm.rollout_is", level, key)
    b.consume(seq_key)
    b.apply(
        _Rule(
            "loss_fn.truncated_importance_sampling_ratio", "algorithm.rollout_is_threshold", _float
        )
    )


def _nemo_overlong(b: _Builder) -> None:
    base = "grpo.reward_shaping"
    enabled = b.value(f"{base}.enabled")
    if enabled is None:
        return
    b.apply(_Rule(f"{base}.enabled", None, _bool))
    if not enabled:  # its other keys then do nothing in NeMo-RL either
        b.consume(*(k for k in b.flat if k.startswith(f"{base}.")))
        return
    buffer = b.value(f"{base}.overlong_buffer_length")
    if buffer is None:
        return
    term: dict[str, Any] = {
        "name": "overlong_penalty",
        "buffer": _int(f"{base}.overlong_buffer_length", buffer),
    }
    penalty = b.value(f"{base}.overlong_buffer_penalty")
    if penalty is not None:
        term["weight"] = _float(f"{base}.overlong_buffer_penalty", penalty)
    max_len = b.value(f"{base}.max_response_length")
    if max_len is not None:
        term["max_new_tokens"] = _int(f"{base}.max_response_length", max_len)
    terms = b.get("reward.functions") or [{"name": "exact_match"}]
    b.set("reward.functions", [*terms, term], f"{base}.overlong_buffer_length")
    b.consume(*(f"{base}.{k}" for k in (
        "overlong_buffer_length", "overlong_buffer_penalty", "max_response_length")))  # fmt: skip


# --------------------------------------------------------------------------------------------
# entry point
# --------------------------------------------------------------------------------------------

_TRANSLATORS = {"verl": _verl, "nemo-rl": _nemo}


def import_spec(source: str, data: dict) -> tuple[dict, list[str]]:
    """Translate `data`, a config of `source` ("verl" or "nemo-rl"), into a Paddock spec dict.

    Returns the spec (only the keys set from the source; `workers.spec` fills the rest with
    its defaults) and the dotted source keys that were not carried over, sorted. Keys set to
    null, and the frameworks' `_target_` class names, are neither. Raises `SpecImportError`
    naming the source key for a value the source itself would refuse, or one that translates
    to a value Paddock refuses."""
    translate = _TRANSLATORS.get(source)
    if translate is None:
        raise SpecImportError("source", f"must be one of {', '.join(SOURCES)}; got {source!r}")
    if not isinstance(data, Mapping):
        raise SpecImportError("(root)", f"must be a mapping of sections, got {_kind(data)}")
    flat = {k: v for k, v in _flatten(data).items() if not k.endswith("_target_")}
    b = _Builder(flat)
    translate(b)
    errors = spec_errors(b.spec)
    if errors:
        first = errors[0]
        src = _origin_of(b.origin, first["field"])
        raise SpecImportError(src or first["field"], f"{first['message']} (as {first['field']})")
    unmapped = sorted(k for k, v in flat.items() if k not in b.used and v is not None)
    return b.spec, unmapped


def _origin_of(origin: dict[str, str], field: str) -> str | None:
    # reward.functions.1.buffer came from the key that set reward.functions
    parts = field.split(".")
    for i in range(len(parts), 0, -1):
        src = origin.get(".".join(parts[:i]))
        if src is not None:
            return src
    return None
