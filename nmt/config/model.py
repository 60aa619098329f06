"""The model section and its cross-field checks."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from nmt.config.fields import FRACTION, Range, Section, setting
from nmt.errors import ConfigError

ACTIVATIONS = ("relu", "gelu", "swish")  # the feed-forward activations of model.activation


@dataclass
class ModelConfig(Section):
    """Architecture and sizes. Fields a family does not use are ignored by it."""

    KEY: ClassVar[str] = "model"

    arch: str = setting("transformer", "Model family.", ("transformer", "rnn"))
    d_model: int = setting(256, "transformer: model width (embedding and residual size).", bounds=Range(1, 65536))
    ffn_dim: int = setting(1024, "transformer: feed-forward inner size.", bounds=Range(1, 1 << 20))
    activation: str = setting("relu", "transformer: feed-forward activation (swish is SiLU, x * sigmoid(x); gelu "
                                      "the exact erf form).", ACTIVATIONS)
    heads: int = setting(4, "transformer: attention heads.", bounds=Range(1, 1024))
    encoder_layers: int = setting(3, "Encoder layers (GRU layers for rnn).", bounds=Range(1, 1000))
    decoder_layers: int = setting(3, "Decoder layers (GRU layers for rnn).", bounds=Range(1, 1000))
    pre_norm: bool = setting(True, "transformer: layer norm before each sublayer (with a final norm).")
    positions: str = setting("sinusoidal", "transformer: position encoding.", ("sinusoidal", "learned"))
    max_positions: int = setting(1024, "transformer: longest sequence learned positions cover.",
                                 bounds=Range(1, 1_000_000))
    self_attention: str = setting("full", "transformer: self-attention variant (see nmt.config.variants).")
    self_attention_settings: dict[str, Any] = setting(
        {}, "transformer: the self-attention variant's own settings, e.g. `{window: 8}` for local (each variant "
            "declares and checks its own; see the variant table below).")
    temperature: float = setting(1.0, "Softmax temperature of attention scores.", bounds=Range(0, 1000, low_open=True))
    emb_dim: int = setting(256, "rnn: embedding size.", bounds=Range(1, 65536))
    hidden_size: int = setting(512, "rnn: decoder GRU size (encoder: half per direction).", bounds=Range(2, 65536))
    attention: str = setting("additive", "rnn: attention of the decoder over the encoder "
                                         "(see nmt.config.variants).")
    attention_settings: dict[str, Any] = setting({}, "rnn: the attention variant's own settings (none of the "
                                                     "built-in ones has any).")
    input_feeding: bool = setting(True, "rnn: feed the previous attentional vector into the decoder GRU.")
    dropout: float = setting(0.1, "Dropout on embeddings, sublayer outputs and GRU outputs.", bounds=FRACTION)
    attention_dropout: float = setting(0.0, "Dropout on attention weights.", bounds=FRACTION)
    tie_embeddings: bool = setting(True, "Share source, target and output embeddings (needs a joint vocabulary).")
    output_bias: bool = setting(False, "transformer: a learned bias on the output layer's logits (as Marian's "
                                       "final_logits_bias; nmt-import sets it).")


def check_model(m: ModelConfig, max_tokens: int, joint_vocab: bool) -> None:
    """The checks that need more than one model key: `max_tokens` is data.max_tokens, `joint_vocab` is
    tokenizer.joint."""
    if m.arch == "transformer" and m.d_model % m.heads:
        raise ConfigError(f"model.d_model ({m.d_model}) must be divisible by model.heads ({m.heads})")
    if m.arch == "transformer" and m.max_positions < max_tokens + 2:
        raise ConfigError(f"model.max_positions ({m.max_positions}) must cover the longest training sequence, "
                          f"data.max_tokens + 2 for BOS/EOS ({max_tokens + 2})")
    if m.arch == "rnn" and m.hidden_size % 2:
        raise ConfigError(f"model.hidden_size ({m.hidden_size}) must be even (the encoder is bidirectional)")
    if m.tie_embeddings and not joint_vocab:
        raise ConfigError("model.tie_embeddings needs tokenizer.joint: true (one vocabulary for both sides)")
    if m.arch == "rnn" and m.tie_embeddings and m.emb_dim != m.hidden_size:
        raise ConfigError(f"model.tie_embeddings with arch rnn needs model.emb_dim ({m.emb_dim}) == "
                          f"model.hidden_size ({m.hidden_size}): the output layer shares the embedding")
