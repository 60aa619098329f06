"""Restartable file translation: a killed or failed nmt-translate (or nmt.translate_file) leaves no output, only
OUTPUT.partial, and the same command goes on from its last finished chunk to the output a whole run writes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import nmt
import nmt.stream
from nmt.cli import translate_main
from tests.conftest import fails_cleanly, untrained_run

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py

REPO = Path(__file__).resolve().parents[1]
WORDS = ["Ein Mann fährt Fahrrad.", "Zwei Kinder spielen im Park.", "Eine Frau liest ein Buch.", "Hunde laufen.",
         "Ein Mädchen singt ein Lied."]
LINES = [f"{WORDS[i % len(WORDS)]} {'Sehr ' * (i % 3)}gut." for i in range(23)]
SAMPLING = ["--sampling", "--beam", "1", "--seed", "3", "--chunk-lines", "4"]

# Commits two chunks, writes the third chunk's lines to the file, then dies before recording it.
_KILLER = """
import os, signal, sys
import nmt.partial
from nmt.cli import translate_main

commit = nmt.partial.PartialOutputs.commit

def dying_commit(self, read, lines, **extra):
    if len(self.done) == 2:
        for handle in self.handles:
            handle.flush()
        os.kill(os.getpid(), signal.SIGKILL)
    return commit(self, read, lines, **extra)

