"""The one translation path: decoding settings, scores, ensembles, and reports that reproduce."""

from __future__ import annotations

import json
import math
import shutil
import threading
from collections.abc import Callable
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from nmt.checkpoint import find_checkpoint, load_contents, load_model, save_contents
from nmt.cli import evaluate_main, train_main, translate_main
from nmt.config import TUNED_PENALTIES, DecodeConfig, decode_with
from nmt.data import read_pair, resolve_files
from nmt.engines import Abilities
from nmt.engines import pytorch as pytorch_engine
from nmt.engines.pytorch import batches_by_tokens, side_by_side
from nmt.errors import ConfigError
from nmt.evaluation import score, split_pair, tune_length_penalty
from nmt.fileio import sha256_file
from nmt.loader import from_loaded, load_translator
from nmt.search import Ensemble, gnmt_penalty
from nmt.translator import Texts, Translator, check_abilities
from tests.conftest import tiny_config, untrained_run

CPU = torch.device("cpu")


@pytest.mark.parametrize(("changes", "message"), [
    ({"beam": 0}, "decode.beam: got 0, allowed: an integer in [1, 1000]"),
    ({"beam": 2, "n_best": 5}, "decode.n_best (5) cannot exceed decode.beam (2)"),
    ({"length_penalty": math.nan}, "decode.length_penalty: got nan"),
    ({"length_penalty": math.inf}, "decode.length_penalty: got inf"),
    ({"batch_tokens": 0}, "decode.batch_tokens: got 0"),
    ({"max_source_tokens": -3}, "decode.max_source_tokens: got -3"),
    ({"max_len_a": 1e18}, "decode.max_len_a: got 1e+18, allowed: a number in [0, 1000]"),
    ({"max_len_b": 10**20}, "decode.max_len_b: got 100000000000000000000, allowed: an integer in [0, 100000]"),
    ({"max_len_b": 10**400}, "decode.max_len_b: got 1000000000"),
    ({"length_penalty": "best"}, "decode.length_penalty: got 'best', allowed: a number in [0, 10] or auto"),
    ({"stop": "early"}, "decode.stop: 'early' is not one of finished, bound"),
])
def test_impossible_decoding_settings_are_refused(changes, message):
    with pytest.raises(ConfigError) as err:
        decode_with(DecodeConfig(), changes)
    assert message in str(err.value)


