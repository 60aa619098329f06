"""One-command GPU self-check in under 8 minutes: preflight, training in three precisions with MFU and host syncs,
kill -9 and resume, NCCL torchrun, nmt-evaluate on CUDA against the CPU, the device-aware tests.

Usage: python -m benchmarks.gpu_check [--minutes 7.5] [--train-seconds 8] [--skip-tests]   (or: make gpu-check)
       python -m benchmarks.gpu_check --dry-run-cpu   (the same plumbing on the CPU with small models, < 3 minutes)

On a machine without CUDA (and no --dry-run-cpu) it prints one line and exits 0. Otherwise it runs the checks
of `plan` one after the other, each in a process group of its own (`--child NAME`) with its own time cap; a
check past its cap is killed with its whole process tree (torchrun's workers, which start sessions of their
own, included). This process never touches CUDA itself, and the data caches are built by CPU-only processes
before any check does:
  preflight  device, driver, CUDA/cuDNN/NCCL and torch versions, a first CUDA kernel
  prepare    the data caches of every later check (nmt-prepare with CUDA hidden)
  train_*    benchmarks.train in fp32 (train.tf32), bf16 and fp16 (GradScaler) on a d_model 1024, 6+6
             layer Transformer with 32k-token batches over the sample repeated: target tokens/s, MFU against
             the matmul peak it measures, and the host syncs of one update (torch.cuda.set_sync_debug_mode)
  resume     a run killed with SIGKILL after its first last.pt and resumed, against an uninterrupted one
  torchrun_* torchrun with NCCL on max_steps: 1 process, and 2 when there are two GPUs
  evaluate   nmt-evaluate (greedy) of one checkpoint on CUDA and on the CPU: >= 95 % identical sentences and
             BLEU within 0.5
  tests      the device-aware test files with NMT_TEST_DEVICE=cuda, in parallel, each with a timeout
After every check the whole report so far is rewritten atomically to benchmarks/results/gpu_check_<device>.json
(and .md), and copied to $OUT when that is set, so a run cut off from outside still leaves what it finished.
Exit status 0 when every check passed, 1 otherwise.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.common import (
    RESULTS,
    ROOT,
    arguments,
    command_line,
    module_command,
    now,
    prog,
    table_header,
)
from nmt.fileio import atomic_output, write_json
from nmt.processes import descendants
from nmt.run.folder import RunDir

MODULE = "benchmarks.gpu_check"
BASE = ROOT / "configs" / "sample_transformer.yaml"
SAMPLE = ROOT / "data" / "sample"
LARGE = ["model.d_model=1024", "model.ffn_dim=4096", "model.heads=16", "model.encoder_layers=6",
         "model.decoder_layers=6", "train.batch_tokens=32768"]
SMALL = ["model.d_model=32", "model.ffn_dim=64", "model.heads=2", "model.encoder_layers=1",
         "model.decoder_layers=1"]  # every run of the dry run: its figures mean nothing, its plumbing is the point
REPEAT = 40  # copies of the sample's training pairs in the throughput corpus
MARK = "GPU_CHECK_RESULT "  # the line on which a child reports its result
GPU_BUDGET, DRY_BUDGET = 450.0, 178.0  # seconds: under 8 minutes on a GPU, under 3 on the CPU
# Each check's cap, in seconds, on a GPU and in the dry run; `plan` keeps their sum within the budget.
CAPS = {"preflight": (20, 10), "prepare": (45, 15), "train_fp32": (50, 20), "train_bf16": (50, 20),
        "train_fp16": (50, 20), "resume": (70, 35), "torchrun_1": (45, 25), "torchrun_2": (45, 25),
        "evaluate": (45, 12), "tests": (75, 16)}
GPU_TESTS = ["tests/test_train.py", "tests/test_training_parts.py", "tests/test_kernels.py", "tests/test_models.py",
             "tests/test_search.py", "tests/test_translator.py", "tests/test_checkpoint.py"]
DRY_TESTS = ["tests/test_kernels.py::test_label_smoothing_zero_is_cross_entropy",
             "tests/test_gpu_path.py::test_prefetch_keeps_order_passes_errors_on_and_stops_when_dropped"]


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog=prog(MODULE), description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=0.0,
                        help=f"overall budget (default {GPU_BUDGET / 60} on a GPU, {DRY_BUDGET / 60:.1f} dry)")
    parser.add_argument("--train-seconds", type=float, default=0.0, help="timed seconds per precision (default 8, "
                                                                        "dry 1)")
    parser.add_argument("--skip-tests", action="store_true", help="leave out the test files")
    parser.add_argument("--out-dir", type=Path, default=RESULTS, help="where the JSON and summary go")
    parser.add_argument("--dry-run-cpu", action="store_true",
                        help="run the checks' plumbing on the CPU with small models (figures meaningless)")
    parser.add_argument("--child", help=argparse.SUPPRESS)  # run one check in this process (internal)
    parser.add_argument("--work", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--gpus", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--cap", type=float, default=60.0, help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def plan(gpus: int, dry: bool, budget: float, skip_tests: bool = False) -> list[tuple[str, float]]:
    """The checks to run, in order, with their caps; the caps add up to at most `budget`."""
    names = ["preflight", "prepare", "train_fp32", "train_bf16", "train_fp16", "resume", "torchrun_1",
             *(["torchrun_2"] if gpus >= 2 else []), "evaluate", *([] if skip_tests else ["tests"])]
    caps = [(name, float(CAPS[name][1 if dry else 0])) for name in names]
    total = sum(cap for _, cap in caps)
    if total > budget:  # a second GPU's torchrun (or a smaller budget) shortens every cap alike
        caps = [(name, cap * budget / total) for name, cap in caps]
    return caps


# ------------------------------------------------------------------------------------ process groups


def kill_tree(proc: subprocess.Popen) -> None:
    """SIGKILL `proc`'s process group and every descendant (also those in sessions of their own)."""
    tree = descendants(proc.pid)
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    for pid in tree:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    proc.wait()


