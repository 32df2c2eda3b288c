"""The training batch: samples collated into padded tensors."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class TrainSample:
    prompt_ids: list[int]
    response_ids: list[int]
    lp_roll: list[float]  # engine logprob per response token
    versions: list[int]  # adapter version that produced each response token
    advantage: float


@dataclass
class TrainBatch:
    input_ids: torch.Tensor  # [B, L] prompt + response, right-padded
    attention_mask: torch.Tensor  # [B, L]
    resp_pos: torch.Tensor  # [B, T] index into L of the position whose logits predict token t
    resp_tokens: torch.Tensor  # [B, T]
    mask: torch.Tensor  # [B, T] float, 1.0 on response tokens
    lp_roll: torch.Tensor  # [B, T]
    versions: torch.Tensor  # [B, T] long; -1 on padding
    advantages: torch.Tensor  # [B]
    prompt_len: torch.Tensor  # [B] long: input_ids[i, :prompt_len[i]] is the prompt

    def __len__(self) -> int:
        return self.input_ids.shape[0]

    def slice(self, start: int, end: int) -> TrainBatch:
        return TrainBatch(*(getattr(self, f)[start:end] for f in self.__dataclass_fields__))

    def to(self, device: torch.device) -> TrainBatch:
        return TrainBatch(*(getattr(self, f).to(device) for f in self.__dataclass_fields__))


def collate(samples: list[TrainSample], pad_id: int) -> TrainBatch:
    if not samples:
        raise ValueError("cannot collate an empty batch")
    b = len(samples)
    seq_len = max(len(s.prompt_ids) + len(s.response_ids) for s in samples)
    resp_len = max(max(len(s.response_ids) for s in samples), 1)
    input_ids = torch.full((b, seq_len), pad_id, dtype=torch.long)
    attn = torch.zeros((b, seq_len), dtype=torch.long)
    resp_pos = torch.zeros((b, resp_len), dtype=torch.long)
    resp_tokens = torch.full((b, resp_len), pad_id, dtype=torch.long)
    mask = torch.zeros((b, resp_len))
    lp_roll = torch.zeros((b, resp_len))
    versions = torch.full((b, resp_len), -1, dtype=torch.long)
    for i, s in enumerate(samples):
        p, r = len(s.prompt_ids), len(s.response_ids)
        if len(s.lp_roll) != r or len(s.versions) != r:
            raise ValueError(
                f"sample {i}: {r} tokens but {len(s.lp_roll)} logprobs / {len(s.versions)} versions"
            )
        input_ids[i, : p + r] = torch.tensor(s.prompt_ids + s.response_ids)
        attn[i, : p + r] = 1
        resp_pos[i, :r] = torch.arange(p - 1, p - 1 + r)
        resp_tokens[i, :r] = torch.tensor(s.response_ids, dtype=torch.long)
        mask[i, :r] = 1.0
        lp_roll[i, :r] = torch.tensor(s.lp_roll)
        versions[i, :r] = torch.tensor(s.versions)
    advantages = torch.tensor([s.advantage for s in samples])
    prompt_len = torch.tensor([len(s.prompt_ids) for s in samples], dtype=torch.long)
    return TrainBatch(
        input_ids, attn, resp_pos, resp_tokens, mask, lp_roll, versions, advantages, prompt_len
    )
