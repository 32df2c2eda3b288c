"""paddock_client.spec_import.import_config on real configs of verl and NeMo-RL, as their users
write them (fixtures/peers/, vendored under Apache-2.0 with their sources in NOTICE): a
NeMo-RL recipe inheriting its base through `defaults:`, the command lines of their example
and test scripts, verl's Hydra YAML over `ppo_trainer`."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from paddock_client.spec_import import ALL_LINEAR, SpecImportError, import_config, import_spec
from paddock_client.spec_import.reading import BASES, merge, parse_command
from workers.spec import parse_spec

PEERS = Path(__file__).parent / "fixtures" / "peers"
NEMO_RECIPE = PEERS / "nemo-rl" / "grpo-qwen3-8B-base-1n8g-fsdp2-lora.yaml"
NEMO_SCRIPT = PEERS / "nemo-rl" / "grpo-qwen3-8B-base-1n8g-fsdp2-lora.sh"
VERL_SCRIPT = PEERS / "verl" / "run_qwen2_5-3b_gsm8k_grpo_lora.sh"
VERL_TUNING = PEERS / "verl" / "qwen2-0.5b_grpo-lora_1_h100_fsdp_vllm.sh"
VERL_YAML = PEERS / "verl" / "gsm8k_multiturn_grpo.yaml"
VERL_YAML_SCRIPT = PEERS / "verl" / "run_qwen2.5-3b_gsm8k_multiturn.sh"  # runs VERL_YAML
NEMO_BASE = "nemo-rl: examples/configs/grpo_math_1B.yaml"
VERL_BASE = "verl: verl/trainer/config/_generated_ppo_trainer.yaml"


def _recipe(**kw):
    return import_config(config=NEMO_RECIPE.read_text(), config_name=NEMO_RECIPE.name, **kw)


# --------------------------------------------------------------------------------------------
# NeMo-RL: a LoRA recipe and its base
# --------------------------------------------------------------------------------------------


def test_nemo_rl_recipe_brings_its_base():
    result = _recipe()
    assert result.source == "nemo-rl" and result.files == [NEMO_BASE, NEMO_RECIPE.name]
    run = parse_spec(result.spec)
    # the recipe's own keys
    assert run.model.path == "Qwen/Qwen3-8B-Base"
    assert (run.lora.r, run.lora.alpha, run.lora.target_modules) == (128, 128.0, ALL_LINEAR)
    assert run.train.activation_checkpointing is True
    # the base's learning rate, group size, KL and lengths (grpo_math_1B.yaml)
    assert (run.train.lr, run.train.weight_decay, run.train.grad_clip) == (5e-6, 0.01, 1.0)
    assert (run.algorithm.num_generations, run.train.prompts_per_step) == (16, 32)
    assert (run.algorithm.kl_coef, run.algorithm.kl_estimator) == (0.01, "k3")
    assert (run.algorithm.clip_eps_low, run.algorithm.clip_eps_high) == (0.2, 0.2)
    # max_new_tokens is ${policy.max_total_sequence_length}: the recipe's 2048, not the base's
    # 512, because interpolations are resolved after the files are merged, as NeMo-RL does
    assert run.rollout.max_new_tokens == 2048 and run.data.max_prompt_tokens == 2048
    assert run.rollout.backend == "vllm" and run.rollout.gpu_memory_utilization == 0.6
    assert run.algorithm.advantage == "grpo" and run.algorithm.bypass_mode is False
    assert [t.name for t in run.reward.functions] == ["math_verify"]
    assert run.train.micro_batch_size == 4 and run.seed == 42
    # logger: W&B and TensorBoard switched on by the recipe, with its project and name
    assert run.logging.wandb is not None and run.logging.tensorboard is not None
    assert (run.logging.wandb.project, run.logging.wandb.run_name) == (
        "nemo-rl",
        "grpo-qwen3-8B-base-1n8g-fsdp2-lora",
    )
    # cluster.gpus_per_node: 8, generation colocated: half the GPUs each side
    r = run.resources
    assert (r.executor, r.trainer_gpus, r.trainer_actors, r.rollout_replicas) == ("ray", 4, 4, 4)


def test_without_its_base_the_recipe_says_little():
    """What the importer did before `defaults:` were resolved: the recipe alone."""
    bare = yaml.safe_load(NEMO_RECIPE.read_text())
    spec, _ = import_spec("nemo-rl", bare)
    assert "lr" not in spec.get("train", {}) and "num_generations" not in spec.get("algorithm", {})
    full = _recipe().spec
    assert full["train"]["lr"] == 5e-6 and full["algorithm"]["num_generations"] == 16


def test_every_unmapped_key_is_listed_with_the_file_that_set_it():
    result = _recipe()
    assert result.unmapped == sorted(result.unmapped)
    assert set(result.origins) == set(result.unmapped)
    assert set(result.origins.values()) == {NEMO_BASE, NEMO_RECIPE.name}
    mine = sorted(k for k, where in result.origins.items() if where == NEMO_RECIPE.name)
    assert mine == ["checkpointing.checkpoint_dir", "grpo.val_at_start", "logger.log_dir"]
    base_keys = (
        "policy.optimizer.kwargs.eps",
        "policy.scheduler",
        "data.train.dataset_name",
        "grpo.max_num_epochs",
        "policy.generation.vllm_cfg.tensor_parallel_size",
    )
    for key in base_keys:
        assert result.origins[key] == NEMO_BASE, key
    # switched-off sections do nothing in NeMo-RL, so are not differences
    off = ("policy.megatron_cfg.", "policy.dynamic_batching.")
    assert not [k for k in result.unmapped if k.startswith(off)]
    # without the dataset's size, epochs cannot become steps: said, and the key listed
    assert "dataset's size" in result.notes["grpo.max_num_epochs"]


def test_epochs_become_steps_where_the_dataset_size_is_known():
    # grpo_math_1B: max_num_epochs 1, max_num_steps 1000000, 32 prompts a step, drop_last
    assert _recipe(dataset_rows=10_000).spec["train"]["steps"] == 10_000 // 32
    assert "grpo.max_num_epochs" not in _recipe(dataset_rows=10_000).unmapped
    assert _recipe().spec["train"]["steps"] == 1_000_000  # the base's bound, the epochs noted


def test_nemo_rl_recipe_with_its_test_suite_command_line():
    result = _recipe(command=NEMO_SCRIPT.read_text(), dataset_rows=10_000)
    assert result.files == [NEMO_BASE, NEMO_RECIPE.name, "command line"]
    spec = result.spec
    # grpo.max_num_steps=$MAX_STEPS, with MAX_STEPS=20 assigned in the script, caps the epoch
    assert spec["train"]["steps"] == 20
    assert spec["logging"]["wandb"]["project"] == "nemo-rl"
    # logger.wandb.name=$EXP_NAME comes from a file the script sources: not known here
    assert "run_name" not in spec["logging"]["wandb"]
    assert "$EXP_NAME" in result.notes["logger.wandb.name"]
    assert result.origins["logger.log_dir"] == "command line"
    assert "$LOG_DIR" in result.notes["logger.log_dir"]


# --------------------------------------------------------------------------------------------
# verl: command lines over ppo_trainer.yaml, and Hydra YAML
# --------------------------------------------------------------------------------------------


def test_verl_lora_script_over_ppo_trainer():
    result = import_config(command=VERL_SCRIPT.read_text(), dataset_rows=7473)  # gsm8k train
    assert result.source == "verl" and result.files == [VERL_BASE, "command line"]
    run = parse_spec(result.spec)
    assert run.model.path == "Qwen/Qwen2.5-3B-Instruct"
    assert (run.lora.r, run.lora.alpha) == (64, 32.0)
    assert run.lora.target_modules == ALL_LINEAR  # ppo_trainer's target_modules: all-linear
    assert (run.train.lr, run.train.prompts_per_step, run.algorithm.num_generations) == (
        3e-6,
        16,
        5,
    )
    assert (run.algorithm.kl_coef, run.algorithm.kl_estimator) == (0.001, "k3")
    # not on the command line: ppo_trainer's symmetric clip and token-mean loss
    assert (run.algorithm.clip_eps_low, run.algorithm.clip_eps_high) == (0.2, 0.2)
    assert run.algorithm.loss_agg == "token_mean" and run.train.weight_decay == 0.01
    assert (run.rollout.max_new_tokens, run.data.max_prompt_tokens) == (1024, 512)
    assert run.rollout.backend == "vllm" and run.rollout.gpu_memory_utilization == 0.6
    assert run.data.overlong_prompts == "drop"
    # total_epochs=15 over 7473 rows at 16 prompts a step, the last partial batch dropped
    assert run.train.steps == (7473 // 16) * 15
    assert (run.train.eval_every, run.checkpoint.every) == (5, 20)
    # trainer.logger='["console","wandb"]' with the project and experiment names
    assert (run.logging.wandb.project, run.logging.wandb.run_name) == (
        "verl_grpo_example_gsm8k",
        "qwen2.5_3b_grpo_lora",
    )
    # n_gpus_per_node=2, nnodes=1, actor and rollout colocated: one GPU each side
    r = run.resources
    assert (r.executor, r.trainer_gpus, r.rollout_replicas, r.rollout_gpus) == ("ray", 1, 1, 1)
    # $HOME is the user's: the data paths are left out, and said why
    assert "data.train_files" in result.unmapped and "$HOME" in result.notes["data.train_files"]
    assert result.origins["actor_rollout_ref.rollout.tensor_model_parallel_size"] == "command line"
    assert result.origins["actor_rollout_ref.actor.fsdp_config.wrap_policy.min_num_params"] == (
        VERL_BASE
    )


def test_verl_tuning_script_arithmetic_and_a_refusal_naming_the_key():
    cmd = parse_command(VERL_TUNING.read_text())
    given = {o.key: o.value for o in cmd.overrides}
    # total_procs=$(( nproc_per_gpu * nnodes * ngpu_per_node )): read, never run
    assert given["data.train_batch_size"] == 1
    assert given["actor_rollout_ref.model.path"] == "Qwen/Qwen2.5-0.5B-Instruct"
    # its rollout.n=1 is a group of one: nothing GRPO can learn from, and Paddock says so
    with pytest.raises(SpecImportError) as exc:
        import_config(command=VERL_TUNING.read_text())
    assert exc.value.key == "actor_rollout_ref.rollout.n"
    assert "(as algorithm.num_generations)" in str(exc.value)
    ok = VERL_TUNING.read_text().replace("rollout.n=1", "rollout.n=4")
    spec = import_config(command=ok).spec
    assert spec["train"]["prompts_per_step"] == 1 and spec["lora"]["r"] == 32


def test_verl_hydra_yaml_over_ppo_trainer_with_its_script():
    yaml_text = VERL_YAML.read_text()
    result = import_config(config=yaml_text, config_name=VERL_YAML.name,
                           command=VERL_YAML_SCRIPT.read_text())  # fmt: skip
    assert result.files == [VERL_BASE, VERL_YAML.name, "command line"]
    spec = result.spec
    assert (spec["train"]["prompts_per_step"], spec["algorithm"]["num_generations"]) == (256, 16)
    assert spec["rollout"]["max_new_tokens"] == 1024 and spec["data"]["max_prompt_tokens"] == 1024
    assert spec["train"]["weight_decay"] == 0.01  # ppo_trainer's, set nowhere else
    # sglang and multi-turn rollouts are not Paddock's: listed, from where they were set
    assert "backend" not in spec["rollout"]
    assert result.origins["actor_rollout_ref.rollout.name"] == "command line"
    assert result.origins["actor_rollout_ref.rollout.multi_turn.enable"] == VERL_YAML.name
    assert not [k for k in result.unmapped if k.startswith("hydra.")]  # Hydra's own settings
    # experiment_name=$EXPERIMENT_NAME, whose $(now) only the shell knows
    assert "run_name" not in spec["logging"]["wandb"]
    # the YAML alone leaves verl's default group of one: refused, naming the key
    with pytest.raises(SpecImportError, match=r"^actor_rollout_ref\.rollout\.n: must be >= 2"):
        import_config(config=yaml_text)


def test_source_is_guessed_from_the_command_or_the_keys():
    assert import_config(command="python3 -m verl.trainer.main_ppo data.train_batch_size=8 "
                         "actor_rollout_ref.rollout.n=4").source == "verl"  # fmt: skip
    assert import_config(command="uv run examples/run_grpo.py grpo.max_num_steps=3").source == (
        "nemo-rl"
    )
    assert import_config(command="policy.model_name=/m").source == "nemo-rl"
    with pytest.raises(SpecImportError, match="cannot tell verl from NeMo-RL"):
        import_config(config="seed: 1\n")


# --------------------------------------------------------------------------------------------
# reading: overrides, merging, where files come from
# --------------------------------------------------------------------------------------------


def test_hydra_overrides():
    cmd = parse_command(
        "VAR=x python3 -m verl.trainer.main_ppo a.b=1 +c.d='[1, 2]' ++e.f=null ~g.h "
        "i.j=$UNKNOWN k.l=${VAR}y $@ 2>&1 | tee log"
    )
    assert cmd.program == ["VAR=x", "python3", "-m", "verl.trainer.main_ppo"]
    got = {(o.key, o.delete): o.value for o in cmd.overrides}
    assert got[("a.b", False)] == 1 and got[("c.d", False)] == [1, 2]
    assert got[("e.f", False)] is None and got[("g.h", True)] is None
    # VAR=x is the program's environment: the shell expands ${VAR} before it is set
    assert "$VAR" in got[("k.l", False)].why
    assert "$UNKNOWN" in got[("i.j", False)].why


def test_merge_follows_nemo_rl():
    base = {"a": {"x": 1, "y": 2}, "b": {"x": 1}, "c": 3}
    child = {"a": {"y": 20}, "b": {"_override_": True, "z": 9}, "c": "???"}
    assert merge(base, child) == {"a": {"x": 1, "y": 20}, "b": {"z": 9}, "c": 3}


def test_a_file_on_the_users_disk_wins_where_the_cli_reads_files(tmp_path):
    """The CLI resolves `defaults:` beside the file first (the user's own checkout)."""
    configs = tmp_path / "examples" / "configs"
    (configs / "recipes" / "llm").mkdir(parents=True)
    base = yaml.safe_load((BASES / "nemo-rl" / "examples/configs/grpo_math_1B.yaml").read_text())
    base["policy"]["optimizer"]["kwargs"]["lr"] = 7e-6
    (configs / "grpo_math_1B.yaml").write_text(yaml.safe_dump(base))
    recipe = configs / "recipes" / "llm" / NEMO_RECIPE.name
    recipe.write_text(NEMO_RECIPE.read_text())
    mine = import_config(config=recipe.read_text(), config_name=recipe.name,
                         config_dir=recipe.parent)  # fmt: skip
    assert mine.spec["train"]["lr"] == 7e-6 and mine.files[0] == "../../grpo_math_1B.yaml"
    assert _recipe().spec["train"]["lr"] == 5e-6  # no directory given: the vendored base


def test_a_reference_is_never_opened_without_a_directory(tmp_path):
    """The platform passes no directory: a `defaults:` or `--config` naming a path is only
    matched against the vendored list, never read."""
    secret = tmp_path / "secret.yaml"
    secret.write_text("policy: {model_name: leaked}\n")
    for config, command in (
        (f"defaults: {secret}\npolicy: {{model_name: /m}}\n", None),
        (None, f"uv run examples/run_grpo.py --config {secret} grpo.seed=1"),
    ):
        with pytest.raises(SpecImportError, match="is not one of the nemo-rl bases") as exc:
            import_config(config=config, command=command, source="nemo-rl")
        assert "leaked" not in str(exc.value)
    with pytest.raises(SpecImportError, match="nests more than"):
        loop = tmp_path / "loop.yaml"
        loop.write_text("defaults: loop.yaml\n")
        import_config(config=loop.read_text(), source="nemo-rl", config_dir=tmp_path)


def test_loggers():
    verl_cmd = "python3 -m verl.trainer.main_ppo actor_rollout_ref.rollout.n=4 "
    tb = import_config(command=verl_cmd + "trainer.logger=[console,tensorboard]")
    assert tb.spec["logging"] == {"tensorboard": {}} and "trainer.logger" not in tb.unmapped
    ml = import_config(command=verl_cmd + "trainer.logger=[console,wandb,mlflow]")
    assert "wandb" in ml.spec["logging"] and "trainer.logger" in ml.unmapped
    assert "MLFLOW_TRACKING_URI" in ml.notes["trainer.logger"]
    nemo = "uv run examples/run_grpo.py logger.mlflow_enabled=true "
    on = import_config(command=nemo + "logger.mlflow.tracking_uri=http://mlflow:5000")
    assert on.spec["logging"]["mlflow"] == {
        "tracking_uri": "http://mlflow:5000",
        "experiment": "grpo-dev",
        "run_name": "grpo-dev-logger",
    }
    local = import_config(command=nemo + "logger.mlflow.tracking_uri=file:///tmp/mlruns")
    assert "mlflow" not in local.spec.get("logging", {})
    assert "http(s)" in local.notes["logger.mlflow_enabled"]


def test_one_gpu_shares_it_and_dedicated_generation_gpus_keep_their_split():
    nemo = "uv run examples/run_grpo.py "
    one = import_config(command=nemo + "cluster.gpus_per_node=1").spec["resources"]
    assert one == {"trainer_gpus": 1, "rollout_gpus": 1}
    split = import_config(command=nemo + "cluster.gpus_per_node=8 "
                          "policy.generation.colocated.enabled=false "
                          "policy.generation.colocated.resources.gpus_per_node=2").spec  # fmt: skip
    assert (split["resources"]["trainer_gpus"], split["resources"]["rollout_replicas"]) == (6, 2)


# --------------------------------------------------------------------------------------------
# the vendored files keep their licence and name their source
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("root", [BASES, PEERS])
def test_vendored_files_name_their_source_under_their_licence(root: Path):
    notice = (root / "NOTICE").read_text()
    assert "Apache License 2.0" in notice
    assert (root / "LICENSE").read_text().lstrip().startswith("Apache License")
    files = [p for p in root.rglob("*") if p.suffix in (".yaml", ".sh")]
    assert files
    for path in files:
        head = "".join(path.read_text().splitlines(keepends=True)[:4])
        m = re.search(r"github\.com/(\S+) \(Apache License 2\.0.*?\): (\S+)\n# at commit "
                      r"([0-9a-f]{40})", head, re.S)  # fmt: skip
        assert m, f"{path} names no source"
        assert m.group(2) in notice and m.group(3) in notice, path


def test_aliases_that_expand_without_end_are_refused():
    laughs = "a: &a {x: 1, y: 1}\n" + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} {{x: *{chr(97 + i)}, y: *{chr(97 + i)}}}\n"
        for i in range(20)
    )
    with pytest.raises(SpecImportError, match="larger than a config can be"):
        import_config(config=laughs, source="nemo-rl")
    with pytest.raises(SpecImportError, match="larger than a config can be"):
        import_config(config="policy: &p {again: *p}\n", source="nemo-rl")
