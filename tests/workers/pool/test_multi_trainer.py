"""One trainer, many adapters: a step of one run touches nothing of another, and equals the
step of the run alone (the single-run LoraPolicy) for the same batch, seed and state."""

from __future__ import annotations

import asyncio
import math

import pytest
import torch

from workers.loop.executor import LocalExecutor
from workers.policy import LoraPolicy, TrainSample, collate
from workers.policy.multi import MultiLoraTrainer
from workers.spec import parse_spec

ANSWERS = {"12+34=": "46", "7+8=": "15", "40+41=": "81", "3+4=": "7"}


def batch_for(tok, version: int, flip: bool = False):
    """Groups of 4 samples per prompt with mixed advantages (a fixed, made-up batch)."""
    samples = []
    for k, (prompt, answer) in enumerate(ANSWERS.items()):
        for j in range(4):
            text = answer if j % 2 else answer[::-1]
            resp = tok.encode(text, add_special_tokens=False) + [tok.eos_token_id]
            adv = (1.0 if j % 2 else -1.0) * (-1 if flip else 1) * (1 + 0.1 * k)
            samples.append(
                TrainSample(
                    tok.encode(prompt, add_special_tokens=False),
                    resp,
                    [-0.7] * len(resp),
                    [version] * len(resp),
                    adv,
                )
            )
    return collate(samples, tok.pad_token_id)


@pytest.fixture
def specs(make_spec):
    a = parse_spec(make_spec("seed=5", "lora.dropout=0.1", "train.lr=0.01"))
    b = parse_spec(make_spec("seed=9", "train.lr=0.003", "algorithm.advantage=rloo"))
    return a, b


@pytest.fixture
def trainer(specs):
    a, b = specs
    t = MultiLoraTrainer(a, a.model.path)
    t.add_run("a", a)
    t.add_run("b", b)
    return t


def snapshot(trainer: MultiLoraTrainer, run: str):
    r = trainer.runs[run]
    params = [p.detach().clone() for p in r.params]
    state = {
        i: {k: v.clone() if torch.is_tensor(v) else v for k, v in s.items()}
        for i, s in r.optimizer.state_dict()["state"].items()
    }
    return params, state


def assert_same(before, after):
    (p0, s0), (p1, s1) = before, after
    assert all(torch.equal(x, y) for x, y in zip(p0, p1, strict=True))
    assert s0.keys() == s1.keys()
    for i in s0:
        for k in s0[i]:
            assert torch.equal(torch.as_tensor(s0[i][k]), torch.as_tensor(s1[i][k])), (i, k)


def test_a_step_of_one_run_leaves_the_other_bit_identical(trainer):
    tok = trainer.policy.tokenizer
    trainer.train_step("b", batch_for(tok, 0, flip=True))  # b has optimizer state now
    before_b = snapshot(trainer, "b")
    before_a = snapshot(trainer, "a")
    for _ in range(2):
        trainer.train_step("a", batch_for(tok, trainer.runs["a"].adapter_version))
    assert_same(before_b, snapshot(trainer, "b"))
    moved = snapshot(trainer, "a")[0]
    assert not all(torch.equal(x, y) for x, y in zip(before_a[0], moved, strict=True))
    assert (trainer.runs["a"].adapter_version, trainer.runs["a"].step) == (2, 2)
    assert (trainer.runs["b"].adapter_version, trainer.runs["b"].step) == (1, 1)
    # the host's placeholder adapter never trains either
    assert all(p.grad is None and not p.requires_grad for p in trainer.policy.params)


def test_a_pooled_run_steps_as_the_run_alone(trainer, specs):
    """Interleaved with b's steps, a's adapter after each step is the one a LoraPolicy of
    a's spec computes alone, dropout's random draws included (a's RNG stream is its own,
    whatever the process's global one does in between)."""
    spec_a, _ = specs
    solo = LoraPolicy(spec_a, spec_a.model.path)
    tok = solo.tokenizer
    pooled = trainer.adapter_tensors("a")
    start = solo.adapter_tensors()
    assert pooled.keys() == start.keys()
    assert all(torch.equal(pooled[k], start[k]) for k in start)  # the same fresh adapter
    batches = [batch_for(tok, step, flip=step == 1) for step in range(3)]
    torch.manual_seed(12345)
    got = []
    for batch in batches:
        torch.rand(7)  # someone else draws from the global stream between steps
        trainer.train_step("b", batch_for(tok, 0, flip=True))
        metrics = trainer.train_step("a", batch)
        got.append((metrics, trainer.adapter_tensors("a")))
    torch.manual_seed(spec_a.seed)  # a run alone: its global stream starts at its seed
    for batch, (metrics, pooled) in zip(batches, got, strict=True):
        assert metrics == pytest.approx(solo.train_step(batch), rel=1e-5, abs=1e-7)
        alone = solo.adapter_tensors()
        for k in alone:
            torch.testing.assert_close(pooled[k], alone[k], rtol=1e-5, atol=1e-7)
    assert trainer.runs["a"].adapter_version == solo.adapter_version == 3
    # dropout draws do matter here: another stream gives another adapter
    torch.manual_seed(999)
    solo.train_step(batches[0])
    trainer.train_step("a", batches[0])
    other, pooled = solo.adapter_tensors(), trainer.adapter_tensors("a")
    assert not all(torch.allclose(other[k], pooled[k], rtol=1e-5, atol=1e-7) for k in other)