_PR_SET_PDEATHSIG = 1  # prctl option (linux/prctl.h)


def _die_with_parent() -> None:
    """In the child before exec: SIGTERM when the parent dies (a check child then ends its own tree)."""
    try:
        ctypes.CDLL(None).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):
        pass


def _end_tree_on_sigterm() -> None:
    """A check child ends its whole tree when terminated (also by its parent's death), then itself."""
    def end(_signum: int, _frame: object) -> None:
        for pid in descendants(os.getpid()):
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        os._exit(143)

    signal.signal(signal.SIGTERM, end)


def run_group(args: list[str], limit: float, logs: Path, env: dict[str, str] | None = None) -> dict[str, Any]:
    """`args` in a new session (its own process group), killed with its whole tree after `limit` seconds.

    Output goes to files (`logs`.out/.err), never to pipes a surviving grandchild could hold open. Returns the
    exit status (None when timed out), the seconds taken and the output's tails.
    """
    logs.parent.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    with open(f"{logs}.out", "w") as out, open(f"{logs}.err", "w") as err:
        proc = subprocess.Popen(args, cwd=ROOT, env=env, stdout=out, stderr=err, start_new_session=True,
                                preexec_fn=_die_with_parent)
        try:
            status: int | None = proc.wait(timeout=max(1.0, limit))
        except subprocess.TimeoutExpired:
            status = None
        kill_tree(proc)  # also after a normal exit: nothing it started may outlive it
    return {"returncode": status, "seconds": round(time.monotonic() - start, 1),
            "stdout": Path(f"{logs}.out").read_text(errors="replace"),
            "stderr": Path(f"{logs}.err").read_text(errors="replace")}


# ------------------------------------------------------------------------------------ the report


