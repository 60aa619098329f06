"""A researcher's own corpus end to end: files outside the repository (two-file and TSV forms, no test split) named
by paths relative to the config's folder, a run killed with SIGKILL between validations that resumes from its
cadence checkpoint and ends bitwise as an uninterrupted run, its log in a file (the time cadence and the time left),
its learning curve, and evaluation and translation of the run from another working directory."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

import nmt
from nmt.checkpoint import load_checkpoint
from nmt.cli import evaluate_main, plot_main, train_main, translate_main
from nmt.config import load_config
from nmt.data import prepare
from nmt.trainer import Trainer
from nmt.utils import resolve_device
from tests.conftest import REPO, fails_cleanly, tiny_config

SAMPLE = REPO / "data" / "sample"
KILL_AT, SAVE_EVERY, EVAL_EVERY, STEPS = 27, 5, 20, 40  # killed between the validations at 20 and 40


def _corpus(folder: Path) -> None:
    """The sample's training pairs as one two-file corpus and one TSV, its validation pairs as dev files."""
    folder.mkdir(parents=True)
    de = (SAMPLE / "train.de").read_text(encoding="utf-8").splitlines()
    en = (SAMPLE / "train.en").read_text(encoding="utf-8").splitlines()
    half = len(de) // 2
    (folder / "part1.de").write_text("\n".join(de[:half]) + "\n", encoding="utf-8")
    (folder / "part1.en").write_text("\n".join(en[:half]) + "\n", encoding="utf-8")
    (folder / "part2.tsv").write_text("".join(f"{s}\t{t}\n" for s, t in zip(de[half:], en[half:])), encoding="utf-8")
    for lang in ("de", "en"):
        (folder / f"dev.{lang}").write_text((SAMPLE / f"val.{lang}").read_text(encoding="utf-8"), encoding="utf-8")


def _config(project: Path, name: str) -> Path:
    """A tiny config in `project` whose paths are relative (to the folder the commands run from: `project`)."""
    raw = {
        "name": name,
        "data": {"dataset": "files", "train_src": "../corpus/part1.de", "train_tgt": "../corpus/part1.en",
                 "train_corpora": [["../corpus/part2.tsv"]], "val_src": "../corpus/dev.de",
                 "val_tgt": "../corpus/dev.en", "cache_dir": "cache", "workers": 1},
        "tokenizer": {"vocab_size": 300},
        "model": {"d_model": 32, "heads": 2, "ffn_dim": 64, "encoder_layers": 1, "decoder_layers": 1},
        "train": {"batch_tokens": 400, "max_steps": STEPS, "max_epochs": 0, "lr": 3e-3, "warmup": 10,
                  "eval_every": EVAL_EVERY, "save_every": SAVE_EVERY, "log_every": 1000, "log_minutes": 0.002,
                  "eval_bleu": False, "examples": 2, "device": "cpu"},
        "decode": {"beam": 2, "length_penalty": 1.0},
    }
    path = project / f"{name}.yaml"
    path.write_text(yaml.safe_dump(raw), encoding="utf-8")
    return path


_KILLER = f"""
import os, signal, sys
import nmt.trainer
from nmt.cli import train_main

step = nmt.trainer.Trainer.train_step

def train_step(self, group):
    if self.progress.step == {KILL_AT}:  # a crash between validations: no handler runs, nothing is saved
        os.kill(os.getpid(), signal.SIGKILL)
    return step(self, group)

nmt.trainer.Trainer.train_step = train_step
sys.exit(train_main(["killed.yaml"]))
"""


def _records(run: Path, kind: str) -> dict[int, dict]:
    return {r["step"]: r for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines())
            if r["type"] == kind}


