"""nmt-serve's numeric limits, each bounded (an unbounded one overflows or holds the server up)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from nmt.config import Range

WAIT_MS = Range(0, 10_000)  # a batch's wait for more requests
ESCAPED_CHAR = 12  # most JSON bytes per character: an escaped surrogate pair


@dataclass(frozen=True)
class Limits:
    """What one request may ask for (more: 413; a full queue: 503), each within BOUNDS."""

    max_sentences: int = 64
    max_chars: int = 20_000  # per request
    max_beam: int = 16
    max_queue: int = 1024

    BOUNDS: ClassVar[dict[str, Range]] = {"max_sentences": Range(1, 100_000), "max_chars": Range(1, 10_000_000),
                                          "max_beam": Range(1, 1000), "max_queue": Range(1, 1_000_000)}

    def __post_init__(self) -> None:
        for key, bounds in self.BOUNDS.items():
            bounds.check(getattr(self, key), key)

    @property
    def max_body_bytes(self) -> int:
        """Room for max_chars escaped characters in max_sentences JSON strings, and the settings."""
        return ESCAPED_CHAR * self.max_chars + 16 * self.max_sentences + 4096


@dataclass(frozen=True)
class HeaderLimits:
    """The most header lines and bytes a request may send (more: 431)."""

    count: int = 100
    size: int = 16 * 1024

    BOUNDS: ClassVar[dict[str, Range]] = {"count": Range(1, 10_000), "size": Range(1, 1 << 20)}

    def __post_init__(self) -> None:
        for key, bounds in self.BOUNDS.items():
            bounds.check(getattr(self, key), f"header {key}")