@pytest.mark.parametrize(("flags", "message"), [
    (["--beam", "0"], "--beam: got 0, allowed: an integer in [1, 1000]"),
    (["--n-best", "5", "--beam", "2"], "--n-best (5) cannot exceed --beam (2)"),
    (["--length-penalty", "nan"], "--length-penalty: got nan, allowed: a number in [0, 10]"),
    (["--length-penalty", "inf"], "--length-penalty: got inf"),
    (["--batch-tokens", "0"], "--batch-tokens: got 0, allowed: an integer in [1, 100000000]"),
    (["--batch-tokens", "-5"], "--batch-tokens: got -5"),
])
def test_impossible_decoding_flags_give_one_line_and_write_nothing(trained_run, tmp_path, capsys, flags, message):
    src = tmp_path / "in.de"
    src.write_text("Ein Hund.\n", encoding="utf-8")
    out = tmp_path / "out.en"
    assert translate_main(["-c", str(trained_run), "-i", str(src), "-o", str(out), *flags]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and err.count("\n") == 1 and "Traceback" not in err
    assert not out.exists()
    if "--n-best" not in flags:  # nmt-evaluate scores the best hypothesis only
        report = tmp_path / "report.json"
        assert evaluate_main([str(trained_run), "--output", str(report), *flags]) == 1
        assert message in capsys.readouterr().err and not report.exists()


def test_scores_mean_the_same_in_greedy_and_beam(trained_run):
    translator = load_translator([trained_run], CPU, changes={"length_penalty": 1.3})
    lines = ["Ein Mann fährt Fahrrad.", "Zwei Kinder spielen im Park.", "Eine Frau liest ein Buch."]
    greedy = translator.with_decode(decode_with(translator.decode, {"beam": 1, "n_best": 1})).hypotheses(lines)
    beam = translator.with_decode(decode_with(translator.decode, {"beam": 3, "n_best": 3})).hypotheses(lines)
    for hyps in greedy + beam:
        for h in hyps:
            assert h.score == pytest.approx(h.log_prob / gnmt_penalty(len(h.tokens) + 1, 1.3), rel=1e-5)
    for g, b in zip(greedy, beam):
        assert b[0].score >= g[0].score - 1e-4  # the beam's best is never scored below greedy's


def test_ensemble_of_one_model_twice_decodes_like_the_model(trained_run):
    loaded = load_model(trained_run, CPU)
    lines, _ = read_pair(*resolve_files(loaded.cfg)["test"])
    lines = lines[:20]
    single = from_loaded([loaded], CPU).hypotheses(lines)
    double = from_loaded([loaded, load_model(trained_run, CPU)], CPU).hypotheses(lines)
    assert isinstance(from_loaded([loaded, loaded], CPU).engine.model, Ensemble)
    for a, b in zip(single, double):
        assert [h.tokens for h in a] == [h.tokens for h in b]
        assert [h.score for h in a] == pytest.approx([h.score for h in b], abs=1e-4)


def test_the_translator_is_one_public_layer_over_text_and_ids(trained_run):
    assert {name for name in dir(Translator) if not name.startswith("_")} == {
        "attention", "normalize", "score", "settings", "translate", "translate_markup", "translate_markup_scored",
        "translate_nbest", "with_decode",  # text in
        "prepare", "translations",  # the same pipeline in two halves
        "hypotheses", "aligned", "attention_labels",  # lines searched whole
        "encode", "encode_terms", "search_batch", "score_batch", "detokenize"}  # ids
    translator = load_translator([trained_run], CPU, changes={"beam": 3, "n_best": 2})
    lines = ["Ein Mann fährt Fahrrad.", "", "Zwei Kinder spielen im Park."]
    ids = translator.encode(lines)
    assert len(ids[1]) == 0 and all(ids[i].dtype == np.int64 for i in (0, 2))
    found = translator.search_batch([row.tolist() for row in ids])  # plain lists of ids do as well
    assert found[1] == [] and [[(h.tokens, h.score) for h in n] for n in found] == \
        [[(h.tokens, h.score) for h in n] for n in translator.hypotheses(lines)]
    assert [translator.detokenize(n[0]) for n in found if n] == [t for t in translator.translate(lines) if t]
    targets = [found[0][0].tokens, found[2][0].tokens]
    scored = translator.score_batch([ids[0], ids[2]], targets)  # the search's own log-probabilities, EOS last
    assert [float(lp.sum()) for lp in scored] == pytest.approx([found[0][0].log_prob, found[2][0].log_prob],
                                                                abs=1e-4)
    texts = translator.prepare(lines)
    assert texts.sentences == [lines[0], lines[2]] and texts.owners() == [0, 2] and texts.terms is None
    assert translator.translations(texts) == translator.translate_nbest(lines)


def test_texts_searched_together_translate_as_each_alone(trained_run):
    """What the server's batcher does with several requests: one search, each request its own n-best lists."""
    translator = load_translator([trained_run], CPU, changes={"beam": 2, "n_best": 2})
    first = translator.prepare(["Ein Hund läuft. Zwei Kinder spielen.", "  "])
    second = translator.prepare(["Eine Frau liest."])
    together = translator.translations(Texts.joined([first, second]))
    assert [[t.text for t in n] for n in together] == \
        [[t.text for t in n] for n in translator.translations(first) + translator.translations(second)]
    glossary = translator.prepare(["Ein Hund läuft."], glossary={"Hund": "puppy"})
    joined = Texts.joined([glossary, translator.prepare(["Ein Mann."], constraints=[["man"]])])
    assert joined.terms == [["puppy"], ["man"]]
    assert "puppy" in translator.translations(joined)[0][0].text


@pytest.mark.parametrize(("beam", "terms", "chosen"), [(1, None, "greedy_search"), (3, None, "beam_search"),
                                                      (3, [[]], "beam_search"),
                                                      (3, [["puppy"]], "constrained_beam_search")])
def test_the_engine_chooses_the_search(trained_run, monkeypatch, beam, terms, chosen):
    """Greedy at beam 1, beam search otherwise, constrained beam search for a batch where a sentence has terms."""
    called: list[str] = []

    def recorder(name: str) -> Callable:
        real = getattr(pytorch_engine, name)

        def recording(*args, **kwargs):
            called.append(name)
            return real(*args, **kwargs)
        return recording

    for name in ("greedy_search", "beam_search", "constrained_beam_search"):
        monkeypatch.setattr(pytorch_engine, name, recorder(name))
    translator = load_translator([trained_run], CPU, changes={"beam": beam})
    translator.hypotheses(["Ein Hund läuft."], terms=terms)
    assert called == [chosen]


@pytest.mark.parametrize("beam", [1, 4])
def test_batches_side_by_side_translate_as_one_after_the_other(trained_run, monkeypatch, beam):
    """On the CPU the PyTorch engine decodes one batch per torch thread, each batch with one thread; the outputs,
    their order and the thread count afterwards are those of decoding the batches one at a time."""
    seen: list[tuple[int, int]] = []  # (Python thread, torch threads) of each batch

    search = pytorch_engine.greedy_search if beam == 1 else pytorch_engine.beam_search

    def recording(*args, **kwargs):
        seen.append((threading.get_ident(), torch.get_num_threads()))
        return search(*args, **kwargs)

    monkeypatch.setattr(pytorch_engine, search.__name__, recording)
    loaded = load_model(trained_run, CPU)
    lines = read_pair(*resolve_files(loaded.cfg)["test"])[0][:40]  # in batches of 64 tokens: 6 or more
    translator = from_loaded([loaded], CPU)
    translator = translator.with_decode(decode_with(translator.decode, {"beam": beam, "n_best": beam,
                                                                        "batch_tokens": 64}))
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        alone = translator.hypotheses(lines)
        assert {threads for _, threads in seen} == {1} and len({ident for ident, _ in seen}) == 1
        seen.clear()
        torch.set_num_threads(3)
        assert side_by_side(CPU, 7) == 3 and side_by_side(CPU, 1) == 1
        assert side_by_side(torch.device("cuda"), 7) == 1  # a GPU decodes one batch at a time
        together = translator.hypotheses(lines)
        assert {threads for _, threads in seen} == {1} and len({ident for ident, _ in seen}) > 1
        assert torch.get_num_threads() == 3
    finally:
        torch.set_num_threads(before)
    assert len(batches_by_tokens([len(ids) for ids in translator.encode(lines)], 64)) >= 6
    for a, b in zip(alone, together, strict=True):
        assert [h.tokens for h in a] == [h.tokens for h in b]
        assert [h.score for h in a] == pytest.approx([h.score for h in b], abs=1e-4)


def test_a_failing_batch_side_by_side_stops_the_batches_not_yet_started(trained_run, monkeypatch):
    """An error (or a signal's exception) in one batch reaches the caller, and the batches still queued are
    dropped instead of decoded: Ctrl-C does not wait for the rest of the file."""
    calls: list[int] = []
    started = threading.Barrier(2)

    def failing(*args, **kwargs):
        calls.append(1)
        number = len(calls)
        if number <= 2:
            started.wait(timeout=10)  # both workers are busy before the first one fails
        if number == 1:
            raise KeyboardInterrupt
        return search(*args, **kwargs)

    search = pytorch_engine.beam_search
    monkeypatch.setattr(pytorch_engine, "beam_search", failing)
    loaded = load_model(trained_run, CPU)
    lines, _ = read_pair(*resolve_files(loaded.cfg)["test"])
    translator = from_loaded([loaded], CPU)
    translator = translator.with_decode(decode_with(translator.decode, {"beam": 2, "batch_tokens": 64}))
    batches = len(batches_by_tokens([len(ids) for ids in translator.encode(lines)], 64))
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        with pytest.raises(KeyboardInterrupt):
            translator.hypotheses(lines)
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
    assert batches >= 6 and len(calls) == 2  # the failing batch and the one beside it; no third begins


@pytest.fixture(scope="module")
def gru_same_vocabulary(trained_run, tmp_path_factory):
    """An (untrained) GRU on the same data and tokenizer settings as the shared Transformer run."""
    run = untrained_run(tmp_path_factory.mktemp("gru_mix"), "gru_mix", arch="rnn")
    shared = json.loads((trained_run / "eval_test.json").read_text())
    assert load_model(run, CPU).tokenizer.identity == shared["tokenizer_id"]
    return run


def test_ensemble_mixes_architectures(trained_run, gru_same_vocabulary, tmp_path, capsys):
    src = tmp_path / "in.de"
    src.write_text("Ein Hund läuft.\n\nZwei Männer arbeiten.\n", encoding="utf-8")
    out = tmp_path / "out.en"
    assert translate_main(["-c", str(trained_run), "-c", str(gru_same_vocabulary), "-i", str(src), "-o", str(out),
                           "--beam", "3", "--n-best", "2"]) == 0
    lines = out.read_text(encoding="utf-8").splitlines()
    assert {line.split(" ||| ")[0] for line in lines} == {"0", "2"}
    report = tmp_path / "ens.json"
    assert evaluate_main([str(trained_run), "-c", str(gru_same_vocabulary), "--output", str(report)]) == 0
    members = json.loads(report.read_text())["members"]
    assert [m["arch"] for m in members] == ["transformer", "rnn"] and all(len(m["sha256"]) == 64 for m in members)


def test_the_engine_shows_the_layers_of_each_transformer_member(trained_run, gru_same_vocabulary):
    engine = from_loaded([load_model(gru_same_vocabulary, CPU), load_model(trained_run, CPU)], CPU).engine
    assert engine.abilities.attention and engine.parameter_count > 0
    layers = engine.layer_attention(np.array([5, 6, 7]), [8, 9])
    assert [name for name, _ in layers] == ["model 2 layer 1"]  # the GRU has no layers of heads
    heads = layers[0][1]  # (h, T, S)
    assert heads.shape[1:] == (3, 4) and torch.allclose(heads.sum(-1), torch.ones(heads.shape[:2]), atol=1e-4)


def test_settings_or_devices_an_engine_lacks_are_refused(trained_run):
    engine = SimpleNamespace(name="toy", abilities=Abilities(attention=False, n_best=False, stops=("finished",),
                                                             devices=("cpu",)))
    with pytest.raises(ConfigError, match="--n-best 2: the toy engine gives one translation per sentence"):
        check_abilities(engine, DecodeConfig(beam=2, n_best=2), lambda key: "--" + key.replace("_", "-"))
    with pytest.raises(ConfigError, match="decode.stop bound: the toy engine stops a sentence only by finished"):
        check_abilities(engine, DecodeConfig(beam=2, stop="bound"))
    with pytest.raises(ConfigError, match="device meta: the pytorch engine decodes on cpu or cuda only"):
        load_translator([trained_run], torch.device("meta"))


def test_ensemble_with_another_vocabulary_is_refused(trained_run, other_vocabulary_run, tmp_path, capsys):
    out = tmp_path / "out.en"
    src = tmp_path / "in.de"
    src.write_text("Ein Hund.\n", encoding="utf-8")
    assert translate_main(["-c", str(trained_run), "-c", str(other_vocabulary_run), "-i", str(src),
                           "-o", str(out)]) == 1
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("error")]  # model-size log lines may precede
    assert len(errors) == 1 and "vocabulary differs" in errors[0] and "Traceback" not in err and not out.exists()


