"""Reading, cleaning, caching and batching of parallel data, on tiny corpora in tmp_path."""

import gzip
import hashlib
import os
import pickle
import random
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from nmt import data
from nmt.config import Config, DataConfig, TokenizerConfig
from nmt.data import Split, TokenBatchSampler, collate, normalize, padding_fraction, prepare, read_lines
from nmt.data.batching import stream_batches
from nmt.errors import DataError
from nmt.tokenizer import BOS_ID, EOS_ID, PAD_ID

DE = "der die ein eine mann frau kind hund katze spielt läuft sitzt auf im park straße ball rot blau".split()
EN = "the the a a man woman child dog cat plays runs sits on in park street ball red blue".split()
MIRROR = Path(os.environ.get(data.MIRROR_ENV) or "/work/shared/data/multi30k")


def pairs(n: int, seed: int = 0) -> list[tuple[str, str]]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        idx = [rng.randrange(len(DE)) for _ in range(rng.randint(3, 7))]
        out.append((" ".join(DE[i] for i in idx), " ".join(EN[i] for i in idx)))
    return out


def write(path: Path, lines: list[str]) -> Path:
    text = "".join(line + "\n" for line in lines).encode("utf-8")
    path.write_bytes(gzip.compress(text) if path.suffix == ".gz" else text)
    return path


def corpus(root: Path, train: list[tuple[str, str]], ext: str = "") -> dict[str, str]:
    """Write train/val/test files and return the DataConfig keys naming them."""
    root.mkdir(parents=True, exist_ok=True)
    splits = {"train": train, "val": pairs(6, seed=1) + [("", "an empty source")], "test": pairs(5, seed=2)}
    keys = {}
    for split, rows in splits.items():
        keys[f"{split}_src"] = str(write(root / f"{split}.de{ext}", [s for s, _ in rows]))
        keys[f"{split}_tgt"] = str(write(root / f"{split}.en{ext}", [t for _, t in rows]))
    return keys


def config(tmp_path: Path, files: dict[str, str], vocab_size: int = 100, sample_pairs: int = 1_000_000,
           **cleaning) -> Config:
    d = DataConfig(dataset="files", cache_dir=str(tmp_path / "cache"), download_dir=str(tmp_path / "dl"),
                   **files, **cleaning)
    return Config(data=d, tokenizer=TokenizerConfig(vocab_size=vocab_size, sample_pairs=sample_pairs))


def quiet(_: str) -> None:
    pass


# ---------------------------------------------------------------------------------------------- reading


def test_read_lines_plain_and_gz_agree(tmp_path):
    lines = ["Ein Hund.", "  zwei\tKatzen ", "Linie\u2028mit Trenner", ""]
    assert read_lines(write(tmp_path / "a.de", lines)) == lines
    assert read_lines(write(tmp_path / "a.de.gz", lines)) == lines
    (tmp_path / "bom.de").write_bytes(b"\xef\xbb\xbfErste\r\nZweite")
    assert [normalize(x, False) for x in read_lines(tmp_path / "bom.de")] == ["Erste", "Zweite"]


def test_normalize():
    assert normalize("  Cafe\u0301 \t au\u00a0lait\r", lowercase=False) == "Caf\u00e9 au lait"
    assert normalize("Ein HUND", lowercase=True) == "ein hund"
    tricky = ["  Cafe\u0301 \t au\u00a0lait\r", "ΟΔΟΣ ΣΟΦΟΣ", "a\u2028b\u0301", "\u0301start", "", "   ", "İSTANBUL"]
    for lowercase in (False, True):
        assert data.text.normalize_lines(tricky, lowercase) == [normalize(x, lowercase) for x in tricky]


def test_cleaning_counts_and_unfiltered_eval_splits(tmp_path):
    good = pairs(40)
    bad = [("", "only target"), ("nur quelle", "   "), (" ".join(DE * 3), " ".join(EN * 3)),
           ("hund", "the big red dog runs in the park and the cat sits on the ball")]
    cfg = config(tmp_path, corpus(tmp_path / "c", good[:20] + bad + good[20:]), max_tokens=40)
    prep = prepare(cfg, log=quiet)
    s = prep.stats
    assert s["pairs_read"] == {"train": 44, "val": 7, "test": 5}
    assert s["pairs_kept"] == {"train": 40, "val": 7, "test": 5}
    assert s["dropped"] == {"empty": 2, "duplicate": 0, "too_long": 1, "ratio": 1}
    train = prep.splits["train"]
    assert [prep.tokenizer.detokenize(x) for x in train.src] == [src for src, _ in good]  # a joint vocabulary
    assert train.src_raw is None, "the training text is not kept in the cache"
    val = prep.splits["val"]
    assert val.src_raw[-1] == "" and len(val.src[-1]) == 0 and val.tgt_raw[-1] == "an empty source"
    assert s["vocab"]["joint"] and s["vocab"]["src"] == prep.tokenizer.vocab.src_size
    text = data.summary(prep)
    assert "44" in text and "padding" in text and "ratio" in text


