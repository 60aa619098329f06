"""Rewrite the generated block of a Markdown file: the text between a start and an end marker."""

from __future__ import annotations

import sys
from pathlib import Path

from nmt.fileio import atomic_output


def replace_block(path: Path, start: str, end: str, body: str, title: str = "") -> None:
    """Put `body` between the markers of `path`; a missing file is created with `title` and empty markers."""
    text = path.read_text(encoding="utf-8") if path.exists() else f"{title}\n\n{start}\n{end}\n"
    if start not in text or end not in text or text.index(start) > text.index(end):
        print(f"error: {path}: the markers {start} and {end} are missing", file=sys.stderr)
        raise SystemExit(1)
    head, rest = text.split(start, 1)
    tail = rest.split(end, 1)[1]
    with atomic_output(path) as handle:  # a full disk leaves the file as it was, never cut short
        handle.write(f"{head}{start}\n{body}{end}{tail}")


def write_or_check(path: Path, start: str, end: str, body: str, check: bool, what: str, script: str) -> int:
    """With `check`, 0 when `path` already holds `body` between the markers (else 1, saying which script
    regenerates it); otherwise write it there. `what` names the block in the messages."""
    if check:
        current = f"{start}\n{body}{end}" in path.read_text(encoding="utf-8")
        if not current:
            print(f"{path}: {what}: stale; run `python scripts/{script}`", file=sys.stderr)
        return 0 if current else 1
    replace_block(path, start, end, body)
    print(f"{what} updated in {path}")
    return 0
