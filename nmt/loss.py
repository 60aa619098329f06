"""Label-smoothed cross entropy over target tokens, padding ignored.

The smoothed target puts 1 - epsilon on the reference and spreads epsilon uniformly over the other
non-padding classes, so epsilon = 0 is exactly cross-entropy. The loss is one autograd function whose
backward writes softmax - target into a single (N, V) buffer: the output layer is the largest tensor of
a translation model, and the composite of log_softmax, gather and select would allocate and fill that
size several times per step.
"""

from __future__ import annotations

import torch


class _SmoothedCrossEntropy(torch.autograd.Function):
    """Summed label-smoothed loss of logits (N, V) against target (N,); also returns the summed NLL."""

    @staticmethod
    def forward(ctx, logits: torch.Tensor, target: torch.Tensor, epsilon: float,
                pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
        scores = logits.to(torch.promote_types(logits.dtype, torch.float32))  # (N, V)
        keep = target != pad_id  # (N,)
        lse = torch.logsumexp(scores, dim=-1)  # (N,)
        picked = scores.gather(1, target[:, None]).squeeze(1)  # (N,)
        nll = torch.where(keep, lse - picked, 0.0)  # (N,)
        loss = nll
        vocab = scores.size(-1)
        if epsilon > 0.0:
            # -sum of log-probabilities over the classes other than the reference and padding.
            other = (vocab - 2) * lse - (scores.sum(-1) - scores[:, pad_id] - picked)  # (N,)
            loss = (1.0 - epsilon) * nll + epsilon / (vocab - 2) * torch.where(keep, other, 0.0)
        ctx.save_for_backward(logits, target, lse)
        ctx.epsilon, ctx.pad_id = epsilon, pad_id
        nll_sum = nll.sum()
        ctx.mark_non_differentiable(nll_sum)
        return loss.sum(), nll_sum

    @staticmethod
    def backward(ctx, grad_loss: torch.Tensor, _grad_nll: torch.Tensor):
        logits, target, lse = ctx.saved_tensors
        epsilon, pad_id = ctx.epsilon, ctx.pad_id
        grad = logits.to(lse.dtype).sub(lse[:, None]).exp_()  # (N, V) softmax
        index = target[:, None]  # (N, 1)
        if epsilon > 0.0:
            share = epsilon / (grad.size(-1) - 2)
            grad.sub_(share)
            grad[:, pad_id] += share
            grad.scatter_add_(1, index, grad.new_full(index.shape, -(1.0 - epsilon - share)))
        else:
            grad.scatter_add_(1, index, grad.new_full(index.shape, -1.0))
        grad.masked_fill_((target == pad_id)[:, None], 0.0)
        return grad.mul_(grad_loss).to(logits.dtype), None, None, None


def label_smoothed_loss(logits: torch.Tensor, target: torch.Tensor, epsilon: float,
                        pad_id: int) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Summed smoothed loss, summed NLL (no gradient) and the number of real target tokens.

    Callers divide by the token count to normalise per target token.
    """
    flat_logits = logits.reshape(-1, logits.size(-1))  # (N, V)
    flat_target = target.reshape(-1)  # (N,)
    loss, nll = _SmoothedCrossEntropy.apply(flat_logits, flat_target, float(epsilon), pad_id)
    return loss, nll, int((flat_target != pad_id).sum())
