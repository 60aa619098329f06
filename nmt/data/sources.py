"""Where each split's text comes from: the embedded sample, Multi30k (mirror or download), or the user's files."""

from __future__ import annotations

import os
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tqdm import tqdm

from nmt.config import Config, CorpusConfig, DataConfig
from nmt.errors import DataError
from nmt.fileio import sha256_file

MULTI30K_URL = "https://raw.githubusercontent.com/multi30k/dataset/master/data/task1/raw"
MULTI30K_SPLITS = {"train": "train", "val": "val", "test": "test_2016_flickr"}
# The other official test sets: evaluated by name (nmt-evaluate --split, nmt.evaluate), never prepared or trained on.
MULTI30K_TEST_SETS = {"test2017": "test_2017_flickr", "mscoco2017": "test_2017_mscoco", "test2018": "test_2018_flickr"}
MULTI30K_SHA256 = {
    "train.de.gz": "726e39b2fa9eb9ffb6dc763fb35a179f80fae06ffc5d28b6ace5faa883de28a6",
    "train.en.gz": "d79cfa999dd4c51d2cb42499b6796d5a882c3a8a961923c25a898c90f8bbd56f",
    "val.de.gz": "f0cba2f995189cf5770f29a8a9a537a3ad3f51657ad873405082ff6863a5e75a",
    "val.en.gz": "14f7d25ddd868909a9213e361768460edcacdd6ab9d1e77b92560dc10c10dc28",
    "test_2016_flickr.de.gz": "9204244e408ccb38d2a55cfcd344df15005fc42a07a6e55ca6c52b6ababb8cc8",
    "test_2016_flickr.en.gz": "611d361c6334bc7246101d48097c13cf5c4413c5befc793cc629934359d532d9",
    "test_2017_flickr.de.gz": "a2c89666db00c495cd8513b9d708d5a3acc205d7de312ef2bf5fb7ebc1540aee",
    "test_2017_flickr.en.gz": "76a444ee25172e72695cddb13ae4a3bda59430617be88e0bb46b60504f054074",
    "test_2017_mscoco.de.gz": "799e4854c25d601cb6cb6be29eabe5667734c61ace2f495e03e429031a0bc338",
    "test_2017_mscoco.en.gz": "aab300bfb4427697987e02cd0aacd44bfe8aa50456231b6474c08038bbed2b58",
    "test_2018_flickr.de.gz": "ddd0130c7d97482dc5197a02141dae8dd79f20f03586c480d675c09a32daf608",
    "test_2018_flickr.en.gz": "ef4f4844037d4c5dea75c9a8ed5fd78905967a26f67c255e230cc9780032654d",
}
MIRROR_ENV = "NMT_DATA_MIRROR"

Log = Callable[[str], None]
SplitFiles = dict[str, tuple[Path, Path]]


@dataclass(frozen=True)
class Corpus:
    """One corpus: a source and a target file, or one tab-separated file (source<TAB>target); a training corpus
    may be seen `weight` times an epoch and have its source sentences marked by `tag`."""

    paths: tuple[Path, ...]
    weight: float = 1.0
    tag: str = ""

    @property
    def name(self) -> str:
        return " + ".join(p.name for p in self.paths)

    @property
    def tsv(self) -> bool:
        return len(self.paths) == 1


def _verify(path: Path, expected: str, hint: str) -> None:
    actual = sha256_file(path)
    if actual != expected:
        raise DataError(f"{path}: checksum mismatch (expected sha256 {expected}, got {actual}); {hint}")


def _download(url: str, dest: Path, expected: str, mirror_hint: str) -> None:
    """Fetch `url` into `dest` through a temporary file, with a progress bar and a checksum check; a failure says
    how to use a mirror instead (`mirror_hint`)."""
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
        raise DataError(f"cannot download {url} ({getattr(err, 'reason', err)}); {mirror_hint}") from None
    finally:
        tmp.unlink(missing_ok=True)


def fetch_multi30k(data: DataConfig, log: Log = print, splits: dict[str, str] = MULTI30K_SPLITS) -> SplitFiles:
    """Multi30k task 1 files of `splits` (split -> file stem; default train, val and test2016), from the mirror
    folder if one is set, else downloaded once; checksums verified."""
    mirror = data.mirror or os.environ.get(MIRROR_ENV, "")
    if mirror:
        log(f"multi30k: reading from mirror {mirror}")
    files: dict[str, Path] = {}
    hint = f"set data.mirror or {MIRROR_ENV} to a folder holding {', '.join(MULTI30K_SHA256)}"
    for name in (f"{stem}.{side}.gz" for stem in splits.values() for side in ("de", "en")):
        files[name] = fetch_file(name, MULTI30K_SHA256[name], mirror, Path(data.download_dir) / "multi30k",
                                 MULTI30K_URL, "Multi30k", hint, log)
    return {split: (files[f"{stem}.de.gz"], files[f"{stem}.en.gz"]) for split, stem in splits.items()}


