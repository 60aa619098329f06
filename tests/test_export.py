"""CTranslate2 export: every supported Transformer variant round-trips, exports decode like PyTorch, bad input
is refused cleanly."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch

from nmt.checkpoint import CheckpointContents, load_model, save_contents
from nmt.cli import evaluate_main, export_main, translate_main
from nmt.config import config_from_dict, to_dict
from nmt.data import collate, read_pair, resolve_files
from nmt.errors import ExportError
from nmt.evaluation import tune_length_penalty
from nmt.export import MANIFEST, export_ctranslate2, read_manifest, supported_quantizations
from nmt.loader import load_translator
from nmt.models import build_model
from nmt.search import gnmt_penalty

CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def sample_sources(trained_run) -> list[str]:
    """The sources of the sample's test split, which the shared run was trained on."""
    sources, _ = read_pair(*resolve_files(load_model(trained_run, CPU).cfg)["test"])
    return sources


def _variant(trained_run, folder, **model) -> str:
    """A checkpoint of a freshly initialised Transformer with the shared run's tokenizer and these settings."""
    loaded = load_model(trained_run, CPU)
    raw = to_dict(loaded.cfg)
    raw["model"].update(model)
    cfg = config_from_dict(raw)
    torch.manual_seed(0)
    net = build_model(cfg.model, loaded.tokenizer.vocab)
    path = folder / "variant.pt"
    save_contents(CheckpointContents.build(cfg, loaded.tokenizer, net, {}), path)
    return str(path)


@pytest.mark.parametrize("model", [
    {"pre_norm": True, "tie_embeddings": True, "positions": "sinusoidal"},
    {"pre_norm": False, "tie_embeddings": True, "positions": "sinusoidal"},
    {"pre_norm": True, "tie_embeddings": False, "positions": "learned"},
    {"pre_norm": False, "tie_embeddings": False, "positions": "learned", "temperature": 0.5},
])
def test_each_exportable_layout_scores_like_pytorch(trained_run, tmp_path, sample_sources, model):
    checkpoint = _variant(trained_run, tmp_path, **model)
    export_ctranslate2(checkpoint, tmp_path / "ct2", "float32")
    loaded = load_model(checkpoint, CPU)
    translator = load_translator([checkpoint], CPU)
    sources = translator.encode(sample_sources[:8])
    targets = [ids[::-1][:12] for ids in sources]  # any target sequence: the log-probabilities must agree
    batch = collate(list(zip(sources, targets)), loaded.model.pad_id)
    with torch.inference_mode():
        logits = loaded.model(batch.src, batch.src_mask, batch.tgt_in).log_softmax(-1)  # (B, T, V)
    reference = logits.gather(2, batch.tgt_out[:, :, None]).squeeze(2)  # (B, T)
    engine = load_translator([tmp_path / "ct2"], CPU).engine
    pieces = [[engine.src_pieces[i] for i in ids.tolist()] + [engine.eos] for ids in sources]
    scored = engine.translator.score_batch(pieces, [[engine.src_pieces[i] for i in t.tolist()] for t in targets])
    for row, result in enumerate(scored):
        expected = reference[row, :len(targets[row]) + 1].tolist()
        assert result.log_probs == pytest.approx(expected, abs=2e-3)


@pytest.fixture(scope="module")
def exports(trained_run, tmp_path_factory):
    folder = tmp_path_factory.mktemp("exports")
    for quantization in ("float32", "int8"):
        assert export_main([str(trained_run), "--quantization", quantization, "--output",
                            str(folder / quantization)]) == 0
    return folder


def test_float32_export_decodes_like_pytorch(trained_run, exports, sample_sources):
    greedy = {"beam": 1, "length_penalty": 1.0}
    pytorch = load_translator([trained_run], CPU, changes=greedy).hypotheses(sample_sources)
    exported = load_translator([exports / "float32"], CPU, changes=greedy).hypotheses(sample_sources)
    same = sum(a[0].tokens == b[0].tokens for a, b in zip(pytorch, exported))
    assert same >= 0.95 * len(sample_sources)
    for a, b in zip(pytorch, exported):
        if a[0].tokens == b[0].tokens:
            assert b[0].score == pytest.approx(a[0].score, abs=1e-2)


