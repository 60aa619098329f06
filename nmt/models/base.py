"""The interface training and search see every model through.

`src_mask` is True on real tokens; decoding rows come in groups of `width` per sentence.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

Memory = dict[str, Any]  # tensors, one entry per sentence on dim 0


@dataclass
class State:
    """What a model carries between decoding steps; subclasses add fields."""

    width: int = field(default=1, kw_only=True)  # rows per sentence
    attention: torch.Tensor | None = field(default=None, kw_only=True)  # (rows, S) of the last step, head mean


def reorder_tree(value: Any, indices: torch.Tensor) -> Any:
    """Select `indices` along dim 0 of every tensor in a nested dict/list/tuple."""
    if isinstance(value, torch.Tensor):
        return value.index_select(0, indices)
    if isinstance(value, dict):
        return {k: reorder_tree(v, indices) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(reorder_tree(v, indices) for v in value)
    return value


def group_origins(indices: torch.Tensor, width: int, groups: int) -> torch.Tensor | None:
    """Each group's previous group (sentence) in `indices` (G', W'); None when every sentence goes on."""
    if indices.size(0) == groups:
        return None
    return indices[:, 0] // width  # (G',)


def select_positions(x: torch.Tensor, keep: torch.Tensor | None) -> torch.Tensor:
    """Rows of `x` (B, T, ...) at `keep`: a mask (B, T), flat indices (N,) (no device sync), or None for all."""
    if keep is None:
        return x
    if keep.dtype == torch.bool:
        return x[keep]  # (N, ...)
    return x.flatten(0, 1).index_select(0, keep)  # (N, ...)


class Seq2Seq(nn.Module):
    """Base of encoder-decoder models."""

    pad_id: int
    bos_id: int
    eos_id: int
    max_positions: int | None = None  # BOS/EOS included; None: any

    def forward(self, src: torch.Tensor, src_mask: torch.Tensor, tgt_in: torch.Tensor,
                keep: torch.Tensor | None = None, src_lengths: torch.Tensor | None = None) -> torch.Tensor:
        """Teacher-forced logits (B, T, V), or (N, V) at `keep` only; host `src_lengths` (B,) spare a device read."""
        raise NotImplementedError

    def encode(self, src: torch.Tensor, src_mask: torch.Tensor) -> Memory:
        raise NotImplementedError

    def init_state(self, memory: Memory, src_mask: torch.Tensor) -> State:
        """The state before the first step, one row per sentence."""
        raise NotImplementedError

    def step(self, prev_tokens: torch.Tensor, state: State) -> tuple[torch.Tensor, State]:
        """`prev_tokens` (rows,) -> log-probabilities (rows, V) and the next state (with this step's attention)."""
        raise NotImplementedError

    def reorder_state(self, state: State, indices: torch.Tensor) -> State:
        """The state of rows `indices` (G', W'): row w of group g continues row `indices[g, w]`."""
        rows = indices.reshape(-1)  # (G'*W',)
        changes = {f.name: reorder_tree(getattr(state, f.name), rows) for f in dataclasses.fields(state)
                   if f.name not in ("width", "attention")}
        return dataclasses.replace(state, **changes, width=indices.size(1), attention=None)
