"""Read parallel text, clean and filter it, cache encoded ids, and serve token-bucket batches."""

from __future__ import annotations

import codecs
import dataclasses
import gzip
import hashlib
import json
import os
import shutil
import tempfile
import unicodedata
import urllib.error
import urllib.request
import zlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import numpy as np
import sentencepiece
import torch
from torch.utils.data import DataLoader, Dataset, Sampler
from tqdm import tqdm

from nmt.config import Config, DataConfig
from nmt.tokenizer import BOS_ID, EOS_ID, PAD_ID, Tokenizer, TokenizerError

MULTI30K_URL = "https://raw.githubusercontent.com/multi30k/dataset/master/data/task1/raw"
MULTI30K_SPLITS = {"train": "train", "val": "val", "test": "test_2016_flickr"}
MULTI30K_SHA256 = {
    "train.de.gz": "726e39b2fa9eb9ffb6dc763fb35a179f80fae06ffc5d28b6ace5faa883de28a6",
    "train.en.gz": "d79cfa999dd4c51d2cb42499b6796d5a882c3a8a961923c25a898c90f8bbd56f",
    "val.de.gz": "f0cba2f995189cf5770f29a8a9a537a3ad3f51657ad873405082ff6863a5e75a",
    "val.en.gz": "14f7d25ddd868909a9213e361768460edcacdd6ab9d1e77b92560dc10c10dc28",
    "test_2016_flickr.de.gz": "9204244e408ccb38d2a55cfcd344df15005fc42a07a6e55ca6c52b6ababb8cc8",
    "test_2016_flickr.en.gz": "611d361c6334bc7246101d48097c13cf5c4413c5befc793cc629934359d532d9",
}
MIRROR_ENV = "NMT_DATA_MIRROR"
CACHE_FORMAT = 1
DROP_REASONS = ("empty", "too_long", "ratio")

Log = Callable[[str], None]
SplitFiles = dict[str, tuple[Path, Path]]


class DataError(ValueError):
    """Bad or missing input data; the message names the file (and line) at fault."""


# ---------------------------------------------------------------------------------------------- reading


def sha256_file(path: Path) -> str:
    """Hex sha256 of a file's bytes."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def read_lines(path: str | Path) -> list[str]:
    """Lines of a plain or gzipped (.gz) UTF-8 file, split on newlines only (so both sides stay aligned)."""
    path = Path(path)
    try:
        raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    except FileNotFoundError:
        raise DataError(f"{path}: file not found") from None
    except (gzip.BadGzipFile, EOFError, zlib.error) as err:
        raise DataError(f"{path}: not a valid gzip file ({err})") from None
    except OSError as err:
        raise DataError(f"{path}: cannot read ({err.strerror or err})") from None
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
    """Both sides of a parallel corpus, checked to have the same number of lines."""
    src_lines, tgt_lines = read_lines(src), read_lines(tgt)
    if len(src_lines) != len(tgt_lines):
        raise DataError(f"{src} has {len(src_lines)} lines but {tgt} has {len(tgt_lines)}: "
                        "parallel files need one sentence per line on both sides")
    if not src_lines:
        raise DataError(f"{src}: the file has no lines")
    return src_lines, tgt_lines


def normalize(line: str, lowercase: bool) -> str:
    """Unicode NFC, whitespace stripped and collapsed to single spaces, optionally lowercased."""
    line = " ".join(unicodedata.normalize("NFC", line).split())
    return line.lower() if lowercase else line


# ---------------------------------------------------------------------------------------------- sources


def _verify(path: Path, expected: str, hint: str) -> None:
    actual = sha256_file(path)
    if actual != expected:
        raise DataError(f"{path}: checksum mismatch (expected sha256 {expected}, got {actual}); {hint}")


def _download(url: str, dest: Path, expected: str) -> None:
    """Fetch `url` into `dest` through a temporary file, with a progress bar and a checksum check."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f"{dest.name}.part{os.getpid()}")
    try:
        with urllib.request.urlopen(url, timeout=60) as response, open(tmp, "wb") as out:
            total = int(response.headers.get("Content-Length") or 0) or None
            with tqdm(total=total, unit="B", unit_scale=True, desc=dest.name, leave=False) as bar:
                for chunk in iter(lambda: response.read(1 << 16), b""):
                    out.write(chunk)
                    bar.update(len(chunk))
        _verify(tmp, expected, f"the download from {url} is damaged; run again")
        tmp.replace(dest)
    except (urllib.error.URLError, OSError) as err:
        raise DataError(f"cannot download {url} ({getattr(err, 'reason', err)}); set data.mirror or "
                        f"{MIRROR_ENV} to a folder holding {', '.join(MULTI30K_SHA256)}") from None
    finally:
        tmp.unlink(missing_ok=True)


