"""The run spec: the single source of truth for a training run's configuration.

The control plane imports this module of `workers` (to validate configs and to serve the JSON
Schema that drives the launcher form), beside `events` and `names` only, so it must stay
light: pydantic and PyYAML only — never torch, transformers or a rollout engine.

Names follow what the RL field already uses (NeMo-RL, verl): `algorithm.num_generations` is
the group size G, `clip_eps_low/high` the asymmetric PPO clip range, and so on.
"""

from __future__ import annotations

import copy
import math
import re
from pathlib import Path
from typing import Annotated, Any, Literal, get_args
from urllib.parse import urlsplit

import regex
import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from . import names
from .spec_limits import bound, limit_errors

__all__ = [
    "RunSpec",
    "SpecError",
    "apply_overrides",
    "load_spec",
    "spec_errors",
    "spec_json_schema",
    "stored_spec",
]

# The one integer range of a spec: what the control plane's columns hold. Counts that reach a
# 32-bit column have their own bounds: train.steps (a run's total_steps), resources.max_attempts,
# and seed (a launch of N seeds validates the spec of each run, seed .. seed + N - 1).
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
MAX_STEPS = 10_000_000
MAX_SEED = 2**31 - 1

# Error type used by cross-field checks that must point at a field other than the one being
# validated; `spec_errors` reads the path from its context.
_FIELD_ERROR = "spec_field"


def _field_error(path: str, message: str) -> PydanticCustomError:
    return PydanticCustomError(
        _FIELD_ERROR, "{path}: {message}", {"path": path, "message": message}
    )


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_by_name=True, validate_by_alias=True)


# --------------------------------------------------------------------------------------------
# model / lora
# --------------------------------------------------------------------------------------------


class TinyModelSpec(_Section):
    """Recipe of the built-in tiny Qwen2 model (used when `model.path` is unset)."""

    task: Literal["arithmetic", "reverse", "reasoning", "calculator"] = Field(
        "arithmetic",
        description="built-in task used for the supervised warm-up; reasoning builds a chat "
        "model (byte-level BPE tokenizer, Qwen-style chat template, two EOS ids); calculator "
        "the same model warmed up on calculator episodes (tool calls, a template with tools)",
    )
    hidden_size: int = Field(128, gt=0, json_schema_extra=bound("model.tiny.hidden_size"))
    num_layers: int = Field(2, gt=0, json_schema_extra=bound("model.tiny.num_layers"))
    num_heads: int = Field(4, gt=0, json_schema_extra=bound("model.tiny.num_heads"))
    intermediate_size: int = Field(
        256, gt=0, json_schema_extra=bound("model.tiny.intermediate_size")
    )
    warmup_steps: int = Field(
        1000,
        ge=0,
        json_schema_extra=bound("model.tiny.warmup_steps"),
        description="supervised steps on the task",
    )
    warmup_bias: float = Field(
        0.6,
        ge=0,
        lt=1,
        description="in the last warmup_bias_steps, the fraction of targets replaced by a "
        "systematic wrong answer (a+b+1; the unreversed string): the base then mostly answers "
        "wrongly when greedy but keeps the right answer as a strong second choice, so it is "
        "weak but not random",
    )
    warmup_bias_steps: int = Field(
        200, ge=0, json_schema_extra=bound("model.tiny.warmup_bias_steps")
    )

    @field_validator("hidden_size")
    @classmethod
    def _hidden_divisible(cls, v: int) -> int:
        if v % 2:
            raise ValueError("must be even (rotary embeddings)")
        return v


class ModelSpec(_Section):
    path: str | None = Field(
        None,
        min_length=1,
        description="local Hugging Face model directory; unset builds the tiny model under "
        "PADDOCK_HOME",
    )
    tiny: TinyModelSpec = Field(default_factory=TinyModelSpec)
    dtype: Literal["auto", "float32", "bfloat16"] = Field(
        "auto", description="auto: bfloat16 autocast on GPU, float32 on CPU"
    )
    # Remote code would let a config make a worker run arbitrary code.
    trust_remote_code: Literal[False] = False


class LoraSpec(_Section):
    r: int = Field(8, gt=0, json_schema_extra=bound("lora.r"), description="LoRA rank")
    alpha: float = Field(16.0, gt=0)
    dropout: float = Field(0.0, ge=0, lt=1)
    target_modules: list[
        Annotated[str, Field(json_schema_extra=bound("lora.target_modules.*", "maxLength"))]
    ] = Field(
        default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"],
        min_length=1,
        json_schema_extra=bound("lora.target_modules", "maxItems"),
    )


# --------------------------------------------------------------------------------------------
# algorithm
# --------------------------------------------------------------------------------------------


class AlgorithmSpec(_Section):
    num_generations: int = Field(
        8,
        ge=2,
        json_schema_extra=bound("algorithm.num_generations"),
        description="group size G: samples per prompt",
    )
    advantage: names.Advantage = "grpo"
    advantage_eps: float = Field(1e-6, gt=0, description="ε in (r − mean) / (std + ε)")
    clip_eps_low: float = Field(0.2, gt=0, lt=1)
    clip_eps_high: float = Field(0.28, gt=0, description="DAPO clip-higher: 0.28")
    loss_agg: names.LossAgg = "token_mean"
    kl_coef: float = Field(0.0, ge=0, description="β of the KL term to the base model")
    kl_estimator: names.KlEstimator = "k3"
    bypass_mode: bool = Field(
        True,
        description="use the engine's logprobs as π_old (no extra trainer forward)",
    )
    rollout_is: names.IsLevel = "none"
    rollout_is_mode: Literal["truncate", "mask"] = "truncate"
    rollout_is_threshold: float = Field(2.0, gt=0, description="TIS cap C, or mask upper bound")
    rollout_is_threshold_low: float | None = Field(
        None, gt=0, description="mask lower bound (default 1 / rollout_is_threshold)"
    )
    dynamic_sampling: bool = Field(False, description="drop groups whose rewards are all equal")

    @field_validator("rollout_is_threshold_low")
    @classmethod
    def _low_below_high(cls, v: float | None, info: Any) -> float | None:
        high = info.data.get("rollout_is_threshold")
        if v is not None and high is not None and v >= high:
            raise ValueError(f"must be < rollout_is_threshold ({high})")
        return v

    @model_validator(mode="after")
    def _is_needs_decoupled(self) -> AlgorithmSpec:
        # In bypass mode π_old is the engine's own distribution, so w = π_old / π_rollout ≡ 1.
        if self.bypass_mode and self.rollout_is != "none":
            raise _field_error(
                "rollout_is",
                "needs bypass_mode: false (in bypass mode π_old = π_rollout, w ≡ 1)",
            )
        return self