async def test_adapter_update_is_what_the_run_alone_publishes(trainer, specs):
    """Same keys, same tensors and the same handshake probe as a solo run's update: the
    probe is computed under a's adapter, not b's or the placeholder's."""
    spec_a, _ = specs
    tok = trainer.policy.tokenizer
    trainer.train_step("a", batch_for(tok, 0))
    trainer.train_step("b", batch_for(tok, 0, flip=True))
    solo = LoraPolicy(spec_a, spec_a.model.path)
    solo.load_adapter_tensors(trainer.adapter_tensors("a"), 1)
    want = await LocalExecutor(solo).adapter_update()
    got = trainer.adapter_update("a")
    assert got.version == want.version == 1
    assert got.tensors.keys() == want.tensors.keys()
    assert all(torch.equal(got.tensors[k], want.tensors[k].cpu()) for k in want.tensors)
    assert got.probe.token_ids == want.probe.token_ids
    assert got.probe.logprobs == pytest.approx(want.probe.logprobs, abs=1e-6)
    other = trainer.adapter_update("b")
    assert other.probe.logprobs != pytest.approx(want.probe.logprobs, abs=1e-6)


def test_checkpoint_restores_one_run_and_resumes_alone(trainer, specs, tmp_path):
    spec_a, _ = specs
    tok = trainer.policy.tokenizer
    trainer.train_step("a", batch_for(tok, 0))
    ckpt = trainer.save("a", tmp_path / "a")
    b_before = snapshot(trainer, "b")
    trainer.train_step("a", batch_for(tok, 1, flip=True))
    after_two = trainer.adapter_tensors("a")
    trainer.load("a", ckpt)
    assert (trainer.runs["a"].step, trainer.runs["a"].adapter_version) == (1, 1)
    trainer.train_step("a", batch_for(tok, 1, flip=True))  # optimizer state and RNG restored
    again = trainer.adapter_tensors("a")
    assert all(torch.equal(again[k], after_two[k]) for k in after_two)
    assert_same(b_before, snapshot(trainer, "b"))
    # the same checkpoint resumes the run alone (a solo executor's layout)
    solo = LoraPolicy(spec_a, spec_a.model.path)
    asyncio.run(LocalExecutor(solo).load(ckpt))
    trainer.load("a", ckpt)
    assert solo.adapter_version == 1
    alone, pooled = solo.adapter_tensors(), trainer.adapter_tensors("a")
    assert all(torch.equal(alone[k], pooled[k]) for k in alone)


def test_admission_and_leaving(trainer, make_spec):
    with pytest.raises(ValueError, match="already in the pool"):
        trainer.add_run("a", trainer.runs["a"].spec)
    other_base = parse_spec(make_spec("model.dtype=bfloat16"))
    with pytest.raises(ValueError, match="model.dtype"):
        trainer.add_run("c", other_base)
    # another rank and other target modules share the base model fine
    small = parse_spec(make_spec("lora.r=4", "seed=1"))
    small = small.model_copy(
        update={"lora": small.lora.model_copy(update={"target_modules": ["q_proj", "v_proj"]})}
    )
    trainer.add_run("c", small)
    tok = trainer.policy.tokenizer
    trainer.train_step("c", batch_for(tok, 0))
    assert trainer.runs["c"].adapter_version == 1
    assert {p.shape[0] for k, p in trainer.adapter_tensors("c").items() if "lora_A" in k} == {4}
    trainer.remove_run("c")
    assert "c" not in trainer.runs and len(trainer.model.peft_config) == 3  # default, a, b
    with pytest.raises(KeyError, match="no run 'c'"):
        trainer.train_step("c", batch_for(tok, 1))


