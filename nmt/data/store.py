"""The id store: a flat id array and an offsets array per split and side, and complete cache folders.

A cache folder is complete only with its marker file, written last in a temporary folder renamed into place.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

import numpy as np

from nmt.fileio import new_mode
from nmt.processes import is_running

MARKER = "COMPLETE"
ID_DTYPE = np.int32
OFFSET_DTYPE = np.int64
CHECK_BLOCK = 1 << 22  # entries per block when a loaded store is checked


class ArrayWriter:
    """A 1-D .npy file written by appending pieces; the header's length is rewritten on `close`."""

    def __init__(self, path: Path, dtype: type) -> None:
        self.path, self.dtype, self.size = path, np.dtype(dtype), 0
        self._file: BinaryIO = open(path, "wb")  # noqa: SIM115 - closed in close()
        self._header_len = self._write_header()

    def _write_header(self) -> int:
        self._file.seek(0)
        header = {"descr": np.lib.format.dtype_to_descr(self.dtype), "fortran_order": False, "shape": (self.size,)}
        np.lib.format.write_array_header_1_0(self._file, header)
        return self._file.tell()

    def append(self, values: np.ndarray) -> None:
        self._file.write(np.ascontiguousarray(values, dtype=self.dtype).tobytes())
        self.size += len(values)

    def close(self) -> None:
        """Fix the header's shape (same length, as numpy pads it) and close the file."""
        end = self._file.tell()
        if self._write_header() != self._header_len:
            raise OSError(f"{self.path}: the .npy header changed length")
        self._file.seek(end)
        self._file.close()


class IdWriter:
    """Sentences of one split and side, appended as flat ids plus lengths."""

    def __init__(self, prefix: Path) -> None:
        self.ids = ArrayWriter(prefix.with_name(prefix.name + ".ids.npy"), ID_DTYPE)
        self.offsets = ArrayWriter(prefix.with_name(prefix.name + ".offsets.npy"), OFFSET_DTYPE)
        self.offsets.append(np.zeros(1, dtype=OFFSET_DTYPE))
        self._end = 0

    def append(self, flat: np.ndarray, lengths: np.ndarray) -> None:
        """Add sentences as concatenated ids and lengths."""
        self.ids.append(flat)
        self.offsets.append(self._end + np.cumsum(lengths, dtype=OFFSET_DTYPE))
        self._end += int(np.sum(lengths, dtype=OFFSET_DTYPE))

    def close(self) -> None:
        self.ids.close()
        self.offsets.close()


class IdFile:
    """The ids of a 1-D .npy file, read slice by slice with `os.pread`: unlike a memory map, the pages read do not
    grow this process's resident memory."""

    def __init__(self, path: Path) -> None:
        with open(path, "rb") as f:
            version = np.lib.format.read_magic(f)
            read = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
            shape, fortran, dtype = read(f)
            self.start = f.tell()
        if len(shape) != 1 or fortran or dtype.hasobject:
            raise ValueError(f"{path}: not a flat id array")
        self.path, self.dtype, self.size = path, dtype, shape[0]
        if os.path.getsize(path) < self.start + self.size * dtype.itemsize:
            raise ValueError(f"{path}: shorter than its header says")
        self._fd = os.open(path, os.O_RDONLY)

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, key: slice) -> np.ndarray:
        start, stop, step = key.indices(self.size)
        if step != 1:
            raise IndexError("IdFile reads contiguous slices only")
        count = max(0, stop - start)
        data = os.pread(self._fd, count * self.dtype.itemsize, self.start + start * self.dtype.itemsize)
        return np.frombuffer(data, dtype=self.dtype)  # (count,) read-only

    def __array__(self, dtype: np.dtype | None = None, copy: bool | None = None) -> np.ndarray:
        whole = self[:]
        return whole if dtype is None else whole.astype(dtype)

    def __getstate__(self) -> dict:
        """Pickled by path; reopened on arrival."""
        return {key: value for key, value in self.__dict__.items() if key != "_fd"}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._fd = os.open(self.path, os.O_RDONLY)

    def __del__(self) -> None:
        fd = getattr(self, "_fd", None)
        if fd is not None:
            os.close(fd)


class RaggedIds(Sequence[np.ndarray]):
    """A sequence of id arrays over one flat array and its offsets, read on demand."""

    def __init__(self, flat: np.ndarray | IdFile, offsets: np.ndarray) -> None:
        self.flat, self.offsets = flat, offsets

    @classmethod
    def from_lists(cls, ids: Sequence[Sequence[int]]) -> RaggedIds:
        """An in-memory store of the given sentences."""
        offsets = np.zeros(len(ids) + 1, dtype=OFFSET_DTYPE)
        np.cumsum([len(x) for x in ids], out=offsets[1:])
        flat = np.fromiter((i for x in ids for i in x), dtype=ID_DTYPE, count=int(offsets[-1]))
        return cls(flat, offsets)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, i: int) -> np.ndarray:  # type: ignore[override]
        if not -len(self) <= i < len(self):
            raise IndexError(i)
        i %= len(self)
        return self.flat[self.offsets[i]:self.offsets[i + 1]]

    def __iter__(self) -> Iterator[np.ndarray]:
        for i in range(len(self)):
            yield self[i]

    @property
    def lengths(self) -> np.ndarray:
        """Each sentence's length, as int32 (no int64 copy)."""
        out = np.empty(len(self), dtype=np.int32)
        np.subtract(self.offsets[1:], self.offsets[:-1], out=out, casting="unsafe")
        return out


