"""The fast paths of nmt.kernels against the plain PyTorch they stand for.

The loss and its gradient agree with `reference_loss` (and so with `F.cross_entropy`) to float64 rounding: the
two sum the V exponentials of a row, and the rows, in different orders, so they cannot agree bit for bit;
rtol 1e-12 is thousands of units in the last place, and eight orders of magnitude below what a wrong smoothing
share (epsilon / (V - 1) instead of epsilon / (V - 2)) moves the loss. Dropout draws its mask differently from
`torch.nn.Dropout`, so the two agree in distribution: the keep rate and the expected value.
"""

from __future__ import annotations

import os
import platform
from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from nmt.kernels import (
    Dropout,
    drop_mask,
    dropout,
    keep_freed_memory,
    label_smoothed_loss,
    real_targets,
    reference_loss,
)
from nmt.models.base import select_positions

FLOAT64 = {"rtol": 1e-12, "atol": 1e-12}
# The CPU unless NMT_TEST_DEVICE says otherwise: benchmarks/gpu_check.py runs this file on CUDA, where the loss and
# dropout make their GPU choices.
DEVICE = torch.device(os.environ.get("NMT_TEST_DEVICE", "cpu"))


def _logits_and_target(rows: int, vocab: int, dtype: torch.dtype = torch.float64) -> tuple[torch.Tensor, torch.Tensor]:
    """Wide logits (rows, vocab) and targets (rows,) with padding (id 0) on every fifth row."""
    torch.manual_seed(rows + vocab)
    logits = torch.randn(rows, vocab, dtype=dtype, device=DEVICE) * 4  # (N, V)
    target = torch.randint(1, vocab, (rows,), device=DEVICE)  # (N,)
    target[::5] = 0
    return logits, target


def _loss_and_gradient(loss_fn: Callable[..., tuple[torch.Tensor, ...]], logits: torch.Tensor, target: torch.Tensor,
                       eps: float, **kwargs: int) -> tuple[torch.Tensor, ...]:
    """The loss, NLL and token count of `loss_fn` on a copy of `logits`, and the loss's gradient there."""
    leaf = logits.clone().requires_grad_()
    loss, nll, count = loss_fn(leaf, target, eps, 0, **kwargs)
    loss.backward()
    return loss, nll, count, leaf.grad


@pytest.mark.parametrize("eps", [0.0, 0.1, 0.3])
@pytest.mark.parametrize("rows", [7, 256])  # several blocks of the CPU pass, and one
def test_loss_and_gradient_match_the_reference(eps: float, rows: int) -> None:
    logits, target = _logits_and_target(300, 1000)
    loss, nll, count, grad = _loss_and_gradient(label_smoothed_loss, logits, target, eps, rows=rows)
    ref_loss, ref_nll, ref_count, ref_grad = _loss_and_gradient(reference_loss, logits, target, eps)
    torch.testing.assert_close((loss, nll, grad), (ref_loss, ref_nll, ref_grad), **FLOAT64)
    assert count.item() == ref_count.item() == 240
    assert not nll.requires_grad


def test_loss_in_float32_matches_the_reference_to_float32_rounding() -> None:
    logits, target = _logits_and_target(120, 8000, torch.float32)
    fast = _loss_and_gradient(label_smoothed_loss, logits, target, 0.1)
    ref = _loss_and_gradient(reference_loss, logits, target, 0.1)
    torch.testing.assert_close(fast[:2], ref[:2])  # float32's default: rtol 1.3e-6
    torch.testing.assert_close(fast[3], ref[3], rtol=0.0, atol=1e-5)  # the reference's target sums to 1 +- 1e-6


def test_the_reference_is_torchs_label_smoothing_with_padding_taken_out() -> None:
    """F.cross_entropy's label_smoothing spreads epsilon over all V classes; moved off the padding class, it
    gives the reference's loss."""
    logits, target = _logits_and_target(60, 50)
    real, eps, vocab = target != 0, 0.1, 50
    x, t = logits[real], target[real]  # (N', V), (N',)
    torchs = (F.cross_entropy(x, t, label_smoothing=eps * vocab / (vocab - 2), reduction="sum")
              + eps / (vocab - 2) * (F.cross_entropy(x, t, reduction="sum")
                                     - F.cross_entropy(x, torch.zeros_like(t), reduction="sum")))
    torch.testing.assert_close(reference_loss(logits, target, eps, 0)[0], torchs, **FLOAT64)
    assert not torch.allclose(reference_loss(logits, target, eps, 0)[0],
                              F.cross_entropy(logits, target, ignore_index=0, label_smoothing=eps, reduction="sum"))


def test_label_smoothing_zero_is_cross_entropy() -> None:
    torch.manual_seed(0)
    logits = torch.randn(4, 7, 11, device=DEVICE)
    target = torch.randint(1, 11, (4, 7), device=DEVICE)
    target[0, 5:] = 0
    loss, nll, n = label_smoothed_loss(logits, target, 0.0, pad_id=0)
    ref = F.cross_entropy(logits.view(-1, 11), target.view(-1), ignore_index=0, reduction="sum")
    assert torch.allclose(loss, ref, atol=1e-5) and torch.allclose(nll, ref, atol=1e-5)
    assert n == int((target != 0).sum())


