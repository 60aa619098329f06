"""The building blocks of the config sections: ConfigError, number ranges, and fields with their documentation."""

from __future__ import annotations

import dataclasses
import difflib
import math
from dataclasses import dataclass, field
from typing import Any, ClassVar

from nmt.errors import ConfigError, short_repr


@dataclass(frozen=True)
class Range:
    """The interval a number setting may take. NaN and infinity never lie inside."""

    low: float = -math.inf
    high: float = math.inf
    low_open: bool = False
    high_open: bool = False

    def __contains__(self, value: float) -> bool:
        try:
            if not math.isfinite(value):
                return False
        except OverflowError:  # an integer beyond any float: outside every range
            return False
        above = value > self.low if self.low_open else value >= self.low
        below = value < self.high if self.high_open else value <= self.high
        return above and below

    @staticmethod
    def _num(x: float) -> str:
        return str(int(x)) if float(x).is_integer() else f"{x:g}"

    def describe(self, integer: bool = False) -> str:
        """What is allowed, in words: 'a finite number > 0', 'an integer >= 1', 'a number in [0, 1)'."""
        kind = "an integer" if integer else "a finite number"
        if math.isinf(self.high):
            return f"{kind} {'>' if self.low_open else '>='} {self._num(self.low)}"
        if math.isinf(self.low):
            return f"{kind} {'<' if self.high_open else '<='} {self._num(self.high)}"
        opening, closing = "(" if self.low_open else "[", ")" if self.high_open else "]"
        interval = f"{opening}{self._num(self.low)}, {self._num(self.high)}{closing}"
        return f"{'an integer' if integer else 'a number'} in {interval}"

    def check(self, value: float, name: str) -> None:
        """Raise ConfigError naming `name`, the value and what is allowed, when `value` lies outside."""
        if value not in self:
            raise ConfigError(f"{name}: got {short_repr(value)}, allowed: {self.describe(isinstance(value, int))}")


POSITIVE = Range(0.0, low_open=True)
NON_NEGATIVE = Range(0.0)
AT_LEAST_ONE = Range(1.0)
FRACTION = Range(0.0, 1.0, high_open=True)  # shares that must leave something: dropout, smoothing, betas


def setting(default: Any, doc: str, choices: tuple[str, ...] | None = None, bounds: Range | None = None) -> Any:
    """A field with its single default, its documentation and, optionally, its valid choices or range."""
    meta = {"doc": doc, "choices": choices, "bounds": bounds}
    if isinstance(default, (list, dict)):
        return field(default_factory=lambda: type(default)(default), metadata=meta)
    return field(default=default, metadata=meta)


def _numbers(value: Any, name: str) -> list[tuple[str, Any]]:
    """(name, number) for a number, or for each number inside a list or mapping."""
    if isinstance(value, list):
        return [(f"{name}[{i}]", v) for i, v in enumerate(value)]
    if isinstance(value, dict):
        return [(f"{name}.{k}", v) for k, v in value.items()]
    return [(name, value)]


def check_ranges(section: Any, where: str) -> None:
    """Check every number of a config section against the range its field declares."""
    for f in dataclasses.fields(section):
        bounds = f.metadata.get("bounds")
        if bounds is None:
            continue
        for name, value in _numbers(getattr(section, f.name), f"{where}.{f.name}" if where else f.name):
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                bounds.check(value, name)


class Section:
    """Base of the config sections: numbers are range-checked whenever a section is built, in code or from YAML."""

    KEY: ClassVar[str] = ""

    def __post_init__(self) -> None:
        check_ranges(self, self.KEY)


@dataclass(frozen=True)
class VariantSetting:
    """One setting of a model variant (local attention's `window`): its type, single default, documentation,
    and valid choices or range. It lives in the variant's block (`model.self_attention_settings`)."""

    name: str
    type: type
    default: Any
    doc: str
    bounds: Range | None = None
    choices: tuple[str, ...] | None = None


def read_settings(settings: tuple[VariantSetting, ...], block: dict[str, Any], where: str) -> dict[str, Any]:
    """The checked values of `settings` in the variant's `block` named `where`, defaults for the missing ones."""
    known = {s.name: s for s in settings}
    for key in block:
        if key not in known:
            near = difflib.get_close_matches(str(key), list(known), n=1, cutoff=0.5)
            hint = f"did you mean '{near[0]}'?" if near else (
                f"valid: {', '.join(known)}" if known else "this variant has no settings")
            raise ConfigError(f"unknown key {where}.{str(key)[:60]} ({hint})")
    values = {}
    for s in settings:
        value, name = block.get(s.name, s.default), f"{where}.{s.name}"
        if s.type is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if not isinstance(value, s.type) or (s.type is not bool and isinstance(value, bool)):
            raise ConfigError(f"{name}: expected {s.type.__name__}, got {type(value).__name__} {str(value)[:60]!r}")
        if s.choices and value not in s.choices:
            raise ConfigError(f"{name}: {str(value)[:60]!r} is not one of {', '.join(s.choices)}")
        if s.bounds is not None and not isinstance(value, (str, bool)):
            s.bounds.check(value, name)
        values[s.name] = value
    return values
