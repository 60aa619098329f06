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
    sampling: bool = setting(False, "Draw each token from the model's distribution (after `temperature`, `top_k` and "
                                    "`top_p`) instead of searching; needs `beam` 1 and `n_best` 1. For synthetic "
                                    "data such as back-translation.")
    temperature: float = setting(1.0, "Sampling: log-probabilities are divided by it (below 1: sharper, above 1: "
                                      "flatter).", bounds=Range(0.0, 100.0, low_open=True))
    top_k: int = setting(0, "Sampling: only the `top_k` most probable tokens are drawn from (0: all).",
                         bounds=Range(0, 1_000_000))
    top_p: float = setting(1.0, "Sampling (nucleus): only the most probable tokens whose probabilities sum to "
                                "`top_p` are drawn from (1: all).", bounds=Range(0.0, 1.0, low_open=True))
    seed: int = setting(0, "Sampling: the seed; the same seed, inputs and settings give the same outputs.",
                        bounds=Range(0, 2**31 - 1))

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
    if d.sampling and d.beam != 1:
        raise ConfigError(f"{label('beam')} ({d.beam}) must be 1 with {label('sampling')} (a sample is drawn one "
                          "token at a time)")


def decode_with(base: DecodeConfig, changes: dict[str, Any],
                label: Callable[[str], str] = lambda key: f"decode.{key}") -> DecodeConfig:
    """`base` with the non-None `changes`, checked; `label` names a setting (a key or a flag) in errors."""
    fields = {f.name: f for f in dataclasses.fields(DecodeConfig)}
    changes = {k: v for k, v in changes.items() if v is not None}
    for key, value in changes.items():
        if key not in fields:
            raise ConfigError(f"unknown decoding setting {key}")
        kind = {"bool": bool, "int": int}.get(str(fields[key].type))
        if kind is not None and (not isinstance(value, kind) or (kind is int and isinstance(value, bool))):
            expected = "true or false" if kind is bool else "an integer"
            raise ConfigError(f"{label(key)}: got {short_repr(value)}, expected {expected}")
        bounds = fields[key].metadata.get("bounds")
        if bounds is not None and isinstance(value, (int, float)):  # a word (length_penalty auto) is checked below
            bounds.check(value, label(key))
    cfg = dataclasses.replace(base, **changes)
    check_decode(cfg, label)
    return cfg
