"""Streaming preparation: normalize and sample, train the tokenizer on the sample, encode, cache.

The training text is read twice in chunks that a pool of worker processes handles in order. The first pass
normalizes, drops empty pairs, writes the normalized pairs to a temporary file, marks repeated pairs as they arrive
(with data.dedup, by an 8-byte hash per distinct pair) and keeps a seeded reservoir sample of the remaining pairs
for the tokenizer. The second pass encodes the normalized file, drops the marked duplicates, applies the length
filters and appends the ids to the memory-mapped store. Memory stays bounded by the chunk size, the sample and a
few bytes per pair.
"""

from __future__ import annotations

import dataclasses
import errno
import hashlib
import itertools
import shutil
from collections.abc import Iterable, Iterator
from concurrent.futures import Executor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from tqdm import tqdm

from nmt.config import Config, DataConfig
from nmt.data.cache import DROP_REASONS, cache_key, file_identity, open_cache
from nmt.data.pool import ordered, worker_count, worker_pool
from nmt.data.sampling import FirstSeen, Reservoir
from nmt.data.sources import Corpus, Log, resolve_corpora
from nmt.data.store import IdWriter, Split, is_complete, new_build_folder, publish, save_ids, write_text
from nmt.data.text import RawChunk, normalize, normalize_lines, read_pair, stream_chunks, text_chunk
from nmt.errors import DataError, TokenizerError
from nmt.tokenizer import Tokenizer

CHUNK_PAIRS = 20_000
NORMALIZED = "train.normalized.tsv"
SAMPLE = "tokenizer_sample.tsv"


@dataclass
class Prepared:
    """Everything training needs from the data: tokenizer, splits and what cleaning did."""

    tokenizer: Tokenizer
    splits: dict[str, Split]
    stats: dict
    config: Config


# ---------------------------------------------------------------------------------------------- worker tasks


@dataclass
class Normalized:
    """A chunk after the first pass: its non-empty normalized pairs as "source<TAB>target" lines."""

    blob: bytes
    pairs: int
    read: int
    hashes: np.ndarray | None  # (pairs,) uint64, with data.dedup


def normalize_chunk(chunk: RawChunk, lowercase: bool, dedup: bool) -> Normalized:
    """Decode and normalize a chunk and drop pairs with an empty side."""
    src, tgt = text_chunk(chunk)
    # Normalized text has no tabs or newlines (whitespace is collapsed to single spaces), so TSV is lossless.
    lines = [f"{s}\t{t}" for s, t in zip(normalize_lines(src, lowercase), normalize_lines(tgt, lowercase),
                                         strict=True) if s and t]
    hashes = None
    if dedup:
        digests = b"".join(hashlib.blake2b(line.encode(), digest_size=8).digest() for line in lines)
        hashes = np.frombuffer(digests, dtype="<u8").copy()
    return Normalized("".join(line + "\n" for line in lines).encode(), len(lines), len(chunk), hashes)


@dataclass
class Encoded:
    """A chunk after the second pass: the kept pairs' ids, flat, with each sentence's length."""

    src: np.ndarray
    src_lens: np.ndarray
    tgt: np.ndarray
    tgt_lens: np.ndarray
    dropped: dict[str, int]


_TOKENIZERS: dict[str, Tokenizer] = {}


def _flat(ids: list[list[int]], lens: np.ndarray) -> np.ndarray:
    return np.fromiter(itertools.chain.from_iterable(ids), dtype=np.int32, count=int(lens.sum()))


def encode_chunk(blob: bytes, keep: np.ndarray | None, tokenizer_dir: str, d: DataConfig,
                 threads: int = 1, tag_id: int | None = None) -> Encoded:
    """Encode normalized pairs (each source after `tag_id`, a tagged corpus' reserved symbol), drop duplicates
    (`keep` False) and pairs failing the length and ratio filters."""
    tok = _TOKENIZERS.get(tokenizer_dir) or _TOKENIZERS.setdefault(tokenizer_dir, Tokenizer.load(tokenizer_dir))
    cells = blob.decode("utf-8").replace("\n", "\t").split("\t")[:-1]  # source, target, source, ...
    src, tgt = cells[0::2], cells[1::2]
    dropped = dict.fromkeys(("duplicate", "too_long", "ratio"), 0)
    if keep is not None:
        dropped["duplicate"] = int(len(src) - keep.sum())
        src, tgt = list(itertools.compress(src, keep.tolist())), list(itertools.compress(tgt, keep.tolist()))
    src_ids = tok.encode_src(src, threads)
    if tag_id is not None:
        src_ids = [[tag_id, *ids] for ids in src_ids]
    tgt_ids = tok.encode_tgt(tgt, threads)
    src_lens = np.fromiter(map(len, src_ids), dtype=np.int64, count=len(src_ids))
    tgt_lens = np.fromiter(map(len, tgt_ids), dtype=np.int64, count=len(tgt_ids))
    long, short = np.maximum(src_lens, tgt_lens), np.minimum(src_lens, tgt_lens)
    too_long = long > d.max_tokens
    ratio = ~too_long & (long >= d.ratio_min_len) & (long / np.maximum(short, 1) > d.max_ratio)
    dropped["too_long"], dropped["ratio"] = int(too_long.sum()), int(ratio.sum())
    kept = ~(too_long | ratio)
    src_flat, tgt_flat = _flat(src_ids, src_lens), _flat(tgt_ids, tgt_lens)
    return Encoded(src_flat[np.repeat(kept, src_lens)], src_lens[kept],
                   tgt_flat[np.repeat(kept, tgt_lens)], tgt_lens[kept], dropped)


