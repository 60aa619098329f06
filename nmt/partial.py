"""Outputs that survive a stopped run: each grows in NAME.partial, a record line after every finished chunk of
input (NAME.partial.jsonl) lets the same command go on from there, and the files take their names only when whole.
One process at a time writes an output: NAME.partial.lock holds its lock while it runs."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any

from nmt.errors import FileError
from nmt.fileio import cause, release_lock, take_lock, through_links

SUFFIX = ".partial"


def digest(lines: Sequence[str]) -> str:
    """The sha256 of lines as read (a chunk's identity in the record)."""
    hasher = hashlib.sha256()
    for line in lines:
        hasher.update(line.encode("utf-8", "surrogatepass") + b"\n")
    return hasher.hexdigest()


class PartialOutputs:
    """Output files written chunk by chunk through NAME.partial, resumable at the last finished chunk.

    The record's first line holds a key (the model, settings and anything else that decides the output); each
    further line one finished chunk: its input digest, the outputs' sizes after it and `extra` state. A rerun
    with the same key skips each chunk whose input is unchanged, cuts the files back to the last such chunk and
    appends from there; another key, a missing file or a changed chunk starts that part over. The outputs are
    locked from here to finish() or abandon(): FileError when another process is writing them.
    """

    def __init__(self, paths: Sequence[str | Path], key: Mapping[str, Any]) -> None:
        self.paths = [through_links(Path(p)) for p in paths]  # a link's target gets the output
        self.partials = [p.with_name(p.name + SUFFIX) for p in self.paths]
        self.record = self.partials[0].with_name(self.partials[0].name + ".jsonl")
        self.key = hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()
        self.lock_path = self.partials[0].with_name(self.partials[0].name + ".lock")
        try:
            self.lock, holder = take_lock(self.lock_path)
        except OSError as err:
            raise FileError(f"{self.lock_path}: cannot write ({cause(err)})") from None
        if self.lock is None:
            raise FileError(f"{self.paths[0]}: another process is translating into this output ({holder}); wait "
                            "for it to end, stop it, or choose another output")
        self.earlier, self.stale = self._earlier()
        self.done: list[dict[str, Any]] = []  # this run's finished chunks, the reused ones first
        self.handles: list[IO[str]] = []
        self.log: IO[str] | None = None

    def _earlier(self) -> tuple[list[dict[str, Any]], bool]:
        """The finished chunks an earlier run with this key recorded, and whether a record of another key or
        with missing files was found (it is then replaced)."""
        try:
            lines = self.record.read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError):
            return [], self.record.exists()
        chunks: list[dict[str, Any]] = []
        try:
            if json.loads(lines[0]).get("key") != self.key:
                return [], True
            for line in lines[1:]:
                chunks.append(json.loads(line))
        except (ValueError, IndexError, AttributeError):  # a torn last line: the chunks before it stand
            pass
        sizes = [p.stat().st_size if p.is_file() else -1 for p in self.partials]
        kept = []
        for chunk in chunks:  # a chunk stands only while every file still holds what it wrote
            if not isinstance(chunk, dict) or len(chunk.get("sizes", ())) != len(sizes) or any(
                    size < want for size, want in zip(sizes, chunk["sizes"])):
                break
            kept.append(chunk)
        return kept, not kept and bool(chunks)

    @property
    def lines(self) -> int:
        """Input lines finished, by this run and the earlier ones it goes on from."""
        return sum(chunk["lines"] for chunk in self.done)

    def finished(self, read: Sequence[str]) -> dict[str, Any] | None:
        """The record of the next chunk when an earlier run finished it on the same `read`, else None (and the
        earlier run's later chunks no longer count)."""
        index = len(self.done)
        if self.handles or index >= len(self.earlier) or self.earlier[index]["digest"] != digest(read):
            self.earlier = []
            return None
        self.done.append(self.earlier[index])
        return self.done[-1]

    def open(self) -> list[IO[str]]:
        """The partial files, cut back to the finished chunks and open for appending (opened once)."""
        if self.handles:
            return self.handles
        sizes = self.done[-1]["sizes"] if self.done else [0] * len(self.partials)
        try:
            for partial, size in zip(self.partials, sizes):
                handle = open(partial, "a", encoding="utf-8", newline="")
                self.handles.append(handle)
                handle.truncate(size)
            self.log = open(self.record, "w", encoding="utf-8")
            self.log.writelines(json.dumps(line) + "\n" for line in [{"key": self.key}, *self.done])
            self._sync(self.log)
        except OSError as err:
            self.close()
            raise FileError(f"{getattr(err, 'filename', None) or self.partials[0]}: cannot write ({cause(err)})") \
                from None
        return self.handles

    def commit(self, read: Sequence[str], lines: int, **extra: Any) -> None:
        """Record a chunk of `lines` input lines whose output is written to every handle, `read` all it read
        (lines, and what else decides their output): after this, a rerun need not redo it."""
        assert self.log is not None, "open() first"
        try:
            for handle in self.handles:
                self._sync(handle)
            chunk = {"lines": lines, "digest": digest(read),
                     "sizes": [os.fstat(h.fileno()).st_size for h in self.handles], **extra}
            self.log.write(json.dumps(chunk) + "\n")
            self._sync(self.log)
        except OSError as err:
            raise FileError(f"{self.partials[0]}: cannot write ({cause(err)})") from None
        self.done.append(chunk)

    def finish(self) -> None:
        """Give every file its name: the output is whole."""
        self.open()
        self.close()
        try:
            for partial, path in zip(self.partials, self.paths):
                os.replace(partial, path)
            self.record.unlink()
        except OSError as err:
            raise FileError(f"{err.filename or self.paths[0]}: cannot write ({cause(err)})") from None
        self.unlock()

    def abandon(self) -> bool:
        """After an error: keep the files when some chunk is finished (True), else remove what this run made."""
        kept = bool(self.done)
        if kept:
            self.close()
        elif self.log is not None:
            self.discard()
        self.unlock()
        return kept

    def discard(self) -> None:
        """Remove the partial files and the record: nothing of them is to be gone on from."""
        self.close()
        self.done = []
        for path in (*self.partials, self.record):
            path.unlink(missing_ok=True)

    def unlock(self) -> None:
        """Let another process write the outputs (the lock file goes)."""
        if self.lock is not None:
            release_lock(self.lock, self.lock_path, remove=True)
            self.lock = None

    def close(self) -> None:
        for handle in (*self.handles, self.log):
            if handle is not None and not handle.closed:
                handle.close()

    @staticmethod
    def _sync(handle: IO[str]) -> None:
        handle.flush()
        os.fsync(handle.fileno())