# --------------------------------------------------------------------------------------------
# rollout: a discriminated union on `backend`
# --------------------------------------------------------------------------------------------


class _RolloutBase(_Section):
    temperature: float = Field(1.0, gt=0)
    top_p: float = Field(1.0, gt=0, le=1)
    top_k: int = Field(0, ge=0, description="0 = off")
    max_new_tokens: int = Field(8, gt=0, json_schema_extra=bound("rollout.max_new_tokens"))
    stop: list[Annotated[str, Field(json_schema_extra=bound("rollout.stop.*", "maxLength"))]] = (
        Field(
            default_factory=list,
            json_schema_extra=bound("rollout.stop", "maxItems"),
            description="stop strings (besides EOS)",
        )
    )
    max_loras: int = Field(
        2,
        ge=1,
        json_schema_extra=bound("rollout.max_loras"),
        description="adapter slots of the engine: the runs a pool's engine serves at once "
        "(the pool's capacity when it is not given); vLLM and TensorRT-LLM allocate them for "
        "a run alone too",
    )

    # The trainer computes logprobs over the full softmax; samples drawn from a truncated
    # distribution would make every importance ratio wrong (TRL #4159), so refuse them.
    @field_validator("top_p")
    @classmethod
    def _no_top_p(cls, v: float) -> float:
        if v != 1.0:
            raise ValueError(
                "must be 1.0 for training: the trainer scores the untruncated distribution"
            )
        return v

    @field_validator("top_k")
    @classmethod
    def _no_top_k(cls, v: int) -> int:
        if v != 0:
            raise ValueError(
                "must be 0 (off) for training: the trainer scores the untruncated distribution"
            )
        return v


class TorchRolloutSpec(_RolloutBase):
    backend: Literal["torch"] = "torch"
    max_batch_size: int = Field(
        256,
        gt=0,
        json_schema_extra=bound("rollout.max_batch_size"),
        description="sequences decoded together",
    )
    decode: Literal["auto", "static", "dynamic"] = Field(
        "auto",
        description="static: a preallocated KV cache, each decode step one CUDA graph on a "
        "GPU; dynamic: the PEFT model's own forward; auto: static on a GPU for the models it "
        "supports (llama, mistral, qwen2, qwen3)",
    )
    compile: bool = Field(
        False,
        description="static decode on a GPU: torch.compile the step's norms, RoPE, LoRA and "
        "residual adds around attention into fused kernels before the CUDA graph captures "
        "them (the first steps of a run compile)",
    )
    continuous: bool = Field(
        True,
        description="static decode: slots of finished rows take the next waiting groups "
        "while the others decode on (continuous batching); false decodes the requests in "
        "batches of max_batch_size, each to its end",
    )


class VllmRolloutSpec(_RolloutBase):
    backend: Literal["vllm"]
    # vLLM's SamplingParams refuses a temperature above 2 when a request is made; here the
    # spec says so at launch instead of the run failing on its first rollout
    temperature: float = Field(1.0, gt=0, le=2, description="vLLM accepts at most 2")
    gpu_memory_utilization: float = Field(0.5, gt=0, le=1)
    enforce_eager: bool = False
    cpu_kvcache_space_gib: int = Field(
        2,
        ge=1,
        json_schema_extra=bound("rollout.cpu_kvcache_space_gib"),
        description="VLLM_CPU_KVCACHE_SPACE on CPU",
    )


class TrtllmRolloutSpec(_RolloutBase):
    backend: Literal["trtllm"]
    kv_cache_free_gpu_memory_fraction: float = Field(0.5, gt=0, le=1)
    max_cpu_loras: int = Field(4, ge=1, json_schema_extra=bound("rollout.max_cpu_loras"))


RolloutSpec = Annotated[
    TorchRolloutSpec | VllmRolloutSpec | TrtllmRolloutSpec,
    Field(discriminator="backend"),
]
# One member per backend: a discriminated union needs each member's tag as a literal of its
# own, so the tags are checked against the names rather than taken from them.
_ROLLOUT_MEMBERS = get_args(get_args(RolloutSpec)[0])
names.names_check(
    "the rollout union's backends",
    (get_args(m.model_fields["backend"].annotation)[0] for m in _ROLLOUT_MEMBERS),
    names.BACKENDS,
)


# --------------------------------------------------------------------------------------------
# async / data / reward / train / checkpoint / resources
# --------------------------------------------------------------------------------------------


class AsyncSpec(_Section):
    enabled: bool = False
    max_staleness: int = Field(
        1,
        ge=0,
        json_schema_extra=bound("async.max_staleness"),
        description="max trainer_version − adapter_version of a trained group, in steps",
    )
    weight_update: Literal["abort", "keep", "wait"] = Field(
        "abort",
        description="how the backend takes a new adapter while requests are in flight",
    )
    buffer_groups: int | None = Field(
        None,
        gt=0,
        json_schema_extra=bound("async.buffer_groups"),
        description="trajectory buffer capacity in groups (default 2 steps' worth)",
    )


# Keyword arguments that apply_chat_template itself takes: passed through from the config
# they would change how the template is applied (`chat_template` would even replace the
# template with text from the config), so `data.chat_template_kwargs` may not use them.
RESERVED_TEMPLATE_KWARGS = frozenset(
    {
        "conversation", "messages", "tools", "documents", "chat_template",
        "add_generation_prompt", "continue_final_message", "tokenize", "padding",
        "truncation", "max_length", "return_tensors", "return_dict",
        "return_assistant_tokens_mask", "tokenizer_kwargs", "sanitize_control_tokens",
    }
)  # fmt: skip
_DATASET_REF = re.compile(r"dataset://(\d+)")
_KEY_PATH = re.compile(r"[^.]+(\.[^.]+)*")  # column, then keys or list indices


def dataset_ref(path: str | None) -> int | None:
    """The id of an uploaded dataset named as `dataset://<id>`; None for anything else."""
    m = _DATASET_REF.fullmatch(path or "")
    return int(m.group(1)) if m else None


def _check_data_path(v: str | None) -> str | None:
    # Which paths a run may read is the platform's to decide (spec_paths); the job says
    # which schemes it reads. Here only the form of an upload's name is checked.
    if v is not None and v.startswith("dataset://") and dataset_ref(v) is None:
        raise ValueError("an uploaded dataset is named dataset://<id>, the id a number")
    return v


