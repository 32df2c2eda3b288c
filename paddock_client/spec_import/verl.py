"""verl's GRPO configs (`verl/trainer/config/ppo_trainer.yaml` and the overrides its example
scripts give on the command line) translated into Paddock keys."""

from __future__ import annotations

from .common import Gpus, epochs_to_steps, map_resources, map_tensorboard, map_wandb
from .engine import (
    Builder,
    Rule,
    SpecImportError,
    as_bool,
    as_float,
    as_int,
    as_str,
    as_str_list,
    choice,
    kind,
    one_path,
    only,
    optimizer_rules,
    sampling_rules,
    steps_or_off,
    target_modules,
    unmappable,
)

_V_ACTOR = "actor_rollout_ref.actor"
_V_ROLL = "actor_rollout_ref.rollout"
_V_MODEL = "actor_rollout_ref.model"
_V_RC = "algorithm.rollout_correction"

_VERL_LOSS_AGG = choice(
    {
        "token-mean": "token_mean",
        "seq-mean-token-mean": "seq_mean_token_mean",
        "seq-mean-token-sum-norm": "seq_mean_token_sum_norm",
    },
    unmappable=("seq-mean-token-sum",),
)
# k1 is `kl` in verl; k3 is `low_var_kl` (the same estimator, clamped)
_VERL_KL = choice(
    {"kl": "k1", "k1": "k1", "low_var_kl": "k3", "k3": "k3"},
    unmappable=("abs", "mse", "k2", "full", "k1+", "k2+", "k3+", "low_var_kl+"),
)
_VERL_IS_LEVEL = choice({"token": "token", "sequence": "sequence"}, unmappable=("geometric",))

_VERL_RULES = [
    Rule(f"{_V_MODEL}.path", "model.path", as_str),
    Rule(f"{_V_MODEL}.lora_alpha", "lora.alpha", as_float),
    Rule(f"{_V_MODEL}.target_modules", "lora.target_modules", target_modules),
    Rule(f"{_V_MODEL}.enable_gradient_checkpointing", "train.activation_checkpointing", as_bool),
    Rule(f"{_V_MODEL}.trust_remote_code", None, only(False, as_bool)),
    Rule(f"{_V_MODEL}.use_remove_padding", None, as_bool),  # packing is Paddock's own choice
    *optimizer_rules(f"{_V_ACTOR}.optim"),
    Rule(f"{_V_ACTOR}.grad_clip", "train.grad_clip", as_float),
    # clip_ratio is the symmetric default; clip_ratio_low / _high, when set, win (as in verl)
    Rule(f"{_V_ACTOR}.clip_ratio", "algorithm.clip_eps_low", as_float),
    Rule(f"{_V_ACTOR}.clip_ratio", "algorithm.clip_eps_high", as_float),
    Rule(f"{_V_ACTOR}.clip_ratio_low", "algorithm.clip_eps_low", as_float),
    Rule(f"{_V_ACTOR}.clip_ratio_high", "algorithm.clip_eps_high", as_float),
    Rule(f"{_V_ACTOR}.loss_agg_mode", "algorithm.loss_agg", _VERL_LOSS_AGG),
    Rule(f"{_V_ACTOR}.kl_loss_type", "algorithm.kl_estimator", _VERL_KL),
    Rule(f"{_V_ACTOR}.ppo_micro_batch_size_per_gpu", "train.micro_batch_size", as_int),
    Rule(f"{_V_ACTOR}.ppo_epochs", None, only(1, as_int)),  # one optimizer step per batch
    Rule(f"{_V_ACTOR}.entropy_coeff", None, only(0.0, as_float)),
    Rule(f"{_V_ACTOR}.policy_loss.loss_mode", None, only("vanilla")),
    *sampling_rules(_V_ROLL, "name", _V_ROLL),
    Rule(f"{_V_ROLL}.n", "algorithm.num_generations", as_int),
    Rule(f"{_V_ROLL}.do_sample", None, only(True, as_bool)),
    Rule(f"{_V_ROLL}.multi_turn.enable", None, only(False, as_bool)),
    Rule("data.train_batch_size", "train.prompts_per_step", as_int),
    # rollout.response_length is what the engine uses; verl fills it from data's by default
    Rule("data.max_response_length", "rollout.max_new_tokens", as_int),
    Rule(f"{_V_ROLL}.response_length", "rollout.max_new_tokens", as_int),
    Rule("data.max_prompt_length", "data.max_prompt_tokens", as_int),
    Rule(f"{_V_ROLL}.prompt_length", "data.max_prompt_tokens", as_int),
    Rule("data.train_files", "data.path", one_path),
    Rule("data.val_files", "data.eval_path", one_path),
    Rule("data.prompt_key", "data.prompt_key", as_str),
    Rule("data.seed", "seed", as_int),
    Rule("data.return_raw_chat", None, as_bool),
    Rule("algorithm.filter_groups.enable", "algorithm.dynamic_sampling", as_bool),
    Rule(f"{_V_RC}.rollout_is", "algorithm.rollout_is", _VERL_IS_LEVEL),
    Rule(f"{_V_RC}.rollout_is_threshold", "algorithm.rollout_is_threshold", as_float),
    Rule(f"{_V_RC}.bypass_mode", "algorithm.bypass_mode", as_bool),
    Rule("trainer.total_training_steps", "train.steps", as_int),
    Rule("trainer.save_freq", "checkpoint.every", steps_or_off),
    Rule("trainer.max_actor_ckpt_to_keep", "checkpoint.keep_last", as_int),
    Rule("trainer.test_freq", "train.eval_every", steps_or_off),
    Rule("trainer.critic_warmup", None, only(0, as_int)),
    Rule("critic.enable", None, only(False, as_bool)),
    Rule("reward_model.enable", None, only(False, as_bool)),
]