def summary(record: dict[str, Any]) -> str:
    """A short Markdown report."""
    state = ("all passed" if record["ok"] else "SOME FAILED") if record.get("finished", True) else "UNFINISHED"
    lines = [f"# GPU check on {record['machine'].get('gpu', 'the CPU (dry run)')}", "",
             f"{record['date']}, torch {record['machine']['torch']}, CUDA {record['machine'].get('cuda')}, "
             f"{record['seconds']:.0f} s in all: {state}", "",
             *table_header(["check", "result", "figures"], "lll")]
    for name, result in record["checks"].items():
        figures = ", ".join(f"{k} {v}" for k, v in result.items()
                            if k not in ("ok", "stderr_tail", "stdout_tail", "files"))
        lines.append(f"| {name} | {'ok' if result['ok'] else 'FAILED'} | {figures} |")
    return "\n".join(lines) + "\n"


class Runner:
    """Runs the planned checks as child processes within one deadline; the report is saved after each."""

    def __init__(self, budget: float, work: Path, device: str, out_dir: Path, command: str,
                 child_args: tuple[str, ...] = ()) -> None:
        self.start = time.monotonic()
        self.deadline = self.start + budget
        self.work, self.device, self.out_dir, self.child_args = work, device, out_dir, child_args
        self.env = {**os.environ, "PYTHONPATH": str(ROOT), "NMT_TEST_DEVICE": device, "PYTHONUNBUFFERED": "1"}
        self.tag = "cpu_dry_run" if device == "cpu" else "cuda"
        self.record: dict[str, Any] = {
            "benchmark": "gpu_check", "date": now(),
            "command": command, "machine": {"torch": _torch_version(), "python": platform.python_version()},
            "budget_s": budget, "finished": False, "ok": False, "seconds": 0.0, "checks": {}}

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def paths(self) -> list[Path]:
        base = [self.out_dir / f"gpu_check_{self.tag}.json"]
        return base + ([Path(os.environ["OUT"]) / base[0].name] if os.environ.get("OUT") else [])

    def save(self) -> None:
        """The report so far, rewritten atomically (JSON and Markdown; also into $OUT when it is set)."""
        self.record["seconds"] = round(time.monotonic() - self.start, 1)
        self.record["ok"] = bool(self.record["checks"]) and all(r["ok"] for r in self.record["checks"].values())
        for path in self.paths():
            write_json(path, self.record)
            with atomic_output(path.with_suffix(".md")) as handle:
                handle.write(summary(self.record))

    def run(self, name: str, cap: float, command: list[str] | None = None) -> dict[str, Any]:
        """One check in its own process group, capped at `cap` seconds (less when the deadline is nearer)."""
        limit = min(cap, self.left())
        if limit < 1.0:
            result: dict[str, Any] = {"ok": False, "error": f"skipped: {self.left():.0f} s left of the budget"}
        else:
            command = command or module_command(MODULE, "--child", name, "--work", str(self.work), "--gpus",
                                                str(self.record.get("gpus", 1)), "--cap", str(limit),
                                                *self.child_args)
            try:
                result = _result_of(run_group(command, limit, self.work / "logs" / name, self.env), limit)
            except Exception as err:  # noqa: BLE001 -- recorded; the other checks still run
                result = {"ok": False, "error": f"{type(err).__name__}: {err}"}
        result["cap_s"] = round(cap, 1)
        self.record["checks"][name] = result
        if name == "preflight" and result["ok"]:
            self._adopt_preflight(result)
        self.save()
        print(f"{name}: {'ok' if result['ok'] else 'FAILED'} {json.dumps(result)[:300]}", flush=True)
        return result

    def _adopt_preflight(self, result: dict[str, Any]) -> None:
        """The device's name gives the report its file name; its versions go into `machine`."""
        machine = result.get("machine", {})
        self.record["machine"].update(machine)
        self.record["gpus"] = result.get("gpus", 1)
        if self.device != "cpu" and machine.get("gpu"):
            old = self.paths()
            self.tag = "".join(c if c.isalnum() else "_" for c in machine["gpu"].lower()).strip("_")
            for path in old:
                for stale in (path, path.with_suffix(".md")):
                    stale.unlink(missing_ok=True)

    def finish(self) -> None:
        self.record["finished"] = True
        self.save()