def fetch_file(name: str, expected: str, mirror: str, folder: Path, url: str, what: str, hint: str,
               log: Log) -> Path:
    """The official file `name` of a dataset (`what`), checked against its sha256 `expected`: from the `mirror`
    folder when one is set, else from `folder`, downloaded from `url`/`name` once (`hint`: how to use a mirror)."""
    if mirror:
        path = Path(mirror) / name
        if not path.is_file():
            raise DataError(f"{path}: file not found in the {what} mirror folder")
        _verify(path, expected, "the mirror copy differs from the official file: replace it")
        return path
    path = folder / name
    if path.is_file():
        _verify(path, expected, "the file is damaged or incomplete: delete it and run again")
    else:
        log(f"{what.lower()}: downloading {name}")
        _download(f"{url}/{name}", path, expected, hint)
    return path


def in_direction(pair: tuple[Path, Path], data: DataConfig) -> tuple[Path, Path]:
    """A (German, English) pair of a named dataset's files as (source, target) of `data.direction`."""
    return pair if data.languages[0] == "de" else (pair[1], pair[0])


def sample_dir() -> Path:
    """The repository's data/sample folder (falling back to ./data/sample)."""
    repo = Path(__file__).resolve().parents[2] / "data" / "sample"
    return repo if repo.is_dir() else Path.cwd() / "data" / "sample"


def _eval_files(data: DataConfig) -> SplitFiles:
    files = {"val": (data.val_src, data.val_tgt)}
    if data.test_src or data.test_tgt:
        if not (data.test_src and data.test_tgt):
            raise DataError("data.test_src and data.test_tgt must be given together")
        files["test"] = (data.test_src, data.test_tgt)
    for split, pair in files.items():
        if not all(pair):
            raise DataError(f"data.{split}_src and data.{split}_tgt are required for dataset 'files'")
    return {split: (Path(s), Path(t)) for split, (s, t) in files.items()}


def train_corpora(data: DataConfig) -> list[Corpus]:
    """dataset=files: data.train_src/train_tgt (when set) followed by every entry of data.train_corpora."""
    if bool(data.train_src) != bool(data.train_tgt):
        raise DataError("data.train_src and data.train_tgt must be given together")
    entries = ([CorpusConfig([data.train_src, data.train_tgt])] if data.train_src else []) + data.corpora
    if not entries:
        raise DataError("dataset 'files' needs data.train_src and data.train_tgt, or data.train_corpora")
    return [Corpus(tuple(Path(p) for p in entry.files), entry.weight, entry.tag) for entry in entries]


def resolve_corpora(cfg: Config, log: Log = print) -> dict[str, list[Corpus]]:
    """The corpora of every split, in the model's direction: training may have several (the dataset's own first,
    then data.train_corpora), validation and test have one pair of files."""
    data = cfg.data
    if data.dataset == "files":
        return {"train": train_corpora(data)} | {split: [Corpus(pair)] for split, pair in _eval_files(data).items()}
    if data.dataset == "multi30k":
        pairs = fetch_multi30k(data, log)
    else:
        root = sample_dir()
        pairs = {s: (root / f"{s}.de", root / f"{s}.en") for s in ("train", "val", "test")}
    corpora = {split: [Corpus(in_direction(pair, data))] for split, pair in pairs.items()}
    corpora["train"] += [Corpus(tuple(Path(p) for p in entry.files), entry.weight, entry.tag)
                         for entry in data.corpora]
    return corpora


def resolve_files(cfg: Config, log: Log = print) -> SplitFiles:
    """(source, target) file per split whose text is one pair of files (validation and test always are)."""
    return {split: corpora[0].paths for split, corpora in resolve_corpora(cfg, log).items()
            if len(corpora) == 1 and not corpora[0].tsv}


def evaluation_files(cfg: Config, split: str, log: Log = print) -> tuple[Path, Path] | None:
    """The (source, target) files of a split to evaluate on: one the dataset prepares, or for Multi30k one of
    its other official test sets (MULTI30K_TEST_SETS, fetched when first asked for); None if there is none."""
    if split not in evaluation_splits(cfg):
        return None
    if cfg.data.dataset == "multi30k":
        stems = MULTI30K_TEST_SETS | MULTI30K_SPLITS
        return in_direction(fetch_multi30k(cfg.data, log, {split: stems[split]})[split], cfg.data)
    return resolve_files(cfg, log).get(split)


def evaluation_splits(cfg: Config) -> list[str]:
    """The split names `evaluation_files` knows for `cfg`'s dataset, for messages."""
    if cfg.data.dataset == "files":
        return ["val", *(["test"] if cfg.data.test_src else [])]
    return ["train", "val", "test", *(MULTI30K_TEST_SETS if cfg.data.dataset == "multi30k" else [])]
