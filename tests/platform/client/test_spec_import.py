"""paddock_client.spec_import: verl and NeMo-RL GRPO configs translated into valid run specs."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from paddock_client.spec_import import ALL_LINEAR, SpecImportError, import_spec
from workers.spec import RunSpec, SpecError, parse_spec

FIXTURES = Path(__file__).parent / "fixtures"


def _load(name: str) -> dict:
    return yaml.safe_load((FIXTURES / name).read_text())


@pytest.fixture
def verl() -> dict:
    return _load("verl_grpo_lora.yaml")


@pytest.fixture
def nemo() -> dict:
    return _load("nemo_rl_grpo_lora.yaml")


def _flat(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


# --------------------------------------------------------------------------------------------
# the two fixtures, end to end
# --------------------------------------------------------------------------------------------


def test_verl_config_translates_to_a_valid_spec(verl: dict) -> None:
    spec, unmapped = import_spec("verl", verl)
    run = parse_spec(spec)
    assert run.model.path == "/models/Qwen2.5-3B-Instruct"
    assert (run.lora.r, run.lora.alpha, run.lora.target_modules) == (32, 64.0, ALL_LINEAR)
    assert (run.train.lr, run.train.weight_decay, run.train.grad_clip) == (3e-6, 0.01, 1.0)
    assert (run.train.prompts_per_step, run.train.micro_batch_size) == (64, 16)
    assert run.train.steps == 200 and run.train.eval_every == 5
    assert run.train.activation_checkpointing is True
    assert run.algorithm.num_generations == 8
    assert (run.algorithm.clip_eps_low, run.algorithm.clip_eps_high) == (0.2, 0.28)
    assert run.algorithm.loss_agg == "token_mean"
    assert (run.algorithm.kl_coef, run.algorithm.kl_estimator) == (0.001, "k3")
    assert run.algorithm.advantage == "grpo"
    # verl recomputes π_old with the trainer unless rollout_correction.bypass_mode says not
    assert run.algorithm.bypass_mode is False
    assert run.rollout.backend == "vllm"
    assert run.rollout.gpu_memory_utilization == 0.6
    # response_length is ${oc.select:data.max_response_length,512}: followed, not defaulted
    assert run.rollout.max_new_tokens == 1024
    assert (run.rollout.temperature, run.rollout.top_p, run.rollout.top_k) == (1.0, 1.0, 0)
    assert run.data.task == "dataset"
    assert (run.data.path, run.data.eval_path) == (
        "/data/gsm8k/train.parquet",
        "/data/gsm8k/test.parquet",
    )
    assert (run.data.prompt_key, run.data.answer_key) == ("prompt", "reward_model.ground_truth")
    assert run.data.max_prompt_tokens == 512 and run.data.overlong_prompts == "drop"
    assert run.data.chat_template_kwargs == {"enable_thinking": False}
    assert run.seed == 7
    assert (run.checkpoint.every, run.checkpoint.keep_last) == (20, 3)
    # trainer.logger [console, wandb] with its project and experiment names
    assert run.logging.wandb is not None and run.logging.tensorboard is None
    assert (run.logging.wandb.project, run.logging.wandb.run_name) == (
        "gsm8k-lora",
        "qwen2.5-3b-grpo",
    )
    assert run.logging.wandb.mode == "online"
    # 8 GPUs of one node, actor and rollout colocated there: 4 trainer ranks, 4 engines
    r = run.resources
    assert (r.executor, r.trainer_gpus, r.trainer_actors) == ("ray", 4, 4)
    assert (r.rollout_replicas, r.rollout_gpus) == (4, 1)

    # what Paddock has no setting for is listed, by its dotted source key
    for key in (
        "actor_rollout_ref.rollout.tensor_model_parallel_size",
        "actor_rollout_ref.actor.fsdp_config.param_offload",
        "data.reward_fn_key",
    ):
        assert key in unmapped
    # and nothing that was carried over, nor a class name (_target_)
    for key in (
        "actor_rollout_ref.rollout.n",
        "actor_rollout_ref.actor.clip_ratio",
        "actor_rollout_ref.actor.ppo_mini_batch_size",
        "actor_rollout_ref.rollout.response_length",
        "data.max_response_length",
        "algorithm.kl_ctrl.kl_coef",
        "actor_rollout_ref.actor._target_",
        "trainer.total_epochs",  # total_training_steps, set, is what verl runs
        "trainer.logger",
        "trainer.n_gpus_per_node",
    ):
        assert key not in unmapped
    assert unmapped == sorted(unmapped)


def test_nemo_rl_config_translates_to_a_valid_spec(nemo: dict) -> None:
    spec, unmapped = import_spec("nemo-rl", nemo)
    run = parse_spec(spec)
    assert run.model.path == "/models/Qwen3-1.7B" and run.model.dtype == "bfloat16"
    assert (run.lora.r, run.lora.alpha, run.lora.dropout) == (16, 32.0, 0.0)
    assert run.lora.target_modules == ALL_LINEAR  # match_all_linear: true
    assert (run.train.lr, run.train.weight_decay, run.train.betas) == (2e-5, 0.0, (0.9, 0.999))
    assert (run.train.prompts_per_step, run.train.micro_batch_size) == (32, 8)
    assert (run.train.steps, run.train.eval_every, run.train.grad_clip) == (500, 10, 1.0)
    assert run.algorithm.num_generations == 16
    assert (run.algorithm.clip_eps_low, run.algorithm.clip_eps_high) == (0.2, 0.28)
    assert (run.algorithm.kl_coef, run.algorithm.kl_estimator) == (0.0, "k3")
    assert run.algorithm.loss_agg == "token_mean"
    assert run.algorithm.advantage == "grpo"  # leave-one-out with std: GRPO × G/(G−1)
    assert run.algorithm.dynamic_sampling is True
    assert run.algorithm.bypass_mode is False
    assert (run.algorithm.rollout_is, run.algorithm.rollout_is_threshold) == ("token", 2.0)
    assert run.rollout.backend == "vllm" and run.rollout.enforce_eager is True
    # max_new_tokens: ${policy.max_total_sequence_length}
    assert run.rollout.max_new_tokens == 2048
    assert run.async_.enabled is True and run.async_.max_staleness == 2
    assert run.async_.weight_update == "wait"
    assert run.data.task == "dataset"
    assert (run.data.path, run.data.eval_path) == ("/data/math/train.jsonl", "/data/math/val.jsonl")
    assert (run.data.prompt_key, run.data.answer_key) == ("problem", "expected_answer")
    assert run.data.max_prompt_tokens == 512 and run.data.eval_size == 256
    assert run.data.chat_template_kwargs == {"enable_thinking": False}
    assert [t.name for t in run.reward.functions] == ["math_verify", "overlong_penalty"]
    overlong = run.reward.functions[1]
    assert (overlong.buffer, overlong.weight, overlong.max_new_tokens) == (128, 1.0, 2048)
    assert run.seed == 42 and run.checkpoint.every == 25

    # 8 GPUs, generation colocated: 4 trainer ranks and 4 engines; W&B from logger.wandb
    r = run.resources
    assert (r.executor, r.trainer_gpus, r.rollout_replicas) == ("ray", 4, 4)
    assert run.logging.wandb is not None and run.logging.wandb.mode == "online"
    for key in (
        "grpo.max_num_epochs",
        "checkpointing.keep_top_k",  # best-k by a metric is not Paddock's keep_last
        "data.default.prompt_file",
        "policy.optimizer.kwargs.eps",
    ):
        assert key in unmapped
    for key in (
        "policy.max_total_sequence_length",  # reached the spec through the interpolation
        "policy.tokenizer.name",
        "policy.train_global_batch_size",  # 512 = 32 prompts × 16 generations
        "grpo.use_leave_one_out_baseline",
        "data.default.dataset_name",
        "loss_fn.ratio_clip_c",  # null: nothing to map
        "cluster.gpus_per_node",
        "logger.wandb.project",
    ):
        assert key not in unmapped


def test_the_spec_holds_only_what_the_source_set(verl: dict) -> None:
    spec, _ = import_spec("verl", verl)
    assert "async" not in spec and "tensorboard" not in spec["logging"]
    full = RunSpec.model_validate(spec).to_dict()
    for path, value in _flat(spec).items():
        node = full
        for part in path.split("."):
            node = node[part]
        assert node == value, path


def test_dotted_keys_read_as_the_nested_config(verl: dict, nemo: dict) -> None:
    # what `key=value` command-line overrides of either framework give, once parsed
    assert import_spec("verl", _flat(verl)) == import_spec("verl", verl)
    assert import_spec("nemo-rl", _flat(nemo)) == import_spec("nemo-rl", nemo)
    flat = {"++actor_rollout_ref.rollout.n": 4, "+data.train_batch_size": 16}
    spec, unmapped = import_spec("verl", flat)
    assert spec["algorithm"]["num_generations"] == 4 and spec["train"]["prompts_per_step"] == 16
    assert unmapped == []


# --------------------------------------------------------------------------------------------
# keys it cannot map are listed, not guessed
# --------------------------------------------------------------------------------------------


def test_unknown_keys_are_listed(verl: dict, nemo: dict) -> None:
    verl["actor_rollout_ref"]["actor"]["some_new_knob"] = 3
    verl["my_section"] = {"a": {"b": 1}}
    _, unmapped = import_spec("verl", verl)
    assert "actor_rollout_ref.actor.some_new_knob" in unmapped and "my_section.a.b" in unmapped
    nemo["policy"]["generation"]["min_p"] = 0.1
    _, unmapped = import_spec("nemo-rl", nemo)
    assert "policy.generation.min_p" in unmapped


def test_values_paddock_lacks_leave_the_key_listed_and_the_default(verl: dict) -> None:
    roll = verl["actor_rollout_ref"]["rollout"]
    roll["name"] = "sglang"
    verl["actor_rollout_ref"]["model"]["lora_rank"] = 0  # full fine-tuning in verl
    verl["actor_rollout_ref"]["actor"]["ppo_mini_batch_size"] = 16  # 4 updates a step
    verl["actor_rollout_ref"]["actor"]["loss_agg_mode"] = "seq-mean-token-sum"
    spec, unmapped = import_spec("verl", verl)
    assert "backend" not in spec["rollout"] and "gpu_memory_utilization" not in spec["rollout"]
    assert "r" not in spec["lora"] and "loss_agg" not in spec["algorithm"]
    for key in ("name", "gpu_memory_utilization", "enforce_eager"):
        assert f"actor_rollout_ref.rollout.{key}" in unmapped
    assert "actor_rollout_ref.model.lora_rank" in unmapped
    assert "actor_rollout_ref.actor.ppo_mini_batch_size" in unmapped
    assert "actor_rollout_ref.actor.loss_agg_mode" in unmapped
    parse_spec(spec)


def test_unresolvable_interpolation_is_listed_where_unmapped(nemo: dict) -> None:
    nemo["policy"]["dynamic_batching"] = {"train_mb_tokens": "${mul:${policy.x}, 2}"}
    _, unmapped = import_spec("nemo-rl", nemo)
    assert "policy.dynamic_batching.train_mb_tokens" in unmapped


# --------------------------------------------------------------------------------------------
# the frameworks' semantics
# --------------------------------------------------------------------------------------------


def test_verl_advantage_kl_and_clip(verl: dict) -> None:
    cfg = copy.deepcopy(verl)
    cfg["algorithm"]["norm_adv_by_std_in_grpo"] = False
    cfg["actor_rollout_ref"]["actor"]["use_kl_loss"] = False
    cfg["actor_rollout_ref"]["actor"]["kl_loss_type"] = "kl"
    del cfg["actor_rollout_ref"]["actor"]["clip_ratio_low"]
    del cfg["actor_rollout_ref"]["actor"]["clip_ratio_high"]
    cfg["actor_rollout_ref"]["actor"]["clip_ratio"] = 0.25
    cfg["algorithm"]["rollout_correction"] = {"bypass_mode": True}
    spec, unmapped = import_spec("verl", cfg)
    alg = spec["algorithm"]
    assert alg["advantage"] == "dr_grpo" and alg["kl_coef"] == 0.0
    assert alg["kl_estimator"] == "k1"
    assert (alg["clip_eps_low"], alg["clip_eps_high"]) == (0.25, 0.25)
    assert alg["bypass_mode"] is True
    assert "actor_rollout_ref.actor.kl_loss_coef" not in unmapped

    cfg = copy.deepcopy(verl)
    cfg["algorithm"]["rollout_correction"] = {"rollout_is": "sequence", "rollout_is_threshold": 3}
    alg = import_spec("verl", cfg)[0]["algorithm"]
    assert (alg["rollout_is"], alg["rollout_is_threshold"], alg["bypass_mode"]) == (
        "sequence",
        3.0,
        False,
    )
    cfg = copy.deepcopy(verl)
    cfg["algorithm"]["use_kl_in_reward"] = True  # KL in the reward: not Paddock's loss term
    assert "algorithm.kl_ctrl.kl_coef" in import_spec("verl", cfg)[1]


@pytest.mark.parametrize(
    ("loo", "normalize", "advantage"),
    [(True, True, "grpo"), (False, True, "grpo"), (True, False, "rloo"), (False, False, "dr_grpo")],
)
def test_nemo_rl_advantage(nemo: dict, loo: bool, normalize: bool, advantage: str) -> None:
    nemo["grpo"]["use_leave_one_out_baseline"] = loo
    nemo["grpo"]["normalize_rewards"] = normalize
    assert import_spec("nemo-rl", nemo)[0]["algorithm"]["advantage"] == advantage


def test_nemo_rl_lora_off_and_explicit_targets(nemo: dict) -> None:
    lora = nemo["policy"]["dtensor_cfg"]["lora_cfg"]
    lora.update(match_all_linear=False, target_modules=["q_proj", "v_proj"])
    assert import_spec("nemo-rl", nemo)[0]["lora"]["target_modules"] == ["q_proj", "v_proj"]
    lora["enabled"] = False
    spec, unmapped = import_spec("nemo-rl", nemo)
    assert "lora" not in spec and "policy.dtensor_cfg.lora_cfg.dim" in unmapped


def test_nemo_rl_older_flat_data_layout() -> None:
    cfg = {
        "data": {
            "dataset_name": "ResponseDataset",
            "train_data_path": "/data/train.jsonl",
            "val_data_path": "/data/val.jsonl",
            "input_key": "question",
            "output_key": "answer",
        }
    }
    spec, unmapped = import_spec("nemo-rl", cfg)
    assert spec["data"] == {
        "path": "/data/train.jsonl",
        "eval_path": "/data/val.jsonl",
        "prompt_key": "question",
        "answer_key": "answer",
        "task": "dataset",
    }
    assert unmapped == []
    # a named hub dataset is not a file Paddock can read: listed
    cfg["data"]["dataset_name"] = "OpenMathInstruct-2"
    assert "data.dataset_name" in import_spec("nemo-rl", cfg)[1]


# --------------------------------------------------------------------------------------------
# nonsense input: a clear error naming the key
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "value", "key", "words"),
    [
        (("actor_rollout_ref", "rollout", "n"), "five", "actor_rollout_ref.rollout.n", "integer"),
        (
            ("actor_rollout_ref", "actor", "optim", "lr"),
            "fast",
            "actor_rollout_ref.actor.optim.lr",
            "number",
        ),  # fmt: skip
        (
            ("actor_rollout_ref", "actor", "loss_agg_mode"),
            "tokenmean",
            "actor_rollout_ref.actor.loss_agg_mode",
            "token-mean",
        ),  # fmt: skip
        (("actor_rollout_ref", "rollout", "name"), "vlm", "actor_rollout_ref.rollout.name", "vllm"),
        (("algorithm", "adv_estimator"), "grp0", "algorithm.adv_estimator", "estimator"),
        (
            ("actor_rollout_ref", "actor", "use_kl_loss"),
            "yes",
            "actor_rollout_ref.actor.use_kl_loss",
            "true or false",
        ),  # fmt: skip
        (("data", "train_files"), 3, "data.train_files", "string"),
    ],
)
def test_nonsense_verl_values_name_the_key(
    verl: dict, path: tuple, value: object, key: str, words: str
) -> None:
    node = verl
    for part in path[:-1]:
        node = node[part]
    node[path[-1]] = value
    with pytest.raises(SpecImportError) as exc:
        import_spec("verl", verl)
    assert exc.value.key == key
    assert str(exc.value).startswith(f"{key}: ") and words in str(exc.value)
    assert isinstance(exc.value, SpecError)  # callers that catch spec errors catch these


@pytest.mark.parametrize(
    ("edit", "key", "paddock"),
    [
        # translated, but refused by the spec: both names are given
        (
            lambda c: c["actor_rollout_ref"]["rollout"].update(top_p=0.9),
            "actor_rollout_ref.rollout.top_p",
            "rollout.top_p",
        ),  # fmt: skip
        (
            lambda c: c["actor_rollout_ref"]["rollout"].update(n=1),
            "actor_rollout_ref.rollout.n",
            "algorithm.num_generations",
        ),  # fmt: skip
        (
            lambda c: c["actor_rollout_ref"]["rollout"].update(temperature=3.0),
            "actor_rollout_ref.rollout.temperature",
            "rollout.temperature",
        ),  # fmt: skip
    ],
)
def test_values_paddock_refuses_name_both_keys(verl: dict, edit, key: str, paddock: str) -> None:
    edit(verl)
    with pytest.raises(SpecImportError) as exc:
        import_spec("verl", verl)
    assert exc.value.key == key and f"(as {paddock})" in str(exc.value)


def test_nonsense_nemo_rl_values_name_the_key(nemo: dict) -> None:
    nemo["grpo"]["num_generations_per_prompt"] = [16]
    with pytest.raises(SpecImportError, match=r"^grpo.num_generations_per_prompt: must be an"):
        import_spec("nemo-rl", nemo)
    nemo["grpo"]["num_generations_per_prompt"] = 16
    nemo["loss_fn"]["reference_policy_kl_type"] = "k9"
    with pytest.raises(SpecImportError, match=r"^loss_fn.reference_policy_kl_type: must be one"):
        import_spec("nemo-rl", nemo)


def test_interpolation_it_cannot_follow_names_the_key(nemo: dict) -> None:
    nemo["policy"]["generation"]["max_new_tokens"] = "${oc.env:MAX_TOKENS}"
    with pytest.raises(SpecImportError, match=r"^policy.generation.max_new_tokens: .*oc.env"):
        import_spec("nemo-rl", nemo)
    nemo["policy"]["generation"]["max_new_tokens"] = "${policy.nowhere}"
    with pytest.raises(SpecImportError, match=r"refers to policy.nowhere"):
        import_spec("nemo-rl", nemo)


def test_not_a_config_at_all() -> None:
    with pytest.raises(SpecImportError, match=r"^\(root\): must be a mapping"):
        import_spec("verl", ["actor_rollout_ref"])  # type: ignore[arg-type]
    with pytest.raises(SpecImportError, match=r"^source: must be one of verl, nemo-rl"):
        import_spec("trl", {})
    with pytest.raises(SpecImportError, match=r"keys must be strings"):
        import_spec("verl", {"data": {1: 2}})
    assert import_spec("verl", {}) == ({"algorithm": {"bypass_mode": False}}, [])
