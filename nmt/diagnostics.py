"""Attention diagnostics: near-uniform or over-focused cross-attention rows, and sentences with many of them."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # Thresholds is importable without torch
    import torch

DIAG_SENTENCES, HEATMAPS = 200, 3  # nmt.compare's defaults: sentences diagnosed, heatmaps drawn


@dataclass(frozen=True)
class Thresholds:
    """When a row counts as over-focused or near-uniform, and when a sentence is flagged for it."""

    focused: float = 0.9  # over-focused: largest weight above this
    uniform: float = 0.9  # near-uniform: entropy above this share of log(n)
    max_focused_share: float = 0.95  # flag a sentence above this share of over-focused rows
    max_uniform_share: float = 0.5  # ... of near-uniform rows

    def __post_init__(self) -> None:
        for name in ("focused", "uniform", "max_focused_share", "max_uniform_share"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"attention threshold {name} must lie in [0, 1], got {value}")


def row_entropy(weights: torch.Tensor) -> torch.Tensor:
    """Entropy in nats of each attention row: (..., S) -> (...)."""
    p = weights.double().clamp_min(0.0)
    return -(p * p.clamp_min(1e-30).log()).sum(-1)


def row_classes(weights: torch.Tensor, thresholds: Thresholds | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Over-focused and near-uniform rows of (T, S) attention: two (T,) bool tensors."""
    thresholds = thresholds or Thresholds()
    cols = weights.shape[-1]
    focused = weights.max(dim=-1).values > thresholds.focused  # (T,)
    if cols < 2:  # log(1) = 0 would call every row near-uniform
        return focused, focused.new_zeros(focused.shape)
    uniform = row_entropy(weights) > thresholds.uniform * math.log(cols)  # (T,)
    return focused, uniform


def attention_stats(weights: torch.Tensor, thresholds: Thresholds | None = None,
                    per_row: bool = False) -> dict[str, Any]:
    """Summary of one sentence's cross-attention rows (T, S); with `per_row`, also each row's entropy and peak."""
    thresholds = thresholds or Thresholds()
    rows, cols = weights.shape  # (T, S)
    entropy = row_entropy(weights)  # (T,)
    peak = weights.max(dim=-1).values  # (T,)
    focused, uniform = row_classes(weights, thresholds)  # (T,) each
    stats: dict[str, Any] = {
        "rows": rows,
        "source_len": cols,
        "mean_entropy": float(entropy.mean()),
        "mean_norm_entropy": float((entropy / entropy.new_tensor(float(cols)).log()).mean()) if cols > 1 else 0.0,
        "mean_max_weight": float(peak.mean()),
        "focused_share": float(focused.double().mean()),
        "uniform_share": float(uniform.double().mean()),
    }
    if per_row:
        stats["row_entropy"] = [round(float(e), 4) for e in entropy]
        stats["row_max_weight"] = [round(float(p), 4) for p in peak]
    return stats


def flags(stats: dict[str, Any], thresholds: Thresholds | None = None) -> list[str]:
    """Reasons to doubt a translation: attention mostly near-uniform or over-focused."""
    thresholds = thresholds or Thresholds()
    out = []
    if stats["uniform_share"] > thresholds.max_uniform_share:
        out.append("near-uniform")
    if stats["rows"] > 2 and stats["focused_share"] > thresholds.max_focused_share:
        out.append("over-focused")
    return out


def summarize(per_sentence: list[dict[str, Any]], thresholds: Thresholds | None = None) -> dict[str, Any]:
    """Row-weighted means of `attention_stats` over many sentences, and the share of flagged sentences."""
    rows = sum(s["rows"] for s in per_sentence)
    if not rows:
        return {"sentences": len(per_sentence), "rows": 0}

    def mean(key: str) -> float:
        return sum(s[key] * s["rows"] for s in per_sentence) / rows

    keys = ("mean_entropy", "mean_norm_entropy", "mean_max_weight", "focused_share", "uniform_share")
    summary: dict[str, Any] = {"sentences": len(per_sentence), "rows": rows}
    summary.update({key: round(mean(key), 4) for key in keys})
    flagged = [s for s in per_sentence if flags(s, thresholds)]
    summary["flagged_share"] = round(len(flagged) / len(per_sentence), 4)
    summary["mean_uniform_entropy"] = round(sum(math.log(max(s["source_len"], 1)) * s["rows"]
                                                for s in per_sentence) / rows, 4)

    return summary