def test_evaluate_reproduces_the_end_of_training_report(trained_run, tmp_path):
    trained = json.loads((trained_run / "eval_test.json").read_text())
    out = tmp_path / "again.json"
    assert evaluate_main([str(trained_run), "--output", str(out)]) == 0
    again = json.loads(out.read_text())
    assert again["scores"] == trained["scores"]
    assert (tmp_path / "again.hyp.txt").read_text() == (trained_run / "test.hyp.en").read_text()


def test_report_records_how_it_was_decoded(trained_run, tmp_path):
    out = tmp_path / "lp.json"
    argv = [str(trained_run), "--output", str(out), "--length-penalty", "0.7", "--beam", "3", "--max-len-b", "7"]
    assert evaluate_main(argv) == 0
    report = json.loads(out.read_text())
    assert report["decode"] | {"batch_tokens": 0} == {"beam": 3, "length_penalty": 0.7, "max_len_a": 1.5,
                                                      "max_len_b": 7, "batch_tokens": 0, "n_best": 1,
                                                      "max_source_tokens": 250, "stop": "finished",
                                                      "sampling": False, "temperature": 1.0, "top_k": 0, "top_p": 1.0,
                                                      "seed": 0}
    assert report["engine"] == "pytorch" and report["precision"] == "fp32"
    assert report["command"].startswith("nmt-evaluate ") and "--length-penalty 0.7" in report["command"]
    (member,) = report["members"]
    assert member["sha256"] == report["checkpoint_sha256"] and member["path"] == report["checkpoint"]


