"""Sentence splitting for translation: a text cut into sentences and the whitespace around them, and joined back.

The segmenter is `sentencex` (Wikimedia's rule-based splitter with per-language abbreviation lists): on German it
keeps "z. B.", "Dr.", "3. Mai", "U.S. Navy" and a closing quote with their sentence. Modes, as DeepL's
`split_sentences`: `on` splits at line breaks and at sentence ends, `nonewlines` at sentence ends only (a line
break inside a sentence is whitespace), `off` keeps the whole text as one sentence.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import sentencex

from nmt.errors import ConfigError

MODES = ("on", "off", "nonewlines")
# What str.splitlines ends a line at; `nonewlines` shows the segmenter spaces in their place (same length).
LINE_BREAKS = "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"
_AS_SPACES = str.maketrans(LINE_BREAKS, " " * len(LINE_BREAKS))
WINDOW = 2000  # characters the segmenter reads at once (see _segments)


@dataclass(frozen=True)
class Pieces:
    """A text cut into sentences: `gaps[i]` is the whitespace before `sentences[i]` and `gaps[-1]` what follows the
    last, so `gaps[0] + sentences[0] + gaps[1] + ... + gaps[-1]` is the text itself."""

    sentences: tuple[str, ...]
    gaps: tuple[str, ...]

    def join(self, translations: Sequence[str]) -> str:
        """The text with each sentence replaced by its translation, whitespace and line breaks kept."""
        if len(translations) != len(self.sentences):
            raise ValueError(f"{len(translations)} translations for {len(self.sentences)} sentences")
        return "".join(gap + text for gap, text in zip(self.gaps, translations)) + self.gaps[-1]


def one_line(text: str) -> str:
    """`text` with each line break (what str.splitlines ends a line at) as a space."""
    return text.translate(_AS_SPACES)


def split_mode(value: str | bool) -> str:
    """A `split_sentences` setting as one of MODES (True: on, False: off); ConfigError naming the choices."""
    if isinstance(value, bool):
        return "on" if value else "off"
    if value not in MODES:
        raise ConfigError(f"split_sentences {value!r}: choose {', '.join(MODES)}")
    return value


def split(text: str, mode: str | bool = "on", *, language: str) -> Pieces:
    """`text` cut into sentences (each without surrounding whitespace) by the rules of `language` (a code such as
    de or en: the model's source language) and the whitespace between them; a text without words has no
    sentences. With mode `off` a text with words is one sentence, line breaks included."""
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
    """`block` cut where the segmenter ends its sentences; the pieces are `block`'s own characters, in order.

    The segmenter reads at most WINDOW characters at once (its time grows faster than its input on runs of
    unclosed quotes or of sentence ends without spaces): of each window all sentences but the last are kept, and
    the next window starts where that last one does; a window of one sentence is cut at its last whitespace."""
    text, cuts, start = one_line(block), [], 0
    while start < len(text):
        window = text[start:start + WINDOW]
        lengths = [len(sentence) for sentence in sentencex.segment(language, window)]
        last = start + WINDOW >= len(text)
        if not last:  # more follows: the window's last sentence may go on past it
            lengths = lengths[:-1] if sum(lengths[:-1]) else [_last_space(window)]
        for length in lengths:
            cuts.append(block[start:start + length])
            start += length
        if last:
            if start < len(text):  # the segmenter dropped characters at the end: they stay with the text
                cuts.append(block[start:])
            break
    return cuts


def _last_space(window: str) -> int:
    """The length of `window` up to and including its last whitespace (all of it when it has none)."""
    for end in range(len(window) - 1, 0, -1):
        if window[end].isspace():
            return end + 1
    return len(window)
