"""Multi30k as monolingual text files: task 2's training descriptions, without lines of task 1's validation or test
sets, and one side of task 1's training pairs, line for line (the sources a synthetic corpus translates).

Task 2's own validation and test files hold task 1's evaluation sentences and are never fetched.
"""

from __future__ import annotations

import gzip
import os
from dataclasses import dataclass
from pathlib import Path

from nmt.config import DataConfig
from nmt.data.sources import (
    MULTI30K_SPLITS,
    MULTI30K_TEST_SETS,
    Log,
    fetch_file,
    fetch_multi30k,
)
from nmt.data.text import normalize_lines, read_lines
from nmt.errors import DataError
from nmt.fileio import atomic_output

TASK2_URL = "https://raw.githubusercontent.com/multi30k/dataset/master/data/task2/raw"
TASK2_MIRROR_ENV = "NMT_TASK2_MIRROR"
LANGUAGES = ("en", "de")  # the languages of both tasks
TASK2_SHA256 = {
    "train.1.de.gz": "0002241b52aba5160c08d644ea0d64a9bf46a2dfffcf619c9e3cdaa55b357004",
    "train.1.en.gz": "a0e057f07a9733199c0d755d77f6d583dc6f40a3180734b1130a216e2fdf3a3b",
    "train.2.de.gz": "ac7c29258b90aec0b64d677c5bfc831fc402e6296d0aa9cc7a3433ddbff85c37",
    "train.2.en.gz": "d79dd70a9eafb2d1fe40151621278c4ae69b3c148c5052a53d7c7a41bf3ba023",
    "train.3.de.gz": "ec5e6508813814aa31311b34e26e24f903dd7701f8d0668313259b7f975d7aa0",
    "train.3.en.gz": "86e16fdcc699bcb6bca0f87c3cf1051f7de5ee3674dd588cedc5200194282749",
    "train.4.de.gz": "bcee8ac6eb47d8a7dc8cff47d9a0fbd80b4363cfda22021bacd297f9604221a4",
    "train.4.en.gz": "3771b84e010ad6197806d2a1188cb07c12149e3e0d178dd5966dee5763733686",
    "train.5.de.gz": "dccb0ca6ff25e0b1f0d385f59fb809184e0db89622d88371725e3ec46d43bfc0",
    "train.5.en.gz": "73988689307fe836994eae59735dc840c15da9775455fa76e6ed22606a042a91",
}
# Every split whose sentences no training text may hold: task 1's validation set and its four test sets.
HELD_OUT = {"val": MULTI30K_SPLITS["val"], "test": MULTI30K_SPLITS["test"]} | MULTI30K_TEST_SETS


@dataclass
class Monolingual:
    """One language of task 2: its lines in file order, and how many were dropped."""

    language: str
    lines: list[str]
    read: int
    empty: int  # blank after normalization
    held_out: int  # equal to a validation or test line

    def summary(self) -> str:
        return (f"multi30k task 2 {self.language}: {self.read} lines read, {len(self.lines)} kept, {self.empty} "
                f"empty and {self.held_out} equal to a validation or test sentence dropped")


def task2_files(data: DataConfig, language: str, log: Log = print) -> list[Path]:
    """The five training files of `language`, from the mirror if set, else downloaded; checksums verified."""
    if language not in LANGUAGES:
        raise DataError(f"multi30k task 2: language {language!r} is not one of {', '.join(LANGUAGES)}")
    mirror = data.task2_mirror or os.environ.get(TASK2_MIRROR_ENV, "")
    if mirror:
        log(f"multi30k task 2: reading from mirror {mirror}")
    hint = f"set data.task2_mirror or {TASK2_MIRROR_ENV} to a folder holding {', '.join(TASK2_SHA256)}"
    return [fetch_file(name, TASK2_SHA256[name], mirror, Path(data.download_dir) / "multi30k-task2", TASK2_URL,
                       "Multi30k task 2", hint, log) for name in (f"train.{n}.{language}.gz" for n in range(1, 6))]


def held_out_lines(data: DataConfig, log: Log = print) -> set[str]:
    """Both sides of task 1's validation and test sets, normalized."""
    held: set[str] = set()
    for pair in fetch_multi30k(data, log, HELD_OUT).values():
        for path in pair:
            held.update(normalize_lines(read_lines(path), data.lowercase))
    return held


def task2_monolingual(data: DataConfig, language: str, log: Log = print) -> Monolingual:
    """Task 2's `language` text, dropping (and counting) blank lines and those equal to a held-out line."""
    files = task2_files(data, language, log)
    held = held_out_lines(data, log)
    out = Monolingual(language, [], 0, 0, 0)
    for path in files:
        lines = read_lines(path)
        if not lines:
            raise DataError(f"{path}: the file has no lines")
        for line, norm in zip(lines, normalize_lines(lines, data.lowercase), strict=True):
            if not norm:
                out.empty += 1
            elif norm in held:
                out.held_out += 1
            else:
                out.lines.append(line)
        out.read += len(lines)
    return out


def write_monolingual(data: DataConfig, language: str, output: str | Path, log: Log = print) -> Monolingual:
    """`task2_monolingual` written atomically to `output` (gzipped for .gz)."""
    text = task2_monolingual(data, language, log)
    write_lines(text.lines, output)
    return text


def task1_training(data: DataConfig, language: str, log: Log = print) -> list[str]:
    """Task 1's `language` training lines as the training split reads them (data.mirror or the download), all of
    them in file order: line i is the `language` side of training pair i."""
    if language not in LANGUAGES:
        raise DataError(f"multi30k task 1: language {language!r} is not one of {', '.join(LANGUAGES)}")
    german, english = fetch_multi30k(data, log, {"train": MULTI30K_SPLITS["train"]})["train"]
    path = german if language == "de" else english
    lines = read_lines(path)
    if not lines:
        raise DataError(f"{path}: the file has no lines")
    return lines


def write_task1_training(data: DataConfig, language: str, output: str | Path, log: Log = print) -> list[str]:
    """`task1_training` written atomically to `output` (gzipped for .gz), for a translation of it to pair with."""
    lines = task1_training(data, language, log)
    write_lines(lines, output)
    return lines


def write_lines(lines: list[str], output: str | Path) -> None:
    """`lines` as a text file, one a line, written atomically (gzipped for .gz, reproducibly)."""
    output = Path(output)
    body = "".join(line + "\n" for line in lines).encode()
    if output.suffix == ".gz":
        body = gzip.compress(body, mtime=0)
    with atomic_output(output, "wb") as handle:
        handle.write(body)
