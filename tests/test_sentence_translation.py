"""Texts translated sentence by sentence on the shared trained run: a one-sentence line decodes exactly as without
splitting, paragraphs are joined with their own whitespace, n-best lists and confidences of several sentences,
nmt-translate's and the native API's output, and evaluation that never splits."""

from __future__ import annotations

import itertools
import json
import math
import warnings

import pytest
import torch

import nmt
import nmt.sentences
import nmt.translator
from nmt.cli import translate_main
from nmt.config import load_config
from nmt.data import prepare
from nmt.evaluation import split_pair, tune_length_penalty
from nmt.loader import load_translator
from nmt.run.folder import RunDir
from nmt.sentences import split
from nmt.serve.app import Limits, create_app
from nmt.trainer import validation_scores
from nmt.translator import Translator
from tests.conftest import REPO

with warnings.catch_warnings():  # starlette's notice that it prefers httpx2 over httpx, which works
    warnings.filterwarnings("ignore", message="Using `httpx` with `starlette.testclient`")
    from fastapi.testclient import TestClient

CPU = torch.device("cpu")
PARAGRAPH = " Ein Hund läuft im Park.  Zwei Kinder spielen mit einem Ball.\n\nEine Frau liest ein Buch"
SENTENCES = ["Ein Hund läuft im Park.", "Zwei Kinder spielen mit einem Ball.", "Eine Frau liest ein Buch"]
# Test-set lines that a splitter could cut wrongly (test2018 has such lines): evaluation reads each whole.
TRICKY = ["Die U.S. Navy testet ein Boot. Zwei Männer schauen zu.", "Ein Mann arbeitet bei E.S.E. Electronics."]


@pytest.fixture(scope="module")
def translator(trained_run):
    return load_translator([trained_run], CPU)


def whole_lines(translator: Translator, lines: list[str], terms: list[list[str]] | None = None) -> list[str]:
    """Each line's best translation, the line searched whole (as evaluation searches it)."""
    return [translator.detokenize(found[0]) if found else "" for found in translator.hypotheses(lines, terms=terms)]


def test_a_line_of_one_sentence_decodes_exactly_as_without_splitting(translator):
    test = (REPO / "data" / "sample" / "test.de").read_text(encoding="utf-8").splitlines()
    assert all(len(split(line, language="de").sentences) == 1 for line in test)  # each sample line: one sentence
    split_on, split_off = (translator.translate_nbest(test, split_sentences=mode) for mode in ("on", "off"))
    assert [(t[0].text, t[0].score, t[0].log_prob, t[0].tokens) for t in split_on] == [
        (t[0].text, t[0].score, t[0].log_prob, t[0].tokens) for t in split_off]
    assert whole_lines(translator, test) == [found[0].text for found in split_on]
    paragraphs = [" ".join(test[i:i + 3]) for i in range(0, 9, 3)]
    beside = translator.translate_nbest(test + paragraphs)  # other sentences in the batch change no output
    assert [found[0].text for found in beside[:len(test)]] == [found[0].text for found in split_on]
    assert [found[0].log_prob for found in beside[:len(test)]] == pytest.approx(
        [found[0].log_prob for found in split_on], rel=1e-5)  # padding changes float rounding only


def test_a_paragraph_is_translated_sentence_by_sentence_and_joined_with_its_own_whitespace(translator):
    one, two, three = translator.translate(SENTENCES)
    assert translator.translate(PARAGRAPH) == f" {one}  {two}\n\n{three}"
    assert translator.translate(PARAGRAPH, split_sentences=True) == translator.translate(PARAGRAPH)
    assert translator.translate(PARAGRAPH, split_sentences="off") == " " + whole_lines(translator, [PARAGRAPH])[0]
    assert translator.translate(PARAGRAPH, split_sentences="nonewlines") == f" {one}  {two}\n\n{three}"
    assert translator.translate(["", " \n "]) == ["", ""]
    with pytest.raises(nmt.ConfigError, match="split_sentences 'all': choose on, off, nonewlines"):
        translator.translate(PARAGRAPH, split_sentences="all")


