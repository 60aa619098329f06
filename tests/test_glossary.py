"""Glossaries and per-sentence constraints: how terms are read and matched, that translations hold them through
the Python API and nmt-translate, that decoding without them is today's, and one-line refusals of bad input."""

from __future__ import annotations

import warnings
from types import SimpleNamespace

import pytest
import torch

from nmt.cli import translate_main
from nmt.config import DecodeConfig
from nmt.data import collate, read_pair, resolve_files
from nmt.engines.ctranslate2 import CTranslate2Engine
from nmt.errors import DataError, ExportError
from nmt.glossary import MAX_ENTRIES, Glossary, line_terms, load_glossary
from nmt.loader import load_translator
from nmt.search import beam_search, constrained_beam_search
from nmt.translator import Translator
from tests.conftest import fails_cleanly

CPU = torch.device("cpu")
pytestmark = pytest.mark.usefixtures("one_thread")


def test_source_terms_match_whole_words_across_case_and_inflection() -> None:
    glossary = Glossary.of({"Hund": "hound", "roter Hut": "red hat", "Hut": "cap", "Straße": "road"})
    assert glossary.terms_for("Zwei HUNDE, ein Roter Hut und ein Hut auf der STRASSE.") == \
        ["hound", "red hat", "cap", "road"]
    assert glossary.terms_for("Des Hundes Hütte.") == ["hound"]  # an inflection ending on the last word
    assert glossary.terms_for("Ein roten Hut.") == ["cap"]  # only the last word of a term is inflected
    assert glossary.terms_for("Der Hutmacher und die Hunderassen.") == []  # no word is a prefix of a longer one
    assert glossary.terms_for("Ein roter Hut.") == ["red hat"]  # the longest match wins where terms overlap


@pytest.mark.parametrize("entries", [[("Hund", "dog"), ("Hunde", "dogs")], [("Hunde", "dogs"), ("Hund", "dog")]])
def test_a_term_written_as_the_sentence_writes_it_wins_over_one_matched_through_an_ending(entries) -> None:
    glossary = Glossary.of(entries)
    assert glossary.terms_for("Zwei Hunde.") == ["dogs"]  # whichever entry comes first, in every process
    assert glossary.terms_for("Ein Hund.") == ["dog"]


@pytest.mark.parametrize("entries", [[("Hund", "puppy"), ("hund", "kitty")], [("hund", "kitty"), ("Hund", "puppy")]])
def test_of_two_terms_alike_but_for_case_the_one_written_as_the_sentence_writes_it_wins(entries) -> None:
    glossary = Glossary.of(entries)
    assert glossary.terms_for("Ein hund läuft.") == ["kitty"]  # whichever entry comes first
    assert glossary.terms_for("Ein Hund läuft.") == ["puppy"]
    assert glossary.terms_for("Zwei hunde.") == ["kitty"] and glossary.terms_for("Zwei Hunden.") == ["puppy"]
    assert glossary.terms_for("EIN HUND.") == [entries[0][1]]  # written as neither: the entry listed first


def test_a_csv_row_naming_another_language_pair_is_refused_naming_its_line(trained_run, tmp_path, capsys) -> None:
    (tmp_path / "in.txt").write_text("Ein Hund.\n", encoding="utf-8")
    argv = ["-c", str(trained_run), "-i", str(tmp_path / "in.txt"), "--glossary", str(tmp_path / "g.csv"),
            "-o", str(tmp_path / "out.txt")]
    for rows, line in (("puppy,Hund,en,de\n", 1), ("Katze,cat,de,en\nHund,puppy,fr,es\n", 2)):
        (tmp_path / "g.csv").write_text(rows, encoding="utf-8")
        fails_cleanly(translate_main, argv, capsys, tmp_path, f"g.csv line {line}: the languages")
    assert Glossary.parse("Hund,puppy,DE,en-GB", "csv").entries == (("Hund", "puppy"),)  # codes as DeepL writes them


