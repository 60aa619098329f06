"""benchmarks/gpu_check.py on the CPU: the one-line exit without CUDA, its plan, process groups, report and checks."""

from __future__ import annotations

import ast
import importlib
import json
import os
import sys
import time
from pathlib import Path
from types import ModuleType

import pytest
import torch

from nmt.processes import descendants, is_running
from tests.conftest import REPO


@pytest.fixture(scope="module")
def gpu_check() -> ModuleType:
    return importlib.import_module("benchmarks.gpu_check")


def _runner(gpu_check, tmp_path: Path, budget: float = 60.0):
    return gpu_check.Runner(budget, tmp_path / "work", "cpu", tmp_path / "out", "python -m benchmarks.gpu_check")


@pytest.mark.skipif(torch.cuda.is_available(), reason="the one-line exit is for machines without CUDA")
def test_without_cuda_it_says_so_in_one_line_and_exits_0(gpu_check, tmp_path, capsys):
    assert gpu_check.main(["--out-dir", str(tmp_path)]) == 0
    out, err = capsys.readouterr()
    assert len(out.splitlines()) == 1 and "no CUDA device" in out
    assert err == "" and not any(tmp_path.iterdir())  # no report of a check that did not run


@pytest.mark.parametrize("dry", [False, True])
@pytest.mark.parametrize("gpus", [1, 2])
def test_every_check_s_cap_fits_in_the_budget(gpu_check, dry, gpus):
    budget = gpu_check.DRY_BUDGET if dry else gpu_check.GPU_BUDGET
    checks = gpu_check.plan(gpus, dry, budget)
    names = [name for name, _ in checks]
    assert sum(cap for _, cap in checks) <= budget + 1e-6 and budget < (180 if dry else 480)
    assert names[:2] == ["preflight", "prepare"]  # the caches are built before any check uses CUDA
    assert set(names) == set(gpu_check.CHECKS) - ({"torchrun_2"} if gpus < 2 else set())
    assert all(cap >= 8 for _, cap in checks)


def test_a_timed_out_check_leaves_no_process_and_keeps_its_output(gpu_check, tmp_path):
    """Its whole tree is killed: a child in its group and one in a session of its own (as torchrun's workers)."""
    pids = tmp_path / "pids"
    script = ("import subprocess, sys, time\n"
              "sleeper = [sys.executable, '-c', 'import time; time.sleep(120)']\n"
              "a = subprocess.Popen(sleeper)\n"
              "b = subprocess.Popen(sleeper, start_new_session=True)\n"
              f"open({str(pids)!r}, 'w').write(f'{{a.pid}} {{b.pid}}')\n"
              "print('stage one', flush=True); print('on stderr', file=sys.stderr, flush=True)\n"
              "time.sleep(120)\n")
    runner = _runner(gpu_check, tmp_path)
    result = runner.run("slow", 2, [sys.executable, "-c", script])
    assert not result["ok"] and result["error"].startswith("timed out after 2 s") and result["seconds"] < 30
    assert "stage one" in result["stdout_tail"] and "on stderr" in result["stderr_tail"]
    children = [int(pid) for pid in pids.read_text().split()]
    deadline = time.monotonic() + 10
    while any(is_running(pid) for pid in children) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(is_running(pid) for pid in children)


def test_the_report_holds_each_check_as_soon_as_it_ends(gpu_check, tmp_path, monkeypatch):
    out = tmp_path / "outbox"
    out.mkdir()
    monkeypatch.setenv("OUT", str(out))
    runner = _runner(gpu_check, tmp_path)
    report = "import json, sys; print('GPU_CHECK_RESULT ' + json.dumps({'ok': True, 'figure': 1.5}))"
    runner.run("first", 30, [sys.executable, "-c", report])
    for folder in (tmp_path / "out", out):
        saved = json.loads((folder / "gpu_check_cpu_dry_run.json").read_text())
        assert saved["finished"] is False and saved["checks"]["first"]["figure"] == 1.5
        assert "UNFINISHED" in (folder / "gpu_check_cpu_dry_run.md").read_text()
    runner.run("second", 30, [sys.executable, "-c", report])
    runner.finish()
    saved = json.loads((out / "gpu_check_cpu_dry_run.json").read_text())
    assert saved["finished"] and saved["ok"] and list(saved["checks"]) == ["first", "second"]
    assert sorted(p.name for p in out.iterdir()) == ["gpu_check_cpu_dry_run.json", "gpu_check_cpu_dry_run.md"]


def test_an_unexpected_exception_is_recorded_and_the_rest_still_run(gpu_check, tmp_path, monkeypatch, capsys):
    def broken(_ctx):
        raise TypeError("'NoneType' object is not subscriptable")

    monkeypatch.setitem(gpu_check.CHECKS, "evaluate", broken)
    ctx = gpu_check.Context(tmp_path, "cpu", 0, 1.0, 10.0)
    assert gpu_check.child("evaluate", ctx) == 0
    line = capsys.readouterr().out.strip().splitlines()[-1]
    result = json.loads(line[len(gpu_check.MARK):])
    assert not result["ok"] and result["error"].startswith("TypeError") and "broken" in result["traceback"]
    runner = _runner(gpu_check, tmp_path)
    runner.run("crashes", 30, [sys.executable, "-c", "raise StopIteration"])
    runner.run("after", 30, [sys.executable, "-c", "print('GPU_CHECK_RESULT {\"ok\": true}')"])
    checks = runner.record["checks"]
    assert not checks["crashes"]["ok"] and "StopIteration" in checks["crashes"]["stderr_tail"]
    assert checks["after"]["ok"] and not runner.record["ok"]
    summary = gpu_check.summary(runner.record)
    rows = [line for line in summary.splitlines() if line.startswith("| ") and not line.startswith("| check")]
    assert [row.split(" | ")[0][2:] for row in rows] == ["crashes", "after"]


