"""train.tensorboard: the metrics log's scalars as TensorBoard event files, and the message when it is missing."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from nmt.cli import train_main
from nmt.errors import ConfigError
from nmt.run.folder import read_metrics
from nmt.run.log import MetricsLog, check_tensorboard
from tests.conftest import REPO, tiny_config


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


def test_example_translations_are_tensorboard_text_also_after_a_reopen(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    examples = [{"source": "Ein Hund | läuft.", "reference": "A dog runs.", "hypothesis": "a a a"}]
    log = MetricsLog(tmp_path, enabled=True, tensorboard=True)
    log.open()
    log.record({"type": "valid", "step": 10, "loss": 2.1, "examples": examples})
    log.close()
    log.open()  # a resume writes the events anew from metrics.jsonl, the examples included
    log.close()
    events = EventAccumulator(str(tmp_path / "tensorboard"))
    events.Reload()
    (text,) = events.Tensors("examples/text_summary")
    table = text.tensor_proto.string_val[0].decode()
    assert text.step == 10 and "| Ein Hund \\| läuft. | A dog runs. | a a a |" in table


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


def _scalars(folder) -> dict[str, list[tuple[int, float]]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(folder / "tensorboard"))
    events.Reload()
    return {tag: [(e.step, e.value) for e in events.Scalars(tag)] for tag in events.Tags()["scalars"]}


def _from_metrics(folder) -> dict[str, list[tuple[int, float]]]:
    tags: dict[str, list[tuple[int, float]]] = {}
    for entry in read_metrics(folder / "metrics.jsonl"):
        for key, value in entry.items():
            if key not in ("type", "step") and isinstance(value, (int, float)):  # as MetricsLog writes scalars
                tags.setdefault(f"{entry['type']}/{key}", []).append((entry["step"], pytest.approx(value, rel=1e-6)))
    return tags


def _train_entry(step: int) -> dict:
    return {"type": "train", "step": step, "loss": 10.0 / step, "lr": 1e-3 * step}


def test_after_a_resume_tensorboard_shows_what_metrics_jsonl_shows(tmp_path):
    killed = MetricsLog(tmp_path, enabled=True, tensorboard=True)
    killed.open()
    for step in range(5, 90, 5):  # the killed run logged up to step 85; its last checkpoint was at step 60
        killed.record(_train_entry(step))
        if step % 20 == 0:
            killed.record({"type": "valid", "step": step, "loss": 5.0 / step, "bleu": step / 10})
    killed.close()
    resumed = MetricsLog(tmp_path, enabled=True, tensorboard=True)
    resumed.truncate(60)
    resumed.open()
    for step in range(65, 105, 5):  # the steps after 60 again, with other figures, and on to 100
        resumed.record({**_train_entry(step), "loss": 20.0 / step})
    resumed.close()
    shown = _scalars(tmp_path)
    assert shown == _from_metrics(tmp_path)
    assert [step for step, _ in shown["train/loss"]] == list(range(5, 105, 5))
    assert [step for step, _ in shown["valid/bleu"]] == [20, 40, 60]


def test_a_resume_shows_the_records_tensorboard_never_received(tmp_path):
    unwritten = MetricsLog(tmp_path, enabled=True)  # as if its event writer had been killed before a flush
    for step in range(5, 45, 5):
        unwritten.record(_train_entry(step))
    resumed = MetricsLog(tmp_path, enabled=True, tensorboard=True)
    resumed.truncate(40)
    resumed.open()
    resumed.record(_train_entry(45))
    resumed.close()
    assert _scalars(tmp_path) == _from_metrics(tmp_path)
    assert [step for step, _ in _scalars(tmp_path)["train/loss"]] == list(range(5, 50, 5))


@pytest.mark.slow
def test_a_run_killed_and_resumed_shows_in_tensorboard_what_its_metrics_log_shows(tmp_path):
    cfg = tiny_config(tmp_path, train={"tensorboard": True, "max_steps": 40, "eval_every": 10, "log_every": 2},
                      decode={"length_penalty": 1.0})
    metrics = tmp_path / "runs" / "tiny" / "metrics.jsonl"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    process = subprocess.Popen([sys.executable, "-c", "import sys; from nmt.cli import train_main; "
                                "sys.exit(train_main(sys.argv[1:]))", str(cfg)], env=env, cwd=REPO,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 300
        while not any(entry["step"] >= 16 for entry in read_metrics(metrics)):  # past the checkpoint at step 10
            assert process.poll() is None and time.monotonic() < deadline, "the run ended before it could be killed"
            time.sleep(0.05)
        process.send_signal(signal.SIGKILL)
    finally:
        process.kill()
        process.wait()
    assert train_main([str(cfg), "--no-evaluate"]) == 0
    shown, logged = _scalars(metrics.parent), _from_metrics(metrics.parent)
    assert shown == logged and len(shown["train/loss"]) == 20
