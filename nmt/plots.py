"""Attention heatmaps and learning curves as PNG files (matplotlib, no display needed)."""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
matplotlib.rcParams["text.parse_math"] = False  # model output and test text are plain text: "$x$" stays as is
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.axes import Axes  # noqa: E402
from matplotlib.image import AxesImage  # noqa: E402

from nmt.fileio import atomic_output  # noqa: E402


@dataclass
class AttentionPanel:
    """One cross-attention matrix with its labels, for a grid of runs."""

    weights: np.ndarray  # (T, S)
    src_labels: list[str]
    tgt_labels: list[str]
    title: str = ""


@dataclass
class Curve:
    """One run's validation metric over training."""

    name: str
    steps: list[int]
    minutes: list[float]
    values: list[float]


def _draw_attention(ax: Axes, panel: AttentionPanel) -> AxesImage:
    rows, cols = panel.weights.shape  # (T, S)
    image = ax.imshow(panel.weights, cmap="viridis", aspect="auto", vmin=0.0, vmax=1.0)
    ax.set_xticks(range(cols), labels=panel.src_labels[:cols], rotation=90, fontsize=8)
    ax.set_yticks(range(rows), labels=panel.tgt_labels[:rows], fontsize=8)
    ax.set_xlabel("source")
    ax.set_ylabel("output")
    if panel.title:
        ax.set_title(panel.title, fontsize=9)
    return image


def _save(fig: plt.Figure, path: Path) -> None:
    """Write the figure as a PNG atomically (a failure leaves the previous file) and close it."""
    try:
        with warnings.catch_warnings(), atomic_output(path, "wb") as handle:
            warnings.filterwarnings("ignore", message="Glyph .* missing from font")  # drawn as a box instead
            fig.savefig(handle, dpi=100, format="png")
    finally:
        plt.close(fig)


def attention_heatmap(weights: np.ndarray, src_labels: list[str], tgt_labels: list[str], path: Path,
                      title: str = "") -> None:
    """One cross-attention matrix, rows = target tokens, columns = source tokens."""
    rows, cols = weights.shape  # (T, S)
    fig, ax = plt.subplots(figsize=(max(4.0, 0.4 * cols + 2), max(3.0, 0.35 * rows + 1.5)))
    image = _draw_attention(ax, AttentionPanel(weights, src_labels, tgt_labels, title))
    fig.colorbar(image, ax=ax, fraction=0.04)
    fig.tight_layout()
    _save(fig, path)


def attention_grid(panels: list[AttentionPanel], path: Path, title: str = "", columns: int = 4) -> None:
    """Several cross-attention matrices side by side (one panel per run), sharing one colour scale."""
    columns = max(1, min(columns, len(panels)))
    rows = math.ceil(len(panels) / columns)
    cell_w = max(3.5, 0.35 * max(p.weights.shape[1] for p in panels) + 2.0)
    cell_h = max(3.0, 0.3 * max(p.weights.shape[0] for p in panels) + 2.0)
    fig, axes = plt.subplots(rows, columns, figsize=(cell_w * columns + 1.0, cell_h * rows + 0.6), squeeze=False,
                             layout="constrained")
    images = [_draw_attention(ax, panel) for ax, panel in zip(axes.flat, panels)]
    for ax in axes.flat[len(panels):]:
        ax.axis("off")
    if title:
        fig.suptitle(title, fontsize=10)
    fig.colorbar(images[0], ax=axes, fraction=0.02, label="attention weight")
    _save(fig, path)


def learning_curves(curves: list[Curve], path: Path, metric: str = "validation BLEU") -> None:
    """Two panels: `metric` against update step and against wall-clock training minutes, one line per run."""
    fig, (by_step, by_time) = plt.subplots(1, 2, figsize=(14, 4.5), layout="constrained")
    for curve in curves:
        by_step.plot(curve.steps, curve.values, marker=".", label=curve.name)
        by_time.plot(curve.minutes, curve.values, marker=".", label=curve.name)
    by_step.set_xlabel("step")
    by_time.set_xlabel("training time (minutes)")
    for ax in (by_step, by_time):
        ax.set_ylabel(metric)
        ax.grid(alpha=0.3)
    if curves:
        fig.legend(*by_step.get_legend_handles_labels(), loc="outside right center", fontsize=8)
    fig.suptitle(f"{metric} during training")
    _save(fig, path)


def run_curves(runs: list[tuple[str, list[dict]]], path: Path) -> None:
    """The learning curve of one or more runs from their metrics.jsonl records: training and validation loss
    (both the cross-entropy of the reference, without label smoothing) and validation BLEU against updates, one
    colour per run."""
    fig, (losses, bleu) = plt.subplots(1, 2, figsize=(12, 4.5), layout="constrained")
    for number, (name, records) in enumerate(runs):
        colour = f"C{number % 10}"
        train = [r for r in records if r.get("type") == "train" and "nll" in r]
        valid = [r for r in records if r.get("type") == "valid" and "loss" in r]
        scored = [r for r in valid if "bleu" in r]
        losses.plot([r["step"] for r in train], [r["nll"] for r in train], color=colour, alpha=0.6,
                    label=f"{name}: training")
        losses.plot([r["step"] for r in valid], [r["loss"] for r in valid], color=colour, marker="o",
                    linestyle="--", label=f"{name}: validation")
        bleu.plot([r["step"] for r in scored], [r["bleu"] for r in scored], color=colour, marker="o", label=name)
    losses.set_ylabel("loss (cross-entropy per target subword)")
    bleu.set_ylabel("validation BLEU (greedy)")
    for ax in (losses, bleu):
        ax.set_xlabel("update")
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8)
    fig.suptitle(", ".join(name for name, _ in runs) if len(runs) < 4 else f"{len(runs)} runs")
    _save(fig, path)