def _check_key_path(v: str | None) -> str | None:
    if v is not None and not _KEY_PATH.fullmatch(v):
        raise ValueError(
            "must be a column name, optionally followed by .key or .index parts "
            "(reward_model.ground_truth, messages.-1.content)"
        )
    return v


_JsonScalar = str | bool | int | float | None


def _check_settings(v: dict[str, Any]) -> dict[str, Any]:
    """A free-form mapping of settings handed to a library (an environment's factory, a
    reasoning-gym generator): keyword names, and JSON scalars or lists of them only, so a
    config can pass values but never objects or code."""
    for key, value in v.items():
        if not key.isidentifier():
            raise _field_error(key, "is not a keyword name")
        items = value if isinstance(value, list) else [value]
        if len(items) > 1000 or not all(isinstance(x, _JsonScalar) for x in items):
            raise _field_error(key, "must be a string, a number, a boolean, null or a list of them")
    return v


class ReasoningGymSpec(_Section):
    """A reasoning-gym generator as a data source: its prompts, and its own scorer as the
    `reasoning_gym` reward term."""

    dataset: str = Field(
        pattern=r"^[a-z0-9_]{1,64}$",
        description="the generator's name in reasoning-gym (basic_arithmetic, chain_sum, "
        "leg_counting, ...)",
    )
    size: int = Field(2000, gt=0, le=1_000_000, description="train examples generated")
    eval_size: int = Field(200, gt=0, le=100_000, description="held-out examples generated")
    seed: int = Field(0, ge=0, le=MAX_SEED, description="the generator's seed (held-out: seed + 1)")
    config: dict[str, Any] = Field(
        default_factory=dict,
        description="the generator's own settings (min_terms, max_digits, ...): JSON values",
    )

    @field_validator("config")
    @classmethod
    def _values(cls, v: dict[str, Any]) -> dict[str, Any]:
        return _check_settings(v)


class DataSpec(_Section):
    task: Literal[
        "arithmetic", "reverse", "reasoning", "dataset", "jsonl", "environment", "reasoning_gym"
    ] = Field(
        "arithmetic",
        description="arithmetic: `a+b=` → `a+b`; reverse: `rev abc=` → `cba`; reasoning: "
        "chat prompts `Add 3+4+5.` → a worked chain ending in `\\boxed{12}` (built-in); "
        "dataset: your file or directory at `path`; jsonl: dataset with format jsonl (older "
        "configs); environment: the episodes of `env` (its own prompts); reasoning_gym: "
        "a reasoning-gym generator (`reasoning_gym`), scored by its own verifier",
    )  # fmt: skip
    path: str | None = Field(
        None,
        description="task: dataset: a JSONL or Parquet file (or a pattern of shards, "
        "train-*.parquet), a `datasets` save_to_disk directory, a file:// URI, or "
        "dataset://<id> (an uploaded dataset)",
    )
    format: Literal["auto", "jsonl", "parquet", "save_to_disk"] = Field(
        "auto",
        description="auto: by the path (a directory is save_to_disk, *.parquet parquet, "
        "*.jsonl / *.json JSONL)",
    )
    split: str = Field("train", description="split of a save_to_disk DatasetDict to train on")
    prompt_key: str = Field(
        "prompt",
        description="column of the prompt: a string, or a list of chat messages {role, "
        "content} (a trailing assistant message is the reference answer, not part of the "
        "prompt)",
    )
    answer_key: str = Field(
        "answer",
        description="column of the answer given to rewards; dotted keys and list indices "
        "reach inside (verl: reward_model.ground_truth; NeMo-RL messages: messages.-1.content)",
    )
    system_prompt: str | None = Field(
        None,
        json_schema_extra=bound("data.system_prompt", "maxLength"),
        description="a system message put before each prompt that has none (needs "
        "message prompts or chat_template: true)",
    )
    chat_template: bool = Field(
        False,
        description="apply the tokenizer's own chat template to string prompts too (each as "
        "one user message); message prompts always get it",
    )
    # Any, checked below: a union type would report one error per member for a bad value
    chat_template_kwargs: dict[str, Any] = Field(
        default_factory=dict,
        json_schema_extra=bound("data.chat_template_kwargs", "maxProperties"),
        description="keyword arguments of the chat template, e.g. {enable_thinking: false} "
        "for Qwen3",
    )
    max_prompt_tokens: int | None = Field(
        None,
        gt=0,
        json_schema_extra=bound("data.max_prompt_tokens"),
        description="longest prompt in tokens (after the chat template); unset: no limit",
    )
    overlong_prompts: Literal["drop", "error"] = Field(
        "drop",
        description="a prompt over max_prompt_tokens: drop it (the count is logged) or refuse "
        "the dataset",
    )
    eval_path: str | None = Field(
        None,
        description="held-out data in the same forms as path (default: eval_split of path "
        "when set, else the last 10% of path)",
    )
    eval_split: str | None = Field(
        None, description="split of a save_to_disk DatasetDict to score eval/accuracy on"
    )
    eval_prompt_key: str | None = Field(
        None, description="column of the eval data's prompt, where it differs (default: prompt_key)"
    )
    eval_answer_key: str | None = Field(
        None, description="column of the eval data's answer, where it differs (default: answer_key)"
    )
    eval_size: int = Field(
        200,
        gt=0,
        json_schema_extra=bound("data.eval_size"),
        description="held-out prompts scored by eval/accuracy",
    )
    reasoning_gym: ReasoningGymSpec | None = Field(
        None, description="task: reasoning_gym: which generator, how many examples, its settings"
    )

    @field_validator("path", "eval_path")
    @classmethod
    def _paths(cls, v: str | None) -> str | None:
        return _check_data_path(v)

    @field_validator("prompt_key", "answer_key", "eval_prompt_key", "eval_answer_key")
    @classmethod
    def _keys(cls, v: str | None) -> str | None:
        return _check_key_path(v)

    @field_validator("chat_template_kwargs")
    @classmethod
    def _template_kwargs(cls, v: dict[str, Any]) -> dict[str, Any]:
        # Errors name the key itself (data.chat_template_kwargs.<key>): the keys are the
        # user's, so the field alone would not say which one is wrong.
        for key in v:
            if not key.isidentifier():
                raise _field_error(key, "is not a keyword name")
            if key in RESERVED_TEMPLATE_KWARGS:
                raise _field_error(key, "is set by Paddock, not by the config")
            if not isinstance(v[key], str | bool | int | float):
                raise _field_error(key, "must be a string, a number or a boolean")
        return v

    @model_validator(mode="after")
    def _file_needs_path(self) -> DataSpec:
        from_file = self.task in ("dataset", "jsonl")
        if from_file and not self.path:
            raise _field_error("path", f"required when task is {self.task}")
        if not from_file:
            for name in ("path", "eval_path", "eval_split"):
                if getattr(self, name):
                    raise _field_error(name, f"only used with task: dataset (task is {self.task})")
        if self.task == "jsonl" and self.format not in ("auto", "jsonl"):
            raise _field_error("format", "task: jsonl reads JSONL; use task: dataset")
        if (self.task == "reasoning_gym") != (self.reasoning_gym is not None):
            if self.reasoning_gym is None:
                raise _field_error("reasoning_gym", "required when task is reasoning_gym")
            raise _field_error(
                "reasoning_gym", f"only used with task: reasoning_gym (task is {self.task})"
            )
        return self


