"""One-command GPU self-check: tests on CUDA, training in three precisions with MFU, kill and resume, NCCL, BLEU.

Usage: python scripts/gpu_check.py [--minutes 7.5] [--train-seconds 15] [--skip-tests]   (or: make gpu-check)
       python scripts/gpu_check.py --dry-run-cpu   (the same plumbing on the CPU, small model, no figures)

On a machine without CUDA it prints one line and exits 0. With CUDA it runs, one after the other, each in its
own process with a time limit drawn from the overall budget:
  train_*    scripts/bench_train.py in fp32, bf16 and fp16 (GradScaler) on a larger Transformer over the
             embedded sample repeated (large batches): target tokens/s and MFU against the matmul peak it
             measures itself
  resume     a run killed with SIGKILL and resumed, against an uninterrupted one (weights compared)
  torchrun_* torchrun with the NCCL backend: 1 process, and 2 when there are 2 GPUs (time budget, so the
             control vector's all-reduce and DDP run on CUDA tensors)
  evaluate   nmt-evaluate of one checkpoint on CUDA and on the CPU: sentences/s and the BLEU difference
  tests      the test suite with NMT_TEST_DEVICE=cuda (device-aware tests train on the GPU)
The test suite runs last, with what is left of the budget: the H200 run of 2026-11-30 spent 3 of its 7.5
minutes on it first and then timed out in training. It writes benchmarks/results/gpu_check_<device>.json and
.md, and copies both to $OUT when that is set.
Exit status 0 when every check passed, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"
BASE = REPO / "configs" / "sample_transformer.yaml"
SAMPLE = REPO / "data" / "sample"
LARGE = ["model.d_model=1024", "model.ffn_dim=4096", "model.heads=16", "model.encoder_layers=6",
         "model.decoder_layers=6", "train.batch_tokens=32768"]
SMALL = ["train.batch_tokens=1024"]
REPEAT = 40  # copies of the sample's training pairs in the throughput corpus


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="gpu_check.py", description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=7.5, help="overall budget (default 7.5)")
    parser.add_argument("--train-seconds", type=float, default=15.0, help="timed seconds per precision")
    parser.add_argument("--skip-tests", action="store_true", help="leave out the test suite")
    parser.add_argument("--out-dir", type=Path, default=RESULTS, help="where the JSON and summary go")
    parser.add_argument("--dry-run-cpu", action="store_true",
                        help="run the checks' plumbing on the CPU with a small model (figures meaningless)")
    return parser.parse_args(argv)


class Checker:
    """Runs the checks in subprocesses within one deadline and keeps their results."""

    def __init__(self, minutes: float, work: Path, device: str) -> None:
        self.deadline = time.monotonic() + 60 * minutes
        self.work, self.device = work, device
        self.dry = device == "cpu"  # a dry run: small everything
        self.env = {**os.environ, "PYTHONPATH": str(REPO), "NMT_TEST_DEVICE": device, "PYTHONUNBUFFERED": "1"}
        self.results: dict[str, dict[str, Any]] = {}

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def run(self, args: list[str], limit: float, **kwargs: Any) -> subprocess.CompletedProcess:
        """A command in the repository, killed after `limit` seconds (or at the deadline)."""
        timeout = max(1.0, min(limit, self.left()))
        return subprocess.run(args, cwd=REPO, env=self.env, capture_output=True, text=True, timeout=timeout,
                              **kwargs)

    def check(self, name: str, func: Callable[[], dict[str, Any]], need: float) -> None:
        """Run one check, recording its figures, whether it passed and how long it took."""
        if self.left() < need:
            self.results[name] = {"ok": False, "error": f"skipped: {self.left():.0f} s left, needs ~{need:.0f} s"}
            print(f"{name}: skipped (out of time)", flush=True)
            return
        start = time.monotonic()
        try:
            result = func()
        except subprocess.TimeoutExpired as err:  # the output so far says which stage was still running
            result = {"ok": False, "error": f"timed out after {err.timeout:.0f} s",
                      **{f"{name}_tail": _text(value)[-2000:] for name, value in
                         (("stdout", err.stdout), ("stderr", err.stderr)) if value}}
        except (subprocess.CalledProcessError, OSError, KeyError, ValueError) as err:
            detail = getattr(err, "stderr", None) or ""
            result = {"ok": False, "error": f"{type(err).__name__}: {err}", "stderr_tail": detail[-2000:]}
        result["seconds"] = round(time.monotonic() - start, 1)
        self.results[name] = result
        print(f"{name}: {'ok' if result['ok'] else 'FAILED'} {json.dumps(result)[:300]}", flush=True)


def _text(output: bytes | str) -> str:
    """A subprocess's captured output as text (a timeout hands it over as bytes)."""
    return output.decode("utf-8", "replace") if isinstance(output, bytes) else output