def test_own_corpus_killed_between_validations_resumes_exactly_and_works_from_any_folder(tmp_path, monkeypatch):
    """Trains (twice: straight, and killed then resumed), so it is a training test; tiny and seconds long."""
    _corpus(tmp_path / "corpus")
    project, elsewhere = tmp_path / "project", tmp_path / "elsewhere"
    project.mkdir()
    elsewhere.mkdir()
    straight = _config(project, "straight")
    _config(project, "killed")
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    with (project / "killed.err").open("w") as err:  # the log goes to a file, as under nohup or a cluster job
        done = subprocess.run([sys.executable, "-c", _KILLER], cwd=project, env=env, stdout=err, stderr=err,
                              timeout=300)
    said = (project / "killed.err").read_text(encoding="utf-8")
    assert done.returncode == -signal.SIGKILL, said[-3000:]
    run = project / "runs" / "killed"
    saved = load_checkpoint(run / "checkpoints" / "last.pt")
    assert saved["progress"]["step"] == KILL_AT - KILL_AT % SAVE_EVERY  # the cadence's last.pt, not the validation's
    # The file shows training lines on the clock (log_every is 1000) with the pace and the time left.
    paced = re.findall(r"step (\d+) epoch \d+ loss [\d.]+ lr \S+ ([\d.]+) updates/s \d+ tgt tok/s, (\S+) left "
                       r"\(max_steps\)", said)
    assert len(paced) >= 2 and all(int(step) < 1000 and float(rate) > 0 for step, rate, _ in paced), said[-3000:]
    assert "starting from step 0: nothing to resume" in said and "example 1\n  source     " in said

    monkeypatch.chdir(project)
    threads = torch.get_num_threads()
    try:  # the resume and the uninterrupted run on one thread, as the killed command had it
        torch.set_num_threads(1)
        assert train_main(["killed.yaml"]) == 0
        finished = nmt.train(straight)
    finally:
        torch.set_num_threads(threads)
    assert f"resumed from {run / 'checkpoints' / 'last.pt'} at step {saved['progress']['step']}" in (
        run / "train.log").read_text(encoding="utf-8")
    # No test split: no report, and still the final model.
    assert finished.path == project / "runs" / "straight"  # absolute, as every path a run stores
    assert finished.report is None and finished.checkpoint == finished.path / "checkpoints" / "best.pt"

    a, b = load_checkpoint(finished.path / "checkpoints" / "last.pt"), load_checkpoint(run / "checkpoints" / "last.pt")
    assert a["progress"]["step"] == b["progress"]["step"] == STEPS
    for key, value in a["model"].items():
        assert torch.equal(value, b["model"][key]), key
    valid_a, valid_b = _records(finished.path, "valid"), _records(run, "valid")
    assert sorted(valid_a) == sorted(valid_b) == [EVAL_EVERY, STEPS]
    assert [valid_a[s]["loss"] for s in valid_a] == [valid_b[s]["loss"] for s in valid_a]
    assert [e["source"] for e in valid_a[STEPS]["examples"]] == [e["source"] for e in valid_b[EVAL_EVERY]["examples"]]
    train_a, train_b = _records(finished.path, "train"), _records(run, "train")
    both = sorted(set(train_a) & set(train_b))
    assert [train_a[s]["loss"] for s in both] == [train_b[s]["loss"] for s in both]  # the clock's lines differ
    assert all(r["limit"] == "max_steps" and r["updates_left"] == STEPS - s for s, r in train_b.items())
    assert (run / "curve.png").read_bytes().startswith(b"\x89PNG")

    monkeypatch.chdir(elsewhere)  # the run folder's data paths hold from any folder
    saved_cfg = yaml.safe_load((run / "config.yaml").read_text(encoding="utf-8"))
    assert saved_cfg["data"]["val_src"] == str(tmp_path / "corpus" / "dev.de")
    assert plot_main([str(run), str(finished.path), "-o", "both.png"]) == 0
    assert (elsewhere / "both.png").read_bytes().startswith(b"\x89PNG")
    assert evaluate_main([str(run), "--split", "val"]) == 0
    report = json.loads((run / "eval_val.json").read_text(encoding="utf-8"))
    assert report["sentences"] == len((tmp_path / "corpus" / "dev.de").read_text(encoding="utf-8").splitlines())
    (elsewhere / "in.de").write_text("Ein Hund läuft.\n", encoding="utf-8")
    assert translate_main(["-c", str(run), "-i", "in.de", "-o", "out.en"]) == 0
    assert len((elsewhere / "out.en").read_text(encoding="utf-8").splitlines()) == 1


@pytest.mark.parametrize(("limits", "limit"), [({"max_steps": 10_000, "max_epochs": 2}, "max_epochs"),
                                               ({"max_steps": 7, "max_epochs": 2}, "max_steps"),
                                               ({"max_steps": 0, "max_epochs": 0, "max_minutes": 1.0}, "max_minutes")])
def test_the_time_left_is_against_the_limit_that_ends_the_run_first(tmp_path, limits, limit):
    cfg = load_config(str(tiny_config(tmp_path, train=limits)))
    trainer = Trainer(cfg, prepare(cfg, log=lambda _m: None), resolve_device("cpu"))
    trainer.progress.step, trainer.progress.elapsed = 3, 30.0
    outlook = trainer.outlook(rate=2.0)
    expected = {"max_epochs": 2 * len(trainer.sampler), "max_steps": 4, "max_minutes": (60 - 30) * 2.0}[limit]
    assert (outlook.limit, outlook.updates, outlook.seconds) == (limit, expected, expected / 2.0)
    assert outlook.describe().endswith(f"left ({limit})")


def test_nmt_plot_refuses_a_folder_without_metrics_in_one_line(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    fails_cleanly(plot_main, [str(tmp_path / "empty")], capsys, tmp_path, "metrics.jsonl: file not found")
    (tmp_path / "empty" / "metrics.jsonl").write_text("", encoding="utf-8")
    fails_cleanly(plot_main, [str(tmp_path / "empty")], capsys, tmp_path, "holds no record yet")


def test_every_relative_path_of_a_config_becomes_absolute_against_the_working_folder(tmp_path, monkeypatch):
    """What a run stores: its data, cache, download and mirror folders, run_root and parent, absolute."""
    from nmt.config import absolute_paths

    monkeypatch.chdir(tmp_path)
    cfg = load_config({"run_root": "runs", "data": {
        "dataset": "files", "train_src": "c/t.de", "train_tgt": "c/t.en",
        "train_corpora": [["../more.tsv"], {"files": ["bt.de", "bt.en"], "weight": 2.0, "tag": "<bt>"}],
        "task2_mirror": "t2", "val_src": "c/v.de", "val_tgt": "/abs/v.en", "cache_dir": "cache",
        "download_dir": "dl", "mirror": ""},
        "train": {"init_from": "runs/parent"}})
    done = absolute_paths(cfg)
    assert done.run_dir == tmp_path / "runs" / cfg.name and done.train.init_from == str(tmp_path / "runs" / "parent")
    assert (done.data.train_src, done.data.val_tgt) == (str(tmp_path / "c" / "t.de"), "/abs/v.en")
    more, synthetic = done.data.train_corpora
    assert more == [str(tmp_path.parent / "more.tsv")] and done.data.task2_mirror == str(tmp_path / "t2")
    assert synthetic.files == [str(tmp_path / "bt.de"), str(tmp_path / "bt.en")] and synthetic.weight == 2.0
    assert (done.data.cache_dir, done.data.download_dir) == (str(tmp_path / "cache"), str(tmp_path / "dl"))
    assert done.data.mirror == "" and done.data.test_src == ""  # unset stays unset
    assert absolute_paths(done) == done
