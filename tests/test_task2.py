"""Multi30k as monolingual text: task 2 from the mirror or the download with checksums, and the leak filter that drops
every line equal (normalized) to a validation or test sentence of either side; one side of task 1's training pairs,
every line in order."""

from __future__ import annotations

import gzip
import hashlib
import os
from pathlib import Path

import pytest

from nmt import data
from nmt.cli import prepare_main
from nmt.config import DataConfig
from nmt.data import task2
from nmt.data.text import read_lines
from nmt.errors import DataError
from tests.conftest import fails_cleanly, tiny_config

MIRROR = Path(os.environ.get(data.MIRROR_ENV) or "/work/shared/data/multi30k")
TASK2_MIRROR = Path(os.environ.get(data.TASK2_MIRROR_ENV) or "/work/shared/data/multi30k-task2")


def quiet(_: str) -> None:
    pass


def gz(path: Path, lines: list[str]) -> str:
    path.write_bytes(gzip.compress("".join(line + "\n" for line in lines).encode()))
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture()
def mirrors(tmp_path, monkeypatch) -> tuple[Path, Path]:
    """Made-up task 1 held-out sets and task 2 training files, their checksums the official ones for this test;
    a German test2017 reference and an English val sentence are planted in task 2."""
    task1, t2 = tmp_path / "task1", tmp_path / "task2"
    task1.mkdir()
    t2.mkdir()
    for stem in task2.HELD_OUT.values():
        for side in ("de", "en"):
            text = {"de": [f"Ein {stem} Satz."], "en": [f"A {stem} sentence."]}[side]
            if stem == "test_2017_flickr" and side == "de":
                text.append("Zwei Hunde  spielen im Schnee.")
            if stem == "val" and side == "en":
                text.append("A dog runs.")
            name = f"{stem}.{side}.gz"
            monkeypatch.setitem(data.sources.MULTI30K_SHA256, name, gz(task1 / name, text))
    for n in range(1, 6):
        for side in ("de", "en"):
            lines = [f"{side} caption {n} {i}" for i in range(3)]
            if (n, side) == (2, "de"):
                lines[1] = " Zwei Hunde spielen im Schnee. "  # a test reference, other whitespace
            if (n, side) == (4, "en"):
                lines[0] = "A dog runs."
                lines[2] = "   "
            monkeypatch.setitem(task2.TASK2_SHA256, f"train.{n}.{side}.gz", gz(t2 / f"train.{n}.{side}.gz", lines))
    monkeypatch.delenv(data.MIRROR_ENV, raising=False)
    monkeypatch.delenv(data.TASK2_MIRROR_ENV, raising=False)
    return task1, t2


def test_the_leak_filter_drops_planted_test_references(mirrors, tmp_path):
    task1, t2 = mirrors
    cfg = DataConfig(dataset="multi30k", mirror=str(task1), task2_mirror=str(t2))
    de = task2.task2_monolingual(cfg, "de", quiet)
    assert (de.read, de.held_out, de.empty, len(de.lines)) == (15, 1, 0, 14)
    assert not any("Hunde" in line for line in de.lines)
    en = task2.task2_monolingual(cfg, "en", quiet)
    assert (en.read, en.held_out, en.empty, len(en.lines)) == (15, 1, 1, 13)
    assert en.lines[0] == "en caption 1 0" and "A dog runs." not in en.lines
    out = tmp_path / "out" / "task2.en.gz"
    out.parent.mkdir()
    assert task2.write_monolingual(cfg, "en", out, quiet).lines == read_lines(out)


def test_nmt_prepare_writes_the_filtered_text_and_says_what_it_dropped(mirrors, tmp_path, capsys):
    task1, t2 = mirrors
    config = tiny_config(tmp_path / "cfg", data={"dataset": "multi30k", "mirror": str(task1),
                                                 "task2_mirror": str(t2)})
    out = tmp_path / "task2.de"
    assert prepare_main([str(config), "--task2", "de", "--output", str(out)]) == 0
    assert "15 lines read, 14 kept, 0 empty and 1 equal to a validation or test sentence" in capsys.readouterr().out
    assert len(read_lines(out)) == 14


def test_a_missing_task2_file_is_one_line_and_writes_nothing(mirrors, tmp_path, capsys):
    task1, t2 = mirrors
    (t2 / "train.3.en.gz").unlink()
    config = tiny_config(tmp_path / "cfg", data={"dataset": "multi30k", "mirror": str(task1),
                                                 "task2_mirror": str(t2)})
    fails_cleanly(prepare_main, [str(config), "--task2", "en", "--output", str(tmp_path / "task2.en")], capsys,
                  tmp_path, "train.3.en.gz: file not found in the Multi30k task 2 mirror folder")


def test_an_empty_or_altered_task2_file_is_one_line(mirrors, tmp_path, monkeypatch):
    task1, t2 = mirrors
    cfg = DataConfig(dataset="multi30k", mirror=str(task1), task2_mirror=str(t2))
    monkeypatch.setitem(task2.TASK2_SHA256, "train.2.en.gz", gz(t2 / "train.2.en.gz", []))
    with pytest.raises(DataError, match=r"train\.2\.en\.gz: the file has no lines"):
        task2.task2_monolingual(cfg, "en", quiet)
    (t2 / "train.2.en.gz").write_bytes(b"changed")
    with pytest.raises(DataError, match=r"train\.2\.en\.gz: checksum mismatch .*replace it"):
        task2.task2_monolingual(cfg, "en", quiet)


