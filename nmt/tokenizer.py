"""Sentencepiece subword models. The special token ids are defined here and only here."""

from __future__ import annotations

import hashlib
import io
import itertools
import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import sentencepiece as spm

from nmt.config import TokenizerConfig
from nmt.fileio import atomic_output

PAD_ID = 0
UNK_ID = 1
BOS_ID = 2
EOS_ID = 3

SPECIAL_IDS = frozenset({PAD_ID, BOS_ID, EOS_ID})
JOINT_FILE = "spm.model"
SRC_FILE = "src.model"
TGT_FILE = "tgt.model"
BLOB_FORMAT = 1


class TokenizerError(ValueError):
    """Sentencepiece could not be trained or loaded; the message says why."""


@dataclass(frozen=True)
class VocabInfo:
    """What a model needs to know about the vocabularies."""

    src_size: int
    tgt_size: int
    joint: bool
    pad_id: int = PAD_ID
    bos_id: int = BOS_ID
    eos_id: int = EOS_ID
    unk_id: int = UNK_ID


def _train_model(cfg: TokenizerConfig, lines: Iterable[str]) -> bytes:
    """Train one sentencepiece model from an in-memory iterator and return its serialized bytes."""
    writer = io.BytesIO()
    try:
        spm.SentencePieceTrainer.train(
            sentence_iterator=iter(lines), model_writer=writer, model_type=cfg.type, vocab_size=cfg.vocab_size,
            character_coverage=cfg.character_coverage, hard_vocab_limit=cfg.hard_vocab_limit,
            pad_id=PAD_ID, unk_id=UNK_ID, bos_id=BOS_ID, eos_id=EOS_ID, num_threads=2, minloglevel=2)
    except RuntimeError as err:
        raise TokenizerError(_plain_words(str(err), cfg)) from None
    return writer.getvalue()


def _plain_words(message: str, cfg: TokenizerConfig) -> str:
    """Sentencepiece's internal check messages, as what to change in the config."""
    if match := re.search(r"Vocabulary size too high \(\d+\)\. Please set it to a value <= (\d+)", message):
        return (f"tokenizer.vocab_size: {cfg.vocab_size} is too large for this corpus, which yields at most "
                f"{match[1]} subwords; set it to {match[1]} or less (or tokenizer.hard_vocab_limit: false to let "
                "sentencepiece shrink it)")
    if match := re.search(r"smaller than required_chars\. \d+ vs (\d+)", message):
        return (f"tokenizer.vocab_size: {cfg.vocab_size} is too small for this corpus, whose characters and special "
                f"tokens alone need {match[1]} entries; set it to at least {match[1]} or lower "
                "tokenizer.character_coverage")
    if "!sentences_.empty()" in message:
        return ("sentencepiece found no sentence to learn subwords from: it skips lines longer than 4,192 bytes, and "
                "every line of the tokenizer's sample is that long (or the sample is empty)")
    detail = message.split("] ")[-1].strip() or message
    return f"sentencepiece could not train the tokenizer: {detail}"