# Reward terms: a discriminated union on `name`. Each verifier has its own keys, and a key of
# another verifier is an error. Only these names exist: a spec cannot make a worker import or
# evaluate code (a team's own verifier is reached over HTTP, through `service`).

_LABEL = r"^[A-Za-z0-9_.-]{1,64}$"
# a team secret's name (platform/paddock/teams/team_secrets.py); a spec names a secret, never
# an environment variable: a worker's environment holds the cluster's own credentials
SECRET_NAME = r"^[A-Za-z][A-Za-z0-9_-]{0,63}$"
HEADERS_SECRET_GONE = (
    "headers_secret named an environment variable of the worker, which a spec can no longer "
    "reach; store the headers (or the token) as a team secret (`paddock secrets set NAME`, "
    "or the team's Secrets page) and write `secret: NAME` here instead"
)


def http_url(v: str) -> str:
    """`v` when it is an http(s) URL with a host, read by the standard library's URL parser
    (a regular expression here once took seconds on a long hostile string). Which hosts a
    job may reach is the egress policy's to say (workers/egress.py), where it connects."""
    if any(c.isspace() or ord(c) < 32 for c in v):
        raise ValueError("must be an http:// or https:// URL (no spaces)")
    try:
        parts = urlsplit(v)
        parts.port  # noqa: B018  (raises on a port that is not a number)
    except ValueError:
        raise ValueError("must be an http:// or https:// URL") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("must be an http:// or https:// URL")
    return v


class _RewardTermBase(_Section):
    weight: float = Field(1.0, description="factor of this term in the reward, a weighted sum")
    label: str | None = Field(
        None,
        pattern=_LABEL,
        description="the term's key in metrics (reward/<label>/mean) and in the sample "
        "inspector; default: its name. Two terms of one name need distinct labels",
    )

    @property
    def key(self) -> str:
        return self.label or self.name  # type: ignore[attr-defined]


def _check_regex(v: str) -> str:
    # compiled by the `regex` module, which the job matches with (under a time limit)
    try:
        regex.compile(v)
    except regex.error as exc:
        raise ValueError(f"invalid regex: {exc}") from None
    return v


class ExactMatchTerm(_RewardTermBase):
    """1 when the stripped completion equals the stripped answer (a verifier)."""

    name: Literal["exact_match"]


class NumericMatchTerm(_RewardTermBase):
    """1 when a number of the completion equals the answer numerically (a verifier)."""

    name: Literal["numeric_match"]
    position: Literal["last", "first"] = Field(
        "last",
        description="which number of the completion is compared: last (a reasoning model "
        "ends with its answer) or first (what numeric_match did before it had this key)",
    )
    tolerance: float = Field(1e-9, ge=0, description="absolute difference still counted equal")


class FormatRegexTerm(_RewardTermBase):
    """1 when the stripped completion fully matches `pattern` (shaping: not accuracy)."""

    name: Literal["format_regex"]
    pattern: str = Field(
        json_schema_extra=bound("reward.functions.*.pattern", "maxLength"),
        description="regex the stripped completion must fully match (a sample whose match "
        "takes over a second scores 0)",
    )

    @field_validator("pattern")
    @classmethod
    def _valid(cls, v: str) -> str:
        return _check_regex(v)


class FormatTerm(_RewardTermBase):
    """1 when the completion has the expected structure (shaping: not accuracy)."""

    name: Literal["format"]
    pattern: str | None = Field(
        None,
        json_schema_extra=bound("reward.functions.*.pattern", "maxLength"),
        description="regex the stripped completion must fully match, `.` matching newlines "
        "too; unset: the think-tag structure <think>…</think> then a non-empty answer",
    )
    think_tag: str = Field(
        "think",
        pattern=r"^[A-Za-z][A-Za-z0-9_-]{0,31}$",
        description="tag name of the reasoning block (think: <think>…</think>)",
    )

    @field_validator("pattern")
    @classmethod
    def _valid(cls, v: str | None) -> str | None:
        return None if v is None else _check_regex(v)


class Gsm8kTerm(_RewardTermBase):
    """GSM8K: the gold answer is the text after `####`; 1 when the completion's final number
    (commas stripped) equals it (a verifier)."""

    name: Literal["gsm8k"]
    tolerance: float = Field(1e-9, ge=0, description="absolute difference still counted equal")


class BoxedMatchTerm(_RewardTermBase):
    """1 when the completion's last \\boxed{…} (nested braces kept) equals the gold answer,
    as normalized text or as a number (a verifier)."""

    name: Literal["boxed_match"]


class MathVerifyTerm(_RewardTermBase):
    """The math-verify library: parses the gold answer and the completion (\\boxed{},
    LaTeX, fractions, plain numbers) and compares them symbolically (a verifier). Runs in a
    child process, under its own timeouts."""

    name: Literal["math_verify"]
    timeout_s: int = Field(
        5,
        ge=1,
        le=120,
        description="seconds math-verify may spend parsing, and again comparing, one "
        "sample; past it the sample scores 0 (details say timeout)",
    )


class OverlongPenaltyTerm(_RewardTermBase):
    """DAPO's soft overlong penalty: 0 for a completion of up to max_new_tokens − buffer
    tokens, then linear down to −1 at max_new_tokens (shaping: not accuracy)."""

    name: Literal["overlong_penalty"]
    buffer: int = Field(
        gt=0,
        json_schema_extra=bound("reward.functions.*.buffer"),
        description="tokens before max_new_tokens over which it ramps",
    )
    max_new_tokens: int | None = Field(
        None,
        gt=0,
        json_schema_extra=bound("reward.functions.*.max_new_tokens"),
        description="L_max of the penalty; default rollout.max_new_tokens",
    )

    @model_validator(mode="after")
    def _buffer_fits(self) -> OverlongPenaltyTerm:
        if self.max_new_tokens is not None and self.buffer > self.max_new_tokens:
            raise _field_error("buffer", f"must be <= max_new_tokens ({self.max_new_tokens})")
        return self