def test_a_target_term_the_vocabulary_cannot_write_is_refused_naming_its_entry(trained_run, tmp_path,
                                                                                capsys) -> None:
    (tmp_path / "in.txt").write_text("Ein Hund.\nEin Mann.\n", encoding="utf-8")
    (tmp_path / "g.tsv").write_text("Mann\tgentleman\nHund\t狗狗\n", encoding="utf-8")
    (tmp_path / "c.txt").write_text("puppy\n狗狗\n", encoding="utf-8")
    argv = ["-c", str(trained_run), "-i", str(tmp_path / "in.txt"), "-o", str(tmp_path / "out.txt")]
    fails_cleanly(translate_main, [*argv, "--glossary", str(tmp_path / "g.tsv")], capsys, tmp_path,
                  "glossary entry 2: the target term '狗狗' holds characters the model's target vocabulary cannot")
    fails_cleanly(translate_main, [*argv, "--constraints", str(tmp_path / "c.txt")], capsys, tmp_path,
                  "c.txt line 2: the target term '狗狗'")
    translator = load_translator([trained_run], CPU)
    for call in ({"glossary": {"Hund": "狗狗"}}, {"constraints": ["狗狗"]}):
        with pytest.raises(DataError, match="cannot write"):
            translator.translate("Ein Hund.", **call)


def test_tsv_and_deepl_csv_give_the_same_glossary(tmp_path) -> None:
    (tmp_path / "g.tsv").write_text("Hund\thound\n\nroter Hut\tred hat\n", encoding="utf-8")
    (tmp_path / "g.csv").write_text('Hund,hound,de,en\n"roter Hut","red hat"\n', encoding="utf-8")
    assert load_glossary(tmp_path / "g.tsv") == load_glossary(tmp_path / "g.csv")
    assert load_glossary(tmp_path / "g.tsv").to_tsv() == "Hund\thound\nroter Hut\tred hat\n"


MALFORMED = {
    "wrong columns": ("Hund\thound\nKatze\n", "g.tsv line 2: 1 columns"),
    "three columns": ("Hund\thound\textra\n", "g.tsv line 1: 3 columns"),
    "empty term": ("Hund\t\n", "g.tsv line 1: empty term"),
    "too many entries": ("".join(f"Wort{i}\tword{i}\n" for i in range(100_000)), "a glossary holds at most"),
    "a long term": (f"Hund\t{'a' * 10_000}\n", "a term of 10,000 characters"),
    "a source twice": ("Hund\thound\nHund\tdog\n", "g.tsv line 2: the source term 'Hund' is also on line 1"),
    "padded term": ("Hund \thound\n", "g.tsv line 1: a term begins or ends with whitespace"),
}


@pytest.mark.parametrize("case", MALFORMED)
def test_a_malformed_glossary_is_one_line_before_any_model_loads(case, trained_run, tmp_path, capsys) -> None:
    text, message = MALFORMED[case]
    (tmp_path / "g.tsv").write_text(text, encoding="utf-8")
    (tmp_path / "in.txt").write_text("Ein Hund.\n", encoding="utf-8")
    argv = ["-c", str(trained_run), "-i", str(tmp_path / "in.txt"), "--glossary", str(tmp_path / "g.tsv"),
            "-o", str(tmp_path / "out.txt")]
    fails_cleanly(translate_main, argv, capsys, tmp_path, message)
    with pytest.raises(DataError, match=message.split(": ", 1)[-1]):
        load_glossary(tmp_path / "g.tsv")


def test_the_python_api_refuses_malformed_entries_and_constraints() -> None:
    with pytest.raises(DataError, match="glossary entry 1: empty term"):
        Glossary.of({"": "x"})
    with pytest.raises(DataError, match=f"at most {MAX_ENTRIES:,}"):
        Glossary.of({f"w{i}": "x" for i in range(MAX_ENTRIES + 1)})
    with pytest.raises(DataError, match="glossary entry 1: expected a source term and a target term"):
        Glossary.of([("a", "b", "c")])
    with pytest.raises(DataError, match="give one list of target terms per line"):
        line_terms(["a", "b"], constraints=[["x"]])
    with pytest.raises(DataError, match="constraints of line 1: a term must be text"):
        line_terms(["a"], constraints=[[3]])


