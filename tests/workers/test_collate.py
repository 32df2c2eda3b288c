"""collate: every field of the padded batch, against the samples one by one."""

import pytest
import torch

from workers.policy import TrainSample, collate

PAD = 0


def _samples() -> list[TrainSample]:
    return [
        TrainSample([5, 6, 7], [8, 9], [-0.5, -1.5], [2, 3], 1.0),
        TrainSample([5], [4, 3, 2, 1], [-0.1, -0.2, -0.3, -0.4], [1, 1, 2, 3], -0.5),
        TrainSample([5, 6], [], [], [], 0.0),  # an empty response: all padding after the prompt
    ]


def test_fields_hold_each_sample_then_padding():
    samples = _samples()
    b = collate(samples, PAD)
    assert b.input_ids.shape == (3, 5) and b.resp_tokens.shape == (3, 4)
    for i, s in enumerate(samples):
        p, r = len(s.prompt_ids), len(s.response_ids)
        seq = s.prompt_ids + s.response_ids
        assert b.input_ids[i].tolist() == seq + [PAD] * (5 - p - r)
        assert b.attention_mask[i].tolist() == [1] * (p + r) + [0] * (5 - p - r)
        assert b.resp_pos[i, :r].tolist() == list(range(p - 1, p - 1 + r))
        assert b.resp_tokens[i].tolist() == s.response_ids + [PAD] * (4 - r)
        # each response token is the one its position predicts
        assert [seq[j + 1] for j in b.resp_pos[i, :r].tolist()] == s.response_ids
        assert b.mask[i].tolist() == [1.0] * r + [0.0] * (4 - r)
        assert b.lp_roll[i, :r].tolist() == pytest.approx(s.lp_roll)
        assert b.versions[i].tolist() == s.versions + [-1] * (4 - r)
        assert b.prompt_len[i].item() == p
    assert b.advantages.tolist() == [1.0, -0.5, 0.0]
    assert b.mask.dtype == b.lp_roll.dtype == torch.get_default_dtype()
    assert {b.input_ids.dtype, b.resp_pos.dtype, b.versions.dtype} == {torch.long}


def test_refuses_mismatched_lengths_and_empty():
    bad = TrainSample([1], [2, 3], [-0.1], [0, 0], 0.0)
    with pytest.raises(ValueError, match="sample 0: 2 tokens but 1 logprobs"):
        collate([bad], PAD)
    with pytest.raises(ValueError, match="empty batch"):
        collate([], PAD)
