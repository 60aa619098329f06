"""The engines a `Translator` searches with (PyTorch, CTranslate2); callers ask `abilities`, never the type."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import torch

from nmt.config import DecodeConfig
from nmt.search import Hypothesis


@dataclass(frozen=True)
class Abilities:
    """What an engine can do."""

    attention: bool  # cross-attention weights
    n_best: bool
    stops: tuple[str, ...]  # decode.stop rules
    devices: tuple[str, ...]
    scores: bool = False  # `score`
    constraints: bool = False  # glossaries, lexical constraints
    sampling: bool = False  # decode.sampling


class Engine(Protocol):
    """Searches over source ids (no EOS), giving each sentence's n-best list (empty for an empty source)."""

    name: str
    abilities: Abilities
    precision: str
    device: torch.device
    max_positions: int | None  # longest sequence read, BOS/EOS included; None: any

    @property
    def parameter_count(self) -> int | None:
        """The model's trainable parameters, or None."""
        ...

    def search(self, sources: Sequence[np.ndarray], cfg: DecodeConfig, return_attention: bool = False,
               constraints: Sequence[Sequence[np.ndarray]] | None = None, *,
               continuations: frozenset[int] = frozenset(),
               never_emit: frozenset[int] = frozenset()) -> list[list[Hypothesis]]:
        """`constraints`: per source, target terms its outputs contain as whole words (not followed by a
        `continuations` token). No output holds a `never_emit` token."""
        ...

    def score(self, sources: Sequence[np.ndarray], targets: Sequence[np.ndarray],
              cfg: DecodeConfig) -> list[np.ndarray]:
        """Each target's token log-probabilities given its source, EOS's last."""
        ...

    def layer_attention(self, src: np.ndarray, tokens: Sequence[int]) -> list[tuple[str, torch.Tensor]]:
        """Named cross-attention (h, T, S) of every layer over `src` while reading `tokens` (none for a GRU)."""
        ...
