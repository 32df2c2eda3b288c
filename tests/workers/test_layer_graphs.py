"""The layer graphs' routing where nothing can be captured (workers/policy/layer_graphs.py;
the captures themselves are held to the compiled layers on a GPU, tests/workers/gpu): on the
CPU every call reaches the layer's own call with its arguments as given, and removing the
graphs restores the layers; the captures take CUDA's thread-local mode."""

from __future__ import annotations

import torch
from torch import nn

from workers.policy.layer_graphs import LayerGraphs, _thread_local_capture


class _Layer(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, hidden, attention_mask=None, position_embeddings=None, **kwargs):
        return self.lin(hidden) + (0 if attention_mask is None else attention_mask)


def test_calls_reach_the_layers_own_call_and_remove_restores_them():
    torch.manual_seed(0)
    layers = nn.ModuleList([_Layer(), _Layer()]).train()
    x = torch.randn(3, 4, requires_grad=True)
    want = [layer(x, attention_mask=torch.ones(4)) for layer in layers]
    graphs = LayerGraphs(layers)
    assert all(layer._compiled_call_impl is not None for layer in layers)
    got = [layer(x, attention_mask=torch.ones(4), position_ids=None) for layer in layers]
    for a, b in zip(want, got, strict=True):
        torch.testing.assert_close(a, b)
    assert graphs.replays == graphs.captures == 0 and not graphs.seen  # a CPU tensor: never
    graphs.remove()
    assert all(layer._compiled_call_impl is None for layer in layers)


def test_captures_take_the_thread_local_mode(monkeypatch):
    seen = []
    monkeypatch.setattr(torch.cuda, "graph", lambda *args, **kwargs: seen.append(kwargs))
    fake = torch.cuda.graph
    with _thread_local_capture():
        torch.cuda.graph("g", pool=None)
        torch.cuda.graph("g", capture_error_mode="global")  # a mode given is kept
    assert seen == [
        {"pool": None, "capture_error_mode": "thread_local"},
        {"capture_error_mode": "global"},
    ]
    assert torch.cuda.graph is fake