class ServiceTerm(_RewardTermBase):
    """A reward service: the job POSTs batches {items: [{prompt, completion, answer,
    metadata}]} to `url` and reads {rewards: [float], details?: [object]}. For code
    execution, LLM judges, a team's own verifier (docs/train-your-own-model.md)."""

    name: Literal["service"]
    url: str = Field(
        description="http(s) endpoint that takes the POSTed batches",
        json_schema_extra=bound("reward.functions.*.url", "maxLength"),
    )
    timeout_s: float = Field(
        60.0, gt=0, le=3600, description="deadline of one attempt at one batch, in seconds"
    )
    batch_size: int = Field(64, gt=0, le=4096, description="samples per request")
    max_retries: int = Field(
        3,
        ge=0,
        le=20,
        description="retries of a batch after a connection error, a timeout, a 429 or a 5xx, "
        "with exponential backoff; then the step fails",
    )
    max_concurrency: int = Field(4, gt=0, le=64, description="batches in flight at once")
    secret: str | None = Field(
        None,
        pattern=SECRET_NAME,
        description="name of one of the team's secrets holding the request headers as a JSON "
        "object, or a token sent as Authorization: Bearer <token>; the job receives its run's "
        "secrets from the platform (under paddock train: the environment variable "
        "PADDOCK_SECRET_<NAME>), and the secret itself never sits in the spec",
    )
    correct_threshold: float | None = Field(
        1.0,
        description="a sample counts as correct for accuracy when this term's reward is at "
        "least this; null makes the service a shaping term that accuracy ignores",
    )

    @model_validator(mode="before")
    @classmethod
    def _no_environment_names(cls, data: Any, info: ValidationInfo) -> Any:
        if not isinstance(data, dict) or "headers_secret" not in data:
            return data
        if data["headers_secret"] is not None and not _stored(info):
            raise _field_error("headers_secret", HEADERS_SECRET_GONE)
        # null (every spec stored before carries it), or a stored spec the control plane
        # reads: dropped; the job, which validates as a user's spec, says what to change
        return {k: v for k, v in data.items() if k != "headers_secret"}

    @field_validator("url")
    @classmethod
    def _http(cls, v: str) -> str:
        return http_url(v)


class EnvTerm(_RewardTermBase):
    """The environment's own reward for the episode (needs `env`); a verifier when the
    environment says whether the episode succeeded, else counted correct at
    `correct_threshold`."""

    name: Literal["env"]
    correct_threshold: float | None = Field(
        1.0,
        description="an episode whose environment gave no verdict counts as correct when its "
        "reward is at least this; null: such episodes have no verdict",
    )


class ReasoningGymTerm(_RewardTermBase):
    """reasoning-gym's own scorer for its generated examples (needs data.task:
    reasoning_gym; a verifier: correct when it scores 1)."""

    name: Literal["reasoning_gym"]


RewardTerm = Annotated[
    EnvTerm
    | ReasoningGymTerm
    | ExactMatchTerm
    | NumericMatchTerm
    | FormatRegexTerm
    | FormatTerm
    | Gsm8kTerm
    | BoxedMatchTerm
    | MathVerifyTerm
    | OverlongPenaltyTerm
    | ServiceTerm,
    Field(discriminator="name"),
]
_REWARD_TERM_NAMES = {
    "exact_match", "numeric_match", "format_regex", "format", "gsm8k", "boxed_match",
    "math_verify", "overlong_penalty", "service", "env", "reasoning_gym",
}  # fmt: skip
_PATTERN_TERMS = {"format_regex", "format"}


class RewardSpec(_Section):
    functions: list[RewardTerm] = Field(
        default_factory=lambda: [ExactMatchTerm(name="exact_match")],
        min_length=1,
        json_schema_extra=bound("reward.functions", "maxItems"),
        description="the reward is the weighted sum of these terms, each {name, weight, "
        "label, ...its own keys}, e.g. [{name: math_verify}, {name: format, weight: 0.1}]; "
        "names: exact_match, numeric_match, gsm8k, boxed_match, math_verify, service, env, "
        "reasoning_gym (verifiers: they decide accuracy), format, format_regex, "
        "overlong_penalty (shaping); "
        "each is logged as reward/<label or name>/mean",
    )

    @model_validator(mode="before")
    @classmethod
    def _drop_null_patterns(cls, data: Any) -> Any:
        # Specs written before the union carry `pattern: null` on every term; keep them valid.
        items = data.get("functions") if isinstance(data, dict) else None
        if isinstance(items, list):
            items = [
                {k: v for k, v in t.items() if not (k == "pattern" and v is None)}
                if isinstance(t, dict) and t.get("name") not in _PATTERN_TERMS
                else t
                for t in items
            ]
            data = {**data, "functions": items}
        return data

    @model_validator(mode="after")
    def _distinct_keys(self) -> RewardSpec:
        seen: dict[str, int] = {}
        for i, term in enumerate(self.functions):
            if term.key in seen:
                raise _field_error(
                    f"functions.{i}.label",
                    f"term {seen[term.key]} is logged as {term.key!r} too: give one a "
                    "distinct label",
                )
            seen[term.key] = i
        return self


class EnvServerSpec(_Section):
    """An environment behind HTTP (NeMo Gym's style; docs/environments.md#http): the job
    opens a session, posts each model turn, and reads the observation."""

    url: str = Field(max_length=2000, description="http(s) base URL of the environment server")
    timeout_s: float = Field(30.0, gt=0, le=3600, description="deadline of one attempt, seconds")
    max_retries: int = Field(
        3,
        ge=0,
        le=20,
        description="retries after a connection error, a timeout, a 429 or a 5xx, with "
        "exponential backoff; then the episode fails (not the run)",
    )
    secret: str | None = Field(
        None,
        pattern=SECRET_NAME,
        description="name of one of the team's secrets holding the request headers (a JSON "
        "object) or a bearer token (under paddock train: the environment variable "
        "PADDOCK_SECRET_<NAME>); the secret itself never sits in the spec",
    )

    @field_validator("url")
    @classmethod
    def _http(cls, v: str) -> str:
        return http_url(v)