def fetch_multi30k(data: DataConfig, log: Log = print) -> SplitFiles:
    """Multi30k task 1 files, from the mirror folder if one is set, else downloaded once; checksums verified."""
    mirror = data.mirror or os.environ.get(MIRROR_ENV, "")
    if mirror:
        log(f"multi30k: reading from mirror {mirror}")
    files: dict[str, Path] = {}
    for name, expected in MULTI30K_SHA256.items():
        if mirror:
            path = Path(mirror) / name
            if not path.is_file():
                raise DataError(f"{path}: file not found in the Multi30k mirror folder")
            _verify(path, expected, "the mirror copy differs from the official file: replace it")
        else:
            path = Path(data.download_dir) / "multi30k" / name
            if path.is_file():
                _verify(path, expected, "the file is damaged or incomplete: delete it and run again")
            else:
                log(f"multi30k: downloading {name}")
                _download(f"{MULTI30K_URL}/{name}", path, expected)
        files[name] = path
    return {split: (files[f"{stem}.de.gz"], files[f"{stem}.en.gz"]) for split, stem in MULTI30K_SPLITS.items()}


def sample_dir() -> Path:
    """The repository's data/sample folder (falling back to ./data/sample)."""
    repo = Path(__file__).resolve().parents[1] / "data" / "sample"
    return repo if repo.is_dir() else Path.cwd() / "data" / "sample"


def resolve_files(cfg: Config, log: Log = print) -> SplitFiles:
    """(source, target) file per split for the configured dataset."""
    data = cfg.data
    if data.dataset == "multi30k":
        return fetch_multi30k(data, log)
    if data.dataset == "sample":
        root = sample_dir()
        return {s: (root / f"{s}.de", root / f"{s}.en") for s in ("train", "val", "test")}
    files = {"train": (data.train_src, data.train_tgt), "val": (data.val_src, data.val_tgt)}
    if data.test_src or data.test_tgt:
        if not (data.test_src and data.test_tgt):
            raise DataError("data.test_src and data.test_tgt must be given together")
        files["test"] = (data.test_src, data.test_tgt)
    for split, pair in files.items():
        if not all(pair):
            raise DataError(f"data.{split}_src and data.{split}_tgt are required for dataset 'files'")
    return {split: (Path(s), Path(t)) for split, (s, t) in files.items()}


# ---------------------------------------------------------------------------------------------- corpus


@dataclass(eq=False)
class Split(Dataset):
    """One split: subword ids (no BOS/EOS) and the normalised text, aligned by index."""

    name: str
    src: list[np.ndarray]
    tgt: list[np.ndarray]
    src_raw: list[str]
    tgt_raw: list[str]

    def __len__(self) -> int:
        return len(self.src)

    def __getitem__(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        return self.src[i], self.tgt[i]

    @property
    def src_lens(self) -> np.ndarray:
        return np.fromiter(map(len, self.src), dtype=np.int64, count=len(self.src))

    @property
    def tgt_lens(self) -> np.ndarray:
        return np.fromiter(map(len, self.tgt), dtype=np.int64, count=len(self.tgt))


@dataclass
class Prepared:
    """Everything training needs from the data: tokenizer, splits and what cleaning did."""

    tokenizer: Tokenizer
    splits: dict[str, Split]
    stats: dict
    config: Config


def cache_key(files: dict[str, tuple[str, str]], cfg: Config) -> str:
    """Hash of the input files' content hashes, the tokenizer settings and the cleaning settings."""
    d = cfg.data
    spec = {"format": CACHE_FORMAT, "sentencepiece": sentencepiece.__version__, "files": files,
            "tokenizer": dataclasses.asdict(cfg.tokenizer),
            "cleaning": {"max_tokens": d.max_tokens, "max_ratio": d.max_ratio,
                         "ratio_min_len": d.ratio_min_len, "lowercase": d.lowercase}}
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:24]


