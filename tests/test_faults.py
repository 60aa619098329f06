"""Faults and hostile input: one clear line, a non-zero exit, no traceback, and no file that existed changed."""

from __future__ import annotations

import errno
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from nmt.checkpoint import load_checkpoint
from nmt.cli import average_main, compare_main, evaluate_main, prepare_main, train_main, translate_main
from nmt.errors import FileError
from nmt.fileio import atomic_output, describe_os_error
from nmt.run.folder import RunDir
from nmt.signals import Interrupted, graceful_stop, stop_signal
from tests.conftest import REPO, fails_cleanly, snapshot, tiny_config


@pytest.fixture()
def source(trained_run, tmp_path) -> Path:
    path = tmp_path / "f.de"
    path.write_text("Ein Hund läuft.\nZwei Kinder spielen.\n", encoding="utf-8")
    return path


# ------------------------------------------------------------------ data loss: an output that is an input
@pytest.mark.parametrize("link", ["same", "symlink", "hardlink"])
def test_translate_refuses_to_overwrite_its_input(trained_run, source, tmp_path, capsys, link):
    output = source
    if link == "symlink":
        output = tmp_path / "link.de"
        output.symlink_to(source)
    elif link == "hardlink":
        output = tmp_path / "hard.de"
        os.link(source, output)
    err = fails_cleanly(translate_main, ["-c", str(trained_run), "-i", str(source), "-o", str(output)], capsys,
                        tmp_path, "is the same file as -i/--input")
    assert err.startswith(f"error: -o/--output {output}")


def test_average_and_evaluate_refuse_their_inputs(trained_run, source, tmp_path, capsys):
    ckpts = trained_run / "checkpoints"
    fails_cleanly(average_main, [str(ckpts / "best.pt"), str(ckpts / "last.pt"), "-o", str(ckpts / "last.pt")],
                  capsys, trained_run, "is the same file as input")
    fails_cleanly(evaluate_main, [str(trained_run), "--src", str(source), "--ref", str(source), "--output",
                                  str(source)], capsys, tmp_path, "--output")
    fails_cleanly(translate_main, ["-c", str(trained_run), "-i", str(source), "-o", str(ckpts / "best.pt")],
                  capsys, trained_run, "is the same file as checkpoint")


def test_output_links_are_written_through_and_streams_refused(trained_run, source, tmp_path, capsys):
    target = tmp_path / "target.en"
    target.write_text("old\n", encoding="utf-8")
    link = tmp_path / "out.en"
    link.symlink_to(target)
    assert translate_main(["-c", str(trained_run), "-i", str(source), "-o", str(link)]) == 0
    assert link.is_symlink() and len(target.read_text(encoding="utf-8").splitlines()) == 2
    stream = tmp_path / "stdout"
    stream.symlink_to("/proc/self/fd/1")
    fails_cleanly(translate_main, ["-c", str(trained_run), "-i", str(source), "-o", str(stream)], capsys,
                  tmp_path, "is a stream, not a file")


# ------------------------------------------------------------------ paths that are folders, files or missing
def test_folder_as_output_and_missing_input(trained_run, source, tmp_path, capsys):
    folder = tmp_path / "adir"
    folder.mkdir()
    fails_cleanly(translate_main, ["-c", str(trained_run), "-i", str(source), "-o", str(folder)], capsys, tmp_path,
                  f"-o/--output {folder}: is a folder")
    fails_cleanly(translate_main, ["-c", str(trained_run), "-i", str(tmp_path / "nope.de")], capsys, tmp_path,
                  "-i/--input")
    fails_cleanly(translate_main, ["-c", str(trained_run), "-i", str(source), "--attention-plots", str(source)],
                  capsys, tmp_path, "--attention-plots")
    cfg = tiny_config(tmp_path, run_root=str(source))
    fails_cleanly(train_main, [str(cfg)], capsys, tmp_path, "run folder")
    fails_cleanly(compare_main, [str(trained_run), "--out", str(source)], capsys, tmp_path, "--out")
    fails_cleanly(compare_main, [str(trained_run), "--resamples", "0"], capsys, tmp_path,
                  "--resamples: got '0', allowed: an integer in [100, 1000000]", 2)