# ---------------------------------------------------------------------------------------------- building


@dataclass
class _CorpusStats:
    name: str
    weight: float = 1.0
    tag: str = ""
    read: int = 0
    pairs: int = 0  # non-empty after normalization
    kept: int = 0
    rows: int = 0  # kept pairs in the id store, each repeated by the weight
    dropped: dict[str, int] = field(default_factory=lambda: dict.fromkeys(DROP_REASONS, 0))


def _bar(desc: str, total: int | None = None) -> tqdm:
    return tqdm(total=total, desc=desc, unit="pairs", unit_scale=True, dynamic_ncols=True, disable=None, leave=False)


def _kept_lines(blob: bytes, keep: np.ndarray | None) -> list[bytes]:
    """The blob's lines, without those `keep` marks as dropped."""
    lines = blob.split(b"\n")
    return lines if keep is None else list(itertools.compress(lines, keep.tolist()))


def _first_pass(corpora: list[Corpus], d: DataConfig, k: int, seed: int, out: Path, pool: Executor | None,
                window: int, chunk_pairs: int) -> tuple[list[_CorpusStats], Reservoir, np.ndarray | None]:
    """Normalize every training corpus into `out`; returns the counts, the tokenizer sample and the dedup mask.

    Only the pairs that dedup keeps are offered to the reservoir, so the sample has min(k, distinct pairs) pairs.
    """
    stats, reservoir, masks = [], Reservoir(k, seed), []
    seen = FirstSeen() if d.dedup else None
    offered = 0
    with open(out, "wb") as f, _bar("sample") as bar:
        for corpus in corpora:
            cs = _CorpusStats(corpus.name, corpus.weight, corpus.tag)
            tasks = ((chunk, d.lowercase, d.dedup) for chunk in stream_chunks(corpus.paths, chunk_pairs))
            for result in ordered(pool, normalize_chunk, tasks, window):
                f.write(result.blob)
                first = None if seen is None else seen.mark(result.hashes)
                if first is not None:
                    masks.append(first)
                n = result.pairs if first is None else int(first.sum())
                reservoir.offer(offered, lambda r=result, m=first: _kept_lines(r.blob, m), n)
                offered += n
                cs.read += result.read
                cs.pairs += result.pairs
                bar.update(result.read)
            cs.dropped["empty"] = cs.read - cs.pairs
            stats.append(cs)
    keep = None
    if seen is not None:
        keep = np.concatenate(masks) if masks else np.zeros(0, dtype=bool)
    return stats, reservoir, keep


def _sample_side(path: Path, column: int) -> Iterator[str]:
    with open(path, encoding="utf-8") as f:
        for line in f:
            yield line.rstrip("\n").split("\t")[column]


def _train_tokenizer(cfg: Config, sample: list[bytes], out: Path, log: Log) -> tuple[Tokenizer, dict]:
    """Train sentencepiece on the sample (written to a file first, so the list can be freed); the sample's identity."""
    path = out / SAMPLE
    digest = hashlib.sha256()
    with open(path, "wb") as f:
        for line in sample:
            f.write(line + b"\n")
            digest.update(line + b"\n")
    n = len(sample)
    del sample[:]
    t = cfg.tokenizer
    log(f"training sentencepiece {t.type} ({'joint' if t.joint else 'separate'}, vocab_size {t.vocab_size}) "
        f"on {n} pairs")
    with _bar("tokenizer", n) as bar:
        src, tgt = (_counted(_sample_side(path, c), bar) for c in (0, 1))
        try:
            tokenizer = Tokenizer.train(t, src, tgt, out, reserved=cfg.data.tags)
        except TokenizerError as err:
            raise DataError(str(err)) from None
    path.unlink()
    return tokenizer, {"pairs": n, "sha256": digest.hexdigest()}


