"""Fine-tuning with train.init_from: the child starts from its parent's weights, tokenizer and model settings,
with fresh training state, and learns a corpus its parent never saw."""

from __future__ import annotations

import itertools
import random
from pathlib import Path

import pytest
import yaml

import nmt
from nmt.checkpoint import find_checkpoint, load_contents
from nmt.cli import train_main
from nmt.fileio import sha256_file
from nmt.finetune import load_parent
from nmt.run.folder import RunDir, read_metrics
from nmt.run.lifecycle import prepare_trainer
from nmt.trainer import validation_scores
from nmt.utils import resolve_device
from tests.conftest import tiny_config

# A small compositional corpus written for this test: every sentence is subject + verb + place.
SUBJECTS = [("Der Hund", "The dog"), ("Die Katze", "The cat"), ("Der Junge", "The boy"), ("Das Mädchen", "The girl"),
            ("Die Frau", "The woman"), ("Der Mann", "The man"), ("Der Vogel", "The bird"), ("Das Pferd", "The horse")]
VERBS = [("läuft", "runs"), ("schläft", "sleeps"), ("spielt", "plays"), ("wartet", "waits"), ("sitzt", "sits"),
         ("springt", "jumps")]
PLACES = [("im Park", "in the park"), ("am Strand", "on the beach"), ("im Garten", "in the garden"),
          ("auf der Straße", "on the street"), ("im Schnee", "in the snow"), ("vor dem Haus", "in front of the house")]


def write_corpus(folder: Path) -> dict[str, str]:
    """The corpus split 220 / 30 / 38 pairs into train, val and test files; the data.* keys naming them."""
    pairs = [(f"{s} {v} {p}.", f"{se} {ve} {pe}.") for (s, se), (v, ve), (p, pe)
             in itertools.product(SUBJECTS, VERBS, PLACES)]
    random.Random(7).shuffle(pairs)
    keys = {}
    for split, chunk in (("train", pairs[:220]), ("val", pairs[220:250]), ("test", pairs[250:])):
        for side, column in (("src", 0), ("tgt", 1)):
            path = folder / f"{split}.{'de' if side == 'src' else 'en'}"
            path.write_text("".join(pair[column] + "\n" for pair in chunk), encoding="utf-8")
            keys[f"{split}_{side}"] = str(path)
    return keys


def child_config(folder: Path, parent: Path, **sections: dict) -> dict:
    """A child of `parent` as a notebook would write it: only data and training settings of its own."""
    raw = yaml.safe_load(tiny_config(folder, name="child").read_text(encoding="utf-8"))
    del raw["model"], raw["tokenizer"]
    raw["train"].update(init_from=str(parent), lr=3e-3, warmup=5)
    for section, values in sections.items():
        raw[section] = {**raw.get(section, {}), **values}
    return raw


def test_a_child_uses_its_parent_s_tokenizer_and_first_validates_as_its_parent(trained_run, tmp_path):
    cfg = nmt.load_config(child_config(tmp_path, trained_run))
    parent, said = load_parent(cfg), []
    trainer = prepare_trainer(parent.child_config(cfg), resolve_device("cpu"), said.append, parent)
    trainer.start_from(parent)
    assert not any("training sentencepiece" in line for line in said), said
    assert any("no sentencepiece model is trained" in line for line in said), said
    assert trainer.data.tokenizer.identity == parent.tokenizer.identity
    assert trainer.cfg.model == parent.cfg.model and trainer.progress.step == 0
    best = load_contents(find_checkpoint(trained_run)).progress["step"]
    recorded = next(r for r in read_metrics(RunDir(trained_run).metrics) if r["type"] == "valid" and r["step"] == best)
    before_any_update = validation_scores(trainer.model, trainer.data, trainer.cfg, trainer.device)
    assert before_any_update["loss"] == pytest.approx(recorded["loss"], rel=1e-6)


def test_a_fine_tuned_child_beats_its_parent_on_a_corpus_the_parent_never_saw(trained_run, tmp_path):
    data = {"dataset": "files", **write_corpus(tmp_path)}
    raw = child_config(tmp_path, trained_run, data=data, train={"max_steps": 150, "eval_every": 75})
    run = nmt.train(raw)
    test = {"src": data["test_src"], "ref": data["test_tgt"], "device": "cpu", "beam": 1}
    parent_bleu = nmt.evaluate(trained_run, **test)["scores"]["bleu"]
    child_bleu = nmt.evaluate(run.path, **test)["scores"]["bleu"]
    assert child_bleu > parent_bleu + 5.0, (child_bleu, parent_bleu)
    parent_file = find_checkpoint(trained_run)
    record = {"path": str(parent_file), "sha256": sha256_file(parent_file)}
    assert run.report["parent"] == record and load_contents(run.checkpoint).progress["parent"] == record
    assert RunDir(run.path).tokenizer.is_dir() and run.config.train.init_from == str(trained_run)
    resumed = nmt.train(raw, overrides={"train.max_steps": 160}, evaluate_test=False)  # the child's own last.pt
    assert resumed.steps == 160 and "resumed from" in (run.path / "train.log").read_text(encoding="utf-8")


def test_init_from_refuses_a_contradicting_model_key_and_an_export_in_one_line(trained_run, tmp_path, capsys):
    with pytest.raises(nmt.ConfigError, match=r"model\.d_model: 64 differs from the parent's 32"):
        nmt.train(child_config(tmp_path, trained_run, model={"d_model": 64}))
    export = tmp_path / "export"
    export.mkdir()
    (export / "model.bin").write_bytes(b"")
    path = tmp_path / "child.yaml"
    path.write_text(yaml.safe_dump(child_config(tmp_path, export)), encoding="utf-8")
    assert train_main([str(path)]) == 1
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "holds no weights that train" in err
    assert not (tmp_path / "runs" / "child").exists()
