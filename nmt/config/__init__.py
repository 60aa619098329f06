"""Typed configuration: one dataclass per YAML section, validated before any data is read.

fields.py holds the building blocks (Range, `setting`), model.py the model section, variants.py the attention
variants and their settings, decoding.py the decode section, sections.py the other sections, Config and the
cross-field checks, overrides.py the overrides (and the command line's `key=value` syntax), loading.py
`load_config` and YAML out, reference.py the generated key reference.
"""

from nmt.config.decoding import (
    AUTO,
    STOP_RULES,
    TUNED_PENALTIES,
    UNTUNED_PENALTY,
    DecodeConfig,
    check_decode,
    decode_with,
)
from nmt.config.fields import (
    AT_LEAST_ONE,
    FRACTION,
    NON_NEGATIVE,
    POSITIVE,
    Range,
    Section,
    VariantSetting,
    check_ranges,
    read_settings,
    setting,
)
from nmt.config.loading import ConfigSource, config_from_dict, load_config, save_config, to_dict
from nmt.config.model import ModelConfig, check_model
from nmt.config.overrides import Overrides, as_overrides, parse_overrides
from nmt.config.reference import reference_markdown
from nmt.config.sections import (
    FILES_KEYS,
    Config,
    DataConfig,
    TokenizerConfig,
    TrainConfig,
    absolute_paths,
    validate,
    validate_new_run,
)
from nmt.config.variants import (
    FAMILIES,
    STRIDE,
    WINDOW,
    check_attention,
    declare_variant,
    declared_variants,
    family_of,
    settings_of,
    variant_reference,
    withdraw_variant,
)

__all__ = [
    "AT_LEAST_ONE",
    "AUTO",
    "FAMILIES",
    "FILES_KEYS",
    "FRACTION",
    "NON_NEGATIVE",
    "POSITIVE",
    "STOP_RULES",
    "STRIDE",
    "TUNED_PENALTIES",
    "UNTUNED_PENALTY",
    "WINDOW",
    "Config",
    "ConfigSource",
    "DataConfig",
    "DecodeConfig",
    "ModelConfig",
    "Overrides",
    "Range",
    "Section",
    "TokenizerConfig",
    "TrainConfig",
    "VariantSetting",
    "absolute_paths",
    "as_overrides",
    "check_attention",
    "check_decode",
    "check_model",
    "check_ranges",
    "config_from_dict",
    "declare_variant",
    "declared_variants",
    "decode_with",
    "family_of",
    "load_config",
    "parse_overrides",
    "read_settings",
    "reference_markdown",
    "save_config",
    "setting",
    "settings_of",
    "to_dict",
    "validate",
    "validate_new_run",
    "variant_reference",
    "withdraw_variant",
]
