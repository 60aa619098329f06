"""The CPU dropout: its drop rate, scaling, gradient, reproducibility and the identity outside training."""

from __future__ import annotations

import pytest
import torch

from nmt.models.dropout import Dropout, drop_mask, dropout


@pytest.mark.parametrize("p", [0.1, 0.2, 0.5])
def test_drop_rate_and_scale_keep_the_mean(p: float) -> None:
    torch.manual_seed(0)
    drop, scale = drop_mask(torch.Size([1000, 1001]), p, torch.device("cpu"))  # an odd count of elements
    rate = drop.float().mean().item()
    assert abs(rate - p) < 4 * (p * (1 - p) / drop.numel()) ** 0.5 + 1 / 65536
    assert scale == pytest.approx(1 / (1 - round(p * 65536) / 65536))
    out = dropout(torch.ones(1000, 1001), p, True)
    assert out.mean().item() == pytest.approx(1.0, abs=0.01)
    assert set(out.unique().tolist()) <= {0.0, torch.tensor(scale).item()}  # the scale in float32


def test_bits_are_independent_across_positions() -> None:
    torch.manual_seed(1)
    drop, _ = drop_mask(torch.Size([400_000]), 0.5, torch.device("cpu"))
    pairs = drop[:-1].float() * drop[1:].float()  # neighbours come from the same 64-bit draw
    assert pairs.mean().item() == pytest.approx(0.25, abs=0.005)
    by_lane = drop.view(-1, 4).float().mean(0)  # each of the four 16-bit lanes of a draw
    assert torch.allclose(by_lane, torch.full((4,), 0.5), atol=0.01)


def test_gradient_follows_the_forward_mask() -> None:
    torch.manual_seed(2)
    x = torch.randn(64, 33, requires_grad=True)
    out = dropout(x, 0.3, True)
    out.backward(torch.ones_like(out))
    kept = out != 0
    torch.testing.assert_close(x.grad, kept.float() * (out / x.detach()).max())
    x64 = torch.randn(6, 5, dtype=torch.float64, requires_grad=True)
    torch.manual_seed(3)
    assert torch.autograd.gradcheck(lambda t: (torch.manual_seed(3), dropout(t, 0.4, True))[1], (x64,))


def test_seeded_masks_repeat_and_eval_is_identity() -> None:
    layer = Dropout(0.25)
    x = torch.randn(10, 20)
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