def test_evaluation_normalizes_like_training(tmp_path):
    cfg = tiny_config(tmp_path, name="lower", data={"lowercase": True}, train={"max_steps": 4, "eval_every": 4},
                      decode={"beam": 1})
    assert train_main([str(cfg)]) == 0
    run = tmp_path / "runs" / "lower"
    trained = json.loads((run / "eval_test.json").read_text())
    assert trained["lowercase"] is True
    out = tmp_path / "again.json"
    assert evaluate_main([str(run), "--output", str(out)]) == 0
    assert json.loads(out.read_text())["scores"] == trained["scores"]


def test_decoding_never_passes_the_positions_a_transformer_has(tmp_path):
    """Sources are truncated and outputs capped to max_positions, whatever the flags ask: no index error."""
    run = untrained_run(tmp_path, "short", model={"max_positions": 24, "positions": "learned"},
                        data={"max_tokens": 20})
    long_line = " ".join(["Hund"] * 200)
    for changes in ({}, {"max_source_tokens": 5000, "max_len_a": 1000.0, "max_len_b": 100_000}):
        for beam in (1, 3):
            translator = load_translator([run], CPU, changes={**changes, "beam": beam})
            assert translator.decode.max_source_tokens == 23  # with its EOS, a source fills the 24 positions
            warned: list[int] = []
            (hyp,), = translator.hypotheses([long_line], warn=lambda i, n, seen=warned: seen.append(n))
            assert warned and len(hyp.tokens) <= 23