def test_lowercase_and_gz_files(tmp_path):
    train = [(s.capitalize(), t.capitalize()) for s, t in pairs(30)]
    prep = prepare(config(tmp_path, corpus(tmp_path / "c", train, ext=".gz"), lowercase=True), log=quiet)
    assert prep.tokenizer.detokenize(prep.splits["train"].src[0]) == train[0][0].lower()
    assert prep.splits["train"].src[0].dtype == np.int32


def test_cache_hit_and_key_changes(tmp_path):
    files = corpus(tmp_path / "c", pairs(30))
    cfg = config(tmp_path, files)
    first = prepare(cfg, log=quiet)
    second = prepare(cfg, log=quiet)
    assert not first.stats["cache_hit"] and second.stats["cache_hit"]
    assert first.stats["cache_key"] == second.stats["cache_key"]
    assert second.tokenizer.identity == first.tokenizer.identity
    for name in ("train", "val", "test"):
        a, b = first.splits[name], second.splits[name]
        assert a.src_raw == b.src_raw and a.tgt_raw == b.tgt_raw
        assert all(np.array_equal(x, y) for x, y in zip(a.src, b.src, strict=True))
        assert all(np.array_equal(x, y) for x, y in zip(a.tgt, b.tgt, strict=True))
    assert not list((tmp_path / "cache").glob(".*")), "temporary cache folders are removed"

    hashes = {"train": ("a", "b")}
    base = data.cache_key(hashes, cfg)
    assert data.cache_key({"train": ("a", "c")}, cfg) != base
    assert data.cache_key(hashes, config(tmp_path, files, vocab_size=99)) != base
    assert data.cache_key(hashes, config(tmp_path, files, max_ratio=2.0)) != base
    assert data.cache_key(hashes, config(tmp_path, files, lowercase=True)) != base

    write(Path(files["val_tgt"]), [t for _, t in pairs(7, seed=9)])
    changed = prepare(cfg, log=quiet)
    assert not changed.stats["cache_hit"] and changed.stats["cache_key"] != first.stats["cache_key"]


def test_cache_key_records_how_files_are_read(tmp_path):
    files = corpus(tmp_path / "c", pairs(30))
    prepare(config(tmp_path, files), log=quiet)
    plain_named_gz = Path(files["train_src"] + ".gz")
    plain_named_gz.write_bytes(Path(files["train_src"]).read_bytes())
    with pytest.raises(DataError, match=r"train\.de\.gz: not a valid gzip file"):
        prepare(config(tmp_path, files | {"train_src": str(plain_named_gz)}), log=quiet)


