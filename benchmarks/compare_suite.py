"""Train every attention variant of a suite, then compare them: `make compare SUITE=sample [BUDGET=20m|3000]`.

The report goes to --out, by default reports/local/<suite> (git ignores it): the committed comparison,
reports/multi30k, is rewritten only when --out names it (`make compare SUITE=multi30k OUT=reports/multi30k`).
Each config in configs/compare/<suite>/ is trained by `nmt-train` in its own subprocess (its output goes to
<out>/logs/<name>.log); a run that fails is recorded and the suite goes on. A run folder that exists is
resumed, never deleted: a suite stopped by Ctrl-C goes on where it stopped when it is run again, and a
finished run is only evaluated again (--restart trains every run from scratch instead). The files a report is
made from (test report, translations, metrics log, config) are copied to <out>/runs/<name>/, so they can be
committed without the checkpoints. Then `nmt-compare` (its function, in this process) compares all run folders
into <out>. BUDGET gives every run the same limit: `20m` (or `1.5h`) sets train.max_minutes, a whole number sets
train.max_steps. suite.json records the budget, each run's exit status and time, and the machine.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
from pathlib import Path

import torch

from benchmarks.common import ROOT, machine_info
from nmt.cli import compare_main
from nmt.compare import FAILED_NOTE, RUN_FILES
from nmt.config import ModelConfig, load_config
from nmt.errors import ConfigError
from nmt.fileio import atomic_output
from nmt.models.attention import RNN_ATTENTION, SELF_ATTENTION


def variant_order() -> tuple[str, ...]:
    """The config-name tails of every registered variant in suite order: the GRU attentions from the cheapest
    (none) to the costliest (additive), then the Transformer self-attentions in the registry's order."""
    model = ModelConfig()
    gru = sorted(RNN_ATTENTION, key=lambda name: RNN_ATTENTION[name].flops(model, 16, 16))  # stable on a tie
    return (*(f"gru_{name}" for name in gru), *(f"transformer_{name}" for name in SELF_ATTENTION))


ORDER = variant_order()


def budget_overrides(budget: str | None) -> list[str]:
    """`--set` arguments for a budget: `20m` / `1.5h` of training time, or a number of steps."""
    if not budget:
        return []
    timed = re.fullmatch(r"(\d+(?:\.\d+)?)([mh])", budget.strip())
    if timed and float(timed.group(1)) > 0:
        minutes = float(timed.group(1)) * (60 if timed.group(2) == "h" else 1)
        return ["--set", f"train.max_minutes={minutes:g}", "--set", "train.max_steps=0"]
    if budget.strip().isdigit() and int(budget) > 0:
        return ["--set", f"train.max_steps={int(budget)}", "--set", "train.max_minutes=0"]
    raise ValueError(f"--budget {budget}: use minutes like 20m, hours like 1.5h, or a number of steps like 3000")


def default_out(suite: str) -> Path:
    """Where a suite's report goes unless --out says: beside, never over, the committed comparison."""
    return Path("reports") / "local" / suite


def suite_configs(suite: str) -> list[Path]:
    """The suite's configs, GRU variants first, then Transformer variants, each in the order of ORDER."""
    known = sorted(p.name for p in (ROOT / "configs" / "compare").iterdir() if p.is_dir())
    folder = ROOT / "configs" / "compare" / suite
    configs = sorted(folder.glob("*.yaml")) if suite in known else []  # a name, never a path out of the folder
    if not configs:
        raise ValueError(f"{suite!r}: not a suite with configs under configs/compare/; suites: {', '.join(known)}")

    def rank(path: Path) -> tuple[int, str]:
        return next((i for i, tail in enumerate(ORDER) if path.stem.endswith(tail)), len(ORDER)), path.stem

    return sorted(configs, key=rank)


def last_error(log: Path) -> str:
    """The `error: ...` line nmt-train printed, else the log's last line."""
    lines = [ln.strip() for ln in log.read_text(encoding="utf-8", errors="replace").splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith("error:")]
    return (errors or lines or ["no output"])[-1]