# ------------------------------------------------------------------ special files where a file is expected
@pytest.fixture()
def fifo(tmp_path):
    """A named pipe nobody writes to; if a reader blocks on it anyway, a writer comes after 20 s and closes, so a
    regression fails instead of hanging the suite."""
    import threading

    path = tmp_path / "pipe"
    os.mkfifo(path)

    def unblock() -> None:
        try:
            os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
        except OSError:  # no reader waits: nothing to unblock
            pass

    timer = threading.Timer(20.0, unblock)
    timer.start()
    yield path
    timer.cancel()


@pytest.mark.parametrize("role", ["checkpoint", "config", "training source", "--src", "-i/--input"])
def test_a_fifo_where_a_file_is_expected_is_refused_at_once(trained_run, source, tmp_path, capsys, fifo, role):
    started = time.monotonic()
    if role == "checkpoint":
        fails_cleanly(translate_main, ["-c", str(fifo), "-i", str(source)], capsys, tmp_path, "is a named pipe")
    elif role == "config":
        fails_cleanly(train_main, [str(fifo)], capsys, tmp_path, f"{fifo}: is a named pipe (FIFO), not a regular")
    elif role == "training source":
        cfg = tiny_config(tmp_path, data={"dataset": "files", "train_src": str(fifo), "train_tgt": str(source),
                                          "val_src": str(source), "val_tgt": str(source)})
        fails_cleanly(prepare_main, [str(cfg)], capsys, tmp_path, "is a named pipe")
    elif role == "--src":
        fails_cleanly(evaluate_main, [str(trained_run), "--src", str(fifo), "--ref", str(source)], capsys, tmp_path,
                      f"--src {fifo}: is a named pipe")
    else:
        fails_cleanly(translate_main, ["-c", str(trained_run), "-i", str(fifo)], capsys, tmp_path,
                      f"-i/--input {fifo}: is a named pipe")
    assert time.monotonic() - started < 15


def test_a_device_as_checkpoint_or_config_is_refused_without_reading_it(trained_run, source, tmp_path, capsys):
    fails_cleanly(translate_main, ["-c", "/dev/zero", "-i", str(source)], capsys, tmp_path,
                  "/dev/zero: is a character device, not a regular file")
    fails_cleanly(train_main, ["/dev/zero"], capsys, tmp_path, "/dev/zero: is a character device")
    fails_cleanly(translate_main, ["-c", str(trained_run), "-i", "/dev/zero"], capsys, tmp_path,
                  "-i/--input /dev/zero: is a character device")


# ------------------------------------------------------------------ values of the right type that make no sense
@pytest.mark.parametrize("override,key", [("train.lr=-0.001", "train.lr"), ("train.lr=nan", "train.lr"),
                                          ("decode.length_penalty=.nan", "decode.length_penalty")])
def test_config_numbers_out_of_range(tmp_path, capsys, override, key):
    cfg = tiny_config(tmp_path)
    err = fails_cleanly(train_main, [str(cfg), "--set", override], capsys, tmp_path, f"{key}: got ")
    assert "allowed: a number in " in err


@pytest.mark.parametrize("flags,message,status", [
    (["--length-penalty", "nan"], "--length-penalty: got nan, allowed: a number in [0, 10]", 1),
    (["--focus-threshold", "inf"], "--focus-threshold: got 'inf', allowed: a number in [0, 1]", 2),
    (["--chunk-lines", "0"], "--chunk-lines: got '0', allowed: an integer in [1, 1000000]", 2),
])
def test_flags_out_of_range(trained_run, source, tmp_path, capsys, flags, message, status):
    out = tmp_path / "out.en"
    out.write_text("previous\n", encoding="utf-8")
    fails_cleanly(translate_main, ["-c", str(trained_run), "-i", str(source), "-o", str(out), *flags], capsys,
                  tmp_path, message, status)