def _result_of(proc: dict[str, Any], limit: float) -> dict[str, Any]:
    """A check's result from its child's output: the marked line, or why there is none."""
    lines = [line for line in proc["stdout"].splitlines() if line.startswith(MARK)]
    if proc["returncode"] is None:
        result = {"ok": False, "error": f"timed out after {limit:.0f} s (its process tree killed)"}
        if lines:
            result["partial"] = json.loads(lines[-1][len(MARK):])
    elif lines:
        result = json.loads(lines[-1][len(MARK):])
    else:
        result = {"ok": False, "error": f"exit status {proc['returncode']} without a result"}
    if not result["ok"]:
        output = [line for line in proc["stdout"].splitlines() if not line.startswith(MARK)]
        result["stdout_tail"] = "\n".join(output)[-2000:]
        result["stderr_tail"] = proc["stderr"][-2000:]
    result["seconds"] = proc["seconds"]
    return result


def _torch_version() -> str:
    import torch

    return torch.__version__


# ------------------------------------------------------------------------------------ the checks (children)


@dataclass
class Context:
    """What a check child knows: its work folder (shared by all checks), device, GPU count, timings."""

    work: Path
    device: str
    gpus: int
    train_seconds: float
    cap: float  # this check's time cap

    @property
    def dry(self) -> bool:
        return self.device == "cpu"

    def env(self, **extra: str) -> dict[str, str]:
        return {**os.environ, "PYTHONPATH": str(ROOT), "NMT_TEST_DEVICE": self.device, **extra}

    def call(self, args: list[str], limit: float, name: str, **env: str) -> dict[str, Any]:
        """A command of this check, in a group of its own, killed with its tree after `limit` seconds."""
        return run_group(args, limit, self.work / "logs" / name, self.env(**env))


def nmt(*args: str) -> list[str]:
    return [sys.executable, "-m", "nmt", *args]


def _run_config(ctx: Context, name: str, *extra: str) -> list[str]:
    """Overrides that put a run of the sample config in the work folder, on the check's device."""
    values = [f"name={name}", f"run_root={ctx.work / 'runs'}", f"data.cache_dir={ctx.work / 'cache'}",
              f"train.device={ctx.device}", "decode.length_penalty=1.0", *(SMALL if ctx.dry else []), *extra]
    return [item for value in values for item in ("--set", value)]


def _repeated_sample(ctx: Context) -> list[str]:
    """Overrides for a files dataset: the sample's training pairs repeated (large batches), its validation."""
    folder = ctx.work / "repeated"
    folder.mkdir(parents=True, exist_ok=True)
    for side in ("de", "en"):
        text = (SAMPLE / f"train.{side}").read_text(encoding="utf-8") * (1 if ctx.dry else REPEAT)
        (folder / f"train.{side}").write_text(text, encoding="utf-8")
    return ["data.dataset=files", f"data.train_src={folder / 'train.de'}", f"data.train_tgt={folder / 'train.en'}",
            f"data.val_src={SAMPLE / 'val.de'}", f"data.val_tgt={SAMPLE / 'val.en'}"]


def _must(proc: dict[str, Any], what: str) -> None:
    if proc["returncode"] != 0:
        status = "timed out" if proc["returncode"] is None else f"exit status {proc['returncode']}"
        raise RuntimeError(f"{what}: {status}; {proc['stderr'][-1500:]}")


def check_preflight(ctx: Context) -> dict[str, Any]:
    import torch

    machine: dict[str, Any] = {"torch": torch.__version__, "python": platform.python_version(),
                               "cpu_count": os.cpu_count()}
    if ctx.dry:
        return {"ok": True, "machine": machine, "gpus": 0}
    machine.update(gpu=torch.cuda.get_device_name(0), cuda=torch.version.cuda,
                   cudnn=torch.backends.cudnn.version(), capability=list(torch.cuda.get_device_capability(0)),
                   nccl=".".join(map(str, torch.cuda.nccl.version())),
                   memory_gb=round(torch.cuda.get_device_properties(0).total_memory / 2**30, 1))
    smi = shutil.which("nvidia-smi")
    if smi:
        query = subprocess.run([smi, "--query-gpu=driver_version", "--format=csv,noheader"], capture_output=True,
                               text=True, timeout=10)
        machine["driver"] = query.stdout.strip().splitlines()[0] if query.stdout.strip() else None
    ones = torch.ones(1024, 1024, device="cuda")
    ok = float((ones @ ones)[0, 0]) == 1024.0  # a first kernel runs and gives the right answer
    return {"ok": ok, "machine": machine, "gpus": torch.cuda.device_count()}


