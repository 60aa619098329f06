"""Sentencepiece subword models. The special token ids are defined here and only here."""

from __future__ import annotations

from dataclasses import dataclass

PAD_ID = 0
UNK_ID = 1
BOS_ID = 2
EOS_ID = 3


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