# ------------------------------------------------------------------ errors inside the libraries, in plain words
@pytest.mark.parametrize("vocab,message", [(100000, "is too large for this corpus"), (10, "is too small")])
def test_sentencepiece_vocabulary_size(tmp_path, capsys, vocab, message):
    cfg = tiny_config(tmp_path, tokenizer={"vocab_size": vocab, "hard_vocab_limit": True})
    err = fails_cleanly(prepare_main, [str(cfg)], capsys, tmp_path, f"tokenizer.vocab_size: {vocab} {message}")
    assert "trainer_interface" not in err


# ------------------------------------------------------------------ OS errors
@pytest.mark.parametrize("code,words", [(errno.ENOSPC, "no space left"), (errno.EFBIG, "file too large"),
                                        (errno.EACCES, "permission denied"), (errno.EROFS, "read-only file system"),
                                        (errno.EISDIR, "it is a folder")])
def test_os_errors_in_plain_words(code, words):
    assert describe_os_error(OSError(code, os.strerror(code), "/some/path")).startswith(f"/some/path: {words}")


def test_failed_write_keeps_the_old_file_and_leaves_no_litter(tmp_path):
    path = tmp_path / "result.txt"
    path.write_text("good\n", encoding="utf-8")
    with pytest.raises(FileError, match=f"{path}: cannot write \\(no space left on the device\\)"):
        with atomic_output(path) as handle:
            handle.write("half")
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    with pytest.raises(ValueError):
        with atomic_output(path) as handle:
            raise ValueError("any failure")
    assert snapshot(tmp_path) == {"result.txt": b"good\n"}


