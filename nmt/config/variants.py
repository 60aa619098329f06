"""Model settings that a model variant declares in its own module, and that config learns when it registers.

An attention variant with a setting of its own (local attention's `window`) declares a `VariantSetting`; when
the variant registers, `declare_settings` makes it a field of `ModelConfig`, a `model.<name>` key like any other.
Every reader of a section works from `dataclasses.fields` (unknown-key check, types, choices, ranges, saving,
the key reference), so a declared setting is loaded, validated, saved and documented the same way, without
config importing the models: the variants' modules call in, config never calls out. `nmt.models` registers
its variants on import, which every command and loader of a model does before it reads a config.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from nmt.config.fields import Range, setting
from nmt.config.model import ModelConfig

# The methods @dataclass writes from the field list; it never overwrites one, so they go before a rebuild.
_GENERATED = ("__init__", "__repr__", "__eq__", "__match_args__")
_FIXED = {f.name: f for f in dataclasses.fields(ModelConfig)}
_FIXED_HINTS = dict(ModelConfig.__annotations__)


@dataclass(frozen=True)
class VariantSetting:
    """One `model.<name>` key: its type, single default, documentation, and valid choices or range."""

    name: str
    type: type
    default: Any
    doc: str
    bounds: Range | None = None
    choices: tuple[str, ...] | None = None

    def of(self, cfg: ModelConfig) -> Any:
        """This setting's value in `cfg`."""
        return getattr(cfg, self.name)


@dataclass
class _Declared:
    setting: VariantSetting
    after: str  # the ModelConfig field it follows in the section (saved configs and the reference keep that order)
    owners: set[str]


_DECLARED: dict[str, _Declared] = {}


def declare_settings(owner: str, settings: Iterable[VariantSetting], after: str) -> None:
    """Make each of `owner`'s settings a ModelConfig field, placed after the field `after` and the settings
    declared after it before. A setting several owners share (one object, or equal ones) is declared once."""
    settings = tuple(settings)
    if after not in _FIXED:
        raise ValueError(f"{owner}: ModelConfig has no field '{after}' to place settings after")
    for new in settings:  # all checked before any is declared
        if new.name in _FIXED:
            raise ValueError(f"{owner}: model.{new.name} is already a ModelConfig field")
        known = _DECLARED.get(new.name)
        if known is not None and known.setting != new:
            raise ValueError(f"{owner}: model.{new.name} is already declared differently ({known.setting})")
    for new in settings:
        known = _DECLARED.get(new.name)
        if known is None:
            _DECLARED[new.name] = _Declared(new, after, {owner})
        else:
            known.owners.add(owner)
    _rebuild()


def withdraw_settings(owner: str) -> None:
    """Remove `owner` from its settings; a setting no other owner declared stops being a ModelConfig field."""
    for name, declared in list(_DECLARED.items()):
        declared.owners.discard(owner)
        if not declared.owners:
            del _DECLARED[name]
    _rebuild()


def declared_settings() -> list[VariantSetting]:
    """The declared settings, in their order among the ModelConfig fields."""
    return [_DECLARED[f.name].setting for f in dataclasses.fields(ModelConfig) if f.name in _DECLARED]


def _rebuild() -> None:
    """Run @dataclass over ModelConfig again with the fixed fields and the declared settings, in place: the class
    every module imported stays the same object."""
    hints: dict[str, Any] = {}
    for name, hint in _FIXED_HINTS.items():
        hints[name] = hint
        hints.update({key: d.setting.type for key, d in _DECLARED.items() if d.after == name})
    for name in _GENERATED:
        if name in ModelConfig.__dict__:
            delattr(ModelConfig, name)
    for f in dataclasses.fields(ModelConfig):
        if f.name not in hints and f.name in ModelConfig.__dict__:
            delattr(ModelConfig, f.name)
    for name in hints:
        if name in _FIXED:
            setattr(ModelConfig, name, _FIXED[name])
        elif name in _DECLARED:
            s = _DECLARED[name].setting
            setattr(ModelConfig, name, setting(s.default, s.doc, s.choices, s.bounds))
    ModelConfig.__annotations__ = hints
    dataclass(ModelConfig)