def test_confidence_is_the_token_weighted_mean_log_probability_of_the_sentences(translator):
    parts = [translator.translate_nbest(sentence, n=1)[0] for sentence in SENTENCES]
    whole = translator.translate_nbest(PARAGRAPH, n=1)[0]
    assert whole.tokens == sum(part.tokens for part in parts)
    assert whole.log_prob == pytest.approx(sum(part.log_prob for part in parts), rel=1e-6)
    assert whole.score == pytest.approx(sum(part.score for part in parts), rel=1e-6)
    assert whole.mean_log_prob == pytest.approx(whole.log_prob / whole.tokens)
    assert 0.0 < whole.confidence <= 1.0 and whole.confidence == pytest.approx(math.exp(whole.mean_log_prob))
    for part, hyp in zip(parts, whole.hypotheses, strict=True):
        assert part.tokens == len(hyp.tokens) + 1 and 0.0 < part.confidence <= 1.0  # EOS counted


def test_the_n_best_list_of_a_paragraph_holds_the_best_sums_of_its_sentences_alternatives(translator):
    wide = translator.with_decode(beam=3, n_best=3)
    each = [wide.translate_nbest(sentence) for sentence in SENTENCES[:2]]
    found = wide.translate_nbest(" ".join(SENTENCES[:2]))
    combos = {f"{a.text} {b.text}": a.score + b.score for a, b in itertools.product(*each)}
    # other sentences in the batch change the scores' float rounding only
    assert [t.score for t in found] == pytest.approx(sorted(combos.values(), reverse=True)[:3], rel=1e-5)
    assert all(combos[t.text] == pytest.approx(t.score, rel=1e-5) for t in found)
    assert found[0].text == f"{each[0][0].text} {each[1][0].text}"
    assert [len(t) for t in wide.translate_nbest(["", SENTENCES[0]])] == [0, 3]


def test_nmt_translate_splits_lines_and_prints_confidences_and_per_sentence_attention(trained_run, tmp_path):
    src, out, stats = tmp_path / "in.de", tmp_path / "out.en", tmp_path / "stats.jsonl"
    src.write_text(" ".join(SENTENCES) + "\n\n" + SENTENCES[0] + "\n", encoding="utf-8")
    expected = load_translator([trained_run], CPU).translate(SENTENCES)
    assert translate_main(["-c", str(trained_run), "-i", str(src), "-o", str(out), "--attention-stats",
                           str(stats)]) == 0
    assert out.read_text(encoding="utf-8").split("\n") == [" ".join(expected), "", expected[0], ""]
    assert [(r["line"], r["sentence"]) for r in map(json.loads, stats.read_text().splitlines())] == [
        (1, 1), (1, 2), (1, 3), (3, 1)]
    assert translate_main(["-c", str(trained_run), "-i", str(src), "-o", str(out), "--scores"]) == 0
    rows = [row.split("\t") for row in out.read_text(encoding="utf-8").splitlines()]
    assert [len(row) for row in rows] == [4, 1, 4] and [row[0] for row in rows] == [" ".join(expected), "", expected[0]]
    for _text, score, mean, confidence in (rows[0], rows[2]):
        assert float(score) <= 0 and float(mean) <= 0 and 0.0 < float(confidence) <= 1.0
        assert float(confidence) == pytest.approx(math.exp(float(mean)), abs=1e-4)
    assert translate_main(["-c", str(trained_run), "-i", str(src), "-o", str(out), "--split-sentences", "off"]) == 0
    whole = whole_lines(load_translator([trained_run], CPU), [" ".join(SENTENCES)])[0]
    assert out.read_text(encoding="utf-8").split("\n")[0] == whole
    assert translate_main(["-c", str(trained_run), "-i", str(src), "-o", str(out), "--scores", "--beam", "2",
                           "--n-best", "2"]) == 0
    moses = [row.split(" ||| ") for row in out.read_text(encoding="utf-8").splitlines()]
    assert {len(row) for row in moses} == {4} and [row[0] for row in moses] == ["0", "0", "2", "2"]
    assert all(0.0 < float(row[3].split()[1]) <= 1.0 for row in moses)