def test_a_line_without_subwords_translates_to_an_empty_line(trained_run):
    translator = load_translator([trained_run], CPU)
    assert translator.translate(["\u200b\u200b", "", "Ein Hund."])[:2] == ["", ""]


def test_auto_penalty_is_chosen_on_validation_at_the_end_of_training(trained_run):
    """The shared run trains with decode.length_penalty auto (the default): its final checkpoint holds the best
    penalty of the validation table, which is in length_penalty.json, eval_test.json and train.log."""
    tuning = json.loads((trained_run / "length_penalty.json").read_text())
    assert tuning["split"] == "val" and tuning["searches"] == 4 and tuning["stop"] == "finished"
    assert [row["length_penalty"] for row in tuning["table"]] == list(TUNED_PENALTIES)
    best = max(row["bleu"] for row in tuning["table"])
    assert tuning["best"] in TUNED_PENALTIES and tuning["table"][TUNED_PENALTIES.index(tuning["best"])]["bleu"] == best
    loaded = load_model(trained_run, CPU)
    assert loaded.cfg.decode.length_penalty == tuning["best"]
    assert tuning["stored_in"] == str(loaded.path) and tuning["stored_sha256"] == sha256_file(loaded.path)
    report = json.loads((trained_run / "eval_test.json").read_text())
    assert report["length_penalty_tuning"]["table"] == tuning["table"]
    assert report["decode"]["length_penalty"] == tuning["best"]
    assert report["checkpoint_sha256"] == sha256_file(loaded.path)
    assert "| length penalty | val BLEU" in (trained_run / "train.log").read_text(encoding="utf-8")


