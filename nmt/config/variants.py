"""The attention variants a config may name (`model.attention`, `model.self_attention`) with their settings (read
from `<key>_settings`), and each one's class by import path, so configs are checked without torch."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from nmt.config.fields import Range, VariantSetting, read_settings
from nmt.errors import ConfigError

if TYPE_CHECKING:
    from nmt.config.model import ModelConfig

WINDOW = VariantSetting("window", int, 8, "transformer local/sparse attention: neighbours seen on each side.",
                        bounds=Range(1, 1_000_000))
STRIDE = VariantSetting("stride", int, 8, "transformer sparse attention: every stride-th position is also seen.",
                        bounds=Range(1, 1_000_000))

FAMILIES = {"rnn": "attention", "self": "self_attention"}  # the model key naming each family's variant


@dataclass(frozen=True)
class Variant:
    """An attention variant: its class as `package.module.Class` and the settings its constructor takes."""

    cls: str
    settings: tuple[VariantSetting, ...] = ()


_ATTENTION = "nmt.models.attention"

# Each family's variants, in the order every list of valid names follows.
VARIANTS: dict[str, dict[str, Variant]] = {
    "rnn": {
        "additive": Variant(f"{_ATTENTION}.rnn.AdditiveAttention"),
        "dot": Variant(f"{_ATTENTION}.rnn.DotAttention"),
        "general": Variant(f"{_ATTENTION}.rnn.GeneralAttention"),
        "scaled_dot": Variant(f"{_ATTENTION}.rnn.ScaledDotAttention"),
        "none": Variant(f"{_ATTENTION}.rnn.NoAttention"),
    },
    "self": {
        "full": Variant(f"{_ATTENTION}.full.FullAttention"),
        "local": Variant(f"{_ATTENTION}.local.LocalAttention", (WINDOW,)),
        "sparse": Variant(f"{_ATTENTION}.sparse.SparseAttention", (WINDOW, STRIDE)),
        "linear": Variant(f"{_ATTENTION}.linear.LinearAttention"),
    },
}


def family_of(arch: str) -> str:
    """The attention family an architecture builds its variant from."""
    return "rnn" if arch == "rnn" else "self"


def settings_of(cfg: ModelConfig, family: str) -> dict[str, Any]:
    """The checked settings of `family`'s configured variant; ConfigError for an unknown variant or key."""
    key, variants = FAMILIES[family], VARIANTS[family]
    name = getattr(cfg, key)
    if name not in variants:
        raise ConfigError(f"model.{key}: {str(name)[:60]!r} is not one of {', '.join(variants)}")
    return read_settings(variants[name].settings, getattr(cfg, f"{key}_settings"), f"model.{key}_settings")


def check_attention(cfg: ModelConfig) -> None:
    """ConfigError unless the architecture's attention variant exists and its settings are valid."""
    settings_of(cfg, family_of(cfg.arch))


def variant_reference() -> str:
    """Markdown table of every variant's settings, for the config reference."""
    lines = ["## Attention variant settings", "",
             "Each variant reads its own settings from its family's block: `model.self_attention_settings` "
             "(transformer) or `model.attention_settings` (rnn). A variant not listed has none.", "",
             "| block | variant | key | type | default | meaning |", "|---|---|---|---|---|---|"]
    for family, key in FAMILIES.items():
        for name, variant in VARIANTS[family].items():
            for s in variant.settings:
                doc = s.doc + (f" Allowed: {s.bounds.describe(s.type is int)}." if s.bounds else "")
                lines.append(f"| `model.{key}_settings` | `{name}` | `{s.name}` | {s.type.__name__} | "
                             f"`{s.default!r}` | {doc} |")
    return "\n".join(lines) + "\n"
