"""Local self-attention through a banded kernel, in time and memory linear in length."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from nmt.config import WINDOW
from nmt.models.attention.full import FullAttention


def within_window(q_pos: torch.Tensor, k_pos: torch.Tensor, window: int) -> torch.Tensor:
    """(T, S) bool: True where a key lies within `window` positions of the query, on either side."""
    return (q_pos[:, None] - k_pos[None, :]).abs() <= window


def _with_padding(seen: torch.Tensor, keys: torch.Tensor | None) -> torch.Tensor:
    """The keys `seen` by position that are real (`keys`); a query whose window holds none keeps its window."""
    if keys is None:
        return seen
    allowed = seen & keys
    return torch.where(allowed.any(-1, keepdim=True), allowed, seen)


def band_spans(length: int, block: int, window: int) -> list[tuple[int, int, int, int]]:
    """(query start, query stop, key start, key stop) of every query block: the block widened by `window`."""
    return [(start, min(start + block, length), max(start - window, 0), min(start + block + window, length))
            for start in range(0, length, block)]


def _band_block(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, keys: torch.Tensor | None, start: int,
                low: int, window: int, causal: bool, scale: float, dropout: float) -> torch.Tensor:
    """One query block (B, h, C, d) against its key span (B, h, L, d) beginning at position `low`."""
    q_pos = torch.arange(start, start + q.size(2), device=q.device)[:, None]  # (C, 1)
    k_pos = torch.arange(low, low + k.size(2), device=q.device)[None, :]  # (1, L)
    seen = ((q_pos - k_pos).abs() <= window) & ((k_pos <= q_pos) | (not causal))  # (C, L)
    mask = _with_padding(seen, None if keys is None else keys[:, None, None, :])  # (B or 1, 1, C, L)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout, scale=scale)


def _rng_state(device: torch.device) -> torch.Tensor:
    return torch.cuda.get_rng_state(device) if device.type == "cuda" else torch.get_rng_state()


def _set_rng_state(device: torch.device, state: torch.Tensor) -> None:
    if device.type == "cuda":
        torch.cuda.set_rng_state(state, device)
    else:
        torch.set_rng_state(state)


class _BandedAttention(torch.autograd.Function):
    """Local attention block by block; backward recomputes each block (same dropout) instead of keeping it."""

    @staticmethod
    def forward(ctx, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, keys: torch.Tensor | None,  # type: ignore[override]
                args: tuple[int, int, bool, float, float]) -> torch.Tensor:
        block, window, causal, scale, dropout = args
        device = q.device.type
        ctx.args = args
        ctx.cast = (torch.is_autocast_enabled(device), torch.get_autocast_dtype(device))
        ctx.rng = _rng_state(q.device) if dropout > 0 else None
        ctx.save_for_backward(q, k, v, keys)
        out = None
        for start, stop, low, high in band_spans(q.size(2), block, window):
            part = _band_block(q[:, :, start:stop], k[:, :, low:high], v[:, :, low:high],
                               None if keys is None else keys[:, low:high], start, low, window, causal, scale,
                               dropout)  # (B, h, C, d)
            if out is None:
                out = part.new_empty(*q.shape[:3], v.size(-1))  # (B, h, T, d)
            out[:, :, start:stop] = part
        return out

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:  # type: ignore[override]
        q, k, v, keys = ctx.saved_tensors
        block, window, causal, scale, dropout = ctx.args
        dq, dk, dv = torch.empty_like(q), torch.zeros_like(k), torch.zeros_like(v)  # (B, h, T, d)
        now = _rng_state(q.device) if ctx.rng is not None else None
        if ctx.rng is not None:
            _set_rng_state(q.device, ctx.rng)
        try:
            with torch.enable_grad(), torch.autocast(q.device.type, dtype=ctx.cast[1], enabled=ctx.cast[0]):
                for start, stop, low, high in band_spans(q.size(2), block, window):
                    parts = [x.detach()[:, :, a:b].requires_grad_()
                             for x, a, b in ((q, start, stop), (k, low, high), (v, low, high))]
                    out = _band_block(*parts, None if keys is None else keys[:, low:high], start, low, window,
                                      causal, scale, dropout)  # (B, h, C, d)
                    gq, gk, gv = torch.autograd.grad(out, parts, grad[:, :, start:stop])
                    dq[:, :, start:stop] = gq
                    dk[:, :, low:high] += gk
                    dv[:, :, low:high] += gv
        finally:
            if now is not None:
                _set_rng_state(q.device, now)
        return dq, dk, dv, None, None


class LocalAttention(FullAttention):
    """Each query sees the keys within `window` positions on either side: queries go in blocks, each attending
    only to the span within `window` of it, where the window and causality are applied."""

    block = 64  # query positions per block; wider blocks mean fewer kernel calls and more masked-out scores

    def __init__(self, temperature: float = 1.0, dropout: float = 0.0, window: int = WINDOW.default) -> None:
        super().__init__(temperature, dropout)
        self.window = window

    def pattern(self, q_pos: torch.Tensor, k_pos: torch.Tensor) -> torch.Tensor | None:
        return within_window(q_pos, k_pos, self.window)

    def build_mask(self, length: int, key_mask: torch.Tensor | None, causal: bool,
                   device: torch.device) -> torch.Tensor | None:
        """Padding only, (B, 1, 1, T), or None."""
        return None if key_mask is None else key_mask[:, None, None, :]

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None = None,
                causal: bool = False, need_weights: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
        keys = None if mask is None else mask[:, 0, 0, :]  # (B, T)
        if need_weights:  # the diagnostic path: every weight of the (T, T) matrix is asked for anyway
            pos = torch.arange(q.size(-2), device=q.device)
            seen = self.pattern(pos, pos) & ((pos[None, :] <= pos[:, None]) | (not causal))  # (T, T)
            dense = _with_padding(seen, None if keys is None else keys[:, None, None, :])  # (B, 1, T, T)
            return super().forward(q, k, v, dense, causal, need_weights)
        scale = 1.0 / (math.sqrt(q.size(-1)) * self.temperature)
        args = (max(self.block, self.window, 1), self.window, causal, scale, self.dropout if self.training else 0.0)
        return _BandedAttention.apply(q, k, v, keys, args), None  # (B, h, T, d)

    def step(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
             cache: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The cache keeps only the last `window` keys: all that a later position can still see."""
        k, v = self.extend(cache, k, v)  # (B, h, <= w + 1, d)
        out, _ = FullAttention.forward(self, q, k, v)
        keep = max(k.size(2) - self.window, 0)
        return out, {"k": k[:, :, keep:], "v": v[:, :, keep:]}
