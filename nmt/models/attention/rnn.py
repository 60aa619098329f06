"""The GRU decoder's attention over the encoder states: additive (Bahdanau), dot, general, scaled dot, none."""

from __future__ import annotations

import math

import torch
from torch import nn

from nmt.config import ModelConfig
from nmt.models.attention.base import RNNAttention, linear_flops, register_rnn_attention


def _per_pair(cfg: ModelConfig, src_len: int, tgt_len: int) -> float:
    """One hidden-size product for every (decoder step, source position): the scores q.k (or v^T tanh(...)), and
    again the context, the weighted sum of the values."""
    return linear_flops(tgt_len, src_len, cfg.hidden_size)


@register_rnn_attention("additive")
class AdditiveAttention(RNNAttention):
    """Bahdanau: v^T tanh(W_q q + W_k k), with W_k k projected once per sentence."""

    def __init__(self, query_dim: int, key_dim: int, temperature: float = 1.0, dropout: float = 0.0) -> None:
        super().__init__(query_dim, key_dim, temperature, dropout)
        self.query_proj = nn.Linear(query_dim, query_dim, bias=False)
        self.key_proj = nn.Linear(key_dim, query_dim, bias=False)
        self.energy = nn.Linear(query_dim, 1, bias=False)

    @classmethod
    def flops(cls, cfg: ModelConfig, src_len: int, tgt_len: int) -> float:
        h = cfg.hidden_size
        pair = _per_pair(cfg, src_len, tgt_len)
        return linear_flops(src_len, h, h) + linear_flops(tgt_len, h, h) + pair + pair  # keys, queries, scores, context

    def project_keys(self, keys: torch.Tensor) -> torch.Tensor:
        return self.key_proj(keys)  # (B, S, A)

    def score(self, query: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        hidden = torch.tanh(self.query_proj(query)[:, :, None] + keys[:, None])  # (B, T, S, A)
        return self.energy(hidden).squeeze(-1)  # (B, T, S)


@register_rnn_attention("dot")
class DotAttention(RNNAttention):
    """Luong dot: q . k (query and key sizes must match)."""

    def __init__(self, query_dim: int, key_dim: int, temperature: float = 1.0, dropout: float = 0.0) -> None:
        super().__init__(query_dim, key_dim, temperature, dropout)
        if query_dim != key_dim:
            raise ValueError(f"{type(self).__name__} needs query size ({query_dim}) == key size ({key_dim})")

    @classmethod
    def flops(cls, cfg: ModelConfig, src_len: int, tgt_len: int) -> float:
        pair = _per_pair(cfg, src_len, tgt_len)
        return pair + pair  # scores, context

    def score(self, query: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        return query @ keys.transpose(1, 2)  # (B, T, S)


@register_rnn_attention("general")
class GeneralAttention(RNNAttention):
    """Luong general: q^T W k, with W k projected once per sentence."""

    def __init__(self, query_dim: int, key_dim: int, temperature: float = 1.0, dropout: float = 0.0) -> None:
        super().__init__(query_dim, key_dim, temperature, dropout)
        self.key_proj = nn.Linear(key_dim, query_dim, bias=False)

    @classmethod
    def flops(cls, cfg: ModelConfig, src_len: int, tgt_len: int) -> float:
        pair = _per_pair(cfg, src_len, tgt_len)
        return linear_flops(src_len, cfg.hidden_size, cfg.hidden_size) + pair + pair  # keys, scores, context

    def project_keys(self, keys: torch.Tensor) -> torch.Tensor:
        return self.key_proj(keys)  # (B, S, Dq)

    def score(self, query: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        return query @ keys.transpose(1, 2)  # (B, T, S)


@register_rnn_attention("scaled_dot")
class ScaledDotAttention(DotAttention):
    """q . k / sqrt(d)."""

    def score(self, query: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        return super().score(query, keys) / math.sqrt(query.size(-1))


@register_rnn_attention("none")
class NoAttention(RNNAttention):
    """Plain seq2seq baseline: one fixed context, the mean of the encoder states over real tokens.

    Its reported weights are uniform over the real tokens (they are what the mean uses).
    """

    @classmethod
    def flops(cls, cfg: ModelConfig, src_len: int, tgt_len: int) -> float:
        return _per_pair(cfg, src_len, tgt_len)  # the context: the mean as a weighted sum

    def forward(self, query: torch.Tensor, keys: torch.Tensor, values: torch.Tensor,
                mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        uniform = mask / mask.sum(-1, keepdim=True)  # (B, S)
        weights = uniform.to(values.dtype)[:, None].expand(-1, query.size(1), -1)  # (B, T, S)
        return weights @ values, weights
