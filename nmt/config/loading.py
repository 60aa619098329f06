"""From YAML (or a mapping, or a Config) and overrides to a checked Config, and back to YAML."""

from __future__ import annotations

import copy
import dataclasses
import difflib
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from nmt.config.overrides import Overrides, as_overrides
from nmt.config.sections import Config, validate_new_run
from nmt.errors import ConfigError, FileError, short_repr
from nmt.fileio import atomic_output, cause, read_regular
from nmt.yamlsafe import strict_yaml

ConfigSource = str | Path | Mapping[str, Any] | Config  # a YAML file, a mapping in its shape, or a Config
MAX_TEXT = 4096  # characters of a config string: a path as long as Linux allows (PATH_MAX)


def _suggest(key: str, valid: list[str]) -> str:
    near = difflib.get_close_matches(key, valid, n=1, cutoff=0.5)
    return f" (did you mean '{near[0]}'?)" if near else f" (valid keys: {', '.join(valid)})"


def _coerce(value: Any, hint: Any, where: str) -> Any:
    """Check `value` against the type `hint`, converting only where no information is lost."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        if value is None:
            return None
        *first, last = [a for a in typing.get_args(hint) if a is not type(None)]
        for arg in first:  # the first type that takes the value: `float | str` reads 2 as 2.0 and "auto" as text
            try:
                return _coerce(value, arg, where)
            except ConfigError:
                pass
        return _coerce(value, last, where)
    if dataclasses.is_dataclass(hint):
        return _build(hint, value, where)
    if origin is list:
        if not isinstance(value, list):
            raise ConfigError(f"{where}: expected a list, got {type(value).__name__} {short_repr(value)}")
        (item,) = typing.get_args(hint)
        return [_coerce(v, item, f"{where}[{i}]") for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: expected a mapping, got {type(value).__name__} {short_repr(value)}")
        key_t, val_t = typing.get_args(hint)
        return {_coerce(k, key_t, where): _coerce(v, val_t, f"{where}.{k}") for k, v in value.items()}
    if hint is bool:
        if isinstance(value, bool):
            return value
    elif hint is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif hint is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str):  # YAML 1.1 reads "3e-4" as a string
            try:
                return float(value)
            except ValueError:
                pass
    elif hint is str:
        if isinstance(value, str) and len(value) > MAX_TEXT:
            raise ConfigError(f"{where}: {short_repr(value)} is longer than {MAX_TEXT} characters")
        if isinstance(value, str):
            return value
    elif hint is Any:  # a variant's settings block: plain values here, each checked by its variant
        if isinstance(value, (bool, int, float, str)):
            return value
        raise ConfigError(f"{where}: expected a number, a word or true/false, got {type(value).__name__}")
    else:
        raise ConfigError(f"{where}: unsupported type {hint}")
    raise ConfigError(f"{where}: expected {hint.__name__}, got {type(value).__name__} {short_repr(value)}")


def _build(cls: type, raw: dict, where: str) -> Any:
    """Build dataclass `cls` from a mapping, rejecting unknown keys and wrong types."""
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: expected a mapping, got {type(raw).__name__}")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    kwargs = {}
    for key, value in raw.items():
        path = f"{where}.{key}" if where else str(key)
        if key not in fields:
            raise ConfigError(f"unknown key {short_repr(path)}{_suggest(str(key), list(fields))}")
        hint = hints[key]
        if dataclasses.is_dataclass(hint):
            kwargs[key] = _build(hint, value if value is not None else {}, path)
            continue
        kwargs[key] = _coerce(value, hint, path)
        choices = fields[key].metadata.get("choices")
        if choices and kwargs[key] not in choices:
            raise ConfigError(f"{path}: {short_repr(kwargs[key])} is not one of {', '.join(choices)}")
    return cls(**kwargs)


def _set_path(tree: dict, dotted: str, value: Any) -> None:
    """Set `value` at the dotted key; a missing or empty section becomes a mapping."""
    parts = dotted.split(".")
    node = tree
    for part in parts[:-1]:
        if node.get(part) is None:
            node[part] = {}
        node = node[part]
        if not isinstance(node, dict):
            raise ConfigError(f"override {short_repr(dotted)}: {short_repr(part)} is not a section")
    node[parts[-1]] = value


def config_from_dict(raw: dict) -> Config:
    """Build and validate a Config from a plain mapping (a Config validates itself when built)."""
    return _build(Config, dict(raw or {}), "")


def load_config(source: ConfigSource, overrides: Overrides | None = None) -> Config:
    """The checked Config of a YAML file, a mapping or a Config, with `overrides` (`{"train.max_steps": 60}`);
    ConfigError naming the key, file and line."""
    changes = as_overrides(overrides)
    if isinstance(source, Config):
        return _new_run(to_dict(source), changes)
    if isinstance(source, Mapping):
        return _new_run(copy.deepcopy(dict(source)), changes)
    if not isinstance(source, (str, Path)):
        raise ConfigError(f"config: expected a path, a mapping or a Config, got {type(source).__name__}")
    path = Path(source)
    try:
        text = read_regular(path).decode("utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{path}: config file not found") from None
    except OSError as err:
        raise ConfigError(f"{path}: cannot read config ({cause(err)})") from None
    except FileError as err:
        raise ConfigError(str(err)) from None
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: config is not UTF-8 text") from None
    try:
        raw = strict_yaml(text) or {}
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        line = f" line {mark.line + 1}" if mark else ""
        raise ConfigError(f"{path}{line}: invalid YAML ({getattr(err, 'problem', err)})") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: the top level must be a mapping of sections")
    try:
        return _new_run(raw, changes)
    except ConfigError as err:
        raise ConfigError(f"{path}: {err}") from None


def _new_run(raw: dict, overrides: dict[str, Any]) -> Config:
    """The config a run starts from: `raw` with the overrides applied, checked as a whole."""
    for key, value in overrides.items():
        _set_path(raw, key, value)
    cfg = config_from_dict(raw)
    validate_new_run(cfg)
    return cfg


def to_dict(cfg: Any) -> dict:
    """The config as plain data (for YAML, JSON and checkpoints)."""
    return dataclasses.asdict(cfg)


def save_config(cfg: Config, path: str | Path) -> None:
    """Write the resolved config as YAML, atomically."""
    with atomic_output(path) as handle:
        handle.write(yaml.safe_dump(to_dict(cfg), sort_keys=False))
