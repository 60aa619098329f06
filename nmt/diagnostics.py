"""Attention diagnostics: cross-attention rows near uniform (unsure where to look) or on one source token (possible
over-fitting), and the sentences with many of them."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the functions take tensors, but importing Thresholds (the CLI's flags) needs no torch
    import torch

DIAG_SENTENCES, HEATMAPS = 200, 3  # a comparison's defaults (nmt.compare): test sentences diagnosed, drawn as heatmaps


@dataclass(frozen=True)
class Thresholds:
    """When a row counts as over-focused or near-uniform, and when a sentence is flagged for it."""

    focused: float = 0.9  # a row whose largest weight exceeds this is over-focused
    uniform: float = 0.9  # a row whose entropy exceeds this share of log(n) is near-uniform
    max_focused_share: float = 0.95  # a sentence with more over-focused rows than this share is flagged
    max_uniform_share: float = 0.5  # a sentence with more near-uniform rows than this share is flagged

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
    """Which rows of (T, S) attention are over-focused and which near-uniform: two (T,) bool tensors."""
    thresholds = thresholds or Thresholds()
    cols = weights.shape[-1]
    focused = weights.max(dim=-1).values > thresholds.focused  # (T,)
    if cols < 2:  # one source position: a zero-entropy row is not near-uniform (log(1) = 0 would say it is)
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
    """Reasons to doubt a translation: attention mostly near-uniform, or almost every row on a single token."""
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
                                                for s in per_sentence) / rows, 4)  # log(n): the ceiling
    return summary
