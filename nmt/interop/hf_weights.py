"""The weight map between nmt's Transformer and transformers' Marian, Pegasus and Blenderbot classes.

Their sinusoids put the sines in the first half of the channels, ours interleaves them: reordering the channels of
every tensor on the residual stream (`channel_order`) maps one layout onto the other exactly.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch

from nmt.config import ModelConfig
from nmt.errors import ExportError
from nmt.models.transformer import Transformer

# The logit of a padding row added to an imported vocabulary whose pad token is also its decoder start (OPUS-MT):
# its probability is exactly 0 in float32, so every other token's is as it was, and the loss stays finite.
SUPPRESSED_LOGIT = -1e4
CLASSES = {"marian": "MarianMTModel", "pegasus": "PegasusForConditionalGeneration",
           "blenderbot": "BlenderbotForConditionalGeneration"}


def import_transformers() -> Any:
    """The transformers module, or ExportError saying how to install it."""
    try:
        import transformers
    except ImportError:
        raise ExportError("transformers is not installed; install the hf extra: pip install 'nmt[hf]'") from None
    return transformers


@contextlib.contextmanager
def quiet(transformers: Any) -> Iterator[None]:
    """transformers' progress bars and warnings off inside the block: nmt reports problems in one line."""
    logs = transformers.utils.logging
    bars, verbosity = logs.is_progress_bar_enabled(), logs.get_verbosity()
    logs.disable_progress_bar()
    logs.set_verbosity_error()
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Recommended: pip install sacremoses")
            yield
    finally:
        logs.set_verbosity(verbosity)
        if bars:
            logs.enable_progress_bar()


def channel_order(d: int) -> torch.Tensor:
    """Our channel for each of Marian's and Pegasus's: our sines (even channels), then our cosines."""
    return torch.cat([torch.arange(0, d, 2), torch.arange(1, d, 2)])


def hf_kind(cfg: ModelConfig) -> str:
    """The transformers model type that holds a model of these settings, or ExportError saying why none does."""
    if cfg.arch != "transformer":
        raise ExportError(f"a {cfg.arch} model cannot be exported to Hugging Face: transformers has no stock class "
                          "for a GRU encoder-decoder with attention (only Transformer checkpoints can be exported)")
    if cfg.self_attention != "full":
        raise ExportError(f"self-attention '{cfg.self_attention}' has no equivalent in transformers' stock "
                          "encoder-decoders (only 'full' can be exported)")
    if cfg.pre_norm:
        return "pegasus" if cfg.positions == "sinusoidal" else "blenderbot"
    if cfg.positions == "learned":
        raise ExportError("a post-norm Transformer with learned positions has no stock class in transformers "
                          "(MarianMTModel's positions are sinusoidal; the pre-norm classes do not fit)")
    return "marian"


@dataclass(frozen=True)
class _Tensor:
    """One transformers tensor and where it lies in ours."""

    ours: str  # our state-dict key
    hf: str  # transformers' key
    axis: int | None  # the axis along the residual stream's channels (None: not on the residual stream)
    part: int = 0  # which of `parts` equal blocks of rows of ours it is (fused projections)
    parts: int = 1
    query: bool = False  # a query projection (an attention temperature is folded into it)


def layer_tensors(cfg: ModelConfig) -> list[_Tensor]:
    """Every transformers tensor of the layers and norms (embeddings and the output layer are `_vocabulary_keys`)."""
    out: list[_Tensor] = []

    def linear(ours: str, hf: str, reads: bool, parts: int = 1, part: int = 0, query: bool = False) -> None:
        # (out, in): the residual stream is a reading projection's columns, a writing one's rows (and bias)
        out.append(_Tensor(f"{ours}.weight", f"{hf}.weight", 1 if reads else 0, part, parts, query))
        out.append(_Tensor(f"{ours}.bias", f"{hf}.bias", None if reads else 0, part, parts, query))

    def norm(ours: str, hf: str) -> None:
        out.extend(_Tensor(f"{ours}.{name}", f"{hf}.{name}", 0) for name in ("weight", "bias"))

    def feed_forward(ours: str, hf: str, norm_index: int) -> None:
        linear(f"{ours}.ffn.0", f"{hf}.fc1", True)
        linear(f"{ours}.ffn.2", f"{hf}.fc2", False)
        norm(f"{ours}.norms.{norm_index}", f"{hf}.final_layer_norm")

    def self_attention(ours: str, hf: str) -> None:
        for i, name in enumerate("qkv"):
            linear(f"{ours}.self_attn.qkv", f"{hf}.self_attn.{name}_proj", True, 3, i, query=i == 0)
        linear(f"{ours}.self_attn.out", f"{hf}.self_attn.out_proj", False)
        norm(f"{ours}.norms.0", f"{hf}.self_attn_layer_norm")

    for i in range(cfg.encoder_layers):
        self_attention(f"encoder_layers.{i}", f"model.encoder.layers.{i}")
        feed_forward(f"encoder_layers.{i}", f"model.encoder.layers.{i}", 1)
    for i in range(cfg.decoder_layers):
        ours, hf = f"decoder_layers.{i}", f"model.decoder.layers.{i}"
        self_attention(ours, hf)
        linear(f"{ours}.cross_attn.q", f"{hf}.encoder_attn.q_proj", True, query=True)
        for j, name in enumerate("kv"):
            linear(f"{ours}.cross_attn.kv", f"{hf}.encoder_attn.{name}_proj", True, 2, j)
        linear(f"{ours}.cross_attn.out", f"{hf}.encoder_attn.out_proj", False)
        norm(f"{ours}.norms.1", f"{hf}.encoder_attn_layer_norm")
        feed_forward(ours, hf, 2)
    if cfg.pre_norm:
        norm("encoder_norm", "model.encoder.layer_norm")
        norm("decoder_norm", "model.decoder.layer_norm")
    if cfg.positions == "learned":
        out.append(_Tensor("src_embed.learned.weight", "model.encoder.embed_positions.weight", 1))
        out.append(_Tensor("tgt_embed.learned.weight", "model.decoder.embed_positions.weight", 1))
    return out