def check_prepare(ctx: Context) -> dict[str, Any]:
    """Both data caches, by CPU-only processes (CUDA hidden), at once."""
    jobs = {"throughput": _run_config(ctx, "prepare_large", *_repeated_sample(ctx)),
            "sample": _run_config(ctx, "prepare_sample")}
    procs = {}
    for name, overrides in jobs.items():
        log = ctx.work / "logs" / f"prepare_{name}"
        procs[name] = (subprocess.Popen(nmt("prepare", str(BASE), *overrides), cwd=ROOT,
                                        env=ctx.env(CUDA_VISIBLE_DEVICES=""), stdout=open(f"{log}.out", "w"),
                                        stderr=open(f"{log}.err", "w")), log)
    failed = {name: Path(f"{log}.err").read_text()[-1500:] for name, (proc, log) in procs.items() if proc.wait()}
    return {"ok": not failed, "caches": sorted(p.name for p in (ctx.work / "cache").iterdir()),
            **({"errors": failed} if failed else {})}


def check_train(ctx: Context, precision: str) -> dict[str, Any]:
    from benchmarks import train

    out = ctx.work / f"bench_{precision}"
    args = [str(BASE), "--seconds", str(ctx.train_seconds), "--warmup-steps", "2" if ctx.dry else "3",
            "--out-dir", str(out),
            "--peak-seconds", "0.3" if ctx.dry else "2", *(["--matmul-size", "128"] if ctx.dry else []),
            *_run_config(ctx, f"gpu_{precision}", *_repeated_sample(ctx), *([] if ctx.dry else LARGE),
                         f"train.precision={precision}")]
    if train.main(args) != 0:
        raise RuntimeError("benchmarks.train failed (see stderr)")
    report = json.loads(next(out.glob("*.json")).read_text())
    keys = ("tgt_tokens_per_s", "steps_per_s", "mfu", "matmul_peak_tflops", "model_tflops_per_s", "peak_gpu_mb",
            "parameters", "batch_tokens", "host_syncs_per_update", "tf32")
    syncs, mfu = report["host_syncs_per_update"], report.get("mfu")
    # An MFU above 1 says the measured peak was no ceiling for this model's matmuls, so the figure means nothing:
    # on a GPU the check fails; the dry run's peak (128-size matmuls for 0.3 s) only exercises the plumbing.
    sane = ctx.dry or (mfu is not None and 0 < mfu <= 1)
    result = {"ok": report["steps"] > 0 and (syncs is None or syncs <= 1) and sane, **{k: report.get(k) for k in keys}}
    if ctx.dry:
        result["note"] = "dry run: MFU against a peak of 128-size matmuls over 0.3 s checks the plumbing, not the CPU"
    elif not sane:
        result["error"] = f"MFU {mfu} outside (0, 1]: the measured matmul peak is not a ceiling for this model"
    return result