def test_without_terms_decoding_is_todays_on_the_sample_test_set(trained_run) -> None:
    """Constrained search with no term, and an empty glossary, give beam search's tokens and scores exactly."""
    translator = load_translator([trained_run], CPU)
    lines = read_pair(*resolve_files(translator.cfg)["test"])[0]
    model, cfg = translator.engine.model.eval(), translator.decode
    batch = collate([(ids, ids[:0]) for ids in translator.encode(lines)], model.pad_id)
    plain = beam_search(model, batch.src, batch.src_mask, cfg)
    empty = constrained_beam_search(model, batch.src, batch.src_mask, cfg, [[] for _ in lines])
    assert [[(h.tokens, h.log_prob, h.score) for h in n] for n in plain] == \
        [[(h.tokens, h.log_prob, h.score) for h in n] for n in empty]
    assert translator.translate(lines, glossary=Glossary.of({})) == translator.translate(lines)


def test_translations_hold_the_glossary_terms_their_lines_call_for(trained_run) -> None:
    translator = load_translator([trained_run], CPU)
    lines = read_pair(*resolve_files(translator.cfg)["test"])[0][:30]
    glossary = {"Mann": "gentleman", "Hund": "puppy"}
    calls = line_terms(lines, glossary)
    assert sum(bool(terms) for terms in calls) >= 5 and any(not terms for terms in calls)
    plain = translator.translate(lines)
    for beam in (1, 4):
        translated = translator.translate(lines, glossary=glossary, beam=beam)
        for line, terms, text, before in zip(lines, calls, translated, plain, strict=True):
            assert all(term in text for term in terms), (line, text)
            if not terms and beam == translator.decode.beam:  # a line that calls for no term: as without
                assert text == before
    one = translator.translate("Ein Mann schläft.", constraints=["sleeps", "gentleman"])
    assert "sleeps" in one and "gentleman" in one


def test_nmt_translate_takes_a_glossary_and_a_constraints_file(trained_run, tmp_path, capsys) -> None:
    (tmp_path / "in.txt").write_text("Ein Mann geht.\nEin Hund.\nDer Bahnhof.\n", encoding="utf-8")
    (tmp_path / "g.tsv").write_text("Mann\tgentleman\n", encoding="utf-8")
    (tmp_path / "c.txt").write_text("\npuppy\twhite\nstation\n", encoding="utf-8")
    argv = ["-c", str(trained_run), "-i", str(tmp_path / "in.txt"), "-o", str(tmp_path / "out.txt")]
    assert translate_main([*argv, "--glossary", str(tmp_path / "g.tsv"), "--constraints", str(tmp_path / "c.txt")]) == 0
    out = (tmp_path / "out.txt").read_text(encoding="utf-8").splitlines()
    assert len(out) == 3 and "gentleman" in out[0] and "puppy" in out[1] and "white" in out[1]
    assert "station" in out[2]
    (tmp_path / "short.txt").write_text("\npuppy\n", encoding="utf-8")
    fails_cleanly(translate_main, [*argv, "--constraints", str(tmp_path / "short.txt")], capsys, tmp_path,
                  "--constraints: fewer lines than")
    (tmp_path / "long.txt").write_text("\n\n\nstation\n", encoding="utf-8")
    fails_cleanly(translate_main, [*argv, "--constraints", str(tmp_path / "long.txt")], capsys, tmp_path,
                  "--constraints: more lines than")


def test_a_term_the_length_cap_leaves_out_is_flagged(trained_run, tmp_path, capsys) -> None:
    (tmp_path / "in.txt").write_text("Ein Hund.\n", encoding="utf-8")
    (tmp_path / "c.txt").write_text("gentleman\tpuppy\tstation\twhite\tsleeps\n", encoding="utf-8")
    argv = ["-c", str(trained_run), "-i", str(tmp_path / "in.txt"), "-o", str(tmp_path / "out.txt"),
            "--constraints", str(tmp_path / "c.txt"), "--max-len-a", "0", "--max-len-b", "3"]
    assert translate_main(argv) == 0
    assert "line 1: the translation lacks" in capsys.readouterr().err


def test_the_ctranslate2_engine_says_in_one_line_that_it_has_no_glossaries() -> None:
    engine = SimpleNamespace(name="ctranslate2", abilities=CTranslate2Engine.abilities, max_positions=None)
    translator = Translator(engine, None, DecodeConfig(), lowercase=False)
    with pytest.raises(ExportError, match="the ctranslate2 engine does not support glossaries") as err:
        translator.translate(["Ein Hund."], glossary={"Hund": "dog"})
    assert "\n" not in str(err.value)