def set_middle(path: Path, value: int) -> None:
    """Overwrite the middle entry of a .npy array (in a new file: the earlier `Prepared` still maps the old one)."""
    array = np.load(path)
    path.unlink()
    array[len(array) // 2] = value
    np.save(path, array)


@pytest.mark.parametrize("name,damage", [
    ("train.src.ids.npy", lambda p, vocab: set_middle(p, vocab)),  # one past the last id
    ("train.tgt.ids.npy", lambda p, vocab: set_middle(p, -1)),
    ("train.src.offsets.npy", lambda p, vocab: set_middle(p, 0)),  # offsets that go down
    ("stats.json", lambda p, vocab: p.write_text("{}")),
    ("val.src.txt", lambda p, vocab: p.unlink()),
])
def test_damaged_cache_is_one_data_error(tmp_path, name, damage):
    cfg = config(tmp_path, corpus(tmp_path / "c", pairs(50)))
    prep = prepare(cfg, log=quiet)
    folder = Path(cfg.data.cache_dir) / prep.stats["cache_key"]
    damage(folder / name, prep.tokenizer.vocab.src_size)
    message = rf"^{re.escape(str(folder))}: the data cache is damaged \({re.escape(name)}.*\); delete the folder"
    with pytest.raises(DataError, match=message):
        prepare(cfg, log=quiet)


# ---------------------------------------------------------------------------------------------- bad input


def test_missing_file(tmp_path):
    files = corpus(tmp_path / "c", pairs(10))
    files["val_tgt"] = str(tmp_path / "nowhere.en")
    with pytest.raises(DataError, match="nowhere.en: file not found"):
        prepare(config(tmp_path, files), log=quiet)


def test_line_count_mismatch(tmp_path):
    files = corpus(tmp_path / "c", pairs(10))
    write(Path(files["train_tgt"]), [t for _, t in pairs(9)])
    with pytest.raises(DataError, match=r"train\.de: line 10 has no counterpart in .*train\.en, which ends after 9"):
        prepare(config(tmp_path, files), log=quiet)
    write(Path(files["train_tgt"]), [t for _, t in pairs(25)])
    with pytest.raises(DataError, match=r"train\.en: line 11 has no counterpart in .*train\.de, which ends after 10"):
        prepare(config(tmp_path, files), log=quiet, chunk_pairs=4)


def test_invalid_utf8_names_file_and_line(tmp_path):
    files = corpus(tmp_path / "c", pairs(10))
    Path(files["train_src"]).write_bytes(b"ein hund\nzwei\nkaputt \xff\xfe\nvier\n")
    write(Path(files["train_tgt"]), ["a dog", "two", "broken", "four"])
    with pytest.raises(DataError, match=r"train\.de: line 3: invalid UTF-8"):
        prepare(config(tmp_path, files), log=quiet)


def test_invalid_gzip(tmp_path):
    (tmp_path / "x.de.gz").write_bytes(b"not gzip at all")
    with pytest.raises(DataError, match="x.de.gz: not a valid gzip file"):
        read_lines(tmp_path / "x.de.gz")


def test_empty_after_cleaning(tmp_path):
    files = corpus(tmp_path / "c", [("", "a dog"), ("ein hund", "")])
    with pytest.raises(DataError, match=r"train\.de: the training corpus is empty after cleaning"):
        prepare(config(tmp_path, files), log=quiet)


def test_vocab_too_small_is_a_data_error(tmp_path):
    with pytest.raises(DataError, match="vocab_size"):
        prepare(config(tmp_path, corpus(tmp_path / "c", pairs(10)), vocab_size=5), log=quiet)


def test_checksum_mismatch_in_download_dir(tmp_path, monkeypatch):
    monkeypatch.delenv(data.MIRROR_ENV, raising=False)  # the download folder, not a mirror, is what is checked
    bad = tmp_path / "dl" / "multi30k" / "train.de.gz"
    bad.parent.mkdir(parents=True)
    bad.write_bytes(b"truncated")
    with pytest.raises(DataError) as err:
        data.fetch_multi30k(DataConfig(dataset="multi30k", download_dir=str(tmp_path / "dl")), quiet)
    msg = str(err.value)
    assert str(bad) in msg and data.MULTI30K_SHA256["train.de.gz"] in msg and "delete it" in msg
    assert __import__("hashlib").sha256(b"truncated").hexdigest() in msg


def test_checksum_mismatch_in_mirror_and_missing_mirror_file(tmp_path, monkeypatch):
    (tmp_path / "train.de.gz").write_bytes(b"x")
    monkeypatch.setenv(data.MIRROR_ENV, str(tmp_path))
    with pytest.raises(DataError, match=r"train\.de\.gz: checksum mismatch \(expected sha256 [0-9a-f]{64}, got"):
        data.fetch_multi30k(DataConfig(dataset="multi30k"), quiet)
    with pytest.raises(DataError, match=r"empty/train\.de\.gz: file not found"):
        data.fetch_multi30k(DataConfig(dataset="multi30k", mirror=str(tmp_path / "empty")), quiet)


def test_download_failure_suggests_mirror(tmp_path, monkeypatch):
    monkeypatch.delenv(data.MIRROR_ENV, raising=False)
    monkeypatch.setattr(data.sources, "MULTI30K_URL", (tmp_path / "no-such-dir").as_uri())
    with pytest.raises(DataError, match="cannot download .*data.mirror"):
        data.fetch_multi30k(DataConfig(dataset="multi30k", download_dir=str(tmp_path / "dl")), quiet)
    assert not [p for p in (tmp_path / "dl").rglob("*") if p.is_file()], "no partial files are left"


# ---------------------------------------------------------------------------------------------- multi30k


needs_mirror = pytest.mark.skipif(not MIRROR.is_dir(), reason=f"no Multi30k mirror at {MIRROR}")


@needs_mirror
def test_multi30k_mirror_checksums_and_counts(monkeypatch):
    monkeypatch.setenv(data.MIRROR_ENV, "/nonexistent")
    files = data.fetch_multi30k(DataConfig(dataset="multi30k", mirror=str(MIRROR)), quiet)
    counts = {split: len(data.read_pair(src, tgt)[0]) for split, (src, tgt) in files.items()}
    assert counts == {"train": 29000, "val": 1014, "test": 1000}
    assert files["test"][0].name == "test_2016_flickr.de.gz"


@needs_mirror
def test_multi30k_download_is_atomic_and_verified(tmp_path, monkeypatch):
    monkeypatch.delenv(data.MIRROR_ENV, raising=False)
    monkeypatch.setattr(data.sources, "MULTI30K_URL", MIRROR.resolve().as_uri())
    cfg = DataConfig(dataset="multi30k", download_dir=str(tmp_path / "dl"))
    messages: list[str] = []
    data.fetch_multi30k(cfg, messages.append)
    names = sorted(p.name for p in (tmp_path / "dl" / "multi30k").iterdir())
    assert names == sorted(f"{stem}.{side}.gz" for stem in data.MULTI30K_SPLITS.values() for side in ("de", "en"))
    assert sum("downloading" in m for m in messages) == 6, "training fetches no other test set"
    messages.clear()
    data.fetch_multi30k(cfg, messages.append)
    assert not any("downloading" in m for m in messages)


@needs_mirror
def test_the_other_official_test_sets_are_known_by_name_and_checked(monkeypatch):
    from nmt.evaluation import split_pair

    monkeypatch.setenv(data.MIRROR_ENV, str(MIRROR))
    cfg = Config(data=DataConfig(dataset="multi30k"))
    counts = {split: len(split_pair(cfg, split)[0]) for split in data.MULTI30K_TEST_SETS}
    assert counts == {"test2017": 1000, "mscoco2017": 461, "test2018": 1071}
    assert len(split_pair(cfg, "test")[1]) == 1000  # test stays test2016


def test_another_test_set_is_fetched_only_when_asked_for_and_must_match_its_checksum(tmp_path, monkeypatch):
    from nmt.evaluation import split_pair

    mirror = tmp_path / "mirror"
    mirror.mkdir()
    for side, text in (("de", "Ein Hund.\nZwei Katzen.\n"), ("en", "A dog.\nTwo cats.\n")):
        (mirror / f"test_2018_flickr.{side}.gz").write_bytes(gzip.compress(text.encode()))
    digests = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in mirror.iterdir()}
    monkeypatch.setitem(data.sources.MULTI30K_SHA256, "test_2018_flickr.de.gz", digests["test_2018_flickr.de.gz"])
    monkeypatch.setitem(data.sources.MULTI30K_SHA256, "test_2018_flickr.en.gz", "0" * 64)
    cfg = Config(data=DataConfig(dataset="multi30k", mirror=str(mirror)))
    with pytest.raises(DataError, match=r"test_2018_flickr\.en\.gz: checksum mismatch"):
        split_pair(cfg, "test2018")
    monkeypatch.setitem(data.sources.MULTI30K_SHA256, "test_2018_flickr.en.gz", digests["test_2018_flickr.en.gz"])
    assert split_pair(cfg, "test2018") == (["Ein Hund.", "Zwei Katzen."], ["A dog.", "Two cats."])
    with pytest.raises(DataError, match=r"split 'test2019'.*test, test2017, mscoco2017, test2018"):
        split_pair(cfg, "test2019")
    with pytest.raises(DataError, match="train.de.gz: file not found"):  # the training files live elsewhere
        data.fetch_multi30k(cfg.data, quiet)


