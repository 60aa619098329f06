"""Full softmax self-attention, also the base of the variants that restrict keys by position, and of cross-attention."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from nmt.kernels import dropout as dropout_fn
from nmt.models.attention.base import SelfAttention


class FullAttention(SelfAttention):
    """Softmax attention over every allowed key: the fused kernel, or explicit when weights are requested.

    Subclasses restrict which keys a query sees by position through `pattern`.
    """

    def pattern(self, q_pos: torch.Tensor, k_pos: torch.Tensor) -> torch.Tensor | None:
        """Keys each query may see by position alone, (T, S) bool; None: all."""
        return None

    def build_mask(self, length: int, key_mask: torch.Tensor | None, causal: bool,
                   device: torch.device) -> torch.Tensor | None:
        """(B or 1, 1, T, T) bool, or None when causality alone applies (`forward` then uses the causal kernel)."""
        pos = torch.arange(length, device=device)
        allowed = self.pattern(pos, pos)  # (T, T) or None
        if causal and (allowed is not None or key_mask is not None):
            future = pos[None, :] <= pos[:, None]  # (T, T)
            allowed = future if allowed is None else allowed & future
        if key_mask is not None:
            keys = key_mask[:, None, None, :]  # (B, 1, 1, T)
            allowed = keys if allowed is None else allowed & keys
        if allowed is None:
            return None
        # A padded query may see no key at all; letting it see every key keeps NaN out of later layers.
        return allowed | ~allowed.any(-1, keepdim=True)

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None = None,
                causal: bool = False, need_weights: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
        scale = 1.0 / (math.sqrt(q.size(-1)) * self.temperature)
        dropout = self.dropout if self.training else 0.0
        if not need_weights:
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout,
                                                 is_causal=causal and mask is None, scale=scale)
            return out, None
        if mask is None and causal:
            mask = torch.ones(q.size(-2), k.size(-2), dtype=torch.bool, device=q.device).tril()  # (T, S)
        scores = (q @ k.transpose(-2, -1)) * scale  # (B, h, T, S)
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        weights = scores.softmax(-1)  # (B, h, T, S)
        return dropout_fn(weights, dropout, self.training) @ v, weights

    def init_cache(self, batch: int, heads: int, head_dim: int, like: torch.Tensor) -> dict[str, torch.Tensor]:
        empty = like.new_zeros(batch, heads, 0, head_dim)  # (B, h, 0, d)
        return {"k": empty, "v": empty}

    def reorder_cache(self, cache: dict[str, torch.Tensor], rows: torch.Tensor) -> dict[str, torch.Tensor]:
        """Only notes the rows: the next `step` gathers them while it appends, one copy of the keys, not two."""
        pending = cache.get("rows")
        return {"k": cache["k"], "v": cache["v"], "rows": rows if pending is None else pending.index_select(0, rows)}

    def extend(self, cache: dict[str, torch.Tensor], k: torch.Tensor,
               v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The cached keys and values of the current rows followed by the new position's (B, h, 1, d)."""
        rows = cache.get("rows")
        if rows is None:
            return torch.cat([cache["k"], k], dim=2), torch.cat([cache["v"], v], dim=2)  # (B, h, t+1, d)
        length = cache["k"].size(2)
        grown = []
        for past, new in ((cache["k"], k), (cache["v"], v)):
            dtype = torch.promote_types(past.dtype, new.dtype)  # as cat gives: under autocast they differ
            out = new.new_empty(new.size(0), new.size(1), length + 1, new.size(3), dtype=dtype)  # (B, h, t+1, d)
            torch.index_select(past, 0, rows, out=out[:, :, :length])
            out[:, :, length:] = new
            grown.append(out)
        return grown[0], grown[1]

    def step(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
             cache: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        k, v = self.extend(cache, k, v)  # (B, h, t+1, d)
        pos = torch.arange(k.size(2), device=q.device)
        out, _ = self.forward(q, k, v, self.pattern(pos[-1:], pos))  # the cache holds no future keys
        return out, {"k": k, "v": v}
