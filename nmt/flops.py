"""Analytic FLOP counts of the models (the matmul peak they are set against is measured in benchmarks/common.py).

Counts follow the usual model-FLOPs convention: a multiply-add is 2 FLOPs, only matrix products count
(element-wise work, norms, softmax and embedding lookups do not), and a training step costs 3 x the
forward pass (the backward pass computes gradients for both activations and weights, 2 x forward).
"""

from __future__ import annotations

from typing import TypeVar

from nmt.config import ModelConfig
from nmt.models.attention import RNN_ATTENTION, SELF_ATTENTION, linear_flops

TRAINING_FACTOR = 3.0
T = TypeVar("T")


def _gru_flops(steps: float, input_size: int, hidden: int) -> float:
    """One GRU direction over `steps` positions: three gates, each from the input and the hidden state."""
    return linear_flops(steps, input_size, 3 * hidden) + linear_flops(steps, hidden, 3 * hidden)


def _variant(cfg: ModelConfig, key: str, registry: dict[str, type[T]]) -> type[T]:
    """The attention variant `model.<key>` names; its own `flops` gives its count (no fallback for others)."""
    name = getattr(cfg, key)
    if name not in registry:
        raise ValueError(f"no FLOP count for model.{key} '{name}': not one of {', '.join(registry)}")
    return registry[name]


def _self_attention_core(cfg: ModelConfig, length: int) -> float:
    """Scores and weighted values of one self-attention layer over `length` positions (all heads)."""
    return _variant(cfg, "self_attention", SELF_ATTENTION).flops(cfg, length)


def _transformer_flops(cfg: ModelConfig, vocab_size: int, src_len: int, tgt_len: int) -> float:
    d, f = cfg.d_model, cfg.ffn_dim
    ffn_src = linear_flops(src_len, d, f) + linear_flops(src_len, f, d)
    ffn_tgt = linear_flops(tgt_len, d, f) + linear_flops(tgt_len, f, d)
    encoder = (linear_flops(src_len, d, 3 * d) + _self_attention_core(cfg, src_len)
               + linear_flops(src_len, d, d) + ffn_src)
    self_attn = linear_flops(tgt_len, d, 3 * d) + _self_attention_core(cfg, tgt_len) + linear_flops(tgt_len, d, d)
    cross = (linear_flops(tgt_len, d, d) + linear_flops(src_len, d, 2 * d)  # queries; keys and values of memory
             + 2 * linear_flops(tgt_len, d, src_len) + linear_flops(tgt_len, d, d))  # scores, values, output
    decoder = self_attn + cross + ffn_tgt
    return cfg.encoder_layers * encoder + cfg.decoder_layers * decoder + linear_flops(tgt_len, d, vocab_size)


def _rnn_attention_flops(cfg: ModelConfig, src_len: int, tgt_len: int) -> float:
    """The decoder's attention over all `tgt_len` steps and `src_len` encoder states."""
    return _variant(cfg, "attention", RNN_ATTENTION).flops(cfg, src_len, tgt_len)


def _rnn_flops(cfg: ModelConfig, vocab_size: int, src_len: int, tgt_len: int) -> float:
    h, e = cfg.hidden_size, cfg.emb_dim
    encoder = sum(2 * _gru_flops(src_len, e if layer == 0 else h, h // 2) for layer in range(cfg.encoder_layers))
    bridge = linear_flops(1, cfg.encoder_layers * h, cfg.decoder_layers * h)
    feed = h if cfg.input_feeding else 0
    decoder = sum(_gru_flops(tgt_len, e + feed if layer == 0 else h, h) for layer in range(cfg.decoder_layers))
    combine = linear_flops(tgt_len, 2 * h, h)
    output = linear_flops(tgt_len, h, vocab_size)
    return encoder + bridge + decoder + _rnn_attention_flops(cfg, src_len, tgt_len) + combine + output


def forward_flops(model_cfg: ModelConfig, vocab_size: int, src_len: int, tgt_len: int) -> float:
    """Forward FLOPs of one sentence pair: `src_len` source positions (EOS included), `tgt_len` decoder steps.

    Embeddings are excluded; the output layer and attention are included.
    """
    if model_cfg.arch == "transformer":
        return _transformer_flops(model_cfg, vocab_size, src_len, tgt_len)
    if model_cfg.arch == "rnn":
        return _rnn_flops(model_cfg, vocab_size, src_len, tgt_len)
    raise ValueError(f"no FLOP count for model.arch '{model_cfg.arch}'")


def training_flops(model_cfg: ModelConfig, vocab_size: int, src_lens: list[int], tgt_lens: list[int]) -> float:
    """Training FLOPs (3 x forward) of a batch, from each pair's real lengths."""
    return TRAINING_FACTOR * sum(forward_flops(model_cfg, vocab_size, s, t) for s, t in zip(src_lens, tgt_lens))


def decoding_flops(model_cfg: ModelConfig, vocab_size: int, src_len: int, steps: int, rows: int = 1) -> float:
    """Forward FLOPs of decoding one sentence of `src_len` source positions (EOS included) for `steps` decoder steps,
    each run for `rows` hypotheses (a beam): the encoder and what depends on the source alone (a Transformer's
    cross-attention keys and values) once, each step's decoder work once per row. A Transformer step's
    self-attention reads the keys cached so far (its variant's `step_flops`).
    """
    once = forward_flops(model_cfg, vocab_size, src_len, 0)
    per_row = forward_flops(model_cfg, vocab_size, src_len, steps) - once
    if model_cfg.arch == "transformer":  # the teacher-forced count holds every position's attention over all of them
        variant = _variant(model_cfg, "self_attention", SELF_ATTENTION)
        cached = sum(variant.step_flops(model_cfg, t) for t in range(1, steps + 1))
        per_row += model_cfg.decoder_layers * (cached - _self_attention_core(model_cfg, steps))
    return once + rows * per_row