def test_sample_dataset(tmp_path):
    cfg = Config(data=DataConfig(dataset="sample", cache_dir=str(tmp_path / "cache")),
                 tokenizer=TokenizerConfig(vocab_size=500))
    prep = prepare(cfg, log=quiet)
    assert prep.stats["pairs_read"] == {"train": 700, "val": 80, "test": 80}
    assert len(prep.splits["val"]) == 80


# ---------------------------------------------------------------------------------------------- batching


def lengths(n: int = 400, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    src = rng.integers(1, 40, n)
    tgt = np.clip(src + rng.integers(-5, 6, n), 1, None)
    src[:3] = 300  # longer than the budget on their own
    return src, tgt


def epoch(sampler: TokenBatchSampler) -> list[list[int]]:
    return [list(b) for b in sampler]


def at_epoch(sampler: TokenBatchSampler, number: int) -> TokenBatchSampler:
    """`sampler` at the start of epoch `number`, as a checkpoint's sampler state puts it."""
    sampler.load_state_dict({**sampler.state_dict(), "epoch": number, "position": 0})
    return sampler


def one_epoch(split: Split, sampler: TokenBatchSampler) -> list:
    """The padded batches of one epoch, as the trainer streams them on the CPU."""
    return list(stream_batches(split, sampler, PAD_ID, torch.device("cpu"), max_epochs=sampler.epoch + 1))


def test_batches_respect_budget_and_cover_each_index_once():
    src, tgt = lengths()
    sampler = TokenBatchSampler(src, tgt, batch_tokens=200, seed=3)
    batches = epoch(sampler)
    assert len(batches) == len(sampler)
    for b in batches:
        cost = len(b) * max(src[b].max() + 1, tgt[b].max() + 1)
        assert cost <= 200 or len(b) == 1
    assert sum(len(b) == 1 and src[b[0]] == 300 for b in batches) == 3
    assert sorted(i for b in batches for i in b) == list(range(len(src)))
    assert padding_fraction(sampler, src, tgt) < 0.2


def test_padding_fraction_by_hand():
    sampler = TokenBatchSampler([2, 2], [1, 3], batch_tokens=100)
    # src tensor 2 x 3 all real; tgt tensor 2 x 4 with 2 + 4 real
    assert padding_fraction(sampler, [2, 2], [1, 3]) == pytest.approx(1 - 12 / 14)


def test_sampler_determinism_and_epochs():
    src, tgt = lengths()
    a, b = TokenBatchSampler(src, tgt, 300, seed=5), TokenBatchSampler(src, tgt, 300, seed=5)
    first = epoch(a)
    assert first == epoch(b)
    assert a.state_dict()["epoch"] == 1
    second = epoch(a)
    assert second != first and sorted(second) == sorted(first)
    assert epoch(at_epoch(TokenBatchSampler(src, tgt, 300, seed=5), 1)) == second  # the order is seed and epoch
    fixed = TokenBatchSampler(src, tgt, 300, shuffle=False)
    assert epoch(fixed) == epoch(fixed)


def test_mid_epoch_restore_yields_the_rest():
    src, tgt = lengths()
    a = at_epoch(TokenBatchSampler(src, tgt, 300, seed=2), 4)
    full = epoch(a)
    it = iter(at_epoch(a, 4))
    head = [next(it) for _ in range(7)]
    state = a.state_dict()
    assert state["epoch"] == 4 and state["position"] == 7
    b = TokenBatchSampler(src, tgt, 300, seed=2)
    b.load_state_dict(state)
    assert head + epoch(b) == full
    assert b.state_dict()["epoch"] == 5 and b.state_dict()["position"] == 0
    with pytest.raises(ValueError, match="num_batches"):
        TokenBatchSampler(src, tgt, 100, seed=2).load_state_dict(state)


@pytest.mark.parametrize("n", [400, 401])
def test_sharding_two_ranks(n):
    src, tgt = lengths(n)
    whole = TokenBatchSampler(src, tgt, 300, seed=1)
    ranks = [TokenBatchSampler(src, tgt, 300, seed=1, num_replicas=2, rank=r) for r in (0, 1)]
    shards = [epoch(r) for r in ranks]
    assert len(shards[0]) == len(shards[1]) == len(ranks[0]) == -(-len(whole.batches) // 2)
    union = {tuple(b) for s in shards for b in s}
    assert union == {tuple(b) for b in whole.batches}
    if len(whole.batches) % 2 == 0:
        assert not {tuple(b) for b in shards[0]} & {tuple(b) for b in shards[1]}


def test_collate_layout():
    batch = collate([(np.array([5, 6, 7], dtype=np.int32), np.array([8])), (np.array([9]), np.array([10, 11]))],
                    PAD_ID)
    assert batch.src.tolist() == [[5, 6, 7, EOS_ID], [9, EOS_ID, PAD_ID, PAD_ID]]
    assert batch.src_mask.tolist() == [[True] * 4, [True, True, False, False]]
    assert batch.tgt_in.tolist() == [[BOS_ID, 8, PAD_ID], [BOS_ID, 10, 11]]
    assert batch.tgt_out.tolist() == [[8, EOS_ID, PAD_ID], [10, 11, EOS_ID]]
    assert (batch.n_src_tokens, batch.n_tgt_tokens) == (6, 5)
    assert batch.src.dtype == torch.long and batch.to("cpu").tgt_out.dtype == torch.long


def test_streamed_batches_stay_within_budget():
    rng = np.random.default_rng(0)
    ids = [rng.integers(4, 50, rng.integers(1, 20)).astype(np.int32) for _ in range(60)]
    split = Split("train", ids, ids[::-1], [""] * 60, [""] * 60)
    sampler = TokenBatchSampler(split.src_lens, split.tgt_lens, batch_tokens=64, seed=1)
    batches = one_epoch(split, sampler)
    assert len(batches) == len(sampler) and sampler.state_dict()["epoch"] == 1
    assert sum(b.src.shape[0] for b in batches) == 60
    assert all(b.src.numel() <= 64 and b.tgt_in.numel() <= 64 or b.src.shape[0] == 1 for b in batches)


# ---------------------------------------------------------------------------------------------- large-corpus path


def store_arrays(split) -> list[np.ndarray]:
    return [split.src.flat, split.src.offsets, split.tgt.flat, split.tgt.offsets]


def test_chunked_pool_preparation_equals_one_piece(tmp_path):
    files = corpus(tmp_path / "c", pairs(3000) + [("", "gap"), ("hund", " ".join(EN * 2))])
    whole = prepare(config(tmp_path / "a", files, workers=1), log=quiet, chunk_pairs=10**6)
    chunked = prepare(config(tmp_path / "b", files, workers=2), log=quiet, chunk_pairs=97)
    assert whole.stats["cache_key"] == chunked.stats["cache_key"], "chunking and workers are not part of the key"
    assert chunked.tokenizer.identity == whole.tokenizer.identity
    for name in ("train", "val", "test"):
        for a, b in zip(store_arrays(whole.splits[name]), store_arrays(chunked.splits[name]), strict=True):
            assert np.array_equal(a, b)
    assert chunked.stats["dropped"] == whole.stats["dropped"] and whole.stats["dropped"]["empty"] == 1
    assert isinstance(chunked.splits["train"].src.offsets, np.memmap)
    ids = chunked.splits["train"].src.flat
    assert isinstance(ids, data.IdFile) and ids[5:5].shape == (0,)
    whole_ids = np.load(ids.path, allow_pickle=False)
    for a, b in ((0, 1), (3, 40), (len(ids) - 7, len(ids)), (10, 10**9)):
        assert np.array_equal(ids[a:b], whole_ids[a:b])
    assert np.array_equal(pickle.loads(pickle.dumps(ids))[3:40], whole_ids[3:40])


def test_memory_mapped_store_gives_the_batches_of_in_memory_ids(tmp_path):
    rows = pairs(2000)
    prep = prepare(config(tmp_path, corpus(tmp_path / "c", rows)), log=quiet)
    mapped = prep.splits["train"]
    assert [x.tolist() for x in mapped.src] == prep.tokenizer.encode_src([s for s, _ in rows])
    in_memory = Split("train", [np.array(x) for x in mapped.src], [np.array(x) for x in mapped.tgt])
    assert np.array_equal(in_memory.src_lens, mapped.src_lens)
    new_batches = one_epoch(mapped, TokenBatchSampler(mapped.src_lens, mapped.tgt_lens, 300, seed=7))
    old_batches = one_epoch(in_memory, TokenBatchSampler(in_memory.src_lens, in_memory.tgt_lens, 300, seed=7))
    count = 0
    for new, old in zip(new_batches, old_batches, strict=True):
        assert torch.equal(new.src, old.src) and torch.equal(new.tgt_out, old.tgt_out)
        count += 1
    assert count > 10


class CountingIds(data.RaggedIds):
    """A store that records which sentences were read."""

    def __init__(self, store: data.RaggedIds) -> None:
        super().__init__(store.flat, store.offsets)
        self.read: set[int] = set()

    def __getitem__(self, i: int) -> np.ndarray:
        self.read.add(i)
        return super().__getitem__(i)


def test_each_rank_reads_only_its_own_batches(tmp_path):
    prep = prepare(config(tmp_path, corpus(tmp_path / "c", pairs(600))), log=quiet)
    train = prep.splits["train"]
    for rank in (0, 1):
        src, tgt = CountingIds(train.src), CountingIds(train.tgt)
        counting = Split("train", src, tgt)
        one_epoch(counting, TokenBatchSampler(counting.src_lens, counting.tgt_lens, 200, seed=3, num_replicas=2,
                                              rank=rank))
        mine = {i for b in TokenBatchSampler(train.src_lens, train.tgt_lens, 200, seed=3, num_replicas=2,
                                             rank=rank) for i in b}
        assert src.read == tgt.read == mine and len(mine) < len(train)


def test_killed_preparation_leaves_no_usable_cache(tmp_path):
    import subprocess
    import sys

    files = corpus(tmp_path / "c", pairs(500))
    cfg = config(tmp_path, files, workers=1)
    script = (
        "import os, signal, sys\n"
        "import nmt.data.pipeline as p\n"
        "from nmt.config import Config, DataConfig, TokenizerConfig\n"
        "def die(*a, **k): os.kill(os.getpid(), signal.SIGKILL)\n"
        "p.IdWriter.append = die\n"
        f"p.prepare(Config(data=DataConfig(**{vars(cfg.data)!r}), tokenizer=TokenizerConfig(vocab_size=100)), "
        "log=lambda m: None)\n")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=120)
    assert proc.returncode == -9, proc.stderr.decode()
    cache = tmp_path / "cache"
    left = list(cache.iterdir())
    assert len(left) == 1 and left[0].name.startswith(".") and not (left[0] / "COMPLETE").exists()
    prep = prepare(cfg, log=quiet)
    assert not prep.stats["cache_hit"]
    assert [p.name for p in cache.iterdir()] == [prep.stats["cache_key"]], "the dead build's folder was removed"
    # A folder under the final name without the marker (a non-atomic copy, say) is rebuilt, never read.
    folder = cache / prep.stats["cache_key"]
    (folder / "COMPLETE").unlink()
    (folder / "train.src.ids.npy").unlink()  # a new file: `prep` still maps the old one
    (folder / "train.src.ids.npy").write_bytes(b"half")
    again = prepare(cfg, log=quiet)
    assert not again.stats["cache_hit"] and (folder / "COMPLETE").is_file()
    assert np.array_equal(again.splits["train"].src.flat, prep.splits["train"].src.flat)


def test_full_disk_is_one_line_and_leaves_nothing(tmp_path, monkeypatch, capsys):
    import errno

    from nmt.cli import prepare_main
    from tests.conftest import tiny_config

    def full(*_args):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(data.pipeline.IdWriter, "append", full)
    assert prepare_main([str(tiny_config(tmp_path, data={"cache_dir": str(tmp_path / "cache")}))]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "No space left on device" in err[0] and "data.cache_dir" in err[0], err
    assert not list((tmp_path / "cache").iterdir())


def test_several_corpora_and_tsv(tmp_path):
    first, second, third = pairs(300, seed=4), pairs(200, seed=5), pairs(100, seed=6)
    files = corpus(tmp_path / "c", first)
    root = tmp_path / "c"
    write(root / "more.de.gz", [s for s, _ in second])
    write(root / "more.en.gz", [t for _, t in second])
    write(root / "pairs.tsv", [f"{s}\t{t}" for s, t in third[:50]] + ["\t"] + [f"{s}\t{t}" for s, t in third[50:]])
    cfg = config(tmp_path, files, train_corpora=[[str(root / "more.de.gz"), str(root / "more.en.gz")],
                                                 [str(root / "pairs.tsv")]])
    prep = prepare(cfg, log=quiet)
    corpora = prep.stats["corpora"]
    assert [(c["name"], c["read"], c["kept"]) for c in corpora] == [
        ("train.de + train.en", 300, 300), ("more.de.gz + more.en.gz", 200, 200), ("pairs.tsv", 101, 100)]
    decoded = [prep.tokenizer.detokenize(x) for x in prep.splits["train"].src]
    assert decoded == [s for s, _ in first + second + third]
    assert "pairs.tsv 101 / 100" in data.summary(prep)
    assert "train" not in data.resolve_files(cfg), "several corpora are not one pair of files"
    only_tsv = config(tmp_path / "t", {k: v for k, v in files.items() if not k.startswith("train")},
                      train_corpora=[[str(root / "pairs.tsv")]])
    assert prepare(only_tsv, log=quiet).stats["pairs_kept"]["train"] == 100


@pytest.mark.parametrize("line,tabs", [("kein tab hier", 0), ("zwei\ttabs\thier", 2)])
def test_tsv_line_without_one_tab(tmp_path, line, tabs):
    files = corpus(tmp_path / "c", pairs(10))
    tsv = write(tmp_path / "c" / "bad.tsv", ["ein hund\ta dog"] * 6 + [line, "ende\tend"])
    cfg = config(tmp_path, files, train_corpora=[[str(tsv)]])
    with pytest.raises(DataError, match=rf"bad\.tsv: line 7: expected one tab between source and target, found {tabs}"):
        prepare(cfg, log=quiet, chunk_pairs=4)


def test_dedup_removes_exact_duplicates_only(tmp_path):
    base = pairs(200, seed=8)
    unique = list(dict.fromkeys(base))
    near = [(unique[0][0] + " ball", unique[0][1]), (unique[1][0], unique[1][1] + " red"), (unique[2][1], unique[2][0])]
    rows = base + [unique[3], unique[0], ("  " + unique[4][0], unique[4][1] + " ")] + near + [unique[3]]
    files = corpus(tmp_path / "c", rows)
    plain = prepare(config(tmp_path / "a", files), log=quiet)
    dedup = prepare(config(tmp_path / "b", files, dedup=True), log=quiet)
    assert plain.stats["pairs_kept"]["train"] == len(rows) and plain.stats["dropped"]["duplicate"] == 0
    decoded = list(zip((dedup.tokenizer.detokenize(x) for x in dedup.splits["train"].src),
                       (dedup.tokenizer.detokenize(x) for x in dedup.splits["train"].tgt), strict=True))
    assert decoded == unique + near, "first occurrences kept in order; pairs differing anywhere stay"
    assert dedup.stats["dropped"]["duplicate"] == len(rows) - len(unique) - len(near)
    assert dedup.stats["cache_key"] != plain.stats["cache_key"]


def reference_batches(src: np.ndarray, tgt: np.ndarray, budget: int, seed: int) -> list[list[int]]:
    """The element-by-element definition: seeded shuffle, stable sort by lengths, greedy cut."""
    perm = np.random.default_rng(seed).permutation(len(src))
    order = perm[np.lexsort((tgt[perm], src[perm]))].tolist()
    batches, start, longest = [], 0, 0
    for k, i in enumerate(order):
        longest = max(longest, max(src[i], tgt[i]) + 1)
        if k > start and (k - start + 1) * longest > budget:
            batches.append(order[start:k])
            start, longest = k, max(src[i], tgt[i]) + 1
    return batches + [order[start:]] if start < len(order) else batches


@pytest.mark.parametrize("n,budget,longest", [(3000, 300, 40), (2000, 4096, 300), (50, 10, 30), (1, 50, 5)])
def test_vectorized_batches_equal_the_greedy_definition(n, budget, longest):
    rng = np.random.default_rng(n)
    src, tgt = rng.integers(0, longest, n), rng.integers(0, longest, n)
    assert list(TokenBatchSampler(src, tgt, budget, seed=4).batches) == reference_batches(src, tgt, budget, 4)


def test_missing_corpus_in_train_corpora_is_one_line(tmp_path, capsys):
    from nmt.cli import prepare_main
    from tests.conftest import tiny_config

    files = corpus(tmp_path / "c", pairs(10))
    cfg = tiny_config(tmp_path, data={"dataset": "files", **files,
                                      "train_corpora": [[str(tmp_path / "nowhere.tsv")]]})
    assert prepare_main([str(cfg)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "data.train_corpora[0]" in err[0] and "nowhere.tsv" in err[0], err


def test_tokenizer_sample_is_drawn_after_dedup(tmp_path):
    unique = list(dict.fromkeys(pairs(400, seed=11)))
    files = corpus(tmp_path / "c", unique + unique[::-1])
    k = len(unique) // 2
    whole = prepare(config(tmp_path / "a", files, sample_pairs=k, dedup=True, workers=1), log=quiet,
                    chunk_pairs=10**6)
    chunked = prepare(config(tmp_path / "b", files, sample_pairs=k, dedup=True, workers=2), log=quiet, chunk_pairs=37)
    assert whole.stats["tokenizer_sample"]["pairs"] == k, "duplicates do not take places in the sample"
    assert chunked.stats["tokenizer_sample"] == whole.stats["tokenizer_sample"]
    assert chunked.tokenizer.identity == whole.tokenizer.identity
    for a, b in zip(store_arrays(whole.splits["train"]), store_arrays(chunked.splits["train"]), strict=True):
        assert np.array_equal(a, b)

    few = unique[:30]
    repeated = prepare(config(tmp_path / "r", corpus(tmp_path / "r", few * 20), sample_pairs=100, dedup=True),
                       log=quiet)
    expected = hashlib.sha256("".join(f"{s}\t{t}\n" for s, t in few).encode()).hexdigest()
    assert repeated.stats["tokenizer_sample"] == {"pairs": 30, "sha256": expected}, "every distinct pair, in order"
