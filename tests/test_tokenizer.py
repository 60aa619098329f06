"""Sentencepiece wrapper: specials, round trips, saving, identity."""

import random

import pytest

from nmt.config import TokenizerConfig
from nmt.tokenizer import BOS_ID, EOS_ID, PAD_ID, UNK_ID, Tokenizer, TokenizerError

DE = "der die ein eine mann frau kind hund katze spielt läuft sitzt auf im park straße ball rot blau".split()
EN = "the the a a man woman child dog cat plays runs sits on in park street ball red blue".split()


def corpus(n: int = 80, seed: int = 0) -> tuple[list[str], list[str]]:
    rng = random.Random(seed)
    src, tgt = [], []
    for _ in range(n):
        idx = [rng.randrange(len(DE)) for _ in range(rng.randint(3, 7))]
        src.append(" ".join(DE[i] for i in idx))
        tgt.append(" ".join(EN[i] for i in idx))
    return src, tgt


@pytest.mark.parametrize("kind", ["unigram", "bpe"])
@pytest.mark.parametrize("joint", [True, False])
def test_train_round_trip_and_specials(tmp_path, kind, joint):
    src, tgt = corpus()
    tok = Tokenizer.train(TokenizerConfig(type=kind, vocab_size=120, joint=joint), src, tgt, tmp_path)
    assert tok.joint == joint and tok.vocab.joint == joint
    assert (tok.vocab.pad_id, tok.vocab.unk_id, tok.vocab.bos_id, tok.vocab.eos_id) == (PAD_ID, UNK_ID, BOS_ID, EOS_ID)
    ids = tok.encode_tgt(tgt[:5])
    assert all(min(x) > EOS_ID for x in ids)
    assert [tok.decode_tgt([BOS_ID, *x, EOS_ID, PAD_ID]) for x in ids] == tgt[:5]
    assert [tok.decode_src(x) for x in tok.encode_src(src[:5])] == src[:5]
    assert "".join(tok.src_pieces(src[0])).replace("\u2581", " ").strip() == src[0]
    assert tok.tgt_pieces("the dog")[0].startswith("\u2581")
    if joint:
        assert tok.vocab.src_size == tok.vocab.tgt_size
    assert UNK_ID in tok.encode_src(["Q"])[0]


def test_save_load_identity(tmp_path):
    src, tgt = corpus()
    tok = Tokenizer.train(TokenizerConfig(vocab_size=100, joint=False), src, tgt, tmp_path / "a")
    loaded = Tokenizer.load(tmp_path / "a")
    assert loaded.identity == tok.identity and loaded.vocab == tok.vocab
    tok.save(tmp_path / "b")
    assert Tokenizer.load(tmp_path / "b").identity == tok.identity
    assert Tokenizer.from_bytes(tok.to_bytes()).identity == tok.identity
    other = Tokenizer.train(TokenizerConfig(type="bpe", vocab_size=100, joint=False), src, tgt, tmp_path / "c")
    assert other.identity != tok.identity
    with pytest.raises(TokenizerError, match="no sentencepiece model"):
        Tokenizer.load(tmp_path / "empty")
    with pytest.raises(TokenizerError):
        Tokenizer.from_bytes(b"garbage")


def test_too_small_vocab_is_a_clear_error(tmp_path):
    src, tgt = corpus()
    with pytest.raises(TokenizerError, match="vocab_size"):
        Tokenizer.train(TokenizerConfig(vocab_size=8), src, tgt, tmp_path)