def train(config: Path, overrides: list[str], logs: Path, restart: bool = False) -> dict:
    """Train (or resume) one config in a subprocess; a failure is written into the run folder.

    On Ctrl-C the training, which gets the same signal, is waited for while it saves last.pt; then the
    KeyboardInterrupt goes on.
    """
    try:
        run_dir = load_config(config, overrides[1::2]).run_dir
    except ConfigError:
        run_dir = Path("runs") / config.stem
    (run_dir / FAILED_NOTE).unlink(missing_ok=True)  # an earlier attempt's verdict
    log = logs / f"{config.stem}.log"
    start = time.monotonic()
    with log.open("w", encoding="utf-8") as handle:  # written as it goes, to follow a long run
        proc = subprocess.Popen([sys.executable, "-m", "nmt", "train", str(config), *overrides,
                                 *(["--restart"] if restart else [])], stdout=handle, stderr=subprocess.STDOUT)
        try:
            code = proc.wait()
        except KeyboardInterrupt:
            proc.wait()
            raise
    record = {"config": str(config), "run_dir": str(run_dir), "returncode": code,
              "seconds": round(time.monotonic() - start, 1), "log": str(log)}
    if code:
        record["error"] = last_error(log)
        with atomic_output(run_dir / FAILED_NOTE) as handle:
            handle.write(f"nmt-train exited with status {code}: {record['error']} (log: {log})\n")
    return record


def archive(run_dir: Path, out: Path) -> None:
    """Copy the files a comparison reads (all but the checkpoints) to out/runs/<run name>/, removing those the
    run no longer has (a failed rerun leaves no earlier report beside its failure note)."""
    target = out / "runs" / run_dir.name
    target.mkdir(parents=True, exist_ok=True)
    for name in RUN_FILES:
        if (run_dir / name).exists():
            with atomic_output(target / name, "wb") as handle:
                handle.write((run_dir / name).read_bytes())
        else:
            (target / name).unlink(missing_ok=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("suite", help="folder under configs/compare/ (sample, multi30k)")
    parser.add_argument("--budget", help="same budget for every run: 20m, 1.5h (time) or 3000 (steps)")
    parser.add_argument("--baseline", action="append", default=[],
                        help="run its family is tested against, once per family (default: GRU additive, "
                             "Transformer full)")
    parser.add_argument("--out", type=Path, help="report folder (default: reports/local/<suite>; the committed "
                                                 "reports/multi30k is written only when named here)")
    parser.add_argument("--restart", action="store_true", help="train every run from scratch, deleting its "
                                                               "checkpoints (default: resume existing runs)")
    args = parser.parse_args(argv)
    try:
        overrides = budget_overrides(args.budget)
        configs = suite_configs(args.suite)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    out = args.out or default_out(args.suite)
    if out.exists() and not out.is_dir():
        print(f"error: --out {out}: is a file; give a folder", file=sys.stderr)
        return 2
    try:
        return run_suite(args, configs, overrides, out)
    except KeyboardInterrupt:
        print("\ninterrupted: each run saved its last.pt; run the same command again to go on", file=sys.stderr)
        return 130


def run_suite(args: argparse.Namespace, configs: list[Path], overrides: list[str], out: Path) -> int:
    """Train every config, archive what each run gives, write suite.json and run nmt-compare."""
    logs = out / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    records = []
    for number, config in enumerate(configs, 1):
        print(f"[{number}/{len(configs)}] training {config.stem} ...", end=" ", flush=True)
        records.append(train(config, overrides, logs, args.restart))
        rec = records[-1]
        archive(Path(rec["run_dir"]), out)
        print(f"ok ({rec['seconds']:.0f} s)" if not rec["returncode"] else f"FAILED: {rec['error']}", flush=True)
    summary = {"suite": args.suite, "budget": args.budget, "overrides": overrides[1::2],
               "restart": args.restart, "runs": records, "train_seconds": round(time.monotonic() - start, 1),
               "machine": machine_info(torch.device("cpu"))}
    with atomic_output(out / "suite.json") as handle:
        handle.write(json.dumps(summary, indent=2) + "\n")
    code = compare_main([*(r["run_dir"] for r in records), "--suite", args.suite, "--out", str(out)]
                        + [flag for name in args.baseline for flag in ("--baseline", name)])
    failed = sum(1 for r in records if r["returncode"])
    print(f"suite {args.suite}: {len(records) - failed} of {len(records)} runs trained, "
          f"{time.monotonic() - start:.0f} s in all; report in {out}")
    return code


if __name__ == "__main__":
    sys.exit(main())
