"""Attention diagnostics: entropy and focus of attention rows (the design documents' health signals)."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Thresholds:
    """When a row counts as over-focused or near-uniform."""

    focused: float = 0.9  # a row whose largest weight exceeds this is over-focused
    uniform: float = 0.9  # a row whose entropy exceeds this share of log(n) is near-uniform


def row_entropy(weights: torch.Tensor) -> torch.Tensor:
    """Entropy in nats of each attention row: (..., S) -> (...)."""
    p = weights.double().clamp_min(0.0)
    return -(p * torch.log(p.clamp_min(1e-30))).sum(-1)


def attention_stats(weights: torch.Tensor, thresholds: Thresholds | None = None) -> dict[str, float]:
    """Summary of one sentence's cross-attention rows (T, S)."""
    thresholds = thresholds or Thresholds()
    rows, cols = weights.shape  # (T, S)
    entropy = row_entropy(weights)  # (T,)
    peak = weights.max(dim=-1).values  # (T,)
    max_entropy = torch.log(torch.tensor(float(cols), dtype=torch.float64)) if cols > 1 else torch.tensor(1.0)
    return {
        "rows": rows,
        "source_len": cols,
        "mean_entropy": float(entropy.mean()),
        "mean_norm_entropy": float((entropy / max_entropy).mean()) if cols > 1 else 0.0,
        "mean_max_weight": float(peak.mean()),
        "focused_share": float((peak > thresholds.focused).double().mean()),
        "uniform_share": float((entropy > thresholds.uniform * max_entropy).double().mean()) if cols > 1 else 0.0,
    }


def flags(stats: dict[str, float], max_uniform_share: float = 0.5, max_focused_share: float = 0.95) -> list[str]:
    """Reasons to doubt a translation: attention mostly near-uniform, or almost every row on a single token."""
    out = []
    if stats["uniform_share"] > max_uniform_share:
        out.append("near-uniform")
    if stats["rows"] > 2 and stats["focused_share"] > max_focused_share:
        out.append("over-focused")
    return out
