"""Train every attention variant of a suite, then compare them: `make compare SUITE=sample [BUDGET=20m|3000]`.

The report goes to --out, by default reports/local/<suite> (git ignores it): the committed comparison,
reports/multi30k, is rewritten only when --out names it (`make compare SUITE=multi30k OUT=reports/multi30k`).
Each config in configs/compare/<suite>/ (or only those named by --only) is trained by `nmt-train` in its own
subprocess (its output goes to <out>/logs/<name>.log); a run that fails is recorded and the suite goes on. A run
folder that exists is resumed, never deleted: a suite stopped by Ctrl-C goes on where it stopped when it is run
again, and a finished run is only evaluated again (--restart trains every run from scratch instead). A finished
run is then decoded on the dataset's further test sets (Multi30k: test2017, mscoco2017, test2018) and its attention
diagnosed (attention.json), and the files a report is made from (test reports, translations, metrics log,
config, attention.json) are copied to <out>/runs/<name>/, so they can be committed without the checkpoints.
`nmt-compare` (its function, in this process) then compares those copies, of the runs trained now and of the
suite's runs copied there before: the variants of a suite may be trained in different sessions (--only), and
--only with no name trains nothing and rebuilds the report. BUDGET gives every run the same limit: `20m` (or
`1.5h`) sets train.max_minutes, a whole number sets train.max_steps (the committed Multi30k configs set
max_steps); `--set KEY=VALUE` (make's SET) adds any other override to every run, as nmt-train's --set does.
suite.json records the budget and overrides, each run's exit status and time, and the machine of each.
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

import torch

from benchmarks.common import ROOT, code_commit, machine_info
from nmt.api import evaluate
from nmt.cli import compare_main
from nmt.compare import ATTENTION_RECORD, FAILED_NOTE, attention_record, load_run, run_files, test_sources
from nmt.config import VARIANTS, ModelConfig, load_config, parse_overrides
from nmt.data import evaluation_splits
from nmt.diagnostics import DIAG_SENTENCES, HEATMAPS, Thresholds
from nmt.errors import ConfigError
from nmt.evaluation import write_report
from nmt.fileio import atomic_output
from nmt.flops import RNN_ATTENTION_FLOPS
from nmt.run.folder import RunDir


def variant_order() -> tuple[str, ...]:
    """The config-name tails of every attention variant in suite order: the GRU attentions from the cheapest
    (none) to the costliest (additive), then the Transformer self-attentions in nmt.config.VARIANTS' order."""
    model = ModelConfig()
    gru = sorted(VARIANTS["rnn"], key=lambda name: RNN_ATTENTION_FLOPS[name](model, 16, 16))  # stable on a tie
    return (*(f"gru_{name}" for name in gru), *(f"transformer_{name}" for name in VARIANTS["self"]))


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

    return sorted(configs, key=_rank)


def _rank(path: Path) -> tuple[int, str]:
    """A config's place in a suite: by the ORDER of its variant, then by name."""
    return next((i for i, tail in enumerate(ORDER) if path.stem.endswith(tail)), len(ORDER)), path.stem


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
        run_dir = load_config(config, parse_overrides(overrides[1::2])).run_dir
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


def further_test_sets(run_dir: Path) -> list[str]:
    """The test sets of the run's dataset besides `test` (Multi30k: test2017, mscoco2017, test2018)."""
    cfg = load_config(RunDir(run_dir).config)
    return [split for split in evaluation_splits(cfg) if split not in ("train", "val", "test")]


def target_language(run_dir: Path) -> str:
    """The language the run translates into, named by its translations' files."""
    return load_config(RunDir(run_dir).config).data.languages[1]


def complete(run_dir: Path) -> None:
    """What a comparison reads of a finished run besides nmt-train's test report: its reports and translations of
    the further test sets (with the settings stored in its final model), and its attention record."""
    for split in further_test_sets(run_dir):
        report = evaluate(run_dir, split=split)
        report["command"] = shlex.join(["nmt-evaluate", str(run_dir), "--split", split])  # the same, from a shell
        write_report(report, report.pop("hypotheses"), RunDir(run_dir).report(split),
                     RunDir(run_dir).hypotheses(split, target_language(run_dir)))
    run = load_run(run_dir)
    record = attention_record(run, test_sources(run.cfg), torch.device("cpu"), DIAG_SENTENCES, HEATMAPS,
                              Thresholds())
    with atomic_output(run_dir / ATTENTION_RECORD) as handle:
        json.dump(record, handle)