class EnvSpec(_Section):
    """Multi-turn episodes (docs/environments.md): the model's turns alternate with an
    environment's answers (tool results, user messages, game states), masked out of the
    loss, until the environment says done or a budget is reached."""

    name: str = Field(
        pattern=names.ENV_NAME.pattern,
        description="an environment installed on the cluster (built-in: calculator; http: "
        "the server at env.server; others by their package's `paddock.environments` entry "
        "point)",
    )
    args: dict[str, Any] = Field(
        default_factory=dict,
        description="the environment's own settings, passed to it as keyword arguments: JSON "
        "values",
    )
    max_turns: int = Field(8, ge=1, le=256, description="model turns an episode may take")
    max_episode_tokens: int | None = Field(
        None,
        gt=0,
        le=1_000_000,
        description="tokens after the prompt, the model's and the environment's; the turn "
        "that crosses it is cut there (truncated). Default: max_turns × rollout.max_new_tokens",
    )
    step_timeout_s: float = Field(
        30.0,
        gt=0,
        le=3600,
        description="wall-clock limit of one environment call (start, one turn's answer); "
        "past it the episode fails and is counted, the run goes on",
    )
    tool_format: Literal["auto", "hermes", "llama3"] = Field(
        "auto",
        description="how the model writes tool calls: hermes (<tool_call>{json}</tool_call>, "
        "Qwen), llama3 (a JSON object); auto: by the model's chat template",
    )
    server: EnvServerSpec | None = Field(None, description="name: http: the server")

    @field_validator("args")
    @classmethod
    def _values(cls, v: dict[str, Any]) -> dict[str, Any]:
        return _check_settings(v)

    @model_validator(mode="after")
    def _server_for_http(self) -> EnvSpec:
        if (self.name == "http") != (self.server is not None):
            if self.server is None:
                raise _field_error("server", "required when name is http")
            raise _field_error("server", f"only used with name: http (name is {self.name})")
        return self


class TrainSpec(_Section):
    steps: int = Field(50, gt=0, le=MAX_STEPS)
    prompts_per_step: int = Field(8, gt=0, json_schema_extra=bound("train.prompts_per_step"))
    lr: float = Field(1e-4, gt=0)
    weight_decay: float = Field(0.0, ge=0)
    betas: tuple[float, float] = (0.9, 0.999)
    grad_clip: float = Field(1.0, gt=0)
    micro_batch_size: int = Field(
        64,
        gt=0,
        json_schema_extra=bound("train.micro_batch_size"),
        description="sequences per forward/backward",
    )
    logprob_chunk_size: int = Field(
        1024,
        gt=0,
        json_schema_extra=bound("train.logprob_chunk_size"),
        description="token rows per chunk of the logits → logprobs computation",
    )
    eval_every: int = Field(10, ge=0, description="steps between eval/accuracy; 0 = only at end")
    mult_prob_error_samples: int = Field(
        8,
        ge=0,
        json_schema_extra=bound("train.mult_prob_error_samples"),
        description="stale samples per step that a no-grad trainer forward checks under the "
        "adapter version that generated them, for token_mult_prob_error in async runs; "
        "0 = compare only tokens of the current version",
    )
    log_samples: int = Field(
        4,
        ge=0,
        json_schema_extra=bound("train.log_samples"),
        description="samples per step sent to the inspector",
    )
    threads: int | None = Field(
        None,
        gt=0,
        json_schema_extra=bound("train.threads"),
        description="torch CPU threads (default: all cores)",
    )
    compile: bool = Field(
        False,
        description="on a GPU, compile each decoder layer with torch.compile (fuses the "
        "norms, LoRA scaling and activations; the first steps pay the compile)",
    )
    activation_checkpointing: bool = Field(
        False,
        description="keep only each decoder layer's input for backward and recompute the "
        "layer there: activation memory of one layer instead of all, for about a third more "
        "compute (what lets an 8B model train 16x1024 tokens a micro-batch on one GPU); "
        "training then runs the plain forward, never the prompt-sharing one",
    )


class CheckpointSpec(_Section):
    every: int = Field(0, ge=0, description="steps between checkpoints; 0 = only at end/pause")
    keep_last: int | None = Field(None, gt=0)
    resume_from: str | None = Field(
        None,
        description="checkpoint directory to resume from, or latest (the newest one under "
        "the run's output directory)",
    )


class ResourcesSpec(_Section):
    executor: Literal["local", "ray"] = Field(
        "local",
        description="local: trainer and engine in this process; ray: trainer and rollout "
        "actors in a placement group on the Ray cluster",
    )
    trainer_gpus: int = Field(0, ge=0, description="in all; split evenly over trainer_actors")
    trainer_cpus: float = Field(1, gt=0, description="with executor ray: per trainer actor")
    trainer_actors: int = Field(
        1,
        ge=1,
        json_schema_extra=bound("resources.trainer_actors"),
        description="FSDP ranks (executor ray)",
    )
    rollout_replicas: int = Field(1, ge=1, json_schema_extra=bound("resources.rollout_replicas"))
    rollout_gpus: float = Field(0, ge=0, description="GPUs per rollout replica")
    rollout_cpus: float = Field(1, gt=0, description="CPUs per rollout replica (executor ray)")
    max_restarts: int = Field(
        2,
        ge=0,
        json_schema_extra=bound("resources.max_restarts"),
        description="actor restarts inside one job",
    )
    release_on_pause: bool = Field(False, description="exit on pause, resume from checkpoint")
    engine_process: bool = Field(
        False,
        description="executor local: run the rollout engine in a child process, so that "
        "decoding and training do not take turns on one Python interpreter (on two GPUs, "
        "what lets async overlap them); executor ray: actors are processes already",
    )
    gpu_share: Literal["streams", "engine_first", "trainer_first", "split"] = Field(
        "split",
        description="async, trainer and torch engine on one GPU in one process: how they "
        "share it (workers/gpu_share.py): own streams, one side's stream first, or "
        "the SMs split between them (CUDA green contexts)",
    )
    engine_sm_share: float = Field(
        0.36, gt=0, lt=1, description="gpu_share split: the engine's share of the SMs"
    )
    max_attempts: int = Field(3, ge=1, le=100, description="dispatches the control plane may start")
    pool: str | None = Field(
        None,
        pattern=r"^(auto|[a-z0-9][a-z0-9-]{0,39})$",
        description="share a base-model pool (docs/pools.md): auto packs the run into any "
        "compatible pool with room (same model path, dtype, backend, cluster) or starts one; "
        "a name joins or starts the team's pool of that name (a named pool hosts only its "
        "team's runs); unset: the run has its own job",
    )
    pool_weight: float = Field(
        1.0,
        gt=0,
        le=100,
        description="in a pool: this run's weight in the fair share of generation slots and "
        "trainer time (equal weights: equal shares)",
    )


