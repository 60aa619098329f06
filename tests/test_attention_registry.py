"""A new attention variant is its class and a line in nmt.config.VARIANTS: the variant below, defined in this file
and added to the table (and its FLOP count to nmt.flops), is taken from there by the config, the model factory, the
FLOP count and the variant lists."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

import nmt
from nmt.config import (
    VARIANTS,
    ModelConfig,
    Range,
    Variant,
    VariantSetting,
    check_attention,
    settings_of,
    to_dict,
    variant_reference,
)
from nmt.errors import ConfigError
from nmt.flops import SELF_ATTENTION_FLOPS, forward_flops, linear_flops
from nmt.models import build_model
from nmt.models.attention import FullAttention, RNNAttention, SelfAttention, variant_class
from nmt.tokenizer import VocabInfo
from tests.conftest import tiny_config

VOCAB = VocabInfo(src_size=20, tgt_size=20, joint=True)
DECAY = VariantSetting("decay", float, 0.5, "transformer decayed attention: share the scores lose before the softmax.",
                       bounds=Range(0.0, 1.0, high_open=True))


class DecayedAttention(FullAttention):
    """Full attention on scores scaled by (1 - decay): a second temperature, set by a setting of its own."""

    def __init__(self, temperature: float = 1.0, dropout: float = 0.0, decay: float = DECAY.default) -> None:
        super().__init__(temperature / (1.0 - decay), dropout)
        self.decay = decay


def decayed_flops(cfg: ModelConfig, length: int) -> float:
    return SELF_ATTENTION_FLOPS["full"](cfg, length) + linear_flops(length, 1, length)  # and one product per score


def model_keys() -> list[str]:
    return [f.name for f in dataclasses.fields(ModelConfig)]


@pytest.fixture
def decayed(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[list[str], list[str], str]]:
    """Add the variant; yield what the variant names, the model section and the variant table were before it."""
    before = (list(VARIANTS["self"]), model_keys(), variant_reference())
    monkeypatch.setitem(VARIANTS["self"], "decayed", Variant(f"{__name__}.DecayedAttention", (DECAY,)))
    monkeypatch.setitem(SELF_ATTENTION_FLOPS, "decayed", decayed_flops)
    yield before


def config_with(tmp_path: Path, **settings: object) -> Path:
    return tiny_config(tmp_path, model={"self_attention": "decayed", "self_attention_settings": settings})


def test_a_variant_with_its_own_setting_is_its_class_and_its_line_in_the_table(
        decayed, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    variants, keys, table = decayed
    assert list(VARIANTS["self"]) == [*variants, "decayed"]
    assert model_keys() == keys, "adding a variant leaves ModelConfig as it is"
    cfg = nmt.load_config(config_with(tmp_path, decay=0.25))
    assert settings_of(cfg.model, "self") == {"decay": 0.25}
    assert to_dict(cfg.model)["self_attention_settings"] == {"decay": 0.25}
    assert settings_of(nmt.load_config(config_with(tmp_path)).model, "self") == {"decay": DECAY.default}
    assert "| `model.self_attention_settings` | `decayed` | `decay` | float | `0.5` | transformer decayed" \
        in variant_reference() and "decayed" not in table
    with pytest.raises(ConfigError, match=r"model\.self_attention_settings\.decay: got 1\.5, allowed: a number in "
                                          r"\[0, 1\)"):
        nmt.load_config(config_with(tmp_path, decay=1.5))
    with pytest.raises(ConfigError, match=r"model\.self_attention_settings\.dekay \(did you mean 'decay'"):
        nmt.load_config(config_with(tmp_path, dekay=0.25))

    check_attention(cfg.model)
    torch.manual_seed(0)
    model = build_model(cfg.model, VOCAB).eval()
    assert isinstance(model.self_core, DecayedAttention) and model.self_core.decay == 0.25
    src, tgt_in = torch.randint(4, 20, (2, 7)), torch.randint(4, 20, (2, 5))
    with torch.no_grad():
        logits = model(src, torch.ones(2, 7, dtype=torch.bool), tgt_in)
    assert logits.shape == (2, 5, VOCAB.tgt_size) and logits.isfinite().all()

    full = dataclasses.replace(cfg.model, self_attention="full", self_attention_settings={})
    layers = cfg.model.encoder_layers, cfg.model.decoder_layers
    extra = layers[0] * linear_flops(7, 1, 7) + layers[1] * linear_flops(5, 1, 5)
    assert forward_flops(cfg.model, VOCAB.tgt_size, 7, 5) == forward_flops(full, VOCAB.tgt_size, 7, 5) + extra

    monkeypatch.undo()
    assert (list(VARIANTS["self"]), model_keys(), variant_reference()) == (variants, keys, table)
    with pytest.raises(ConfigError, match="model.self_attention: 'decayed' is not one of full"):
        nmt.load_config(config_with(tmp_path, decay=0.25))


def test_flops_has_no_fallback_for_a_variant_that_does_not_count(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ValueError, match="model.self_attention 'performer': not one of full"):
        forward_flops(ModelConfig(self_attention="performer"), 100, 5, 5)
    monkeypatch.setitem(VARIANTS["self"], "uncounted", Variant(f"{__name__}.DecayedAttention"))
    with pytest.raises(ValueError, match="model.self_attention 'uncounted': not one of full"):
        forward_flops(ModelConfig(self_attention="uncounted"), 100, 5, 5)


@pytest.mark.parametrize(("family", "base"), [("rnn", RNNAttention), ("self", SelfAttention)])
def test_every_variant_in_the_table_names_a_class_of_its_family(family: str, base: type) -> None:
    for name in VARIANTS[family]:
        assert issubclass(variant_class(family, name), base), name