def translate(b: Builder, *, dataset_rows: int | None = None) -> None:
    for rule in _VERL_RULES:
        b.apply(rule)
    b.apply_mapping("data.apply_chat_template_kwargs", "data.chat_template_kwargs")
    _verl_overlong_prompts(b)
    # lora_rank 0 is verl's full fine-tuning: Paddock trains LoRA only, so it is listed
    b.apply(Rule(f"{_V_MODEL}.lora_rank", "lora.r", lambda k, v: as_int(k, v) or unmappable()))
    # KL to the reference: a loss term (use_kl_loss) is Paddock's; KL in the reward is not
    use_kl = b.value(f"{_V_ACTOR}.use_kl_loss")
    if use_kl is not None:
        b.apply(Rule(f"{_V_ACTOR}.use_kl_loss", None, as_bool))
        if use_kl:
            b.apply(Rule(f"{_V_ACTOR}.kl_loss_coef", "algorithm.kl_coef", as_float))
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
    if mini is not None and as_int(f"{_V_ACTOR}.ppo_mini_batch_size", mini) == batch:
        b.consume(f"{_V_ACTOR}.ppo_mini_batch_size")
    # verl's files hold chat messages and the gold answer under reward_model.ground_truth
    if b.get("data.path") is not None:
        b.set("data.task", "dataset", "data.train_files")
        b.set("data.answer_key", "reward_model.ground_truth", "data.train_files")
    if b.get("train.steps") is None:  # total_training_steps, when set, wins over epochs
        epochs_to_steps(b, epochs_key="trainer.total_epochs",
                        batch=b.get("train.prompts_per_step"), rows=dataset_rows)  # fmt: skip
    else:
        b.consume("trainer.total_epochs")
    _verl_gpus(b)
    _verl_logger(b)
    _verl_inert(b)


def _verl_overlong_prompts(b: Builder) -> None:
    # filter_overlong_prompts drops them before truncation could apply; without it
    # truncation: error refuses the dataset; left/right/middle cut prompts, which Paddock never does
    fkey, tkey = "data.filter_overlong_prompts", "data.truncation"
    filt, trunc = b.value(fkey), b.value(tkey)
    if filt is not None and as_bool(fkey, filt):
        b.set("data.overlong_prompts", "drop", fkey)
        b.consume(fkey, tkey)
        return
    b.consume(fkey)
    if trunc is not None:
        b.apply(Rule(tkey, "data.overlong_prompts", choice(
            {"error": "error"}, unmappable=("left", "right", "middle"))))  # fmt: skip


def _verl_advantage(b: Builder) -> None:
    key = "algorithm.adv_estimator"
    est = b.value(key)
    if est is None:
        return
    known = ("gae", "reinforce_plus_plus", "reinforce_plus_plus_baseline", "remax", "opo",
             "grpo_passk", "gpg", "cispo", "gdpo")  # fmt: skip
    if est not in ("grpo", "rloo", *known):
        raise SpecImportError(key, f"must be a verl advantage estimator, got {kind(est)}")
    if est == "rloo":
        b.set("algorithm.advantage", "rloo", key)
    elif est == "grpo":
        std_key = "algorithm.norm_adv_by_std_in_grpo"
        by_std = b.value(std_key)
        by_std = True if by_std is None else as_bool(std_key, by_std)
        b.set("algorithm.advantage", "grpo" if by_std else "dr_grpo", key)
        b.consume(std_key)
    else:
        return  # a critic or another estimator: listed
    b.consume(key, "algorithm.gamma", "algorithm.lam")  # no effect on an outcome reward


def _verl_gpus(b: Builder) -> None:
    per_node, nodes = "trainer.n_gpus_per_node", "trainer.nnodes"
    n, k = b.value(per_node), b.value(nodes)
    if n is None:
        return
    total = as_int(per_node, n) * (1 if k is None else as_int(nodes, k))
    # the hybrid engine: actor and rollout on the same GPUs
    map_resources(b, Gpus(total), (per_node, nodes))


# verl's `trainer.logger` entries and what each becomes (None: nothing to mirror)
_MIRRORED = {"console": None, "wandb": "wandb", "tensorboard": "tensorboard"}


def _verl_logger(b: Builder) -> None:
    key = "trainer.logger"
    raw = b.value(key)
    if raw is None:
        return
    loggers = as_str_list(key, raw)
    project, name = "trainer.project_name", "trainer.experiment_name"
    if "wandb" in loggers:
        map_wandb(b, b.value(project), b.value(name), (key, project, name))
    if "tensorboard" in loggers:  # verl writes under $TENSORBOARD_DIR
        map_tensorboard(b, (key,))
    rest = [x for x in loggers if x not in _MIRRORED]
    if not rest:
        b.consume(key)
        return
    b.used.discard(key)  # carried over in part: listed, with what was left out
    why = {"mlflow": "verl reads its tracking URI from MLFLOW_TRACKING_URI: set "
           "logging.mlflow.tracking_uri"}  # fmt: skip
    b.note(key, "; ".join(why.get(x, f"{x}: no Paddock mirror") for x in rest))


def _verl_inert(b: Builder) -> None:
    """Settings that do nothing in this verl run, so are no difference: the critic of an
    estimator without one, the profilers while none is chosen, switched-off sections."""
    if b.get("algorithm.advantage") is not None and b.value("critic.enable") is not True:
        b.consume_under("critic")
        b.consume("critic.enable")
    if "global_profiler.tool" in b.flat and b.value("global_profiler.tool") is None:
        b.consume_under("global_profiler")
        b.consume(*(k for k in b.flat if ".profiler." in k))
    b.consume_disabled()
