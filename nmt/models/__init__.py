"""The model factory: `build_model` is the only place a model is constructed."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING

import torch
from torch import nn

from nmt.config import ModelConfig
from nmt.errors import CheckpointError, excerpt
from nmt.models.base import Seq2Seq
from nmt.models.rnn import RNNSeq2Seq
from nmt.models.transformer import Transformer

if TYPE_CHECKING:
    from nmt.tokenizer import VocabInfo

__all__ = ["ARCHITECTURES", "Seq2Seq", "build_model", "check_weights", "count_parameters"]

log = logging.getLogger(__name__)

ARCHITECTURES: dict[str, type[Seq2Seq]] = {"rnn": RNNSeq2Seq, "transformer": Transformer}

# Elements of the tensors a model computes instead of loading (the sinusoid tables): the one allocation the
# weights' shapes do not bound.
MAX_COMPUTED = 1 << 27


def count_parameters(model: nn.Module) -> int:
    """Trainable parameters, each shared tensor counted once."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def check_weights(model_cfg: ModelConfig, vocab: VocabInfo, weights: Mapping[str, torch.Tensor]) -> None:
    """CheckpointError unless `weights` are exactly the tensors these settings build, checked on the meta device,
    so untrusted settings cannot allocate more than their weights."""
    with torch.device("meta"):
        expected = ARCHITECTURES[model_cfg.arch](model_cfg, vocab)
    shapes = {key: tuple(value.shape) for key, value in expected.state_dict().items()}
    computed = sum(b.numel() for name, b in expected.named_buffers() if name not in shapes)
    if computed > MAX_COMPUTED:
        raise CheckpointError(f"its settings (model.max_positions {model_cfg.max_positions}, model.d_model "
                              f"{model_cfg.d_model}) ask for {computed:,} computed position values, more than "
                              f"{MAX_COMPUTED:,}")
    for key, shape in shapes.items():
        if key not in weights:
            raise CheckpointError(f"its weights have no tensor {key} (shape {list(shape)} in its settings)")
        if tuple(weights[key].shape) != shape:
            raise CheckpointError(f"tensor {key} has shape {list(weights[key].shape)}, its settings ask for "
                                  f"{list(shape)}")
    unknown = sorted(set(weights) - set(shapes))
    if unknown:
        raise CheckpointError(f"its weights hold tensor {excerpt(unknown[0])}, which a model of its settings has not"
                              + (f" (and {len(unknown) - 1} more)" if len(unknown) > 1 else ""))


def build_model(model_cfg: ModelConfig, vocab: VocabInfo) -> Seq2Seq:
    """Build the model `model_cfg.arch` names (settings checked as every Config's are), and log its size."""
    model = ARCHITECTURES[model_cfg.arch](model_cfg, vocab)
    log.info("model: %s, %d parameters", model_cfg.arch, count_parameters(model))
    return model
