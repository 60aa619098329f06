"""The engines a `Translator` searches with, behind one protocol that says what each can do: `pytorch.TorchEngine` (a
checkpoint or an ensemble) and `ctranslate2.CTranslate2Engine` (an export). Callers ask `abilities`, never the type."""

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

    attention: bool  # cross-attention weights: with each hypothesis (return_attention) and per layer and head
    n_best: bool  # several hypotheses per sentence (decode.n_best > 1)
    stops: tuple[str, ...]  # the beam-search stopping rules (decode.stop) it offers
    devices: tuple[str, ...]  # the device types it decodes on
    scores: bool = False  # the log-probabilities of given targets (`score`)
    constraints: bool = False  # target terms every output must contain (glossaries, lexical constraints)


class Engine(Protocol):
    """Searches over source ids (no EOS), returning each sentence's n-best list in input order (an empty one for a
    source without ids)."""

    name: str
    abilities: Abilities
    precision: str
    device: torch.device
    max_positions: int | None  # the longest sequence (BOS or EOS included) the model reads; None: any length

    @property
    def parameter_count(self) -> int | None:
        """The model's trainable parameters; None where the engine cannot count them."""
        ...

    def search(self, sources: Sequence[np.ndarray], cfg: DecodeConfig, return_attention: bool = False,
               constraints: Sequence[Sequence[np.ndarray]] | None = None, *,
               continuations: frozenset[int] = frozenset(),
               never_emit: frozenset[int] = frozenset()) -> list[list[Hypothesis]]:
        """`constraints`: per source, the target terms (ids) its outputs must contain, each as a whole word (no
        token of `continuations`, the pieces that go on with a word, right after it); only where
        `abilities.constraints`. No output holds a token of `never_emit`."""
        ...

    def score(self, sources: Sequence[np.ndarray], targets: Sequence[np.ndarray],
              cfg: DecodeConfig) -> list[np.ndarray]:
        """Each target's (ids, no BOS/EOS) token log-probabilities given its source, EOS's last; only where
        `abilities.scores`."""
        ...

    def layer_attention(self, src: np.ndarray, tokens: Sequence[int]) -> list[tuple[str, torch.Tensor]]:
        """Named cross-attention (h, T, S) of every layer (of every member of an ensemble) over `src` (ids, no EOS)
        while reading `tokens` and EOS; none for a model without layers of heads (a GRU)."""
        ...