@pytest.mark.parametrize("eps", [0.0, 0.1])
def test_loss_blocks_change_nothing(eps: float) -> None:
    torch.manual_seed(5)
    logits = torch.randn(37, 19, dtype=torch.float64, device=DEVICE) * 4
    target = torch.randint(0, 19, (37,), device=DEVICE)
    results = [_loss_and_gradient(label_smoothed_loss, logits, target, eps, rows=rows) for rows in (1, 5, 37, 256)]
    for other in results[1:]:
        torch.testing.assert_close(results[0], other)
    with torch.no_grad():  # no gradient wanted: the same values
        loss, nll, _ = label_smoothed_loss(logits, target, eps, pad_id=0, rows=5)
    torch.testing.assert_close((loss, nll), results[0][:2])


@pytest.mark.parametrize("eps", [0.0, 0.3])
def test_loss_gradient_passes_gradcheck(eps: float) -> None:
    torch.manual_seed(2)
    leaf = torch.randn(8, 13, dtype=torch.float64, requires_grad=True)
    target = torch.tensor([1, 5, 0, 12, 3, 0, 7, 2])
    assert torch.autograd.gradcheck(lambda x: label_smoothed_loss(x, target, eps, 0)[0], (leaf,))


@pytest.mark.parametrize("p", [0.1, 0.3])
def test_dropout_keeps_as_many_and_as_much_as_torchs(p: float) -> None:
    """Over K draws of one vector x, each element is kept at rate 1 - p and averages to x, for both."""
    torch.manual_seed(6)
    draws, x = 2000, torch.randn(500, device=DEVICE)  # (n,)
    stacked = x.expand(draws, -1).contiguous()  # (K, n)
    spread = 5 * (p / (1 - p) / draws) ** 0.5  # 5 standard deviations of a mean over K draws, per unit of x
    for layer in (Dropout(p), nn.Dropout(p)):
        out = layer.train()(stacked)  # (K, n)
        kept = (out != 0).float()
        assert abs(kept.mean().item() - (1 - p)) < 5 * (p * (1 - p) / out.numel()) ** 0.5
        assert ((out.mean(0) - x).abs() <= spread * x.abs() + 1e-6).all()
        assert torch.allclose(out[out != 0], stacked[out != 0] / (1 - p), rtol=1e-4)


@pytest.mark.parametrize("p", [0.1, 0.2, 0.5])
def test_drop_rate_and_scale_keep_the_mean(p: float) -> None:
    torch.manual_seed(0)
    drop, scale = drop_mask(torch.Size([1000, 1001]), p, DEVICE)  # an odd count of elements
    rate = drop.float().mean().item()
    assert abs(rate - p) < 4 * (p * (1 - p) / drop.numel()) ** 0.5 + 1 / 65536
    assert scale == pytest.approx(1 / (1 - round(p * 65536) / 65536))
    out = dropout(torch.ones(1000, 1001, device=DEVICE), p, True)
    assert out.mean().item() == pytest.approx(1.0, abs=0.01)
    assert set(out.unique().tolist()) <= {0.0, torch.tensor(scale).item()}  # the scale in float32


def test_bits_are_independent_across_positions() -> None:
    torch.manual_seed(1)
    drop, _ = drop_mask(torch.Size([400_000]), 0.5, DEVICE)
    pairs = drop[:-1].float() * drop[1:].float()  # neighbours come from the same 64-bit draw
    assert pairs.mean().item() == pytest.approx(0.25, abs=0.005)
    by_lane = drop.view(-1, 4).float().mean(0)  # each of the four 16-bit lanes of a draw
    assert torch.allclose(by_lane, torch.full((4,), 0.5, device=DEVICE), atol=0.01)


def test_gradient_follows_the_forward_mask() -> None:
    torch.manual_seed(2)
    x = torch.randn(64, 33, device=DEVICE, requires_grad=True)
    out = dropout(x, 0.3, True)
    out.backward(torch.ones_like(out))
    kept = out != 0
    torch.testing.assert_close(x.grad, kept.float() * (out / x.detach()).max())
    x64 = torch.randn(6, 5, dtype=torch.float64, requires_grad=True)
    torch.manual_seed(3)
    assert torch.autograd.gradcheck(lambda t: (torch.manual_seed(3), dropout(t, 0.4, True))[1], (x64,))


def test_seeded_masks_repeat_and_eval_is_identity() -> None:
    layer = Dropout(0.25)
    x = torch.randn(10, 20, device=DEVICE)
    torch.manual_seed(4)
    first = layer(x)
    torch.manual_seed(4)
    assert torch.equal(layer(x), first)
    assert not torch.equal(layer(x), first)
    assert layer.eval()(x) is x
    assert dropout(x, 0.0, True) is x
    assert torch.equal(dropout(x, 1.0, True), torch.zeros_like(x))
    with pytest.raises(ValueError, match="dropout probability"):
        Dropout(1.5)


def test_real_targets_select_the_same_rows_as_the_hosts_positions() -> None:
    tgt_out = torch.tensor([[5, 6, 2, 0], [7, 2, 0, 0], [8, 9, 4, 2]])  # (B, T), 0 is padding
    positions = torch.tensor([0, 1, 2, 4, 5, 8, 9, 10, 11])  # (N,) as collate computes them
    keep, target = real_targets(tgt_out, positions, 0)
    assert keep.dtype == torch.bool and torch.equal(target, tgt_out.flatten()[positions])
    states = torch.randn(3, 4, 6)  # (B, T, d)
    assert torch.equal(select_positions(states, keep), select_positions(states, positions))
    off_cpu, _ = real_targets(tgt_out.to("meta"), positions.to("meta"), 0)  # no mask to count: the host's indices
    assert off_cpu.dtype == torch.long and off_cpu.shape == positions.shape


def test_freed_memory_is_kept_where_glibc_allocates() -> None:
    assert keep_freed_memory() is (platform.libc_ver()[0] == "glibc")