def _filter_train(src: list[list[int]], tgt: list[list[int]], d: DataConfig) -> tuple[list[int], dict[str, int]]:
    """Indices of training pairs that pass the length and ratio filters, and the drop counts."""
    keep, dropped = [], {"too_long": 0, "ratio": 0}
    for i, (s, t) in enumerate(zip(src, tgt, strict=True)):
        short, long = sorted((len(s), len(t)))
        if long > d.max_tokens:
            dropped["too_long"] += 1
        elif long >= d.ratio_min_len and long / max(short, 1) > d.max_ratio:
            dropped["ratio"] += 1
        else:
            keep.append(i)
    return keep, dropped


def _build(cfg: Config, files: SplitFiles, out: Path, log: Log) -> tuple[Tokenizer, dict[str, Split], dict]:
    """Read, clean, train the tokenizer on the training split, encode, and write the cache into `out`."""
    d = cfg.data
    stats: dict = {"pairs_read": {}, "pairs_kept": {}, "dropped": dict.fromkeys(DROP_REASONS, 0)}
    texts: dict[str, tuple[list[str], list[str]]] = {}
    for split, (src_path, tgt_path) in files.items():
        src, tgt = read_pair(src_path, tgt_path)
        stats["pairs_read"][split] = len(src)
        texts[split] = ([normalize(s, d.lowercase) for s in src], [normalize(t, d.lowercase) for t in tgt])
    src, tgt = texts["train"]
    pairs = [(s, t) for s, t in zip(src, tgt, strict=True) if s and t]
    stats["dropped"]["empty"] = len(src) - len(pairs)
    if not pairs:
        raise DataError(f"{files['train'][0]}: the training corpus is empty after cleaning")
    texts["train"] = ([s for s, _ in pairs], [t for _, t in pairs])
    t = cfg.tokenizer
    log(f"training sentencepiece {t.type} ({'joint' if t.joint else 'separate'}, vocab_size {t.vocab_size}) "
        f"on {len(pairs)} pairs")
    try:
        tokenizer = Tokenizer.train(t, *texts["train"], out)
    except TokenizerError as err:
        raise DataError(str(err)) from None
    splits = {}
    for split, (src, tgt) in texts.items():
        src_ids, tgt_ids = tokenizer.encode_src(src), tokenizer.encode_tgt(tgt)
        if split == "train":
            keep, dropped = _filter_train(src_ids, tgt_ids, d)
            stats["dropped"].update(dropped)
            if not keep:
                raise DataError(f"{files['train'][0]}: the training corpus is empty after cleaning "
                                f"(dropped: {_format_dropped(stats['dropped'])})")
            src, tgt = [src[i] for i in keep], [tgt[i] for i in keep]
            src_ids, tgt_ids = [src_ids[i] for i in keep], [tgt_ids[i] for i in keep]
        stats["pairs_kept"][split] = len(src)
        for side, ids, raw in (("src", src_ids, src), ("tgt", tgt_ids, tgt)):
            _save_ids(out / f"{split}.{side}", ids)
            (out / f"{split}.{side}.txt").write_text("\n".join(raw) + "\n", encoding="utf-8")
        splits[split] = _load_split(out, split)
    vocab = tokenizer.vocab
    stats["vocab"] = {"src": vocab.src_size, "tgt": vocab.tgt_size, "joint": vocab.joint}
    (out / "stats.json").write_text(json.dumps(stats, indent=1), encoding="utf-8")
    return tokenizer, splits, stats


def _save_ids(prefix: Path, ids: list[list[int]]) -> None:
    offsets = np.zeros(len(ids) + 1, dtype=np.int64)
    np.cumsum([len(x) for x in ids], out=offsets[1:])
    flat = np.fromiter((i for x in ids for i in x), dtype=np.int32, count=int(offsets[-1]))
    np.save(prefix.with_name(prefix.name + ".ids.npy"), flat, allow_pickle=False)
    np.save(prefix.with_name(prefix.name + ".offsets.npy"), offsets, allow_pickle=False)