class Tokenizer:
    """Source and target sentencepiece models (one shared model when the vocabulary is joint)."""

    def __init__(self, src_model: bytes, tgt_model: bytes | None = None) -> None:
        """`tgt_model=None` means one joint model serves both sides."""
        self._protos = [src_model] if tgt_model is None else [src_model, tgt_model]
        try:
            self._src = spm.SentencePieceProcessor(model_proto=src_model)
            self._tgt = self._src if tgt_model is None else spm.SentencePieceProcessor(model_proto=tgt_model)
        except RuntimeError as err:
            raise TokenizerError(f"invalid sentencepiece model: {err}") from None

    @property
    def joint(self) -> bool:
        return len(self._protos) == 1

    @classmethod
    def train(cls, cfg: TokenizerConfig, src_lines: Iterable[str], tgt_lines: Iterable[str],
              out_dir: str | Path) -> Tokenizer:
        """Train on the given sentences (both sides, source first, for a joint model) and save into `out_dir`.

        The sentences are read once, so they may come from a generator rather than a list in memory.
        """
        if cfg.joint:
            tok = cls(_train_model(cfg, itertools.chain(src_lines, tgt_lines)))
        else:
            tok = cls(_train_model(cfg, src_lines), _train_model(cfg, tgt_lines))
        tok.save(out_dir)
        return tok

    @classmethod
    def load(cls, directory: str | Path) -> Tokenizer:
        """Load the model files `save` wrote."""
        directory = Path(directory)
        if (directory / JOINT_FILE).is_file():
            return cls((directory / JOINT_FILE).read_bytes())
        if (directory / SRC_FILE).is_file() and (directory / TGT_FILE).is_file():
            return cls((directory / SRC_FILE).read_bytes(), (directory / TGT_FILE).read_bytes())
        raise TokenizerError(f"{directory}: no sentencepiece model ({JOINT_FILE}, or {SRC_FILE} and {TGT_FILE})")

    def save(self, directory: str | Path) -> None:
        """Write the model files into `directory` (created if missing), removing the other layout's files (a joint
        model replaces separate ones and the reverse), so that `load` finds this tokenizer."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        names = [JOINT_FILE] if self.joint else [SRC_FILE, TGT_FILE]
        for name, proto in zip(names, self._protos, strict=True):
            with atomic_output(directory / name, "wb") as handle:
                handle.write(proto)
        for stale in {JOINT_FILE, SRC_FILE, TGT_FILE} - set(names):
            (directory / stale).unlink(missing_ok=True)

    def to_bytes(self) -> bytes:
        """The model files in one blob (for checkpoints); `from_bytes` reverses it."""
        header = json.dumps({"format": BLOB_FORMAT, "sizes": [len(p) for p in self._protos]}).encode()
        return header + b"\n" + b"".join(self._protos)

    @classmethod
    def from_bytes(cls, blob: bytes) -> Tokenizer:
        """Rebuild a tokenizer from `to_bytes` output."""
        try:
            header, _, body = bytes(blob).partition(b"\n")
            meta = json.loads(header)
            sizes = meta["sizes"]
            if meta["format"] != BLOB_FORMAT or len(sizes) not in (1, 2) or sum(sizes) != len(body):
                raise ValueError("unexpected layout")
        except (ValueError, KeyError, TypeError) as err:
            raise TokenizerError(f"not a serialized tokenizer ({err})") from None
        protos = [body[:sizes[0]], body[sizes[0]:]]
        return cls(protos[0]) if len(sizes) == 1 else cls(*protos)

    @property
    def identity(self) -> str:
        """sha256 of the model files: equal identities mean equal vocabularies and segmentation."""
        digest = hashlib.sha256(b"joint" if self.joint else b"separate")
        for proto in self._protos:
            digest.update(hashlib.sha256(proto).digest())
        return digest.hexdigest()

    @property
    def vocab(self) -> VocabInfo:
        return VocabInfo(src_size=self._src.get_piece_size(), tgt_size=self._tgt.get_piece_size(), joint=self.joint)

    def encode_src(self, lines: Sequence[str], threads: int = 2) -> list[list[int]]:
        """Subword ids of each source line, without BOS/EOS."""
        return self._src.encode(list(lines), out_type=int, num_threads=threads)

    def encode_tgt(self, lines: Sequence[str], threads: int = 2) -> list[list[int]]:
        """Subword ids of each target line, without BOS/EOS."""
        return self._tgt.encode(list(lines), out_type=int, num_threads=threads)

    def decode_src(self, ids: Iterable[int]) -> str:
        """Text of source ids; padding, BOS and EOS are dropped."""
        return self._src.decode([int(i) for i in ids if int(i) not in SPECIAL_IDS])

    def decode_tgt(self, ids: Iterable[int]) -> str:
        """Text of target ids; padding, BOS and EOS are dropped."""
        return self._tgt.decode([int(i) for i in ids if int(i) not in SPECIAL_IDS])

    def src_pieces(self, line: str) -> list[str]:
        """Subword strings of a source line (no specials), e.g. for attention-plot labels."""
        return self._src.encode(line, out_type=str)

    def tgt_pieces(self, line: str) -> list[str]:
        """Subword strings of a target line (no specials)."""
        return self._tgt.encode(line, out_type=str)

    def tgt_id_pieces(self, ids: Iterable[int]) -> list[str]:
        """Subword strings of target ids, e.g. for attention-plot labels of a hypothesis."""
        return [self._tgt.id_to_piece(int(i)) for i in ids]