def test_exported_adapters_load_as_peft_directories(trainer, specs, tmp_path):
    """The engines' file format (rollout/adapter_files.py) and the checkpoint's adapter
    directory both load into PEFT and compute the pooled model's logits for that run."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from workers.rollout.adapter_files import write_version

    spec_a, _ = specs
    tok = trainer.policy.tokenizer
    trainer.train_step("a", batch_for(tok, 0))
    trainer.train_step("b", batch_for(tok, 0, flip=True))
    ids = torch.tensor([tok.encode("12+34=46", add_special_tokens=False)])
    engine_dir = write_version(
        trainer.adapter_update("a"), tmp_path, spec_a.lora, spec_a.model.path
    )
    ckpt_dir = trainer.save("a", tmp_path / "ckpt") / "adapter"
    with trainer.active("a") as model, torch.no_grad():
        want = model.eval()(input_ids=ids).logits
    model.train()
    for path in (engine_dir, ckpt_dir):
        base = AutoModelForCausalLM.from_pretrained(spec_a.model.path, dtype=torch.float32)
        loaded = PeftModel.from_pretrained(base, str(path)).eval()
        with torch.no_grad():
            got = loaded(input_ids=ids).logits
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def varied_batch(tok, version: int, run: int, distinct: bool = False, one_token: bool = False):
    """A made-up batch per run, each of its own shape: `distinct` gives every sample a
    prompt of its own (the plain forward), `one_token` one-token responses (no response
    forward); lengths differ between runs (padding differs from the runs' batch alone)."""
    samples = []
    for k, (prompt, answer) in enumerate(list(ANSWERS.items())[run % 2 :]):
        for j in range(4):
            text = (answer * (1 + (j + run) % 3)) if j % 2 else answer[::-1]
            resp = tok.encode(text, add_special_tokens=False) + [tok.eos_token_id]
            if one_token:
                resp = resp[j % 2 :][:1]
            lead = f"{j}+" if distinct else ""
            ids = tok.encode(lead + prompt, add_special_tokens=False)
            adv = (1.0 if j % 2 else -0.8) * (1 + 0.1 * k) * (-1 if run == 1 else 1)
            lp = [-0.5 - 0.1 * ((i + j) % 4) for i in range(len(resp))]
            samples.append(TrainSample(ids, resp, lp, [version] * len(resp), adv))
    return collate(samples, tok.pad_token_id)


@pytest.fixture
def three(make_spec):
    """Three runs that differ in rank, targets, dropout, learning rate, algorithm, loss
    aggregation, temperature, lengths and micro-batching."""
    every = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    lora = {"r": 8, "alpha": 16, "dropout": 0.1, "target_modules": every}
    a = parse_spec(make_spec("seed=5", "train.lr=0.01", lora=lora))
    b = parse_spec(
        make_spec(
            "seed=9",
            "train.lr=0.003",
            "algorithm.advantage=rloo",
            "algorithm.bypass_mode=false",
            "algorithm.rollout_is=token",
            "algorithm.kl_coef=0.05",
            "algorithm.loss_agg=seq_mean_token_mean",
            "rollout.temperature=0.7",
            lora={"r": 4, "alpha": 4, "target_modules": ["q_proj", "v_proj"]},
        )
    )
    c = parse_spec(
        make_spec(
            "seed=2",
            "train.lr=0.02",
            "train.micro_batch_size=5",
            "algorithm.advantage=dr_grpo",
            "algorithm.bypass_mode=false",
            "algorithm.loss_agg=seq_mean_token_sum_norm",
            "rollout.max_new_tokens=6",
            lora={"r": 2, "alpha": 8, "dropout": 0.05, "target_modules": every},
        )
    )
    return {"a": a, "b": b, "c": c}


def test_a_batched_step_of_three_runs_is_each_runs_solo_step(three, make_spec):
    """train_steps of three runs (one forward and backward over all their rows) gives each
    run, step after step, the adapter and the metrics of its own LoraPolicy's step alone
    (fp32, CPU, dropout included: each run's masks come from its own stream with its own
    batch's shapes), and a fourth run not in the step is untouched, bit for bit."""
    trainer = MultiLoraTrainer(three["a"], three["a"].model.path)
    for run, spec in three.items():
        trainer.add_run(run, spec)
    trainer.add_run("d", parse_spec(make_spec("seed=1")))
    tok = trainer.policy.tokenizer
    trainer.train_step("d", batch_for(tok, 0))
    d_before = snapshot(trainer, "d")
    shape = {"a": {}, "b": {"distinct": True}, "c": {"one_token": True}}
    batches = {
        run: [varied_batch(tok, v, k, **shape[run]) for v in range(2)]
        for k, run in enumerate(three)
    }
    assert trainer.can_batch(list(three))
    got = [trainer.train_steps({r: batches[r][v] for r in three}) for v in range(2)]
    assert trainer.together == {3: 2}  # one forward and backward for the three, each step
    assert_same(d_before, snapshot(trainer, "d"))
    for run, spec in three.items():
        solo = LoraPolicy(spec, spec.model.path)
        torch.manual_seed(spec.seed)  # a run alone: its global stream starts at its seed
        for v in range(2):
            want = solo.train_step(batches[run][v])
            assert got[v][run].keys() == want.keys(), run
            assert got[v][run] == pytest.approx(want, rel=1e-5, abs=1e-6), (run, v)
        alone, pooled = solo.adapter_tensors(), trainer.adapter_tensors(run)
        assert alone.keys() == pooled.keys()
        for k in alone:
            torch.testing.assert_close(pooled[k], alone[k], rtol=1e-5, atol=1e-7)
        assert trainer.runs[run].adapter_version == trainer.runs[run].step == 2
        # its dropout stream drew what the solo step drew from the global one, no more
        assert torch.equal(trainer.runs[run].rng, torch.get_rng_state()), run


def test_a_batched_step_isolates_a_nan_and_falls_back_alone(trainer):
    """A NaN in one run's adapter stays in that run: the other's step is its step alone."""
    tok = trainer.policy.tokenizer
    ref = MultiLoraTrainer(trainer.base_spec, trainer.model_dir)
    for run, r in trainer.runs.items():
        ref.add_run(run, r.spec)
    with torch.no_grad():
        trainer.runs["a"].params[0].fill_(float("nan"))
    out = trainer.train_steps({"a": batch_for(tok, 0), "b": batch_for(tok, 0, flip=True)})
    assert trainer.together == {2: 1}
    want = ref.train_step("b", batch_for(tok, 0, flip=True))
    assert out["b"] == pytest.approx(want, rel=1e-5, abs=1e-6)
    assert not math.isfinite(out["a"]["loss/total"])
    got, alone = trainer.adapter_tensors("b"), ref.adapter_tensors("b")
    for k in alone:
        torch.testing.assert_close(got[k], alone[k], rtol=1e-5, atol=1e-7)


def mixed_versions(batch, old: int):
    """Every other sample's tokens relabelled as generated by version `old` (stale)."""
    v = batch.versions[::2]
    v[v >= 0] = old
    return batch


@pytest.mark.parametrize("together", [False, True])
def test_the_stale_token_check_is_the_solo_runs(make_spec, together):
    """token_mult_prob_error and gen_kl_error of pooled async runs, on batches with tokens
    of the previous version, are those each run's solo executor computes (each stale token
    under the adapter that generated it), alone or in a batched step whose check is one
    forward for both runs (each run's samples under its own old adapter); every adapter is
    then its current one again, bit for bit."""
    async_ = ("async.enabled=true", "async.max_staleness=1")
    b_check = "train.mult_prob_error_samples=3"  # fewer samples: its own pick
    specs = {
        "a": parse_spec(make_spec("seed=5", *async_, "lora.dropout=0.1")),
        "b": parse_spec(make_spec("seed=9", *async_, "lora.r=4", b_check)),
    }
    trainer = MultiLoraTrainer(specs["a"], specs["a"].model.path)
    solos = {}
    for run, spec in specs.items():
        trainer.add_run(run, spec)
        solos[run] = LocalExecutor(LoraPolicy(spec, spec.model.path))
    torch.manual_seed(specs["a"].seed)  # a's dropout stream, as a run alone seeds it (b has none)
    tok = trainer.policy.tokenizer
    runs = ["a", "b"] if together else ["a"]

    got, want = [], []
    for step in range(2):
        batches = {}
        for run in runs:
            trainer.adapter_update(run, with_probe=False)  # each publish is kept for the check
            asyncio.run(solos[run].adapter_update(with_probe=False))
            batch = batch_for(tok, step, flip=(step == 1) != (run == "b"))
            if step:
                batch = mixed_versions(batch, step - 1)
                assert trainer._stale_sums(trainer.runs[run], batch).tokens > 0  # it runs
            batches[run] = batch
        before = {r: trainer.adapter_tensors(r) for r in runs}
        if together:
            sums = trainer._stale_together(batches)
            for r in runs:  # the check leaves every adapter as it was
                after = trainer.adapter_tensors(r)
                assert all(torch.equal(before[r][k], after[k]) for k in after)
                alone = trainer._stale_sums(trainer.runs[r], batches[r])
                assert sums[r].tokens == alone.tokens
                assert sums[r].sums == pytest.approx(alone.sums, rel=1e-5, abs=1e-6)
            out = trainer.train_steps(batches)
            assert trainer.together[2] >= 1
        else:
            out = {"a": trainer.train_step("a", batches["a"])}
        got.append(out)
        want.append({r: solos[r]._train_step(batches[r]) for r in runs})
    assert "token_mult_prob_error" in got[1]["a"] and "gen_kl_error" in got[1]["a"]
    for g, w in zip(got, want, strict=True):
        for r in runs:
            assert g[r].keys() == w[r].keys()
            assert g[r] == pytest.approx(w[r], rel=1e-5, abs=1e-6)
