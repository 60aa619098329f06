"""One sentence's cross-attention for the explorer: subwords, weights of every layer and head, diagnostics."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import nn

from nmt.data import collate
from nmt.decode import Ensemble
from nmt.diagnostics import Thresholds, attention_stats, flags, row_classes
from nmt.models.transformer import Transformer
from nmt.translator import Translator


def _rounded(weights: torch.Tensor) -> list:
    return np.round(weights.float().numpy(), 4).tolist()


def cross_attention_layers(model: Transformer, src: np.ndarray, tokens: list[int]) -> list[torch.Tensor]:
    """Each decoder layer's cross-attention (h, T, S) over `src` (ids, no EOS) while reading `tokens` and EOS,
    by one teacher-forced pass: the search keeps only the last layer's mean over heads."""
    captured: list[torch.Tensor] = []

    def ask(_module: nn.Module, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        return args, {**kwargs, "need_weights": True}

    def keep(_module: nn.Module, _args: tuple, _kwargs: dict, output: tuple) -> None:
        captured.append(output[1][0].float().cpu())  # (h, T, S)

    hooks = [hook for layer in model.decoder_layers
             for hook in (layer.cross_attn.register_forward_pre_hook(ask, with_kwargs=True),
                          layer.cross_attn.register_forward_hook(keep, with_kwargs=True))]
    device = next(model.parameters()).device
    try:
        batch = collate([(src, np.asarray(tokens, dtype=np.int64))], model.pad_id).to(device)
        with torch.inference_mode():  # the model is in eval mode: the search just ran
            model(batch.src, batch.src_mask, batch.tgt_in)
    finally:
        for hook in hooks:
            hook.remove()
    return captured


def _layers(translator: Translator, src: np.ndarray, tokens: list[int]) -> list[dict[str, Any]]:
    """Named (h, T, S) weights of every Transformer (ensemble members by number); none for a GRU."""
    model = translator.engine.model
    members = list(model.members) if isinstance(model, Ensemble) else [model]
    out = []
    for number, member in enumerate(members, 1):
        if not isinstance(member, Transformer):
            continue
        prefix = f"model {number} " if len(members) > 1 else ""
        for index, weights in enumerate(cross_attention_layers(member, src, tokens), 1):
            out.append({"name": f"{prefix}layer {index}", "heads": [_rounded(head) for head in weights]})
    return out


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
