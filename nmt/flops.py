"""Analytic FLOP counts of the models, each attention variant's keyed by its name: a multiply-add is 2 FLOPs,
only matrix products count, and training costs 3 x forward (gradients for activations and weights)."""

from __future__ import annotations

from collections.abc import Callable

from nmt.config import ModelConfig, settings_of
from nmt.models.attention.local import LocalAttention, band_spans

TRAINING_FACTOR = 3.0


def linear_flops(tokens: float, in_features: int, out_features: int) -> float:
    """A dense layer applied to `tokens` positions: one multiply-add (2 FLOPs) per weight per position."""
    return 2.0 * tokens * in_features * out_features


def _gru_flops(steps: float, input_size: int, hidden: int) -> float:
    """One GRU direction over `steps` positions: three gates, each from the input and the hidden state."""
    return linear_flops(steps, input_size, 3 * hidden) + linear_flops(steps, hidden, 3 * hidden)


# The GRU decoder's attention at `tgt_len` steps over `src_len` encoder states, by model.attention.
def _pairs(cfg: ModelConfig, src_len: int, tgt_len: int) -> float:
    return linear_flops(tgt_len, src_len, cfg.hidden_size)  # the scores, or the context


def _additive(cfg: ModelConfig, src_len: int, tgt_len: int) -> float:
    h = cfg.hidden_size  # keys, queries, scores, context
    return linear_flops(src_len, h, h) + linear_flops(tgt_len, h, h) + 2 * _pairs(cfg, src_len, tgt_len)


def _dot(cfg: ModelConfig, src_len: int, tgt_len: int) -> float:
    return 2 * _pairs(cfg, src_len, tgt_len)


def _general(cfg: ModelConfig, src_len: int, tgt_len: int) -> float:
    return linear_flops(src_len, cfg.hidden_size, cfg.hidden_size) + 2 * _pairs(cfg, src_len, tgt_len)


def _mean(cfg: ModelConfig, src_len: int, tgt_len: int) -> float:
    return _pairs(cfg, src_len, tgt_len)  # the mean as a weighted sum


RNN_ATTENTION_FLOPS: dict[str, Callable[[ModelConfig, int, int], float]] = {
    "additive": _additive, "dot": _dot, "general": _general, "scaled_dot": _dot, "none": _mean}


# One self-attention layer's scores and values over `length` positions, by model.self_attention; a masked
# pattern (causal, sparse) still computes every score.
def _full(cfg: ModelConfig, length: int) -> float:
    return 2 * linear_flops(length, cfg.d_model, length)


def _local(cfg: ModelConfig, length: int) -> float:
    window = settings_of(cfg, "self")["window"]  # blocks of queries, each against the keys near the block
    return sum(2 * linear_flops(stop - start, cfg.d_model, high - low)
               for start, stop, low, high in band_spans(length, max(LocalAttention.block, window, 1), window))


def _linear(cfg: ModelConfig, length: int) -> float:
    return 2 * linear_flops(length, cfg.d_model, cfg.d_model // cfg.heads) + linear_flops(length, cfg.d_model, 1)


def _local_step(cfg: ModelConfig, length: int) -> float:
    return 2 * linear_flops(1, cfg.d_model, min(length, settings_of(cfg, "self")["window"] + 1))


SELF_ATTENTION_FLOPS: dict[str, Callable[[ModelConfig, int], float]] = {
    "full": _full, "local": _local, "sparse": _full, "linear": _linear}
# A decoding step's query over `length` cached positions, where it costs other than its share of the layer.
SELF_ATTENTION_STEP_FLOPS: dict[str, Callable[[ModelConfig, int], float]] = {"local": _local_step}


def _counted(table: dict[str, Callable[..., float]], cfg: ModelConfig, key: str) -> Callable[..., float]:
    name = getattr(cfg, key)
    if name not in table:
        raise ValueError(f"no FLOP count for model.{key} '{name}': not one of {', '.join(table)}")
    return table[name]


def _self_attention_core(cfg: ModelConfig, length: int) -> float:
    return _counted(SELF_ATTENTION_FLOPS, cfg, "self_attention")(cfg, length)


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


def _rnn_flops(cfg: ModelConfig, vocab_size: int, src_len: int, tgt_len: int) -> float:
    h, e = cfg.hidden_size, cfg.emb_dim
    encoder = sum(2 * _gru_flops(src_len, e if layer == 0 else h, h // 2) for layer in range(cfg.encoder_layers))
    bridge = linear_flops(1, cfg.encoder_layers * h, cfg.decoder_layers * h)
    feed = h if cfg.input_feeding else 0
    decoder = sum(_gru_flops(tgt_len, e + feed if layer == 0 else h, h) for layer in range(cfg.decoder_layers))
    combine = linear_flops(tgt_len, 2 * h, h)
    attention = _counted(RNN_ATTENTION_FLOPS, cfg, "attention")(cfg, src_len, tgt_len)
    output = linear_flops(tgt_len, h, vocab_size)
    return encoder + bridge + decoder + attention + combine + output


def forward_flops(model_cfg: ModelConfig, vocab_size: int, src_len: int, tgt_len: int) -> float:
    """Forward FLOPs of one sentence pair of `src_len` source positions (EOS included) and `tgt_len` steps."""
    if model_cfg.arch == "transformer":
        return _transformer_flops(model_cfg, vocab_size, src_len, tgt_len)
    if model_cfg.arch == "rnn":
        return _rnn_flops(model_cfg, vocab_size, src_len, tgt_len)
    raise ValueError(f"no FLOP count for model.arch '{model_cfg.arch}'")


def training_flops(model_cfg: ModelConfig, vocab_size: int, src_lens: list[int], tgt_lens: list[int]) -> float:
    """Training FLOPs (3 x forward) of a batch, from each pair's real lengths."""
    return TRAINING_FACTOR * sum(forward_flops(model_cfg, vocab_size, s, t) for s, t in zip(src_lens, tgt_lens))


def decoding_flops(model_cfg: ModelConfig, vocab_size: int, src_len: int, steps: int, rows: int = 1) -> float:
    """Forward FLOPs of decoding one sentence for `steps` steps of `rows` hypotheses (the encoder once)."""
    once = forward_flops(model_cfg, vocab_size, src_len, 0)
    per_row = forward_flops(model_cfg, vocab_size, src_len, steps) - once
    if model_cfg.arch == "transformer":  # the teacher-forced count holds every position's attention over all of them
        layer = _counted(SELF_ATTENTION_FLOPS, model_cfg, "self_attention")
        step = SELF_ATTENTION_STEP_FLOPS.get(model_cfg.self_attention, lambda cfg, t: layer(cfg, t) / t)
        cached = sum(step(model_cfg, t) for t in range(1, steps + 1))
        per_row += model_cfg.decoder_layers * (cached - _self_attention_core(model_cfg, steps))
    return once + rows * per_row
