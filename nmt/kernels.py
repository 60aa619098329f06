"""The fast paths of a training step, each beside the plain PyTorch it stands for."""

from __future__ import annotations

import ctypes

import torch
import torch.nn.functional as F
from torch import nn

_M_TRIM_THRESHOLD, _M_MMAP_MAX = -1, -4  # mallopt parameters (glibc malloc.h)


def keep_freed_memory() -> bool:
    """Let glibc keep freed large blocks for reuse instead of unmapping them; True if it took effect."""
    try:
        libc = ctypes.CDLL(None)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    return bool(mallopt(_M_MMAP_MAX, 0)) and bool(mallopt(_M_TRIM_THRESHOLD, 2**31 - 1))


def real_targets(tgt_out: torch.Tensor, positions: torch.Tensor, pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A model's `keep` for the real targets of `tgt_out` (B, T), and those targets (N,): a mask on the CPU,
    `positions` elsewhere (no device wait)."""
    if tgt_out.device.type == "cpu":
        keep = tgt_out != pad_id  # (B, T)
        return keep, tgt_out[keep]  # (B, T), (N,)
    return positions, tgt_out.flatten().index_select(0, positions)  # (N,), (N,)


_LEVELS = 1 << 16


def drop_mask(shape: torch.Size, p: float, device: torch.device) -> tuple[torch.Tensor, float]:
    """A mask of `shape`, True where dropped, and the kept ones' scale, from 16 random bits per element."""
    count = shape.numel()
    cut = round(p * _LEVELS)
    words = torch.empty((count + 3) // 4, dtype=torch.int64, device=device).random_(-(1 << 63), None)  # (n/4,)
    bits = words.view(torch.int16)[:count].view(shape)  # -32768..32767
    return bits < cut - _LEVELS // 2, _LEVELS / (_LEVELS - cut)


class _Dropout(torch.autograd.Function):
    """Dropout whose backward reuses the boolean mask."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, p: float) -> torch.Tensor:
        drop, scale = drop_mask(x.shape, p, x.device)
        ctx.save_for_backward(drop)
        ctx.scale = scale
        return torch.where(drop, 0.0, x).mul_(scale)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        (drop,) = ctx.saved_tensors
        return torch.where(drop, 0.0, grad).mul_(ctx.scale), None


def dropout(x: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    """Inverted dropout with probability `p` while training: `drop_mask` on the CPU, `F.dropout` elsewhere."""
    if not training or p <= 0.0:
        return x
    if x.device.type != "cpu" or p >= 1.0:
        return F.dropout(x, p, True)
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


def reference_loss(logits: torch.Tensor, target: torch.Tensor, epsilon: float,
                   pad_id: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """`label_smoothed_loss` in plain PyTorch: epsilon spread over classes other than the reference and padding."""
    real = target != pad_id  # (N,)
    smoothed = torch.full_like(logits[real], epsilon / (logits.size(-1) - 2))  # (N', V)
    smoothed[:, pad_id] = 0.0
    smoothed.scatter_(1, target[real, None], 1.0 - epsilon)
    loss = F.cross_entropy(logits[real], smoothed, reduction="sum")
    nll = F.cross_entropy(logits, target, ignore_index=pad_id, reduction="sum")
    return loss, nll.detach(), real.sum()


ROWS = 256  # rows of logits per block on the CPU, to stay in cache


class _SmoothedCrossEntropy(torch.autograd.Function):
    """Summed label-smoothed loss and NLL of logits (N, V) against target (N,), reading the logits once in cached
    blocks and writing the gradient in place."""

    @staticmethod
    def forward(ctx, logits: torch.Tensor, target: torch.Tensor, epsilon: float, pad_id: int,
                rows: int) -> tuple[torch.Tensor, torch.Tensor]:
        dtype = torch.promote_types(logits.dtype, torch.float32)
        count, vocab = logits.shape
        real = target != pad_id  # (N,)
        keep = real.to(dtype)  # (N,)
        share = epsilon / (vocab - 2) if epsilon > 0.0 else 0.0  # per non-reference class
        want_grad = ctx.needs_input_grad[0]
        grad = torch.empty(count, vocab, dtype=dtype, device=logits.device) if want_grad else None  # (N, V)
        lse = torch.empty(count, dtype=dtype, device=logits.device)  # (N,)
        total = torch.empty(count, dtype=dtype, device=logits.device)  # (N,) row sums of the logits
        if logits.device.type != "cpu":
            rows = max(count, 1)
        for start in range(0, count, rows):
            block = logits[start:start + rows].to(dtype)  # (R, V)
            top = block.amax(-1, keepdim=True)  # (R, 1)
            exps = grad[start:start + rows] if grad is not None else torch.empty_like(block)  # (R, V)
            torch.sub(block, top, out=exps).exp_()
            sums = exps.sum(-1)  # (R,)
            lse[start:start + rows] = top[:, 0] + sums.log()
            if share:
                total[start:start + rows] = block.sum(-1)
            if grad is not None:  # softmax - smoothed target; padding rows zeroed
                weight = keep[start:start + rows]  # (R,)
                exps.mul_((weight / sums)[:, None])
                if share:
                    exps.sub_((share * weight)[:, None])
        index = target[:, None]  # (N, 1)
        picked = logits.gather(1, index).squeeze(1).to(dtype)  # (N,)
        nll = torch.where(real, lse - picked, 0.0)  # (N,) no NaN from padding rows
        loss = nll
        if share:
            other = (vocab - 2) * lse - (total - logits[:, pad_id].to(dtype) - picked)  # (N,)
            loss = (1.0 - epsilon) * nll + share * torch.where(real, other, 0.0)
        if grad is not None:
            if share:  # padding is not a smoothing class
                grad[:, pad_id] += share * keep
            grad.scatter_add_(1, index, (-(1.0 - epsilon - share) * keep)[:, None])
            ctx.save_for_backward(grad)
        ctx.input_dtype = logits.dtype
        nll_sum = nll.sum()
        ctx.mark_non_differentiable(nll_sum)
        return loss.sum(), nll_sum

    @staticmethod
    def backward(ctx, grad_loss: torch.Tensor, _grad_nll: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        (grad,) = ctx.saved_tensors  # (N, V)
        # grad_loss is 1 in training; not checked on a GPU, where the check would wait for the device
        if grad.device.type != "cpu" or not torch.equal(grad_loss, torch.ones_like(grad_loss)):
            grad = grad * grad_loss
        return grad.to(ctx.input_dtype), None, None, None, None


def label_smoothed_loss(logits: torch.Tensor, target: torch.Tensor, epsilon: float, pad_id: int,
                        rows: int = ROWS) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Summed label-smoothed loss, summed NLL (no gradient) and real-token count of logits (..., V) against
    target (...)."""

    flat_logits = logits.reshape(-1, logits.size(-1))  # (N, V)
    flat_target = target.reshape(-1)  # (N,)
    loss, nll = _SmoothedCrossEntropy.apply(flat_logits, flat_target, float(epsilon), pad_id, rows)
    return loss, nll, (flat_target != pad_id).sum()
