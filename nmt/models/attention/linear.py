"""Linear (kernelised) self-attention: no softmax, O(n) memory, a running sum as its decoding cache."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from nmt.models.attention.base import SelfAttention

_EPS = 1e-6
CHUNK = 64  # causal positions per chunk; running sums across chunks


def _phi(x: torch.Tensor) -> torch.Tensor:
    return F.elu(x) + 1.0


def _causal(fq: torch.Tensor, fk: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Causal numerator and normaliser by chunks, never a (B, h, T, d, dv) tensor."""
    nums, dens = [], []
    state = norm = None  # sum phi(k) v^T (B, h, d, dv), sum phi(k) (B, h, d)
    length = fq.shape[2]
    for start in range(0, length, CHUNK):
        q, k, val = (x[:, :, start:start + CHUNK] for x in (fq, fk, v))  # (B, h, C, d), (B, h, C, d), (B, h, C, dv)
        scores = (q @ k.transpose(-2, -1)).tril()  # (B, h, C, C)
        num, den = scores @ val, scores.sum(-1, keepdim=True)  # (B, h, C, dv), (B, h, C, 1)
        if state is not None:
            num, den = num + q @ state, den + q @ norm[..., None]
        nums.append(num)
        dens.append(den)
        if start + CHUNK >= length:
            break
        chunk_state, chunk_norm = k.transpose(-2, -1) @ val, k.sum(2)  # (B, h, d, dv), (B, h, d)
        state = chunk_state if state is None else state + chunk_state
        norm = chunk_norm if norm is None else norm + chunk_norm
    return torch.cat(nums, 2), torch.cat(dens, 2)  # (B, h, T, dv), (B, h, T, 1)


class LinearAttention(SelfAttention):
    """phi(q) (sum phi(k) v^T) / phi(q) . (sum phi(k)), phi = elu + 1; no softmax, so no temperature or
    attention dropout."""

    def build_mask(self, length: int, key_mask: torch.Tensor | None, causal: bool,
                   device: torch.device) -> torch.Tensor | None:
        """Padding only, (B, 1, 1, T)."""
        return None if key_mask is None else key_mask[:, None, None, :]

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None = None,
                causal: bool = False, need_weights: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
        fq, fk = _phi(q), _phi(k)  # (B, h, T, d), (B, h, S, d)
        if mask is not None:
            fk = fk * mask.transpose(-2, -1).to(fk.dtype)
        if need_weights:
            scores = fq @ fk.transpose(-2, -1)  # (B, h, T, S)
            if causal:
                scores = scores.tril()
            weights = scores / scores.sum(-1, keepdim=True).clamp_min(_EPS)  # (B, h, T, S)
            return weights @ v, weights
        if causal:
            num, den = _causal(fq, fk, v)
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
