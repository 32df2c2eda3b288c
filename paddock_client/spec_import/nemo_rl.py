"""NeMo-RL's GRPO configs (`examples/configs/grpo_*.yaml` and the recipes that inherit them
through `defaults:`) translated into Paddock keys."""

from __future__ import annotations

from typing import Any

from .common import Gpus, epochs_to_steps, map_resources, map_tensorboard, map_wandb
from .engine import (
    ALL_LINEAR,
    Builder,
    Rule,
    as_bool,
    as_float,
    as_int,
    as_str,
    as_str_list,
    choice,
    is_vllm,
    only,
    optimizer_rules,
    sampling_rules,
    steps_or_off,
)

_N_GEN = "policy.generation"
_N_LORA = "policy.dtensor_cfg.lora_cfg"
_N_KL = choice({"k1": "k1", "k3": "k3"}, unmappable=("k2",))

_NEMO_RULES = [
    Rule("policy.model_name", "model.path", as_str),
    Rule(
        "policy.precision",
        "model.dtype",
        choice({"bfloat16": "bfloat16", "float32": "float32"}, unmappable=("float16",)),
    ),
    Rule("policy.train_micro_batch_size", "train.micro_batch_size", as_int),
    Rule("policy.max_grad_norm", "train.grad_clip", as_float),
    Rule("policy.logprob_chunk_size", "train.logprob_chunk_size", as_int),
    Rule("policy.dtensor_cfg.activation_checkpointing", "train.activation_checkpointing", as_bool),
    Rule("policy.optimizer.name", None, only("torch.optim.AdamW")),
    *optimizer_rules("policy.optimizer.kwargs"),
    *sampling_rules(_N_GEN, "backend", f"{_N_GEN}.vllm_cfg"),
    Rule(f"{_N_GEN}.max_new_tokens", "rollout.max_new_tokens", as_int),
    Rule(f"{_N_GEN}.stop_strings", "rollout.stop", as_str_list),
    Rule("grpo.num_prompts_per_step", "train.prompts_per_step", as_int),
    Rule("grpo.num_generations_per_prompt", "algorithm.num_generations", as_int),
    Rule("grpo.max_num_steps", "train.steps", as_int),
    Rule("grpo.seed", "seed", as_int),
    Rule("grpo.val_period", "train.eval_every", steps_or_off),
    Rule("grpo.max_val_samples", "data.eval_size", as_int),
    Rule("grpo.use_dynamic_sampling", "algorithm.dynamic_sampling", as_bool),
    Rule("grpo.max_rollout_turns", None, only(1, as_int)),
    Rule("grpo.overlong_filtering", None, only(False, as_bool)),
    Rule("grpo.async_grpo.enabled", "async.enabled", as_bool),
    Rule("grpo.async_grpo.max_trajectory_age_steps", "async.max_staleness", as_int),
    Rule("loss_fn.reference_policy_kl_penalty", "algorithm.kl_coef", as_float),
    Rule("loss_fn.reference_policy_kl_type", "algorithm.kl_estimator", _N_KL),
    Rule("loss_fn.ratio_clip_min", "algorithm.clip_eps_low", as_float),
    Rule("loss_fn.ratio_clip_max", "algorithm.clip_eps_high", as_float),
    Rule(
        "loss_fn.token_level_loss",
        "algorithm.loss_agg",
        choice({True: "token_mean", False: "seq_mean_token_mean"}),
    ),
    Rule("loss_fn.use_on_policy_kl_approximation", None, only(False, as_bool)),
    Rule("loss_fn.force_on_policy_ratio", None, only(False, as_bool)),
    # switches of other losses, off: the clipped GRPO loss Paddock always uses
    Rule("loss_fn.use_cispo", None, only(False, as_bool)),
    Rule("loss_fn.disable_ppo_ratio", None, only(False, as_bool)),
    Rule("loss_fn.use_kl_in_reward", None, only(False, as_bool)),
    Rule("loss_fn.positive_example_nll_weight", None, only(0.0, as_float)),
    *(
        Rule(f"reward_penalties.penalize_{p}", None, only(False, as_bool))
        for p in (
            "duplicated_reasoning",
            "empty_final_answer",
            "unwanted_tokens",
            "malformed_think_tag",
        )
    ),  # fmt: skip
    # the engine's logprobs after temperature, as Paddock's engines give them
    Rule(f"{_N_GEN}.vllm_cfg.logprobs_mode", None, only("processed_logprobs"), is_vllm),
    Rule("checkpointing.save_period", "checkpoint.every", steps_or_off),
    Rule("data.max_input_seq_length", "data.max_prompt_tokens", as_int),
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


def translate(b: Builder, *, dataset_rows: int | None = None) -> None:
    for rule in _NEMO_RULES:
        b.apply(rule)
    for dst, srcs in _NEMO_DATA.items():
        for src in srcs:  # the first one set wins; the others stay listed
            if b.value(src) is not None:
                b.apply(Rule(src, dst, as_str))
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
        mode = "keep" if in_flight is not None and as_bool(key, in_flight) else "wait"
        b.set("async.weight_update", mode, key)
        b.consume(key)
    # one optimizer step per batch of num_prompts_per_step × num_generations sequences
    gbs = b.value("policy.train_global_batch_size")
    p, g = b.get("train.prompts_per_step"), b.get("algorithm.num_generations")
    key = "policy.train_global_batch_size"
    if gbs is not None and p is not None and g is not None and as_int(key, gbs) == p * g:
        b.consume("policy.train_global_batch_size")
    if b.value("checkpointing.enabled") is False:
        b.set("checkpoint.every", 0, "checkpointing.enabled")
        b.consume("checkpointing.enabled")
    elif b.value("checkpointing.enabled") is True:
        b.consume("checkpointing.enabled")
    tok = b.value("policy.tokenizer.name")
    if tok is not None and tok == b.get("model.path"):
        b.consume("policy.tokenizer.name")
    max_steps = b.get("train.steps")
    epochs_to_steps(b, epochs_key="grpo.max_num_epochs", batch=b.get("train.prompts_per_step"),
                    rows=dataset_rows, max_steps=max_steps)  # fmt: skip
    _nemo_gpus(b)
    _nemo_logger(b)
    # engine settings of the generation backends not chosen do nothing
    if b.value(f"{_N_GEN}.backend") != "megatron":
        b.consume_under(f"{_N_GEN}.mcore_generation_config")
    if b.value(f"{_N_GEN}.refit_transport") != "nixl":
        b.consume_under(f"{_N_GEN}.refit_cfg.nixl")
    # a switched-off LoRA is full fine-tuning, which Paddock does not do: that stays listed
    b.consume_disabled(keep=(_N_LORA,))


def _nemo_lora(b: Builder) -> None:
    enabled = b.value(f"{_N_LORA}.enabled")
    if enabled is None:
        return
    b.apply(Rule(f"{_N_LORA}.enabled", None, as_bool))
    if not enabled:
        return
    b.apply(Rule(f"{_N_LORA}.dim", "lora.r", as_int))
    b.apply(Rule(f"{_N_LORA}.alpha", "lora.alpha", as_float))
    b.apply(Rule(f"{_N_LORA}.dropout", "lora.dropout", as_float))
    if b.value(f"{_N_LORA}.match_all_linear") is True:
        b.set("lora.target_modules", list(ALL_LINEAR), f"{_N_LORA}.match_all_linear")
        b.consume(f"{_N_LORA}.match_all_linear", f"{_N_LORA}.target_modules")
    else:
        b.apply(Rule(f"{_N_LORA}.match_all_linear", None, as_bool))
        b.apply(Rule(f"{_N_LORA}.target_modules", "lora.target_modules", as_str_list))


def _nemo_advantage(b: Builder) -> None:
    loo_key, norm_key = "grpo.use_leave_one_out_baseline", "grpo.normalize_rewards"
    loo, norm = b.value(loo_key), b.value(norm_key)
    loo = False if loo is None else as_bool(loo_key, loo)
    norm = True if norm is None else as_bool(norm_key, norm)
    # Leave-one-out then divided by the std is G/(G−1) × GRPO's advantage: a constant factor,
    # which Adam's update does not see; without the std it is RLOO, without either Dr.GRPO.
    advantage = "grpo" if norm else ("rloo" if loo else "dr_grpo")
    # newer versions name the estimator (grpo.adv_estimator.name), its switches
    # interpolating the ones above; another estimator (reinforce_plus_plus) is listed
    est = "grpo.adv_estimator"
    name = b.value(f"{est}.name")
    if name not in (None, "grpo"):
        b.note(f"{est}.name", f"{name}: Paddock's advantages are grpo, dr_grpo and rloo")
        return
    b.set("algorithm.advantage", advantage, norm_key)
    b.consume(loo_key, norm_key)
    for sub in ("name", "normalize_rewards", "use_leave_one_out_baseline", "minus_baseline"):
        b.consume(f"{est}.{sub}")  # the last is Reinforce++'s alone


def _nemo_correction(b: Builder) -> None:
    # NeMo-RL computes π_old with the trainer (prev_logprobs): Paddock's bypass_mode: false
    b.set("algorithm.bypass_mode", False, "loss_fn")
    key = "loss_fn.use_importance_sampling_correction"
    on = b.value(key)
    if on is None:
        return
    b.apply(Rule(key, None, as_bool))
    if not on:  # then the correction's settings do nothing
        b.consume(
            *(
                k
                for k in b.flat
                if k.startswith(
                    ("loss_fn.truncated_importance_sampling", "loss_fn.sequence_level_importance")
                )
            )
        )
        return
    seq_key = "loss_fn.sequence_level_importance_ratios"
    seq = b.value(seq_key)
    level = "sequence" if seq is not None and as_bool(seq_key, seq) else "token"
    b.set("algorithm.rollout_is", level, key)
    b.consume(seq_key)
    b.apply(
        Rule(
            "loss_fn.truncated_importance_sampling_ratio",
            "algorithm.rollout_is_threshold",
            as_float,
        )
    )


def _nemo_overlong(b: Builder) -> None:
    base = "grpo.reward_shaping"
    enabled = b.value(f"{base}.enabled")
    if enabled is None:
        return
    b.apply(Rule(f"{base}.enabled", None, as_bool))
    if not enabled:  # its other keys then do nothing in NeMo-RL either
        b.consume(*(k for k in b.flat if k.startswith(f"{base}.")))
        return
    buffer = b.value(f"{base}.overlong_buffer_length")
    if buffer is None:
        return
    term: dict[str, Any] = {
        "name": "overlong_penalty",
        "buffer": as_int(f"{base}.overlong_buffer_length", buffer),
    }
    penalty = b.value(f"{base}.overlong_buffer_penalty")
    if penalty is not None:
        term["weight"] = as_float(f"{base}.overlong_buffer_penalty", penalty)
    max_len = b.value(f"{base}.max_response_length")
    if max_len is not None:
        term["max_new_tokens"] = as_int(f"{base}.max_response_length", max_len)
    terms = b.get("reward.functions") or [{"name": "exact_match"}]
    b.set("reward.functions", [*terms, term], f"{base}.overlong_buffer_length")
    b.consume(*(f"{base}.{k}" for k in (
        "overlong_buffer_length", "overlong_buffer_penalty", "max_response_length")))  # fmt: skip


def _nemo_gpus(b: Builder) -> None:
    per_node, nodes = "cluster.gpus_per_node", "cluster.num_nodes"
    n, k = b.value(per_node), b.value(nodes)
    if n is None:
        return
    k = 1 if k is None else as_int(nodes, k)
    total = as_int(per_node, n) * k
    coloc = f"{_N_GEN}.colocated"
    gen = 0
    srcs = [per_node, nodes, f"{coloc}.enabled"]
    if b.value(f"{coloc}.enabled") is False:
        # dedicated generation GPUs: part of the node on one node, whole nodes on several
        g_gpus, g_nodes = f"{coloc}.resources.gpus_per_node", f"{coloc}.resources.num_nodes"
        if k == 1 and b.value(g_gpus) is not None:
            gen = as_int(g_gpus, b.value(g_gpus))
        elif b.value(g_nodes) is not None:
            gen = as_int(g_nodes, b.value(g_nodes)) * as_int(per_node, n)
        srcs += [g_gpus, g_nodes]
    else:
        b.consume_under(f"{coloc}.resources")  # used only when not colocated
    map_resources(b, Gpus(total, gen), tuple(srcs))


def _nemo_logger(b: Builder) -> None:
    def on(switch: str) -> bool | None:
        value = b.value(f"logger.{switch}")
        return None if value is None else as_bool(f"logger.{switch}", value)

    wandb = on("wandb_enabled")
    if wandb:
        srcs = ("logger.wandb_enabled", "logger.wandb.project", "logger.wandb.name")
        map_wandb(b, b.value("logger.wandb.project"), b.value("logger.wandb.name"), srcs)
        b.apply(Rule("logger.wandb.log_nemo_gym_full_result_tables", None, only(False, as_bool)))
    tensorboard = on("tensorboard_enabled")
    if tensorboard:
        map_tensorboard(b, ("logger.tensorboard_enabled",))
    mlflow = on("mlflow_enabled")
    if mlflow:
        _nemo_mlflow(b)
    # a logger switched off: its section does nothing
    for switch, section, enabled in (
        ("wandb_enabled", "wandb", wandb),
        ("tensorboard_enabled", "tensorboard", tensorboard),
        ("mlflow_enabled", "mlflow", mlflow),
        ("swanlab_enabled", "swanlab", on("swanlab_enabled")),
    ):
        if enabled is False:
            b.consume(f"logger.{switch}")
            b.consume_under(f"logger.{section}")


def _nemo_mlflow(b: Builder) -> None:
    uri_key = "logger.mlflow.tracking_uri"
    uri = b.value(uri_key)
    if not isinstance(uri, str) or not uri.startswith(("http://", "https://")):
        b.note("logger.mlflow_enabled", "Paddock's MLflow mirror needs an http(s) tracking URI")
        return
    mirror: dict[str, Any] = {"tracking_uri": uri}
    for src, dst in (("experiment_name", "experiment"), ("run_name", "run_name")):
        value = b.value(f"logger.mlflow.{src}")
        if value:
            mirror[dst] = str(value)
    b.set("logging.mlflow", mirror, "logger.mlflow_enabled")
    b.consume("logger.mlflow_enabled", uri_key, "logger.mlflow.experiment_name",
              "logger.mlflow.run_name")  # fmt: skip