def _child(code: str, cwd: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", code], cwd=cwd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(REPO)})


def test_full_disk_while_writing_a_checkpoint_stops_cleanly(trained_copy, tmp_path):
    cfg, _ = trained_copy  # trained to step 60; the resumed run validates and writes step_70.pt at step 70
    before = snapshot(tmp_path)
    limit = 300_000  # above the tokenizer and logs, below one checkpoint
    code = ("import resource, sys\n"
            f"resource.setrlimit(resource.RLIMIT_FSIZE, ({limit}, {limit}))\n"
            "from nmt.cli import train_main\n"
            f"sys.exit(train_main([{str(cfg)!r}, '--set', 'train.max_steps=70', '--set', 'train.eval_every=10', "
            "'--no-evaluate']))\n")
    child = _child(code, tmp_path)
    _, err = child.communicate(timeout=240)
    assert child.returncode == 1 and "Traceback" not in err
    last = err.strip().splitlines()[-1]
    assert last.startswith("error: ") and "cannot write (file too large" in last and "step_70.pt" in last, err
    assert "training stopped at step 70" in last
    after = snapshot(tmp_path)
    assert not [name for name in after if name.endswith(".tmp")]
    for name, content in before.items():
        if "checkpoints" in name:
            assert after[name] == content, name


# ------------------------------------------------------------------ one training per run folder
def test_second_training_on_a_locked_run_folder_is_refused_and_a_killed_owner_taken_over(tmp_path, capsys):
    cfg = tiny_config(tmp_path, train={"max_steps": 5, "eval_every": 5})
    run = tmp_path / "runs" / "tiny"
    holder = _child("import sys, pathlib\nfrom nmt.run.lock import run_lock\n"
                    f"with run_lock(pathlib.Path({str(run)!r})):\n"
                    "    print('locked', flush=True)\n    sys.stdin.read()\n", tmp_path)
    assert holder.stdout.readline().strip() == "locked"
    err = fails_cleanly(train_main, [str(cfg)], capsys, tmp_path, "another nmt-train is training in this run folder")
    assert f"pid {holder.pid}" in err
    holder.kill()
    holder.wait()
    assert RunDir(run).lock.read_text(encoding="utf-8").startswith(f"pid {holder.pid}")
    assert train_main([str(cfg), "--no-evaluate"]) == 0
    assert "took over the run folder's lock" in capsys.readouterr().err
    assert RunDir(run).lock.read_text(encoding="utf-8") == ""  # released on a clean exit


# ------------------------------------------------------------------ signals
def test_sigterm_finishes_the_update_saves_last_and_resumes(tmp_path, capsys):
    cfg = tiny_config(tmp_path, train={"max_steps": 100000, "eval_every": 100000, "log_every": 1})
    code = f"import sys\nfrom nmt.cli import train_main\nsys.exit(train_main([{str(cfg)!r}]))\n"
    child = _child(code, tmp_path)
    metrics = tmp_path / "runs" / "tiny" / "metrics.jsonl"
    deadline = time.monotonic() + 120
    while not (metrics.exists() and metrics.read_text(encoding="utf-8").count("\n") >= 3):
        assert child.poll() is None and time.monotonic() < deadline, child.stderr.read()
        time.sleep(0.2)
    child.send_signal(signal.SIGTERM)
    _, err = child.communicate(timeout=120)
    assert child.returncode == 128 + signal.SIGTERM and "Traceback" not in err, err
    step = load_checkpoint(tmp_path / "runs" / "tiny" / "checkpoints" / "last.pt")["progress"]["step"]
    assert step >= 3 and f"stopped by SIGTERM at step {step}" in err
    assert train_main([str(cfg), "--set", f"train.max_steps={step + 2}", "--no-evaluate"]) == 0
    assert f"at step {step}" in capsys.readouterr().err  # resumed where the signal stopped it


def test_second_signal_stops_at_once():
    previous = signal.getsignal(signal.SIGINT)
    with graceful_stop():
        assert stop_signal() == 0
        os.kill(os.getpid(), signal.SIGINT)
        assert stop_signal() == signal.SIGINT
        with pytest.raises(Interrupted):
            os.kill(os.getpid(), signal.SIGINT)
            math.factorial(10)  # the handler runs between bytecodes
    assert signal.getsignal(signal.SIGINT) is previous
    assert stop_signal() == 0  # a later training in this process, with no block of its own, is not stopped by it


def test_under_torchrun_the_launchers_copy_of_a_signal_is_not_a_second_one(monkeypatch):
    """Ctrl-C reaches torchrun's workers directly and again through the launcher: that is still one request."""
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "test")
    with graceful_stop():
        os.kill(os.getpid(), signal.SIGINT)
        os.kill(os.getpid(), signal.SIGINT)  # the launcher passing the same Ctrl-C on
        math.factorial(10)
        assert stop_signal() == signal.SIGINT
        with pytest.raises(Interrupted):
            os.kill(os.getpid(), signal.SIGTERM)  # another signal is a real second request
            math.factorial(10)


def test_a_dead_peer_is_said_in_plain_words(tmp_path, monkeypatch):
    import torch.distributed as dist

    from nmt.cli import _peer_gone

    error = RuntimeError("[../gloo/transport/tcp/pair.cc:553] Connection closed by peer [127.0.0.1]:4711")
    assert not _peer_gone(error)  # no process group: not a torchrun worker
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", "29517")
    dist.init_process_group("gloo", rank=0, world_size=1)
    try:
        assert _peer_gone(error) and not _peer_gone(ValueError("closed by peer")) and not _peer_gone(RuntimeError("x"))
    finally:
        dist.destroy_process_group()


def test_running_out_of_device_memory_is_one_line_and_status_1(capsys, monkeypatch):
    import torch

    from nmt.cli import command

    @command
    def runs_out(argv: list[str] | None = None) -> int:
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    monkeypatch.setenv("NMT_TRACEBACK", "1")  # out of memory is a known error, never a traceback
    assert runs_out([]) == 1
    assert capsys.readouterr().err == ("error: out of memory on the device; lower train.batch_tokens (training) or "
                                       "--batch-tokens (decoding)\n")


