"""The library's exception types, free of dependencies so that every layer can raise them, and how a message
quotes a value of any size (`short_repr`, `excerpt`)."""

from __future__ import annotations

import reprlib
from typing import Any


class NmtError(Exception):
    """Base of the errors nmt raises for bad input or a run that cannot go on; the message says what and where."""


class ConfigError(NmtError, ValueError):
    """A configuration problem, with the key and file at fault in its message."""


class DataError(NmtError, ValueError):
    """Bad or missing input data; the message names the file (and line) at fault."""


class TokenizerError(NmtError, ValueError):
    """Sentencepiece could not be trained or loaded; the message says why."""


class CheckpointError(NmtError):
    """A checkpoint that is missing, truncated, corrupt or incompatible."""


class FileError(NmtError):
    """A file that cannot be read or written, or must not be written; the message names the path and the cause."""


class RunLockError(NmtError):
    """The run folder is in use by another training."""


class TrainingError(NmtError):
    """A run that cannot go on (for example too many non-finite updates in a row)."""


class ExportError(NmtError):
    """A model that cannot be exported, or an export folder that cannot be used; the message says why."""


class MarkupError(NmtError, ValueError):
    """A document that cannot be read as the markup it was said to be (not well-formed XML, declared entities)."""


class TrainingInterrupted(NmtError):
    """Training stopped on Ctrl-C or SIGTERM after saving last.pt; the message says how to resume."""

    def __init__(self, message: str, signum: int) -> None:
        super().__init__(message)
        self.signum = signum


# ---------------------------------------------------------------------------------------------- messages

EXCERPT = 60  # characters of a long value that a message quotes
MESSAGE = 1000  # characters of a whole error message (a few paths and excerpts fit)


def excerpt(text: str, limit: int = EXCERPT) -> str:
    """`text`, or its first `limit` characters marked as cut and with the length of the whole."""
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text):,} characters in all)"


def short_repr(value: Any) -> str:
    """repr(value) as a short, marked excerpt, so that a message stays one line whatever the input holds."""
    if isinstance(value, str) and len(value) > EXCERPT:
        return f"{value[:EXCERPT]!r}... ({len(value):,} characters in all)"
    short = reprlib.Repr()
    short.maxlevel, short.maxstring, short.maxother, short.maxlong = 2, EXCERPT, EXCERPT, EXCERPT
    return excerpt(short.repr(value), 2 * EXCERPT)
