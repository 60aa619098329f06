"""Mixed training corpora: the dataset's own pairs beside more corpora, each with a weight (how often an epoch sees
it, counted in the id store) and a tag (a reserved symbol before its sources, which no search emits)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch

from nmt.cli import prepare_main
from nmt.config import Config, CorpusConfig, DataConfig, DecodeConfig, TokenizerConfig, load_config
from nmt.data import prepare, summary
from nmt.data.pipeline import repeats
from nmt.errors import ConfigError, DataError
from nmt.models.base import Memory, Seq2Seq, State
from nmt.search import Suppressing, beam_search, greedy_search
from nmt.tokenizer import BOS_ID, EOS_ID, PAD_ID
from tests.conftest import fails_cleanly, tiny_config

SYNTHETIC = [("ein roter hund rennt", "a red dog runs"), ("zwei katzen schlafen", "two cats sleep"),
             ("ein mann liest", "a man reads"), ("eine frau singt laut", "a woman sings loudly")]


def quiet(_: str) -> None:
    pass


def write_pair(folder: Path, name: str, rows: list[tuple[str, str]]) -> list[str]:
    folder.mkdir(parents=True, exist_ok=True)
    src, tgt = folder / f"{name}.de", folder / f"{name}.en"
    src.write_text("".join(s + "\n" for s, _ in rows), encoding="utf-8")
    tgt.write_text("".join(t + "\n" for _, t in rows), encoding="utf-8")
    return [str(src), str(tgt)]


def sample_with(tmp_path: Path, corpora: list) -> Config:
    return load_config(tiny_config(tmp_path, data={"train_corpora": corpora}))


@pytest.mark.parametrize("weight", [0.25, 0.5, 1.0, 1.5, 2.0, 3.7])
def test_repeats_store_each_pair_by_its_weight(weight):
    times = repeats(40, weight)
    assert int(times.sum()) == int(np.floor(40 * weight + 1e-9)) and set(times.tolist()) <= {int(weight),
                                                                                              int(weight) + 1}


def test_weights_change_how_often_a_corpus_is_seen(tmp_path):
    files = write_pair(tmp_path / "synthetic", "bt", SYNTHETIC)
    plain = prepare(sample_with(tmp_path / "a", [files]), log=quiet)
    tripled = prepare(sample_with(tmp_path / "b", [{"files": files, "weight": 3}]), log=quiet)
    halved = prepare(sample_with(tmp_path / "c", [{"files": files, "weight": 0.5}]), log=quiet)

    def seen(prepared) -> Counter:
        tok, train = prepared.tokenizer, prepared.splits["train"]
        return Counter(tok.detokenize(train.tgt[i]) for i in range(len(train)))

    base = len(plain.splits["train"]) - len(SYNTHETIC)
    assert len(tripled.splits["train"]) == base + 3 * len(SYNTHETIC)
    assert len(halved.splits["train"]) == base + len(SYNTHETIC) // 2
    counts, once = seen(tripled), seen(plain)
    assert all(counts[t] == 3 * once[t] for _, t in SYNTHETIC), counts
    assert sum(seen(halved)[t] for _, t in SYNTHETIC) == len(SYNTHETIC) // 2
    assert [c["rows"] for c in tripled.stats["corpora"]][1] == 3 * len(SYNTHETIC)
    assert f"bt.de + bt.en 4 / 4 x 3 = {3 * len(SYNTHETIC)}" in summary(tripled)
    assert {s: len(tripled.splits[s]) for s in ("val", "test")} == {s: len(plain.splits[s]) for s in ("val", "test")}


def test_a_tag_marks_its_corpus_sources_only_and_is_never_emitted(tmp_path):
    files = write_pair(tmp_path / "synthetic", "bt", SYNTHETIC)
    prepared = prepare(sample_with(tmp_path, [{"files": files, "tag": "<bt>"}]), log=quiet)
    tok, splits = prepared.tokenizer, prepared.splits
    tag = tok.reserved_id("<bt>")
    assert tok.never_emit == {tag}
    train = splits["train"]
    starts = [int(train.src[i][0]) for i in range(len(train))]
    assert starts.count(tag) == len(SYNTHETIC) and starts[-len(SYNTHETIC):] == [tag] * len(SYNTHETIC)
    for split in ("val", "test"):  # evaluation reads the real data alone, untagged
        assert not any(tag in splits[split].src[i] for i in range(len(splits[split])))
    assert tok.encode_src(["<bt> ein hund"])[0][0] != tag, "typed text never turns into the tag"
    assert tok.detokenize([tag, *tok.encode_tgt(["a dog"])[0]]) == "a dog"


class Eager(Seq2Seq):
    """A scripted model whose most probable next token is always `favourite`, then EOS after three tokens."""

    def __init__(self, favourite: int, vocab: int = 12) -> None:
        super().__init__()
        self.pad_id, self.bos_id, self.eos_id = PAD_ID, BOS_ID, EOS_ID
        self.favourite, self.vocab = favourite, vocab

    def encode(self, src: torch.Tensor, src_mask: torch.Tensor) -> Memory:
        return {}

    def init_state(self, memory: Memory, src_mask: torch.Tensor) -> State:
        return State(attention=src_mask.float())

    def step(self, prev_tokens: torch.Tensor, state: State) -> tuple[torch.Tensor, State]:
        probs = torch.full((prev_tokens.numel(), self.vocab), 0.01)  # (B, V)
        probs[:, self.favourite] = 0.8
        probs[:, self.favourite + 1] = 0.1
        return (probs / probs.sum(1, keepdim=True)).log(), State(width=state.width, attention=state.attention)


def _search(model: Seq2Seq, src: torch.Tensor, mask: torch.Tensor, cfg: DecodeConfig) -> list[list]:
    if cfg.beam == 1:
        return [[hyp] for hyp in greedy_search(model, src, mask, cfg)]
    return beam_search(model, src, mask, cfg)


@pytest.mark.parametrize("beam", [1, 3])
def test_the_search_never_emits_a_reserved_id(beam):
    src = torch.tensor([[5, 6, EOS_ID], [7, EOS_ID, PAD_ID]])
    mask = src != PAD_ID
    cfg = DecodeConfig(beam=beam, length_penalty=0.0, max_len_a=0.0, max_len_b=3)
    free = _search(Eager(8), src, mask, cfg)
    assert all(8 in hyps[0].tokens for hyps in free)  # without the mask the favourite is emitted
    masked = _search(Suppressing(Eager(8), frozenset({8})), src, mask, cfg)
    assert all(hyps and 8 not in hyp.tokens for hyps in masked for hyp in hyps)
    assert all(9 in hyps[0].tokens for hyps in masked)  # the next best is taken instead


def test_a_tagged_model_translates_untagged_input(tmp_path):
    from nmt import load
    from tests.conftest import untrained_run

    files = write_pair(tmp_path / "synthetic", "bt", SYNTHETIC)
    run = untrained_run(tmp_path, "tagged", data={"train_corpora": [{"files": files, "tag": "<bt>"}]})
    translator = load(run, device="cpu")
    tag = translator.tokenizer.reserved_id("<bt>")
    lines = ["Ein Hund rennt.", "Zwei Katzen schlafen."]
    # the tag made the model's favourite output everywhere: only the mask keeps it out
    hook = translator.engine.model.output.register_forward_hook(
        lambda _module, _inputs, logits: logits.index_fill(-1, torch.tensor([tag]), 1e4))
    try:
        hyps = translator.hypotheses(lines)
        texts = translator.translate(lines)
        translator.tokenizer.__dict__["never_emit"] = frozenset()  # the same search without the mask
        unmasked = translator.hypotheses(lines)
    finally:
        hook.remove()
    assert all(hyp and tag not in hyp[0].tokens for hyp in hyps)
    assert all(isinstance(text, str) and "<bt>" not in text for text in texts)
    assert all(tag in hyp[0].tokens for hyp in unmasked)


@pytest.mark.parametrize(("entry", "message"), [
    ({"files": ["a.de", "a.en"], "weight": 0}, "data.train_corpora[0].weight: 0.0 must be above 0"),
    ({"files": ["a.de", "a.en"], "weight": -2}, "data.train_corpora[0].weight: -2.0 must be above 0"),
    ({"files": ["a.de", "a.en"], "tag": "</s>"}, "data.train_corpora[0].tag: '</s>' must be a reserved symbol"),
    ({"files": ["a.de", "a.en"], "tag": "bt"}, "data.train_corpora[0].tag: 'bt' must be a reserved symbol"),
    ({"files": ["a.de", "a.en"], "wieght": 2}, "did you mean 'weight'"),
])
def test_a_bad_corpus_entry_is_one_line_before_any_data_is_read(tmp_path, capsys, entry, message):
    config = tiny_config(tmp_path / "cfg", data={"train_corpora": [entry]})
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("]", r"\]").replace("(", r"\(")):
        load_config(config)
    fails_cleanly(prepare_main, [str(config)], capsys, tmp_path, message)


def test_an_empty_corpus_file_is_one_line_and_leaves_no_cache(tmp_path, capsys):
    files = write_pair(tmp_path / "synthetic", "bt", [])
    config = tiny_config(tmp_path / "cfg", data={"train_corpora": [{"files": files, "weight": 2}],
                                                 "cache_dir": str(tmp_path / "cache")})
    fails_cleanly(prepare_main, [str(config)], capsys, tmp_path, "bt.de: the file has no lines")


def test_a_tag_the_given_tokenizer_does_not_reserve_is_refused(tmp_path):
    files = write_pair(tmp_path / "synthetic", "bt", SYNTHETIC)
    given = prepare(sample_with(tmp_path / "parent", []), log=quiet).tokenizer
    child = Config(data=DataConfig(cache_dir=str(tmp_path / "cache"), train_corpora=[CorpusConfig(files, tag="<bt>")]),
                   tokenizer=TokenizerConfig(vocab_size=300))
    with pytest.raises(DataError, match=r"data.train_corpora: tag '<bt>' is not in the tokenizer's source vocab"):
        prepare(child, log=quiet, tokenizer=given)
    assert not any((tmp_path / "cache").glob("*/COMPLETE"))


def test_a_ctranslate2_export_of_a_tagged_model_never_emits_the_tag(tmp_path):
    pytest.importorskip("ctranslate2")
    from nmt.checkpoint import load_checkpoint, save_checkpoint
    from nmt.export import export_ctranslate2
    from nmt.loader import load_translator
    from tests.conftest import untrained_run

    files = write_pair(tmp_path / "synthetic", "bt", SYNTHETIC)
    run = untrained_run(tmp_path, "tagged", data={"train_corpora": [{"files": files, "tag": "<bt>"}]},
                        model={"output_bias": True})
    payload = load_checkpoint(run / "checkpoints" / "best.pt")
    translator = load_translator([run], "cpu")
    tag = translator.tokenizer.reserved_id("<bt>")
    payload["model"]["output.bias"][tag] = 1e4  # the tag is the model's favourite output everywhere
    save_checkpoint(payload, tmp_path / "favours_tag.pt")
    export_ctranslate2(tmp_path / "favours_tag.pt", tmp_path / "ct2", "float32")
    exported = load_translator([tmp_path / "ct2"], "cpu")
    lines = ["Ein Hund rennt.", "Zwei Katzen schlafen."]
    hyps = exported.hypotheses(lines)
    assert all(hyp and tag not in hyp[0].tokens for hyp in hyps)
    engine = exported.engine  # the same search without the mask emits it
    pieces = [[engine.src_pieces[i] for i in ids.tolist()] + [engine.eos] for ids in exported.encode(lines)]
    unmasked = engine.translator.translate_batch(pieces, beam_size=1, max_decoding_length=4)
    assert all("<bt>" in out.hypotheses[0] for out in unmasked)
