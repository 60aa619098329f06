"""Faults and hostile input: one clear line, a non-zero exit, no traceback, and no file that existed changed."""

from __future__ import annotations

import errno
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from nmt.checkpoint import load_checkpoint
from nmt.cli import average_main, compare_main, evaluate_main, prepare_main, train_main, translate_main
from nmt.fileio import FileError, atomic_output, describe_os_error
from nmt.runlock import LOCK_NAME
from nmt.signals import Interrupted, graceful_stop, stop_signal
from tests.conftest import REPO, tiny_config


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every file under `folder` with its content."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def fails_cleanly(main, argv: list[str], capsys, folder: Path, message: str, status: int = 1) -> str:
    """Run a command that must fail: its exit status, one line naming the problem, no traceback, nothing changed."""
    before = snapshot(folder)
    assert main(argv) == status
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err and len(err.splitlines()) == 1 and message in err, err
    assert snapshot(folder) == before
    return err


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
                  "--resamples: got '0', allowed: an integer >= 1", 2)


# ------------------------------------------------------------------ values of the right type that make no sense
@pytest.mark.parametrize("override,key", [("train.lr=-0.001", "train.lr"), ("train.lr=nan", "train.lr"),
                                          ("decode.length_penalty=.nan", "decode.length_penalty")])
def test_config_numbers_out_of_range(tmp_path, capsys, override, key):
    cfg = tiny_config(tmp_path)
    err = fails_cleanly(train_main, [str(cfg), "--set", override], capsys, tmp_path, f"{key}: got ")
    assert "allowed: a finite number" in err


@pytest.mark.parametrize("flags,message,status", [
    (["--length-penalty", "nan"], "--length-penalty: got nan, allowed: a finite number >= 0", 1),
    (["--focus-threshold", "inf"], "--focus-threshold: got 'inf', allowed: a number in [0, 1]", 2),
    (["--chunk-lines", "0"], "--chunk-lines: got '0', allowed: an integer >= 1", 2),
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


def test_full_disk_while_writing_a_checkpoint_stops_cleanly(tmp_path):
    cfg = tiny_config(tmp_path, train={"max_steps": 10, "eval_every": 10})
    assert train_main([str(cfg), "--no-evaluate"]) == 0
    before = snapshot(tmp_path)
    limit = 300_000  # above the tokenizer and logs, below one checkpoint
    code = ("import resource, sys\n"
            f"resource.setrlimit(resource.RLIMIT_FSIZE, ({limit}, {limit}))\n"
            "from nmt.cli import train_main\n"
            f"sys.exit(train_main([{str(cfg)!r}, '--set', 'train.max_steps=20', '--no-evaluate']))\n")
    child = _child(code, tmp_path)
    _, err = child.communicate(timeout=240)
    assert child.returncode == 1 and "Traceback" not in err
    last = err.strip().splitlines()[-1]
    assert last.startswith("error: ") and "cannot write (file too large" in last and "step_20.pt" in last, err
    assert "training stopped at step 20" in last
    after = snapshot(tmp_path)
    assert not [name for name in after if name.endswith(".tmp")]
    for name, content in before.items():
        if "checkpoints" in name:
            assert after[name] == content, name


# ------------------------------------------------------------------ one training per run folder
def test_second_training_on_a_locked_run_folder_is_refused_and_a_killed_owner_taken_over(tmp_path, capsys):
    cfg = tiny_config(tmp_path, train={"max_steps": 5, "eval_every": 5})
    run = tmp_path / "runs" / "tiny"
    holder = _child("import sys, pathlib\nfrom nmt.runlock import run_lock\n"
                    f"with run_lock(pathlib.Path({str(run)!r})):\n"
                    "    print('locked', flush=True)\n    sys.stdin.read()\n", tmp_path)
    assert holder.stdout.readline().strip() == "locked"
    err = fails_cleanly(train_main, [str(cfg)], capsys, tmp_path, "another nmt-train is training in this run folder")
    assert f"pid {holder.pid}" in err
    holder.kill()
    holder.wait()
    assert (run / LOCK_NAME).read_text(encoding="utf-8").startswith(f"pid {holder.pid}")
    assert train_main([str(cfg), "--no-evaluate"]) == 0
    assert "took over the run folder's lock" in capsys.readouterr().err
    assert (run / LOCK_NAME).read_text(encoding="utf-8") == ""  # released on a clean exit


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


def test_sigterm_while_translating_leaves_the_old_output_and_no_litter(trained_run, tmp_path):
    out = tmp_path / "out.en"
    out.write_text("previous result\n", encoding="utf-8")
    code = f"import sys\nfrom nmt.cli import translate_main\nsys.exit(translate_main(['-c', {str(trained_run)!r}, " \
           f"'-o', {str(out)!r}, '--chunk-lines', '1']))\n"
    child = _child(code, tmp_path)
    child.stdin.write("Ein Hund läuft.\n")
    child.stdin.flush()  # the child translates this line, then waits for more input with its output file open
    deadline = time.monotonic() + 120
    while not list(tmp_path.glob(".out.en.*.tmp")):
        assert child.poll() is None and time.monotonic() < deadline, child.stderr.read()
        time.sleep(0.1)
    child.send_signal(signal.SIGTERM)
    _, err = child.communicate(timeout=60)
    assert child.returncode == 128 + signal.SIGTERM and "Traceback" not in err, err
    assert err.strip().splitlines()[-1].startswith("error: stopped by SIGTERM")
    assert snapshot(tmp_path) == {"out.en": b"previous result\n"}