def archive(run_dir: Path, out: Path) -> None:
    """Copy the files a comparison reads (all but the checkpoints) to out/runs/<run name>/, removing those the
    run no longer has (a failed rerun leaves no earlier report beside its failure note)."""
    target = out / "runs" / run_dir.name
    target.mkdir(parents=True, exist_ok=True)
    tests = [name for split in further_test_sets(run_dir) if (run_dir / RunDir.report_name(split)).exists()
             for name in (RunDir.report_name(split), RunDir.hypotheses_name(split, target_language(run_dir)))
             ] if run_dir.is_dir() else []
    for name in {*run_files(run_dir), *tests, *(p.name for p in target.glob("eval_*.json")),
                 *(p.name for p in target.glob("*.hyp.*"))}:
        if (run_dir / name).exists():
            with atomic_output(target / name, "wb") as handle:
                handle.write((run_dir / name).read_bytes())
        else:
            (target / name).unlink(missing_ok=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("suite", help="folder under configs/compare/ (sample, multi30k)")
    parser.add_argument("--budget", help="same budget for every run: 20m, 1.5h (time) or 3000 (steps)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", dest="settings",
                        help="a config override for every run, as nmt-train's --set (e.g. train.threads=1)")
    parser.add_argument("--baseline", action="append", default=[],
                        help="run its family is tested against, once per family (default: GRU additive, "
                             "Transformer full)")
    parser.add_argument("--out", type=Path, help="report folder (default: reports/local/<suite>; the committed "
                                                 "reports/multi30k is written only when named here)")
    parser.add_argument("--restart", action="store_true", help="train every run from scratch, deleting its "
                                                               "checkpoints (default: resume existing runs)")
    parser.add_argument("--only", nargs="*", help="train only these configs (names without .yaml; none: train "
                                                  "nothing and rebuild the report from the runs copied before)")
    args = parser.parse_args(argv)
    try:
        overrides = budget_overrides(args.budget) + [arg for item in args.settings for arg in ("--set", item)]
        parse_overrides(overrides[1::2])
        configs = suite_configs(args.suite)
        names = [config.stem for config in configs]
        unknown = [name for name in args.only or [] if name not in names]
        if unknown:
            raise ValueError(f"--only {unknown[0]}: not a config of suite {args.suite} ({', '.join(names)})")
    except ValueError as err:  # ConfigError included
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
    """Train the chosen configs, complete and copy what each run gives, write suite.json, and run nmt-compare on
    the copies of every run of the suite that has one."""
    logs = out / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    only = getattr(args, "only", None)
    chosen = [c for c in configs if only is None or c.stem in only]
    machine = {**machine_info(torch.device("cpu")), "commit": code_commit()}
    records = []
    for number, config in enumerate(chosen, 1):
        print(f"[{number}/{len(chosen)}] training {config.stem} ...", end=" ", flush=True)
        records.append(train(config, overrides, logs, args.restart))
        rec = records[-1]
        if not rec["returncode"]:
            complete(Path(rec["run_dir"]))
        archive(Path(rec["run_dir"]), out)
        rec["machine"] = machine
        print(f"ok ({rec['seconds']:.0f} s)" if not rec["returncode"] else f"FAILED: {rec['error']}", flush=True)
    earlier = _earlier_records(out / "suite.json", {Path(r["config"]).stem for r in records})
    summary = {"suite": args.suite, "budget": args.budget, "overrides": overrides[1::2],
               "restart": args.restart, "runs": sorted(earlier + records, key=lambda r: _rank(Path(r["config"]))),
               "train_seconds": round(sum(r["seconds"] for r in earlier + records), 1),
               "machine": machine_info(torch.device("cpu"))}
    with atomic_output(out / "suite.json") as handle:
        handle.write(json.dumps(summary, indent=2) + "\n")
    copies = [out / "runs" / Path(r["run_dir"]).name for r in summary["runs"]]
    code = compare_main([*map(str, copies), "--suite", args.suite, "--out", str(out)]
                        + [flag for name in args.baseline for flag in ("--baseline", name)])
    failed = sum(1 for r in records if r["returncode"])
    print(f"suite {args.suite}: {len(records) - failed} of {len(records)} runs trained now, {len(copies)} compared, "
          f"{time.monotonic() - start:.0f} s in all; report in {out}")
    return code


def _earlier_records(path: Path, trained: set[str]) -> list[dict]:
    """The records of suite.json for the runs not trained this time whose copies are still there."""
    if not path.is_file():
        return []
    try:
        runs = json.loads(path.read_text(encoding="utf-8")).get("runs", [])
    except ValueError:
        return []
    return [r for r in runs if Path(r["config"]).stem not in trained
            and (path.parent / "runs" / Path(r["run_dir"]).name).is_dir()]


if __name__ == "__main__":
    sys.exit(main())
