"""Large-corpus benchmark: nmt-prepare on N synthetic pairs, then a short training run on them.

For each N, a corpus of N pairs is made from the Multi30k training sentences (seeded; every line joins two
random pairs, so lines are mostly unique and about as long as WMT sentences) in a work folder outside the
repository. Measured, each as a separate process tree sampled every 0.1 s (the preparation's worker pool
included): `nmt-prepare` wall time, pairs/s and peak memory; `nmt-train` for a few updates on the prepared
corpus: peak memory and the time from start to the first logged update; and the same model trained on
Multi30k for comparison. Peak memory is given as the sum of the processes' resident set sizes (RSS: shared
pages counted in every process) and of their proportional set sizes (PSS: shared pages split between them).
Writes benchmarks/results/data_<N>_cpu.json and the table in docs/data.md. Memory in MiB (2**20 bytes).

    python -m benchmarks.large_corpus [--pairs 1000000 5000000] [--steps 10] [--set tokenizer.sample_pairs=200000]
    python -m benchmarks.large_corpus --report-only
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import random
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from benchmarks.common import RESULTS, ROOT, arguments, command_line, cpu_model, prog, replace_block, table_header
from nmt.config import DataConfig
from nmt.data import fetch_multi30k, read_pair
from nmt.run.folder import RunDir

MODULE = "benchmarks.large_corpus"
README = ROOT / "docs" / "data.md"
START, END = "<!-- data:start -->", "<!-- data:end -->"
CONFIG = ROOT / "configs" / "multi30k_transformer.yaml"
BIN = Path(sys.executable).parent
TARGETS = {"prepare_s": 240, "prepare_gb": 1.5, "train_rss_ratio": 1.25, "first_update_s": 30, "scaling": 0.8}


# ---------------------------------------------------------------------------------------------- measuring


def _tree(root: int) -> list[int]:
    """The process and all its descendants."""
    pids, todo = [], [root]
    while todo:
        pid = todo.pop()
        pids.append(pid)
        try:
            for task in Path(f"/proc/{pid}/task").iterdir():
                todo += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            pass
    return pids


def _memory_kb(pid: int) -> tuple[int, int]:
    """(RSS, PSS) of one process in kB; zeros when it has gone."""
    rss = pss = 0
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1])
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                pss = int(line.split()[1])
    except (OSError, ValueError):
        pass
    return rss, pss


def run_measured(cmd: list[str], first_update: Path | None = None) -> dict:
    """Run `cmd`, sampling its process tree's memory; with `first_update`, when that file first has a line."""
    peak = {"rss": 0, "pss": 0, "processes": 0}
    seen: dict[str, float] = {}
    start = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    output: list[str] = []
    reader = threading.Thread(target=lambda: output.extend(proc.stdout), daemon=True)
    reader.start()
    while proc.poll() is None:
        pids = _tree(proc.pid)
        mem = [_memory_kb(p) for p in pids]
        peak["rss"] = max(peak["rss"], sum(m[0] for m in mem))
        peak["pss"] = max(peak["pss"], sum(m[1] for m in mem))
        peak["processes"] = max(peak["processes"], len(pids))
        if first_update and "first" not in seen and first_update.is_file() and first_update.stat().st_size:
            seen["first"] = time.monotonic() - start
        time.sleep(0.1)
    wall = time.monotonic() - start
    reader.join()
    if proc.returncode:
        raise SystemExit(f"{shlex.join(cmd)} failed ({proc.returncode}):\n{''.join(output[-30:])}")
    result = {"seconds": round(wall, 1), "peak_rss_mb": round(peak["rss"] / 1024),
              "peak_pss_mb": round(peak["pss"] / 1024), "processes": peak["processes"],
              "output_tail": "".join(output[-12:])}
    if first_update:
        result["first_update_s"] = round(seen["first"], 1) if "first" in seen else None
    return result


# ---------------------------------------------------------------------------------------------- corpus