def test_the_native_api_splits_sentences_and_gives_confidences(translator):
    with TestClient(create_app(translator, Limits(max_sentences=8, max_chars=400, max_beam=4))) as client:
        answer = client.post("/translate", json={"src": [PARAGRAPH, ""], "beam": 2, "n_best": 2}).json()
        assert answer["translations"] == [translator.translate(PARAGRAPH, beam=2), ""]
        assert answer["settings"]["split_sentences"] == "on"
        best = translator.translate_nbest(PARAGRAPH, n=2, beam=2)
        assert answer["confidences"][0] == round(best[0].confidence, 4) and answer["confidences"][1] is None
        assert answer["mean_log_probs"][0] == round(best[0].mean_log_prob, 4)
        assert [h["confidence"] for h in answer["n_best"][0]] == [round(t.confidence, 4) for t in best]
        off = client.post("/translate", json={"src": [PARAGRAPH], "split_sentences": "off"}).json()
        assert off["translations"] == [translator.translate(PARAGRAPH, split_sentences="off")]
        refused = client.post("/translate", json={"src": [PARAGRAPH], "split_sentences": "yes"})
        assert refused.status_code == 400 and "split_sentences must be" in refused.json()["error"]
        many = client.post("/translate", json={"src": [" ".join([SENTENCES[0]] * 9)]})  # nine sentences
        assert many.status_code == 413 and "at most 8" in many.json()["error"]


def test_evaluation_validation_and_tuning_never_split(trained_run, tmp_path, monkeypatch):
    def refuse(*_args, **_kwargs):
        raise AssertionError("evaluation split a line into sentences")

    monkeypatch.setattr(nmt.translator, "split", refuse)
    monkeypatch.setattr(nmt.sentences, "split", refuse)
    src, ref = tmp_path / "tricky.de", tmp_path / "tricky.en"
    src.write_text("\n".join(TRICKY) + "\n", encoding="utf-8")
    ref.write_text("The U.S. Navy tests a boat. Two men watch.\nA man works at E.S.E. Electronics.\n",
                   encoding="utf-8")
    report = nmt.evaluate(trained_run, src=src, ref=ref, device="cpu")
    translator = load_translator([trained_run], CPU)
    assert report["hypotheses"] == whole_lines(translator, TRICKY) and report["sentences"] == 2
    assert nmt.evaluate(trained_run, device="cpu")["sentences"] == len(split_pair(translator.cfg, "test")[0])
    assert {row["length_penalty"] for row in tune_length_penalty(translator, (1.0,))["table"]} == {1.0}
    cfg = load_config(RunDir(trained_run).config, {"train.eval_bleu": True})
    scores = validation_scores(translator.engine.model, prepare(cfg), cfg, CPU)
    assert math.isfinite(scores["bleu"])


def test_a_glossary_applies_to_each_sentence_and_constraints_need_a_text_of_one_sentence(translator):
    glossary = {"Hund": "puppy"}
    one, two = translator.translate(SENTENCES[:2], glossary=glossary)
    assert translator.translate(" ".join(SENTENCES[:2]), glossary=glossary) == f"{one} {two}"
    with pytest.raises(nmt.DataError, match="constraints of text 1: it holds 2 sentences"):
        translator.translate(" ".join(SENTENCES[:2]), constraints=["puppy"])
    whole = translator.translate(" ".join(SENTENCES[:2]), constraints=["puppy"], split_sentences="off")
    assert whole == whole_lines(translator, [" ".join(SENTENCES[:2])], terms=[["puppy"]])[0]
