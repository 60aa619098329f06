"""Fixed sparse self-attention: the local window plus every `stride`-th key (model.self_attention_settings)."""

from __future__ import annotations

import torch

from nmt.config import STRIDE, WINDOW
from nmt.models.attention.full import FullAttention
from nmt.models.attention.local import within_window


class SparseAttention(FullAttention):
    """The local window plus every key whose position is a multiple of `stride`, as a mask over full attention."""

    def __init__(self, temperature: float = 1.0, dropout: float = 0.0, window: int = WINDOW.default,
                 stride: int = STRIDE.default) -> None:
        super().__init__(temperature, dropout)
        self.window = window
        self.stride = stride

    def pattern(self, q_pos: torch.Tensor, k_pos: torch.Tensor) -> torch.Tensor | None:
        strided = (k_pos % self.stride == 0)[None, :]  # (1, S)
        return within_window(q_pos, k_pos, self.window) | strided  # (T, S)
