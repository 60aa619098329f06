"""End to end through the console commands: prepare, translate, evaluate, average, and their bad inputs."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys

import pytest
import tomllib

from nmt.cli import average_main, compare_main, evaluate_main, prepare_main, train_main, translate_main
from tests.conftest import REPO, fails_cleanly, tiny_config

HELP_CHECK = """
import contextlib, importlib, io, json, sys
import nmt.cli
seen = {"import nmt.cli": [0, "torch" in sys.modules]}
for name, target in json.loads(sys.argv[1]):
    module, function = target.split(":")
    with contextlib.redirect_stdout(io.StringIO()) as out:
        status = getattr(importlib.import_module(module), function)(["--help"])
    seen[name] = [status if out.getvalue().startswith("usage: " + name) else "no usage", "torch" in sys.modules]
print(json.dumps(seen))
"""


def test_every_console_script_prints_its_help_and_neither_it_nor_importing_nmt_cli_loads_torch():
    """One fresh interpreter: `import nmt.cli`, then each script of pyproject.toml with --help: every help exits 0
    with its usage, and none loads torch."""
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]["scripts"]
    done = subprocess.run([sys.executable, "-c", HELP_CHECK, json.dumps(sorted(scripts.items()))],
                          capture_output=True, text=True, cwd=REPO, check=True)
    seen = json.loads(done.stdout)  # name -> [exit status, torch loaded by then]
    assert seen == {"import nmt.cli": [0, False], **{name: [0, False] for name in scripts}}, seen


def test_prepare_prints_counts(tmp_path, capsys):
    assert prepare_main([str(tiny_config(tmp_path))]) == 0
    out = capsys.readouterr().out
    assert "train" in out and "700" in out and "padding" in out


@pytest.mark.parametrize("problem,message", [
    ("missing", "not found"),
    ("mismatch", "line"),
    ("utf8", "UTF-8"),
    ("empty", "empty"),
])
def test_prepare_bad_data_is_one_clear_line(tmp_path, capsys, problem, message):
    files = {k: tmp_path / f"{k}.txt" for k in ("ts", "tt", "vs", "vt")}
    for path in files.values():
        path.write_text("ein Haus\nzwei Häuser\n", encoding="utf-8")
    if problem == "missing":
        files["ts"].unlink()
    elif problem == "mismatch":
        files["tt"].write_text("a house\n", encoding="utf-8")
    elif problem == "utf8":
        files["ts"].write_bytes(b"gut\n\xff\xfe kaputt\n")
    elif problem == "empty":
        files["ts"].write_text("\n\n", encoding="utf-8")
        files["tt"].write_text("\n\n", encoding="utf-8")
    cfg = tiny_config(tmp_path, data={"dataset": "files", "train_src": str(files["ts"]), "train_tgt": str(files["tt"]),
                                      "val_src": str(files["vs"]), "val_tgt": str(files["vt"])})
    assert prepare_main([str(cfg)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:") and message in err[0], err


def test_unknown_key_and_wrong_type_exit_cleanly(tmp_path, capsys):
    cfg = tiny_config(tmp_path, train={"max_step": 3})
    assert train_main([str(cfg)]) == 1
    err = capsys.readouterr().err
    assert "train.max_step" in err and "max_steps" in err and "Traceback" not in err
    assert train_main([str(tiny_config(tmp_path)), "--set", "train.lr=fast"]) == 1
    assert "train.lr: expected float" in capsys.readouterr().err


def test_run_folder_is_complete(trained_run):
    for name in ("config.yaml", "metrics.jsonl", "train.log", "eval_test.json", "test.hyp.en",
                 "tokenizer/spm.model", "checkpoints/last.pt", "checkpoints/best.pt"):
        assert (trained_run / name).exists(), name
    report = json.loads((trained_run / "eval_test.json").read_text())
    assert {"bleu", "bleu_lc", "chrf", "ter", "bleu_signature"} <= set(report["scores"])
    assert report["final_model"] == {"checkpoint": "best.pt"}  # train.average_last is 0
    assert report["sentences"] == 80 and len((trained_run / "test.hyp.en").read_text().splitlines()) == 80


def test_translate_keeps_lines_and_order(trained_run, tmp_path, capsys):
    lines = ["Ein Hund läuft.", "", "Eine Frau liest ein Buch im Park.", "", "", "Ein Mann fährt Fahrrad."]
    src = tmp_path / "in.de"
    src.write_text("\n".join(lines) + "\n", encoding="utf-8")
    out = tmp_path / "out.en"
    assert translate_main(["-c", str(trained_run), "-i", str(src), "-o", str(out), "--chunk-lines", "2"]) == 0
    got = out.read_text(encoding="utf-8").split("\n")[:-1]
    assert len(got) == len(lines)
    assert [bool(g) for g in got] == [bool(x) for x in lines]
    # The same sentences alone give the same translations: chunking and batching change nothing.
    single = tmp_path / "single.de"
    single.write_text(lines[2] + "\n", encoding="utf-8")
    assert translate_main(["-c", str(trained_run), "-i", str(single), "-o", str(tmp_path / "s.en")]) == 0
    assert (tmp_path / "s.en").read_text(encoding="utf-8").strip() == got[2]


def test_translate_nbest_scores_and_plots(trained_run, tmp_path):
    src = tmp_path / "in.de"
    src.write_text("Ein Hund läuft.\nZwei Kinder spielen.\n", encoding="utf-8")
    out = tmp_path / "out.txt"
    assert translate_main(["-c", str(trained_run), "-i", str(src), "-o", str(out), "--n-best", "2", "--beam", "3",
                           "--attention-plots", str(tmp_path / "plots")]) == 0
    rows = out.read_text(encoding="utf-8").splitlines()
    assert len(rows) == 4 and rows[0].startswith("0 ||| ") and rows[2].startswith("1 ||| ")
    pngs = sorted((tmp_path / "plots").glob("*.png"))
    assert len(pngs) == 2 and pngs[0].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert translate_main(["-c", str(trained_run), "-i", str(src), "-o", str(out), "--scores"]) == 0
    assert all("\t" in row for row in out.read_text(encoding="utf-8").splitlines())


def test_translate_bad_inputs(trained_run, tmp_path, capsys):
    bad = tmp_path / "bad.de"
    bad.write_bytes(b"gut\n\xc3\x28 kaputt\n")
    out = tmp_path / "out.en"
    out.write_text("previous result\n", encoding="utf-8")
    assert translate_main(["-c", str(trained_run), "-i", str(bad), "-o", str(out)]) == 1
    assert "line 2 is not valid UTF-8" in capsys.readouterr().err
    assert out.read_text(encoding="utf-8") == "previous result\n"  # untouched: outputs are atomic
    assert translate_main(["-c", str(tmp_path / "nope"), "-i", str(bad)]) == 1
    assert "checkpoint not found" in capsys.readouterr().err
    corrupt = tmp_path / "corrupt.pt"
    corrupt.write_bytes((trained_run / "checkpoints" / "best.pt").read_bytes()[:5000])
    assert translate_main(["-c", str(corrupt), "-i", str(bad)]) == 1
    assert "corrupt" in capsys.readouterr().err


HTML = """<!DOCTYPE html>
<html lang="de"><body>
<p class="a" title="Hund &amp; Katze">Ein <b>großer</b> Hund läuft.
Zwei Kinder spielen im Park.</p>
<pre>Ein Mann &lt;bleibt&gt; hier.</pre>
<p>Der Code <code>x = 1</code> und <span translate="no">Ein Hund&nbsp;läuft</span> bleiben.</p>
<!-- Ein Kommentar -->
</body></html>
"""


def test_translate_format_html_keeps_markup_and_translates_as_translate_markup_does(trained_run, tmp_path):
    import nmt

    src, out = tmp_path / "page.html", tmp_path / "page.en.html"
    src.write_text(HTML, encoding="utf-8")
    translator = nmt.load(trained_run)
    for flags, mode in (([], "nonewlines"), (["--split-sentences", "off"], "off")):
        assert translate_main(["-c", str(trained_run), "-i", str(src), "-o", str(out), "--format", "html",
                               *flags]) == 0
        got = out.read_text(encoding="utf-8")
        assert got == translator.translate_markup(HTML, "html", split_sentences=mode)
    for kept in ('<!DOCTYPE html>\n<html lang="de"><body>\n<p class="a" title="Hund &amp; Katze">',
                 "<pre>Ein Mann &lt;bleibt&gt; hier.</pre>", "<code>x = 1</code>",
                 '<span translate="no">Ein Hund&nbsp;läuft</span>', "<!-- Ein Kommentar -->\n</body></html>\n"):
        assert kept in got
    assert got.index("<b>") < got.index("</b>") < got.index("</p>") and got.count("<b>") == 1
    assert "läuft." not in got and "Park" not in got  # the text outside the kept elements was translated


def test_translate_format_xml_refuses_a_malformed_document_in_one_line(trained_run, tmp_path, capsys):
    src, out = tmp_path / "doc.xml", tmp_path / "doc.en.xml"
    src.write_text("<doc><p>Ein <b>Hund</p></doc>\n", encoding="utf-8")
    err = fails_cleanly(translate_main, ["-c", str(trained_run), "-i", str(src), "-o", str(out), "--format", "xml"],
                        capsys, tmp_path, "not well-formed XML at line 1")
    assert str(src) in err and not out.exists()


@pytest.mark.parametrize(("flags", "named"), [(["--format", "html", "--scores"], "--scores"),
                                              (["--format", "xml", "--n-best", "2"], "--n-best"),
                                              (["--ignore-tags", "x"], "--ignore-tags")])
def test_translate_format_refuses_flags_of_the_other_format(trained_run, tmp_path, capsys, flags, named):
    src = tmp_path / "in.html"
    src.write_text("<p>Ein Hund.</p>", encoding="utf-8")
    fails_cleanly(translate_main, ["-c", str(trained_run), "-i", str(src), *flags], capsys, tmp_path, named, status=2)


def test_translate_truncates_long_lines_with_warning(trained_run, tmp_path, capsys):
    src = tmp_path / "long.de"
    src.write_text("kurz\n" + " ".join(["Hund"] * 50) + "\n", encoding="utf-8")
    assert translate_main(["-c", str(trained_run), "-i", str(src), "-o", str(tmp_path / "o"),
                           "--max-source-tokens", "10"]) == 0
    assert "line 2" in capsys.readouterr().err


def test_evaluate_files_and_average(trained_run, tmp_path, capsys):
    src, ref = tmp_path / "s.de.gz", tmp_path / "r.en"
    with gzip.open(src, "wt", encoding="utf-8") as handle:
        handle.write("Ein Hund läuft.\nEin Mann fährt Fahrrad.\n")
    ref.write_text("A dog runs.\nA man rides a bike.\n", encoding="utf-8")
    out = tmp_path / "report.json"
    assert evaluate_main([str(trained_run), "--src", str(src), "--ref", str(ref), "--output", str(out),
                          "--beam", "1"]) == 0
    assert json.loads(out.read_text())["sentences"] == 2
    assert "BLEU" in capsys.readouterr().out
    avg = tmp_path / "avg.pt"
    assert average_main([str(trained_run), "--best", "2", "-o", str(avg)]) == 0
    assert translate_main(["-c", str(avg), "-i", str(tmp_path / "r.en"), "-o", str(tmp_path / "x")]) == 0


def test_translate_stdin_to_stdout(trained_run, monkeypatch, capsys):
    import io
    import sys

    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO("Ein Hund läuft.\n\nZwei Kinder.\n".encode())))
    assert translate_main(["-c", str(trained_run)]) == 0
    lines = capsys.readouterr().out.split("\n")[:-1]
    assert len(lines) == 3 and lines[0] and not lines[1] and lines[2]


@pytest.mark.parametrize("command,flag", [(translate_main, "--chunk-lines"), (translate_main, "--plot-count"),
                                          (translate_main, "--focus-threshold"), (average_main, "--best"),
                                          (compare_main, "--diag-sentences"), (compare_main, "--heatmaps"),
                                          (compare_main, "--resamples")])
def test_number_flags_refuse_huge_and_non_finite_values(capsys, command, flag):
    for value in (str(10**30), "1e300", "inf", "nan"):
        assert command([flag, value]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and f"{flag}: got '{value}', allowed:" in err


def test_a_decoding_flag_beyond_its_range_is_one_line_before_any_work(trained_run, capsys):
    assert translate_main(["-c", str(trained_run), "--length-penalty", "1e300"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--length-penalty: got 1e+300, allowed: a number in [0, 10]" in err


def test_an_error_line_is_cut_to_a_marked_excerpt(tmp_path, capsys):
    deep = tmp_path.joinpath(*["a" * 200] * 15) / "train.de"  # 3,000 characters: a path Linux takes
    cfg = tiny_config(tmp_path, data={"dataset": "files", "train_src": str(deep), "train_tgt": str(deep),
                                      "val_src": str(deep), "val_tgt": str(deep)})
    assert prepare_main([str(cfg)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and len(err) < 1100 and "characters in all)" in err and "a" * 200 in err
