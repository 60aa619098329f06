"""The Python page of the docs runs as written: its code blocks, in order, in one fresh interpreter (no console
command involved), on the embedded sample, with root logging and signal handlers checked around it."""

from __future__ import annotations

import re
import subprocess
import sys

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