def make_corpus(n: int, seed: int, folder: Path) -> tuple[Path, Path]:
    """N pairs, each two random Multi30k training pairs joined by a space (seeded: the same N, the same files)."""
    src, tgt = folder / f"corpus_{n}_seed{seed}.de", folder / f"corpus_{n}_seed{seed}.en"
    if src.is_file() and tgt.is_file():
        return src, tgt
    files = fetch_multi30k(DataConfig(dataset="multi30k"), log=lambda _m: None)
    de, en = read_pair(*files["train"])
    rng = random.Random(seed)
    folder.mkdir(parents=True, exist_ok=True)
    tmp_src, tmp_tgt = src.with_suffix(".de.part"), tgt.with_suffix(".en.part")
    with open(tmp_src, "w", encoding="utf-8") as fs, open(tmp_tgt, "w", encoding="utf-8") as ft:
        for _ in range(n):
            i, j = rng.randrange(len(de)), rng.randrange(len(de))
            fs.write(f"{de[i]} {de[j]}\n")
            ft.write(f"{en[i]} {en[j]}\n")
    tmp_src.replace(src)
    tmp_tgt.replace(tgt)
    return src, tgt


# ---------------------------------------------------------------------------------------------- runs


def _sets(pairs: dict[str, object]) -> list[str]:
    return [a for k, v in pairs.items() for a in ("--set", f"{k}={v}")]


def bench(n: int, args: argparse.Namespace, work: Path, baseline: dict | None) -> dict:
    src, tgt = make_corpus(n, args.seed, work)
    files = fetch_multi30k(DataConfig(dataset="multi30k"), log=lambda _m: None)
    cache = work / f"cache_{n}"
    shutil.rmtree(cache, ignore_errors=True)
    data = {"data.dataset": "files", "data.train_src": src, "data.train_tgt": tgt,
            "data.val_src": files["val"][0], "data.val_tgt": files["val"][1], "data.cache_dir": cache,
            "run_root": work / "runs", "name": f"bench_data_{n}"}
    extra = [a for s in args.set for a in ("--set", s)]
    prep_cmd = [str(BIN / "nmt-prepare"), str(CONFIG), *_sets(data), *extra]
    print(f"== {n:,} pairs: {shlex.join(prep_cmd)}", flush=True)
    prep = run_measured(prep_cmd)
    prep["pairs_per_s"] = round(n / prep["seconds"])
    print(f"   prepared in {prep['seconds']} s, peak RSS {prep['peak_rss_mb']} MB, PSS {prep['peak_pss_mb']} MB",
          flush=True)
    train = train_run(data, args, work, f"bench_data_{n}")
    print(f"   training: first update after {train['first_update_s']} s, peak RSS {train['peak_rss_mb']} MB",
          flush=True)
    return {"pairs": n, "corpus_bytes": src.stat().st_size + tgt.stat().st_size, "prepare": prep, "train": train,
            "baseline_multi30k": baseline}


def train_run(data: dict, args: argparse.Namespace, work: Path, name: str) -> dict:
    run = work / "runs" / name
    shutil.rmtree(run, ignore_errors=True)
    settings = data | {"name": name, "run_root": work / "runs", "train.max_steps": args.steps, "train.max_epochs": 0,
                       "train.log_every": 1, "train.eval_every": 10**9, "train.eval_bleu": "false"}
    cmd = [str(BIN / "nmt-train"), str(CONFIG), "--no-evaluate", "--restart", *_sets(settings),
           *[a for s in args.set for a in ("--set", s)]]
    result = run_measured(cmd, first_update=RunDir(run).metrics)
    result["command"] = shlex.join(cmd)
    return result


def machine() -> str:
    return f"{cpu_model()} ({len(os.sched_getaffinity(0))} cores)"


# ---------------------------------------------------------------------------------------------- report


def _mark(ok: bool) -> str:
    return "yes" if ok else "**no**"


