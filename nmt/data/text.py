"""Reading parallel text: whole small files, streamed chunks of large ones, and the one normalization."""

from __future__ import annotations

import codecs
import gzip
import itertools
import unicodedata
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from nmt.errors import DataError, FileError
from nmt.fileio import check_regular, read_regular


def normalize(line: str, lowercase: bool) -> str:
    """Unicode NFC, whitespace stripped and collapsed to single spaces, optionally lowercased."""
    line = " ".join(unicodedata.normalize("NFC", line).split())
    return line.lower() if lowercase else line


def normalize_lines(lines: list[str], lowercase: bool) -> list[str]:
    """`normalize` of each line (without newlines), with one NFC and one lowercasing call for all of them."""
    text = unicodedata.normalize("NFC", "\n".join(lines))  # a newline never composes, so this is per line
    if lowercase:
        text = text.lower()
    return [" ".join(line.split()) for line in text.split("\n")] if lines else []


def is_gzip(path: Path) -> bool:
    """Whether `path` is read as gzip (by its name, so the cache key can record how each file was read)."""
    return path.suffix == ".gz"


@contextmanager
def _reading(path: Path) -> Iterator[None]:
    """Turn the errors of opening or reading `path` (plain or gzipped) into one-line DataErrors."""
    try:
        yield
    except FileNotFoundError:
        raise DataError(f"{path}: file not found") from None
    except FileError as err:  # not a regular file
        raise DataError(str(err)) from None
    except (gzip.BadGzipFile, EOFError, zlib.error) as err:
        raise DataError(f"{path}: not a valid gzip file ({err})") from None
    except OSError as err:
        raise DataError(f"{path}: cannot read ({err.strerror or err})") from None


def read_lines(path: str | Path) -> list[str]:
    """Lines of a plain or gzipped (.gz) UTF-8 file, split on newlines only (so both sides stay aligned)."""
    path = Path(path)
    with _reading(path):
        raw = gzip.decompress(read_regular(path)) if is_gzip(path) else read_regular(path)
    if raw.startswith(codecs.BOM_UTF8):
        raw = raw[len(codecs.BOM_UTF8):]
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        line = raw.count(b"\n", 0, err.start) + 1
        raise DataError(f"{path}: line {line}: invalid UTF-8 ({err.reason})") from None
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    return lines


def read_pair(src: Path, tgt: Path) -> tuple[list[str], list[str]]:
    """Both sides of a small parallel corpus, checked to have the same number of lines."""
    src_lines, tgt_lines = read_lines(src), read_lines(tgt)
    if len(src_lines) != len(tgt_lines):
        raise DataError(f"{src} has {len(src_lines)} lines but {tgt} has {len(tgt_lines)}: "
                        "parallel files need one sentence per line on both sides")
    if not src_lines:
        raise DataError(f"{src}: the file has no lines")
    return src_lines, tgt_lines


def text_line(raw: bytes, path: str, number: int) -> str:
    """One line's bytes as text (without its newline); invalid UTF-8 names the file and line."""
    try:
        return raw.decode("utf-8").removesuffix("\n")
    except UnicodeDecodeError as err:
        raise DataError(f"{path}: line {number}: invalid UTF-8 ({err.reason})") from None


@dataclass
class RawChunk:
    """Consecutive lines of one corpus as undecoded bytes: two files side by side, or one tab-separated file."""

    paths: tuple[str, ...]
    first_line: int  # 1-based number of the chunk's first line
    src: list[bytes]
    tgt: list[bytes] | None  # None for a tab-separated corpus: each `src` line holds both sides

    def __len__(self) -> int:
        return len(self.src)


def _open(path: Path) -> BinaryIO:
    with _reading(path):
        check_regular(path)
        f = gzip.open(path, "rb") if is_gzip(path) else open(path, "rb")  # noqa: SIM115 - the caller closes
        head = f.peek(3)[:3] if hasattr(f, "peek") else b""
    if head == codecs.BOM_UTF8:
        f.read(3)
    return f


def _take(f: BinaryIO, path: Path, n: int) -> list[bytes]:
    with _reading(path):
        return list(itertools.islice(f, n))


def stream_chunks(paths: tuple[Path, ...], chunk_pairs: int) -> Iterator[RawChunk]:
    """Chunks of `chunk_pairs` lines; for two files, a line-count mismatch is reported as soon as one side ends."""
    names = tuple(str(p) for p in paths)
    files = [_open(p) for p in paths]
    try:
        first = 1
        while True:
            sides = [_take(f, p, chunk_pairs) for f, p in zip(files, paths, strict=True)]
            lengths = [len(s) for s in sides]
            if len(set(lengths)) > 1:
                short = lengths.index(min(lengths))
                last = first + min(lengths) - 1
                raise DataError(f"{names[1 - short]}: line {last + 1} has no counterpart in {names[short]}, "
                                f"which ends after {last} lines: parallel files need one sentence per line on "
                                "both sides")
            if first == 1 and not lengths[0]:
                raise DataError(f"{names[0]}: the file has no lines")
            if lengths[0]:
                yield RawChunk(names, first, sides[0], sides[1] if len(sides) == 2 else None)
            if lengths[0] < chunk_pairs:
                return
            first += chunk_pairs
    finally:
        for f in files:
            f.close()


def _text_lines(lines: list[bytes], path: str, first_line: int) -> list[str]:
    """Lines without their newlines; the whole chunk is decoded at once, line by line only to find an error."""
    try:
        text = b"".join(lines).decode("utf-8")
    except UnicodeDecodeError:
        for i, raw in enumerate(lines):
            text_line(raw, path, first_line + i)
        raise
    out = text.split("\n")
    if out[-1] == "":  # the chunk's last line ended with a newline
        out.pop()
    return out


def text_chunk(chunk: RawChunk) -> tuple[list[str], list[str]]:
    """The chunk's (source, target) lines as text; bad UTF-8 or a tab-separated line without one tab names the line."""
    src = _text_lines(chunk.src, chunk.paths[0], chunk.first_line)
    if chunk.tgt is not None:
        return src, _text_lines(chunk.tgt, chunk.paths[1], chunk.first_line)
    for i, line in enumerate(src):
        tabs = line.count("\t")
        if tabs != 1:
            raise DataError(f"{chunk.paths[0]}: line {chunk.first_line + i}: expected one tab between source and "
                            f"target, found {tabs}")
    cells = "\t".join(src).split("\t")
    return cells[0::2], cells[1::2]
