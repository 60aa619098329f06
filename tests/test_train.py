"""The trainer: exact resume after SIGKILL or a signal, precisions, guards, early stop, the final model (the
refusals of bad checkpoints are in test_checkpoint.py, several processes in test_distributed.py)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

import nmt.trainer
from nmt.checkpoint import find_checkpoint, load_checkpoint, save_contents
from nmt.cli import train_main
from nmt.config import load_config
from nmt.data import prepare
from nmt.errors import TrainingError
from nmt.trainer import Trainer
from nmt.utils import resolve_device
from tests.conftest import REPO, tiny_config


def _run(args: list[str], **kwargs) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    return subprocess.Popen([sys.executable, "-m", "nmt", *args], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, **kwargs)


def test_sigkill_then_resume_is_bitwise_identical(tmp_path):
    overrides = {"train": {"max_steps": 70, "eval_every": 20, "batch_tokens": 400, "device": "cpu"}}  # bitwise
    straight = tiny_config(tmp_path, name="straight", **overrides)
    killed = tiny_config(tmp_path, name="killed", **overrides)
    proc = _run(["train", str(killed), "--no-evaluate"])
    last = tmp_path / "runs" / "killed" / "checkpoints" / "last.pt"
    deadline = time.monotonic() + 240
    while not last.exists() and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.02)
    time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    assert proc.wait(timeout=60) == -signal.SIGKILL, "the run ended before it could be killed"
    saved = load_checkpoint(last)
    assert 0 < saved["progress"]["step"] < 70 and saved["sampler"]["position"] > 0  # mid-epoch
    threads = torch.get_num_threads()
    try:  # the resume and the uninterrupted run here, on one thread as the killed command had it
        torch.set_num_threads(1)
        assert train_main([str(killed), "--no-evaluate"]) == 0
        assert train_main([str(straight), "--no-evaluate"]) == 0
    finally:
        torch.set_num_threads(threads)

    a = load_checkpoint(tmp_path / "runs" / "straight" / "checkpoints" / "last.pt")
    b = load_checkpoint(last)
    assert a["progress"]["step"] == b["progress"]["step"] == 70
    for key, value in a["model"].items():
        assert torch.equal(value, b["model"][key]), key
    steps = [json.loads(line)["step"] for line in (last.parents[1] / "metrics.jsonl").read_text().splitlines()]
    assert steps == sorted(steps), "metrics.jsonl holds lines from after the resumed checkpoint"


def _trainer(tmp_path, **sections) -> Trainer:
    cfg = load_config(str(tiny_config(tmp_path, **sections)))
    return Trainer(cfg, prepare(cfg, log=lambda _m: None), resolve_device(cfg.train.device))


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_mixed_precision_trains_on_cpu(tmp_path, precision):
    trainer = _trainer(tmp_path, train={"precision": precision, "max_steps": 4, "eval_every": 2, "log_every": 1})
    before = {k: v.clone() for k, v in trainer.model.state_dict().items()}
    trainer.fit()
    assert trainer.progress.step == 4
    assert any(not torch.equal(before[k], v) for k, v in trainer.model.state_dict().items())
    lines = [json.loads(x) for x in trainer.metrics.path.read_text().splitlines()]
    assert all(torch.isfinite(torch.tensor(x["loss"])) for x in lines)
    assert trainer.scaler.is_enabled() == (precision == "fp16")
    assert "scale" in load_checkpoint(trainer.checkpoints.folder / "last.pt")["scaler"] or precision == "bf16"


def test_nonfinite_guard_skips_and_then_stops(tmp_path):
    trainer = _trainer(tmp_path, train={"max_steps": 8, "eval_every": 4, "max_nonfinite": 3})
    forward = trainer.model.forward
    calls = {"n": 0}

    def poisoned(*args):
        calls["n"] += 1
        out = forward(*args)
        return out * float("nan") if calls["n"] == 3 else out

    trainer.net.forward = poisoned
    trainer.fit()
    assert trainer.progress.step == 8 and trainer.progress.skipped == 1

    trainer2 = _trainer(tmp_path / "b", train={"max_steps": 50, "eval_every": 4, "max_nonfinite": 3})
    trainer2.net.forward = lambda *args: forward(*args) * float("nan")
    with pytest.raises(TrainingError, match="3 non-finite updates in a row"):
        trainer2.fit()
    assert load_checkpoint(trainer2.checkpoints.folder / "last.pt")["progress"]["skipped"] == 3


def test_early_stopping_fires_on_plateau(tmp_path):
    trainer = _trainer(tmp_path, train={"patience": 2, "early_stop_metric": "loss", "max_steps": 10})
    trainer.checkpoints.folder.mkdir(parents=True)
    decisions = []
    for step, loss in enumerate([3.0, 2.5, 2.6, 2.55, 2.4], 1):
        trainer.progress.step = step
        decisions.append(trainer.record_validation({"loss": loss}))
    assert decisions == [False, False, False, True, False]
    assert [b["step"] for b in trainer.progress.best] == [5, 2]
    steps = sorted(p.name for p in trainer.checkpoints.folder.glob("step_*.pt"))
    assert steps == [f"step_{n}.pt" for n in range(1, 6)]  # until last.pt stops listing them, none is deleted
    trainer.checkpoints.save_last(trainer.contents())
    assert sorted(p.name for p in trainer.checkpoints.folder.glob("step_*.pt")) == ["step_2.pt", "step_5.pt"]


def test_each_epoch_is_validated_when_update_groups_span_epochs(tmp_path):
    """eval_every 0 validates at every epoch's end, also when accumulate does not divide an epoch's batches."""
    # A short epoch: the 91 sample pairs of at most 16 subwords, in 6 batches.
    trainer = _trainer(tmp_path, data={"max_tokens": 16}, train={"accumulate": 4, "batch_tokens": 256, "eval_every": 0,
                                                                 "max_steps": 0, "max_epochs": 3})
    assert len(trainer.sampler) % 4
    trainer.fit()
    lines = [json.loads(x) for x in trainer.metrics.path.read_text().splitlines()]
    assert [e["epoch"] for e in lines if e["type"] == "valid"] == [1, 2, 3]


def _resumed(trained_copy, overrides: dict[str, object], before: Path | None = None) -> Trainer:
    """A trainer resumed from the copy of the shared trained run (60 updates, validated at 30 and 60, the best 2
    kept), with config `overrides`; `before`: where to save its initial weights before it resumes."""
    config, run = trained_copy
    cfg = load_config(config, overrides)
    trainer = Trainer(cfg, prepare(cfg, log=lambda _m: None), resolve_device(cfg.train.device))
    if before is not None:
        save_contents(trainer.contents(training=False), before)
    trainer.resume(run / "checkpoints" / "last.pt")
    return trainer


def _with_second_best(trained_copy, tmp_path, replace_with: str) -> tuple[Trainer, Path]:
    """A trained trainer averaging its best 2 checkpoints, whose second best file is swapped for `replace_with`:
    "best" (a copy of best.pt) or "untrained" (the initial weights)."""
    trainer = _resumed(trained_copy, {"train.average_last": 2}, before=tmp_path / "untrained.pt")
    run, best = trainer.checkpoints.run, trainer.progress.best
    assert len(best) == 2
    shutil.copyfile(run.best if replace_with == "best" else tmp_path / "untrained.pt", run.checkpoint(best[1]["path"]))
    return trainer, run.path


def test_an_average_that_validates_worse_than_best_pt_is_not_the_final_model(trained_copy, tmp_path):
    trainer, folder = _with_second_best(trained_copy, tmp_path, "untrained")
    stale = folder / "checkpoints" / "averaged.pt"
    shutil.copyfile(folder / "checkpoints" / "best.pt", stale)  # as an earlier end of this run could have left it
    final, choice, _, _ = trainer.final_model()
    assert final == folder / "checkpoints" / "best.pt" and find_checkpoint(folder) == final
    assert not stale.exists()  # the run folder stands for the model its report scored
    assert choice["checkpoint"] == "best.pt" and choice["metric"] == "loss" and choice["average"] > choice["best"]


def test_an_average_that_validates_as_well_as_best_pt_is_the_final_model(trained_copy, tmp_path):
    """Averaging best.pt with a copy of itself gives best.pt's weights again: the tie keeps the average."""
    trainer, folder = _with_second_best(trained_copy, tmp_path, "best")
    on_cpu = trainer.device.type == "cpu"
    if not on_cpu:  # a GPU may round the re-validation apart from the training-time one: no exact tie to test
        trainer.progress.best[0]["score"] -= 1e-3
    final, choice, _, _ = trainer.final_model()
    assert final == folder / "checkpoints" / "averaged.pt" and find_checkpoint(folder) == final
    assert choice["checkpoint"] == "averaged.pt" and (choice["average"] == choice["best"] or not on_cpu)
    assert choice["averaged_steps"] == [b["step"] for b in trainer.progress.best]


