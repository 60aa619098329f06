"""The fast paths of a training step, each beside the plain PyTorch it stands for.

`label_smoothed_loss` computes what `reference_loss` does; `dropout` and `Dropout` drop as `torch.nn.Dropout`
does, with a mask that is cheaper to draw on the CPU; `real_targets` picks the positions the output layer runs
on; `keep_freed_memory` sets glibc's allocator. Each makes its device-specific choice itself, and
tests/test_kernels.py checks that fast and plain agree.
"""

from __future__ import annotations

import ctypes

import torch
import torch.nn.functional as F
from torch import nn

_M_TRIM_THRESHOLD, _M_MMAP_MAX = -1, -4  # mallopt parameters (glibc malloc.h)


def keep_freed_memory() -> bool:
    """Let glibc keep freed blocks for reuse instead of handing them back to the kernel; True if it took effect.

    A CPU training or search step allocates the same large buffers every time (logits and their gradient,
    over 100 MB each). glibc serves blocks that large with mmap and unmaps them when freed, so each step would
    fault and zero every page anew; with mmap off and no trimming they come from the heap and are reused. The
    heap does not shrink afterwards, which suits a training or translating process. Elsewhere than glibc it
    does nothing.
    """
    try:
        libc = ctypes.CDLL(None)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    return bool(mallopt(_M_MMAP_MAX, 0)) and bool(mallopt(_M_TRIM_THRESHOLD, 2**31 - 1))


def real_targets(tgt_out: torch.Tensor, positions: torch.Tensor, pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Where the real (non-padding) targets of `tgt_out` (B, T) are, as a model's `keep` takes it, and those
    targets (N,).

    On the CPU a mask says where; elsewhere `positions`, the flat indices (N,) computed on the host, do, since
    selecting by a mask waits for the device to count it.
    """
    if tgt_out.device.type == "cpu":
        keep = tgt_out != pad_id  # (B, T)
        return keep, tgt_out[keep]  # (B, T), (N,)
    return positions, tgt_out.flatten().index_select(0, positions)  # (N,), (N,)


_LEVELS = 1 << 16  # values of the 16 random bits per element


def drop_mask(shape: torch.Size, p: float, device: torch.device) -> tuple[torch.Tensor, float]:
    """A boolean mask of `shape`, True where an element is dropped, and the rescaling of the kept ones.

    Each element takes 16 bits of torch's generator (four per 64-bit draw, so seeding and RNG state work as
    usual) and is dropped when they fall below round(p * 65536): with probability round(p * 65536) / 65536,
    which the scale accounts for. `torch.nn.Dropout` draws a Bernoulli sample per element, which on the CPU
    costs more than the rest of a Transformer layer's elementwise work together.
    """
    count = shape.numel()
    cut = round(p * _LEVELS)
    words = torch.empty((count + 3) // 4, dtype=torch.int64, device=device).random_(-(1 << 63), None)  # (n/4,)
    bits = words.view(torch.int16)[:count].view(shape)  # 16 uniform bits per element, as -32768..32767
    return bits < cut - _LEVELS // 2, _LEVELS / (_LEVELS - cut)


class _Dropout(torch.autograd.Function):
    """x with a fresh mask's elements zeroed and the rest scaled; the same mask, kept as booleans, backward."""

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
    """Inverted dropout of `x` with probability `p` while training (the mask of `drop_mask` on the CPU,
    `torch.nn.functional.dropout` elsewhere); the identity otherwise."""
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
    """What `label_smoothed_loss` computes, in plain PyTorch: cross entropy of logits (N, V) against the
    smoothed target distribution of target (N,), which puts 1 - epsilon on the reference and spreads epsilon
    over the other classes but padding (`F.cross_entropy`'s `label_smoothing` would give padding and the
    reference a share too); rows whose target is padding left out."""
    real = target != pad_id  # (N,)
    smoothed = torch.full_like(logits[real], epsilon / (logits.size(-1) - 2))  # (N', V)
    smoothed[:, pad_id] = 0.0
    smoothed.scatter_(1, target[real, None], 1.0 - epsilon)
    loss = F.cross_entropy(logits[real], smoothed, reduction="sum")
    nll = F.cross_entropy(logits, target, ignore_index=pad_id, reduction="sum")
    return loss, nll.detach(), real.sum()