@pytest.fixture(scope="module")
def client(trained_run):
    with warnings.catch_warnings():  # starlette's notice that it prefers httpx2 over httpx, which works
        warnings.filterwarnings("ignore", message="Using `httpx` with `starlette.testclient`")
        from fastapi.testclient import TestClient

    from nmt.serve.app import Limits, create_app

    with TestClient(create_app(load_translator([trained_run], CPU), Limits(max_sentences=8))) as test_client:
        yield test_client


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_the_native_api_takes_a_glossary_and_constraints_as_the_library_does(client, trained_run) -> None:
    lines = ["Ein Mann fährt mit dem Fahrrad.", "", "Zwei Hunde spielen im Schnee."]
    glossary = {"Mann": "gentleman", "Hund": "puppy"}
    answer = client.post("/translate", json={"src": lines, "glossary": glossary,
                                             "constraints": [["white"], [], []]}).json()
    expected = load_translator([trained_run], CPU).translate(lines, glossary=glossary,
                                                            constraints=[["white"], [], []])
    assert answer["translations"] == expected and answer["unmet"] == [0, 0, 0]
    assert "gentleman" in expected[0] and "white" in expected[0] and "puppy" in expected[2]
    pairs = client.post("/translate", json={"src": lines, "glossary": [["Mann", "gentleman"], ["Hund", "puppy"]]})
    assert pairs.json()["translations"] == load_translator([trained_run], CPU).translate(lines, glossary=glossary)
    assert "unmet" not in client.post("/translate", json={"src": lines}).json()


BAD_REQUESTS = [
    ({"glossary": {"Mann": ""}}, "glossary entry 1: empty term"),
    ({"glossary": {"Mann": "x" * 10_000}}, "a term of 10,000 characters"),
    ({"glossary": [["Mann"]]}, "glossary entry 1: expected a source term and a target term"),
    ({"glossary": "/etc/passwd"}, "glossary must be an object"),
    ({"glossary": {f"w{i}": "x" for i in range(MAX_ENTRIES + 1)}}, "a glossary holds at most"),
    ({"constraints": [["dog"], []]}, "give one list of target terms per line (1)"),
    ({"constraints": [[1]]}, "a term must be text"),
    ({"constraints": {"a": 1}}, "constraints must be a list"),
    ({"glossary": {"Mann": "gentleman", "Hund": "狗狗"}}, "glossary entry 2: the target term '狗狗' holds characters"),
    ({"constraints": [["狗狗"]]}, "the target term '狗狗' holds characters the model's target vocabulary cannot"),
]


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
@pytest.mark.parametrize("extra,message", BAD_REQUESTS)
def test_a_malformed_glossary_request_is_a_one_line_400_and_the_server_goes_on(client, extra, message) -> None:
    answer = client.post("/translate", json={"src": ["Ein Mann."], **extra})
    assert answer.status_code == 400 and "\n" not in answer.text and message in answer.json()["error"], answer.text
    assert client.get("/health").status_code == 200
    assert client.post("/translate", json={"src": ["Ein Mann."]}).status_code == 200


def test_nmt_translate_with_an_export_says_in_one_line_that_it_has_no_glossaries(trained_run, tmp_path,
                                                                                   capsys) -> None:
    from nmt.export import export_ctranslate2

    export_ctranslate2(trained_run, tmp_path / "ct2")
    (tmp_path / "in.txt").write_text("Ein Hund.\n", encoding="utf-8")
    (tmp_path / "g.tsv").write_text("Hund\tpuppy\n", encoding="utf-8")
    argv = ["-c", str(tmp_path / "ct2"), "-i", str(tmp_path / "in.txt"), "-o", str(tmp_path / "out.txt")]
    assert translate_main(argv) == 0
    (tmp_path / "out.txt").unlink()
    fails_cleanly(translate_main, [*argv, "--glossary", str(tmp_path / "g.tsv")], capsys, tmp_path,
                  "the ctranslate2 engine does not support glossaries or constraints")
