"""tools.synthetic: a synthetic corpus made by nmt-translate is stored as gzipped parts with a manifest, and
restored byte for byte; a damaged part is refused."""

from __future__ import annotations

import gzip
import json

import pytest

import nmt.partial
import tools.synthetic
from nmt.errors import FileError
from nmt.fileio import sha256_file
from tests.conftest import untrained_run


@pytest.fixture()
def store(tmp_path, monkeypatch):
    monkeypatch.setattr(tools.synthetic, "STORE", tmp_path / "store")
    monkeypatch.setattr(tools.synthetic, "PART_LINES", 3)
    return tmp_path / "store"


def test_a_stored_corpus_is_parts_of_one_gzip_and_restores_to_the_same_bytes(store, tmp_path):
    model = untrained_run(tmp_path, "synthetic", decode={"max_len_a": 0.0, "max_len_b": 5})
    source = tmp_path / "mono.en"
    source.write_text("".join(f"A dog runs {i} times.\n" for i in range(7)), encoding="utf-8")
    output = tmp_path / "mono.bt.de"
    args = ["-c", str(model), "-i", str(source), "-o", str(output), "--beam", "1", "--split-sentences", "off"]
    assert tools.synthetic.main(["make", "bt", "--beside", "nothing", "--", *args]) == 0
    manifest = json.loads((store / "bt" / "manifest.json").read_text(encoding="utf-8"))
    assert [p["lines"] for p in manifest["parts"]] == [3, 3, 1]
    assert manifest["output"] == {"path": str(output), "lines": 7, "sha256": sha256_file(output)}
    assert manifest["input"]["sha256"] == sha256_file(source) and manifest["command"].startswith("nmt-translate -c")
    assert manifest["models"][0]["sha256"] == sha256_file(model / "checkpoints" / "best.pt")
    joined = b"".join((store / "bt" / p["file"]).read_bytes() for p in manifest["parts"])
    assert gzip.decompress(joined) == output.read_bytes()  # the parts concatenated are one gzip file

    assert tools.synthetic.main(["restore", "bt", str(tmp_path / "again.de")]) == 0
    assert (tmp_path / "again.de").read_bytes() == output.read_bytes()
    (store / "bt" / "part-002.gz").write_bytes(gzip.compress(b"other\ntext\nhere\n"))
    with pytest.raises(FileError, match="part-002.gz: its sha256 is not the manifest's"):
        tools.synthetic.restore("bt", str(tmp_path / "third.de"))
    assert not (tmp_path / "third.de").exists()


def test_make_needs_the_models_input_and_output_of_its_translation(capsys):
    with pytest.raises(SystemExit):
        tools.synthetic.parse_args(["make", "bt", "--beside", "x", "--", "-c", "run", "-i", "mono.en"])
    assert "must name -c MODEL, -i FILE and -o FILE" in capsys.readouterr().err
    args = tools.synthetic.parse_args(["make", "bt", "--beside", "x", "--", "-c", "r", "-i", "a", "-o", "b"])
    assert args.translate == ["-c", "r", "-i", "a", "-o", "b"]


