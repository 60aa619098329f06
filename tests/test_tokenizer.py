"""Sentencepiece wrapper: specials, round trips, saving, identity."""

import random

import pytest
import sentencepiece as spm

from nmt.config import TokenizerConfig
from nmt.errors import TokenizerError
from nmt.tokenizer import BOS_ID, EOS_ID, JOINT_FILE, PAD_ID, SRC_FILE, UNK_ID, Tokenizer

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
    assert [tok.detokenize([BOS_ID, *x, EOS_ID, PAD_ID]) for x in ids] == tgt[:5]
    source_model = spm.SentencePieceProcessor(model_file=str(tmp_path / (JOINT_FILE if joint else SRC_FILE)))
    assert [source_model.decode(x) for x in tok.encode_src(src[:5])] == src[:5]
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


def test_a_sample_of_only_overlong_lines_is_a_clear_error(tmp_path):
    line = " ".join(["Haus"] * 1000)  # 4,999 bytes: sentencepiece skips it
    with pytest.raises(TokenizerError, match="skips lines longer than 4,192 bytes"):
        Tokenizer.train(TokenizerConfig(vocab_size=50), [line] * 3, [line] * 3, tmp_path)


def test_saving_one_layout_removes_the_other(tmp_path):
    src, tgt = corpus()
    separate = Tokenizer.train(TokenizerConfig(vocab_size=100, joint=False), src, tgt, tmp_path / "a")
    joint = Tokenizer.train(TokenizerConfig(vocab_size=100), src, tgt, tmp_path / "b")
    joint.save(tmp_path / "a")
    assert Tokenizer.load(tmp_path / "a").identity == joint.identity
    separate.save(tmp_path / "a")
    assert Tokenizer.load(tmp_path / "a").identity == separate.identity


# ---------------------------------------------------------------------------------------------- training sample


def reservoir_sample(n: int, k: int, seed: int, chunk: int) -> list[bytes]:
    from nmt.data.sampling import Reservoir

    items = [str(i).encode() for i in range(n)]
    res = Reservoir(k, seed)
    for start in range(0, n, chunk):
        part = items[start:start + chunk]
        res.offer(start, lambda part=part: part, len(part))
    return res.sample()


def test_reservoir_sample_is_seeded_uniform_and_independent_of_chunking():
    first = reservoir_sample(5000, 300, seed=1, chunk=64)
    assert len(first) == len(set(first)) == 300
    assert [int(x) for x in first] == sorted(int(x) for x in first), "the sample keeps stream order"
    assert reservoir_sample(5000, 300, seed=1, chunk=1000) == first == reservoir_sample(5000, 300, seed=1, chunk=7)
    assert reservoir_sample(5000, 300, seed=2, chunk=64) != first
    assert reservoir_sample(250, 300, seed=1, chunk=64) == [str(i).encode() for i in range(250)]
    # Every item is equally likely: over many seeds, the first and last fifths are chosen about equally often.
    hits = [0, 0]
    for seed in range(200):
        picked = [int(x) for x in reservoir_sample(1000, 20, seed=seed, chunk=100)]
        hits[0] += sum(x < 200 for x in picked)
        hits[1] += sum(x >= 800 for x in picked)
    assert abs(hits[0] - hits[1]) < 0.25 * (hits[0] + hits[1]) / 2


def test_prepared_tokenizer_sample_is_deterministic_for_a_seed(tmp_path):
    from nmt.config import Config, DataConfig
    from nmt.data import prepare

    src, tgt = corpus(3000)
    paths = {}
    for split, rows in {"train": (src, tgt), "val": corpus(10, seed=1)}.items():
        for side, lines in zip(("src", "tgt"), rows, strict=True):
            paths[f"{split}_{side}"] = str(tmp_path / f"{split}.{side}")
            (tmp_path / f"{split}.{side}").write_text("\n".join(lines) + "\n", encoding="utf-8")

    def sample(name: str, **tok) -> dict:
        cfg = Config(data=DataConfig(dataset="files", cache_dir=str(tmp_path / name), **paths),
                     tokenizer=TokenizerConfig(vocab_size=100, **tok))
        return prepare(cfg, log=lambda _m: None).stats["tokenizer_sample"]

    a, b = sample("a", sample_pairs=500), sample("b", sample_pairs=500)
    assert a == b and a["pairs"] == 500
    assert sample("c", sample_pairs=500, sample_seed=2)["sha256"] != a["sha256"]
    assert sample("d", sample_pairs=10_000)["pairs"] == 3000, "all pairs when there are fewer than sample_pairs"


def test_train_reads_generators_once(tmp_path):
    src, tgt = corpus()
    from_lists = Tokenizer.train(TokenizerConfig(vocab_size=120), src, tgt, tmp_path / "a")
    from_generators = Tokenizer.train(TokenizerConfig(vocab_size=120), iter(src), (t for t in tgt), tmp_path / "b")
    assert from_generators.identity == from_lists.identity