def test_task2_downloads_once_verified_and_never_its_evaluation_files(mirrors, tmp_path, monkeypatch):
    task1, t2 = mirrors
    monkeypatch.setattr(task2, "TASK2_URL", t2.resolve().as_uri())
    cfg = DataConfig(dataset="multi30k", mirror=str(task1), download_dir=str(tmp_path / "dl"))
    messages: list[str] = []
    task2.task2_files(cfg, "de", messages.append)
    names = sorted(p.name for p in (tmp_path / "dl" / "multi30k-task2").iterdir())
    assert names == [f"train.{n}.de.gz" for n in range(1, 6)]
    assert sum("downloading" in m for m in messages) == 5
    messages.clear()
    task2.task2_files(cfg, "de", messages.append)
    assert not any("downloading" in m for m in messages)
    assert all(name.startswith("train.") for name in task2.TASK2_SHA256)  # task 2's val and test are unknown


def test_a_failed_task2_download_suggests_the_mirror_and_leaves_nothing(tmp_path, monkeypatch):
    monkeypatch.delenv(data.TASK2_MIRROR_ENV, raising=False)
    monkeypatch.setattr(task2, "TASK2_URL", (tmp_path / "nowhere").as_uri())
    cfg = DataConfig(dataset="multi30k", download_dir=str(tmp_path / "dl"))
    with pytest.raises(DataError, match=f"cannot download .*data.task2_mirror or {data.TASK2_MIRROR_ENV}"):
        task2.task2_files(cfg, "en", quiet)
    assert not [p for p in (tmp_path / "dl").rglob("*") if p.is_file()]


@pytest.fixture()
def task1_train(mirrors, monkeypatch) -> Path:
    """The made-up task 1 mirror with training files too: a blank line, odd whitespace and a line equal to a test
    reference, none of which the training side leaves out or changes."""
    task1, _ = mirrors
    lines = {"de": ["Ein Hund läuft.", "", "  Zwei Hunde  spielen im Schnee. ", "Ein Kind."],
             "en": ["A dog runs.", "", " Two dogs play in the snow.", "A child."]}
    for side, text in lines.items():
        monkeypatch.setitem(data.sources.MULTI30K_SHA256, f"train.{side}.gz", gz(task1 / f"train.{side}.gz", text))
    return task1


def test_the_task1_training_side_is_every_line_in_order(task1_train, tmp_path, monkeypatch):
    cfg = DataConfig(dataset="multi30k", mirror=str(task1_train), direction="en-de")  # either direction: same side
    official = read_lines(task1_train / "train.de.gz")
    assert task2.task1_training(cfg, "de", quiet) == official
    out = tmp_path / "train.de.gz"
    assert task2.write_task1_training(cfg, "de", out, quiet) == official
    assert gzip.decompress(out.read_bytes()).decode() == "".join(line + "\n" for line in official)
    english = task2.write_task1_training(cfg, "en", tmp_path / "train.en", quiet)
    assert english == read_lines(tmp_path / "train.en") and len(english) == len(official)
    monkeypatch.setitem(data.sources.MULTI30K_SHA256, "train.en.gz", gz(task1_train / "train.en.gz", []))
    with pytest.raises(DataError, match=r"train\.en\.gz: the file has no lines"):
        task2.task1_training(cfg, "en", quiet)


def test_nmt_prepare_writes_the_task1_training_side(task1_train, tmp_path, capsys):
    config = tiny_config(tmp_path / "cfg", data={"dataset": "multi30k", "mirror": str(task1_train)})
    out = tmp_path / "recipe" / "train.en"
    assert prepare_main([str(config), "--task1", "en", "--output", str(out)]) == 0
    assert f"multi30k task 1 train en: 4 lines written to {out}" in capsys.readouterr().out
    assert read_lines(out) == read_lines(task1_train / "train.en.gz")


def test_a_missing_task1_file_or_two_texts_at_once_is_one_line_and_writes_nothing(task1_train, tmp_path, capsys):
    config = tiny_config(tmp_path / "cfg", data={"dataset": "multi30k", "mirror": str(task1_train)})
    out = str(tmp_path / "train.de")
    fails_cleanly(prepare_main, [str(config), "--task1", "de", "--task2", "de", "--output", out], capsys, tmp_path,
                  "not allowed with argument", status=2)
    fails_cleanly(prepare_main, [str(config), "--task1", "de"], capsys, tmp_path, "--output goes with")
    (task1_train / "train.de.gz").unlink()
    fails_cleanly(prepare_main, [str(config), "--task1", "de", "--output", out], capsys, tmp_path,
                  "train.de.gz: file not found in the Multi30k mirror folder")


@pytest.mark.skipif(not (MIRROR.is_dir() and TASK2_MIRROR.is_dir()), reason="no Multi30k task 1 and 2 mirrors")
def test_the_official_task2_files_verify_and_lose_only_their_held_out_lines():
    cfg = DataConfig(dataset="multi30k", mirror=str(MIRROR), task2_mirror=str(TASK2_MIRROR))
    held = task2.held_out_lines(cfg, quiet)
    for language in ("en", "de"):
        text = task2.task2_monolingual(cfg, language, quiet)
        assert text.read == 145_000 and text.held_out > 0
        assert len(text.lines) + text.held_out + text.empty == text.read
        assert not held & set(data.text.normalize_lines(text.lines, False))


@pytest.mark.skipif(not MIRROR.is_dir(), reason="no Multi30k task 1 mirror")
def test_the_official_task1_training_sides_are_the_training_pairs():
    cfg = DataConfig(dataset="multi30k", mirror=str(MIRROR))
    german, english = (task2.task1_training(cfg, language, quiet) for language in ("de", "en"))
    assert len(german) == len(english) == 29_000
    assert (german, english) == data.text.read_pair(*data.fetch_multi30k(cfg, quiet, {"train": "train"})["train"])
