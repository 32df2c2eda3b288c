"""The fused logprob head's maths, checked on the CPU in float64 so CI (no GPU) guards it:
the same values as the reference `chunked_token_logprobs` and an exact gradient."""

from __future__ import annotations

import pytest
import torch

from workers.policy import chunked_token_logprobs
from workers.policy.fused_logprobs import fused_token_logprobs


@pytest.mark.parametrize("mode", ["in_place", "pure"])  # "compiled" = pure, compiled (GPU)
# the gradient's factor computed in the forward (the default with grad) or the logits
# recomputed in the backward
@pytest.mark.parametrize("grad_in_forward", [None, False])
def test_fused_matches_reference_and_gradcheck(mode, grad_in_forward):
    torch.manual_seed(0)
    hidden = torch.randn(37, 16, dtype=torch.float64, requires_grad=True)
    weight = torch.randn(50, 16, dtype=torch.float64)
    targets = torch.randint(0, 50, (37,))
    g = torch.randn(37, dtype=torch.float64)
    # chunk 8 leaves a ragged last chunk of 5 rows
    lp, ent = fused_token_logprobs(
        hidden, targets, weight, 0.7, chunk_size=8, mode=mode, grad_in_forward=grad_in_forward
    )
    (lp * g).sum().backward()
    grad, hidden.grad = hidden.grad.clone(), None
    ref_lp, ref_ent = chunked_token_logprobs(hidden, targets, weight, 0.7, chunk_size=8)
    (ref_lp * g).sum().backward()
    torch.testing.assert_close(lp, ref_lp)
    torch.testing.assert_close(ent, ref_ent)
    torch.testing.assert_close(grad, hidden.grad)
    assert not ent.requires_grad  # entropy is logged, never trained on
    x = hidden.detach().requires_grad_()
    assert torch.autograd.gradcheck(
        lambda h: fused_token_logprobs(h, targets, weight, 0.7, 8, mode, grad_in_forward)[0],
        (x,),
    )


def test_fused_refuses_a_trainable_head_and_handles_no_rows():
    weight = torch.randn(5, 3, requires_grad=True)
    with pytest.raises(ValueError, match="frozen LM head"):
        fused_token_logprobs(torch.randn(2, 3), torch.tensor([0, 1]), weight)
    lp, ent = fused_token_logprobs(
        torch.randn(0, 3), torch.zeros(0, dtype=torch.long), weight.detach()
    )
    assert lp.shape == ent.shape == (0,)