def load_ids(prefix: Path, vocab_size: int) -> RaggedIds:
    """The store `IdWriter` wrote under `prefix`, checked in blocks; ValueError for offsets that do not rise from 0
    to the id count or ids outside [0, vocab_size)."""
    flat = IdFile(prefix.with_name(prefix.name + ".ids.npy"))
    offsets = np.load(prefix.with_name(prefix.name + ".offsets.npy"), mmap_mode="r", allow_pickle=False)
    if (flat.dtype != ID_DTYPE or offsets.dtype != OFFSET_DTYPE or offsets.ndim != 1 or len(offsets) < 1
            or offsets[0] != 0 or offsets[-1] != len(flat)):
        raise ValueError(f"{prefix}: ids and offsets disagree")
    for start in range(0, len(offsets) - 1, CHECK_BLOCK):
        block = offsets[start:start + CHECK_BLOCK + 1]  # (<= CHECK_BLOCK + 1,) int64, overlapping by one
        if np.any(block[1:] < block[:-1]):
            raise ValueError(f"{prefix.name}.offsets.npy: the offsets decrease")
    for start in range(0, len(flat), CHECK_BLOCK):
        ids = flat[start:start + CHECK_BLOCK]  # (<= CHECK_BLOCK,) int32
        if ids.min() < 0 or ids.max() >= vocab_size:
            raise ValueError(f"{prefix.name}.ids.npy: ids outside the vocabulary [0, {vocab_size})")
    return RaggedIds(flat, offsets)


def save_ids(prefix: Path, ids: Sequence[Sequence[int]]) -> None:
    """Write a whole split side at once."""
    store = RaggedIds.from_lists(ids)
    writer = IdWriter(prefix)
    writer.append(store.flat, store.lengths)
    writer.close()


@dataclass(eq=False)
class Split:
    """One split: subword ids (no BOS/EOS) and, except for training, the normalised text."""

    name: str
    src: Sequence[np.ndarray]
    tgt: Sequence[np.ndarray]
    src_raw: list[str] | None = field(default=None)
    tgt_raw: list[str] | None = field(default=None)

    def __len__(self) -> int:
        return len(self.src)

    def __getitem__(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        return self.src[i], self.tgt[i]

    @property
    def src_lens(self) -> np.ndarray:
        return _lengths(self.src)

    @property
    def tgt_lens(self) -> np.ndarray:
        return _lengths(self.tgt)


def _lengths(ids: Sequence[np.ndarray]) -> np.ndarray:
    if isinstance(ids, RaggedIds):
        return ids.lengths
    return np.fromiter(map(len, ids), dtype=np.int64, count=len(ids))


def write_text(path: Path, lines: list[str]) -> None:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")


def load_split(directory: Path, split: str, vocab_sizes: dict[str, int], text: bool) -> Split:
    """A split of a cache folder, checked against `vocab_sizes`, with its text if `text`; ValueError if damaged."""
    sides = {}
    for side in ("src", "tgt"):
        ids = load_ids(directory / f"{split}.{side}", vocab_sizes[side])
        raw = None
        if text:
            path = directory / f"{split}.{side}.txt"
            if not path.is_file():
                raise ValueError(f"{path.name} is missing")
            raw = path.read_text(encoding="utf-8").split("\n")[:-1]
            if len(raw) != len(ids):
                raise ValueError(f"{path}: ids and text disagree")
        sides[side] = (ids, raw)
    if len(sides["src"][0]) != len(sides["tgt"][0]):
        raise ValueError(f"{directory}: {split} has different numbers of source and target sentences")
    return Split(split, sides["src"][0], sides["tgt"][0], sides["src"][1], sides["tgt"][1])


# ---------------------------------------------------------------------------------------------- cache folders


def is_complete(folder: Path) -> bool:
    return (folder / MARKER).is_file()


def new_build_folder(cache: Path) -> Path:
    """A fresh dot-named temporary folder beside `cache`, removing those of dead processes."""

    cache.parent.mkdir(parents=True, exist_ok=True)
    for old in cache.parent.glob(f".{cache.name}.*.tmp"):
        pid = old.name.split(".")[2]
        if pid.isdigit() and not is_running(int(pid)):
            shutil.rmtree(old, ignore_errors=True)
    folder = Path(tempfile.mkdtemp(prefix=f".{cache.name}.{os.getpid()}.", suffix=".tmp", dir=cache.parent))
    folder.chmod(new_mode(folder=True))  # readable by whoever may read the cache folder
    return folder


def publish(tmp: Path, cache: Path, stats: dict) -> None:
    """Write the stats and the marker, flush everything, and rename `tmp` to `cache`."""
    (tmp / "stats.json").write_text(json.dumps(stats, indent=1), encoding="utf-8")
    for path in tmp.iterdir():
        with open(path, "rb") as f:
            os.fsync(f.fileno())
    marker = tmp / MARKER
    with open(marker, "w", encoding="utf-8") as f:
        f.write(json.dumps({"key": cache.name}) + "\n")
        f.flush()
        os.fsync(f.fileno())
    if cache.exists() and not is_complete(cache):
        shutil.rmtree(cache, ignore_errors=True)  # the remains of a build that did not finish
    try:
        tmp.rename(cache)
    except OSError:
        if not is_complete(cache):  # else another process wrote the same cache first; its content is identical
            raise
