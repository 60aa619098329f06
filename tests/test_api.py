"""The Python API: nmt.load, nmt.trainer, nmt.evaluation and nmt.load_config, each checked against the console
command it stands beside, and the promises a library makes to its caller (no exit, no root-logger or
signal-handler changes, its own exception types)."""

from __future__ import annotations

import json
import logging
import signal
from pathlib import Path

import pytest
import tomllib
import torch
import yaml

import nmt
from nmt.__main__ import COMMANDS
from nmt.cli import evaluate_main, translate_main
from nmt.trainer import Trainer
from tests.conftest import REPO, tiny_config

LINES = ["Ein Hund läuft.", "Eine Frau liest ein Buch im Park.", "", "Zwei Kinder spielen."]


def _raw(folder: Path, **train: object) -> dict:
    """A tiny config as the mapping a notebook would write."""
    raw = yaml.safe_load(tiny_config(folder).read_text(encoding="utf-8"))
    raw["train"].update(train)
    return raw


def test_load_translates_a_str_or_a_list_as_nmt_translate_writes_it(trained_run, tmp_path):
    src, out = tmp_path / "in.de", tmp_path / "out.en"
    src.write_text("\n".join(LINES) + "\n", encoding="utf-8")
    assert translate_main(["-c", str(trained_run), "-i", str(src), "-o", str(out), "--device", "cpu"]) == 0
    written = out.read_text(encoding="utf-8").splitlines()
    translator = nmt.load(str(trained_run), device="cpu")
    assert translator.translate(LINES) == written
    assert translator.translate(LINES[0]) == written[0]  # a str gives a str
    assert nmt.load(trained_run, device=torch.device("cpu")).translate(tuple(LINES)) == written  # Path, torch.device


def test_decoding_settings_apply_per_call_and_are_checked_like_the_config(trained_run):
    translator = nmt.load(trained_run, device="cpu", beam=1)
    assert translator.decode.beam == 1
    nbest = translator.translate_nbest(LINES[0], n=3, beam=3)
    assert len(nbest) == 3 and [t.score for t in nbest] == sorted((t.score for t in nbest), reverse=True)
    assert nbest[0].text == translator.translate(LINES[0], beam=3)
    assert [len(hyps) for hyps in translator.translate_nbest(LINES, n=2, beam=2)] == [2, 2, 0, 2]  # blank: none
    with pytest.raises(nmt.ConfigError, match=r"decode\.n_best \(5\) cannot exceed decode\.beam \(2\)"):
        translator.translate_nbest(LINES[0], n=5, beam=2)
    with pytest.raises(nmt.ConfigError, match="unknown decoding setting bem"):
        nmt.load(trained_run, device="cpu", bem=3)


def test_attention_gives_one_sentence_s_weights_as_the_explorer_serves_them(trained_run):
    shown = nmt.load(trained_run, device="cpu").attention(LINES[0])
    assert shown["src"][-1] == shown["tgt"][-1] == "</s>"
    weights = torch.tensor(shown["attention"])  # (T, S)
    assert weights.shape == (len(shown["tgt"]), len(shown["src"]))
    assert torch.allclose(weights.sum(-1), torch.ones(len(shown["tgt"])), atol=1e-3)
    assert shown["translation"] == nmt.load(trained_run, device="cpu").translate(LINES[0])
    assert shown["layers"] and shown["diagnostics"]["flags"] is not None


def test_a_missing_model_or_an_unknown_device_is_one_library_error(tmp_path, trained_run):
    with pytest.raises(nmt.CheckpointError, match="checkpoint not found"):
        nmt.load(str(tmp_path / "nowhere"), device="cpu")
    with pytest.raises(nmt.ConfigError, match="not a device name"):
        nmt.load(trained_run, device="tpu")
    with pytest.raises(nmt.CheckpointError, match="give a model"):
        nmt.load(42)


def test_a_list_of_models_is_an_ensemble_and_anything_in_second_place_is_a_type_error(trained_run):
    single = nmt.load(trained_run, device="cpu")
    ensemble = nmt.load([trained_run, str(trained_run)], device="cpu")
    assert len(ensemble.members) == 2 and ensemble.translate(LINES) == single.translate(LINES)  # x, x average to x
    for second in (trained_run, "cpu", torch.device("cpu")):  # a second model, or a device meant as device=
        with pytest.raises(TypeError, match="positional argument"):
            nmt.load(trained_run, second)
        with pytest.raises(TypeError, match="positional argument"):
            nmt.evaluate(trained_run, second)