def _load_side(prefix: Path) -> tuple[list[np.ndarray], list[str]]:
    flat = np.load(prefix.with_name(prefix.name + ".ids.npy"), allow_pickle=False)
    offsets = np.load(prefix.with_name(prefix.name + ".offsets.npy"), allow_pickle=False)
    raw = prefix.with_name(prefix.name + ".txt").read_text(encoding="utf-8").split("\n")[:-1]
    ids = [flat[a:b] for a, b in zip(offsets[:-1].tolist(), offsets[1:].tolist(), strict=True)]
    if len(ids) != len(raw):
        raise ValueError(f"{prefix}: ids and text disagree")
    return ids, raw


def _load_split(directory: Path, split: str) -> Split:
    src, src_raw = _load_side(directory / f"{split}.src")
    tgt, tgt_raw = _load_side(directory / f"{split}.tgt")
    return Split(split, src, tgt, src_raw, tgt_raw)


def prepare(cfg: Config, log: Log = print) -> Prepared:
    """Fetch, clean, tokenize and cache the configured corpus; a second call with equal inputs reads the cache."""
    files = resolve_files(cfg, log)
    for src, tgt in files.values():
        for path in (src, tgt):
            if not path.is_file():
                raise DataError(f"{path}: file not found")
    hashes = {split: (sha256_file(s), sha256_file(t)) for split, (s, t) in files.items()}
    key = cache_key(hashes, cfg)
    cache = Path(cfg.data.cache_dir) / key
    hit = cache.is_dir()
    if hit:
        try:
            tokenizer = Tokenizer.load(cache)
            splits = {split: _load_split(cache, split) for split in files}
            stats = json.loads((cache / "stats.json").read_text(encoding="utf-8"))
        except (OSError, ValueError) as err:
            raise DataError(f"{cache}: the data cache is damaged ({err}); delete the folder and run again") from None
        log(f"data cache hit: {cache}")
    else:
        try:
            cache.parent.mkdir(parents=True, exist_ok=True)
            tmp = Path(tempfile.mkdtemp(prefix=f".{key}.", dir=cache.parent))
        except OSError as err:
            raise DataError(f"{cache.parent}: cannot create the data cache ({err.strerror or err})") from None
        try:
            tokenizer, splits, stats = _build(cfg, files, tmp, log)
            try:
                tmp.rename(cache)
            except OSError:
                if not cache.is_dir():  # else another process wrote the same cache first; its content is identical
                    raise
        except OSError as err:
            raise DataError(f"{cache}: cannot write the data cache ({err.strerror or err})") from None
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        log(f"data cache written: {cache}")
    stats.update(cache_hit=hit, cache_key=key)
    read, kept = stats["pairs_read"], stats["pairs_kept"]
    log("pairs read / kept: " + ", ".join(f"{s} {read[s]} / {kept[s]}" for s in read))
    log(f"train pairs dropped: {_format_dropped(stats['dropped'])}")
    return Prepared(tokenizer, splits, stats, cfg)


def _format_dropped(dropped: dict[str, int]) -> str:
    return (f"{dropped['empty']} empty, {dropped['too_long']} too long, "
            f"{dropped['ratio']} length-ratio outliers")


# ---------------------------------------------------------------------------------------------- batching


