"""Every attention variant, each one class plus one line in its registry.

Two families, one signature each:

- `RNN_ATTENTION`: how the GRU decoder attends over the encoder states. `project_keys` runs once per
  sentence; `forward(query (B, T, Dq), projected keys, values (B, S, Dv), mask (B, S))` returns the
  context (B, T, Dv) and the weights (B, T, S).
- `SELF_ATTENTION`: the per-head core of transformer self-attention, from projected queries, keys and
  values (B, h, T, d) to the per-head output. `build_mask` runs once per batch; `forward` serves training,
  `init_cache` and `step` incremental decoding.

Masks are bool and True where attending is allowed (the same convention as `src_mask`).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from nmt.models.dropout import Dropout
from nmt.models.dropout import dropout as dropout_fn

_EPS = 1e-6


class RNNAttention(nn.Module):
    """Base of the GRU decoder's attention: score, masked softmax, weighted sum of the values."""

    def __init__(self, query_dim: int, key_dim: int, temperature: float = 1.0, dropout: float = 0.0) -> None:
        super().__init__()
        self.temperature = temperature
        self.dropout = Dropout(dropout)

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


class AdditiveAttention(RNNAttention):
    """Bahdanau: v^T tanh(W_q q + W_k k), with W_k k projected once per sentence."""

    def __init__(self, query_dim: int, key_dim: int, temperature: float = 1.0, dropout: float = 0.0) -> None:
        super().__init__(query_dim, key_dim, temperature, dropout)
        self.query_proj = nn.Linear(query_dim, query_dim, bias=False)
        self.key_proj = nn.Linear(key_dim, query_dim, bias=False)
        self.energy = nn.Linear(query_dim, 1, bias=False)

    def project_keys(self, keys: torch.Tensor) -> torch.Tensor:
        return self.key_proj(keys)  # (B, S, A)

    def score(self, query: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        hidden = torch.tanh(self.query_proj(query)[:, :, None] + keys[:, None])  # (B, T, S, A)
        return self.energy(hidden).squeeze(-1)  # (B, T, S)


class DotAttention(RNNAttention):
    """Luong dot: q . k (query and key sizes must match)."""

    def __init__(self, query_dim: int, key_dim: int, temperature: float = 1.0, dropout: float = 0.0) -> None:
        super().__init__(query_dim, key_dim, temperature, dropout)
        if query_dim != key_dim:
            raise ValueError(f"{type(self).__name__} needs query size ({query_dim}) == key size ({key_dim})")

    def score(self, query: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        return query @ keys.transpose(1, 2)  # (B, T, S)


class ScaledDotAttention(DotAttention):
    """q . k / sqrt(d)."""

    def score(self, query: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        return super().score(query, keys) / math.sqrt(query.size(-1))


class GeneralAttention(RNNAttention):
    """Luong general: q^T W k, with W k projected once per sentence."""

    def __init__(self, query_dim: int, key_dim: int, temperature: float = 1.0, dropout: float = 0.0) -> None:
        super().__init__(query_dim, key_dim, temperature, dropout)
        self.key_proj = nn.Linear(key_dim, query_dim, bias=False)

    def project_keys(self, keys: torch.Tensor) -> torch.Tensor:
        return self.key_proj(keys)  # (B, S, Dq)

    def score(self, query: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        return query @ keys.transpose(1, 2)  # (B, T, S)


class NoAttention(RNNAttention):
    """Plain seq2seq baseline: one fixed context, the mean of the encoder states over real tokens.

    Its reported weights are uniform over the real tokens (they are what the mean uses).
    """

    def forward(self, query: torch.Tensor, keys: torch.Tensor, values: torch.Tensor,
                mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        uniform = mask / mask.sum(-1, keepdim=True)  # (B, S)
        weights = uniform.to(values.dtype)[:, None].expand(-1, query.size(1), -1)  # (B, T, S)
        return weights @ values, weights


RNN_ATTENTION: dict[str, type[RNNAttention]] = {
    "additive": AdditiveAttention,
    "dot": DotAttention,
    "general": GeneralAttention,
    "scaled_dot": ScaledDotAttention,
    "none": NoAttention,
}


class SelfAttention(nn.Module):
    """Base of the transformer attention cores. They hold no parameters, so one instance serves all layers."""

    def __init__(self, temperature: float = 1.0, dropout: float = 0.0, window: int = 8, stride: int = 8) -> None:
        super().__init__()
        self.temperature = temperature
        self.dropout = dropout
        self.window = window
        self.stride = stride

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

    def step(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
             cache: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        k = torch.cat([cache["k"], k], dim=2)  # (B, h, t+1, d)
        v = torch.cat([cache["v"], v], dim=2)  # (B, h, t+1, d)
        pos = torch.arange(k.size(2), device=q.device)
        out, _ = self.forward(q, k, v, self.pattern(pos[-1:], pos))  # the cache holds no future keys
        return out, {"k": k, "v": v}


def _window(q_pos: torch.Tensor, k_pos: torch.Tensor, window: int) -> torch.Tensor:
    """(T, S) bool: True where a key lies within `window` positions of the query, on either side."""
    return (q_pos[:, None] - k_pos[None, :]).abs() <= window


def _with_padding(seen: torch.Tensor, keys: torch.Tensor | None) -> torch.Tensor:
    """The keys a query may see by position (`seen`) that are real (`keys`, broadcast against it); a query
    whose window holds no real key keeps its whole window."""
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
    """Local attention block by block, keeping no per-block tensor for the backward pass.

    The forward pass writes each block's output into one (B, h, T, d) tensor; the backward pass recomputes
    one block at a time (same random state, so the same dropout) and adds its gradients into place. Memory
    beyond the output and the gradients stays at one block's worth, as in the fused kernel.
    """

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
    """Each query sees the keys within `window` positions on either side, in time and memory linear in length.

    Queries are taken in blocks of `block` positions (at least the window); every key a query of a block may
    see lies within `window` positions of the block, so each block attends to that span only. `build_mask`
    keeps just the padding; the window and causality are applied per block. A padded query whose window holds
    no real key attends over its whole window (any finite value will do: padded positions are never read).
    """

    block = 64  # query positions per block; wider blocks mean fewer kernel calls and more masked-out scores

    def pattern(self, q_pos: torch.Tensor, k_pos: torch.Tensor) -> torch.Tensor | None:
        return _window(q_pos, k_pos, self.window)

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
        k = torch.cat([cache["k"], k], dim=2)  # (B, h, <= w + 1, d)
        v = torch.cat([cache["v"], v], dim=2)  # (B, h, <= w + 1, d)
        out, _ = FullAttention.forward(self, q, k, v)
        keep = max(k.size(2) - self.window, 0)
        return out, {"k": k[:, :, keep:], "v": v[:, :, keep:]}


class SparseAttention(FullAttention):
    """Fixed sparse pattern: the local window plus every key whose position is a multiple of `stride`."""

    def pattern(self, q_pos: torch.Tensor, k_pos: torch.Tensor) -> torch.Tensor | None:
        strided = (k_pos % self.stride == 0)[None, :]  # (1, S)
        return _window(q_pos, k_pos, self.window) | strided  # (T, S)


def _phi(x: torch.Tensor) -> torch.Tensor:
    """The positive feature map of linear attention."""
    return F.elu(x) + 1.0


class LinearAttention(SelfAttention):
    """Kernelised attention phi(q) (sum phi(k) v^T) / phi(q) . (sum phi(k)), phi = elu + 1, in O(n) memory.

    It has no softmax, so `temperature` and attention dropout do not apply; `need_weights` returns the
    equivalent explicit weights phi(q) phi(k)^T normalised over the keys.
    """

    def build_mask(self, length: int, key_mask: torch.Tensor | None, causal: bool,
                   device: torch.device) -> torch.Tensor | None:
        """Padding only, (B, 1, 1, T); causality is the cumulative form in `forward`."""
        return None if key_mask is None else key_mask[:, None, None, :]

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None = None,
                causal: bool = False, need_weights: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
        fq, fk = _phi(q), _phi(k)  # (B, h, T, d), (B, h, S, d)
        if mask is not None:
            fk = fk * mask.transpose(-2, -1).to(fk.dtype)  # padded keys contribute nothing
        if need_weights:
            scores = fq @ fk.transpose(-2, -1)  # (B, h, T, S)
            if causal:
                scores = scores.tril()
            weights = scores / scores.sum(-1, keepdim=True).clamp_min(_EPS)  # (B, h, T, S)
            return weights @ v, weights
        if causal:
            kv = torch.cumsum(fk[..., :, None] * v[..., None, :], dim=2)  # (B, h, T, d, dv)
            num = (fq[..., None, :] @ kv).squeeze(-2)  # (B, h, T, dv)
            den = (fq * fk.cumsum(dim=2)).sum(-1, keepdim=True)  # (B, h, T, 1)
        else:
            num = fq @ (fk.transpose(-2, -1) @ v)  # (B, h, T, dv)
            den = fq @ fk.sum(dim=2)[..., None]  # (B, h, T, 1)
        return num / den.clamp_min(_EPS), None

    def init_cache(self, batch: int, heads: int, head_dim: int, like: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"s": like.new_zeros(batch, heads, head_dim, head_dim),  # sum phi(k) v^T, (B, h, d, dv)
                "z": like.new_zeros(batch, heads, head_dim)}  # sum phi(k), (B, h, d)

    def step(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
             cache: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        fq, fk = _phi(q), _phi(k)  # (B, h, 1, d)
        s = cache["s"] + fk.transpose(-2, -1) @ v  # (B, h, d, dv)
        z = cache["z"] + fk.squeeze(2)  # (B, h, d)
        out = (fq @ s) / (fq @ z[..., None]).clamp_min(_EPS)  # (B, h, 1, dv)
        return out, {"s": s, "z": z}


SELF_ATTENTION: dict[str, type[SelfAttention]] = {
    "full": FullAttention,
    "local": LocalAttention,
    "sparse": SparseAttention,
    "linear": LinearAttention,
}