def report(results: Path = RESULTS) -> str:
    runs = sorted((json.loads(p.read_text()) for p in results.glob("data_*_cpu.json")), key=lambda r: r["pairs"])
    if not runs:
        return f"No results yet: run `python -m {MODULE}`.\n"
    lines = table_header(["pairs", "prepare s", "pairs/s", "peak RSS MiB (sum)", "peak PSS MiB", "train peak RSS MiB",
                          "Multi30k train peak RSS MiB", "ratio", "first update s"], "r" * 9)
    for r in runs:
        p, t, b = r["prepare"], r["train"], r["baseline_multi30k"]
        ratio = t["peak_rss_mb"] / b["peak_rss_mb"]
        lines.append(f"| {r['pairs']:,} | {p['seconds']} | {p['pairs_per_s']:,} | {p['peak_rss_mb']:,} | "
                     f"{p['peak_pss_mb']:,} | {t['peak_rss_mb']:,} | {b['peak_rss_mb']:,} | {ratio:.2f} | "
                     f"{t['first_update_s']} |")
    lines.append("")
    big, small = runs[-1], runs[0]
    p, t, b = big["prepare"], big["train"], big["baseline_multi30k"]
    scaling = big["prepare"]["pairs_per_s"] / small["prepare"]["pairs_per_s"]
    lines += [f"Targets at {big['pairs']:,} pairs:",
              f"- prepared in <= {TARGETS['prepare_s']} s: {p['seconds']} s, "
              f"{_mark(p['seconds'] <= TARGETS['prepare_s'])}",
              f"- peak memory <= {TARGETS['prepare_gb']} GiB: RSS sum {p['peak_rss_mb']:,} MiB, "
              f"{_mark(p['peak_rss_mb'] <= TARGETS['prepare_gb'] * 1024)}; PSS sum {p['peak_pss_mb']:,} MiB, "
              f"{_mark(p['peak_pss_mb'] <= TARGETS['prepare_gb'] * 1024)}",
              f"- training peak RSS <= {TARGETS['train_rss_ratio']}x Multi30k's: "
              f"{t['peak_rss_mb'] / b['peak_rss_mb']:.2f}x, "
              f"{_mark(t['peak_rss_mb'] <= TARGETS['train_rss_ratio'] * b['peak_rss_mb'])}",
              f"- first update within {TARGETS['first_update_s']} s: {t['first_update_s']} s, "
              f"{_mark((t['first_update_s'] or 1e9) <= TARGETS['first_update_s'])}",
              (f"- pairs/s at {big['pairs']:,} no less than 0.8x that at {small['pairs']:,} (linear or better): "
               f"{scaling:.2f}x, "
               f"{_mark(scaling >= TARGETS['scaling'])}" if len(runs) > 1 else
               "- pairs/s scaling: not measured (results for one corpus size only)"), ""]
    for r in runs:
        note = f" {r['note']}" if r.get("note") else ""
        lines.append(f"- `data_{r['pairs']}_cpu.json`: {r['date']}, {r['machine']}: `{r['command']}`.{note}")
    return "\n".join(lines) + "\n"


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog=prog(MODULE), description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, nargs="+", default=[1_000_000, 5_000_000])
    parser.add_argument("--steps", type=int, default=10, help="updates of each training run")
    parser.add_argument("--seed", type=int, default=1, help="seed of the synthetic corpus")
    parser.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "nmt_bench_data",
                        help="folder for corpora, caches and runs (outside the repository)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="config override for preparation and training, e.g. tokenizer.sample_pairs=200000")
    parser.add_argument("--note", default="", help="a remark kept with the results, e.g. on the machine's load")
    parser.add_argument("--report-only", action="store_true", help="only rewrite the README table")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(arguments(argv))
    if not args.report_only:
        command = command_line(MODULE, arguments(argv))
        files = fetch_multi30k(DataConfig(dataset="multi30k"), log=lambda _m: None)
        base = {"data.dataset": "multi30k", "data.cache_dir": args.work / "cache_multi30k"}
        print("== Multi30k baseline training", flush=True)
        baseline = train_run(base, args, args.work, "bench_data_multi30k")
        baseline["pairs"] = len(read_pair(*files["train"])[0])
        for n in args.pairs:
            result = bench(n, args, args.work, baseline)
            result.update(date=datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
                          machine=machine(), command=command, overrides=args.set, note=args.note)
            RESULTS.mkdir(parents=True, exist_ok=True)
            (RESULTS / f"data_{n}_cpu.json").write_text(json.dumps(result, indent=1, default=str) + "\n")
    replace_block(README, START, END, report())
    print(report())
    return 0


if __name__ == "__main__":
    sys.exit(main())