class TensorboardLogSpec(_Section):
    dir: str = Field(
        "tensorboard",
        description="directory of the event files; a relative path is inside the run's output "
        "directory (under the platform an absolute one must be inside PADDOCK_LOG_ROOTS)",
    )

    @field_validator("dir")
    @classmethod
    def _local_dir(cls, value: str) -> str:
        if not value.strip() or "://" in value or "\0" in value:
            raise ValueError("must be a local directory path")
        if ".." in Path(value).parts:
            raise ValueError("must not contain '..'")
        return value


class MlflowLogSpec(_Section):
    tracking_uri: str = Field(
        description="the MLflow tracking server, http(s)://host:port (under the platform "
        "nothing else: a file: or sqlite: store would write to the cluster's disk)",
        min_length=1,
    )
    experiment: str = Field("paddock", min_length=1, description="created when missing")
    run_name: str | None = Field(None, description="default: the run's output directory name")


class WandbLogSpec(_Section):
    project: str = Field(min_length=1)
    entity: str | None = Field(None, description="team or user; default: the key's default")
    mode: Literal["offline", "online"] = Field(
        "offline",
        description="offline: a run directory under the run's output (wandb/), to `wandb sync` "
        "later; online: needs WANDB_API_KEY in the job's environment, never in the spec",
    )
    run_name: str | None = Field(None, description="default: the run's output directory name")


class LoggingSpec(_Section):
    """Mirrors of the run's metrics, sent from the job (workers/loop/mirrors/); each one that
    fails is a warning in the run's log, never the end of the run."""

    tensorboard: TensorboardLogSpec | None = None
    mlflow: MlflowLogSpec | None = None
    wandb: WandbLogSpec | None = None


class AlarmsSpec(_Section):
    """The alarms of workers/alarms.py, which the control plane judges on every run while it
    trains (docs/alarms.md); these pause the run when they fire (through the usual pause:
    a checkpoint, then the run waits for a resume). A run's page can arm others later."""

    pause_on: list[names.AlarmName] = Field(
        default_factory=list, max_length=len(names.ALARM_NAMES), description="alarm names"
    )

    @field_validator("pause_on")
    @classmethod
    def _once(cls, value: list[str]) -> list[str]:
        if len(set(value)) != len(value):
            raise ValueError("names an alarm twice")
        return value


