"""The library's exception types (dependency-free, for every layer) and quoting values in messages."""

from __future__ import annotations

import reprlib
from typing import Any


class NmtError(Exception):
    """Base of nmt's errors for bad input or a run that cannot go on."""


class ConfigError(NmtError, ValueError):
    """A configuration problem."""


class DataError(NmtError, ValueError):
    """Bad or missing input data."""


class TokenizerError(NmtError, ValueError):
    """Sentencepiece could not be trained or loaded."""


class CheckpointError(NmtError):
    """A missing, corrupt or incompatible checkpoint."""


class FileError(NmtError):
    """A file that cannot (or must not) be read or written."""


class RunLockError(NmtError):
    """The run folder is in use by another training."""


class TrainingError(NmtError):
    """A run that cannot go on."""


class ExportError(NmtError):
    """A model that cannot be exported, or an unusable export folder."""


class MarkupError(NmtError, ValueError):
    """A document that cannot be read as its markup format."""


class TrainingInterrupted(NmtError):
    """Training stopped on Ctrl-C or SIGTERM after saving last.pt."""

    def __init__(self, message: str, signum: int) -> None:
        super().__init__(message)
        self.signum = signum


# ---------------------------------------------------------------------------------------------- messages

EXCERPT = 60  # characters quoted of a long value
MESSAGE = 1000  # characters of a whole message


def excerpt(text: str, limit: int = EXCERPT) -> str:
    """`text`, or its first `limit` characters marked as cut."""
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text):,} characters in all)"


def short_repr(value: Any) -> str:
    """repr(value) as a short one-line excerpt."""
    if isinstance(value, str) and len(value) > EXCERPT:
        return f"{value[:EXCERPT]!r}... ({len(value):,} characters in all)"
    short = reprlib.Repr()
    short.maxlevel, short.maxstring, short.maxother, short.maxlong = 2, EXCERPT, EXCERPT, EXCERPT
    return excerpt(short.repr(value), 2 * EXCERPT)
