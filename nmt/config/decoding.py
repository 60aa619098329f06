"""The decode section: search settings, the `auto` length penalty, and changing settings with a check."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

from nmt.config.fields import Range, Section, setting
from nmt.errors import ConfigError, short_repr

AUTO = "auto"  # decode.length_penalty chosen on the validation split
TUNED_PENALTIES = (0.6, 1.0, 1.5, 2.0)  # the penalties `auto` tries
UNTUNED_PENALTY = 1.0  # what `auto` decodes at until a tuned value is stored
STOP_RULES = ("finished", "bound")
# Far above any tuned penalty, low enough that ((5 + length) / 6) ** alpha stays finite for the longest output
PENALTIES = Range(0, 10)


@dataclass
class DecodeConfig(Section):
    """Search settings for validation, evaluation and translation."""

    KEY: ClassVar[str] = "decode"

    beam: int = setting(5, "Beam size (1: greedy).", bounds=Range(1, 1000))
    length_penalty: float | str = setting(
        AUTO, "GNMT length penalty alpha (0: raw log-probability), or `auto`: at the end of training the final model "
              f"is scored on the validation split at {', '.join(map(str, TUNED_PENALTIES))} and the best is stored "
              "in its checkpoint (`nmt-evaluate RUN --split val --tune-length-penalty` does it later); a model whose "
              f"stored value is still `auto` decodes at {UNTUNED_PENALTY}.", bounds=PENALTIES)
    stop: str = setting("finished", "When beam search ends a sentence: `finished` once `beam` hypotheses have ended "
                                    "(EOS), as CTranslate2, fairseq and Hugging Face do; `bound` only when no "
                                    "unfinished hypothesis could still beat the worst of them under the penalty "
                                    "(searches longer; at a large penalty it favours long outputs).", STOP_RULES)
    max_len_a: float = setting(1.5, "Maximum output length is a * source length + b (and at most what the model's "
                                    "positions cover).", bounds=Range(0.0, 1000.0))
    max_len_b: int = setting(10, "Maximum output length is a * source length + b.", bounds=Range(0.0, 100_000.0))
    batch_tokens: int = setting(2000, "Source-token budget per decoding batch.", bounds=Range(1, 1e8))
    n_best: int = setting(1, "Hypotheses returned per sentence.", bounds=Range(1, 1000))
    max_source_tokens: int = setting(250, "Longer sources are truncated to this many subwords before decoding (and "
                                          "to what the model's positions cover).", bounds=Range(1, 1_000_000))

    @property
    def alpha(self) -> float:
        """The penalty the search uses: `length_penalty`, or UNTUNED_PENALTY while it is still `auto`."""
        return UNTUNED_PENALTY if self.length_penalty == AUTO else float(self.length_penalty)


def check_decode(d: DecodeConfig, label: Callable[[str], str] = lambda key: f"decode.{key}") -> None:
    """The cross-field check of search settings (each field's range is checked when it is built)."""
    if isinstance(d.length_penalty, str) and d.length_penalty != AUTO:
        raise ConfigError(f"{label('length_penalty')}: got {short_repr(d.length_penalty)}, allowed: "
                          f"{PENALTIES.describe()} or {AUTO}")
    if d.stop not in STOP_RULES:
        raise ConfigError(f"{label('stop')}: {short_repr(d.stop)} is not one of {', '.join(STOP_RULES)}")
    if d.n_best > d.beam:
        raise ConfigError(f"{label('n_best')} ({d.n_best}) cannot exceed {label('beam')} ({d.beam})")


def decode_with(base: DecodeConfig, changes: dict[str, Any],
                label: Callable[[str], str] = lambda key: f"decode.{key}") -> DecodeConfig:
    """`base` with the non-None `changes`, checked; `label` names a setting (a key or a flag) in errors."""
    fields = {f.name: f for f in dataclasses.fields(DecodeConfig)}
    changes = {k: v for k, v in changes.items() if v is not None}
    for key, value in changes.items():
        if key not in fields:
            raise ConfigError(f"unknown decoding setting {key}")
        bounds = fields[key].metadata.get("bounds")
        if bounds is not None and isinstance(value, (int, float)):  # a word (length_penalty auto) is checked below
            bounds.check(value, label(key))
    cfg = dataclasses.replace(base, **changes)
    check_decode(cfg, label)
    return cfg