def test_a_resumed_translation_is_timed_over_the_lines_it_translated_itself(store, tmp_path, monkeypatch):
    model = untrained_run(tmp_path, "synthetic", decode={"max_len_a": 0.0, "max_len_b": 5})
    source = tmp_path / "mono.en"
    source.write_text("".join(f"A cat sleeps {i} hours.\n" for i in range(7)), encoding="utf-8")
    output = tmp_path / "mono.bt.de"
    args = ["-c", str(model), "-i", str(source), "-o", str(output), "--beam", "1", "--split-sentences", "off",
            "--chunk-lines", "3"]
    commit = nmt.partial.PartialOutputs.commit

    def stopped_at_the_third_chunk(self, read, lines, **extra):
        if len(self.done) == 2:
            raise KeyboardInterrupt
        return commit(self, read, lines, **extra)

    monkeypatch.setattr(nmt.partial.PartialOutputs, "commit", stopped_at_the_third_chunk)
    assert tools.synthetic.main(["make", "bt", "--beside", "nothing", "--", *args]) != 0
    assert not output.exists() and not (store / "bt").exists()
    monkeypatch.setattr(nmt.partial.PartialOutputs, "commit", commit)
    clock = iter([100.0, 102.0])  # the translation takes two seconds
    monkeypatch.setattr(tools.synthetic, "monotonic", lambda: next(clock))
    assert tools.synthetic.main(["make", "bt", "--beside", "nothing", "--", *args]) == 0
    manifest = json.loads((store / "bt" / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["resumed_at_line"] == 7 and manifest["lines_translated"] == 1
    assert manifest["seconds"] == 2.0 and manifest["lines_per_s"] == 0.5  # one line, not the output's seven
    assert manifest["output"]["lines"] == 7


def archived_run(archive, name, sha, command, steps, **fields):
    """results/multi30k/`name`/ as tools.archive writes a run: run.json, and metrics.jsonl up to `steps`."""
    folder = archive / name
    folder.mkdir(parents=True)
    run = {"name": name, "kind": "run", "sha256": sha, "training_command": command, "updates": steps,
           "training_minutes": 12.4, "hardware": "2-core some CPU", "threads": 2, "beside": "nothing else",
           "date": f"2026-01-0{len(list(archive.iterdir()))}", **fields}
    (folder / "run.json").write_text(json.dumps(run), encoding="utf-8")
    records = [{"type": "train", "step": steps - 1}, {"type": "valid", "step": steps}, {"type": "test"}]
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")


def test_the_costs_report_shows_each_corpus_the_trainings_and_the_speeds_of_the_models_that_made_it(store, tmp_path):
    model = untrained_run(tmp_path, "synthetic", decode={"max_len_a": 0.0, "max_len_b": 5})
    source = tmp_path / "mono.en"
    source.write_text("A dog runs.\nTwo cats sleep.\n", encoding="utf-8")
    args = ["-c", str(model), "-i", str(source), "-o", str(tmp_path / "mono.de"), "--sampling", "--beam", "1",
            "--seed", "7", "--split-sentences", "off"]
    assert tools.synthetic.main(["make", "bt", "--beside", "nothing", "--", *args]) == 0
    args = ["-c", str(model), "-i", str(source), "-o", str(tmp_path / "mono.ft.de"), "--split-sentences", "off"]
    assert tools.synthetic.main(["make", "ft", "--beside", "nothing", "--", *args]) == 0  # the model's own search
    made = json.loads((store / "bt" / "manifest.json").read_text(encoding="utf-8"))["models"][0]
    results = tmp_path / "bench"
    results.mkdir()
    rates = {"greedy": (1, 200.0), "beam4": (4, 50.0), "sampling": (1, 150.0)}
    for name, sha in (("decode_mine.json", made["sha256"]), ("decode_other.json", "0" * 64)):
        bench = {"members": [made["checkpoint"]], "checkpoint_sha256": sha, "split": "val", "threads": 2,
                 "length_penalty": 1.0, "machine": {"cpu": "some CPU"},
                 "searches": {k: {"beam": beam, "batched": {"sentences": 10, "sentences_per_s": r}}
                              for k, (beam, r) in rates.items()}}
        (results / name).write_text(json.dumps(bench), encoding="utf-8")
    archive = tmp_path / "archive"
    archive.mkdir()
    archived_run(archive, "reverse_seed1", made["sha256"], "nmt-train reverse.yaml", 900, updates=800,
                 decode={"beam": 4, "length_penalty": 1.5})
    archived_run(archive, "student", "1" * 64, "nmt-train configs/recipe/student.yaml", 300)
    archived_run(archive, "baseline", "2" * 64, "nmt-train configs/baseline.yaml", 300)

    text = tools.synthetic.report(store, results, archive)
    corpus = {line.split("|")[1].strip(): line for line in text.splitlines() if line.startswith("| `")}
    assert "sampling (seed 7)" in corpus["`bt`"] and "| 2 |" in corpus["`bt`"]
    assert "| beam 4 (the model's), length penalty 1.5 (the model's) |" in corpus["`ft`"]  # as archived
    assert "| `bt`, `ft` | 900 | 800 | 12 | 2-core some CPU, 2 threads | nothing else |" in corpus["`reverse_seed1`"]
    assert "| – | 300 | 300 |" in corpus["`student`"] and "`baseline`" not in corpus  # not one of the recipe's
    speeds = [line for line in text.splitlines() if "decode_" in line]
    assert len(speeds) == 1 and "decode_mine.json" in speeds[0]  # the other benchmark decoded another model
    assert "| 200 | 50 (4) | 150 | 0.25 | 0.75 |" in speeds[0]
    assert tools.synthetic.report(tmp_path / "empty", results, archive) == "No synthetic corpus is stored.\n"