def test_a_run_without_test_report_or_tuning_still_chooses_its_final_model(trained_copy):
    """--no-evaluate with a fixed length penalty still chooses the final model (nmt.train returns it): the run
    folder stands for it, not for an averaged.pt that an earlier end of the run made from other checkpoints."""
    trainer = _resumed(trained_copy, {"decode.length_penalty": 1.0})
    folder = trainer.checkpoints.run.path
    shutil.copyfile(folder / "checkpoints" / "best.pt", folder / "checkpoints" / "averaged.pt")
    outcome = trainer.finish(False, "nmt-train")
    assert outcome.checkpoint == find_checkpoint(folder) == folder / "checkpoints" / "best.pt"
    assert outcome.report is None and outcome.choice["checkpoint"] == "best.pt"


def _fitted(tmp_path, name: str, resume: bool = False, **train) -> Trainer:
    cfg = load_config(str(tiny_config(tmp_path, name=name, train={"device": "cpu", "batch_tokens": 400, **train})))
    trainer = Trainer(cfg, prepare(cfg, log=lambda _m: None), resolve_device("cpu"))
    if resume:
        trainer.resume(cfg.run_dir / "checkpoints" / "last.pt")
    trainer.fit()
    return trainer


def _valid_steps(trainer: Trainer) -> list[int]:
    return [e["step"] for e in map(json.loads, trainer.metrics.path.read_text().splitlines()) if e["type"] == "valid"]