def test_the_tuning_table_scores_like_a_decode_at_each_penalty(trained_run):
    translator = load_translator([trained_run], CPU)
    tuning = tune_length_penalty(translator)
    sources, refs = split_pair(translator.cfg, "val")
    for row in tuning["table"]:
        hyps = translator.with_decode(decode_with(translator.decode, {"length_penalty": row["length_penalty"]}))
        lines = hyps.translate(sources, split_sentences="off")
        assert score(lines, [translator.normalize(r) for r in refs])["bleu"] == row["bleu"]


def test_tuning_reads_only_the_validation_split_and_stores_its_choice(trained_run, tmp_path, monkeypatch, capsys):
    run = tmp_path / "run"
    shutil.copytree(trained_run, run)
    files = resolve_files(load_model(run, CPU).cfg, log=lambda _msg: None)

    def validation_only(src, tgt):
        assert (src, tgt) == tuple(files["val"]), f"tuning read {src}"
        return read_pair(src, tgt)

    monkeypatch.setattr("nmt.evaluation.read_pair", validation_only)
    for flags in (["--split", "test"], [], ["--split", "val", "--src", str(files["val"][0]), "--ref",
                                            str(files["val"][1])]):
        assert evaluate_main([str(run), "--tune-length-penalty", *flags]) == 1
        err = capsys.readouterr().err
        assert "--tune-length-penalty: the penalty is chosen on the validation split only" in err
        assert err.count("\n") == 1
    assert evaluate_main([str(run), "--split", "val", "--tune-length-penalty", "--length-penalty", "1"]) == 1
    assert "leave out --length-penalty" in capsys.readouterr().err
    checkpoint = run / "checkpoints" / "best.pt"
    bundle = load_contents(checkpoint)
    bundle.config["decode"]["length_penalty"] = "auto"  # as the run's other checkpoints hold it
    save_contents(bundle, checkpoint)
    src = tmp_path / "in.de"
    src.write_text("Ein Hund.\n", encoding="utf-8")
    assert translate_main(["-c", str(run), "-i", str(src), "-o", str(tmp_path / "out.en")]) == 0
    assert "auto but was never tuned; decoding at 1.0" in capsys.readouterr().err
    assert evaluate_main([str(run), "--split", "val", "--tune-length-penalty", "--beam", "3"]) == 0
    out = capsys.readouterr().out
    tuning = json.loads((run / "length_penalty.json").read_text())
    assert tuning["beam"] == 3 and tuning["command"].endswith("--tune-length-penalty --beam 3")
    assert f"length penalty {tuning['best']:g} stored in {checkpoint}" in out and "| length penalty |" in out
    assert load_model(run, CPU).cfg.decode.length_penalty == tuning["best"]
    assert load_contents(checkpoint).progress == bundle.progress and tuning["stored_sha256"] == sha256_file(checkpoint)


def test_an_ensemble_is_tuned_into_its_report_and_stores_nothing(trained_run, tmp_path, capsys):
    run = tmp_path / "run"
    shutil.copytree(trained_run, run)
    checkpoint = find_checkpoint(run)
    before = sha256_file(checkpoint), (run / "length_penalty.json").read_bytes()
    ensemble = [str(run), "-c", str(run), "--split", "val", "--tune-length-penalty"]
    assert evaluate_main(ensemble) == 1
    assert "an ensemble has no checkpoint of its own" in capsys.readouterr().err
    report = tmp_path / "ensemble_lp.json"
    assert evaluate_main([*ensemble, "--beam", "2", "--output", str(report)]) == 0
    tuning = json.loads(report.read_text(encoding="utf-8"))
    assert len(tuning["members"]) == 2 and tuning["beam"] == 2 and "stored_in" not in tuning
    assert f"decode it with --length-penalty {tuning['best']:g}" in capsys.readouterr().out
    assert (sha256_file(checkpoint), (run / "length_penalty.json").read_bytes()) == before
    assert tuning["best"] == tune_length_penalty(load_translator([run, run], CPU, changes={"beam": 2}))["best"]
