"""The two attention interfaces, their registries, and `linear_flops`, the unit of every FLOP count.

A variant is one class in its family's module, registered with `register_rnn_attention(name)` or
`register_self_attention(name)`. It lists the settings of its own in `settings` (read from its family's block,
`model.self_attention_settings` or `model.attention_settings`, and checked by `nmt.config.settings_of`), builds
itself from the config in `from_config`, and reports its FLOPs in `flops`. Registering a class declares its name
and settings to the config (nmt.config.variants, where the built-in ones are declared so that a config is checked
without torch). Outside its module only the import that registers it names it (the package's __init__, or
whatever code defines a variant of its own).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar, TypeVar

import torch
from torch import nn

from nmt.config import FAMILIES, ModelConfig, VariantSetting, declare_variant, settings_of, withdraw_variant
from nmt.kernels import Dropout


def linear_flops(tokens: float, in_features: int, out_features: int) -> float:
    """A dense layer applied to `tokens` positions: one multiply-add (2 FLOPs) per weight per position."""
    return 2.0 * tokens * in_features * out_features


class RNNAttention(nn.Module):
    """Base of the GRU decoder's attention: score, masked softmax, weighted sum of the values."""

    settings: ClassVar[tuple[VariantSetting, ...]] = ()  # this variant's own model settings, keyword arguments here

    def __init__(self, query_dim: int, key_dim: int, temperature: float = 1.0, dropout: float = 0.0) -> None:
        super().__init__()
        self.temperature = temperature
        self.dropout = Dropout(dropout)

    @classmethod
    def from_config(cls, cfg: ModelConfig) -> RNNAttention:
        """This variant over decoder queries and encoder keys of `model.hidden_size`."""
        hidden = cfg.hidden_size
        return cls(hidden, hidden, cfg.temperature, cfg.attention_dropout, **settings_of(cfg, "rnn"))

    @classmethod
    def flops(cls, cfg: ModelConfig, src_len: int, tgt_len: int) -> float:
        """Forward FLOPs of attending at `tgt_len` decoder steps over `src_len` encoder states."""
        raise NotImplementedError(f"{cls.__name__} reports no FLOP count")

    def project_keys(self, keys: torch.Tensor) -> torch.Tensor:
        """The part of the scores that does not depend on the query, computed once per sentence."""
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
    """Base of the transformer attention cores. They hold no parameters, so one instance serves all layers."""

    settings: ClassVar[tuple[VariantSetting, ...]] = ()  # this variant's own model settings, keyword arguments here

    def __init__(self, temperature: float = 1.0, dropout: float = 0.0) -> None:
        super().__init__()
        self.temperature = temperature
        self.dropout = dropout

    @classmethod
    def from_config(cls, cfg: ModelConfig) -> SelfAttention:
        """This variant with the model's temperature and attention dropout, and its own settings."""
        return cls(cfg.temperature, cfg.attention_dropout, **settings_of(cfg, "self"))

    @classmethod
    def flops(cls, cfg: ModelConfig, length: int) -> float:
        """Forward FLOPs of the scores and weighted values of one layer over `length` positions, all heads."""
        raise NotImplementedError(f"{cls.__name__} reports no FLOP count")

    @classmethod
    def step_flops(cls, cfg: ModelConfig, length: int) -> float:
        """Forward FLOPs of one decoding step's query, all heads, when `length` positions are cached (this one
        included): by default the cost per position of `flops` over `length` positions."""
        return cls.flops(cfg, length) / length

    def build_mask(self, length: int, key_mask: torch.Tensor | None, causal: bool,
                   device: torch.device) -> torch.Tensor | None:
        """The mask of a whole batch of `length` positions, built once and shared by every layer."""
        raise NotImplementedError

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None = None,
                causal: bool = False, need_weights: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Output (B, h, T, d) and, when `need_weights`, the weights (B, h, T, S)."""
        raise NotImplementedError

    def init_cache(self, batch: int, heads: int, head_dim: int, like: torch.Tensor) -> dict[str, torch.Tensor]:
        """The empty incremental-decoding cache (tensors batched on dim 0)."""
        raise NotImplementedError

    def step(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
             cache: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """One new causal position (B, h, 1, d) against the cache; returns its output and the grown cache."""
        raise NotImplementedError

    def reorder_cache(self, cache: dict[str, torch.Tensor], rows: torch.Tensor) -> dict[str, torch.Tensor]:
        """The cache of the rows that continue `rows` (B',), in their order: each entry's rows taken now."""
        return {name: value.index_select(0, rows) for name, value in cache.items()}


RNN_ATTENTION: dict[str, type[RNNAttention]] = {}
SELF_ATTENTION: dict[str, type[SelfAttention]] = {}

_REGISTRIES: dict[str, dict] = {"rnn": RNN_ATTENTION, "self": SELF_ATTENTION}
R = TypeVar("R", bound=RNNAttention)
S = TypeVar("S", bound=SelfAttention)


def _register(family: str, name: str, cls: type) -> None:
    registry = _REGISTRIES[family]
    if name in registry:
        raise ValueError(f"model.{FAMILIES[family]}: a variant '{name}' is already registered")
    declare_variant(family, name, cls.settings)
    registry[name] = cls


def _unregister(family: str, name: str) -> None:
    del _REGISTRIES[family][name]
    withdraw_variant(family, name)


def register_rnn_attention(name: str) -> Callable[[type[R]], type[R]]:
    """Class decorator: the GRU decoder's attention `model.attention: <name>`, with its settings."""
    def add(cls: type[R]) -> type[R]:
        _register("rnn", name, cls)
        return cls
    return add


def register_self_attention(name: str) -> Callable[[type[S]], type[S]]:
    """Class decorator: the transformer self-attention `model.self_attention: <name>`, with its settings."""
    def add(cls: type[S]) -> type[S]:
        _register("self", name, cls)
        return cls
    return add


def unregister_rnn_attention(name: str) -> None:
    """Remove a GRU decoder attention."""
    _unregister("rnn", name)


def unregister_self_attention(name: str) -> None:
    """Remove a self-attention variant."""
    _unregister("self", name)


def self_attention_variants() -> list[str]:
    """The names `model.self_attention` takes, in registration order."""
    return list(SELF_ATTENTION)
