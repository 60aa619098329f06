"""The two attention interfaces, and the class of the variant a config names (nmt.config.VARIANTS)."""

from __future__ import annotations

import importlib

import torch
from torch import nn

from nmt.config import VARIANTS, ModelConfig, settings_of
from nmt.kernels import Dropout


class RNNAttention(nn.Module):
    """Base of the GRU decoder's attention."""

    def __init__(self, query_dim: int, key_dim: int, temperature: float = 1.0, dropout: float = 0.0) -> None:
        super().__init__()
        self.temperature = temperature
        self.dropout = Dropout(dropout)

    @classmethod
    def from_config(cls, cfg: ModelConfig) -> RNNAttention:
        hidden = cfg.hidden_size
        return cls(hidden, hidden, cfg.temperature, cfg.attention_dropout, **settings_of(cfg, "rnn"))

    def project_keys(self, keys: torch.Tensor) -> torch.Tensor:
        """The query-independent part of the scores, once per sentence."""
        return keys

    def score(self, query: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        """Query (B, T, Dq) against projected keys (B, S, *) -> raw scores (B, T, S)."""
        raise NotImplementedError

    def forward(self, query: torch.Tensor, keys: torch.Tensor, values: torch.Tensor,
                mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Context (B, T, Dv) and weights (B, T, S) of `query` over `values`; `keys` come from `project_keys`."""
        scores = self.score(query, keys) / self.temperature  # (B, T, S)
        weights = scores.masked_fill(~mask[:, None, :], float("-inf")).softmax(-1)  # (B, T, S)
        context = self.dropout(weights) @ values  # (B, T, Dv)
        return context, weights


class SelfAttention(nn.Module):
    """Base of the transformer attention cores; parameter-free, so one instance serves all layers."""

    def __init__(self, temperature: float = 1.0, dropout: float = 0.0) -> None:
        super().__init__()
        self.temperature = temperature
        self.dropout = dropout

    @classmethod
    def from_config(cls, cfg: ModelConfig) -> SelfAttention:
        return cls(cfg.temperature, cfg.attention_dropout, **settings_of(cfg, "self"))

    def build_mask(self, length: int, key_mask: torch.Tensor | None, causal: bool,
                   device: torch.device) -> torch.Tensor | None:
        """The batch's mask, shared by every layer."""
        raise NotImplementedError

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None = None,
                causal: bool = False, need_weights: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Output (B, h, T, d) and, when `need_weights`, the weights (B, h, T, S)."""
        raise NotImplementedError

    def init_cache(self, batch: int, heads: int, head_dim: int, like: torch.Tensor) -> dict[str, torch.Tensor]:
        """The empty decoding cache (batched on dim 0)."""
        raise NotImplementedError

    def step(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
             cache: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """One causal position (B, h, 1, d): its output and the grown cache."""
        raise NotImplementedError

    def reorder_cache(self, cache: dict[str, torch.Tensor], rows: torch.Tensor) -> dict[str, torch.Tensor]:
        """The cache of the rows continuing `rows` (B',)."""
        return {name: value.index_select(0, rows) for name, value in cache.items()}


def variant_class(family: str, name: str) -> type:
    """The class of `family`'s ("rnn" or "self") variant `name`."""
    module, _, cls = VARIANTS[family][name].cls.rpartition(".")
    return getattr(importlib.import_module(module), cls)