def _counted(items: Iterable[str], bar: tqdm) -> Iterator[str]:
    """The items, each counted as half a pair (the tokenizer reads each side once)."""
    for item in items:
        bar.update(0.5)
        yield item


def repeats(count: int, weight: float) -> np.ndarray:
    """(count,) how many times each of `count` pairs is stored for `weight`: its whole part for every pair, and one
    more for evenly spaced pairs making up its fraction (the i-th pair when floor((i + 1) * f) passes an integer)."""
    whole, fraction = divmod(weight, 1.0)
    index = np.arange(count, dtype=np.float64)  # (count,)
    extra = np.floor((index + 1) * fraction) > np.floor(index * fraction)  # (count,)
    return (int(whole) + extra).astype(np.int64)


def _repeated(parts: list[Encoded], weight: float) -> Encoded:
    """The corpus's encoded pairs in `parts`, each as many times as `repeats` says, in one piece."""
    src_lens = np.concatenate([p.src_lens for p in parts])
    tgt_lens = np.concatenate([p.tgt_lens for p in parts])
    times = repeats(len(src_lens), weight)  # (pairs,)
    src = np.concatenate([p.src for p in parts])
    tgt = np.concatenate([p.tgt for p in parts])
    rows = np.repeat(np.arange(len(src_lens)), times)  # (rows,) the pair each stored row copies
    src_starts, tgt_starts = np.cumsum(src_lens) - src_lens, np.cumsum(tgt_lens) - tgt_lens

    def gather(flat: np.ndarray, starts: np.ndarray, lens: np.ndarray) -> np.ndarray:
        picked = lens[rows]  # (rows,)
        offsets = np.repeat(starts[rows] - (np.cumsum(picked) - picked), picked)  # (tokens,)
        return flat[np.arange(int(picked.sum())) + offsets]

    return Encoded(gather(src, src_starts, src_lens), src_lens[rows], gather(tgt, tgt_starts, tgt_lens),
                   tgt_lens[rows], {})


def _second_pass(corpora: list[_CorpusStats], normalized: Path, keep: np.ndarray | None, d: DataConfig,
                 out: Path, pool: Executor | None, window: int, chunk_pairs: int, tokenizer: Tokenizer) -> None:
    """Encode the normalized pairs corpus by corpus and append the kept ones to the id store, a weighted corpus's
    as many times as its weight says (its encoded pairs are held until it ends)."""
    writers = {side: IdWriter(out / f"train.{side}") for side in ("src", "tgt")}
    threads = 1 if pool is not None else 2
    with open(normalized, "rb") as f, _bar("encode", sum(c.pairs for c in corpora)) as bar:
        start = 0
        for cs in corpora:
            tag_id = tokenizer.reserved_id(cs.tag) if cs.tag else None

            def tasks(cs: _CorpusStats = cs, first: int = start, tag_id: int | None = tag_id) -> Iterator[tuple]:
                for a in range(0, cs.pairs, chunk_pairs):
                    lines = list(itertools.islice(f, min(chunk_pairs, cs.pairs - a)))
                    mask = None if keep is None else keep[first + a:first + a + len(lines)]
                    yield b"".join(lines), mask, str(out), d, threads, tag_id

            held: list[Encoded] = []
            for result in ordered(pool, encode_chunk, tasks(), window):
                if cs.weight == 1.0:
                    writers["src"].append(result.src, result.src_lens)
                    writers["tgt"].append(result.tgt, result.tgt_lens)
                else:
                    held.append(result)
                for reason, count in result.dropped.items():
                    cs.dropped[reason] += count
                cs.kept += len(result.src_lens)
                bar.update(len(result.src_lens) + sum(result.dropped.values()))
            cs.rows = cs.kept
            if held:
                weighted = _repeated(held, cs.weight)
                writers["src"].append(weighted.src, weighted.src_lens)
                writers["tgt"].append(weighted.tgt, weighted.tgt_lens)
                cs.rows = len(weighted.src_lens)
            start += cs.pairs
    for writer in writers.values():
        writer.close()


