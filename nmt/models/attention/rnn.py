"""The GRU decoder's attention over the encoder states: additive (Bahdanau), dot, general, scaled dot, none."""

from __future__ import annotations

import math

import torch
from torch import nn

from nmt.models.attention.base import RNNAttention


class AdditiveAttention(RNNAttention):
    """Bahdanau: v^T tanh(W_q q + W_k k), with W_k k projected once per sentence."""

    def __init__(self, query_dim: int, key_dim: int, temperature: float = 1.0, dropout: float = 0.0) -> None:
        super().__init__(query_dim, key_dim, temperature, dropout)
        self.query_proj = nn.Linear(query_dim, query_dim, bias=False)
        self.key_proj = nn.Linear(key_dim, query_dim, bias=False)
        self.energy = nn.Linear(query_dim, 1, bias=False)

    def project_keys(self, keys: torch.Tensor) -> torch.Tensor:
        return self.key_proj(keys)  # (B, S, A)

    def score(self, query: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        hidden = torch.tanh(self.query_proj(query)[:, :, None] + keys[:, None])  # (B, T, S, A)
        return self.energy(hidden).squeeze(-1)  # (B, T, S)


class DotAttention(RNNAttention):
    """Luong dot: q . k (query and key sizes must match)."""

    def __init__(self, query_dim: int, key_dim: int, temperature: float = 1.0, dropout: float = 0.0) -> None:
        super().__init__(query_dim, key_dim, temperature, dropout)
        if query_dim != key_dim:
            raise ValueError(f"{type(self).__name__} needs query size ({query_dim}) == key size ({key_dim})")

    def score(self, query: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        return query @ keys.transpose(1, 2)  # (B, T, S)


class GeneralAttention(RNNAttention):
    """Luong general: q^T W k, with W k projected once per sentence."""

    def __init__(self, query_dim: int, key_dim: int, temperature: float = 1.0, dropout: float = 0.0) -> None:
        super().__init__(query_dim, key_dim, temperature, dropout)
        self.key_proj = nn.Linear(key_dim, query_dim, bias=False)

    def project_keys(self, keys: torch.Tensor) -> torch.Tensor:
        return self.key_proj(keys)  # (B, S, Dq)

    def score(self, query: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        return query @ keys.transpose(1, 2)  # (B, T, S)


class ScaledDotAttention(DotAttention):
    """q . k / sqrt(d)."""

    def score(self, query: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        return super().score(query, keys) / math.sqrt(query.size(-1))


class NoAttention(RNNAttention):
    """Plain seq2seq baseline: the context is the mean of the encoder states, its weights uniform over real tokens."""

    def forward(self, query: torch.Tensor, keys: torch.Tensor, values: torch.Tensor,
                mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        uniform = mask / mask.sum(-1, keepdim=True)  # (B, S)
        weights = uniform.to(values.dtype)[:, None].expand(-1, query.size(1), -1)  # (B, T, S)
        return weights @ values, weights
