"""Typed configuration: one dataclass per YAML section, validated before any data is read.

fields.py holds the building blocks (Range, `setting`), model.py the model section, decoding.py the
decode section, sections.py the other sections, Config and the cross-field checks, loading.py YAML
in and out, reference.py the generated key reference.
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
from nmt.config.loading import config_from_dict, load_config, parse_override, save_config, to_dict
from nmt.config.model import ModelConfig, check_model
from nmt.config.reference import reference_markdown
from nmt.config.sections import FILES_KEYS, Config, DataConfig, TokenizerConfig, TrainConfig, validate, validate_new_run

__all__ = [
    "AT_LEAST_ONE",
    "AUTO",
    "FILES_KEYS",
    "FRACTION",
    "NON_NEGATIVE",
    "POSITIVE",
    "STOP_RULES",
    "TUNED_PENALTIES",
    "UNTUNED_PENALTY",
    "Config",
    "DataConfig",
    "DecodeConfig",
    "ModelConfig",
    "Range",
    "Section",
    "TokenizerConfig",
    "TrainConfig",
    "VariantSetting",
    "check_decode",
    "check_model",
    "check_ranges",
    "config_from_dict",
    "decode_with",
    "load_config",
    "parse_override",
    "read_settings",
    "reference_markdown",
    "save_config",
    "setting",
    "to_dict",
    "validate",
    "validate_new_run",
]
