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
    # 0 on tokens that get no gradient (an environment's, in a multi-turn episode); None:
    # every response token is the model's
    loss_mask: list[int] | None = None


@dataclass
class TrainBatch:
    input_ids: torch.Tensor  # [B, L] prompt + response, right-padded
    attention_mask: torch.Tensor  # [B, L]
    resp_pos: torch.Tensor  # [B, T] index into L of the position whose logits predict token t
    resp_tokens: torch.Tensor  # [B, T]
    mask: torch.Tensor  # [B, T] float, 1.0 on the model's response tokens (not padding,
    # not an environment's tokens in an episode)
    lp_roll: torch.Tensor  # [B, T]
    versions: torch.Tensor  # [B, T] long; -1 on padding
    advantages: torch.Tensor  # [B]
    prompt_len: torch.Tensor  # [B] long: input_ids[i, :prompt_len[i]] is the prompt
    # [B, T] long, 1 on every response token, the environment's too (what attention reads;
    # `mask` is what the loss reads)
    resp_attn: torch.Tensor

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
    # Padded Python lists, then one tensor a field: a small tensor op a sample and field
    # (7 a sample) costs more than the rest of the step on a small model, and much more
    # when other threads hold the GIL (each op gives it up and waits to get it back).
    ids, attn, pos, toks, mask, lp, vers, rattn = [], [], [], [], [], [], [], []
    for i, s in enumerate(samples):
        p, r = len(s.prompt_ids), len(s.response_ids)
        if len(s.lp_roll) != r or len(s.versions) != r:
            raise ValueError(
                f"sample {i}: {r} tokens but {len(s.lp_roll)} logprobs / {len(s.versions)} versions"
            )
        pad, rpad = seq_len - p - r, resp_len - r
        ids.append([*s.prompt_ids, *s.response_ids] + [pad_id] * pad)
        attn.append([1] * (p + r) + [0] * pad)
        pos.append(list(range(p - 1, p - 1 + r)) + [0] * rpad)
        toks.append([*s.response_ids] + [pad_id] * rpad)
        if s.loss_mask is not None and len(s.loss_mask) != r:
            raise ValueError(f"sample {i}: {r} tokens but a loss mask of {len(s.loss_mask)}")
        own = [1.0] * r if s.loss_mask is None else [float(m) for m in s.loss_mask]
        mask.append(own + [0.0] * rpad)
        rattn.append([1] * r + [0] * rpad)
        lp.append([*s.lp_roll] + [0.0] * rpad)
        vers.append([*s.versions] + [-1] * rpad)
    input_ids = torch.tensor(ids, dtype=torch.long).reshape(b, seq_len)
    attn = torch.tensor(attn, dtype=torch.long).reshape(b, seq_len)
    resp_pos = torch.tensor(pos, dtype=torch.long).reshape(b, resp_len)
    resp_tokens = torch.tensor(toks, dtype=torch.long).reshape(b, resp_len)
    mask = torch.tensor(mask, dtype=torch.get_default_dtype()).reshape(b, resp_len)
    lp_roll = torch.tensor(lp, dtype=torch.get_default_dtype()).reshape(b, resp_len)
    versions = torch.tensor(vers, dtype=torch.long).reshape(b, resp_len)
    advantages = torch.tensor([s.advantage for s in samples])
    prompt_len = torch.tensor([len(s.prompt_ids) for s in samples], dtype=torch.long)
    resp_attn = torch.tensor(rattn, dtype=torch.long).reshape(b, resp_len)
    return TrainBatch(
        input_ids, attn, resp_pos, resp_tokens, mask, lp_roll, versions, advantages, prompt_len,
        resp_attn,
    )  # fmt: skip