def test_a_signal_at_a_validation_step_leaves_the_validation_owed(tmp_path, monkeypatch):
    """Stopped by a signal in the update that ends at a validation step, the run saves without validating;
    the resume validates there first, so it ends as an uninterrupted run ends."""
    settings = {"max_steps": 12, "eval_every": 4, "keep_best": 2}
    straight = _fitted(tmp_path, "straight", **settings)
    original = Trainer.train_step

    def step(self: Trainer, group):  # SIGTERM arrives during the update that ends at step 8
        monkeypatch.setattr(nmt.trainer, "stop_signal", lambda: signal.SIGTERM if self.progress.step == 7 else 0)
        return original(self, group)

    monkeypatch.setattr(Trainer, "train_step", step)
    stopped = _fitted(tmp_path, "stopped", **settings)
    assert stopped.progress.step == 8 and stopped.progress.pending_validation and _valid_steps(stopped) == [4]
    monkeypatch.undo()
    resumed = _fitted(tmp_path, "stopped", resume=True, **settings)
    assert _valid_steps(resumed) == _valid_steps(straight) == [4, 8, 12]
    assert [b["step"] for b in resumed.progress.best] == [b["step"] for b in straight.progress.best]
    for key, value in straight.model.state_dict().items():
        assert torch.equal(value, resumed.model.state_dict()[key]), key


def test_a_run_that_stopped_early_stays_stopped(tmp_path, monkeypatch):
    worse = iter(range(1, 100))
    monkeypatch.setattr(nmt.trainer, "validation_scores", lambda *a, **k: {"loss": float(next(worse)), "ppl": 1.0})
    settings = {"max_steps": 40, "eval_every": 4, "patience": 1, "early_stop_metric": "loss"}
    first = _fitted(tmp_path, "early", **settings)
    assert first.progress.step == 8
    again = _fitted(tmp_path, "early", resume=True, **settings)
    assert again.progress.step == 8 and _valid_steps(again) == [4, 8]