def test_sigterm_while_translating_leaves_the_old_output_and_the_finished_lines_to_go_on_from(trained_run, tmp_path):
    out = tmp_path / "out.en"
    out.write_text("previous result\n", encoding="utf-8")
    code = f"import sys\nfrom nmt.cli import translate_main\nsys.exit(translate_main(['-c', {str(trained_run)!r}, " \
           f"'-o', {str(out)!r}, '--chunk-lines', '1']))\n"
    child = _child(code, tmp_path)
    child.stdin.write("Ein Hund läuft.\n")
    child.stdin.flush()  # the child translates this line, then waits for more input with its output file open
    record = tmp_path / "out.en.partial.jsonl"
    deadline = time.monotonic() + 120
    while not (record.is_file() and len(record.read_text(encoding="utf-8").splitlines()) == 2):  # a chunk recorded
        assert child.poll() is None and time.monotonic() < deadline, child.stderr.read()
        time.sleep(0.1)
    child.send_signal(signal.SIGTERM)
    _, err = child.communicate(timeout=60)
    assert child.returncode == 128 + signal.SIGTERM and "Traceback" not in err, err
    assert err.strip().splitlines()[-1].startswith("error: stopped by SIGTERM")
    assert "the translations of 1 line are kept in" in err
    files = snapshot(tmp_path)
    assert sorted(files) == ["out.en", "out.en.partial", "out.en.partial.jsonl"]
    assert files["out.en"] == b"previous result\n" and len(files["out.en.partial"].splitlines()) == 1


# ------------------------------------------------------------------ translation and evaluation off the happy path
def test_closed_standard_streams_are_said_in_one_line(trained_run, source):
    for argv, message in ((["-c", str(trained_run)], "standard input is closed"),
                          (["-c", str(trained_run), "-i", str(source)], "standard output is closed")):
        proc = subprocess.run([sys.executable, "-m", "nmt", "translate", *argv], cwd=REPO, capture_output=True,
                              text=True, timeout=120, stdin=subprocess.DEVNULL, pass_fds=(),
                              preexec_fn=lambda fd=0 if "input" in message else 1: os.close(fd))
        assert proc.returncode == 1 and message in proc.stderr and "Traceback" not in proc.stderr, proc.stderr


def test_plots_folder_over_the_output_is_refused_before_work(trained_run, source, tmp_path, capsys):
    out = tmp_path / "out.en"
    fails_cleanly(translate_main, ["-c", str(trained_run), "-i", str(source), "-o", str(out), "--attention-plots",
                                   str(out)], capsys, tmp_path, "is the same file as -o/--output")


def test_evaluating_a_file_leaves_the_runs_split_report_alone(trained_run, tmp_path, capsys):
    """A --src file named like a split gets a report of its own; a loose checkpoint's report goes beside it."""
    shutil.copytree(trained_run, tmp_path / "run")
    run = tmp_path / "run"
    (run / "eval_test.json").write_text("{}\n", encoding="utf-8")
    src, ref = tmp_path / "test.de", tmp_path / "test.en"
    src.write_text("Ein Hund läuft.\n", encoding="utf-8")
    ref.write_text("A dog runs.\n", encoding="utf-8")
    assert evaluate_main([str(run), "--src", str(src), "--ref", str(ref)]) == 0
    assert (run / "eval_test.json").read_text(encoding="utf-8") == "{}\n"
    assert json.loads((run / "eval_file_test.json").read_text())["sentences"] == 1
    assert (run / "file_test.hyp.en").read_text(encoding="utf-8").count("\n") == 1
    loose = tmp_path / "models" / "deep" / "model.pt"
    loose.parent.mkdir(parents=True)
    shutil.copy(run / "checkpoints" / "best.pt", loose)
    assert evaluate_main([str(loose), "--src", str(src), "--ref", str(ref)]) == 0
    assert (loose.parent / "eval_file_test.json").is_file()
    assert not (tmp_path / "models" / "eval_file_test.json").exists()
    capsys.readouterr()


