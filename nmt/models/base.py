"""The one interface through which training and decoding see every model.

Conventions: token ids are `LongTensor`s, `src_mask` is a bool tensor that is True on real tokens,
`tgt_in` starts with BOS.

Decoding runs over rows in groups, one group per source sentence: its rows are that sentence's hypotheses,
next to each other, and every group has `width` of them (1 in greedy search and at beam search's first step,
the beam after that). So a model's decoding state may keep what depends on the source alone, such as the
cross-attention keys and values, once per sentence, and the rest once per row.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

Memory = dict[str, Any]  # what `encode` returns: tensors with one entry per sentence on dim 0


@dataclass
class State:
    """What a model carries from one decoding step to the next; each model adds fields of its own."""

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
    """The old group (sentence) of each group of `reorder_state`'s `indices` (G', W'), over a state of `groups`
    groups of `width` rows; None when every sentence goes on (G' == groups): the groups are then the old ones,
    in their order, and per-sentence parts stay as they are."""
    if indices.size(0) == groups:
        return None
    return indices[:, 0] // width  # (G',)


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

    Subclasses implement `forward`, `encode`, `init_state` and `step`; the default `reorder_state` works for a
    state whose tensors all have one entry per row on dim 0.
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

    def encode(self, src: torch.Tensor, src_mask: torch.Tensor) -> Memory:
        """Run the encoder once per batch; returns the memory the decoder attends over."""
        raise NotImplementedError

    def init_state(self, memory: Memory, src_mask: torch.Tensor) -> State:
        """The decoder state before the first step: one row per sentence."""
        raise NotImplementedError

    def step(self, prev_tokens: torch.Tensor, state: State) -> tuple[torch.Tensor, State]:
        """One decoder step: `prev_tokens` (rows,) -> log-probabilities (rows, V) and the next state, whose
        `attention` is this step's cross-attention."""
        raise NotImplementedError

    def reorder_state(self, state: State, indices: torch.Tensor) -> State:
        """The state of the rows `indices` (G', W'): row w of group g continues the old row `indices[g, w]`.

        The rows of a group all come from one old group, and the groups are the old ones that go on, in their
        order (sentences leave, never swap), so a per-sentence part changes only when sentences leave
        (`group_origins`). `attention` is not carried over.
        """
        rows = indices.reshape(-1)  # (G'*W',)
        changes = {f.name: reorder_tree(getattr(state, f.name), rows) for f in dataclasses.fields(state)
                   if f.name not in ("width", "attention")}
        return dataclasses.replace(state, **changes, width=indices.size(1), attention=None)