def _build(cfg: Config, corpora: dict[str, list[Corpus]], out: Path, log: Log, chunk_pairs: int,
           given: Tokenizer | None = None) -> dict:
    """Read, clean and sample the training text, train the tokenizer (or save the `given` one), encode everything
    into `out`; the stats."""
    d = cfg.data
    dev = {split: read_pair(*c[0].paths) for split, c in corpora.items() if split != "train"}
    workers = worker_count(d)
    window = 2 * workers
    with worker_pool(workers) as pool:
        train, reservoir, keep = _first_pass(corpora["train"], d, cfg.tokenizer.sample_pairs,
                                             cfg.tokenizer.sample_seed, out / NORMALIZED, pool, window, chunk_pairs)
    names = ", ".join(str(c.paths[0]) for c in corpora["train"])
    if not sum(c.pairs for c in train):
        raise DataError(f"{names}: the training corpus is empty after cleaning")
    chosen = reservoir.sample()
    del reservoir  # the chosen lines live on only in `chosen`, which the tokenizer step empties
    if given is None:
        tokenizer, sample = _train_tokenizer(cfg, chosen, out, log)
    else:
        log(f"encoding with the given tokenizer ({given.identity[:12]}); no sentencepiece model is trained")
        tokenizer, sample = given, {"pairs": 0, "sha256": ""}
        tokenizer.save(out)
    with worker_pool(workers) as pool:
        _second_pass(train, out / NORMALIZED, keep, d, out, pool, window, chunk_pairs, tokenizer)
    (out / NORMALIZED).unlink()
    dropped = {r: sum(c.dropped[r] for c in train) for r in DROP_REASONS}
    kept = sum(c.rows for c in train)
    if not kept:
        raise DataError(f"{names}: the training corpus is empty after cleaning (dropped: {format_dropped(dropped)})")
    stats: dict = {"pairs_read": {"train": sum(c.read for c in train)}, "pairs_kept": {"train": kept},
                   "dropped": dropped, "corpora": [dataclasses.asdict(c) for c in train], "tokenizer_sample": sample}
    for split, (src, tgt) in dev.items():
        src, tgt = [normalize(s, d.lowercase) for s in src], [normalize(t, d.lowercase) for t in tgt]
        stats["pairs_read"][split] = stats["pairs_kept"][split] = len(src)
        for side, lines, ids in (("src", src, tokenizer.encode_src(src)), ("tgt", tgt, tokenizer.encode_tgt(tgt))):
            save_ids(out / f"{split}.{side}", ids)
            write_text(out / f"{split}.{side}.txt", lines)
    vocab = tokenizer.vocab
    stats["vocab"] = {"src": vocab.src_size, "tgt": vocab.tgt_size, "joint": vocab.joint}
    return stats


def format_dropped(dropped: dict[str, int]) -> str:
    return (f"{dropped['empty']} empty, {dropped['duplicate']} duplicates, {dropped['too_long']} too long, "
            f"{dropped['ratio']} length-ratio outliers")


def _disk_error(cache: Path, err: OSError) -> DataError:
    hint = "; free some space or set data.cache_dir elsewhere" if err.errno in (errno.ENOSPC, errno.EDQUOT) else ""
    return DataError(f"{cache}: cannot write the data cache ({err.strerror or err}){hint}")


def prepare(cfg: Config, log: Log = print, chunk_pairs: int = CHUNK_PAIRS,
            tokenizer: Tokenizer | None = None) -> Prepared:
    """Fetch, clean, tokenize and cache the configured corpus; a second call with equal inputs reads the cache.

    A given `tokenizer` (a fine-tuning parent's) encodes the corpus instead of one trained on it; the cache key
    then names that tokenizer instead of the tokenizer settings.
    """
    if tokenizer is not None:
        for tag in cfg.data.tags:
            try:
                tokenizer.reserved_id(tag)
            except TokenizerError as err:
                raise DataError(f"data.train_corpora: {err}") from None
    corpora = resolve_corpora(cfg, log)
    for split_corpora in corpora.values():
        for path in (p for c in split_corpora for p in c.paths):
            if not path.is_file():
                raise DataError(f"{path}: file not found")
    identities = {split: [[file_identity(p) for p in c.paths] for c in cs] for split, cs in corpora.items()}
    key = cache_key(identities, cfg, tokenizer.identity if tokenizer is not None else None)
    cache = Path(cfg.data.cache_dir) / key
    hit = is_complete(cache)
    if not hit:
        try:
            tmp = new_build_folder(cache)
        except OSError as err:
            raise DataError(f"{cache.parent}: cannot create the data cache ({err.strerror or err})") from None
        try:
            stats = _build(cfg, corpora, tmp, log, chunk_pairs, tokenizer)
            publish(tmp, cache, stats)
        except OSError as err:
            raise _disk_error(cache, err) from None
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        log(f"data cache written: {cache}")
    tokenizer, splits, stats = open_cache(cache, list(corpora))
    if hit:
        log(f"data cache hit: {cache}")
    stats.update(cache_hit=hit, cache_key=key)
    read, kept = stats["pairs_read"], stats["pairs_kept"]
    log("pairs read / kept: " + ", ".join(f"{s} {read[s]} / {kept[s]}" for s in read))
    log(f"train pairs dropped: {format_dropped(stats['dropped'])}")
    return Prepared(tokenizer, splits, stats, cfg)
