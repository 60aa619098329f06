"""Cutting a text into sentences (with `sentencex`) and joining their translations back, whitespace kept.

Modes follow DeepL's `split_sentences`: `on` (line breaks and sentence ends), `nonewlines`, `off`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import sentencex

from nmt.errors import ConfigError

MODES = ("on", "off", "nonewlines")
# what str.splitlines ends a line at
LINE_BREAKS = "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"
_AS_SPACES = str.maketrans(LINE_BREAKS, " " * len(LINE_BREAKS))
WINDOW = 2000  # characters the segmenter reads at once


@dataclass(frozen=True)
class Pieces:
    """A text cut into sentences; `gaps[i]` is the whitespace before `sentences[i]`, `gaps[-1]` the tail."""

    sentences: tuple[str, ...]
    gaps: tuple[str, ...]

    def join(self, translations: Sequence[str]) -> str:
        """The text with each sentence replaced by its translation."""
        if len(translations) != len(self.sentences):
            raise ValueError(f"{len(translations)} translations for {len(self.sentences)} sentences")
        return "".join(gap + text for gap, text in zip(self.gaps, translations)) + self.gaps[-1]


def one_line(text: str) -> str:
    """`text` with each line break as a space."""
    return text.translate(_AS_SPACES)


def split_mode(value: str | bool) -> str:
    """A `split_sentences` setting as one of MODES (True: on, False: off)."""
    if isinstance(value, bool):
        return "on" if value else "off"
    if value not in MODES:
        raise ConfigError(f"split_sentences {value!r}: choose {', '.join(MODES)}")
    return value


def split(text: str, mode: str | bool = "on", *, language: str) -> Pieces:
    """`text` cut into stripped sentences by `language`'s rules, and the whitespace between them."""
    mode = split_mode(mode)
    if mode == "off":
        parts = [text]
    else:
        blocks = text.splitlines(keepends=True) if mode == "on" else [text]
        parts = [part for block in blocks for part in _segments(block, language)]
    sentences: list[str] = []
    gaps: list[str] = []
    gap = ""
    for part in parts:
        core = part.strip()
        if not core:
            gap += part
            continue
        lead = len(part) - len(part.lstrip())
        gaps.append(gap + part[:lead])
        sentences.append(core)
        gap = part[lead + len(core):]
    gaps.append(gap)
    return Pieces(tuple(sentences), tuple(gaps))


def _segments(block: str, language: str) -> list[str]:
    """`block` cut where the segmenter ends sentences. It reads WINDOW characters at a time (its time is
    superlinear on some inputs); each window's last sentence starts the next window."""
    text, cuts, start = one_line(block), [], 0
    while start < len(text):
        window = text[start:start + WINDOW]
        lengths = [len(sentence) for sentence in sentencex.segment(language, window)]
        last = start + WINDOW >= len(text)
        if not last:
            lengths = lengths[:-1] if sum(lengths[:-1]) else [_last_space(window)]
        for length in lengths:
            cuts.append(block[start:start + length])
            start += length
        if last:
            if start < len(text):  # characters the segmenter dropped
                cuts.append(block[start:])
            break
    return cuts


def _last_space(window: str) -> int:
    """The length of `window` through its last whitespace (all when none)."""
    for end in range(len(window) - 1, 0, -1):
        if window[end].isspace():
            return end + 1
    return len(window)