def check_resume(ctx: Context) -> dict[str, Any]:
    from nmt.checkpoint import load_contents

    n = 20 if ctx.dry else 200
    steps = [f"train.max_steps={n}", f"train.eval_every={n // 4}", f"train.log_every={n // 4}",
             *(["train.eval_bleu=false"] if ctx.dry else [])]
    straight = nmt("train", str(BASE), "--no-evaluate", *_run_config(ctx, "straight", *steps))
    command = nmt("train", str(BASE), "--no-evaluate", *_run_config(ctx, "killed", *steps))
    logs = ctx.work / "logs"
    first = subprocess.Popen(straight, cwd=ROOT, env=ctx.env(), stdout=subprocess.DEVNULL,
                             stderr=open(logs / "resume_straight.err", "w"))
    victim = subprocess.Popen(command, cwd=ROOT, env=ctx.env(), stdout=subprocess.DEVNULL,
                              stderr=open(logs / "resume_killed.err", "w"))
    last = RunDir(ctx.work / "runs" / "killed").last
    while not last.exists() and victim.poll() is None:
        time.sleep(0.01)
    killed = victim.poll() is None
    victim.kill()  # SIGKILL, as a lost machine
    victim.wait()
    _must(ctx.call(command, 120, "resume_again"), "the resumed run")
    if first.wait():
        raise RuntimeError(f"the uninterrupted run: exit status {first.returncode}")
    a, b = load_contents(RunDir(ctx.work / "runs" / "straight").last), load_contents(last)
    diff = max(float((a.model[k].float() - b.model[k].float()).abs().max()) for k in a.model)
    reached = a.progress["step"] == b.progress["step"] == n
    return {"ok": killed and reached and (diff == 0.0 or not ctx.dry), "killed_mid_run": killed,
            "both_reached_step": reached, "bitwise_equal": diff == 0.0, "max_abs_weight_diff": diff,
            "note": "bitwise on the CPU; on CUDA atomics in some backward kernels make it close, not bitwise"}


def check_torchrun(ctx: Context, processes: int) -> dict[str, Any]:
    name, steps = f"torchrun_{processes}", 10 if ctx.dry else 40
    args = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={processes}",
            "-m", "nmt", "train", str(BASE), "--no-evaluate",
            *_run_config(ctx, name, f"train.max_steps={steps}", f"train.eval_every={steps}", "train.eval_bleu=false")]
    proc = ctx.call(args, 120, name)
    log = RunDir(ctx.work / "runs" / name).log
    text = log.read_text() if log.exists() else ""
    ok = proc["returncode"] == 0 and f"training stopped at step {steps}" in text
    return {"ok": ok, "processes": processes, "steps": steps, "backend": "gloo" if ctx.dry else "nccl",
            **({} if ok else {"stderr_tail": proc["stderr"][-3000:]})}


def check_evaluate(ctx: Context) -> dict[str, Any]:
    run = ctx.work / "runs" / "straight"
    if not RunDir(run).best.exists():  # the resume check did not leave its run
        _must(ctx.call(nmt("train", str(BASE), "--no-evaluate", *_run_config(ctx, "straight", "train.max_steps=40",
                                                                              "train.eval_every=40")), 120,
                       "evaluate_train"), "training the model to evaluate")
    procs = {}
    for name, device in (("gpu", ctx.device), ("cpu", "cpu")):  # a dry run compares the CPU with itself
        out = ctx.work / f"eval_{name}.json"
        args = nmt("evaluate", str(run), "--device", device, "--beam", "1", "--output", str(out))
        procs[name] = (subprocess.Popen(args, cwd=ROOT, env=ctx.env(), stdout=subprocess.DEVNULL,
                                        stderr=open(ctx.work / "logs" / f"evaluate_{name}.err", "w")), out)
    for name, (proc, _) in procs.items():
        if proc.wait():
            raise RuntimeError(f"nmt-evaluate on {name}: exit status {proc.returncode}")
    reports = {name: json.loads(out.read_text()) for name, (_, out) in procs.items()}
    hyps = {name: out.with_suffix(".hyp.txt").read_text(encoding="utf-8").splitlines()
            for name, (_, out) in procs.items()}
    same = sum(a == b for a, b in zip(hyps["gpu"], hyps["cpu"])) / max(len(hyps["cpu"]), 1)
    gpu, cpu = reports["gpu"]["scores"]["bleu"], reports["cpu"]["scores"]["bleu"]
    ok = len(hyps["gpu"]) == len(hyps["cpu"]) and same >= 0.95 and abs(gpu - cpu) <= 0.5
    return {"ok": ok, "identical_share": round(same, 3), "bleu_gpu": gpu, "bleu_cpu": cpu,
            "bleu_difference": round(abs(gpu - cpu), 2), "sentences": len(hyps["cpu"]),
            "sentences_per_s_gpu": reports["gpu"].get("sentences_per_s"),
            "sentences_per_s_cpu": reports["cpu"].get("sentences_per_s")}