def test_a_check_out_of_budget_is_skipped_and_said(gpu_check, tmp_path):
    runner = _runner(gpu_check, tmp_path, budget=0.5)
    result = runner.run("late", 60, [sys.executable, "-c", "print('never')"])
    assert not result["ok"] and result["error"].startswith("skipped")


def test_a_training_check_reads_the_figures_bench_train_writes(gpu_check, tmp_path, monkeypatch):
    """The dry run of one training check: bench_train's report has every key the GPU check reads."""
    monkeypatch.setattr(gpu_check, "SMALL", ["model.d_model=16", "model.ffn_dim=32", "model.heads=2",
                                             "model.encoder_layers=1", "model.decoder_layers=1",
                                             "tokenizer.vocab_size=300", "train.batch_tokens=256"])
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    result = gpu_check.check_train(gpu_check.Context(tmp_path, "cpu", 0, 0.5, 60.0), "fp32")
    assert result["ok"], json.dumps(result)[:2000]
    assert result["tgt_tokens_per_s"] > 0 and 0 < result["mfu"] and result["parameters"] > 0
    assert set(result["matmul_peak_tflops"]) == {"fp32", "bf16"} and result["host_syncs_per_update"] is None
    assert (tmp_path / "bench_fp32").is_dir() and os.environ["PYTHONPATH"] == str(REPO)


@pytest.mark.parametrize(("device", "mfu", "ok"), [("cuda", 0.55, True), ("cuda", 1.3, False), ("cuda", 0.0, False),
                                                 ("cpu", 1.3, True)])
def test_an_mfu_outside_0_to_1_fails_a_gpu_training_check_and_is_labelled_in_the_dry_run(gpu_check, tmp_path,
                                                                                        monkeypatch, device, mfu, ok):
    from benchmarks import train

    def fake_train(args: list[str]) -> int:
        out = Path(args[args.index("--out-dir") + 1])
        out.mkdir(parents=True)
        (out / "train.json").write_text(json.dumps({"steps": 5, "mfu": mfu, "host_syncs_per_update": 0}))
        return 0

    monkeypatch.setattr(train, "main", fake_train)
    result = gpu_check.check_train(gpu_check.Context(tmp_path, device, 1, 0.5, 60.0), "bf16")
    assert result["ok"] is ok
    assert ("MFU" in result["error"]) if not ok else ("error" not in result)
    assert ("note" in result) is (device == "cpu")


def test_a_zombie_is_not_running_and_a_grandchild_in_a_session_of_its_own_is_a_descendant():
    """nmt.processes, which the GPU check's supervisor, the data store and the tests read processes with: a child
    that ended and was not yet reaped is no longer running (though its pid still exists), and a grandchild that
    started a session of its own is still in the tree, after its parent."""
    import signal
    import subprocess

    code = ("import subprocess, sys, time\n"
            "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'], start_new_session=True)\n"
            "print('started', flush=True)\n"
            "time.sleep(120)\n")
    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout.readline() == "started\n"
        grandchildren = descendants(parent.pid)
        tree = descendants(os.getpid())
        assert len(grandchildren) == 1 and tree.index(parent.pid) < tree.index(grandchildren[0])
        assert is_running(parent.pid) and is_running(grandchildren[0])
    finally:
        for pid in descendants(parent.pid):
            os.kill(pid, signal.SIGKILL)
        parent.kill()
    deadline = time.monotonic() + 10
    while is_running(parent.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    os.kill(parent.pid, 0)  # not reaped yet: the pid still exists, as a zombie
    assert not is_running(parent.pid) and parent.pid not in descendants(os.getpid())
    parent.wait()
    assert not is_running(parent.pid)


def _named_tests(gpu_check) -> list[str]:
    return [*gpu_check.GPU_TESTS, *gpu_check.DRY_TESTS]


def test_every_test_the_check_names_exists(gpu_check):
    """A test moved or renamed without the check's lists following fails here, not on a lent GPU."""
    for selection in _named_tests(gpu_check):
        path, _, name = selection.partition("::")
        assert (REPO / path).is_file(), f"{selection}: no such file"
        if name:
            tree = ast.parse((REPO / path).read_text(encoding="utf-8"))
            defined = {node.name for node in tree.body if isinstance(node, ast.FunctionDef)}
            assert name in defined, f"{selection}: no such test"


def test_every_test_file_that_reads_the_test_device_runs_on_the_gpu(gpu_check):
    readers = {f"tests/{path.name}" for path in (REPO / "tests").glob("test_*.py")
               if path.name != Path(__file__).name and "NMT_TEST_DEVICE" in path.read_text(encoding="utf-8")}
    assert readers and readers <= set(gpu_check.GPU_TESTS), readers - set(gpu_check.GPU_TESTS)


def test_the_dry_run_s_test_check_passes(gpu_check, tmp_path, monkeypatch):
    """The dry run's own test check, as `--dry-run-cpu` runs it: its selections pass on the CPU."""
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    (tmp_path / "logs").mkdir()
    result = gpu_check.check_tests(gpu_check.Context(tmp_path, "cpu", 0, 1.0, 120.0))
    assert result["ok"], result
    assert set(result["files"]) == set(gpu_check.DRY_TESTS)
