"""scripts/gpu_check.py on the CPU: the one-line exit without CUDA, and its checker's plumbing."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
import torch

from tests.conftest import REPO


@pytest.fixture(scope="module")
def gpu_check() -> Iterator[ModuleType]:
    with pytest.MonkeyPatch.context() as patch:
        patch.syspath_prepend(str(REPO / "scripts"))
        yield importlib.import_module("gpu_check")


@pytest.mark.skipif(torch.cuda.is_available(), reason="the one-line exit is for machines without CUDA")
def test_without_cuda_it_says_so_in_one_line_and_exits_0(tmp_path):
    proc = subprocess.run([sys.executable, "scripts/gpu_check.py", "--out-dir", str(tmp_path)], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert len(proc.stdout.splitlines()) == 1 and "no CUDA device" in proc.stdout
    assert proc.stderr == "" and not any(tmp_path.iterdir())  # no report of a check that did not run


def test_a_check_past_its_limit_keeps_the_output_it_had_printed(gpu_check, tmp_path):
    checker = gpu_check.Checker(1.0, tmp_path, "cpu")
    script = "import sys, time; print('stage one', flush=True); print('on stderr', file=sys.stderr, flush=True); " \
             "time.sleep(60)"
    checker.check("slow", lambda: checker.run([sys.executable, "-c", script], limit=3), need=0)
    result = checker.results["slow"]
    assert not result["ok"] and result["error"] == "timed out after 3 s" and result["seconds"] < 30
    assert "stage one" in result["stdout_tail"] and "on stderr" in result["stderr_tail"]


def test_failed_and_skipped_checks_are_recorded_and_summarised(gpu_check, tmp_path):
    checker = gpu_check.Checker(1.0, tmp_path, "cpu")
    checker.check("fails", lambda: checker.run([sys.executable, "-c", "raise SystemExit(3)"], 10, check=True), 0)
    checker.check("passes", lambda: {"ok": True, "figure": 1.5}, need=0)
    checker.check("needs_more", lambda: {"ok": True}, need=3600)
    results = checker.results
    assert not results["fails"]["ok"] and "CalledProcessError" in results["fails"]["error"]
    assert results["passes"] == {"ok": True, "figure": 1.5, "seconds": results["passes"]["seconds"]}
    assert not results["needs_more"]["ok"] and results["needs_more"]["error"].startswith("skipped")
    record = {"machine": {"torch": torch.__version__}, "date": "today", "seconds": 1.0, "ok": False,
              "checks": results}
    text = gpu_check.summary(record)
    rows = [line for line in text.splitlines() if line.startswith("| ") and not line.startswith("| check")]
    assert [row.split(" | ")[0][2:] for row in rows] == ["fails", "passes", "needs_more"]
    assert "SOME FAILED" in text and "figure 1.5" in text


def test_a_training_check_reads_the_figures_bench_train_writes(gpu_check, tmp_path):
    """The dry run of one training check: bench_train's report has every key the GPU check reads."""
    checker = gpu_check.Checker(5.0, tmp_path, "cpu")
    checker.env["PYTHONPATH"] = str(REPO)
    model = ["model.d_model=16", "model.ffn_dim=32", "model.heads=2", "model.encoder_layers=1",
             "model.decoder_layers=1", "tokenizer.vocab_size=300", "train.batch_tokens=256"]
    checker.check("train_fp32", lambda: gpu_check.check_train(checker, "fp32", 0.5, model), need=0)
    result = checker.results["train_fp32"]
    assert result["ok"], json.dumps(result)[:2000]
    assert result["tgt_tokens_per_s"] > 0 and 0 < result["mfu"] and result["parameters"] > 0
    assert set(result["matmul_peak_tflops"]) == {"fp32", "bf16"}
    assert (Path(tmp_path) / "bench_fp32").is_dir()
