"""A new attention variant with a setting of its own is one module: everything below registers a variant defined in
this file only, and config, the model factory, the FLOP count and the variant lists take it from there."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
import yaml

import nmt
from nmt.config import (
    ModelConfig,
    Range,
    VariantSetting,
    check_attention,
    config_from_dict,
    settings_of,
    to_dict,
    variant_reference,
)
from nmt.errors import ConfigError
from nmt.flops import forward_flops, linear_flops
from nmt.models import build_model
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
from tests.conftest import REPO, tiny_config

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
    """Register the variant; yield what the registry, the model section and the variant table were before it."""
    before = (self_attention_variants(), model_keys(), variant_reference())
    register_self_attention("decayed")(DecayedAttention)
    try:
        yield before
    finally:
        if "decayed" in SELF_ATTENTION:
            unregister_self_attention("decayed")


def config_with(tmp_path: Path, **settings: object) -> Path:
    return tiny_config(tmp_path, model={"self_attention": "decayed", "self_attention_settings": settings})


def test_a_variant_with_its_own_setting_needs_nothing_outside_its_file(decayed, tmp_path: Path) -> None:
    variants, keys, table = decayed
    assert self_attention_variants() == [*variants, "decayed"]
    assert model_keys() == keys, "registering a variant leaves ModelConfig as it is"
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

    unregister_self_attention("decayed")
    assert (self_attention_variants(), model_keys(), variant_reference()) == (variants, keys, table)
    with pytest.raises(ConfigError, match="model.self_attention: 'decayed' is not one of full"):
        nmt.load_config(config_with(tmp_path, decay=0.25))


def test_configs_of_runs_from_before_settings_blocks_load_with_their_settings() -> None:
    """Saved configs once held every variant's settings as model keys (model.window, model.stride), whatever the
    variant: the comparison configs written that way load with each setting in the block of the variant that
    reads it, and nowhere else."""
    blocks = {}
    for name in ("full", "local", "sparse", "linear"):
        path = REPO / "configs" / "compare" / "multi30k" / f"cmp_multi30k_transformer_{name}.yaml"
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
        raw["model"].pop("self_attention_settings", None)
        raw["model"].update(window=8, stride=8)  # as every saved config of that time held them
        model = config_from_dict(raw).model
        check_attention(model)
        blocks[name] = model.self_attention_settings
    assert blocks == {"full": {}, "local": {"window": 8}, "sparse": {"window": 8, "stride": 8}, "linear": {}}
    local = build_model(config_from_dict({"model": {"self_attention": "local", "window": 3}}).model, VOCAB)
    assert local.self_core.window == 3


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


def test_a_name_registered_twice_is_refused_loudly() -> None:
    with pytest.raises(ValueError, match="model.attention: a variant 'additive' is already registered"):
        register_rnn_attention("additive")(FullAttention)
    with pytest.raises(ValueError, match="model.self_attention: a variant 'full' is already registered"):
        register_self_attention("full")(FullAttention)