@pytest.mark.parametrize("alpha", [0.6, 1.5, 2.0])
def test_float32_export_beam_search_agrees_with_pytorch(trained_run, exports, sample_sources, alpha):
    """Both engines end a sentence once `beam` hypotheses have finished and rank them by the GNMT score.

    CTranslate2 searches each group of sentences to their own length cap, as nmt.search does. Not at 1.0 on this
    barely trained model: its beams run to the cap, where they all end at once and CTranslate2 keeps the `beam`
    best by its own penalty (length ** alpha), dropping the empty output that the GNMT form ranks first at 1.0.
    A trained model seldom reaches the cap (benchmarks/lp_agreement.py measures it).
    """
    settings = {"beam": 5, "length_penalty": alpha}
    pytorch = load_translator([trained_run], CPU, changes=settings).hypotheses(sample_sources)
    exported = load_translator([exports / "float32"], CPU, changes=settings).hypotheses(sample_sources)
    same = sum(a[0].tokens == b[0].tokens for a, b in zip(pytorch, exported))
    assert same >= 0.95 * len(sample_sources)


def test_export_refuses_the_bound_rule(exports, tmp_path, capsys):
    src = tmp_path / "in.de"
    src.write_text("Ein Hund.\n", encoding="utf-8")
    assert translate_main(["-c", str(exports / "float32"), "-i", str(src), "--stop", "bound"]) == 1
    err = capsys.readouterr().err
    assert "--stop bound: the ctranslate2 engine stops a sentence only by finished" in err and err.count("\n") == 1
    assert load_translator([exports / "float32"], CPU, changes={"stop": "bound", "beam": 1}).decode.beam == 1


def test_tuning_an_export_stores_the_penalty_in_its_manifest(trained_run, exports, tmp_path, capsys):
    export = tmp_path / "export"
    shutil.copytree(exports / "float32", export)
    manifest = json.loads((export / MANIFEST).read_text())
    manifest["config"]["decode"]["length_penalty"] = "auto"  # exported from a checkpoint never tuned
    (export / MANIFEST).write_text(json.dumps(manifest))
    assert evaluate_main([str(export), "--split", "test", "--tune-length-penalty"]) == 1
    assert "chosen on the validation split only" in capsys.readouterr().err
    assert evaluate_main([str(export), "--split", "val", "--tune-length-penalty"]) == 0
    tuning = json.loads((export / "length_penalty.json").read_text())
    assert tuning["engine"] == "ctranslate2" and tuning["searches"] == 4
    assert tuning["stored_in"] == str(export / MANIFEST)
    stored = read_manifest(export)  # the model files are checked as before
    assert stored["config"]["decode"]["length_penalty"] == tuning["best"]
    assert stored["files"] == manifest["files"]
    assert load_translator([export], CPU).decode.length_penalty == tuning["best"]
    pytorch = tune_length_penalty(load_translator([trained_run], CPU))
    differences = [abs(a["bleu"] - b["bleu"]) for a, b in zip(pytorch["table"], tuning["table"], strict=True)]
    assert max(differences) <= 1.0  # a tiny, barely trained model: the engines differ only in float rounding


def test_an_export_declares_that_it_gives_no_attention(exports):
    engine = load_translator([exports / "float32"], CPU).engine
    assert not engine.abilities.attention and engine.abilities.stops == ("finished",) and engine.parameter_count is None
    with pytest.raises(ExportError, match="an exported model gives no attention weights"):
        engine.layer_attention(np.array([5, 6]), [7])
    assert not engine.abilities.scores
    with pytest.raises(ExportError, match="the ctranslate2 engine does not score given references"):
        load_translator([exports / "float32"], CPU).score("Ein Hund läuft.", "A dog runs.")


def test_an_export_puts_inline_tags_at_the_edges_of_their_sentence(exports):
    translator = load_translator([exports / "float32"], CPU)
    out = translator.translate_markup("<p>Ein <b>Mann</b> fährt Fahrrad.</p>", "html")
    assert out == f"<p><b>{translator.translate('Ein Mann fährt Fahrrad.')}</b></p>"


def test_loading_an_export_keeps_the_torch_thread_count(exports):
    """CTranslate2 shares OpenMP with torch; a second engine or the PyTorch path must not drop to one thread."""
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        first = load_translator([exports / "int8"], CPU)
        assert torch.get_num_threads() == 2
        second = load_translator([exports / "float32"], CPU)
        assert torch.get_num_threads() == 2
        assert first.engine.translator.num_translators == second.engine.translator.num_translators == 2
    finally:
        torch.set_num_threads(before)