def test_with_decode_is_the_one_way_to_a_copy_with_other_settings(trained_run):
    translator = nmt.load(trained_run, device="cpu", beam=3)
    greedy = translator.with_decode(beam=1)
    assert (greedy.decode.beam, translator.decode.beam) == (1, 3) and greedy.engine is translator.engine
    assert translator.with_decode() is translator
    assert translator.with_decode(greedy.decode).decode == greedy.decode
    assert greedy.translate(LINES) == translator.translate(LINES, beam=1)
    with pytest.raises(nmt.ConfigError, match="unknown decoding setting bem"):
        translator.with_decode(bem=2)
    with pytest.raises(nmt.ConfigError, match=r"decode\.n_best \(4\) cannot exceed decode\.beam \(3\)"):
        translator.with_decode(n_best=4)


def _forward_log_prob(translator: nmt.Translator, source: str, reference: str) -> tuple[float, int]:
    """A reference's summed log-probability and token count by the model's own teacher-forced forward pass."""
    model = translator.engine.model
    src = torch.tensor([[*translator.encode([source])[0].tolist(), model.eos_id]])  # (1, S)
    tokens = translator.tokenizer.encode_tgt([translator.normalize(reference)])[0]
    tgt_in, tgt_out = torch.tensor([[model.bos_id, *tokens]]), torch.tensor([[*tokens, model.eos_id]])  # (1, T)
    with torch.no_grad():
        log_probs = model(src, torch.ones_like(src, dtype=torch.bool), tgt_in).float().log_softmax(-1)  # (1, T, V)
    return float(log_probs.gather(2, tgt_out[..., None]).sum()), len(tokens) + 1


def test_score_gives_each_reference_s_log_probability_as_a_forward_pass_does(trained_run):
    import random

    translator = nmt.load(trained_run, device="cpu", beam=1)
    sample = REPO / "data" / "sample"
    sources = sample.joinpath("val.de").read_text(encoding="utf-8").splitlines()[:4]
    references = sample.joinpath("val.en").read_text(encoding="utf-8").splitlines()[:4]
    own = translator.translate(sources)
    shuffled = []  # each reference's words, and the greedy output's characters, in a random order
    for words, chars in zip((r.split() for r in references), (list(o) for o in own), strict=True):
        random.Random(0).shuffle(words)
        random.Random(0).shuffle(chars)
        shuffled.append((" ".join(words), "".join(chars)))
    scores = translator.score(sources, own)
    for source, reference, got in zip(sources, own, scores, strict=True):
        log_prob, tokens = _forward_log_prob(translator, source, reference)
        assert got.log_prob == pytest.approx(log_prob, abs=1e-4) and got.tokens == tokens
        assert got.per_token == pytest.approx(got.log_prob / got.tokens)
    for i, (mine, ref) in enumerate(zip(scores, translator.score(sources, references), strict=True)):
        assert ref.log_prob == pytest.approx(_forward_log_prob(translator, sources[i], references[i])[0], abs=1e-4)
        words, chars = translator.score([sources[i]] * 2, list(shuffled[i]))
        assert mine.log_prob >= chars.log_prob  # greedy's own output beats itself shuffled (about as long)
        assert mine.per_token >= words.per_token  # and a shuffled reference (another length: per token)
    searched = [found[0].log_prob for found in translator.hypotheses(sources)]
    assert [s.log_prob for s in scores] == pytest.approx(searched, abs=1e-4)  # the search's own number
    one = translator.score(sources[0], own[0])  # a str pair gives one score
    assert isinstance(one, nmt.translator.ReferenceScore) and one.log_prob == pytest.approx(scores[0].log_prob)
    assert [s.log_prob for s in nmt.load([trained_run, trained_run], device="cpu").score(sources, own)] == \
        pytest.approx([s.log_prob for s in scores], abs=1e-5)  # an ensemble: its members' mean
    with pytest.raises(nmt.ConfigError, match="4 sources but 2 references"):
        translator.score(sources, own[:2])
    with pytest.raises(nmt.ConfigError, match="a str source with a str reference"):
        translator.score(sources[0], own[:1])


def test_export_and_import_model_name_what_they_refuse(trained_run, tmp_path):
    with pytest.raises(nmt.ExportError, match="format 'onnx': unknown export format"):
        nmt.export_model(trained_run, format="onnx", output=tmp_path / "x")
    with pytest.raises(nmt.ExportError, match="quantization does not apply to format huggingface"):
        nmt.export_model(trained_run, format="huggingface", output=tmp_path / "x", quantization="int8")
    assert not (tmp_path / "x").exists()


