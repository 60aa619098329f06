"""The numbers nmt-serve's flags set, each with the range its flag and the library accept (an unbounded number
either overflows somewhere or holds the server up: a wait of 1e300 ms is a timeout no clock can take)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from nmt.config import Range

WAIT_MS = Range(0, 10_000)  # how long a batch may wait for more requests, in milliseconds
ESCAPED_CHAR = 12  # bytes of one character at most in JSON: an escaped surrogate pair, \ud83d\ude00 for one emoji


@dataclass(frozen=True)
class Limits:
    """What one request may ask for; larger requests get 413, a full queue 503. Each limit must lie in its range
    (BOUNDS), checked when the limits are made."""

    max_sentences: int = 64
    max_chars: int = 20_000  # all sentences of a request together
    max_beam: int = 16
    max_queue: int = 1024  # requests waiting for the decoder

    BOUNDS: ClassVar[dict[str, Range]] = {"max_sentences": Range(1, 100_000), "max_chars": Range(1, 10_000_000),
                                          "max_beam": Range(1, 1000), "max_queue": Range(1, 1_000_000)}

    def __post_init__(self) -> None:
        for key, bounds in self.BOUNDS.items():
            bounds.check(getattr(self, key), key)

    @property
    def max_body_bytes(self) -> int:
        """The body limit, in bytes: room for max_chars characters in any JSON encoding of them (each escaped, as
        ESCAPED_CHAR bytes), the quotes and separators of max_sentences strings, and the settings."""
        return ESCAPED_CHAR * self.max_chars + 16 * self.max_sentences + 4096


@dataclass(frozen=True)
class HeaderLimits:
    """The most header lines, and bytes of names and values together, that a request may send (more: 431)."""

    count: int = 100
    size: int = 16 * 1024

    BOUNDS: ClassVar[dict[str, Range]] = {"count": Range(1, 10_000), "size": Range(1, 1 << 20)}

    def __post_init__(self) -> None:
        for key, bounds in self.BOUNDS.items():
            bounds.check(getattr(self, key), f"header {key}")
