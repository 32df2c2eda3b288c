"""train.activation_checkpointing: the same step as without it, with the layers run again in
backward (float32 on the CPU, the tiny model)."""

from __future__ import annotations

import torch

from workers.policy import LoraPolicy, TrainSample, collate
from workers.policy.checkpointing import is_checkpointed
from workers.spec import parse_spec


def _samples(vocab: int, n: int = 6, prompt: int = 5, resp: int = 7, shared: bool = False):
    g = torch.Generator().manual_seed(11)
    head = torch.randint(3, vocab, (prompt,), generator=g).tolist()
    out = []
    for i in range(n):
        p = head if shared else torch.randint(3, vocab, (prompt,), generator=g).tolist()
        r = torch.randint(3, vocab, (resp - i % 3,), generator=g).tolist()  # ragged lengths
        lp = (-torch.rand(len(r), generator=g) * 3).tolist()
        out.append(TrainSample(p, r, lp, [0] * len(r), float(i % 3) - 1.0))
    return out


def _step(monkeypatch, make_spec, checkpointing: bool, *overrides: str):
    spec = parse_spec(
        make_spec(
            f"train.activation_checkpointing={str(checkpointing).lower()}",
            "train.micro_batch_size=4",  # two micro-batches: accumulation through both
            *overrides,
        )
    )
    torch.manual_seed(0)
    policy = LoraPolicy(spec, spec.model.path)
    # the first layer's MLP runs, and whether under grad: counted at its class's forward (a
    # forward hook on the module did not see the recompute here)
    calls = []
    mlp = policy._layers()[0].mlp
    forward = type(mlp).forward

    def counted(self, *args, **kwargs):
        if self is mlp:
            calls.append(torch.is_grad_enabled())
        return forward(self, *args, **kwargs)

    monkeypatch.setattr(type(mlp), "forward", counted)
    batch = collate(_samples(policy.model.config.vocab_size), policy.tokenizer.pad_token_id)
    metrics = policy.train_step(policy.adapter, batch)
    grads = {n: p.grad.clone() for n, p in policy.model.named_parameters() if p.requires_grad}
    return policy, metrics, grads, calls


def test_checkpointing_gives_the_same_loss_and_gradients(monkeypatch, make_spec):
    # dropout on the adapter (the recompute must draw the forward's masks again), a KL term
    # (a no-grad reference forward beside the trained one)
    over = ("lora.dropout=0.1", "algorithm.kl_coef=0.05")
    plain, m0, g0, calls0 = _step(monkeypatch, make_spec, False, *over)
    monkeypatch.undo()
    ckpt, m1, g1, calls1 = _step(monkeypatch, make_spec, True, *over)
    assert not any(map(is_checkpointed, plain._layers()))
    assert all(map(is_checkpointed, ckpt._layers()))
    for k in ("loss/total", "grad_norm", "kl"):
        assert abs(m0[k] - m1[k]) <= 1e-6 * max(1.0, abs(m0[k])), (k, m0[k], m1[k])
    assert g0.keys() == g1.keys() and g0
    for k in g0:
        torch.testing.assert_close(g1[k], g0[k], rtol=1e-5, atol=1e-7)
    # Each micro-batch's forward under grad ran the layer once more in backward; the no-grad
    # reference forward ran as before, once a micro-batch.
    assert calls0.count(True) == 2 and calls1.count(True) == 4
    assert calls0.count(False) == calls1.count(False) == 2


def test_checkpointing_takes_the_plain_forward_when_prompts_repeat(make_spec):
    on = parse_spec(make_spec("train.activation_checkpointing=true"))
    off = parse_spec(make_spec())
    for spec, shares in ((off, True), (on, False)):
        policy = LoraPolicy(spec, spec.model.path)
        batch = collate(
            _samples(policy.model.config.vocab_size, shared=True), policy.tokenizer.pad_token_id
        )
        assert policy.shares_prompts(batch) is shares
        policy.train_step(policy.adapter, batch)  # and the step runs


def test_checkpointed_layers_still_compile_once_for_all_layers(make_spec, tmp_path):
    """train.compile with checkpointing: the checkpoint is traced inside each layer's
    compiled call, and every layer has the same bound forward, so dynamo still makes two
    graphs whatever the depth (the first layer's input needs no grad), not one a layer.
    Traced with the aot_eager backend (no compiler needed); its gradients are the eager
    checkpointed policy's, and its forward keeps for backward about what the eager
    checkpointed forward keeps (the recompute is not skipped under compile)."""
    import torch._dynamo

    from .gpu.small_qwen3 import build_small_qwen3

    model_dir = build_small_qwen3(
        tmp_path, vocab_size=256, hidden_size=64, num_hidden_layers=4,
        num_attention_heads=4, intermediate_size=128,
    )  # fmt: skip
    model = {"path": str(model_dir), "dtype": "float32"}
    spec = parse_spec(make_spec("train.activation_checkpointing=true", model=model))
    batch = collate(_samples(256, n=4), 0)
    grads, kept = [], []
    for compiled in (False, True):
        policy = LoraPolicy(spec, model_dir)
        if compiled:
            for layer in policy._layers():
                layer.compile(backend="aot_eager")
            torch._dynamo.reset()
            torch._dynamo.utils.counters.clear()
        policy.model.train()
        # what the forward saves for backward, by storage: activations, not the parameters
        # (a compiled graph saves its parameter inputs too; they are alive anyway)
        storages: dict[int, int] = {}
        weights = {q.untyped_storage().data_ptr() for q in policy.model.parameters()}

        def pack(t, storages=storages, weights=weights):
            if t.untyped_storage().data_ptr() not in weights:
                storages[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            lp, _ = policy.token_logprobs(batch, share_prompts=False)
        kept.append(sum(storages.values()))
        lp.sum().backward()
        grads.append({n: p.grad for n, p in policy.model.named_parameters() if p.requires_grad})
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == 2
    # the layers' inputs and the checkpoints' RNG states (a little more compiled: 106
    # against 79 KiB here); without the recompute it would keep every activation (1.5 MiB)
    assert kept[1] <= 2 * kept[0]
    for k in grads[0]:
        torch.testing.assert_close(grads[1][k], grads[0][k], rtol=1e-5, atol=1e-6, msg=k)
