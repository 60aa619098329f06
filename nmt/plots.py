"""Attention heatmaps and learning curves as PNG files (matplotlib, no display needed)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402


def attention_heatmap(weights: np.ndarray, src_labels: list[str], tgt_labels: list[str], path: Path,
                      title: str = "") -> None:
    """One cross-attention matrix, rows = target tokens, columns = source tokens."""
    rows, cols = weights.shape  # (T, S)
    fig, ax = plt.subplots(figsize=(max(4.0, 0.4 * cols + 2), max(3.0, 0.35 * rows + 1.5)))
    image = ax.imshow(weights, cmap="viridis", aspect="auto", vmin=0.0, vmax=1.0)
    ax.set_xticks(range(cols), labels=src_labels[:cols], rotation=90, fontsize=8)
    ax.set_yticks(range(rows), labels=tgt_labels[:rows], fontsize=8)
    ax.set_xlabel("source")
    ax.set_ylabel("output")
    if title:
        ax.set_title(title, fontsize=9)
    fig.colorbar(image, ax=ax, fraction=0.04)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
