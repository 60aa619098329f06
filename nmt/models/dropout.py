"""Dropout whose mask is cheap to draw on the CPU.

`torch.nn.Dropout` draws one Bernoulli sample per element, which on the CPU costs more than the rest of a
Transformer layer's elementwise work together. This module draws 16 random bits per element instead, four
elements from each 64-bit draw of torch's generator (so seeding and RNG state work as usual), drops an
element when its bits fall below round(p * 65536), and rescales by the exact keep rate. The mask is stored as
booleans for the backward pass. On other devices it is `torch.nn.functional.dropout`.
"""

from __future__ import annotations

import torch
from torch import nn

_LEVELS = 1 << 16  # values of the 16 random bits per element


def drop_mask(shape: torch.Size, p: float, device: torch.device) -> tuple[torch.Tensor, float]:
    """A boolean mask of `shape`, True where an element is dropped, and the rescaling of the kept ones.

    An element is dropped with probability round(p * 65536) / 65536, which the returned scale accounts for.
    """
    count = shape.numel()
    cut = round(p * _LEVELS)
    words = torch.empty((count + 3) // 4, dtype=torch.int64, device=device).random_(-(1 << 63), None)  # (n/4,)
    bits = words.view(torch.int16)[:count].view(shape)  # 16 uniform bits per element, as -32768..32767
    return bits < cut - _LEVELS // 2, _LEVELS / (_LEVELS - cut)


class _Dropout(torch.autograd.Function):
    """x with a fresh mask's elements zeroed and the rest scaled; the same mask in the backward pass."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, p: float) -> torch.Tensor:
        drop, scale = drop_mask(x.shape, p, x.device)
        ctx.save_for_backward(drop)
        ctx.scale = scale
        return torch.where(drop, 0.0, x).mul_(scale)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        (drop,) = ctx.saved_tensors
        return torch.where(drop, 0.0, grad).mul_(ctx.scale), None


def dropout(x: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    """Inverted dropout of `x` with probability `p` while training; the identity otherwise."""
    if not training or p <= 0.0:
        return x
    if x.device.type != "cpu" or p >= 1.0:
        return nn.functional.dropout(x, p, True)
    return _Dropout.apply(x, p)


class Dropout(nn.Module):
    """Drop-in for `torch.nn.Dropout` built on `dropout`."""

    def __init__(self, p: float = 0.5) -> None:
        super().__init__()
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"dropout probability must lie in [0, 1], got {p}")
        self.p = p

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return dropout(x, self.p, self.training)

    def extra_repr(self) -> str:
        return f"p={self.p}"
