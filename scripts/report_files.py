"""Reading the report files the README tables are made from: one line naming the file for each problem."""

from __future__ import annotations

import contextlib
import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from nmt.fileio import FileError, describe_os_error


def read_json(path: Path) -> dict[str, Any]:
    """The JSON object in `path`; a missing, unreadable or malformed file is a FileError naming it."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as err:
        raise FileError(describe_os_error(err)) from None
    except ValueError as err:  # not JSON, or not UTF-8
        raise FileError(f"{path}: not valid JSON ({err})") from None
    if not isinstance(data, dict):
        raise FileError(f"{path}: holds a JSON {type(data).__name__}, not an object")
    return data


@contextlib.contextmanager
def blamed(path: Path) -> Iterator[None]:
    """Report a missing or mistyped field met in the block as a FileError naming `path`."""
    try:
        yield
    except KeyError as err:
        raise FileError(f"{path}: no field {err}") from None
    except ValueError as err:
        raise FileError(f"{path}: {err}") from None
    except (TypeError, AttributeError, IndexError) as err:
        raise FileError(f"{path}: a field is not what this script reads ({err})") from None


def finite(value: Any, name: str) -> float:
    """`value` when it is a finite number, else a ValueError saying what `name` holds instead."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{name} is {json.dumps(value)}, not a finite number")
    return value