nmt.partial.PartialOutputs.commit = dying_commit
sys.exit(translate_main(sys.argv[1:]))
"""


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    return untrained_run(tmp_path_factory.mktemp("resume"), "resume", decode={"max_len_a": 0.0, "max_len_b": 6})


def _write(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _failing_at_line_14(folder: Path, model: Path, out: Path) -> Path:
    """The sample lines with line 14 not UTF-8, translated to `out` until that line fails; the good file."""
    good = _write(folder / "good.de", LINES)
    bad = folder / "bad.de"
    bad.write_bytes(good.read_bytes().replace(LINES[13].encode(), b"\xff\xfe"))
    assert translate_main(["-c", str(model), "-i", str(bad), "-o", str(out), *SAMPLING]) == 1
    return good


def _translated_lines(monkeypatch) -> list[int]:
    """Records the first line number of every chunk the model translates."""
    seen: list[int] = []
    chunk = nmt.stream.Stream.translate_chunk

    def counting(self, numbered, *args, **kwargs):
        seen.append(numbered[0][0])
        return chunk(self, numbered, *args, **kwargs)

    monkeypatch.setattr(nmt.stream.Stream, "translate_chunk", counting)
    return seen


def test_a_killed_run_leaves_no_output_and_the_same_command_finishes_it_as_a_whole_run(model, tmp_path, capsys,
                                                                                    monkeypatch) -> None:
    src = _write(tmp_path / "in.de", LINES)
    whole, killed = tmp_path / "whole.en", tmp_path / "killed.en"
    assert translate_main(["-c", str(model), "-i", str(src), "-o", str(whole), *SAMPLING]) == 0
    argv = ["-c", str(model), "-i", str(src), "-o", str(killed), *SAMPLING]
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-c", _KILLER, *argv], env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == -signal.SIGKILL, done.stderr[-2000:]
    partial = tmp_path / "killed.en.partial"
    assert not killed.exists() and len(partial.read_text(encoding="utf-8").splitlines()) == 12  # a chunk too many
    capsys.readouterr()

    seen = _translated_lines(monkeypatch)
    assert translate_main(argv) == 0
    assert "resuming at line 9" in capsys.readouterr().err
    assert seen == [9, 13, 17, 21]  # the two recorded chunks are not translated again
    assert killed.read_text(encoding="utf-8") == whole.read_text(encoding="utf-8")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.de", "killed.en", "whole.en"]


def test_a_failed_run_keeps_its_finished_chunks_and_redoes_only_what_changed(model, tmp_path, capsys,
                                                                            monkeypatch) -> None:
    out = tmp_path / "out.en"
    _failing_at_line_14(tmp_path, model, out)
    err = capsys.readouterr().err
    assert "line 14 is not valid UTF-8" in err and "the translations of 12 lines are kept in" in err
    assert not out.exists()

    # The fixed file: the chunk that failed and those after it are translated; the output is the whole run's.
    changed = [*LINES[:5], "Ein ganz anderer Satz.", *LINES[6:]]  # and a line of the second chunk changed too
    fixed = _write(tmp_path / "bad.de", changed)
    seen = _translated_lines(monkeypatch)
    assert translate_main(["-c", str(model), "-i", str(fixed), "-o", str(out), *SAMPLING]) == 0
    assert seen == [5, 9, 13, 17, 21]
    monkeypatch.undo()
    whole = tmp_path / "whole.en"
    assert translate_main(["-c", str(model), "-i", str(fixed), "-o", str(whole), *SAMPLING]) == 0
    assert out.read_text(encoding="utf-8") == whole.read_text(encoding="utf-8")


def test_other_settings_start_over_and_a_failure_before_any_chunk_leaves_nothing(model, tmp_path, capsys,
                                                                                 monkeypatch) -> None:
    out = tmp_path / "out.en"
    src = _failing_at_line_14(tmp_path, model, out)
    bad = tmp_path / "bad.de"
    seen = _translated_lines(monkeypatch)
    capsys.readouterr()
    assert translate_main(["-c", str(model), "-i", str(src), "-o", str(out), *SAMPLING, "--seed", "4"]) == 0
    assert "was written by another model, settings or input; starting over" in capsys.readouterr().err
    assert seen == [1, 5, 9, 13, 17, 21]
    monkeypatch.undo()
    fails_cleanly(translate_main, ["-c", str(model), "-i", str(bad), "-o", str(tmp_path / "new.en"),
                                   "--chunk-lines", "40"], capsys, tmp_path, "line 14 is not valid UTF-8")


def test_chunks_draw_unrelated_samples_and_the_python_api_writes_what_the_command_does(model, tmp_path) -> None:
    src = _write(tmp_path / "same.de", [LINES[0]] * 12)
    assert translate_main(["-c", str(model), "-i", str(src), "-o", str(tmp_path / "cli.en"), "--sampling",
                           "--beam", "1", "--seed", "3", "--chunk-lines", "1"]) == 0
    sampled = (tmp_path / "cli.en").read_text(encoding="utf-8").splitlines()
    assert len(set(sampled)) > 1  # one line in chunks of one: each chunk is seeded by its place, not alike
    count = nmt.translate_file(model, src, tmp_path / "api.en", chunk_lines=1, sampling=True, beam=1, seed=3,
                               device="cpu")
    assert count == 12 and (tmp_path / "api.en").read_text(encoding="utf-8") == "\n".join(sampled) + "\n"
    translator = nmt.load(model, device="cpu")
    assert nmt.translate_file(translator, src, tmp_path / "greedy.en", beam=1, split_sentences="off") == 12
    greedy = translator.translate([LINES[0]], beam=1, split_sentences="off")
    assert (tmp_path / "greedy.en").read_text(encoding="utf-8").splitlines() == greedy * 12
    with pytest.raises(nmt.ConfigError, match="chunk_lines: got 0"):
        nmt.translate_file(translator, src, tmp_path / "x.en", chunk_lines=0)
    with pytest.raises(nmt.FileError, match="output"):
        nmt.translate_file(translator, src, src)


def test_a_changed_constraints_line_redoes_its_chunk_and_a_longer_constraints_file_keeps_nothing(
        model, tmp_path, capsys, monkeypatch) -> None:
    src = _write(tmp_path / "in.de", LINES[:8])
    terms = _write(tmp_path / "terms.txt", [""] * 8)
    out = tmp_path / "out.en"
    argv = ["-c", str(model), "-i", str(src), "-o", str(out), "--chunk-lines", "4", "--split-sentences", "off",
            "--constraints", str(terms)]
    assert translate_main(argv[:-2] + ["--constraints", str(_write(tmp_path / "long.txt", [""] * 9))]) == 1
    assert "more lines than" in capsys.readouterr().err and not list(tmp_path.glob("out.en*"))  # nothing kept
    # Stopped after its first chunk; then a constraint of that chunk changes: it is translated again.
    stopped = nmt.stream.Stream.translate_chunk

    def stop_at_second(self, numbered, *args, **kwargs):
        if numbered[0][0] == 5:
            raise KeyboardInterrupt
        return stopped(self, numbered, *args, **kwargs)

    monkeypatch.setattr(nmt.stream.Stream, "translate_chunk", stop_at_second)
    assert translate_main(argv) == 130
    monkeypatch.undo()
    _write(terms, ["", "man"] + [""] * 6)
    seen = _translated_lines(monkeypatch)
    assert translate_main(argv) == 0
    assert seen == [1, 5] and len(out.read_text(encoding="utf-8").splitlines()) == 8


def test_a_second_process_cannot_write_an_output_another_is_writing(model, tmp_path, capsys) -> None:
    src = _write(tmp_path / "in.de", LINES[:8])
    out = tmp_path / "out.en"
    argv = ["-c", str(model), "-i", str(src), "-o", str(out), "--chunk-lines", "4", "--split-sentences", "off"]
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys; from pathlib import Path; from nmt.fileio import take_lock; "
         "handle, _ = take_lock(Path(sys.argv[1])); print('held', flush=True); sys.stdin.read()",
         str(tmp_path / "out.en.partial.lock")],
        env={**os.environ, "PYTHONPATH": str(REPO)}, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "held\n"
        (tmp_path / "out.en.partial").write_text("the other process's line\n", encoding="utf-8")
        err = fails_cleanly(translate_main, argv, capsys, tmp_path, "another process is translating into this output")
        assert f"pid {holder.pid} on host" in err
        with pytest.raises(nmt.FileError, match="another process"):
            nmt.translate_file(model, src, out, chunk_lines=4)
    finally:
        holder.communicate("", timeout=60)
    (tmp_path / "out.en.partial").unlink()
    assert translate_main(argv) == 0 and len(out.read_text(encoding="utf-8").splitlines()) == 8
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.de", "out.en"]  # the lock file goes with the run
