"""The attention variants a config may name and the settings each one takes, checked without the model code.

Each family's variant is named by a model key (`model.attention` for the GRU decoder, `model.self_attention`
for the transformer) and reads its own settings from the block beside it (`model.attention_settings`,
`model.self_attention_settings`). The built-in variants are declared here, so that a config is checked
without importing torch; nmt.models.attention registers a class under each of these names (refusing one whose
settings are not the declared ones), and a variant defined elsewhere is declared when its class is registered.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from nmt.config.fields import Range, VariantSetting, read_settings
from nmt.errors import ConfigError

if TYPE_CHECKING:
    from nmt.config.model import ModelConfig

WINDOW = VariantSetting("window", int, 8, "transformer local/sparse attention: neighbours seen on each side.",
                        bounds=Range(1, 1_000_000))
STRIDE = VariantSetting("stride", int, 8, "transformer sparse attention: every stride-th position is also seen.",
                        bounds=Range(1, 1_000_000))

# The model key that names each family's variant; the variant's settings block is <key>_settings.
FAMILIES = {"rnn": "attention", "self": "self_attention"}

# Each family's variants and their settings, in the order every list of valid names follows.
_VARIANTS: dict[str, dict[str, tuple[VariantSetting, ...]]] = {
    "rnn": {"additive": (), "dot": (), "general": (), "scaled_dot": (), "none": ()},
    "self": {"full": (), "local": (WINDOW,), "sparse": (WINDOW, STRIDE), "linear": ()},
}


def declare_variant(family: str, name: str, settings: tuple[VariantSetting, ...]) -> None:
    """Make `name` a variant of `family` ("rnn" or "self") taking `settings`; a name already declared with
    other settings is refused (ValueError)."""
    declared = _VARIANTS[family].setdefault(name, settings)
    if declared != settings:
        raise ValueError(f"model.{FAMILIES[family]}: variant '{name}' is declared with the settings "
                         f"{[s.name for s in declared]}, not {[s.name for s in settings]}")


def withdraw_variant(family: str, name: str) -> None:
    """Make `name` no longer a variant of `family`."""
    del _VARIANTS[family][name]


def declared_variants(family: str) -> dict[str, tuple[VariantSetting, ...]]:
    """The names the family's model key takes, in declaration order, each with its settings."""
    return dict(_VARIANTS[family])


def family_of(arch: str) -> str:
    """The attention family an architecture builds its variant from."""
    return "rnn" if arch == "rnn" else "self"


def settings_of(cfg: ModelConfig, family: str) -> dict[str, Any]:
    """The checked settings of the configured variant of `family`, from its block: an unknown variant is a
    ConfigError listing the valid names, an unknown setting one naming the nearest valid key."""
    key, variants = FAMILIES[family], _VARIANTS[family]
    name = getattr(cfg, key)
    if name not in variants:
        raise ConfigError(f"model.{key}: {str(name)[:60]!r} is not one of {', '.join(variants)}")
    return read_settings(variants[name], getattr(cfg, f"{key}_settings"), f"model.{key}_settings")


def check_attention(cfg: ModelConfig) -> None:
    """Raise ConfigError unless the architecture's attention variant exists and its block holds valid settings
    of its own (the other family's keys are not read)."""
    settings_of(cfg, family_of(cfg.arch))


def variant_reference() -> str:
    """Markdown table of every declared variant's own settings, for the config reference."""
    lines = ["## Attention variant settings", "",
             "Each variant reads its own settings from its family's block: `model.self_attention_settings` "
             "(transformer) or `model.attention_settings` (rnn). A variant not listed has none.", "",
             "| block | variant | key | type | default | meaning |", "|---|---|---|---|---|---|"]
    for family, key in FAMILIES.items():
        for name, settings in _VARIANTS[family].items():
            for s in settings:
                doc = s.doc + (f" Allowed: {s.bounds.describe(s.type is int)}." if s.bounds else "")
                lines.append(f"| `model.{key}_settings` | `{name}` | `{s.name}` | {s.type.__name__} | "
                             f"`{s.default!r}` | {doc} |")
    return "\n".join(lines) + "\n"
