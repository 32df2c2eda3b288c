"""The TensorRT-LLM pool engine on the stand-in engine (TensorRT-LLM itself cannot run
here): the same guarantees as the vLLM pool's, against the single-adapter backend on the
same stand-in. docs/backends.md lists what has never run on a real TensorRT-LLM."""

from __future__ import annotations

from pathlib import Path

import pytest
import pytest_asyncio

from workers.rollout.pool_engine import PoolAdmissionError, PoolRequest

from ..rollout import trtllm_standin
from .conftest import (
    RUN_LORA,
    SEED_A,
    SEED_A2,
    SEED_B,
    AdapterMaker,
    groups,
    keep_on_one_run,
    logprobs,
    mixed,
    pool_spec,
    split,
    tokens,
    update_run,
    versions,
)

pytestmark = pytest.mark.asyncio(loop_scope="session")


@pytest.fixture(scope="module", autouse=True)
def standin():
    trtllm_standin.install()
    yield
    trtllm_standin.uninstall()


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def reference(tiny_dir: Path, maker: AdapterMaker, updates):
    """Each adapter alone on the single-adapter backend (the same stand-in engine)."""
    from workers.rollout.trtllm_backend import TrtllmBackend

    backend = TrtllmBackend(pool_spec(tiny_dir, "trtllm"), tiny_dir)
    out = {}
    try:
        for k, seed in enumerate((SEED_A, SEED_B, SEED_A2)):
            await backend.load_adapter(maker.relabel(updates[seed], k + 1))
            out[seed] = await backend.generate(groups(maker, f"ref{seed}"))
    finally:
        await backend.close()
    return out


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def pool(tiny_dir: Path):
    from workers.rollout.trtllm_pool import TrtllmPoolEngine

    engine = TrtllmPoolEngine(pool_spec(tiny_dir, "trtllm"), tiny_dir, capacity=2)
    yield engine
    await engine.close()


async def test_rows_of_two_adapters_decode_together_as_each_alone(pool, maker, updates, reference):
    assert tokens(reference[SEED_A]) != tokens(reference[SEED_B])
    await update_run(pool, "a", maker.relabel(updates[SEED_A], 1))
    await update_run(pool, "b", maker.relabel(updates[SEED_B], 1))
    pool.llm.max_concurrent_loras = 0
    reqs = mixed(maker, ["a", "b"], "mix")
    results = await pool.generate(reqs)
    assert pool.llm.max_concurrent_loras == 2  # both adapters' rows were in flight at once
    for run, seed in (("a", SEED_A), ("b", SEED_B)):
        mine = split(reqs, results, run)
        assert tokens(mine) == tokens(reference[seed])
        assert logprobs(mine) == pytest.approx(logprobs(reference[seed]), abs=1e-5)
        assert versions(mine) == {1}


async def test_an_update_of_one_run_takes_a_new_id_and_leaves_the_other(
    pool, maker, updates, reference
):
    await update_run(pool, "a", maker.relabel(updates[SEED_A], 1))
    await update_run(pool, "b", maker.relabel(updates[SEED_B], 1))
    ids_before = {run: lane._lora.lora_int_id for run, lane in pool.lanes.items()}
    await update_run(pool, "a", maker.relabel(updates[SEED_A2], 2))
    assert pool.served_versions() == {"a": 2, "b": 1}
    new_id = pool.lanes["a"]._lora.lora_int_id
    assert (
        new_id not in ids_before.values() and pool.lanes["b"]._lora.lora_int_id == ids_before["b"]
    )
    reqs = mixed(maker, ["a", "b"], "upd")
    results = await pool.generate(reqs)
    assert tokens(split(reqs, results, "a")) == tokens(reference[SEED_A2])
    assert versions(split(reqs, results, "a")) == {2}
    assert tokens(split(reqs, results, "b")) == tokens(reference[SEED_B])
    assert versions(split(reqs, results, "b")) == {1}


async def test_keep_on_one_run_never_pauses_the_engine(pool, maker, updates):
    def streamed() -> int:
        return pool.llm.tokens_out.get(pool.lanes["a"]._lora.lora_int_id, 0)

    await keep_on_one_run(pool, maker, updates, streamed, n=3)
    assert not pool.llm._paused and pool.llm.submitted_while_paused == 0


async def test_admission_is_refused_beyond_max_loras_and_unload_frees_the_slot(
    pool, maker, updates, reference
):
    await update_run(pool, "a", maker.relabel(updates[SEED_A], 1))
    await update_run(pool, "b", maker.relabel(updates[SEED_B], 1))
    with pytest.raises(PoolAdmissionError, match="all 2 adapter slots are taken"):
        await pool.load_adapter("c", updates[SEED_B], RUN_LORA)
    with pytest.raises(PoolAdmissionError, match="above the pool's max LoRA rank 8"):
        await pool.load_adapter("c", updates[SEED_B], RUN_LORA.model_copy(update={"r": 16}))
    await pool.unload_adapter("b")
    with pytest.raises(KeyError, match="no adapter loaded for run 'b'"):
        await pool.generate([PoolRequest("b", groups(maker, "gone")[0])])
    await update_run(pool, "c", maker.relabel(updates[SEED_A2], 4))
    reqs = mixed(maker, ["a", "c"], "reuse")
    results = await pool.generate(reqs)
    assert tokens(split(reqs, results, "c")) == tokens(reference[SEED_A2])
    assert versions(split(reqs, results, "c")) == {4}
    await pool.unload_adapter("c")
