"""Overrides of config keys: the mapping `load_config` takes (`{"train.max_steps": 60}`), and the parser of the
command line's `--set key=value` strings into it."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import yaml

from nmt.errors import ConfigError, short_repr
from nmt.yamlsafe import strict_yaml

Overrides = Mapping[str, Any]  # dotted key -> Python value: {"train.max_steps": 60, "model.attention": "dot"}


def parse_overrides(texts: Iterable[str]) -> dict[str, Any]:
    """The mapping of `--set key.path=value` strings, each value read as YAML (3, 0.1, true, [1, 2] keep their
    types); a key given again moves to its last place."""
    overrides: dict[str, Any] = {}
    for text in texts:
        if "=" not in text:
            raise ConfigError(f"--set {short_repr(text)}: expected key=value, for example train.lr=3e-4")
        key, raw = text.split("=", 1)
        try:
            value = strict_yaml(raw) if raw.strip() else ""
        except yaml.YAMLError:
            value = raw
        overrides.pop(key.strip(), None)
        overrides[key.strip()] = value
    return overrides


def as_overrides(overrides: Overrides | None, function: str = "nmt.load_config") -> dict[str, Any]:
    """`overrides` as the mapping of dotted keys to values that `function` (named in the error) applies."""
    if overrides is None:
        return {}
    if not isinstance(overrides, Mapping):
        raise ConfigError(f"{function} overrides: expected a mapping such as {{'train.max_steps': 60}}, got "
                          f"{type(overrides).__name__} {short_repr(overrides)}")
    for key in overrides:
        if not isinstance(key, str) or not key:
            raise ConfigError(f"{function} overrides: a key must be a dotted config key such as 'train.max_steps', "
                              f"not {short_repr(key)}")
    return dict(overrides)
