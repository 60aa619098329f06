"""Sentencepiece subword models. The special token ids are defined here and only here."""

from __future__ import annotations

import functools
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
from nmt.errors import TokenizerError
from nmt.fileio import atomic_output

PAD_ID = 0
UNK_ID = 1
BOS_ID = 2
EOS_ID = 3

SPECIAL_IDS = frozenset({PAD_ID, BOS_ID, EOS_ID})
JOINT_FILE = "spm.model"
SRC_FILE = "src.model"
TGT_FILE = "tgt.model"
VOCAB_FILE = "vocab.json"  # an id table's pieces (a model imported from Hugging Face)
BLOB_FORMAT = 1
TABLE_BLOB_FORMAT = 2  # a blob with id tables


def model_pieces(proto: bytes) -> list[str]:
    """Every piece of a serialized sentencepiece model, in id order."""
    model = spm.SentencePieceProcessor(model_proto=proto)
    return [model.id_to_piece(i) for i in range(model.get_piece_size())]


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


def _train_model(cfg: TokenizerConfig, lines: Iterable[str], reserved: Sequence[str] = ()) -> bytes:
    """Train one sentencepiece model from an in-memory iterator and return its serialized bytes; each `reserved`
    symbol is a control piece (never matched in text: only put in as an id)."""
    writer = io.BytesIO()
    extra = {"control_symbols": list(reserved)} if reserved else {}
    try:
        spm.SentencePieceTrainer.train(
            sentence_iterator=iter(lines), model_writer=writer, model_type=cfg.type, vocab_size=cfg.vocab_size,
            character_coverage=cfg.character_coverage, hard_vocab_limit=cfg.hard_vocab_limit,
            pad_id=PAD_ID, unk_id=UNK_ID, bos_id=BOS_ID, eos_id=EOS_ID, num_threads=2, minloglevel=2, **extra)
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
    """Source and target sentencepiece models (one when the vocabulary is joint), with id tables for an imported
    Marian vocabulary."""

    def __init__(self, src_model: bytes, tgt_model: bytes | None = None,
                 tables: Sequence[Sequence[str]] | None = None) -> None:
        """`tgt_model=None`: one joint model; `tables`: one id table for both sides, or one per side."""
        self._protos = [src_model] if tgt_model is None else [src_model, tgt_model]
        try:
            self._src = spm.SentencePieceProcessor(model_proto=src_model)
            self._tgt = self._src if tgt_model is None else spm.SentencePieceProcessor(model_proto=tgt_model)
        except RuntimeError as err:
            raise TokenizerError(f"invalid sentencepiece model: {err}") from None
        self._tables = [list(table) for table in tables] if tables is not None else []
        if tables is not None:
            _check_tables(self._tables)
        self._ids = [{piece: i for i, piece in enumerate(table)} for table in self._tables]

    @property
    def joint(self) -> bool:
        """One vocabulary for both sides: one table, or without tables one sentencepiece model."""
        return len(self._tables or self._protos) == 1

    @property
    def tables(self) -> list[list[str]]:
        """The id tables (none: the sentencepiece models' own ids)."""
        return [list(table) for table in self._tables]

    @classmethod
    def train(cls, cfg: TokenizerConfig, src_lines: Iterable[str], tgt_lines: Iterable[str],
              out_dir: str | Path, reserved: Sequence[str] = ()) -> Tokenizer:
        """Train on the sentences (read once: a generator will do) and save into `out_dir`; the `reserved`
        symbols (source tags) are source pieces that no text segments into."""
        if cfg.joint:
            tok = cls(_train_model(cfg, itertools.chain(src_lines, tgt_lines), reserved))
        else:
            tok = cls(_train_model(cfg, src_lines, reserved), _train_model(cfg, tgt_lines))
        tok.save(out_dir)
        return tok

    @classmethod
    def load(cls, directory: str | Path) -> Tokenizer:
        """Load the model files `save` wrote."""
        directory = Path(directory)
        tables = None
        if (directory / VOCAB_FILE).is_file():
            try:
                tables = json.loads((directory / VOCAB_FILE).read_text(encoding="utf-8"))["tables"]
            except (ValueError, KeyError, TypeError) as err:
                raise TokenizerError(f"{directory / VOCAB_FILE}: unreadable id table ({err})") from None
        if (directory / JOINT_FILE).is_file():
            return cls((directory / JOINT_FILE).read_bytes(), tables=tables)
        if (directory / SRC_FILE).is_file() and (directory / TGT_FILE).is_file():
            return cls((directory / SRC_FILE).read_bytes(), (directory / TGT_FILE).read_bytes(), tables)
        raise TokenizerError(f"{directory}: no sentencepiece model ({JOINT_FILE}, or {SRC_FILE} and {TGT_FILE})")

    def save(self, directory: str | Path) -> None:
        """Write the model files into `directory`, removing the other layout's, so that `load` finds these."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        names = [JOINT_FILE] if len(self._protos) == 1 else [SRC_FILE, TGT_FILE]
        for name, proto in zip(names, self._protos, strict=True):
            with atomic_output(directory / name, "wb") as handle:
                handle.write(proto)
        if self._tables:
            with atomic_output(directory / VOCAB_FILE) as handle:
                handle.write(json.dumps({"tables": self._tables}, ensure_ascii=False))
            names.append(VOCAB_FILE)
        for stale in {JOINT_FILE, SRC_FILE, TGT_FILE, VOCAB_FILE} - set(names):
            (directory / stale).unlink(missing_ok=True)

    def to_bytes(self) -> bytes:
        """The model files in one blob (for checkpoints); `from_bytes` reverses it."""
        meta: dict = {"format": BLOB_FORMAT, "sizes": [len(p) for p in self._protos]}
        if self._tables:
            meta.update(format=TABLE_BLOB_FORMAT, tables=self._tables)
        return json.dumps(meta).encode() + b"\n" + b"".join(self._protos)

    @classmethod
    def from_bytes(cls, blob: bytes) -> Tokenizer:
        """Rebuild a tokenizer from `to_bytes` output."""
        try:
            header, _, body = bytes(blob).partition(b"\n")
            meta = json.loads(header)
            sizes = meta["sizes"]
            tables = meta["tables"] if meta["format"] == TABLE_BLOB_FORMAT else None
            if meta["format"] not in (BLOB_FORMAT, TABLE_BLOB_FORMAT) or len(sizes) not in (1, 2) \
                    or sum(sizes) != len(body):
                raise ValueError("unexpected layout")
        except (ValueError, KeyError, TypeError) as err:
            raise TokenizerError(f"not a serialized tokenizer ({err})") from None
        protos = [body[:sizes[0]], body[sizes[0]:]]
        return cls(protos[0], tables=tables) if len(sizes) == 1 else cls(*protos, tables)

    @property
    def identity(self) -> str:
        """sha256 of the model files: equal identities mean equal vocabularies and segmentation."""
        digest = hashlib.sha256(b"joint" if self.joint else b"separate")
        for proto in self._protos:
            digest.update(hashlib.sha256(proto).digest())
        if self._tables:
            digest.update(hashlib.sha256(json.dumps(self._tables).encode()).digest())
        return digest.hexdigest()

    @property
    def vocab(self) -> VocabInfo:
        if self._tables:
            return VocabInfo(src_size=len(self._tables[0]), tgt_size=len(self._tables[-1]), joint=self.joint)
        return VocabInfo(src_size=self._src.get_piece_size(), tgt_size=self._tgt.get_piece_size(), joint=self.joint)

    def _encode(self, side: int, lines: Sequence[str], threads: int) -> list[list[int]]:
        model = (self._src, self._tgt)[side]
        if not self._tables:
            return model.encode(list(lines), out_type=int, num_threads=threads)
        ids = self._ids[min(side, len(self._ids) - 1)]
        return [[ids.get(piece, UNK_ID) for piece in pieces]
                for pieces in model.encode(list(lines), out_type=str, num_threads=threads)]

    def reserved_id(self, tag: str) -> int:
        """The source id of a reserved symbol (a corpus tag); TokenizerError when the vocabulary does not reserve
        it: absent, or an ordinary piece that text segments into."""
        if self._tables:
            raise TokenizerError(f"tag {tag!r}: a tokenizer with id tables (an imported model) reserves no tags")
        piece = self._src.piece_to_id(tag)
        if self._src.id_to_piece(piece) != tag:
            raise TokenizerError(f"tag {tag!r} is not in the tokenizer's source vocabulary (train a tokenizer with "
                                 "the tagged corpus)")
        if not self._src.is_control(piece) or piece in SPECIAL_IDS:
            raise TokenizerError(f"tag {tag!r} is an ordinary piece of the tokenizer's source vocabulary (id "
                                 f"{piece}), which text segments into: choose a tag that is not a word or subword")
        return piece

    @functools.cached_property
    def never_emit(self) -> frozenset[int]:
        """Target ids no search may output: the reserved symbols (tags) of a joint vocabulary."""
        if self._tables:
            return frozenset()
        model = self._tgt
        return frozenset(i for i in range(model.get_piece_size())
                         if model.is_control(i) and i not in SPECIAL_IDS and i != UNK_ID)

    def encode_src(self, lines: Sequence[str], threads: int = 2) -> list[list[int]]:
        """Subword ids of each source line, without BOS/EOS."""
        return self._encode(0, lines, threads)

    @functools.cached_property
    def tgt_word_continuations(self) -> frozenset[int]:
        """The target pieces that go on with a word: no word-start mark (U+2581) and a letter or digit first."""
        pieces = (self._tgt.id_to_piece(i) for i in range(self._tgt.get_piece_size()))
        return frozenset(i for i, piece in enumerate(pieces) if piece[:1].isalnum())

    def encode_tgt(self, lines: Sequence[str], threads: int = 2) -> list[list[int]]:
        """Subword ids of each target line, without BOS/EOS."""
        return self._encode(1, lines, threads)

    def detokenize(self, ids: Iterable[int]) -> str:
        """Text of target ids; padding, BOS and EOS are dropped."""
        kept = [int(i) for i in ids if int(i) not in SPECIAL_IDS]
        if not self._tables:
            return self._tgt.decode(kept)
        # as MarianTokenizer.convert_tokens_to_string: pieces through sentencepiece, then any word marks left
        return self._tgt.decode_pieces([self._tables[-1][i] for i in kept]).replace("\u2581", " ").strip()

    def src_pieces(self, line: str) -> list[str]:
        """Subword strings of a source line (no specials), e.g. for attention-plot labels."""
        return self._src.encode(line, out_type=str)

    def tgt_pieces(self, line: str) -> list[str]:
        """Subword strings of a target line (no specials)."""
        return self._tgt.encode(line, out_type=str)

    def tgt_id_pieces(self, ids: Iterable[int]) -> list[str]:
        """Subword strings of target ids, e.g. for attention-plot labels of a hypothesis."""
        if self._tables:
            return [self._tables[-1][int(i)] for i in ids]
        return [self._tgt.id_to_piece(int(i)) for i in ids]


def _check_tables(tables: list[list[str]]) -> None:
    """TokenizerError unless there are one or two tables of distinct strings, each holding the special ids."""
    if len(tables) not in (1, 2):
        raise TokenizerError(f"an id table for both sides, or one per side, not {len(tables)}")
    for table in tables:
        if not all(isinstance(piece, str) for piece in table):
            raise TokenizerError("an id table holds something other than subword strings")
        if len(table) <= max(PAD_ID, UNK_ID, BOS_ID, EOS_ID):
            raise TokenizerError(f"an id table of {len(table)} pieces has no room for the special ids")
        if len(set(table)) != len(table):
            raise TokenizerError("an id table names a piece twice")
