"""The data cache's key (a preparation's inputs and settings) and checked opening of a cache folder."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path
from typing import Any

import sentencepiece

from nmt.config import Config
from nmt.data.store import Split, load_split
from nmt.data.text import is_gzip
from nmt.errors import DataError
from nmt.fileio import sha256_file
from nmt.tokenizer import Tokenizer, VocabInfo

CACHE_FORMAT = 3  # 3: the tokenizer sample is drawn after dedup
DROP_REASONS = ("empty", "duplicate", "too_long", "ratio")


def cache_key(files: dict[str, Any], cfg: Config, tokenizer_id: str | None = None) -> str:
    """Hash of the input files' identities, corpus weights and tags, tokenizer settings (or the given tokenizer's
    identity) and cleaning settings."""
    d = cfg.data
    tokenizer: Any = dataclasses.asdict(cfg.tokenizer) if tokenizer_id is None else {"given": tokenizer_id}
    spec = {"format": CACHE_FORMAT, "sentencepiece": sentencepiece.__version__, "files": files,
            "weights_and_tags": [[c.weight, c.tag] for c in d.corpora], "tokenizer": tokenizer,
            "cleaning": {"max_tokens": d.max_tokens, "max_ratio": d.max_ratio, "ratio_min_len": d.ratio_min_len,
                         "lowercase": d.lowercase, "dedup": d.dedup}}
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:24]


def file_identity(path: Path) -> dict[str, Any]:
    """What of a file decides the data read from it."""
    return {"sha256": sha256_file(path), "gzip": is_gzip(path)}


def check_stats(stats: Any, splits: dict[str, Split], vocab: VocabInfo) -> None:
    """ValueError unless stats.json is complete and agrees with the splits and vocab."""
    required = {"pairs_read": set(splits), "pairs_kept": set(splits), "dropped": set(DROP_REASONS),
                "vocab": {"src", "tgt", "joint"}, "tokenizer_sample": {"pairs", "sha256"}}
    for key, fields in required.items():
        value = stats.get(key) if isinstance(stats, dict) else None
        if not isinstance(value, dict) or not fields <= value.keys():
            raise ValueError(f"stats.json: '{key}' is missing or lacks one of {', '.join(sorted(fields))}")
    if not isinstance(stats.get("corpora"), list):
        raise ValueError("stats.json: 'corpora' is missing")
    if any(stats["pairs_kept"][name] != len(split) for name, split in splits.items()):
        raise ValueError("stats.json: 'pairs_kept' disagrees with the stored ids")
    if (stats["vocab"]["src"], stats["vocab"]["tgt"]) != (vocab.src_size, vocab.tgt_size):
        raise ValueError("stats.json: 'vocab' disagrees with the sentencepiece model")


def open_cache(cache: Path, names: list[str]) -> tuple[Tokenizer, dict[str, Split], dict]:
    """The tokenizer, named splits and stats of a cache folder, checked; DataError if damaged."""

    try:
        tokenizer = Tokenizer.load(cache)
        sizes = {"src": tokenizer.vocab.src_size, "tgt": tokenizer.vocab.tgt_size}
        splits = {name: load_split(cache, name, sizes, text=name != "train") for name in names}
        stats = json.loads((cache / "stats.json").read_text(encoding="utf-8"))
        check_stats(stats, splits, tokenizer.vocab)
    except (OSError, ValueError) as err:
        raise DataError(f"{cache}: the data cache is damaged ({err}); delete the folder and run again") from None
    return tokenizer, splits, stats