def test_evaluate_gives_the_report_nmt_evaluate_writes(trained_run, tmp_path):
    report = nmt.evaluate(trained_run, split="val", device="cpu")
    written = tmp_path / "val.json"
    assert evaluate_main([str(trained_run), "--split", "val", "--device", "cpu", "--output", str(written)]) == 0
    on_disk = json.loads(written.read_text(encoding="utf-8"))
    assert report["scores"] == on_disk["scores"] and report["decode"] == on_disk["decode"]
    assert report["hypotheses"] == written.with_suffix(".hyp.txt").read_text(encoding="utf-8").splitlines()
    sample = REPO / "data" / "sample"
    files = nmt.evaluate(trained_run, src=sample / "val.de", ref=sample / "val.en", device="cpu")
    assert files["scores"] == report["scores"] and files["split"] == "file_val"
    with pytest.raises(nmt.ConfigError, match="src and ref go together"):
        nmt.evaluate(trained_run, src=sample / "val.de")


def test_load_config_takes_a_path_a_mapping_or_a_config_and_names_the_key(tmp_path):
    path = tiny_config(tmp_path)
    from_file = nmt.load_config(path, {"train.lr": 1e-4})
    from_mapping = nmt.load_config(yaml.safe_load(path.read_text(encoding="utf-8")), {"train.lr": 1e-4})
    assert from_file == from_mapping == nmt.load_config(from_file) and from_file.train.lr == 1e-4
    with pytest.raises(nmt.ConfigError, match=r"model\.self_attention_settings\.windw \(did you mean 'window'"):
        nmt.load_config({"model": {"self_attention": "local", "self_attention_settings": {"windw": 4}}})
    with pytest.raises(nmt.ConfigError, match=r"tiny\.yaml: unknown key 'train\.lrr'"):
        nmt.load_config(path, {"train.lrr": 1})
    assert issubclass(nmt.ConfigError, ValueError) and issubclass(nmt.ConfigError, nmt.NmtError)


def test_train_of_an_invalid_config_raises_config_error_naming_the_key_and_writes_nothing(tmp_path):
    raw = _raw(tmp_path / "work", lr=-1.0)
    with pytest.raises(nmt.ConfigError, match=r"train\.lr: got -1\.0"):
        nmt.train(raw)
    with pytest.raises(nmt.ConfigError, match=r"unknown key 'train\.max_step'.*max_steps"):
        nmt.train(_raw(tmp_path / "work"), overrides={"train.max_step": 3})
    with pytest.raises(nmt.ConfigError, match=r"^nmt\.train overrides: expected a mapping such as "):
        nmt.train(_raw(tmp_path / "work"), overrides=["train.max_steps=3"])  # --set's strings are the CLI's
    assert sorted(p.name for p in (tmp_path / "work").iterdir()) == ["tiny.yaml"]  # no run folder, no cache


def _caller_state() -> tuple:
    root, ours = logging.getLogger(), logging.getLogger("nmt")
    return (list(root.handlers), root.level, list(ours.handlers), ours.level, logging.raiseExceptions,
            signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM))


def test_train_returns_a_run_and_leaves_root_logging_and_signal_handlers_as_they_were(tmp_path):
    before = _caller_state()
    run = nmt.train(_raw(tmp_path), overrides={"train.max_steps": 10})
    assert _caller_state() == before
    assert isinstance(run, nmt.Run) and run.steps == 10 and run.path == tmp_path / "runs" / "tiny"
    assert run.checkpoint is not None and run.checkpoint.is_file() and run.report["split"] == "test"
    assert run.report == json.loads((run.path / "eval_test.json").read_text(encoding="utf-8"))
    assert "training stopped at step 10" in (run.path / "train.log").read_text(encoding="utf-8")
    assert run.translator(device="cpu").translate(LINES) == nmt.load(run.path, device="cpu").translate(LINES)


def test_ctrl_c_in_nmt_train_saves_last_pt_raises_and_the_same_call_resumes(tmp_path, monkeypatch):
    step = Trainer.train_step

    def interrupted_at_step_4(self, group):
        if self.progress.step == 4:
            signal.raise_signal(signal.SIGINT)  # as Ctrl-C in a notebook
        return step(self, group)

    monkeypatch.setattr(Trainer, "train_step", interrupted_at_step_4)
    before = _caller_state()
    with pytest.raises(nmt.TrainingInterrupted, match="stopped by SIGINT at step 5; last.pt is saved.*resume"):
        nmt.train(_raw(tmp_path, max_steps=8))
    assert _caller_state() == before and (tmp_path / "runs" / "tiny" / "checkpoints" / "last.pt").is_file()
    monkeypatch.setattr(Trainer, "train_step", step)
    assert nmt.train(_raw(tmp_path, max_steps=8), evaluate_test=False).steps == 8


def test_every_console_script_also_runs_as_python_m_nmt():
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]["scripts"]
    assert {f"nmt-{name}": target for name, target in COMMANDS.items()} == scripts

