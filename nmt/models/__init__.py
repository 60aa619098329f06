"""The model factory: `build_model` is the only place a model is constructed."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from torch import nn

from nmt.config import ModelConfig
from nmt.errors import ConfigError
from nmt.models.attention import settings_of
from nmt.models.base import Seq2Seq
from nmt.models.rnn import RNNSeq2Seq
from nmt.models.transformer import Transformer

if TYPE_CHECKING:
    from nmt.tokenizer import VocabInfo

__all__ = ["ARCHITECTURES", "Seq2Seq", "build_model", "check_model_config", "count_parameters"]

log = logging.getLogger(__name__)

ARCHITECTURES: dict[str, type[Seq2Seq]] = {"rnn": RNNSeq2Seq, "transformer": Transformer}

# The attention family each architecture builds its variant from.
_FAMILY = {"rnn": "rnn", "transformer": "self"}


def check_model_config(model_cfg: ModelConfig) -> None:
    """Raise ConfigError for an unknown architecture or attention variant (listing the valid names), or for a
    variant setting its block does not take."""
    if model_cfg.arch not in ARCHITECTURES:
        raise ConfigError(f"model.arch: '{model_cfg.arch}' is not one of {', '.join(ARCHITECTURES)}")
    settings_of(model_cfg, _FAMILY[model_cfg.arch])


def count_parameters(model: nn.Module) -> int:
    """Trainable parameters, each shared tensor counted once."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def build_model(model_cfg: ModelConfig, vocab: VocabInfo) -> Seq2Seq:
    """Build the model `model_cfg.arch` names, and log its size."""
    check_model_config(model_cfg)
    model = ARCHITECTURES[model_cfg.arch](model_cfg, vocab)
    log.info("model: %s, %d parameters", model_cfg.arch, count_parameters(model))
    return model
