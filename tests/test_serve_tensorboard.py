"""train.tensorboard: the metrics log's scalars as TensorBoard event files, and the message when it is missing."""

from __future__ import annotations

import sys

import pytest

from nmt.cli import train_main
from nmt.errors import ConfigError
from nmt.runlog import MetricsLog, check_tensorboard
from tests.conftest import tiny_config


def test_metrics_become_tensorboard_scalars(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    log = MetricsLog(tmp_path, enabled=True, tensorboard=True)
    log.open()
    log.record({"type": "train", "step": 5, "loss": 2.5, "lr": 1e-3, "grad_norm": 0.7, "tgt_tok_s": 900.0})
    log.record({"type": "valid", "step": 10, "loss": 2.1, "bleu": 3.2})
    log.close()
    files = list((tmp_path / "tensorboard").glob("events.out.tfevents.*"))
    assert len(files) == 1 and (tmp_path / "metrics.jsonl").read_text().count("\n") == 2
    events = EventAccumulator(str(tmp_path / "tensorboard"))
    events.Reload()
    tags = set(events.Tags()["scalars"])
    assert {"train/loss", "train/lr", "train/grad_norm", "train/tgt_tok_s", "valid/loss", "valid/bleu"} <= tags
    assert [(e.step, e.value) for e in events.Scalars("valid/bleu")] == [(10, pytest.approx(3.2))]


def test_no_event_files_unless_asked(tmp_path):
    log = MetricsLog(tmp_path, enabled=True)
    log.open()
    log.record({"type": "train", "step": 1, "loss": 1.0})
    log.close()
    assert not (tmp_path / "tensorboard").exists()


def test_missing_package_is_one_line_before_training(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)  # import fails as if not installed
    with pytest.raises(ConfigError, match="pip install tensorboard"):
        check_tensorboard(True)
    check_tensorboard(False)
    cfg = tiny_config(tmp_path, train={"tensorboard": True})
    assert train_main([str(cfg)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "train.tensorboard: true needs the tensorboard package" in err
    assert not (tmp_path / "runs" / "tiny" / "checkpoints").exists()