def test_export_beam_is_ranked_as_nmt_decode_ranks(exports, sample_sources):
    """CTranslate2 hands back its whole beam; the n-best list is its best distinct outputs by the GNMT-normalised
    score (outputs cut at a sentence's length cap can coincide, and are listed once)."""
    settings = {"beam": 4, "n_best": 3, "length_penalty": 1.5}
    lists = load_translator([exports / "float32"], CPU, changes=settings).hypotheses(sample_sources[:20])
    assert sum(len(nbest) == 3 for nbest in lists) >= len(lists) // 2
    for nbest in lists:
        assert 1 <= len(nbest) <= 3 and len({tuple(h.tokens) for h in nbest}) == len(nbest)
        assert [h.score for h in nbest] == sorted((h.score for h in nbest), reverse=True)
        for hyp in nbest:
            assert hyp.score == pytest.approx(hyp.log_prob / gnmt_penalty(len(hyp.tokens) + 1, 1.5))


def test_int8_export_translates_through_the_cli(exports, tmp_path, capsys):
    src = tmp_path / "in.de"
    src.write_text("Ein Hund läuft.\n\nZwei Männer arbeiten.\n", encoding="utf-8")
    out = tmp_path / "out.en"
    assert translate_main(["-c", str(exports / "int8"), "-i", str(src), "-o", str(out), "--beam", "3",
                           "--n-best", "2"]) == 0
    assert {line.split(" ||| ")[0] for line in out.read_text(encoding="utf-8").splitlines()} == {"0", "2"}
    report = tmp_path / "int8.json"
    assert evaluate_main([str(exports / "int8"), "--output", str(report)]) == 0
    data = json.loads(report.read_text())
    assert data["engine"] == "ctranslate2" and data["precision"] == "int8" and data["sentences"] > 0
    assert len(data["members"][0]["source_sha256"]) == 64


def test_altered_or_missing_export_files_are_refused(exports, tmp_path, capsys):
    import shutil

    damaged = tmp_path / "damaged"
    shutil.copytree(exports / "float32", damaged)
    src = tmp_path / "in.de"
    src.write_text("Ein Hund.\n", encoding="utf-8")
    out = tmp_path / "out.en"
    with (damaged / "model.bin").open("ab") as handle:
        handle.write(b"\0")
    assert translate_main(["-c", str(damaged), "-i", str(src), "-o", str(out)]) == 1
    assert "model.bin: altered since export" in capsys.readouterr().err and not out.exists()
    (damaged / "spm.model").unlink()
    assert evaluate_main([str(damaged), "--output", str(tmp_path / "r.json")]) == 1
    err = capsys.readouterr().err
    assert "missing from the export folder" in err or "altered since export" in err
    (damaged / "nmt_export.json").unlink()
    assert translate_main(["-c", str(damaged), "-i", str(src), "-o", str(out)]) == 1
    assert "nmt_export.json" in capsys.readouterr().err and not out.exists()


def test_export_refusals_write_nothing(trained_run, tmp_path_factory, tmp_path, capsys):
    gru = _variant(trained_run, tmp_path_factory.mktemp("gru"), arch="rnn", emb_dim=32, hidden_size=32)
    cases = [
        ([gru], "CTranslate2 has no such architecture"),
        ([str(trained_run), "--format", "onnx"], "unknown export format"),
        ([str(trained_run), "--quantization", "int4"], "is not one of"),
    ]
    if "float16" not in supported_quantizations("cpu") | supported_quantizations("cuda"):
        cases.append(([str(trained_run), "--quantization", "float16"], "cannot run on this machine"))
    for args, message in cases:
        out = tmp_path / "out"
        assert export_main([*args, "--output", str(out)]) == 1
        err = capsys.readouterr().err
        assert message in err and err.count("\n") == 1 and not out.exists()
    assert not list(tmp_path.iterdir())


def test_local_attention_cannot_be_exported(trained_run, tmp_path):
    checkpoint = _variant(trained_run, tmp_path, self_attention="local")
    with pytest.raises(ExportError, match="no CTranslate2 equivalent"):
        export_ctranslate2(checkpoint, tmp_path / "out")
    assert not (tmp_path / "out").exists()