def _vocabulary_keys(kind: str, tied: bool) -> dict[str, list[str]]:
    """Our source embedding, target embedding and output layer -> the transformers keys holding each."""
    if tied:
        shared = ["model.shared.weight", "model.encoder.embed_tokens.weight", "model.decoder.embed_tokens.weight",
                  "lm_head.weight"]
        return {"src_embed.tokens.weight": shared}
    # Pegasus and Blenderbot keep a shared embedding even untied: the source's
    source = ["model.encoder.embed_tokens.weight"] + ([] if kind == "marian" else ["model.shared.weight"])
    return {"src_embed.tokens.weight": source, "tgt_embed.tokens.weight": ["model.decoder.embed_tokens.weight"],
            "output.weight": ["lm_head.weight"]}


def _on_channels(tensor: torch.Tensor, axis: int | None, order: torch.Tensor) -> torch.Tensor:
    return tensor if axis is None else tensor.index_select(axis, order)


def to_hf_weights(model: Transformer, cfg: ModelConfig, kind: str) -> dict[str, torch.Tensor]:
    """Our weights under transformers' names and in its channel layout."""
    state = {key: value.detach().float().cpu() for key, value in model.state_dict().items()}
    d = cfg.d_model
    order = channel_order(d) if kind in ("marian", "pegasus") else torch.arange(d)
    out = {}
    for t in layer_tensors(cfg):
        value = state[t.ours]
        rows = value.size(0) // t.parts
        value = value[t.part * rows:(t.part + 1) * rows]
        if t.query:  # softmax(q k / (sqrt(dh) t)) == softmax((q / t) k / sqrt(dh))
            value = value / cfg.temperature
        out[t.hf] = _on_channels(value, t.axis, order).contiguous()
    tied = cfg.tie_embeddings
    for ours, names in _vocabulary_keys(kind, tied).items():
        for name in names:
            out[name] = state[ours].index_select(1, order).contiguous()
    vocab_out = state["output.weight"].size(0)
    out["final_logits_bias"] = state.get("output.bias", torch.zeros(vocab_out))[None].clone()  # (1, V)
    return out


def from_hf_weights(hf: dict[str, torch.Tensor], cfg: ModelConfig, kind: str, src_rows: list[int | None],
                    tgt_rows: list[int | None]) -> dict[str, torch.Tensor]:
    """Our state dict from transformers' tensors; our row i of the source (target) vocabulary is the folder's row
    `src_rows[i]` (`tgt_rows[i]`), None for the added padding row."""
    d = cfg.d_model
    inverse = torch.argsort(channel_order(d)) if kind in ("marian", "pegasus") else torch.arange(d)
    blocks: dict[str, list[torch.Tensor | None]] = {}
    for t in layer_tensors(cfg):
        blocks.setdefault(t.ours, [None] * t.parts)[t.part] = _on_channels(hf[t.hf].float(), t.axis, inverse)
    out = {key: torch.cat(parts).contiguous() for key, parts in blocks.items()}

    def rows(matrix: torch.Tensor, picks: list[int | None]) -> torch.Tensor:
        added = torch.cat([matrix, matrix.new_zeros(1, *matrix.shape[1:])])  # the last row: the added padding row
        index = torch.tensor([len(matrix) if p is None else p for p in picks])
        return added.index_select(0, index).contiguous()

    source = hf["model.encoder.embed_tokens.weight"].float().index_select(1, inverse)
    target = hf["model.decoder.embed_tokens.weight"].float().index_select(1, inverse)
    output = hf["lm_head.weight"].float().index_select(1, inverse)
    out["src_embed.tokens.weight"] = rows(source, src_rows)
    out["tgt_embed.tokens.weight"] = out["src_embed.tokens.weight"] if cfg.tie_embeddings else rows(target, tgt_rows)
    out["output.weight"] = out["tgt_embed.tokens.weight"] if cfg.tie_embeddings else rows(output, tgt_rows)
    if cfg.output_bias:
        bias = rows(hf["final_logits_bias"].float().reshape(-1, 1), tgt_rows)[:, 0]  # (V,)
        out["output.bias"] = bias.masked_fill(torch.tensor([p is None for p in tgt_rows]), SUPPRESSED_LOGIT)
    return out


def needed_tensors(cfg: ModelConfig) -> list[str]:
    """transformers' names of the tensors `from_hf_weights` reads."""
    vocabulary = ["model.encoder.embed_tokens.weight", "model.decoder.embed_tokens.weight", "lm_head.weight",
                  "final_logits_bias"]
    return [t.hf for t in layer_tensors(cfg)] + vocabulary
