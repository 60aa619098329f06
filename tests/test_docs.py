"""The docs run as written: the Python page's code blocks, in order, in one fresh interpreter (no console command
involved), on the embedded sample, with root logging and signal handlers checked around it (its `py` blocks, which
train on Multi30k, are only compiled); and the own-corpus walkthrough of data.md and training.md, its shell blocks
in order, on files cut from the sample."""

from __future__ import annotations

import importlib
import re
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO

PAGE = REPO / "docs" / "python.md"

# Run after the page's own blocks: what the page promises, checked in the same interpreter.
PROMISES = '''
import logging, signal, sys
assert isinstance(run, nmt.Run) and isinstance(child, nmt.Run)
assert isinstance(translator.translate(["Ein Hund läuft."]), list)
assert child.report["parent"]["sha256"] and report["split"] == "val"
assert nmt.load("exports/imported.pt", device="cpu", beam=1).translate(lines) == translator.translate(lines, beam=1)
assert "torch" in sys.modules
print("PROMISES KEPT")
'''
# Before the page: nmt and its config import without torch, and the caller's logging and handlers are noted.
BEFORE = '''
import logging, signal, sys
import nmt, nmt.config
assert "torch" not in sys.modules, "import nmt must not import torch"
state = lambda: (list(logging.getLogger().handlers), logging.getLogger().level, logging.getLogger("nmt").handlers[:],
                 signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM))
before = state()
'''
AFTER = '''
assert state() == before, "the API changed the caller's logging or signal handlers"
'''


def python_blocks(text: str) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", text, flags=re.S | re.M)


def test_the_python_page_runs_as_written_in_a_fresh_interpreter(tmp_path):
    blocks = python_blocks(PAGE.read_text(encoding="utf-8"))
    assert len(blocks) >= 5, "the page lost its examples"
    script = tmp_path / "page.py"
    script.write_text("\n".join([BEFORE, *blocks, AFTER, PROMISES]), encoding="utf-8")
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=600,
                          env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1",
                               "HOME": str(tmp_path), "HF_HUB_OFFLINE": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
    assert "PROMISES KEPT" in done.stdout and "did you mean 'max_steps'" in done.stdout
    assert not (REPO / "runs" / "notebook").exists() and (tmp_path / "runs" / "notebook" / "eval_test.json").is_file()


def test_the_python_pages_long_recipe_compiles_and_names_the_repositorys_configs():
    """A `py` block (the Multi30k recipe, hours of training) is not run with the others, but it compiles and every
    config it trains from is in the repository."""
    blocks = re.findall(r"^```py\n(.*?)^```", PAGE.read_text(encoding="utf-8"), flags=re.S | re.M)
    assert blocks and not set(blocks) & set(python_blocks(PAGE.read_text(encoding="utf-8")))
    for block in blocks:
        compile(block, f"{PAGE}: py block", "exec")
        configs = re.findall(r"configs/[\w/]+\.yaml", block)
        assert configs and all((REPO / c).is_file() for c in configs), configs
        for name in set(re.findall(r"\bnmt(?:\.data)?\.\w+", block)) - {"nmt.data"}:  # every function it calls
            module, _, attribute = name.rpartition(".")
            assert hasattr(importlib.import_module(module), attribute), name


WALKTHROUGH = re.compile(r"<!-- walkthrough:start -->\n(.*?)<!-- walkthrough:end -->", flags=re.S)


def walkthrough_script() -> str:
    """The bash blocks between the walkthrough markers of docs/data.md, then of docs/training.md, in order."""
    blocks = [block for page in ("data.md", "training.md")
              for part in WALKTHROUGH.findall((REPO / "docs" / page).read_text(encoding="utf-8"))
              for block in re.findall(r"^```bash\n(.*?)^```", part, flags=re.S | re.M)]
    assert len(blocks) >= 2, "a page lost its walkthrough"
    return "\n".join(blocks)


def test_the_own_corpus_walkthrough_runs_as_written(tmp_path):
    """docs/data.md's and docs/training.md's walkthrough, run by bash in a fresh folder with the console commands on
    PATH, on files cut from the sample: two files, a TSV and a validation set, no test set (it trains: tiny)."""
    sample, corpus = REPO / "data" / "sample", tmp_path / "corpus"
    corpus.mkdir()
    de, en = ((sample / f"train.{lang}").read_text(encoding="utf-8").splitlines() for lang in ("de", "en"))
    (corpus / "train.de").write_text("\n".join(de[:350]) + "\n", encoding="utf-8")
    (corpus / "train.en").write_text("\n".join(en[:350]) + "\n", encoding="utf-8")
    (corpus / "more.tsv").write_text("".join(f"{s}\t{t}\n" for s, t in zip(de[350:], en[350:])), encoding="utf-8")
    for lang in ("de", "en"):
        (corpus / f"val.{lang}").write_text((sample / f"val.{lang}").read_text(encoding="utf-8"), encoding="utf-8")
    script = tmp_path / "walkthrough.sh"
    script.write_text("set -euo pipefail\n" + walkthrough_script(), encoding="utf-8")
    done = subprocess.run(["bash", str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=600,
                          env={"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "OMP_NUM_THREADS": "1",
                               "HOME": str(tmp_path), "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    run = tmp_path / "runs" / "my_corpus"
    assert (run / "curve.png").read_bytes().startswith(b"\x89PNG") and (run / "eval_val.json").is_file()
    assert not (run / "eval_test.json").exists()  # no test set: no test report, and no error either
    assert re.search(r"updates/s \d+ tgt tok/s, \S+ left \(max_epochs\)", done.stdout)
    assert len((tmp_path / "elsewhere" / "new.en").read_text(encoding="utf-8").splitlines()) == 2