def nmt(*args: str) -> list[str]:
    return [sys.executable, "-m", "nmt", *args]


def _run_config(checker: Checker, name: str, *extra: str) -> list[str]:
    """Overrides that put a run of the sample config in the check's own folder, on CUDA."""
    return ["--set", f"name={name}", "--set", f"run_root={checker.work / 'runs'}",
            "--set", f"data.cache_dir={checker.work / 'cache'}", "--set", f"train.device={checker.device}",
            *[item for value in extra for item in ("--set", value)]]


def check_tests(checker: Checker) -> dict[str, Any]:
    proc = checker.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"], limit=240)
    summary = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else ""
    return {"ok": proc.returncode == 0, "summary": summary,
            **({} if proc.returncode == 0 else {"stdout_tail": proc.stdout[-3000:]})}


def _repeated_sample(folder: Path, repeat: int) -> list[str]:
    """Overrides for a files dataset: the sample's training pairs `repeat` times (large batches), its validation."""
    folder.mkdir(parents=True, exist_ok=True)
    for side in ("de", "en"):
        (folder / f"train.{side}").write_text((SAMPLE / f"train.{side}").read_text(encoding="utf-8") * repeat,
                                              encoding="utf-8")
    return ["data.dataset=files", f"data.train_src={folder / 'train.de'}", f"data.train_tgt={folder / 'train.en'}",
            f"data.val_src={SAMPLE / 'val.de'}", f"data.val_tgt={SAMPLE / 'val.en'}"]


def check_train(checker: Checker, precision: str, seconds: float, model: list[str]) -> dict[str, Any]:
    out = checker.work / f"bench_{precision}"
    data = _repeated_sample(checker.work / "repeated", 1 if checker.dry else REPEAT)
    args = [sys.executable, "scripts/bench_train.py", str(BASE), "--seconds", str(seconds), "--warmup-steps", "5",
            "--out-dir", str(out), "--peak-seconds", "2", *(["--matmul-size", "128"] if checker.dry else []),
            *_run_config(checker, f"gpu_{precision}", *data, *model, f"train.precision={precision}")]
    checker.run(args, limit=seconds + 120, check=True)
    report = json.loads(next(out.glob("*.json")).read_text())
    keys = ("tgt_tokens_per_s", "steps_per_s", "mfu", "matmul_peak_tflops", "model_tflops_per_s", "peak_gpu_mb",
            "parameters", "batch_tokens")
    return {"ok": report["steps"] > 0, **{k: report[k] for k in keys}}


def check_resume(checker: Checker) -> dict[str, Any]:
    from nmt.checkpoint import load_bundle

    n = 40 if checker.dry else 400
    steps = [f"train.max_steps={n}", f"train.eval_every={n // 4}", f"train.log_every={n // 4}"]
    checker.run(nmt("train", str(BASE), "--no-evaluate", *_run_config(checker, "straight", *steps)), 120, check=True)
    command = nmt("train", str(BASE), "--no-evaluate", *_run_config(checker, "killed", *steps))
    proc = subprocess.Popen(command, cwd=REPO, env=checker.env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    last = checker.work / "runs" / "killed" / "checkpoints" / "last.pt"
    limit = time.monotonic() + min(120.0, checker.left())
    while not last.exists() and proc.poll() is None and time.monotonic() < limit:
        time.sleep(0.01)
    killed = proc.poll() is None
    if killed:
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    checker.run(command, 120, check=True)
    a, b = load_bundle(checker.work / "runs" / "straight" / "checkpoints" / "last.pt"), load_bundle(last)
    diff = max(float((a.model[k].float() - b.model[k].float()).abs().max()) for k in a.model)
    steps_equal = a.progress["step"] == b.progress["step"] == n
    return {"ok": killed and steps_equal, "killed_mid_run": killed, "both_reached_step": steps_equal,
            "bitwise_equal": diff == 0.0, "max_abs_weight_diff": diff,
            "note": "CUDA kernels may be non-deterministic, so bitwise equality is reported, not required"}


def check_torchrun(checker: Checker, processes: int) -> dict[str, Any]:
    name = f"torchrun_{processes}"
    args = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={processes}",
            "-m", "nmt", "train", str(BASE), "--no-evaluate",
            *_run_config(checker, name, "train.max_steps=0", "train.max_minutes=0.25", "train.eval_every=50")]
    proc = checker.run(args, limit=150)
    log = (checker.work / "runs" / name / "train.log")
    text = log.read_text() if log.exists() else ""
    ok = proc.returncode == 0 and "training stopped" in proc.stderr + text
    return {"ok": ok, "returncode": proc.returncode, "processes": processes,
            "backend": "nccl" if checker.device == "cuda" else "gloo",
            **({} if ok else {"stderr_tail": proc.stderr[-3000:]})}


