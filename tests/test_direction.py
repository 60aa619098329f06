"""Either direction: data.direction en-de reverses every split of a named dataset alike (evaluation included), and
what names a language (sentence splitting, translation files, exports) follows the model's direction."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from nmt import data
from nmt.cli import evaluate_main, train_main
from nmt.config import Config, DataConfig, load_config
from nmt.data import evaluation_files, normalize, prepare, resolve_corpora, sample_dir
from nmt.errors import ConfigError
from nmt.evaluation import split_pair
from tests.conftest import tiny_config

MIRROR = Path(os.environ.get(data.MIRROR_ENV) or "/work/shared/data/multi30k")


def quiet(_: str) -> None:
    pass


def test_the_reverse_direction_swaps_every_split_of_the_sample(tmp_path):
    forward = load_config(tiny_config(tmp_path, "fwd"))
    reverse = load_config(tiny_config(tmp_path, "rev", data={"direction": "en-de"}))
    for split, corpora in resolve_corpora(reverse, quiet).items():
        (src, tgt), = [c.paths for c in corpora]
        assert (src.name, tgt.name) == (f"{split}.en", f"{split}.de")
        assert resolve_corpora(forward, quiet)[split][0].paths == (tgt, src)
    assert split_pair(reverse, "test") == tuple(reversed(split_pair(forward, "test")))
    prepared = prepare(reverse, log=quiet)
    english = (sample_dir() / "val.en").read_text(encoding="utf-8").splitlines()
    german = (sample_dir() / "val.de").read_text(encoding="utf-8").splitlines()
    val = prepared.splits["val"]
    assert val.src_raw == [normalize(line, False) for line in english]
    assert val.tgt_raw == [normalize(line, False) for line in german]


@pytest.mark.skipif(not MIRROR.is_dir(), reason=f"no Multi30k mirror at {MIRROR}")
def test_every_multi30k_split_and_test_set_is_reversed(monkeypatch):
    monkeypatch.setenv(data.MIRROR_ENV, str(MIRROR))
    cfg = Config(data=DataConfig(dataset="multi30k", direction="en-de"))
    for split in ("val", "test", "test2017", "mscoco2017", "test2018"):
        src, tgt = evaluation_files(cfg, split, quiet)
        assert src.name.endswith(".en.gz") and tgt.name.endswith(".de.gz"), split
    assert [p.name for p in resolve_corpora(cfg, quiet)["train"][0].paths] == ["train.en.gz", "train.de.gz"]


@pytest.mark.parametrize(("direction", "message"), [
    ("fr-en", "dataset 'sample' holds de and en: choose de-en or en-de, not fr-en"),
    ("de-de", "translates a language into itself"),
    ("german-english", "is not two language codes"),
])
def test_a_direction_the_dataset_cannot_give_is_refused(tmp_path, direction, message):
    with pytest.raises(ConfigError, match=message):
        load_config(tiny_config(tmp_path, data={"direction": direction}))


def test_own_files_name_their_languages(tmp_path):
    cfg = load_config({"data": {"dataset": "files", "direction": "fr-en", "train_src": "a", "train_tgt": "b",
                                "val_src": "c", "val_tgt": "d"}})
    assert cfg.data.languages == ("fr", "en")


def test_a_reverse_model_trains_and_evaluates_into_german(tmp_path, capsys):
    from nmt import load

    config = tiny_config(tmp_path, "reverse", data={"direction": "en-de"}, train={"max_steps": 4, "eval_every": 4})
    assert train_main([str(config)]) == 0
    run = tmp_path / "runs" / "reverse"
    assert (run / "test.hyp.de").is_file() and not (run / "test.hyp.en").exists()
    translator = load(run, device="cpu")
    assert translator.languages == ("en", "de")
    assert evaluate_main([str(run), "--split", "val"]) == 0
    assert (run / "val.hyp.de").is_file()
    refs = (sample_dir() / "val.de").read_text(encoding="utf-8").splitlines()
    assert split_pair(translator.cfg, "val")[1] == refs  # scored against the German side
    # sentences are cut by English rules: "Mr." ends no sentence in English, as "z. B." ends none in German
    assert tuple(translator.prepare(["Mr. Smith runs. A dog sleeps."]).sentences) == (
        "Mr. Smith runs.", "A dog sleeps.")


def test_exports_name_the_models_languages_and_keep_its_tags_out(tmp_path):
    pytest.importorskip("ctranslate2")
    pytest.importorskip("transformers")
    import json

    from nmt import load
    from nmt.export import export_ctranslate2, read_manifest
    from nmt.interop.hf_export import export_huggingface
    from tests.conftest import untrained_run

    (tmp_path / "bt.en").write_text("a dog runs\n", encoding="utf-8")
    (tmp_path / "bt.de").write_text("ein hund rennt\n", encoding="utf-8")
    corpus = {"files": [str(tmp_path / "bt.en"), str(tmp_path / "bt.de")], "tag": "<bt>"}
    run = untrained_run(tmp_path, "reverse", data={"direction": "en-de", "train_corpora": [corpus]})
    tag = load(run, device="cpu").tokenizer.reserved_id("<bt>")
    export_ctranslate2(run, tmp_path / "ct2", "float32")
    assert read_manifest(tmp_path / "ct2")["languages"] == ["en", "de"]
    export_huggingface(run, tmp_path / "hf")
    tokenizer = json.loads((tmp_path / "hf" / "tokenizer_config.json").read_text(encoding="utf-8"))
    assert (tokenizer["source_lang"], tokenizer["target_lang"]) == ("en", "de")
    generation = json.loads((tmp_path / "hf" / "generation_config.json").read_text(encoding="utf-8"))
    assert generation["bad_words_ids"] == [[tag]]
    card = (tmp_path / "hf" / "README.md").read_text(encoding="utf-8")
    assert "A Transformer translating en->de" in card and "- en\n- de" in card


def test_ensemble_members_must_translate_the_same_way(tmp_path):
    from nmt import load
    from nmt.checkpoint import load_checkpoint, save_checkpoint
    from nmt.errors import CheckpointError
    from tests.conftest import untrained_run

    run = untrained_run(tmp_path, "forward")
    payload = load_checkpoint(run / "checkpoints" / "best.pt")
    payload["config"]["data"]["direction"] = "en-de"  # the same vocabulary, read the other way
    save_checkpoint(payload, tmp_path / "reverse.pt")
    assert load(tmp_path / "reverse.pt", device="cpu").languages == ("en", "de")
    with pytest.raises(CheckpointError, match="translates en-de, .* de-en; ensemble members must translate the same"):
        load([run, tmp_path / "reverse.pt"], device="cpu")
