"""Label-smoothed cross entropy over target tokens, padding ignored.

The smoothed target puts 1 - epsilon on the reference and spreads epsilon uniformly over the other
non-padding classes, so epsilon = 0 is exactly cross-entropy. The output layer's logits are the largest
tensor of a translation model, so the loss is one autograd function that walks them once, in blocks of rows
small enough to stay in cache: each block's exponentials give its log-sum-exp and, when a gradient is
wanted, its softmax - target, written straight into the gradient buffer. The backward pass then only scales
that buffer; the composite of log_softmax, gather and select would read and write the full size many times.
Off the CPU (a GPU has no such cache, and a Python loop of small kernels only adds launches) all rows are one
block, and nothing reads a value back to the host: the token count stays a tensor.
"""

from __future__ import annotations

import torch

ROWS = 256  # rows of logits per block: 256 x a vocabulary of 8k in fp32 is 8 MB


class _SmoothedCrossEntropy(torch.autograd.Function):
    """Summed label-smoothed loss of logits (N, V) against target (N,); also returns the summed NLL."""

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
            rows = max(count, 1)  # one pass over all rows
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
    def backward(ctx, grad_loss: torch.Tensor, _grad_nll: torch.Tensor):
        (grad,) = ctx.saved_tensors  # (N, V), the gradient of the summed loss
        # The trainer's backward leaves grad_loss at 1 on the CPU, where checking saves a pass; elsewhere the
        # check would wait for the device, so the scaling is always done.
        if grad.device.type != "cpu" or not torch.equal(grad_loss, torch.ones_like(grad_loss)):
            grad = grad * grad_loss
        return grad.to(ctx.input_dtype), None, None, None, None


def label_smoothed_loss(logits: torch.Tensor, target: torch.Tensor, epsilon: float, pad_id: int,
                        rows: int = ROWS) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Summed smoothed loss, summed NLL (no gradient) and the number of real target tokens (a 0-d tensor).

    Callers divide by the token count to normalise per target token; `rows` is the block size of the pass
    over the logits on the CPU (it changes the speed, not the result).
    """
    flat_logits = logits.reshape(-1, logits.size(-1))  # (N, V)
    flat_target = target.reshape(-1)  # (N,)
    loss, nll = _SmoothedCrossEntropy.apply(flat_logits, flat_target, float(epsilon), pad_id, rows)
    return loss, nll, (flat_target != pad_id).sum()
