"""A new attention variant with a setting of its own is one module: everything below registers a variant defined in
this file only, and config, the model factory, the FLOP count and the variant lists take it from there."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from nmt.config import ModelConfig, Range, VariantSetting, load_config, reference_markdown, to_dict
from nmt.errors import ConfigError
from nmt.flops import forward_flops, linear_flops
from nmt.models import build_model, check_model_config
from nmt.models.attention import (
    SELF_ATTENTION,
    FullAttention,
    SelfAttention,
    register_rnn_attention,
    register_self_attention,
    self_attention_variants,
    unregister_self_attention,
)
from nmt.tokenizer import VocabInfo
from tests.conftest import tiny_config

VOCAB = VocabInfo(src_size=20, tgt_size=20, joint=True)
DECAY = VariantSetting("decay", float, 0.5, "transformer decayed attention: share the scores lose before the softmax.",
                       bounds=Range(0.0, 1.0, high_open=True))


class DecayedAttention(FullAttention):
    """Full attention on scores scaled by (1 - decay): a second temperature, set by a setting of its own."""

    settings = (DECAY,)

    def __init__(self, temperature: float = 1.0, dropout: float = 0.0, decay: float = DECAY.default) -> None:
        super().__init__(temperature / (1.0 - decay), dropout)
        self.decay = decay

    @classmethod
    def flops(cls, cfg: ModelConfig, length: int) -> float:
        return super().flops(cfg, length) + linear_flops(length, 1, length)  # and one product per score


def model_keys() -> list[str]:
    return [f.name for f in dataclasses.fields(ModelConfig)]


@pytest.fixture
def decayed() -> Iterator[tuple[list[str], list[str], str]]:
    """Register the variant; yield what the registry, the model section and the reference were before it."""
    before = (self_attention_variants(), model_keys(), reference_markdown())
    register_self_attention("decayed")(DecayedAttention)
    try:
        yield before
    finally:
        if "decayed" in SELF_ATTENTION:
            unregister_self_attention("decayed")


def config_with(tmp_path: Path, **model: object) -> Path:
    return tiny_config(tmp_path, model={"self_attention": "decayed", **model})


def test_a_variant_with_its_own_setting_needs_nothing_outside_its_file(decayed, tmp_path: Path) -> None:
    variants, keys, reference = decayed
    assert self_attention_variants() == [*variants, "decayed"]
    cfg = load_config(config_with(tmp_path, decay=0.25))
    assert cfg.model.decay == 0.25 and to_dict(cfg.model)["decay"] == 0.25
    assert load_config(config_with(tmp_path)).model.decay == DECAY.default
    assert "| `decay` | float | `0.5` | transformer decayed attention:" in reference_markdown()
    with pytest.raises(ConfigError, match=r"model\.decay: got 1\.5, allowed: a number in \[0, 1\)"):
        load_config(config_with(tmp_path, decay=1.5))
    with pytest.raises(ConfigError, match="model.dekay.*did you mean 'decay'"):
        load_config(config_with(tmp_path, dekay=0.25))

    check_model_config(cfg.model)
    torch.manual_seed(0)
    model = build_model(cfg.model, VOCAB).eval()
    assert isinstance(model.self_core, DecayedAttention) and model.self_core.decay == 0.25
    src, tgt_in = torch.randint(4, 20, (2, 7)), torch.randint(4, 20, (2, 5))
    with torch.no_grad():
        logits = model(src, torch.ones(2, 7, dtype=torch.bool), tgt_in)
    assert logits.shape == (2, 5, VOCAB.tgt_size) and logits.isfinite().all()

    full = dataclasses.replace(cfg.model, self_attention="full")
    layers = cfg.model.encoder_layers, cfg.model.decoder_layers
    extra = layers[0] * linear_flops(7, 1, 7) + layers[1] * linear_flops(5, 1, 5)
    assert forward_flops(cfg.model, VOCAB.tgt_size, 7, 5) == forward_flops(full, VOCAB.tgt_size, 7, 5) + extra

    unregister_self_attention("decayed")
    assert (self_attention_variants(), model_keys(), reference_markdown()) == (variants, keys, reference)
    with pytest.raises(ConfigError, match="unknown key 'model.decay'"):
        load_config(config_with(tmp_path, decay=0.25))


def test_flops_has_no_fallback_for_a_variant_that_does_not_count() -> None:
    class Uncounted(SelfAttention):
        """A variant that reports no FLOPs."""

    with pytest.raises(ValueError, match="model.self_attention 'performer': not one of full"):
        forward_flops(ModelConfig(self_attention="performer"), 100, 5, 5)
    register_self_attention("uncounted")(Uncounted)
    try:
        with pytest.raises(NotImplementedError, match="Uncounted reports no FLOP count"):
            forward_flops(ModelConfig(self_attention="uncounted"), 100, 5, 5)
    finally:
        unregister_self_attention("uncounted")


def test_names_and_settings_clash_loudly() -> None:
    keys = model_keys()
    with pytest.raises(ValueError, match="model.attention: a variant 'additive' is already registered"):
        register_rnn_attention("additive")(FullAttention)
    clash = type("Clash", (FullAttention,), {"settings": (dataclasses.replace(DECAY, name="window"),)})
    with pytest.raises(ValueError, match="model.window is already declared differently"):
        register_self_attention("clash")(clash)
    heads = type("Heads", (FullAttention,), {"settings": (dataclasses.replace(DECAY, name="heads"),)})
    with pytest.raises(ValueError, match="model.heads is already a ModelConfig field"):
        register_self_attention("heads")(heads)
    assert "clash" not in SELF_ATTENTION and "heads" not in SELF_ATTENTION and model_keys() == keys
