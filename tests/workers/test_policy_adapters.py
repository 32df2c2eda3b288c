"""One policy, many adapters (a pool's runs): a step of one run touches nothing of another,
and equals the step of the run alone (a policy of one adapter) for the same batch, seed and
state, whether it steps alone or in one forward and backward with others (`train_steps`):
its adapter, its metrics and its random stream."""

from __future__ import annotations

import math

import pytest
import torch

from workers.loop.checkpoint import load_trainer, save_trainer
from workers.loop.executor import LocalExecutor
from workers.policy import LoraPolicy, TrainSample, collate
from workers.policy.adapter import RngStream
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


def pool(*specs) -> tuple[LoraPolicy, list]:
    """A pool's policy (its own adapter a rank-1 placeholder, as workers/pool/driver.py
    makes it) with an adapter of each spec."""
    a = specs[0]
    host = a.model_copy(update={"lora": a.lora.model_copy(update={"r": 1})})
    policy = LoraPolicy(host, a.model.path)
    return policy, [policy.add_adapter(s) for s in specs]


@pytest.fixture
def trainer(specs):
    policy, (a, b) = pool(*specs)
    return policy, {"a": a, "b": b}


def snapshot(adapter):
    params = [p.detach().clone() for p in adapter.params]
    state = {
        i: {k: v.clone() if torch.is_tensor(v) else v for k, v in s.items()}
        for i, s in adapter.optimizer.state_dict()["state"].items()
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
    policy, ad = trainer
    tok = policy.tokenizer
    policy.train_step(ad["b"], batch_for(tok, 0, flip=True))  # b has optimizer state now
    before_b = snapshot(ad["b"])
    before_a = snapshot(ad["a"])
    for _ in range(2):
        policy.train_step(ad["a"], batch_for(tok, ad["a"].version))
    assert_same(before_b, snapshot(ad["b"]))
    moved = snapshot(ad["a"])[0]
    assert not all(torch.equal(x, y) for x, y in zip(before_a[0], moved, strict=True))
    assert (ad["a"].version, ad["b"].version) == (2, 1)
    # the placeholder adapter never trains either
    assert all(p.grad is None and not p.requires_grad for p in policy.adapter.params)


def test_a_pooled_run_steps_as_the_run_alone(trainer, specs):
    """Interleaved with b's steps, a's adapter after each step is the one a policy of a's
    spec computes alone, dropout's random draws included (a's stream is its own, whatever
    the process's global one does in between)."""
    policy, ad = trainer
    spec_a, _ = specs
    solo = LoraPolicy(spec_a, spec_a.model.path)
    tok = solo.tokenizer
    pooled = policy.adapter_tensors(ad["a"])
    start = solo.adapter_tensors()
    assert pooled.keys() == start.keys()
    assert all(torch.equal(pooled[k], start[k]) for k in start)  # the same fresh adapter
    batches = [batch_for(tok, step, flip=step == 1) for step in range(3)]
    got = []
    for batch in batches:
        torch.rand(7)  # someone else draws from the global stream between steps
        policy.train_step(ad["b"], batch_for(tok, 0, flip=True))
        metrics = policy.train_step(ad["a"], batch)
        got.append((metrics, policy.adapter_tensors(ad["a"])))
    for batch, (metrics, pooled) in zip(batches, got, strict=True):
        assert metrics == pytest.approx(solo.train_step(solo.adapter, batch), rel=1e-5, abs=1e-7)
        alone = solo.adapter_tensors()
        for k in alone:
            torch.testing.assert_close(pooled[k], alone[k], rtol=1e-5, atol=1e-7)
    assert ad["a"].version == solo.adapter.version == 3
    assert torch.equal(ad["a"].rng.cpu, solo.adapter.rng.cpu)
    # dropout draws do matter here: another stream gives another adapter
    solo.adapter.rng = RngStream.seeded(999, solo.device)
    solo.train_step(solo.adapter, batches[0])
    policy.train_step(ad["a"], batches[0])
    other, pooled = solo.adapter_tensors(), policy.adapter_tensors(ad["a"])
    assert not all(torch.allclose(other[k], pooled[k], rtol=1e-5, atol=1e-7) for k in other)


async def test_adapter_update_is_what_the_run_alone_publishes(trainer, specs):
    """Same keys, same tensors and the same handshake probe as a solo run's update: the
    probe is computed under a's adapter, not b's or the placeholder's."""
    policy, ad = trainer
    spec_a, _ = specs
    tok = policy.tokenizer
    policy.train_step(ad["a"], batch_for(tok, 0))
    policy.train_step(ad["b"], batch_for(tok, 0, flip=True))
    solo = LoraPolicy(spec_a, spec_a.model.path)
    solo.load_adapter_tensors(policy.adapter_tensors(ad["a"]), 1)
    want = await LocalExecutor(solo).adapter_update()
    got = LocalExecutor(policy, ad["a"]).publish()
    assert got.version == want.version == 1
    assert got.tensors.keys() == want.tensors.keys()
    assert all(torch.equal(got.tensors[k], want.tensors[k].cpu()) for k in want.tensors)
    assert got.probe.token_ids == want.probe.token_ids
    assert got.probe.logprobs == pytest.approx(want.probe.logprobs, abs=1e-6)
    other = LocalExecutor(policy, ad["b"]).publish()
    assert other.probe.logprobs != pytest.approx(want.probe.logprobs, abs=1e-6)


def test_checkpoint_restores_one_run_and_resumes(trainer, tmp_path):
    policy, ad = trainer
    tok = policy.tokenizer
    policy.train_step(ad["a"], batch_for(tok, 0))
    save_trainer(tmp_path, policy, ad["a"])
    b_before = snapshot(ad["b"])
    policy.train_step(ad["a"], batch_for(tok, 1, flip=True))
    after_two = policy.adapter_tensors(ad["a"])
    load_trainer(tmp_path, policy, ad["a"])
    assert ad["a"].version == 1
    policy.train_step(ad["a"], batch_for(tok, 1, flip=True))  # optimizer state and RNG restored
    again = policy.adapter_tensors(ad["a"])
    assert all(torch.equal(again[k], after_two[k]) for k in after_two)
    assert_same(b_before, snapshot(ad["b"]))


def test_adapters_join_and_leave(trainer, make_spec):
    policy, ad = trainer
    # another rank and other target modules share the base model fine
    small = parse_spec(make_spec("lora.r=4", "seed=1", "lora.target_modules=[q_proj, v_proj]"))
    c = policy.add_adapter(small)
    tok = policy.tokenizer
    policy.train_step(c, batch_for(tok, 0))
    assert c.version == 1
    assert {p.shape[0] for k, p in policy.adapter_tensors(c).items() if "lora_A" in k} == {4}
    policy.remove_adapter(c)
    assert c.name not in policy.adapters and len(policy.model.peft_config) == 3
    with pytest.raises(ValueError, match="not found"):
        policy.train_step(c, batch_for(tok, 1))
    policy.train_step(ad["a"], batch_for(tok, 0))  # the others step on


def test_exported_adapters_load_as_peft_directories(trainer, specs, tmp_path):
    """The engines' file format (adapters/files.py) and the checkpoint's adapter
    directory both load into PEFT and compute the pooled model's logits for that run."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from workers.adapters.files import write_version

    policy, ad = trainer
    spec_a, _ = specs
    tok = policy.tokenizer
    policy.train_step(ad["a"], batch_for(tok, 0))
    policy.train_step(ad["b"], batch_for(tok, 0, flip=True))
    ids = torch.tensor([tok.encode("12+34=46", add_special_tokens=False)])
    update = LocalExecutor(policy, ad["a"]).publish()
    engine_dir = write_version(update, tmp_path, spec_a.lora, spec_a.model.path)
    save_trainer(tmp_path / "ckpt", policy, ad["a"])
    model = policy.activate(ad["a"])
    with torch.no_grad():
        want = model.eval()(input_ids=ids).logits
    model.train()
    for path in (engine_dir, tmp_path / "ckpt" / "adapter"):
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
    run, step after step, the adapter, the metrics and the random stream of its own
    policy's step alone (fp32, CPU, dropout included: each run's masks come from its own
    stream with its own batch's shapes), and a fourth run not in the step is untouched,
    bit for bit."""
    policy, adapters = pool(*three.values(), parse_spec(make_spec("seed=1")))
    ad = dict(zip([*three, "d"], adapters, strict=True))
    tok = policy.tokenizer
    policy.train_step(ad["d"], batch_for(tok, 0))
    d_before = snapshot(ad["d"])
    shape = {"a": {}, "b": {"distinct": True}, "c": {"one_token": True}}
    batches = {
        run: [varied_batch(tok, v, k, **shape[run]) for v in range(2)]
        for k, run in enumerate(three)
    }
    assert policy.can_batch([ad[r] for r in three])
    got = [policy.train_steps([(ad[r], batches[r][v]) for r in three]) for v in range(2)]
    assert policy.together == {1: 1, 3: 2}  # one forward and backward for the three, each step
    assert_same(d_before, snapshot(ad["d"]))
    for k, (run, spec) in enumerate(three.items()):
        solo = LoraPolicy(spec, spec.model.path)
        for v in range(2):
            want = solo.train_step(solo.adapter, batches[run][v])
            assert got[v][k].keys() == want.keys(), run
            assert got[v][k] == pytest.approx(want, rel=1e-5, abs=1e-6), (run, v)
        alone, pooled = solo.adapter_tensors(), policy.adapter_tensors(ad[run])
        assert alone.keys() == pooled.keys()
        for key in alone:
            torch.testing.assert_close(pooled[key], alone[key], rtol=1e-5, atol=1e-7)
        assert ad[run].version == 2
        # its dropout stream drew what the solo step drew, no more
        assert torch.equal(ad[run].rng.cpu, solo.adapter.rng.cpu), run


def test_a_batched_step_isolates_a_nan_and_falls_back_alone(trainer, specs):
    """A NaN in one run's adapter stays in that run: the other's step is its step alone."""
    policy, ad = trainer
    tok = policy.tokenizer
    ref, (_, ref_b) = pool(*specs)
    with torch.no_grad():
        ad["a"].params[0].fill_(float("nan"))
    out = policy.train_steps(
        [(ad["a"], batch_for(tok, 0)), (ad["b"], batch_for(tok, 0, flip=True))]
    )
    assert policy.together == {2: 1}
    want = ref.train_step(ref_b, batch_for(tok, 0, flip=True))
    assert out[1] == pytest.approx(want, rel=1e-5, abs=1e-6)
    assert not math.isfinite(out[0]["loss/total"])
    got, alone = policy.adapter_tensors(ad["b"]), ref.adapter_tensors(ref_b)
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
    policy, adapters = pool(*specs.values())
    ad = dict(zip(specs, adapters, strict=True))
    solos = {run: LocalExecutor(LoraPolicy(spec, spec.model.path)) for run, spec in specs.items()}
    tok = policy.tokenizer
    runs = ["a", "b"] if together else ["a"]
    limit = {r: specs[r].train.mult_prob_error_samples for r in runs}

    got, want = [], []
    for step in range(2):
        batches = {}
        for run in runs:
            LocalExecutor(policy, ad[run]).publish(False)  # each publish kept for the check
            solos[run].publish(False)
            batch = batch_for(tok, step, flip=(step == 1) != (run == "b"))
            if step:
                batch = mixed_versions(batch, step - 1)
                assert policy.stale_sums(ad[run], batch, limit[run]).tokens > 0  # it runs
            batches[run] = batch
        before = {r: policy.adapter_tensors(ad[r]) for r in runs}
        if together:
            steps = [(ad[r], batches[r]) for r in runs]
            sums = policy._stale_sums(steps, True, [limit[r] for r in runs])
            for k, r in enumerate(runs):  # the check leaves every adapter as it was
                after = policy.adapter_tensors(ad[r])
                assert all(torch.equal(before[r][key], after[key]) for key in after)
                alone = policy.stale_sums(ad[r], batches[r], limit[r])
                assert sums[k].tokens == alone.tokens
                assert sums[k].sums == pytest.approx(alone.sums, rel=1e-5, abs=1e-6)
            out = dict(zip(runs, policy.train_steps(steps), strict=True))
            assert policy.together[2] >= 1
        else:
            out = {"a": policy.train_step(ad["a"], batches["a"])}
        got.append(out)
        want.append({r: solos[r]._train_step(batches[r]) for r in runs})
    assert "token_mult_prob_error" in got[1]["a"] and "gen_kl_error" in got[1]["a"]
    for g, w in zip(got, want, strict=True):
        for r in runs:
            assert g[r].keys() == w[r].keys()
            assert g[r] == pytest.approx(w[r], rel=1e-5, abs=1e-6)