def check_tests(ctx: Context) -> dict[str, Any]:
    """The device-aware test files at once, each in its own group with a timeout (the cap less a margin)."""
    selections = DRY_TESTS if ctx.dry else GPU_TESTS
    limit = ctx.cap - 5  # the margin collects the results
    procs = {}
    for i, selection in enumerate(selections):
        log = ctx.work / "logs" / f"tests_{i}"
        procs[selection] = (subprocess.Popen([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                                              selection], cwd=ROOT, env=ctx.env(), stdout=open(f"{log}.out", "w"),
                                             stderr=subprocess.STDOUT, start_new_session=True), log)
    files, end = {}, time.monotonic() + limit
    for selection, (proc, log) in procs.items():
        try:
            proc.wait(timeout=max(0.1, end - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass
        timed_out = proc.poll() is None
        kill_tree(proc)
        lines = Path(f"{log}.out").read_text(errors="replace").strip().splitlines()
        files[selection] = {"ok": proc.returncode == 0 and not timed_out,
                            "summary": "timed out" if timed_out else (lines[-1] if lines else "")}
    return {"ok": all(f["ok"] for f in files.values()), "files": files,
            "failed": [s for s, f in files.items() if not f["ok"]]}


CHECKS: dict[str, Callable[[Context], dict[str, Any]]] = {
    "preflight": check_preflight, "prepare": check_prepare,
    **{f"train_{p}": (lambda ctx, p=p: check_train(ctx, p)) for p in ("fp32", "bf16", "fp16")},
    "resume": check_resume, **{f"torchrun_{n}": (lambda ctx, n=n: check_torchrun(ctx, n)) for n in (1, 2)},
    "evaluate": check_evaluate, "tests": check_tests}


def child(name: str, ctx: Context) -> int:
    """Run one check in this process and print its result on the marked line; an exception is its result."""
    _end_tree_on_sigterm()
    try:
        result = CHECKS[name](ctx)
    except Exception as err:  # noqa: BLE001 -- any failure of a check is its result, not the end of the run
        result = {"ok": False, "error": f"{type(err).__name__}: {' '.join(str(err).split())[:1500]}",
                  "traceback": traceback.format_exc()[-2000:]}
    print(MARK + json.dumps(result), flush=True)
    return 0


# ------------------------------------------------------------------------------------ main


def main(argv: list[str] | None = None) -> int:
    argv = arguments(argv)
    args = parse_args(argv)
    dry = args.dry_run_cpu
    seconds = args.train_seconds or (1.0 if dry else 8.0)
    if args.child:
        return child(args.child, Context(args.work, "cpu" if dry else "cuda", args.gpus, seconds, args.cap))
    import torch

    if not torch.cuda.is_available() and not dry:  # is_available creates no CUDA context
        print(f"gpu-check: no CUDA device on this machine (torch {torch.__version__}); nothing to check")
        return 0
    budget = 60 * args.minutes if args.minutes else (DRY_BUDGET if dry else GPU_BUDGET)
    work = Path(tempfile.mkdtemp(prefix="nmt_gpu_check_"))
    runner = Runner(budget, work, "cpu" if dry else "cuda", args.out_dir,
                    command_line(MODULE, argv),
                    ("--train-seconds", str(seconds), *(["--dry-run-cpu"] if dry else [])))
    checks = plan(1 if dry else torch.cuda.device_count(), dry, budget, args.skip_tests)
    for name, cap in checks:
        if name != "torchrun_2" or runner.record.get("gpus", 1) >= 2:
            runner.run(name, cap)
    runner.finish()
    shutil.rmtree(work, ignore_errors=True)
    print(summary(runner.record))
    return 0 if runner.record["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