class TokenBatchSampler(Sampler[list[int]]):
    """Length-bucketed batches under a token budget, shuffled per epoch, resumable mid-epoch and shardable.

    A batch of n pairs costs n * max(longest source + 1, longest target + 1): the source carries EOS and the
    shifted target (BOS + y as input, y + EOS as output) is one longer than y, so the cost is the padded size of
    the larger of the source and target tensors. Pairs are sorted by (source length, target length) with a
    seeded random tie-break and cut greedily; a pair over the budget on its own forms its own batch. The batches
    are fixed; their order is shuffled each epoch with a generator seeded by seed + epoch. `position` counts the
    batches handed out in the current epoch; handing out an epoch's last batch advances to the next epoch
    (position 0). With num_replicas > 1 the epoch's batch list is padded by repeating its first
    batches until it divides evenly, then rank r takes every num_replicas-th batch starting at r.
    """

    def __init__(self, src_lens: Sequence[int] | np.ndarray, tgt_lens: Sequence[int] | np.ndarray,
                 batch_tokens: int, shuffle: bool = True, seed: int = 1, num_replicas: int = 1, rank: int = 0) -> None:
        src, tgt = np.asarray(src_lens, dtype=np.int64), np.asarray(tgt_lens, dtype=np.int64)
        if len(src) != len(tgt):
            raise ValueError(f"{len(src)} source lengths but {len(tgt)} target lengths")
        if batch_tokens <= 0 or not 0 <= rank < num_replicas:
            raise ValueError(f"need batch_tokens > 0 and 0 <= rank < num_replicas, got {batch_tokens}, "
                             f"{rank}, {num_replicas}")
        self.batch_tokens, self.shuffle, self.seed = batch_tokens, shuffle, seed
        self.num_replicas, self.rank = num_replicas, rank
        self.epoch, self.position = 0, 0
        perm = np.random.default_rng(seed).permutation(len(src))
        order = perm[np.lexsort((tgt[perm], src[perm]))].tolist()
        cost = np.maximum(src, tgt).tolist()
        self.batches: list[list[int]] = []
        start, longest = 0, 0
        for k, i in enumerate(order):
            longest = max(longest, cost[i] + 1)
            if k > start and (k - start + 1) * longest > batch_tokens:
                self.batches.append(order[start:k])
                start, longest = k, cost[i] + 1
        if start < len(order):
            self.batches.append(order[start:])

    def __len__(self) -> int:
        return -(-len(self.batches) // self.num_replicas)

    def _epoch_batches(self) -> list[list[int]]:
        """This rank's batches for the current epoch, in order."""
        n = len(self.batches)
        if self.shuffle:
            order = torch.randperm(n, generator=torch.Generator().manual_seed(self.seed + self.epoch)).tolist()
        else:
            order = list(range(n))
        if self.num_replicas > 1 and n:
            total = len(self) * self.num_replicas
            order = (order * -(-total // n))[:total][self.rank::self.num_replicas]
        return [self.batches[i] for i in order]

    def __iter__(self) -> Iterator[list[int]]:
        batches = self._epoch_batches()
        for k in range(self.position, len(batches)):
            # Handing out the last batch completes the epoch, so a state saved after it resumes at the next one.
            self.epoch, self.position = (self.epoch + 1, 0) if k + 1 == len(batches) else (self.epoch, k + 1)
            yield batches[k]

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch whose order the next iteration yields; the position resets if the epoch changes."""
        if epoch != self.epoch:
            self.epoch, self.position = epoch, 0

    def state_dict(self) -> dict:
        """Epoch and batches already yielded in it, plus what identifies the batching."""
        return {"epoch": self.epoch, "position": self.position, "seed": self.seed, "num_batches": len(self.batches),
                "num_replicas": self.num_replicas, "rank": self.rank}

    def load_state_dict(self, state: dict) -> None:
        """Restore a position saved by `state_dict`: the next iteration yields the rest of that epoch."""
        mine = self.state_dict()
        for key in ("seed", "num_batches", "num_replicas"):
            if state[key] != mine[key]:
                raise ValueError(f"sampler state has {key}={state[key]} but this sampler has {mine[key]}: "
                                 "the data or batching settings changed")
        self.epoch, self.position = int(state["epoch"]), int(state["position"])


def padding_fraction(sampler: TokenBatchSampler, src_lens: Sequence[int] | np.ndarray,
                     tgt_lens: Sequence[int] | np.ndarray) -> float:
    """Share of padding positions in the source and target tensors of all the sampler's batches."""
    src, tgt = np.asarray(src_lens) + 1, np.asarray(tgt_lens) + 1
    real = padded = 0
    for batch in sampler.batches:
        s, t = src[batch], tgt[batch]
        real += int(s.sum() + t.sum())
        padded += len(batch) * int(s.max() + t.max())
    return 1.0 - real / padded if padded else 0.0


@dataclass
class Batch:
    """A padded batch: source with EOS, teacher-forcing input (BOS + y) and output (y + EOS)."""

    src: torch.Tensor  # (B, S) long
    src_mask: torch.Tensor  # (B, S) bool, True on real tokens
    tgt_in: torch.Tensor  # (B, T) long
    tgt_out: torch.Tensor  # (B, T) long, padding after EOS
    n_src_tokens: int
    n_tgt_tokens: int

    def to(self, device: torch.device | str) -> Batch:
        return dataclasses.replace(self, src=self.src.to(device), src_mask=self.src_mask.to(device),
                                   tgt_in=self.tgt_in.to(device), tgt_out=self.tgt_out.to(device))


def collate(pairs: Sequence[tuple[np.ndarray, np.ndarray]], pad_id: int = PAD_ID) -> Batch:
    """Pad (source ids, target ids) pairs, given without BOS/EOS, into a Batch."""
    src_lens = np.array([len(s) + 1 for s, _ in pairs], dtype=np.int64)
    tgt_lens = np.array([len(t) + 1 for _, t in pairs], dtype=np.int64)
    src = np.full((len(pairs), src_lens.max()), pad_id, dtype=np.int64)  # (B, S)
    tgt_in = np.full((len(pairs), tgt_lens.max()), pad_id, dtype=np.int64)  # (B, T)
    tgt_out = tgt_in.copy()  # (B, T)
    for row, (s, t) in enumerate(pairs):
        src[row, :len(s)], src[row, len(s)] = s, EOS_ID
        tgt_in[row, 0], tgt_in[row, 1:len(t) + 1] = BOS_ID, t
        tgt_out[row, :len(t)], tgt_out[row, len(t)] = t, EOS_ID
    src_mask = torch.arange(src.shape[1])[None, :] < torch.from_numpy(src_lens)[:, None]  # (B, S)
    return Batch(torch.from_numpy(src), src_mask, torch.from_numpy(tgt_in), torch.from_numpy(tgt_out),
                 int(src_lens.sum()), int(tgt_lens.sum()))


def make_loader(split: Split, batch_tokens: int, shuffle: bool, seed: int, num_replicas: int = 1,
                rank: int = 0) -> tuple[DataLoader, TokenBatchSampler]:
    """A DataLoader of Batches over `split` and its sampler (whose state a checkpoint saves)."""
    sampler = TokenBatchSampler(split.src_lens, split.tgt_lens, batch_tokens, shuffle, seed, num_replicas, rank)
    loader = DataLoader(split, batch_sampler=sampler, collate_fn=partial(collate, pad_id=PAD_ID), num_workers=0)
    return loader, sampler


def summary(prepared: Prepared) -> str:
    """Human-readable report: pairs per split before and after cleaning, drops, vocabularies, padding."""
    stats, cfg = prepared.stats, prepared.config
    d = cfg.data
    lines = [f"dataset {d.dataset}, cache {stats['cache_key']} ({'hit' if stats['cache_hit'] else 'built'})",
             f"{'split':<8}{'read':>10}{'kept':>10}"]
    lines += [f"{s:<8}{stats['pairs_read'][s]:>10,}{stats['pairs_kept'][s]:>10,}" for s in stats["pairs_read"]]
    dropped = stats["dropped"]
    lines.append(f"dropped from train: {dropped['empty']:,} empty, {dropped['too_long']:,} longer than "
                 f"{d.max_tokens} subwords, {dropped['ratio']:,} with length ratio above {d.max_ratio:g}")
    v = stats["vocab"]
    kind = "joint" if v["joint"] else "separate"
    lines.append(f"vocabulary ({kind}, {cfg.tokenizer.type}): source {v['src']:,}, target {v['tgt']:,}")
    train = prepared.splits["train"]
    sampler = TokenBatchSampler(train.src_lens, train.tgt_lens, cfg.train.batch_tokens, seed=cfg.train.seed)
    frac = padding_fraction(sampler, train.src_lens, train.tgt_lens)
    lines.append(f"training batches at {cfg.train.batch_tokens:,} tokens: {len(sampler):,} batches, "
                 f"padding {100 * frac:.1f}%")
    return "\n".join(lines)
