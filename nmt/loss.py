"""Label-smoothed cross entropy over target tokens, padding ignored."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def label_smoothed_loss(logits: torch.Tensor, target: torch.Tensor, epsilon: float,
                        pad_id: int) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Summed smoothed loss, summed NLL and the number of real target tokens.

    The smoothed target puts 1 - epsilon on the reference and spreads epsilon uniformly over the
    other non-padding classes, so epsilon = 0 is exactly cross-entropy. Callers divide by the token
    count to normalise per target token.
    """
    logits = logits.reshape(-1, logits.size(-1)).float()  # (N, V)
    target = target.reshape(-1)  # (N,)
    keep = target != pad_id  # (N,)
    lprobs = F.log_softmax(logits, dim=-1)  # (N, V)
    nll = -lprobs.gather(1, target.unsqueeze(1)).squeeze(1)  # (N,)
    nll = nll.masked_fill(~keep, 0.0).sum()
    n_tokens = int(keep.sum())
    if epsilon == 0.0:
        return nll, nll.detach(), n_tokens
    vocab = lprobs.size(-1)
    # Mass over all non-pad classes except the reference: sum(lprobs) - pad column - reference.
    other = -(lprobs.sum(-1) - lprobs[:, pad_id])  # (N,)
    other = other.masked_fill(~keep, 0.0).sum() - nll
    loss = (1.0 - epsilon) * nll + epsilon / (vocab - 2) * other
    return loss, nll.detach(), n_tokens
