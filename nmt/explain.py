"""One sentence's cross-attention, explained: subwords, weights of every layer and head, diagnostics (what
`Translator.attention` returns and nmt-serve's /attention and explorer page show)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from nmt.diagnostics import Thresholds, attention_stats, flags, row_classes

if TYPE_CHECKING:
    from nmt.translator import Translator


def _rounded(weights: torch.Tensor) -> list:
    return np.round(weights.float().numpy(), 4).tolist()


def _layers(translator: Translator, src: np.ndarray, tokens: list[int]) -> list[dict[str, Any]]:
    """Named (h, T, S) weights of every layer and head the engine shows (ensemble members by number)."""
    return [{"name": name, "heads": [_rounded(head) for head in weights]}
            for name, weights in translator.engine.layer_attention(src, tokens)]


def explain(translator: Translator, line: str, thresholds: Thresholds) -> dict[str, Any]:
    """The best translation of `line` with its attention (rows: target subwords and EOS; columns: source
    subwords and EOS), every layer and head of a Transformer, and the attention diagnostics."""
    hyps = translator.search([line], return_attention=True)[0]
    if not hyps:
        return {"translation": "", "src": [], "tgt": [], "attention": [], "layers": [], "diagnostics": None}
    best = hyps[0]
    tok = translator.tokenizer
    src_ids = translator.encode([line])[0]
    weights = best.attention.float()  # (T, S)
    stats = attention_stats(weights, thresholds, per_row=True)
    focused, uniform = row_classes(weights, thresholds)  # (T,) each
    stats["flags"] = flags(stats, thresholds)
    stats["row_flags"] = [[name for name, on in (("over-focused", f), ("near-uniform", u)) if on]
                          for f, u in zip(focused.tolist(), uniform.tolist())]
    return {"translation": translator.detokenize(best), "score": round(best.score, 4),
            "src": tok.src_pieces(translator.normalize(line))[:len(src_ids)] + ["</s>"],
            "tgt": tok.tgt_id_pieces(best.tokens) + ["</s>"],
            "attention": _rounded(weights), "layers": _layers(translator, src_ids, list(best.tokens)),
            "diagnostics": stats}