def check_evaluate(checker: Checker) -> dict[str, Any]:
    run = checker.work / "runs" / "straight"
    if not run.exists():
        checker.run(nmt("train", str(BASE), "--no-evaluate", *_run_config(checker, "straight", "train.max_steps=40")),
                    120, check=True)
    reports = {}
    for name, device in (("cuda", checker.device), ("cpu", "cpu")):  # a dry run compares the CPU with itself
        out = checker.work / f"eval_{name}.json"
        checker.run(nmt("evaluate", str(run), "--device", device, "--output", str(out)), 120, check=True)
        reports[name] = json.loads(out.read_text())
    cuda, cpu = reports["cuda"], reports["cpu"]
    diff = abs(cuda["scores"]["bleu"] - cpu["scores"]["bleu"])
    return {"ok": diff <= 0.1, "bleu_cuda": cuda["scores"]["bleu"], "bleu_cpu": cpu["scores"]["bleu"],
            "bleu_difference": round(diff, 2), "sentences_per_s_cuda": cuda["sentences_per_s"],
            "sentences_per_s_cpu": cpu["sentences_per_s"], "sentences": cuda["sentences"],
            "beam": cuda["decode"]["beam"]}


def summary(record: dict[str, Any]) -> str:
    """A short Markdown report."""
    lines = [f"# GPU check on {record['machine'].get('gpu', 'the CPU (dry run)')}", "",
             f"{record['date']}, torch {record['machine']['torch']}, CUDA {record['machine'].get('cuda')}, "
             f"{record['seconds']:.0f} s in all: {'all passed' if record['ok'] else 'SOME FAILED'}", "",
             "| check | result | figures |", "|---|---|---|"]
    for name, result in record["checks"].items():
        figures = ", ".join(f"{k} {v}" for k, v in result.items() if k not in ("ok", "stderr_tail", "stdout_tail"))
        lines.append(f"| {name} | {'ok' if result['ok'] else 'FAILED'} | {figures} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if not torch.cuda.is_available() and not args.dry_run_cpu:
        print(f"gpu-check: no CUDA device on this machine (torch {torch.__version__}); nothing to check")
        return 0
    from nmt.flops import command_line, device_tag, write_result

    device = torch.device("cpu") if args.dry_run_cpu else torch.device("cuda", 0)
    work = Path(tempfile.mkdtemp(prefix="nmt_gpu_check_"))
    checker = Checker(args.minutes, work, device.type)
    start = time.monotonic()
    model = SMALL if args.dry_run_cpu else LARGE
    for precision in ("fp32", "bf16", "fp16"):
        checker.check(f"train_{precision}", lambda p=precision: check_train(checker, p, args.train_seconds, model),
                      need=args.train_seconds + 30)
    checker.check("resume", lambda: check_resume(checker), need=45)
    gpus = 1 if args.dry_run_cpu else torch.cuda.device_count()
    for processes in sorted({1, min(2, gpus)}):
        checker.check(f"torchrun_{processes}", lambda n=processes: check_torchrun(checker, n), need=40)
    checker.check("evaluate", lambda: check_evaluate(checker), need=30)
    if not args.skip_tests:  # last: the suite already passes on the CPU, the checks above exist only here
        checker.check("tests", lambda: check_tests(checker), need=60)
    ok = all(r["ok"] for r in checker.results.values())
    tag = device_tag(device) + ("_dry_run" if args.dry_run_cpu else "")
    path = args.out_dir / f"gpu_check_{tag}.json"
    record = write_result(path, device, command_line(__file__, argv or sys.argv[1:]),
                          {"benchmark": "gpu_check", "ok": ok, "seconds": round(time.monotonic() - start, 1),
                           "gpus": gpus, "checks": checker.results})
    (args.out_dir / f"gpu_check_{tag}.md").write_text(summary(record), encoding="utf-8")
    if os.environ.get("OUT"):
        for suffix in (".json", ".md"):
            shutil.copy(args.out_dir / f"gpu_check_{tag}{suffix}", Path(os.environ["OUT"]))
    shutil.rmtree(work, ignore_errors=True)
    print(summary(record))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
