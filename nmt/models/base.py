"""The one interface through which training and decoding see every model.

Conventions: token ids are `LongTensor`s, `src_mask` is a bool tensor that is True on real tokens,
`tgt_in` starts with BOS. A decoding state is a dict of tensors whose first dimension is the batch
(or batch x beam) dimension, plus, after each `step`, the key "attention": the cross-attention of
that step, (B, S), averaged over heads, for plots and diagnostics.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

State = dict[str, Any]


def reorder_tree(value: Any, indices: torch.Tensor) -> Any:
    """Select `indices` along dim 0 of every tensor in a nested dict/list/tuple."""
    if isinstance(value, torch.Tensor):
        return value.index_select(0, indices)
    if isinstance(value, dict):
        return {k: reorder_tree(v, indices) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(reorder_tree(v, indices) for v in value)
    return value


def select_positions(x: torch.Tensor, keep: torch.Tensor | None) -> torch.Tensor:
    """Rows of `x` (B, T, ...) at `keep`: a bool mask (B, T), or flat indices (N,) into B * T; None: all of `x`.

    Indices computed on the host select without a device-to-host synchronisation, which a mask needs for its
    count on a GPU.
    """
    if keep is None:
        return x
    if keep.dtype == torch.bool:
        return x[keep]  # (N, ...)
    return x.flatten(0, 1).index_select(0, keep)  # (N, ...)


class Seq2Seq(nn.Module):
    """Base class of encoder-decoder models.

    Subclasses implement `forward`, `encode`, `init_state` and `step`; `reorder_state` works for any
    state made of tensors batched on dim 0.
    """

    pad_id: int
    bos_id: int
    eos_id: int
    max_positions: int | None = None  # the longest sequence (BOS or EOS included) it reads; None: any length

    def forward(self, src: torch.Tensor, src_mask: torch.Tensor, tgt_in: torch.Tensor,
                keep: torch.Tensor | None = None, src_lengths: torch.Tensor | None = None) -> torch.Tensor:
        """Teacher-forced logits, (B, T, V); with `keep` only those positions' logits, (N, V).

        `keep` (see `select_positions`) lets training skip the output layer, the model's largest, on padding
        positions. `src_lengths` (B,), on the CPU, saves a model that needs the lengths on the host a copy back.
        """
        raise NotImplementedError

    def encode(self, src: torch.Tensor, src_mask: torch.Tensor) -> State:
        """Run the encoder once per batch; returns the memory the decoder attends over."""
        raise NotImplementedError

    def init_state(self, memory: State, src_mask: torch.Tensor) -> State:
        """The decoder state before the first step."""
        raise NotImplementedError

    def step(self, prev_tokens: torch.Tensor, state: State) -> tuple[torch.Tensor, State]:
        """One decoder step: `prev_tokens` (B,) -> log-probabilities (B, V) and the next state."""
        raise NotImplementedError

    def reorder_state(self, state: State, indices: torch.Tensor) -> State:
        """Keep, reorder or repeat batch entries of `state` (beam search)."""
        return reorder_tree(state, indices)