ROWS = 256  # rows of logits per block on the CPU: 256 x a vocabulary of 8k in fp32 is 8 MB


class _SmoothedCrossEntropy(torch.autograd.Function):
    """Summed label-smoothed loss of logits (N, V) against target (N,); also returns the summed NLL.

    The logits are the largest tensor of a translation model, so this walks them once, in blocks of rows small
    enough to stay in cache: each block's exponentials give its log-sum-exp and, when a gradient is wanted,
    its softmax - target, written straight into the gradient buffer, which backward only scales. Off the CPU
    (no such cache; a loop of small kernels only adds launches) all rows are one block, and nothing is read
    back to the host.
    """

    @staticmethod
    def forward(ctx, logits: torch.Tensor, target: torch.Tensor, epsilon: float, pad_id: int,
                rows: int) -> tuple[torch.Tensor, torch.Tensor]:
        dtype = torch.promote_types(logits.dtype, torch.float32)
        count, vocab = logits.shape
        real = target != pad_id  # (N,)
        keep = real.to(dtype)  # (N,)
        share = epsilon / (vocab - 2) if epsilon > 0.0 else 0.0  # smoothed mass of each non-reference class
        want_grad = ctx.needs_input_grad[0]
        grad = torch.empty(count, vocab, dtype=dtype, device=logits.device) if want_grad else None  # (N, V)
        lse = torch.empty(count, dtype=dtype, device=logits.device)  # (N,)
        total = torch.empty(count, dtype=dtype, device=logits.device)  # (N,) sum of the logits of a row
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
        nll = torch.where(real, lse - picked, 0.0)  # (N,) no NaN from a padding row's non-finite logits
        loss = nll
        if share:
            # -sum of log-probabilities over the classes other than the reference and padding.
            other = (vocab - 2) * lse - (total - logits[:, pad_id].to(dtype) - picked)  # (N,)
            loss = (1.0 - epsilon) * nll + share * torch.where(real, other, 0.0)
        if grad is not None:
            if share:  # padding is not a smoothing class: its column keeps the plain softmax
                grad[:, pad_id] += share * keep
            grad.scatter_add_(1, index, (-(1.0 - epsilon - share) * keep)[:, None])
            ctx.save_for_backward(grad)
        ctx.input_dtype = logits.dtype
        nll_sum = nll.sum()
        ctx.mark_non_differentiable(nll_sum)
        return loss.sum(), nll_sum

    @staticmethod
    def backward(ctx, grad_loss: torch.Tensor, _grad_nll: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        (grad,) = ctx.saved_tensors  # (N, V), the gradient of the summed loss
        # The trainer leaves grad_loss at 1 on the CPU, where checking saves a pass; elsewhere the check would
        # wait for the device, so the scaling is always done.
        if grad.device.type != "cpu" or not torch.equal(grad_loss, torch.ones_like(grad_loss)):
            grad = grad * grad_loss
        return grad.to(ctx.input_dtype), None, None, None, None


def label_smoothed_loss(logits: torch.Tensor, target: torch.Tensor, epsilon: float, pad_id: int,
                        rows: int = ROWS) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Summed label-smoothed loss, summed NLL (no gradient) and the number of real target tokens (a 0-d tensor)
    of logits (..., V) against target (...), as `reference_loss` defines them.

    Callers divide by the token count to normalise per target token; `rows` is the block size of the pass
    over the logits on the CPU (it changes the speed, not the result).
    """
    flat_logits = logits.reshape(-1, logits.size(-1))  # (N, V)
    flat_target = target.reshape(-1)  # (N,)
    loss, nll = _SmoothedCrossEntropy.apply(flat_logits, flat_target, float(epsilon), pad_id, rows)
    return loss, nll, (flat_target != pad_id).sum()