class RunSpec(_Section):
    model: ModelSpec = Field(default_factory=ModelSpec)
    lora: LoraSpec = Field(default_factory=LoraSpec)
    algorithm: AlgorithmSpec = Field(default_factory=AlgorithmSpec)
    rollout: RolloutSpec = Field(default_factory=TorchRolloutSpec)
    async_: AsyncSpec = Field(default_factory=AsyncSpec, alias="async")
    data: DataSpec = Field(default_factory=DataSpec)
    env: EnvSpec | None = Field(
        None, description="multi-turn episodes with an environment; unset: one turn a sample"
    )
    reward: RewardSpec = Field(default_factory=RewardSpec)
    train: TrainSpec = Field(default_factory=TrainSpec)
    checkpoint: CheckpointSpec = Field(default_factory=CheckpointSpec)
    resources: ResourcesSpec = Field(default_factory=ResourcesSpec)
    logging: LoggingSpec = Field(default_factory=LoggingSpec)
    alarms: AlarmsSpec = Field(default_factory=AlarmsSpec)
    seed: int = Field(0, ge=0, le=MAX_SEED)

    @model_validator(mode="after")
    def _within_limits(self, info: ValidationInfo) -> RunSpec:
        """Every size within its bound (workers/spec_limits.py), for a spec a user wrote."""
        if not _stored(info):
            errors = limit_errors(self.model_dump(by_alias=True))
            if errors:
                raise _field_error(*errors[0])
        return self

    @model_validator(mode="after")
    def _numbers_in_range(self) -> RunSpec:
        """Every integer of the spec within signed 64 bits and every float finite, whatever
        the field and however the value came (a YAML `1e400`, a string pydantic coerced):
        the control plane stores the spec, and its columns and jsonb hold nothing else."""
        stack: list[tuple[Any, str]] = [(self.model_dump(by_alias=True), "")]
        while stack:
            node, path = stack.pop()
            if isinstance(node, dict | list | tuple):
                items = node.items() if isinstance(node, dict) else enumerate(node)
                stack.extend((v, f"{path}.{k}" if path else str(k)) for k, v in items)
            elif isinstance(node, bool):
                continue
            elif isinstance(node, int) and not INT64_MIN <= node <= INT64_MAX:
                raise _field_error(path, f"must be between {INT64_MIN} and {INT64_MAX}")
            elif isinstance(node, float) and not math.isfinite(node):
                raise _field_error(path, "must be a finite number")
        return self

    @model_validator(mode="before")
    @classmethod
    def _default_backend(cls, data: Any) -> Any:
        # `rollout: {temperature: 0.7}` means the default (torch) backend, not an error.
        rollout = data.get("rollout") if isinstance(data, dict) else None
        if isinstance(rollout, dict) and "backend" not in rollout:
            data = {**data, "rollout": {"backend": "torch", **rollout}}
        return data

    @model_validator(mode="after")
    def _env_pieces(self) -> RunSpec:
        for i, term in enumerate(self.reward.functions):
            if isinstance(term, EnvTerm) and self.env is None:
                raise _field_error(f"reward.functions.{i}.name", "env needs an env section")
            if isinstance(term, ReasoningGymTerm) and self.data.task != "reasoning_gym":
                raise _field_error(
                    f"reward.functions.{i}.name", "reasoning_gym needs data.task: reasoning_gym"
                )
        if self.data.task == "environment" and self.env is None:
            raise _field_error("data.task", "environment needs an env section")
        return self

    @model_validator(mode="after")
    def _overlong_fits_the_budget(self) -> RunSpec:
        for i, term in enumerate(self.reward.functions):
            if isinstance(term, OverlongPenaltyTerm) and term.max_new_tokens is None:
                limit = self.rollout.max_new_tokens
                if term.buffer > limit:
                    raise _field_error(
                        f"reward.functions.{i}.buffer",
                        f"must be <= rollout.max_new_tokens ({limit})",
                    )
        return self

    def response_tokens_max(self) -> int:
        """The most tokens after the prompt a sample holds: a turn's `max_new_tokens`, or an
        episode's budget (`env.max_episode_tokens`, default `max_turns` turns). The L_max of
        `seq_mean_token_sum_norm` and the episodes' limit read it here."""
        if self.env is None:
            return self.rollout.max_new_tokens
        return self.env.max_episode_tokens or self.env.max_turns * self.rollout.max_new_tokens

    def outbound_urls(self) -> list[tuple[str, str]]:
        """(field, URL) of every address the run's job will call for the user: each is
        reached under the egress policy (workers/egress.py), and a launch checks them."""
        urls = [
            (f"reward.functions.{i}.url", t.url)
            for i, t in enumerate(self.reward.functions)
            if isinstance(t, ServiceTerm)
        ]
        if self.logging.mlflow is not None:
            urls.append(("logging.mlflow.tracking_uri", self.logging.mlflow.tracking_uri))
        if self.env is not None and self.env.server is not None:
            urls.append(("env.server.url", self.env.server.url))
        return urls

    def secret_names(self) -> list[tuple[str, str]]:
        """(field, name) of every team secret the spec names: what the run's job receives
        at bootstrap, and nothing else."""
        names = [
            (f"reward.functions.{i}.secret", t.secret)
            for i, t in enumerate(self.reward.functions)
            if isinstance(t, ServiceTerm) and t.secret is not None
        ]
        if self.env is not None and self.env.server is not None and self.env.server.secret:
            names.append(("env.server.secret", self.env.server.secret))
        return names

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able dict with the public key names (`async`, not `async_`)."""
        return self.model_dump(mode="json", by_alias=True)

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.to_dict(), sort_keys=False)


# --------------------------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------------------------


class SpecError(ValueError):
    """A spec that failed validation; `.errors` holds `[{"field", "message"}]`."""

    def __init__(self, errors: list[dict[str, str]]):
        self.errors = errors
        super().__init__("; ".join(f"{e['field']}: {e['message']}" for e in errors))


_UNION_MEMBERS = set(names.BACKENDS)


def _num(v: Any) -> Any:
    # 0.0 → 0 so messages read "must be > 0", as users write it.
    return int(v) if isinstance(v, float) and v.is_integer() else v


def _message(err: dict[str, Any]) -> str:
    kind, ctx = err["type"], err.get("ctx") or {}
    simple = {
        "greater_than": "must be > {gt}",
        "greater_than_equal": "must be >= {ge}",
        "less_than": "must be < {lt}",
        "less_than_equal": "must be <= {le}",
        "missing": "required",
        "extra_forbidden": "unknown key",
        "too_short": "must have at least {min_length} item(s)",
        "string_too_short": "must not be empty",
    }
    if kind in simple:
        return simple[kind].format(**{k: _num(v) for k, v in ctx.items()})
    if kind == "literal_error":
        return f"must be one of {ctx.get('expected', '')}"
    if kind == "union_tag_invalid":
        return f"must be one of {ctx.get('expected_tags', '')}"
    if kind == "union_tag_not_found":
        return "required"
    if kind == _FIELD_ERROR:
        return str(ctx["message"])
    msg = str(err["msg"])
    return msg.removeprefix("Value error, ")


def _path(err: dict[str, Any]) -> str:
    loc = [str(p) for p in err["loc"]]
    # Discriminated unions put the chosen tag in the location: rollout.torch.top_p → rollout.top_p
    if len(loc) >= 2 and loc[0] == "rollout" and loc[1] in _UNION_MEMBERS:
        loc = [loc[0], *loc[2:]]
    # reward.functions.0.format_regex.pattern → reward.functions.0.pattern
    if len(loc) >= 4 and loc[:2] == ["reward", "functions"] and loc[3] in _REWARD_TERM_NAMES:
        loc = [*loc[:3], *loc[4:]]
    if err["type"] in ("union_tag_not_found", "union_tag_invalid"):
        loc = [*loc, str((err.get("ctx") or {}).get("discriminator", "backend")).strip("'")]
    if err["type"] == _FIELD_ERROR:
        loc = [*loc, str(err["ctx"]["path"])]
    return ".".join(loc) or "(root)"


def spec_errors(data: Any) -> list[dict[str, str]]:
    """Validate `data` (a dict, as parsed from YAML/JSON) and return its errors as
    `[{"field": "algorithm.clip_eps_high", "message": "must be > 0"}]`; empty when valid."""
    try:
        RunSpec.model_validate(data)
    except ValidationError as exc:
        return [{"field": _path(e), "message": _message(e)} for e in exc.errors()]
    return []


def stored_spec(data: Any) -> RunSpec:
    """A spec the platform stored earlier, read back (the control plane: dispatch, pools,
    quotas). The admission checks of this release (its size bounds, `headers_secret`) are
    not applied: a launch applied those of its own release, and a run launched under them
    must still be dispatched, retried and counted; its job validates the spec as written
    and fails naming what to change."""
    return RunSpec.model_validate(data, context={"stored": True})


def _stored(info: ValidationInfo) -> bool:
    return bool(info.context and info.context.get("stored"))


def parse_spec(data: Any) -> RunSpec:
    """`RunSpec.model_validate` with errors reported as a `SpecError` naming field paths."""
    errors = spec_errors(data)
    if errors:
        raise SpecError(errors)
    return RunSpec.model_validate(data)


def load_spec(path_or_text: str | Path, overrides: list[str] | None = None) -> RunSpec:
    """Load a spec from a YAML/JSON file path or from YAML/JSON text, then apply
    `key.path=value` overrides."""
    text = str(path_or_text)
    is_text = isinstance(path_or_text, str) and ("\n" in text or text.lstrip().startswith("{"))
    if not is_text:
        path = Path(path_or_text)
        if not path.is_file():
            raise FileNotFoundError(f"spec file not found: {path}")
        text = path.read_text()
    data = yaml.safe_load(text) or {}
    if not isinstance(data, dict):
        raise SpecError([{"field": "(root)", "message": "must be a mapping of sections"}])
    return parse_spec(apply_overrides(data, overrides or []))


def apply_overrides(data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Return a copy of `data` with each `"a.b.c=value"` set; values are parsed as YAML
    (`3` → int, `true` → bool, `[a, b]` → list, `null` → None)."""
    out = copy.deepcopy(data)
    for item in overrides:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"override {item!r} is not of the form key.path=value")
        parts = key.strip().split(".")
        node = out
        for i, part in enumerate(parts[:-1]):
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                where = ".".join(parts[: i + 1])
                raise ValueError(f"override {item!r}: {where} is not a section")  # noqa: TRY004
            node = child
        node[parts[-1]] = yaml.safe_load(raw) if raw.strip() else ""
    return out


def spec_json_schema() -> dict[str, Any]:
    """JSON Schema of the spec, with public key names (`async`)."""
    return RunSpec.model_json_schema(by_alias=True)