def test_report_and_hypotheses_change_together_or_not_at_all(tmp_path):
    from nmt.evaluation import write_report

    hyp, blocked = tmp_path / "test.hyp.en", tmp_path / "blocker"
    hyp.write_text("old\n", encoding="utf-8")
    blocked.write_text("a file where a folder is needed\n", encoding="utf-8")
    with pytest.raises(FileError):
        write_report({"bleu": 1.0}, ["new"], blocked / "eval.json", hyp)
    assert hyp.read_text(encoding="utf-8") == "old\n" and sorted(p.name for p in tmp_path.iterdir()) == [
        "blocker", "test.hyp.en"]


# ------------------------------------------------------------------ training off the happy path
# Each starts from a copy of the shared trained run (60 updates, validated at 30 and 60, the best 2 kept).


def test_a_fresh_start_never_deletes_an_earlier_runs_checkpoints(trained_copy, capsys):
    cfg, run = trained_copy
    (run / "checkpoints" / "last.pt").unlink()
    fails_cleanly(train_main, [str(cfg), "--no-evaluate"], capsys, run / "checkpoints", "give --restart")
    assert train_main([str(cfg), "--no-evaluate", "--restart", "--set", "train.max_steps=2"]) == 0
    assert load_checkpoint(run / "checkpoints" / "last.pt")["progress"]["step"] == 2
    assert [p.name for p in (run / "checkpoints").glob("step_*.pt")] == ["step_2.pt"]  # step_30/60.pt are gone


def test_a_refused_resume_keeps_the_runs_tokenizer(trained_copy, capsys):
    cfg, run = trained_copy
    before = snapshot(run / "tokenizer")
    assert train_main([str(cfg), "--no-evaluate", "--set", "tokenizer.vocab_size=250"]) == 1
    assert "different vocabulary" in capsys.readouterr().err
    assert snapshot(run / "tokenizer") == before


def test_resuming_in_fp16_a_run_saved_in_fp32(trained_copy):
    cfg, run = trained_copy
    assert train_main([str(cfg), "--no-evaluate", "--set", "train.max_steps=62", "--set", "train.precision=fp16"]) == 0
    assert load_checkpoint(run / "checkpoints" / "last.pt")["progress"]["step"] == 62


def test_a_torn_metrics_line_does_not_block_the_resume(trained_copy):
    cfg, run = trained_copy
    with (run / "metrics.jsonl").open("a", encoding="utf-8") as handle:
        handle.write('{"type": "train", "step": 3')
    assert train_main([str(cfg), "--no-evaluate", "--set", "train.max_steps=62", "--set", "train.log_every=1"]) == 0
    entries = [json.loads(line) for line in (run / "metrics.jsonl").read_text(encoding="utf-8").splitlines()]
    assert max(e["step"] for e in entries) == 62


def test_a_kill_between_checkpoint_files_leaves_a_resumable_run(trained_copy):
    """last.pt lists its best k until the next last.pt is written; a resume removes what a killed run left."""
    cfg, run = trained_copy
    folder = run / "checkpoints"
    listed = [b["path"] for b in load_checkpoint(folder / "last.pt")["progress"]["best"]]
    assert all((folder / name).is_file() for name in listed)
    shutil.copy(folder / listed[0], folder / "step_99.pt")  # written, then killed before last.pt
    (folder / ".last.pt.abc123.tmp").write_bytes(b"cut off")
    (folder / ".mine.pt.k2j3.tmp").write_bytes(b"another program's output in progress")
    assert train_main([str(cfg), "--no-evaluate", "--set", "train.max_steps=62"]) == 0
    assert not (folder / "step_99.pt").exists() and [p.name for p in folder.glob(".*.tmp")] == [".mine.pt.k2j3.tmp"]
    listed = [b["path"] for b in load_checkpoint(folder / "last.pt")["progress"]["best"]]
    assert sorted(p.name for p in folder.glob("step_*.pt")) == sorted(listed)
